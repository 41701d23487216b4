//! The same statement answers the same in every front end: the library
//! (`Engine`), `tablesql query`, `tablesql shell -f` and the wire server
//! (tokio-postgres). Each runs over its own copy of the demo store.
//!
//! Pinned here: one script of statements (DDL, writes, transaction blocks
//! with savepoints and failures, SET and SHOW, sequences, EXPLAIN, refusals,
//! syntax errors) answers alike through the library's `Session`, the real
//! `psql` and tokio-postgres over the wire, `tablesql shell -f` and
//! `tablesql query`: the same rows, the same command tag, the same SQLSTATE
//! class. And statements that would create an object only one process
//! remembers are refused by all with the engine's one message.

use std::io::Read;
use std::process::Command;

use futures::StreamExt;
use tablesql::datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
use tablesql::{Engine, EngineError, Outcome};
use tokio_postgres::SimpleQueryMessage;

use crate::server::{psql, serve, serve_store};
use crate::shell::{store_copy, tablesql};

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// Statements refused everywhere, with a phrase of the refusal.
const REFUSED: [(&str, &str); 1] = [(
    "CREATE SCHEMA s",
    "CREATE SCHEMA and CREATE DATABASE are not supported",
)];

/// Queries of what the refused statements would have created: each fails.
const GONE: [&str; 1] = ["SELECT * FROM s.t"];

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
    let engine = Engine::open(&location).await?.session();
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

