//! The tools a data team brings next, each run for real against `tablesql
//! serve` at its default settings and compared with what it answers over
//! the same rows in PostgreSQL 15:
//!
//! - DuckDB 1.5.5 with its postgres extension (`duckdb_reader.py`): the
//!   catalog load at ATTACH, scans by binary COPY with its filters, a join
//!   with a local DuckDB table.
//! - pgcli 4.7.1 in a terminal (tmux): it starts with no traceback (its
//!   completion loads `pg_proc` with `proallargtypes::regtype[]` and the
//!   columns with `atttypid::regtype::text`), then offers a table's name
//!   and a column's.
//! - psqlODBC (Debian's odbc-postgresql) through pyodbc 5.5.0 with the
//!   driver's defaults (`odbc_client.py`): SQLTables, SQLColumns,
//!   SQLPrimaryKeys (`indkey[ia.attnum - 1]`: vector subscripts from 0,
//!   `pg_attribute` rows of the index), SQLStatistics (`indkey` described
//!   as an `int2vector`), a bound parameter, commit, rollback, and a failed
//!   statement inside a transaction.
//! - dbt-core 1.11 with dbt-postgres 1.11.0 (`dbt_project.py` over the
//!   project in `tests/clients/dbt`): seeds, a table, a view and an
//!   incremental model run twice, a snapshot twice, `dbt test` and `dbt
//!   docs generate`, each materialization in the blocks dbt sends (CREATE
//!   TABLE AS, renames and drops in one block, temporary tables).
//! - The catalog queries behind them, statement by statement.
//!
//! The clients are installed by `scripts/python-env` and `scripts/dbt-env`
//! (PyPI) and `scripts/debian-packages` (psqlODBC, unixODBC).

use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::clients::{client_file, env, run};
use crate::copy_binary::{ok, postgres};
use crate::server::serve;
use crate::terminal::Terminal;

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// A table of every column type DuckDB maps, NUMERIC(12,3) among them
/// (its precision comes from `pg_attribute.atttypmod`), with NULLs.
const DDL: &str = "(k TEXT NOT NULL, id INT NOT NULL, big BIGINT, x DOUBLE PRECISION, \
    ok BOOLEAN, ts TIMESTAMPTZ, d DATE, n NUMERIC(12, 3), raw BYTEA, u TEXT, t TEXT, \
    PRIMARY KEY (k, id))";

/// 2,000 rows, made by PostgreSQL; tablesql gets the same by binary COPY.
const ROWS: &str = "SELECT chr(97 + g % 3), g, CASE WHEN g % 7 = 0 THEN NULL ELSE g * 1000003 END, \
    g / 4.0, g % 2 = 0, timestamptz '2020-01-01 00:00:00+00' + g * interval '61 minutes', \
    date '2019-12-30' + g, g * 1.125, decode(lpad(to_hex(g), 4, '0'), 'hex'), NULL, \
    CASE WHEN g % 5 = 0 THEN NULL ELSE 'n' || g END FROM generate_series(1, 2000) g";

fn duckdb(conninfo: &str, table: &str) -> Result<Value, Box<dyn std::error::Error>> {
    let mut command = Command::new(env("TABLESQL_TEST_PYTHON")?);
    command.args([&client_file("duckdb_reader.py"), conninfo, table]);
    Ok(serde_json::from_str(&run(command)?)?)
}

/// `table` with [`ROWS`] in PostgreSQL 15 and, by binary COPY of its
/// rows, in tablesql.
fn on_both(server: &crate::server::Served, table: &str) -> TestResult {
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("rows.bin");
    postgres(&["-c", &format!("DROP TABLE IF EXISTS {table}")])?;
    postgres(&["-c", &format!("CREATE TABLE {table} {DDL}")])?;
    postgres(&["-c", &format!("INSERT INTO {table} {ROWS}")])?;
    postgres(&[
        "-c",
        &format!(
            "\\copy {table} to '{}' with (format binary)",
            file.display()
        ),
    ])?;
    let on_tablesql = |args: &[&str]| ok(server.psql("", args)?);
    on_tablesql(&["-c", &format!("CREATE TABLE {table} {DDL}")])?;
    let loaded = on_tablesql(&[
        "-c",
        &format!(
            "\\copy {table} from '{}' with (format binary)",
            file.display()
        ),
    ])?;
    assert!(loaded.contains("COPY 2000"), "{loaded}");
    Ok(())
}

