//! Writes between clients: ETags, savepoints, prepared upserts, and COMMIT
//! against a concurrent change.

use super::*;

/// Optimistic concurrency as Table Storage clients know it: a row read with
/// its `_etag`, changed by another client, is not overwritten by an UPDATE
/// that names the stale ETag (40001); with the fresh ETag it is. The UPDATE
/// is a prepared statement whose parameter types are inferred.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etag_conflict_between_two_clients() -> TestResult {
    let server = serve(1000, &[])?;
    let (a, b) = (server.connect().await?, server.connect().await?);
    let r = demo::registration(5);
    let key = "event = $1 AND distance = $2 AND bib = $3";
    let read = a
        .prepare(&format!(
            "SELECT finish, _etag FROM registrations WHERE {key}"
        ))
        .await?;
    let row = a.query_one(&read, &[&r.event, &r.distance, &r.bib]).await?;
    let (finish, etag): (i64, String) = (row.get(0), row.get(1));

    let changed = b
        .execute(
            &format!("UPDATE registrations SET finish = finish + 1 WHERE {key}"),
            &[&r.event, &r.distance, &r.bib],
        )
        .await?;
    assert_eq!(changed, 1);

    let write = a
        .prepare(&format!(
            "UPDATE registrations SET finish = $4 WHERE {key} AND _etag = $5"
        ))
        .await?;
    assert_eq!(
        write.params(),
        &[
            tokio_postgres::types::Type::TEXT,
            tokio_postgres::types::Type::TEXT,
            tokio_postgres::types::Type::INT4,
            tokio_postgres::types::Type::INT8,
            tokio_postgres::types::Type::TEXT,
        ]
    );
    let e = a
        .execute(
            &write,
            &[&r.event, &r.distance, &r.bib, &(finish + 100), &etag],
        )
        .await
        .err()
        .ok_or("a stale ETag was accepted")?;
    assert_eq!(code(&e), "40001", "{e:?}");

    let row = a.query_one(&read, &[&r.event, &r.distance, &r.bib]).await?;
    let (now, fresh): (i64, String) = (row.get(0), row.get(1));
    assert_eq!(now, finish + 1, "b's change stands");
    assert_ne!(fresh, etag);
    let n = a
        .execute(
            &write,
            &[&r.event, &r.distance, &r.bib, &(finish + 100), &fresh],
        )
        .await?;
    assert_eq!(n, 1);
    let row = a.query_one(&read, &[&r.event, &r.distance, &r.bib]).await?;
    assert_eq!(row.get::<_, i64>(0), finish + 100);
    Ok(())
}

/// Savepoints inside a transaction block, over both protocols: names on a
/// stack (marks in the write buffer: see savepoints_mark_the_write_buffer), checked as PostgreSQL
/// checks them; `ROLLBACK TO` makes a failed transaction usable again.
#[tokio::test]
async fn savepoints_in_a_transaction_block() -> TestResult {
    let server = serve(1000, &[])?;
    let out = server.psql(
        "",
        &[
            "-v",
            "ON_ERROR_STOP=0",
            "-c",
            "SAVEPOINT outside",
            "-c",
            "BEGIN; SAVEPOINT a; SELECT 1 AS one; SAVEPOINT b; RELEASE SAVEPOINT b; RELEASE a; COMMIT",
            // One statement a message: an error skips the rest of its message.
            "-c",
            "BEGIN",
            "-c",
            "SAVEPOINT a",
            "-c",
            "ROLLBACK TO SAVEPOINT a",
            "-c",
            "SELECT 2 AS two",
            "-c",
            "RELEASE nosuch",
            // Failed: refused until ROLLBACK TO clears the error.
            "-c",
            "SELECT 3 AS refused",
            "-c",
            "ROLLBACK TO nosuch",
            "-c",
            "SELECT 3 AS refused_still",
            "-c",
            "ROLLBACK TO SAVEPOINT a",
            "-c",
            "SELECT 4 AS four",
            "-c",
            "ROLLBACK",
        ],
    )?;
    let shown = text(&out);
    assert!(
        shown.contains("SAVEPOINT can only be used in transaction blocks"),
        "{shown}"
    );
    assert!(shown.contains("two") && shown.contains("COMMIT"), "{shown}");
    assert!(
        shown.contains("savepoint \"nosuch\" does not exist"),
        "{shown}"
    );
    assert_eq!(
        shown
            .matches("current transaction is aborted, commands ignored")
            .count(),
        2,
        "{shown}"
    );
    assert!(!shown.contains("refused"), "{shown}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        shown.contains("four") && stdout.trim_end().ends_with("ROLLBACK"),
        "{shown}"
    );
    // The extended protocol (tokio-postgres prepares every statement).
    let mut client = server.connect().await?;
    let mut tx = client.transaction().await?;
    tx.execute("SAVEPOINT s1", &[]).await?;
    let n: i64 = tx.query_one("SELECT count(*) FROM registrations WHERE event = '2012 Boston Marathon' AND distance = 'Full'", &[]).await?.get(0);
    assert!(n > 0);
    // tokio-postgres' own nested transaction is a savepoint.
    let inner = tx.savepoint("inner").await?;
    inner.rollback().await?;
    // A failed statement, cleared by ROLLBACK TO.
    let e = tx
        .query("SELECT * FROM nosuch", &[])
        .await
        .err()
        .ok_or("no error")?;
    assert_eq!(code(&e), "42P01");
    let e = tx
        .query("SELECT 1", &[])
        .await
        .err()
        .ok_or("ran in a failed transaction")?;
    assert_eq!(code(&e), "25P02");
    tx.execute("ROLLBACK TO SAVEPOINT s1", &[]).await?;
    let one: i32 = tx.query_one("SELECT 1::INT", &[]).await?.get(0);
    assert_eq!(one, 1);
    tx.execute("RELEASE SAVEPOINT s1", &[]).await?;
    let e = tx
        .execute("ROLLBACK TO SAVEPOINT s1", &[])
        .await
        .unwrap_err();
    assert_eq!(code(&e), "3B001");
    Ok(())
}