/// The script every front end runs, one statement per entry, each in a
/// fresh copy of the same store.
const SCRIPT: &[&str] = &[
    "CREATE TABLE acct (shop TEXT NOT NULL, id INT NOT NULL, qty INT NOT NULL, PRIMARY KEY (shop, id)) WITH (storage_table = 'Acct', partition_key = '{shop}', row_key = 'ID:{id:05}', index_qty = 'QTY:{qty:05}__{id}')",
    "CREATE TABLE acct (shop TEXT NOT NULL, id INT NOT NULL, PRIMARY KEY (shop, id)) WITH (storage_table = 'Acct2', partition_key = '{shop}', row_key = '{id:05}')",
    "CREATE TABLE IF NOT EXISTS acct (shop TEXT NOT NULL, id INT NOT NULL, PRIMARY KEY (shop, id)) WITH (storage_table = 'Acct2', partition_key = '{shop}', row_key = '{id:05}')",
    "INSERT INTO acct (shop, id, qty) VALUES ('a', 1, 10), ('a', 2, 20), ('b', 1, 5)",
    "INSERT INTO acct (shop, id, qty) VALUES ('a', 1, 99)",
    "SELECT shop, id, qty FROM acct ORDER BY shop, id",
    "UPDATE acct SET qty = qty + 1 WHERE shop = 'a' AND id = 1",
    "DELETE FROM acct WHERE shop = 'b' AND id = 1",
    "SELECT count(*) AS n FROM acct",
    "SELECT id FROM acct WHERE shop = 'a' AND qty = 11",
    // A block that commits, with a savepoint returned to and released.
    "BEGIN",
    "INSERT INTO acct (shop, id, qty) VALUES ('a', 3, 30)",
    "SELECT count(*) AS n FROM acct WHERE shop = 'a'",
    "SAVEPOINT s1",
    "UPDATE acct SET qty = 0 WHERE shop = 'a' AND id = 3",
    "ROLLBACK TO s1",
    "SELECT qty FROM acct WHERE shop = 'a' AND id = 3",
    "RELEASE s1",
    "COMMIT",
    "SELECT count(*) AS n FROM acct",
    // A block failed by a query: nothing runs but its end, which rolls back.
    "BEGIN",
    "INSERT INTO acct (shop, id, qty) VALUES ('a', 4, 40)",
    "SELECT 1 / 0 AS x",
    "SELECT 1 AS one",
    "COMMIT",
    "SELECT count(*) AS n FROM acct WHERE shop = 'a' AND id = 4",
    // A failure undone by ROLLBACK TO: the block goes on and commits.
    "BEGIN",
    "SAVEPOINT s2",
    "SELECT * FROM missing_table",
    "ROLLBACK TO SAVEPOINT s2",
    "INSERT INTO acct (shop, id, qty) VALUES ('a', 5, 50)",
    "COMMIT",
    "SELECT id, qty FROM acct WHERE shop = 'a' ORDER BY id",
    // A block over two partitions commits both; one failed by a write
    // (a duplicate key) writes nothing.
    "BEGIN",
    "INSERT INTO acct (shop, id, qty) VALUES ('a', 6, 60)",
    "INSERT INTO acct (shop, id, qty) VALUES ('b', 6, 60)",
    "COMMIT",
    "SELECT count(*) AS n FROM acct WHERE id = 6",
    "BEGIN",
    "INSERT INTO acct (shop, id, qty) VALUES ('b', 9, 90)",
    "INSERT INTO acct (shop, id, qty) VALUES ('a', 6, 61)",
    "COMMIT",
    "SELECT count(*) AS n FROM acct WHERE id = 9",
    // A block failed by a statement that does not parse.
    "BEGIN",
    "INSERT INTO acct (shop, id, qty) VALUES ('a', 7, 70)",
    "SELEC oops",
    "COMMIT",
    "SELECT count(*) AS n FROM acct WHERE id = 7",
    // Savepoints outside a block; an end without one.
    "SAVEPOINT nowhere",
    "RELEASE SAVEPOINT nowhere",
    "ROLLBACK TO nowhere",
    "COMMIT",
    // Catalog DDL inside a block: after its writes, refused.
    "BEGIN",
    "INSERT INTO acct (shop, id, qty) VALUES ('a', 8, 80)",
    "DROP TABLE acct",
    "ROLLBACK",
    // Before them, it runs (and ROLLBACK does not undo it).
    "BEGIN",
    "CREATE SEQUENCE in_block",
    "ROLLBACK",
    "SELECT nextval('in_block') AS n",
    "DROP SEQUENCE in_block",
    // Sequences.
    "CREATE SEQUENCE tickets",
    "SELECT nextval('tickets') AS n",
    "SELECT nextval('tickets') AS n",
    "SELECT currval('tickets') AS n",
    "CREATE SEQUENCE tickets",
    "DROP SEQUENCE tickets",
    "DROP SEQUENCE IF EXISTS tickets",
    // Settings.
    "SET tablesql.scan_policy = 'allow'",
    "SHOW tablesql.scan_policy",
    "SHOW tablesql.no_such_setting",
    // PostgreSQL's session parameters.
    "SET application_name = 'parity'",
    "SHOW application_name",
    "SELECT current_setting('application_name') AS app",
    "SET statement_timeout = '5s'",
    "SHOW statement_timeout",
    "SET statement_timeout = 'soon'",
    "SET server_version = '1'",
    "SHOW no_such_parameter",
    "SHOW TRANSACTION ISOLATION LEVEL",
    "SHOW datafusion.execution.batch_size",
    // EXPLAIN shows the access path.
    "EXPLAIN SELECT qty FROM acct WHERE shop = 'a' AND id = 1",
    // The demo's table, and expressions.
    "SELECT count(*) AS n FROM registrations",
    "SELECT 'a' || 'b' AS s, 2 + 3 AS n",
    "SELECT 1 AS a, 2 AS a",
    "VALUES (1, 'x'), (2, 'y')",
    // Plain tables: PostgreSQL's DDL, the default mapping, `*` without
    // the system columns (which stay selectable by name).
    "CREATE TABLE people (id SERIAL PRIMARY KEY, name VARCHAR(20) NOT NULL, age SMALLINT)",
    "INSERT INTO people (name, age) VALUES ('ann', 30), ('bob', NULL)",
    // RETURNING: the rows written, as every front end shows rows.
    "INSERT INTO people (name, age) VALUES ('cy', 22) RETURNING id, name",
    "UPDATE people SET age = age + 1 WHERE id = 3 RETURNING age",
    "DELETE FROM people WHERE id = 3 RETURNING *",
    "SELECT * FROM people ORDER BY id",
    "SELECT p.*, \"PartitionKey\" AS pk FROM people p WHERE id = 1",
    "CREATE TABLE people_copy (id INT PRIMARY KEY, name TEXT, age INT)",
    "INSERT INTO people_copy SELECT * FROM people",
    "SELECT * FROM people_copy ORDER BY id",
    "SELECT * FROM people a JOIN people_copy b ON a.id = b.id ORDER BY a.id",
    "SHOW CREATE TABLE people",
    "ALTER TABLE people_copy ADD COLUMN note TEXT",
    "SELECT * FROM people_copy WHERE id = 1",
    "ALTER TABLE people_copy DROP COLUMN id",
    "TRUNCATE people_copy",
    "SELECT count(*) AS n FROM people_copy",
    "DROP TABLE people_copy",
    // CREATE TABLE ... AS SELECT: a plain table of the query's columns.
    "CREATE TABLE people_too AS SELECT name, age FROM people WHERE age IS NOT NULL",
    "SELECT * FROM people_too",
    "DROP TABLE people_too",
    "CREATE TABLE plain (x INT)",
    // Refused: objects that would live in one process's memory.
    "CREATE VIEW v AS SELECT * FROM people WHERE id = 1",
    "SELECT * FROM v",
    "DROP VIEW v",
    "CREATE SCHEMA s",
    // Syntax and name errors.
    "SELEC 1",
    "SELECT * FROM acct WHERE",
    "SELECT nope FROM acct",
    "DROP TABLE IF EXISTS never_was",
    "DROP TABLE acct",
    "SELECT count(*) AS n FROM acct",
];