#[test]
fn duckdb_reads_a_table_as_it_reads_postgresqls() -> TestResult {
    let server = serve(1000, &[])?;
    let table = format!("duck_{}", std::process::id());
    on_both(&server, &table)?;
    let theirs = duckdb(&env("TABLESQL_TEST_POSTGRES")?, &table)?;
    let ours = duckdb(
        &format!(
            "host=127.0.0.1 port={} user=tablesql dbname=postgres",
            server.addr.port()
        ),
        &table,
    )?;
    postgres(&["-c", &format!("DROP TABLE {table}")])?;
    assert_eq!(theirs["duckdb"], "1.5.5", "{theirs}");
    assert_eq!(theirs["count"][0][0], "2000", "{theirs}");
    assert_eq!(theirs["listed"], true, "{theirs}");
    assert_eq!(
        ours, theirs,
        "DuckDB over tablesql, then over PostgreSQL 15"
    );
    Ok(())
}

#[test]
fn pgcli_starts_clean_and_completes_tables_and_columns() -> TestResult {
    let server = serve(1000, &[])?;
    let home = tempfile::tempdir()?;
    let python = std::path::PathBuf::from(env("TABLESQL_TEST_PYTHON")?);
    let pgcli = python.with_file_name("pgcli");
    let command = format!(
        "HOME='{home}' XDG_CONFIG_HOME='{home}/.config' PAGER=cat exec '{}' --less-chatty \
         -h 127.0.0.1 -p {} -U tablesql -d postgres 2>&1",
        pgcli.display(),
        server.addr.port(),
        home = home.path().display(),
    );
    let term = Terminal::start(&["sh", "-c", &command], 120, 30)?;
    let wait = Duration::from_secs(60);
    term.wait_for("tablesql@127.0.0.1:postgres>", wait)?;
    // Completion loads in the background; a menu drawn before it landed
    // offers keywords only, so the line is typed afresh (Ctrl-C clears it)
    // until the name is offered.
    // Each try waits twice as long as the last: on a busy machine drawing
    // the menu may take longer than the first window.
    let offered = |line: &str, name: &str, kind: &str| {
        let mut deadline =
            crate::wait::Deadline::new(wait, format!("pgcli to offer {kind} {name}"));
        let mut window = Duration::from_secs(1);
        loop {
            term.keys(&["C-c"])?;
            term.type_text(line)?;
            window = (window * 2).min(Duration::from_secs(16));
            let mut looks = crate::wait::Deadline::new(window, "");
            loop {
                let screen = term.screen()?;
                // pgcli quotes a name that is also a function's (`"age"`).
                if screen.lines().any(|l| {
                    let words: Vec<_> = l.split_whitespace().map(|w| w.trim_matches('"')).collect();
                    words == [name, kind]
                }) {
                    return Ok::<_, Box<dyn std::error::Error>>(screen);
                }
                if looks.again("").is_err() {
                    break;
                }
            }
            deadline.again(term.screen()?)?;
        }
    };
    offered("SELECT * FROM registration", "registrations", "table")?;
    let screen = offered("SELECT * FROM registrations WHERE ag", "age", "column")?;
    assert!(!screen.contains("Traceback"), "{screen}");
    // pgcli logs each failed completion query there.
    let log = std::fs::read_to_string(home.path().join(".config/pgcli/log"))?;
    assert!(
        !log.contains("Traceback") && !log.contains(" ERROR "),
        "{log}"
    );
    Ok(())
}