/// `INSERT ... ON CONFLICT` prepared with parameters, in its `DO UPDATE`
/// too: tokio-postgres binds by the types the server describes.
#[tokio::test]
async fn prepared_upserts_bind_every_parameter() -> TestResult {
    let server = serve(1000, &[])?;
    let client = server.connect().await?;
    client
        .batch_execute(
            "CREATE TABLE kv (k TEXT NOT NULL, id INT NOT NULL, v TEXT, n BIGINT, PRIMARY KEY (k, id)) \
             WITH (storage_table = 'Keyvalues', partition_key = '{k}', row_key = '{id:05}')",
        )
        .await?;
    let upsert = "INSERT INTO kv (k, id, v, n) VALUES ($1, $2, $3, $4) \
                  ON CONFLICT (k, id) DO UPDATE SET v = EXCLUDED.v, n = kv.n + $5";
    for (v, n) in [("first", 1i64), ("second", 2)] {
        let written = client
            .execute(upsert, &[&"a", &7i32, &v, &n, &10i64])
            .await?;
        assert_eq!(written, 1);
    }
    let row = client
        .query_one("SELECT v, n FROM kv WHERE k = 'a' AND id = 7", &[])
        .await?;
    assert_eq!(row.get::<_, String>(0), "second");
    // Inserted with n = 1, then updated to 1 + 10.
    assert_eq!(row.get::<_, i64>(1), 11);
    let skipped = client
        .execute(
            "INSERT INTO kv (k, id, v, n) VALUES ($1, $2, 'x', 0) ON CONFLICT DO NOTHING",
            &[&"a", &7i32],
        )
        .await?;
    assert_eq!(skipped, 0);
    Ok(())
}

/// Savepoints are marks in a transaction's write buffer (extended
/// protocol): `ROLLBACK TO` drops the writes after the mark, COMMIT applies
/// the rest at once, and a transaction past the 100 entities of one entity
/// group transaction commits whole.
#[tokio::test]
async fn savepoints_mark_the_write_buffer() -> TestResult {
    let server = serve(1000, &[])?;
    let mut client = server.connect().await?;
    let insert = "INSERT INTO registrations (event, distance, bib, name, gender, age) VALUES ('Marks', '5K', $1, 'M', 'F', 30)";
    let count = "SELECT count(*) FROM registrations WHERE event = 'Marks' AND distance = '5K'";
    let tx = client.transaction().await?;
    tx.execute(insert, &[&1i32]).await?;
    tx.execute("SAVEPOINT a", &[]).await?;
    tx.execute(insert, &[&2i32]).await?;
    let inside: i64 = tx.query_one(count, &[]).await?.get(0);
    assert_eq!(inside, 2);
    tx.execute("ROLLBACK TO SAVEPOINT a", &[]).await?;
    tx.execute(insert, &[&3i32]).await?;
    tx.commit().await?;
    let bibs: Vec<i32> = client
        .query(
            "SELECT bib FROM registrations WHERE event = 'Marks' AND distance = '5K' ORDER BY bib",
            &[],
        )
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(bibs, [1, 3]);
    // Each registration is two entities (its index row): 51 rows are 102,
    // more than one entity group transaction holds; the block commits them
    // through its record of them (`exec::write::commit`), all of them.
    let tx = client.transaction().await?;
    for bib in 100..151i32 {
        tx.execute(insert, &[&bib]).await?;
    }
    tx.commit().await?;
    let after: i64 = client.query_one(count, &[]).await?.get(0);
    assert_eq!(after, 53, "bibs 1, 3 and 100 to 150");
    Ok(())
}

/// COMMIT writes If-Match the versions the transaction read: a row another
/// client changed meanwhile fails it (40001), nothing of it is written, and
/// the block has ended, as after a failed COMMIT in PostgreSQL.
#[tokio::test]
async fn a_commit_that_meets_a_concurrent_change_fails_and_ends_the_block() -> TestResult {
    let server = serve(1000, &[])?;
    let mut a = server.connect().await?;
    let b = server.connect().await?;
    let key = "event = 'Race' AND distance = '5K' AND bib = 1";
    b.execute("INSERT INTO registrations (event, distance, bib, name, gender, age) VALUES ('Race', '5K', 1, 'R', 'F', 30)", &[]).await?;
    let tx = a.transaction().await?;
    tx.execute(
        &format!("UPDATE registrations SET club = 'A' WHERE {key}"),
        &[],
    )
    .await?;
    b.execute(
        &format!("UPDATE registrations SET club = 'B' WHERE {key}"),
        &[],
    )
    .await?;
    let e = tx
        .commit()
        .await
        .err()
        .ok_or("the COMMIT overwrote B's change")?;
    assert_eq!(e.code().map(|c| c.code()), Some("40001"), "{e:?}");
    // Idle again: the next statement runs without a ROLLBACK first.
    let club: String = a
        .query_one(&format!("SELECT club FROM registrations WHERE {key}"), &[])
        .await?
        .get(0);
    assert_eq!(club, "B");
    Ok(())
}
