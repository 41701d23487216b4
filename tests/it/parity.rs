//! The same statement answers the same in every front end: the library
//! (`Engine`), `tablesql query`, `tablesql shell -f` and the wire server
//! (tokio-postgres). Each runs over its own copy of the demo store.
//!
//! What is pinned so far: statements that would create an object only one
//! process remembers are refused by all four with the engine's one message
//! (SQLSTATE 0A000 over the wire), nothing is left behind, and a plain query
//! answers the same rows, with psql's footer in the two text front ends.

use std::process::Command;

use tablesql::{Engine, EngineError};
use tokio_postgres::SimpleQueryMessage;

use crate::server::serve;
use crate::shell::{store_copy, tablesql};

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// Statements refused everywhere, with a phrase of the refusal.
const REFUSED: [(&str, &str); 5] = [
    (
        "CREATE TABLE plain (x INT)",
        "tablesql tables live in the store",
    ),
    (
        "CREATE TABLE copied AS SELECT 1 AS x",
        "tablesql tables live in the store",
    ),
    (
        "CREATE VIEW v AS SELECT 1 AS x",
        "CREATE VIEW is not supported",
    ),
    (
        "CREATE OR REPLACE VIEW v AS SELECT 1 AS x",
        "CREATE VIEW is not supported",
    ),
    (
        "CREATE SCHEMA s",
        "CREATE SCHEMA and CREATE DATABASE are not supported",
    ),
];

/// Queries of what the refused statements would have created: each fails.
const GONE: [&str; 3] = [
    "SELECT * FROM plain",
    "SELECT * FROM copied",
    "SELECT * FROM v",
];

/// What a text front end printed: success and stdout, or stderr.
fn run(cmd: &mut Command) -> Result<Result<String, String>, std::io::Error> {
    let out = cmd.output()?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    Ok(if out.status.success() {
        Ok(stdout)
    } else {
        Err(stderr)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_memory_objects_are_refused_alike_by_every_front_end() -> TestResult {
    // The library.
    let lib_store = store_copy()?;
    let location = tablesql::storage::StoreLocation::Embedded(lib_store.path().to_owned());
    let engine = Engine::open(&location).await?;
    for (sql, says) in REFUSED {
        match engine.sql(sql).await {
            Err(EngineError::NotSupported(why)) => assert!(why.contains(says), "{sql}: {why}"),
            other => panic!("{sql}: the library answered {other:?}"),
        }
    }
    for sql in GONE {
        assert!(engine.sql(sql).await.is_err(), "{sql} found something");
    }

    // `tablesql query` and `tablesql shell -f`, psql's error form.
    let cli_store = store_copy()?;
    let shell_store = store_copy()?;
    let script_dir = tempfile::tempdir()?;
    for (sql, says) in REFUSED {
        let query = run(tablesql(cli_store.path()).args(["query", sql]))?;
        let script = script_dir.path().join("one.sql");
        std::fs::write(&script, format!("{sql};\n"))?;
        let shell = run(tablesql(shell_store.path())
            .args(["shell", "-f"])
            .arg(&script))?;
        for (front, answer) in [("query", query), ("shell", shell)] {
            let err = answer.err().unwrap_or_else(|| panic!("{front} ran {sql}"));
            assert!(
                err.starts_with("ERROR:  ") && err.contains(says),
                "{front}, {sql}: {err}"
            );
        }
    }
    for sql in GONE {
        let query = run(tablesql(cli_store.path()).args(["query", sql]))?;
        assert!(query.is_err(), "query found something: {sql}");
    }

    // The wire.
    let served = serve(1000, &[])?;
    let client = served.connect().await?;
    for (sql, says) in REFUSED {
        let e = client
            .simple_query(sql)
            .await
            .err()
            .unwrap_or_else(|| panic!("the server ran {sql}"));
        let db = e.as_db_error().ok_or("no database error")?;
        assert_eq!(db.code().code(), "0A000", "{sql}: {db:?}");
        assert!(db.message().contains(says), "{sql}: {}", db.message());
    }
    for sql in GONE {
        assert!(
            client.simple_query(sql).await.is_err(),
            "{sql} found something"
        );
    }

    // A plain query: the same rows everywhere, psql's footer in text.
    let sql = "SELECT 1 AS one, 'a' AS letter";
    let batches = engine.collect(sql).await?;
    assert_eq!(batches.iter().map(|b| b.num_rows()).sum::<usize>(), 1);
    let rows: Vec<_> = client
        .simple_query(sql)
        .await?
        .into_iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(r) => {
                Some((r.get(0).map(str::to_owned), r.get(1).map(str::to_owned)))
            }
            _ => None,
        })
        .collect();
    assert_eq!(rows, [(Some("1".into()), Some("a".into()))]);
    let printed = run(tablesql(cli_store.path()).args(["query", sql]))?
        .map_err(|e| format!("query failed: {e}"))?;
    assert!(printed.ends_with("(1 row)\n"), "{printed}");
    let csv = run(tablesql(cli_store.path()).args(["query", "--format", "csv", sql]))?
        .map_err(|e| format!("query failed: {e}"))?;
    assert_eq!(csv, "one,letter\n1,a\n");
    Ok(())
}