/// What one statement answered, as every front end can tell it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Answer {
    /// A header, then rows, each value as text (NULL as empty).
    Rows(Vec<Vec<String>>),
    /// A command tag.
    Tag(String),
    /// An error's SQLSTATE class (its first two characters).
    Error(String),
}

impl Answer {
    /// What tokio-postgres tells of an answer: a tag's row count only.
    fn counted(&self) -> Answer {
        match self {
            Answer::Tag(tag) => Answer::Tag(
                tag.rsplit(' ')
                    .next()
                    .and_then(|n| n.parse::<u64>().ok())
                    .unwrap_or(0)
                    .to_string(),
            ),
            other => other.clone(),
        }
    }
}

fn class(code: &str) -> Answer {
    Answer::Error(code.chars().take(2).collect())
}

/// The library: one `Session`, statement by statement.
async fn library(store: &std::path::Path) -> Result<Vec<Answer>, Box<dyn std::error::Error>> {
    let location = tablesql::storage::StoreLocation::Embedded(store.to_owned());
    let session = Engine::open(&location).await?.session();
    let mut answers = Vec::new();
    for sql in SCRIPT {
        let answer = match session.execute_sql(sql).await {
            Ok(Outcome::Rows(mut stream)) => {
                let schema = stream.schema();
                let mut rows = vec![schema.fields().iter().map(|f| f.name().clone()).collect()];
                let mut failed = None;
                while let Some(batch) = stream.next().await {
                    match batch {
                        Ok(batch) => rows.extend(text_rows(&batch)?),
                        Err(e) => {
                            failed = Some(EngineError::DataFusion(e).sqlstate());
                            break;
                        }
                    }
                }
                match failed {
                    Some(code) => class(code),
                    None => Answer::Rows(rows),
                }
            }
            Ok(outcome) => Answer::Tag(outcome.tag().ok_or("an outcome without a tag")?),
            Err(e) => class(e.sqlstate()),
        };
        answers.push(answer);
    }
    Ok(answers)
}

fn text_rows(
    batch: &tablesql::datafusion::arrow::record_batch::RecordBatch,
) -> Result<Vec<Vec<String>>, Box<dyn std::error::Error>> {
    let options = FormatOptions::default();
    let columns = batch
        .columns()
        .iter()
        .map(|c| ArrayFormatter::try_new(c.as_ref(), &options))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((0..batch.num_rows())
        .map(|row| columns.iter().map(|c| c.value(row).to_string()).collect())
        .collect())
}

/// tokio-postgres's simple protocol, statement by statement.
async fn wire(client: &tokio_postgres::Client) -> Vec<Answer> {
    let mut answers = Vec::new();
    for sql in SCRIPT {
        let answer = match client.simple_query(sql).await {
            Ok(messages) => {
                let mut rows: Option<Vec<Vec<String>>> = None;
                let mut count = 0;
                for m in messages {
                    match m {
                        SimpleQueryMessage::RowDescription(columns) => {
                            rows =
                                Some(vec![columns.iter().map(|c| c.name().to_owned()).collect()]);
                        }
                        SimpleQueryMessage::Row(row) => {
                            let values = (0..row.len())
                                .map(|i| row.get(i).unwrap_or_default().to_owned())
                                .collect();
                            rows.get_or_insert_with(Vec::new).push(values);
                        }
                        SimpleQueryMessage::CommandComplete(n) => count = n,
                        _ => {}
                    }
                }
                match rows {
                    Some(rows) => Answer::Rows(rows),
                    None => Answer::Tag(count.to_string()),
                }
            }
            Err(e) => match e.code() {
                Some(code) => class(code.code()),
                None => Answer::Error(format!("no SQLSTATE: {e}")),
            },
        };
        answers.push(answer);
    }
    answers
}