#[test]
fn psqlodbc_syncs_a_table_and_runs_transactions_as_over_postgresql() -> TestResult {
    let server = serve(1000, &[])?;
    let table = format!("odbc_{}", std::process::id());
    on_both(&server, &table)?;
    let odbc = |port: &str, user: &str| -> Result<Value, Box<dyn std::error::Error>> {
        let mut command = Command::new(env("TABLESQL_TEST_PYTHON")?);
        command.args([
            &client_file("odbc_client.py"),
            &env("TABLESQL_TEST_ODBC_DRIVER")?,
            port,
            "postgres",
            user,
            &table,
            &format!("{table}_tx"),
        ]);
        Ok(serde_json::from_str(&run(command)?)?)
    };
    let conninfo = env("TABLESQL_TEST_POSTGRES")?;
    let pg_port = conninfo
        .split_whitespace()
        .find_map(|kv| kv.strip_prefix("port="))
        .unwrap_or("5432");
    let theirs = odbc(pg_port, "postgres")?;
    let ours = odbc(&server.addr.port().to_string(), "tablesql")?;
    postgres(&["-c", &format!("DROP TABLE {table}")])?;
    assert_eq!(theirs["pyodbc"], "5.5.0", "{theirs}");
    assert_eq!(
        theirs["primary_keys"].as_array().map(Vec::len),
        Some(2),
        "{theirs}"
    );
    assert_eq!(theirs["error"], "42P01", "{theirs}");
    assert_eq!(
        ours, theirs,
        "psqlODBC over tablesql, then over PostgreSQL 15"
    );
    Ok(())
}

