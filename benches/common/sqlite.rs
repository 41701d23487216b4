//! The demo registrations in SQLite, the peer of the SQL benchmarks.

use tablesql::demo::registration;

/// The first `rows` demo registrations in SQLite, keyed as in the store (in
/// memory, like the store's pages once cached).
pub fn copy(rows: u64) -> rusqlite::Connection {
    let db = rusqlite::Connection::open_in_memory().expect("sqlite");
    db.execute_batch(
        "CREATE TABLE registrations (event TEXT NOT NULL, distance TEXT NOT NULL, bib INTEGER NOT NULL, \
         name TEXT NOT NULL, gender TEXT NOT NULL, age INTEGER NOT NULL, finish INTEGER, \
         registered TEXT, club TEXT, PRIMARY KEY (event, distance, bib)) WITHOUT ROWID",
    )
    .expect("schema");
    let tx = db.unchecked_transaction().expect("tx");
    {
        let mut insert = tx
            .prepare("INSERT INTO registrations VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)")
            .expect("prepare");
        for i in 0..rows {
            let r = registration(i);
            insert
                .execute(rusqlite::params![
                    r.event,
                    r.distance,
                    r.bib,
                    r.name,
                    r.gender,
                    r.age,
                    r.finish_seconds,
                    r.registered.to_rfc3339(),
                    r.club
                ])
                .expect("insert");
        }
    }
    tx.commit().expect("commit");
    db
}
