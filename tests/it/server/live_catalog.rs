//! Two `tablesql serve` processes over one Azurite account: what one creates
//! or defines anew, the other plans with at its next statement once the
//! catalog check (1 s by default) is due, without a restart.

use super::*;

/// How long the other server may take: its check interval, with room for a
/// loaded machine.
const WITHIN: Duration = Duration::from_secs(30);

/// Runs `sql` on `client` until `done` accepts the outcome, for at most
/// `WITHIN`; returns how long that took.
async fn until<F>(client: &Client, sql: &str, done: F) -> Result<Duration, String>
where
    F: Fn(&Result<Vec<SimpleQueryMessage>, tokio_postgres::Error>) -> bool,
{
    let started = Instant::now();
    let mut deadline = crate::wait::Deadline::new(WITHIN, format!("{sql} to answer as expected"));
    loop {
        let outcome = client.simple_query(sql).await;
        if done(&outcome) {
            return Ok(started.elapsed());
        }
        deadline.again_async(format!("{outcome:?}")).await?;
    }
}

fn count_of(outcome: &Result<Vec<SimpleQueryMessage>, tokio_postgres::Error>) -> Option<String> {
    outcome.as_ref().ok()?.iter().find_map(|m| match m {
        SimpleQueryMessage::Row(row) => row.get(0).map(str::to_owned),
        _ => None,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_created_through_one_server_is_queryable_through_another() -> TestResult {
    let account = crate::azurite::fresh_account()?;
    let store = crate::azurite::store_argument(&account);
    let one = serve_store(tempfile::tempdir()?, store.as_ref(), &[])?;
    let other = serve_store(tempfile::tempdir()?, store.as_ref(), &[])?;
    let (a, b) = (one.connect().await?, other.connect().await?);
    // The other server has started and planned before the table exists.
    let missing = b.simple_query("SELECT count(*) FROM readings").await;
    assert_eq!(
        missing.err().and_then(|e| e.code().cloned()),
        Some(tokio_postgres::error::SqlState::UNDEFINED_TABLE)
    );

    a.batch_execute(
        "CREATE TABLE readings (sensor TEXT NOT NULL, at INT NOT NULL, v DOUBLE, \
         PRIMARY KEY (sensor, at)) WITH (partition_key = '{sensor}', row_key = '{at:08}'); \
         INSERT INTO readings (sensor, at, v) VALUES ('s1', 1, 0.5), ('s1', 2, 1.5), ('s2', 1, 2.5)",
    )
    .await?;
    let took = until(
        &b,
        "SELECT count(*) FROM readings WHERE sensor = 's1'",
        |o| count_of(o).as_deref() == Some("2"),
    )
    .await?;
    eprintln!("the other server planned with the new table after {took:?}");
    // A prepared statement on the other server follows too.
    let by_sensor = b
        .prepare("SELECT count(*) FROM readings WHERE sensor = $1")
        .await?;
    let row = b.query_one(&by_sensor, &[&"s2"]).await?;
    assert_eq!(row.get::<_, i64>(0), 1);

    // A write prepared on the other server before the table is defined
    // again; run after, it writes under the new definition.
    let insert = b
        .prepare("INSERT INTO readings (sensor, at, v) VALUES ($1, $2, $3)")
        .await?;
    // Dropped and defined again through one (a new column, a new RowKey
    // template): the other plans with the new definition.
    a.batch_execute(
        "DROP TABLE readings; \
         CREATE TABLE readings (sensor TEXT NOT NULL, at INT NOT NULL, v DOUBLE, unit TEXT, \
         PRIMARY KEY (sensor, at)) WITH (partition_key = '{sensor}', row_key = 'R:{at:08}'); \
         INSERT INTO readings (sensor, at, v, unit) VALUES ('s3', 1, 9.5, 'kPa')",
    )
    .await?;
    until(
        &b,
        "SELECT unit FROM readings WHERE sensor = 's3' AND at = 1",
        |o| count_of(o).as_deref() == Some("kPa"),
    )
    .await?;
    b.execute(&insert, &[&"s4", &9i32, &1.5f64]).await?;
    let stored = a
        .query_one("SELECT \"RowKey\" FROM readings WHERE sensor = 's4'", &[])
        .await?;
    assert_eq!(stored.get::<_, String>(0), "R:00000009");
    Ok(())
}

/// Plain tables (PostgreSQL's DDL, the default mapping) live in the store
/// as mapped ones do: created through one server, a second server over the
/// same account plans with them; after both have stopped, a new process
/// (`tablesql query`) finds them with their rows, the shell's and the
/// library's creations too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_tables_outlive_every_process_and_reach_every_server() -> TestResult {
    let account = crate::azurite::fresh_account()?;
    let store = crate::azurite::store_argument(&account);
    {
        let one = serve_store(tempfile::tempdir()?, store.as_ref(), &[])?;
        let other = serve_store(tempfile::tempdir()?, store.as_ref(), &[])?;
        let (a, b) = (one.connect().await?, other.connect().await?);
        a.batch_execute(
            "CREATE TABLE members (id SERIAL PRIMARY KEY, name TEXT NOT NULL); \
             INSERT INTO members (name) VALUES ('ann'), ('bob'); \
             CREATE TABLE notes (body TEXT); \
             ALTER TABLE members ADD COLUMN email TEXT; \
             CREATE VIEW named AS SELECT name FROM members WHERE id = 2; \
             UPDATE members SET email = 'bob@example.com' WHERE id = 2",
        )
        .await?;
        let took = until(&b, "SELECT count(*) FROM members WHERE id = 2", |o| {
            count_of(o).as_deref() == Some("1")
        })
        .await?;
        eprintln!("the other server planned with the plain table after {took:?}");
        b.batch_execute("INSERT INTO notes VALUES ('from the other server')")
            .await?;
    }
    // The shell, then the library, each in a process of its own.
    let script = tempfile::tempdir()?;
    let file = script.path().join("tags.sql");
    std::fs::write(
        &file,
        "CREATE TABLE tags (tag TEXT PRIMARY KEY);\nINSERT INTO tags VALUES ('x');\n",
    )?;
    let shell = tablesql()
        .arg("--store")
        .arg(&store)
        .args(["shell", "-f"])
        .arg(&file)
        .output()?;
    assert!(
        shell.status.success(),
        "{}",
        String::from_utf8_lossy(&shell.stderr)
    );
    {
        let location: tablesql::storage::StoreLocation = store.to_string().parse()?;
        let engine = tablesql::Engine::open(&location).await?.session();
        engine
            .collect("CREATE TABLE marks (who TEXT, score INT, PRIMARY KEY (who, score))")
            .await?;
        engine
            .collect("INSERT INTO marks VALUES ('ann', 3)")
            .await?;
    }
    // Everything, after every process that made it has stopped.
    let out = tablesql()
        .arg("--store")
        .arg(&store)
        .args([
            "query",
            "--format",
            "csv",
            "SELECT (SELECT string_agg(name, ',' ORDER BY id) FROM members) AS members, \
             (SELECT count(*) FROM notes) AS notes, (SELECT count(*) FROM tags) AS tags, \
             (SELECT sum(score) FROM marks) AS marks, \
             (SELECT email FROM members WHERE id = 2) AS email, \
             (SELECT name FROM named) AS named",
        ])
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        text,
        "members,notes,tags,marks,email,named\n\"ann,bob\",1,1,3,bob@example.com,bob\n"
    );
    Ok(())
}