/// The script for psql and the shell: psql's variables to go on after an
/// error and show SQLSTATEs, and a marker before each statement.
fn script_text() -> String {
    let mut text = String::from("\\set ON_ERROR_STOP off\n\\set VERBOSITY verbose\n");
    for (i, sql) in SCRIPT.iter().enumerate() {
        text.push_str(&format!("\\echo @@ {i}\n{sql};\n"));
    }
    text
}

/// Runs a text front end with stdout and stderr on one pipe, so that each
/// error lands between its statement's markers.
fn merged(mut cmd: Command) -> Result<String, Box<dyn std::error::Error>> {
    let (mut reader, writer) = std::io::pipe()?;
    let mut child = cmd.stdout(writer.try_clone()?).stderr(writer).spawn()?;
    // The command keeps the pipe's writing ends: without dropping it the
    // read below would wait for ever.
    drop(cmd);
    let mut text = String::new();
    let read = reader.read_to_string(&mut text);
    child.wait()?;
    read?;
    Ok(text)
}

/// A text front end's output (`--csv` in psql's form), split at the
/// markers into one answer per statement.
fn parse_text(output: &str) -> Result<Vec<Answer>, String> {
    let mut chunks: Vec<Vec<&str>> = Vec::new();
    for line in output.lines() {
        if let Some(n) = line.strip_prefix("@@ ") {
            if n.parse::<usize>().ok() != Some(chunks.len()) {
                return Err(format!("marker {n} out of order in:\n{output}"));
            }
            chunks.push(Vec::new());
        } else if let Some(chunk) = chunks.last_mut() {
            chunk.push(line);
        }
    }
    chunks.iter().map(|lines| answer_of(lines)).collect()
}

fn answer_of(lines: &[&str]) -> Result<Answer, String> {
    let mut kept = Vec::new();
    for line in lines {
        // psql -f puts `psql:FILE:LINE: ` before its messages.
        let bare = match line.find("ERROR:  ") {
            Some(at) if line.starts_with("psql:") || at == 0 => &line[at..],
            _ => line,
        };
        if let Some(rest) = bare.strip_prefix("ERROR:  ") {
            return Ok(class(rest));
        }
        let said = [
            "NOTICE:",
            "WARNING:",
            "DETAIL:",
            "HINT:",
            "LOCATION:",
            "LINE ",
        ];
        if said.iter().any(|p| bare.contains(p)) || bare.trim().trim_start_matches('^').is_empty() {
            continue;
        }
        kept.push(*line);
    }
    let tag = |l: &str| {
        !l.is_empty()
            && l.chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == ' ')
    };
    // psql prints a RETURNING write's tag after its rows, as for PostgreSQL.
    let write_tag = |l: &str| {
        let mut words = l.split(' ');
        matches!(words.next(), Some("INSERT" | "UPDATE" | "DELETE"))
            && words.all(|w| !w.is_empty() && w.chars().all(|c| c.is_ascii_digit()))
    };
    if kept.len() > 1 && kept.last().is_some_and(|l| write_tag(l)) {
        kept.pop();
    }
    match kept.as_slice() {
        [one] if tag(one) => Ok(Answer::Tag((*one).to_owned())),
        [] => Err(format!("no answer in {lines:?}")),
        _ => Ok(Answer::Rows(csv_rows(&kept.join("\n")))),
    }
}

/// Rows of CSV text: quoted values may hold commas, quotes and newlines.
fn csv_rows(text: &str) -> Vec<Vec<String>> {
    let (mut rows, mut row, mut value) = (Vec::new(), Vec::new(), String::new());
    let mut chars = text.chars().peekable();
    let mut quoted = false;
    while let Some(c) = chars.next() {
        match (quoted, c) {
            (true, '"') if chars.peek() == Some(&'"') => {
                value.push('"');
                chars.next();
            }
            (true, '"') => quoted = false,
            (true, c) => value.push(c),
            (false, '"') => quoted = true,
            (false, ',') => row.push(std::mem::take(&mut value)),
            (false, '\n') => {
                row.push(std::mem::take(&mut value));
                rows.push(std::mem::take(&mut row));
            }
            (false, c) => value.push(c),
        }
    }
    row.push(value);
    rows.push(row);
    rows
}

