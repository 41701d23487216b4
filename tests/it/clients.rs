//! The client matrix: the drivers and tools users reach a Postgres with,
//! each run for real against `tablesql serve` with a plain connection (no
//! option, no workaround), each checked against what tokio-postgres reads
//! from the same server with the same SQL.
//!
//! - SQLAlchemy 2.1.9 over psycopg 3.3.9 and over psycopg2 2.9.13: the
//!   inspector, a reflected `Table`'s select, a bound query, `pandas.read_sql`
//!   (pandas 3.1.1);
//! - asyncpg 0.32.0: prepared statements, a cursor in a transaction, its
//!   type introspection (an array result), binary COPY of records into a
//!   table, COPY of a query with arguments;
//! - connectorx 0.4.6 (binary COPY, CSV, partitioned), polars 2.1.0 over
//!   connectorx and ADBC, ADBC's PostgreSQL driver 1.13.0 with a bound
//!   parameter and `adbc_ingest` (CREATE TABLE and binary COPY in one
//!   block, then an append) (`arrow_readers.py`);
//! - node-postgres 8.23.1 with pg-cursor 2.22.0: a parameterised query, a
//!   cursor, INSERT and UPDATE with RETURNING;
//! - an application's own tables: SQLAlchemy's ORM, Alembic 1.20.0, pandas'
//!   `to_sql`, psycopg's `executemany` (`sqlalchemy_orm.py`);
//! - pgJDBC 42.5.5 (Debian's): DatabaseMetaData as BI tools sync it, a
//!   prepared query read with a fetch size, timestamps.
//!
//! The clients are `tests/clients/*`, installed by `scripts/python-env`,
//! `scripts/node-clients` and `scripts/jdbc-client` (`scripts/test` names
//! them in `TABLESQL_TEST_PYTHON`, `TABLESQL_TEST_NODE_MODULES` and
//! `TABLESQL_TEST_JDBC`).

use std::process::Command;

use serde_json::{Value, json};
use tokio_postgres::Client;
use tokio_postgres::types::ToSql;

use crate::server::serve;

type TestResult = Result<(), Box<dyn std::error::Error>>;

pub(crate) fn env(name: &str) -> Result<String, String> {
    std::env::var(name).map_err(|_| format!("{name} is not set: run the tests with ./scripts/test"))
}