/// The catalog as these tools read it, statement by statement as
/// PostgreSQL 15 answers: `regtype` as text is a type's name, `pg_proc`'s
/// argument columns are arrays, a NUMERIC column has its typmod, a vector's
/// subscripts start at 0, an index relation has `pg_attribute` rows, and
/// a regproc compares with 0. (`proargtypes::regtype[]` is left out:
/// PostgreSQL prints an `oidvector`'s array with its bounds, `[0:0]={text}`.)
#[test]
fn catalog_columns_read_as_postgresqls() -> TestResult {
    let server = serve(1000, &[])?;
    let table = format!("catalog_{}", std::process::id());
    let ddl = format!(
        "CREATE TABLE {table} (k TEXT NOT NULL, id INT NOT NULL, n NUMERIC(12, 3), \
         ts TIMESTAMPTZ, PRIMARY KEY (k, id))"
    );
    let statements = [
        "SELECT 23::regtype::text, 1184::regtype::text, 1007::regtype::text, 0::regtype::text"
            .to_owned(),
        "SELECT proname, COALESCE(proallargtypes::regtype[], proargtypes::regtype[])::text[], \
         proargnames, proargmodes, prorettype::regtype::text FROM pg_proc \
         WHERE proname IN ('aclexplode', 'num_nulls') ORDER BY 1"
            .to_owned(),
        format!(
            "SELECT a.attname, a.atttypid::regtype::text, format_type(a.atttypid, a.atttypmod) \
             FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid \
             WHERE c.relname = '{table}' AND a.attnum > 0 ORDER BY a.attnum"
        ),
        format!(
            "SELECT i.indkey[0], i.indkey[1], i.indkey[2], i.indkey FROM pg_index i \
             JOIN pg_class c ON c.oid = i.indrelid WHERE c.relname = '{table}'"
        ),
        format!(
            "SELECT ic.relname, a.attnum, a.attname FROM pg_index i \
             JOIN pg_class c ON c.oid = i.indrelid JOIN pg_class ic ON ic.oid = i.indexrelid \
             JOIN pg_attribute a ON a.attrelid = i.indexrelid WHERE c.relname = '{table}' ORDER BY 2"
        ),
        "SELECT count(*) FROM pg_type WHERE typreceive != 0 AND typname = 'int4'".to_owned(),
        // dbt tells a view from a table by these two.
        format!(
            "SELECT tablename, tableowner, hasindexes FROM pg_tables \
             WHERE tablename LIKE '{table}%' ORDER BY 1"
        ),
        format!(
            "SELECT viewname, viewowner, definition LIKE '%WHERE%' FROM pg_views \
             WHERE viewname LIKE '{table}%' ORDER BY 1"
        ),
    ];
    let view = format!("CREATE VIEW {table}_v AS SELECT k, id FROM {table} WHERE id > 1");
    let mut args = vec!["-A".to_owned()];
    for statement in &statements {
        args.extend(["-c".to_owned(), statement.clone()]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    postgres(&["-c", &format!("DROP TABLE IF EXISTS {table} CASCADE")])?;
    postgres(&["-c", &ddl, "-c", &view])?;
    let theirs = postgres(&args);
    postgres(&["-c", &format!("DROP TABLE {table} CASCADE")])?;
    let theirs = theirs?;
    ok(server.psql("", &["-c", &ddl, "-c", &view])?)?;
    let ours = ok(server.psql("", &args)?)?;
    assert!(
        theirs.contains("integer|timestamp with time zone|integer[]|-"),
        "{theirs}"
    );
    assert!(
        theirs.contains("{aclitem[],oid,oid,text,boolean}"),
        "{theirs}"
    );
    assert!(
        theirs.contains(&format!("{table}_v|postgres|t")),
        "{theirs}"
    );
    assert_eq!(ours, theirs, "tablesql, then PostgreSQL 15");
    Ok(())
}

/// Timestamps in a text result as PostgreSQL writes them (`2020-01-01
/// 10:10:00+00`, a fraction without its trailing zeros), whether the rows
/// come from a scan, a point read or a computed value, and cast to text in
/// SQL: connectorx's CSV mode, pandas and BI tools parse this text.
#[test]
fn timestamps_read_as_postgresql_writes_them() -> TestResult {
    let server = serve(1000, &[])?;
    let table = format!("stamps_{}", std::process::id());
    on_both(&server, &table)?;
    let args = [
        "-A".to_owned(),
        "-c".to_owned(),
        format!("SELECT id, ts, d FROM {table} WHERE id BETWEEN 10 AND 13 ORDER BY id"),
        "-c".to_owned(),
        format!("SELECT ts FROM {table} WHERE k = 'b' AND id = 10"),
        "-c".to_owned(),
        format!(
            "SELECT max(ts), min(ts) + interval '1.5 seconds', CAST(NULL AS TIMESTAMPTZ) FROM {table}"
        ),
        "-c".to_owned(),
        format!(
            "SELECT ts::text, CAST(ts AS VARCHAR), 'at ' || ts FROM {table} WHERE id = 10 AND k = 'b'"
        ),
        "-c".to_owned(),
        format!("SELECT count(*) FROM {table} WHERE ts::text LIKE '2020-01-02 %'"),
    ];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let theirs = postgres(&args);
    postgres(&["-c", &format!("DROP TABLE {table}")])?;
    let theirs = theirs?;
    let ours = ok(server.psql("", &args)?)?;
    assert!(
        theirs.contains("10|2020-01-01 10:10:00+00|2020-01-09"),
        "{theirs}"
    );
    assert_eq!(ours, theirs, "tablesql, then PostgreSQL 15");
    Ok(())
}

/// dbt over the project, as `dbt_project.py` reports it: the last line of
/// its output (dbt prints its progress before).
fn dbt(conninfo: &str, schema: &str) -> Result<Value, Box<dyn std::error::Error>> {
    let mut command = Command::new(env("TABLESQL_TEST_DBT_PYTHON")?);
    command.args([&client_file("dbt_project.py"), conninfo, schema]);
    let out = run(command)?;
    let last = out.lines().last().unwrap_or_default();
    Ok(serde_json::from_str(last).map_err(|e| format!("{e}: {out}"))?)
}

#[test]
fn dbt_builds_tests_and_documents_a_project_as_over_postgresql() -> TestResult {
    let server = serve(1000, &[])?;
    // A schema of its own in PostgreSQL, which other tests share.
    let schema = format!("dbt_{}", std::process::id());
    let theirs = dbt(&env("TABLESQL_TEST_POSTGRES")?, &schema);
    postgres(&["-c", &format!("DROP SCHEMA IF EXISTS {schema} CASCADE")])?;
    let theirs = theirs?;
    let ours = dbt(
        &format!(
            "host=127.0.0.1 port={} user=tablesql dbname=postgres",
            server.addr.port()
        ),
        "public",
    )?;
    // What PostgreSQL's run must show, so that the comparison says something.
    assert_eq!(
        theirs["commands"]["run"][1].as_array().map(Vec::len),
        Some(3),
        "{theirs}"
    );
    assert_eq!(
        theirs["commands"]["test"][0].as_array().map(Vec::len),
        Some(5),
        "{theirs}"
    );
    assert_eq!(theirs["catalog"]["older"]["type"], "VIEW", "{theirs}");
    assert_eq!(theirs["seen"].as_array().map(Vec::len), Some(5), "{theirs}");
    assert_eq!(ours, theirs, "dbt over tablesql, then over PostgreSQL 15");
    Ok(())
}