/// Where two front ends' answers differ, as lines naming the statement.
fn differences(name: &str, expected: &[Answer], got: &[Answer]) -> Vec<String> {
    let mut found = Vec::new();
    if expected.len() != got.len() {
        found.push(format!(
            "{name}: {} answers for {} statements",
            got.len(),
            expected.len()
        ));
    }
    for (i, (e, g)) in expected.iter().zip(got).enumerate() {
        if e != g {
            found.push(format!(
                "{name}, statement {i} `{}`:\n  library {e:?}\n  {name} {g:?}",
                SCRIPT[i]
            ));
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_script_answers_alike_in_every_front_end() -> TestResult {
    assert!(
        SCRIPT.len() >= 60,
        "the script is the issue's 60 statements at least"
    );
    let script_dir = tempfile::tempdir()?;
    let script = script_dir.path().join("parity.sql");
    std::fs::write(&script, script_text())?;

    let lib_store = store_copy()?;
    let expected = library(lib_store.path()).await?;
    // The script means something: every kind of answer is in it.
    assert!(expected.iter().any(|a| matches!(a, Answer::Rows(_))));
    assert!(expected.contains(&Answer::Tag("ROLLBACK".into())));
    for code in ["25", "42", "0A", "22", "23"] {
        assert!(
            expected.contains(&class(code)),
            "no error of class {code}: {expected:?}"
        );
    }
    // `*` is the table's own columns; INSERT ... SELECT * fits its copy.
    let answer = |sql: &str| {
        let at = SCRIPT
            .iter()
            .position(|s| *s == sql)
            .expect("in the script");
        expected[at].clone()
    };
    assert_eq!(
        answer("SELECT 1 AS a, 2 AS a"),
        Answer::Rows(vec![
            vec!["a".to_owned(), "a".into()],
            vec!["1".into(), "2".into()]
        ])
    );
    let people = vec![
        vec!["id".to_owned(), "name".into(), "age".into()],
        vec!["1".into(), "ann".into(), "30".into()],
        vec!["2".into(), "bob".into(), String::new()],
    ];
    assert_eq!(
        answer("SELECT * FROM people ORDER BY id"),
        Answer::Rows(people.clone())
    );
    assert_eq!(
        answer("SELECT * FROM people_copy ORDER BY id"),
        Answer::Rows(people)
    );
    assert_eq!(
        answer("INSERT INTO people (name, age) VALUES ('cy', 22) RETURNING id, name"),
        Answer::Rows(vec![
            vec!["id".to_owned(), "name".into()],
            vec!["3".into(), "cy".into()]
        ])
    );
    assert_eq!(
        answer("DELETE FROM people WHERE id = 3 RETURNING *"),
        Answer::Rows(vec![
            vec!["id".to_owned(), "name".into(), "age".into()],
            vec!["3".into(), "cy".into(), "23".into()]
        ])
    );
    match answer("SELECT * FROM people a JOIN people_copy b ON a.id = b.id ORDER BY a.id") {
        Answer::Rows(rows) => assert_eq!(rows[0], ["id", "name", "age", "id", "name", "age"]),
        other => panic!("the join answered {other:?}"),
    }
    match answer("SELECT p.*, \"PartitionKey\" AS pk FROM people p WHERE id = 1") {
        Answer::Rows(rows) => assert_eq!(rows[0], ["id", "name", "age", "pk"]),
        other => panic!("p.* answered {other:?}"),
    }

    let mut found = Vec::new();
    let shell_store = store_copy()?;
    let mut shell = tablesql(shell_store.path());
    shell.args(["shell", "--format", "csv", "-f"]).arg(&script);
    let shell = merged(shell)?;
    found.extend(differences("shell -f", &expected, &parse_text(&shell)?));

    let query_store = store_copy()?;
    let mut query = tablesql(query_store.path());
    query.args(["query", "--format", "csv"]).arg(script_text());
    let query = merged(query)?;
    found.extend(differences("query", &expected, &parse_text(&query)?));

    let served = serve(1000, &[])?;
    let client = served.connect().await?;
    let counted: Vec<Answer> = expected.iter().map(Answer::counted).collect();
    found.extend(differences(
        "tokio-postgres",
        &counted,
        &wire(&client).await,
    ));
    drop(client);

    // psql in a server of its own, over a fresh copy.
    let psql_dir = tempfile::tempdir()?;
    let psql_store = store_copy()?;
    let psql_served = serve_store(psql_dir, psql_store.path().as_os_str(), &[])?;
    let mut psql_cmd = Command::new(psql());
    psql_cmd
        .args(["-X", "--csv", "-d", &psql_served.conninfo("tablesql"), "-f"])
        .arg(&script)
        .env("PGCONNECT_TIMEOUT", "10");
    let psql_out = merged(psql_cmd)?;
    found.extend(differences("psql", &expected, &parse_text(&psql_out)?));

    assert!(found.is_empty(), "{}", found.join("\n"));
    Ok(())
}