pub(crate) fn client_file(name: &str) -> String {
    format!("{}/tests/clients/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// Runs a client to the end (bounded: each connects to one local server and
/// runs a fixed script); its standard output.
pub(crate) fn run(mut command: Command) -> Result<String, Box<dyn std::error::Error>> {
    let out = command.output()?;
    let stdout = String::from_utf8(out.stdout)?;
    if !out.status.success() {
        return Err(format!(
            "{command:?} failed: {}\n{stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        )
        .into());
    }
    Ok(stdout)
}

/// The rows of a query as JSON values, column by column as text, i32, i64
/// or f64, for comparison with what a client printed.
async fn rows(
    client: &Client,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<Vec<Vec<Value>>, Box<dyn std::error::Error>> {
    use tokio_postgres::types::Type;
    let mut out = Vec::new();
    for row in client.query(sql, params).await? {
        let mut values = Vec::new();
        for (i, column) in row.columns().iter().enumerate() {
            values.push(match *column.type_() {
                Type::INT4 => json!(row.get::<_, Option<i32>>(i)),
                Type::INT8 => json!(row.get::<_, Option<i64>>(i)),
                Type::FLOAT8 => json!(row.get::<_, Option<f64>>(i)),
                _ => json!(row.get::<_, Option<String>>(i)),
            });
        }
        out.push(values);
    }
    Ok(out)
}

/// `registered` as epoch milliseconds, as the clients print timestamps.
const EPOCH_MS: &str = "CAST(date_part('epoch', registered) * 1000 AS BIGINT)";

fn sqlalchemy(driver: &str) -> TestResult {
    let server = serve(1000, &[])?;
    let mut command = Command::new(env("TABLESQL_TEST_PYTHON")?);
    command.args([
        &client_file("sqlalchemy_client.py"),
        driver,
        &server.addr.port().to_string(),
        "tablesql",
        "tablesql",
    ]);
    let out: Value = serde_json::from_str(&run(command)?)?;
    assert_eq!(out["sqlalchemy"], "2.1.9", "{out}");
    // The dialect parsed the version it picks its catalog queries by.
    assert_eq!(out["server_version_info"], json!([16, 6]), "{out}");
    // Each table once, though `raw` holds a table of each name too.
    assert_eq!(out["tables"], json!(["events", "registrations"]), "{out}");
    assert_eq!(out["schemas"], json!(["public", "raw"]), "{out}");
    // The workload statistics, views in `public` as `pg_stat_statements` is.
    let mut views: Vec<&str> = out["views"]
        .as_array()
        .ok_or("no views")?
        .iter()
        .filter_map(Value::as_str)
        .collect();
    views.sort_unstable();
    assert_eq!(
        views,
        [
            "tablesql_stat_partitions",
            "tablesql_stat_statements",
            "tablesql_stat_tables"
        ],
        "{out}"
    );
    let columns = out["columns"].as_array().ok_or("no columns")?;
    let declared: Vec<Value> = columns.iter().take(9).cloned().collect();
    assert_eq!(
        declared,
        [
            ("event", "TEXT", false),
            ("distance", "TEXT", false),
            ("bib", "INTEGER", false),
            ("name", "TEXT", false),
            ("gender", "TEXT", false),
            ("age", "INTEGER", false),
            ("finish", "BIGINT", true),
            ("registered", "TIMESTAMP", true),
            ("club", "TEXT", true),
        ]
        .iter()
        .map(|(n, t, nullable)| json!({"name": n, "type": t, "nullable": nullable}))
        .collect::<Vec<_>>(),
        "{out}"
    );
    assert_eq!(
        out["pk"]["constrained_columns"],
        json!(["event", "distance", "bib"]),
        "{out}"
    );
    assert_eq!(out["pk"]["name"], "registrations_pkey", "{out}");
    assert_eq!(
        out["indexes"],
        json!([{"name": "age", "columns": ["age", "bib", "name", "gender"], "unique": false}]),
        "{out}"
    );
    assert_eq!(out["foreign_keys"], json!([]), "{out}");

    let client = block_on(server.connect())?;
    let expected = block_on(rows(
        &client,
        "SELECT bib, name, age FROM registrations WHERE age >= $1 \
         ORDER BY event, distance, bib LIMIT 3",
        &[&60i32],
    ))?;
    assert_eq!(out["reflected_select"], json!(expected), "{out}");
    let expected = block_on(rows(
        &client,
        "SELECT name FROM registrations WHERE bib = $1 ORDER BY event, distance",
        &[&7i32],
    ))?;
    assert_eq!(out["bound"], json!(expected), "{out}");
    let expected = block_on(rows(&client, "SELECT count(*) FROM registrations", &[]))?;
    assert_eq!(out["count"], expected[0][0], "{out}");
    let groups = block_on(rows(
        &client,
        "SELECT gender, count(*), avg(age) FROM registrations GROUP BY gender ORDER BY gender",
        &[],
    ))?;
    let frame = out["pandas"]["rows"].as_array().ok_or("no frame")?;
    assert_eq!(out["pandas"]["columns"], json!(["gender", "n", "mean_age"]));
    assert_eq!(frame.len(), groups.len(), "{out}");
    for (got, want) in frame.iter().zip(&groups) {
        assert_eq!(got[0], want[0], "{out}");
        assert_eq!(got[1], json!(want[1].to_string()), "{out}");
        let mean: f64 = got[2].as_str().ok_or("mean")?.parse()?;
        assert!(
            (mean - want[2].as_f64().ok_or("avg")?).abs() < 1e-9,
            "{out}"
        );
    }
    Ok(())
}

#[test]
fn sqlalchemy_over_psycopg3_inspects_and_queries() -> TestResult {
    sqlalchemy("psycopg")
}

#[test]
fn sqlalchemy_over_psycopg2_inspects_and_queries() -> TestResult {
    sqlalchemy("psycopg2")
}

#[test]
fn asyncpg_prepares_iterates_a_cursor_introspects_types_and_copies() -> TestResult {
    let server = serve(1000, &[])?;
    let mut command = Command::new(env("TABLESQL_TEST_PYTHON")?);
    command.args([
        &client_file("asyncpg_client.py"),
        &server.addr.port().to_string(),
        "tablesql",
        "tablesql",
    ]);
    let out: Value = serde_json::from_str(&run(command)?)?;
    assert_eq!(out["asyncpg"], "0.32.0", "{out}");
    assert_eq!(out["server_version"], json!([16, 0]), "{out}");
    let client = block_on(server.connect())?;
    let mut prepared = Vec::new();
    for bib in [3i32, 5, 7] {
        prepared.extend(block_on(rows(
            &client,
            "SELECT name, age FROM registrations WHERE bib = $1 ORDER BY event, distance LIMIT 1",
            &[&bib],
        ))?);
    }
    assert_eq!(out["prepared"], json!(prepared), "{out}");
    assert_eq!(out["prepared_types"], json!(["text", "int4"]), "{out}");
    let cursor = block_on(rows(
        &client,
        &format!(
            "SELECT bib, {EPOCH_MS} FROM registrations WHERE age >= $1 \
             ORDER BY event, distance, bib LIMIT 8"
        ),
        &[&30i32],
    ))?;
    assert_eq!(out["cursor"], json!(cursor), "{out}");
    assert_eq!(out["array"], json!([1, 2, 3]), "{out}");
    assert_eq!(out["copy_in"], "COPY 2000", "{out}");
    assert_eq!(
        out["copied"],
        json!([
            [1, "2026-05-01T10:00:01+00:00", "0.25"],
            [2000, "2026-05-01T10:33:20+00:00", "500.00"]
        ]),
        "{out}"
    );
    assert_eq!(out["copy_out"], "COPY 3", "{out}");
    assert_eq!(out["copy_out_rows"], "1,a\n2,a\n3,a\n", "{out}");
    assert_eq!(out["copy_binary_in"], "COPY 2000", "{out}");
    assert_eq!(out["copy_binary_same"], 2000, "{out}");
    Ok(())
}

/// The Arrow readers read the same rows as tokio-postgres, whichever way
/// they move them: connectorx's binary COPY, CSV COPY and partitioned
/// queries, polars over connectorx and over ADBC, and ADBC with a bound
/// parameter.
#[test]
fn arrow_readers_read_the_same_rows_every_way() -> TestResult {
    let server = serve(1000, &[])?;
    let mut command = Command::new(env("TABLESQL_TEST_PYTHON")?);
    command.args([
        &client_file("arrow_readers.py"),
        &server.addr.port().to_string(),
    ]);
    let out: Value = serde_json::from_str(&run(command)?)?;
    assert_eq!(
        out["versions"],
        json!(["0.4.6", "2.1.0", "1.13.0"]),
        "{out}"
    );
    let client = block_on(server.connect())?;
    let sums = block_on(rows(
        &client,
        "SELECT count(*), sum(bib), sum(age) FROM registrations",
        &[],
    ))?;
    let want = &out["connectorx"];
    assert_eq!(
        json!([want["rows"], want["bibs"], want["ages"]]),
        json!(sums[0]),
        "{out}"
    );
    for way in [
        "connectorx_csv",
        "connectorx_partitioned",
        "polars_connectorx",
        "polars_adbc",
    ] {
        assert_eq!(&out[way], want, "{way}: {out}");
    }
    let bound = block_on(rows(
        &client,
        "SELECT name, age FROM registrations WHERE bib = $1 ORDER BY event, distance LIMIT 2",
        &[&3i32],
    ))?;
    assert_eq!(out["adbc_bound"], json!(bound), "{out}");
    assert_eq!(
        out["adbc_ingest"],
        json!({"created": 3, "appended": 1, "rows": [
            [1, "a", 1.5], [2, "b", null], [3, null, 2.5], [4, "a", 1.5]
        ]}),
        "{out}"
    );
    Ok(())
}

#[test]
fn node_postgres_binds_parameters_and_reads_a_cursor() -> TestResult {
    let server = serve(1000, &[])?;
    let mut command = Command::new("node");
    command
        .args([
            &client_file("node_client.js"),
            &server.addr.port().to_string(),
            "tablesql",
            "tablesql",
        ])
        .env("NODE_PATH", env("TABLESQL_TEST_NODE_MODULES")?);
    let out: Value = serde_json::from_str(&run(command)?)?;
    assert_eq!(out["pg"], "8.23.1", "{out}");
    assert_eq!(out["pg_cursor"], "2.22.0", "{out}");
    let client = block_on(server.connect())?;
    let expected: Vec<Value> = block_on(rows(
        &client,
        "SELECT name, age FROM registrations WHERE bib = $1 ORDER BY event, distance",
        &[&7i32],
    ))?
    .into_iter()
    .map(|r| json!({"name": r[0], "age": r[1]}))
    .collect();
    assert_eq!(out["parameterised"], json!(expected), "{out}");
    // text and int4, by their type oids.
    assert_eq!(out["fields"], json!([["name", 25], ["age", 23]]), "{out}");
    let cursor: Vec<Value> = block_on(rows(
        &client,
        "SELECT bib FROM registrations WHERE age >= $1 ORDER BY event, distance, bib LIMIT 6",
        &[&30i32],
    ))?
    .into_iter()
    .map(|r| r[0].clone())
    .collect();
    assert_eq!(out["cursor"], json!(cursor), "{out}");
    // node-postgres reads int8 as a string.
    assert_eq!(out["count"], "1000", "{out}");
    assert_eq!(
        out["returning"],
        json!({"command": "INSERT", "rowCount": 2,
               "rows": [{"id": 1, "title": "write"}, {"id": 2, "title": "test"}]}),
        "{out}"
    );
    assert_eq!(
        out["updated"],
        json!([{"id": 1, "title": "write", "done": true}]),
        "{out}"
    );
    Ok(())
}

/// An application's first hour, as a new user would write it
/// (`tests/clients/sqlalchemy_orm.py`): SQLAlchemy 2's ORM creates two
/// related tables, adds objects and commits (RETURNING their new ids,
/// across partitions in one transaction), queries, joins through a
/// relationship, updates and deletes; Alembic adds a column and an index;
/// pandas writes 10,000 rows with `to_sql(if_exists='replace')`, twice, and
/// reads them back equal; psycopg's `executemany` inserts, with RETURNING.
#[test]
fn an_orm_application_creates_and_uses_its_own_tables() -> TestResult {
    let server = serve(1000, &[])?;
    let mut command = Command::new(env("TABLESQL_TEST_PYTHON")?);
    command.args([
        &client_file("sqlalchemy_orm.py"),
        &server.addr.port().to_string(),
        "tablesql",
        "tablesql",
    ]);
    let out: Value = serde_json::from_str(&run(command)?)?;
    assert_eq!(out.get("failed"), None, "{out}");
    // The demo fixture's two tables, and the application's.
    assert_eq!(
        out["create_all"],
        json!(["authors", "books", "events", "registrations"]),
        "{out}"
    );
    assert_eq!(
        out["add_all"],
        json!({"authors": [1, 2], "books": [1, 2, 3]}),
        "{out}"
    );
    assert_eq!(
        out["query"],
        json!([["Third", 2001], ["Second", 1990]]),
        "{out}"
    );
    assert_eq!(
        out["join"],
        json!({"pairs": [["Ann", "First"], ["Ann", "Second"], ["Bo", "Third"]],
               "lazy": ["First", "Second"]}),
        "{out}"
    );
    assert_eq!(out["update"], json!(2002), "{out}");
    assert_eq!(out["delete"], json!(["Second", "Third"]), "{out}");
    assert_eq!(
        out["alembic"],
        json!({"columns": ["id", "name", "born", "rating"], "indexes": ["ix_books_title"],
               "rated": [["Ann", 5], ["Bo", null]], "by_title": [2002]}),
        "{out}"
    );
    assert_eq!(
        out["pandas"],
        json!({"rows": 10000, "equal": true}),
        "{out}"
    );
    assert_eq!(
        out["executemany"],
        json!({"count": 252, "returned": [251, 252]}),
        "{out}"
    );
    Ok(())
}

/// psycopg 3 in its default (non-autocommit) mode inserts, updates and
/// commits within one partition and across two; a rolled-back transaction
/// and a failed one leave nothing.
#[test]
fn psycopg_default_mode_commits_and_rolls_back() -> TestResult {
    let server = serve(1000, &[])?;
    let mut command = Command::new(env("TABLESQL_TEST_PYTHON")?);
    command.args([
        &client_file("psycopg_transactions.py"),
        &server.addr.port().to_string(),
        "tablesql",
        "tablesql",
    ]);
    let out: Value = serde_json::from_str(&run(command)?)?;
    assert_eq!(out["autocommit"], json!(false), "{out}");
    assert_eq!(out["update_rowcount"], json!(1), "{out}");
    assert_eq!(out["status_inside"], json!("INTRANS"), "{out}");
    assert_eq!(out["seen_inside"], json!(3), "{out}");
    assert_eq!(out["duplicate"], json!("23505"), "{out}");
    assert_eq!(
        out["rows"],
        json!([
            ["10K", 6, null],
            ["5K", 1, null],
            ["5K", 2, "Tx"],
            ["5K", 3, null],
            ["5K", 5, null]
        ]),
        "{out}"
    );
    Ok(())
}

#[test]
fn pgjdbc_metadata_as_bi_tools_sync_it() -> TestResult {
    let server = serve(1000, &[])?;
    let mut command = Command::new("java");
    command.args([
        "-cp",
        &env("TABLESQL_TEST_JDBC")?,
        &client_file("JdbcClient.java"),
        &server.addr.port().to_string(),
        "tablesql",
        "tablesql",
    ]);
    let stdout = run(command)?;
    let out: std::collections::HashMap<&str, &str> =
        stdout.lines().filter_map(|l| l.split_once('\t')).collect();
    let get = |k: &str| out.get(k).copied().unwrap_or("<missing>");
    assert_eq!(get("driver"), "42.5.5", "{stdout}");
    assert_eq!(get("product"), "PostgreSQL 16.6", "{stdout}");
    assert_eq!(get("catalogs"), "[tablesql]", "{stdout}");
    assert_eq!(get("schemas"), "[pg_catalog, public, raw]", "{stdout}");
    assert_eq!(
        get("tables"),
        "[public|events|TABLE, public|registrations|TABLE, \
         public|tablesql_stat_partitions|VIEW, public|tablesql_stat_statements|VIEW, \
         public|tablesql_stat_tables|VIEW]",
        "{stdout}"
    );
    assert!(
        get("columns").starts_with("[event|text|12|NO, distance|text|12|NO, bib|int4|4|NO,"),
        "{stdout}"
    );
    assert_eq!(
        get("primary_keys"),
        "[event|1|registrations_pkey, distance|2|registrations_pkey, bib|3|registrations_pkey]",
        "{stdout}"
    );
    assert_eq!(
        get("index_info"),
        "[registrations_pkey|false|1|event, registrations_pkey|false|2|distance, \
         registrations_pkey|false|3|bib, age|true|1|age, age|true|2|bib, age|true|3|name, \
         age|true|4|gender]",
        "{stdout}"
    );
    assert_eq!(get("imported_keys"), "[]", "{stdout}");
    // Autocommit off: inserts and an update committed together; the
    // rolled-back insert of bib 4 left nothing.
    assert_eq!(get("tx_updated"), "1", "{stdout}");
    assert_eq!(get("tx_rows"), "[1|null, 2|Tx, 3|null]", "{stdout}");
    assert!(get("type_info_count").parse::<usize>()? > 100, "{stdout}");
    assert_eq!(get("type_info_has_int4"), "true", "{stdout}");
    assert!(get("functions_count").parse::<usize>()? > 0, "{stdout}");

    let client = block_on(server.connect())?;
    let fetched: Vec<String> = block_on(rows(
        &client,
        &format!(
            "SELECT bib, name, {EPOCH_MS} FROM registrations WHERE age >= $1 \
             ORDER BY event, distance, bib LIMIT 7"
        ),
        &[&30i32],
    ))?
    .into_iter()
    .map(|r| format!("{}|{}|{}", r[0], r[1].as_str().unwrap_or("?"), r[2]))
    .collect();
    assert_eq!(
        get("fetch_size_rows"),
        format!("[{}]", fetched.join(", ")),
        "{stdout}"
    );
    for bib in [3i32, 5] {
        let ts = block_on(rows(
            &client,
            &format!(
                "SELECT {EPOCH_MS} FROM registrations WHERE bib = $1 \
                 ORDER BY event, distance LIMIT 1"
            ),
            &[&bib],
        ))?;
        assert_eq!(
            get(&format!("timestamp_{bib}")),
            ts[0][0].to_string(),
            "{stdout}"
        );
    }
    Ok(())
}

/// These tests run their clients as blocking processes; tokio-postgres
/// needs a runtime of its own beside them.
fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: std::sync::OnceLock<tokio::runtime::Runtime> = std::sync::OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("a tokio runtime: {e}"))
    })
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    runtime().block_on(f)
}
