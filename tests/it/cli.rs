//! The `tablesql` binary as a user runs it: demo, tables and scan across
//! processes, and a load killed with SIGKILL.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use tablesql::demo::{Plan, TABLE};
use tablesql::storage::*;

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn tablesql(dir: &std::path::Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tablesql"));
    cmd.arg("--store").arg(dir).env_remove("TABLESQL_STORE");
    cmd
}

fn stdout_of(cmd: &mut Command) -> Result<String, Box<dyn std::error::Error>> {
    let out = cmd.output()?;
    if !out.status.success() {
        return Err(format!("{cmd:?} failed: {}", String::from_utf8_lossy(&out.stderr)).into());
    }
    Ok(String::from_utf8(out.stdout)?)
}

#[test]
fn demo_then_tables_and_scan_in_other_processes() -> TestResult {
    let dir = tempfile::tempdir()?;
    stdout_of(tablesql(dir.path()).args(["demo", "--rows", "100000"]))?;
    // SQL in another process: the catalog came with the demo, in the store.
    let plan = stdout_of(tablesql(dir.path()).args([
        "query",
        "EXPLAIN ANALYZE SELECT name, age FROM registrations WHERE event = '2012 Boston Marathon' AND distance = 'Full' AND bib = 1234",
    ]))?;
    let scan = plan
        .lines()
        .find(|l| l.contains("PartitionScanExec"))
        .unwrap_or_default();
    assert!(scan.contains("access=point"), "{plan}");
    assert!(scan.contains("entities_scanned=1,"), "{plan}");
    assert!(scan.contains("entities_returned=1,"), "{plan}");
    let count = stdout_of(tablesql(dir.path()).args([
        "query",
        "--format",
        "csv",
        "SELECT count(*) AS n FROM registrations",
    ]))?;
    assert_eq!(count, "n\n100000\n");
    let json = stdout_of(tablesql(dir.path()).args([
        "query",
        "--format",
        "json",
        "SELECT bib, club FROM registrations WHERE event = '2011 New York City Marathon' AND distance = 'Half' AND bib IN (1, 2) ORDER BY bib",
    ]))?;
    let rows: serde_json::Value = serde_json::from_str(&json)?;
    assert_eq!(rows[0]["bib"], 1, "{json}");
    assert_eq!(rows[1]["bib"], 2, "{json}");
    let bad = tablesql(dir.path())
        .args(["query", "SELECT nope FROM registrations"])
        .output()?;
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("nope"));

    let tables = stdout_of(tablesql(dir.path()).arg("tables"))?;
    assert!(
        tables.contains(TABLE) && tables.contains("200000"),
        "{tables}"
    );

    let csv = stdout_of(tablesql(dir.path()).args([
        "scan",
        TABLE,
        "--pk",
        "2012 Boston Marathon__Half",
        "--from",
        "BIB:",
        "--to",
        "BIB;",
        "--limit",
        "3",
        "--format",
        "csv",
    ]))?;
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 4, "{csv}");
    assert!(
        lines[0].starts_with("PartitionKey,RowKey,Timestamp,age,bib,"),
        "{}",
        lines[0]
    );
    for (i, line) in lines[1..].iter().enumerate() {
        assert!(
            line.starts_with(&format!("2012 Boston Marathon__Half,BIB:{:05}__", i + 1)),
            "{line}"
        );
    }

    let json =
        stdout_of(tablesql(dir.path()).args(["scan", TABLE, "--limit", "1", "--format", "json"]))?;
    let parsed: serde_json::Value = serde_json::from_str(&json)?;
    let first = &parsed[0];
    assert_eq!(first["PartitionKey"], "2011 New York City Marathon__10K");
    assert_eq!(first["finish@odata.type"], "Edm.Int64");
    assert!(
        first["RowKey"]
            .as_str()
            .is_some_and(|rk| rk.starts_with("AGE:"))
    );
    Ok(())
}

#[test]
fn unknown_store_scheme_and_table_are_clear_errors() -> TestResult {
    let out = Command::new(env!("CARGO_BIN_EXE_tablesql"))
        .args(["--store", "ftp:example.com", "tables"])
        .env_remove("TABLESQL_STORE")
        .output()?;
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown store scheme \"ftp\""));
    // A bad connection string names the key, never the value (it may be secret).
    let out = Command::new(env!("CARGO_BIN_EXE_tablesql"))
        .args([
            "--store",
            "azure:AccountName=a;AccountKey=s3cr3t!",
            "tables",
        ])
        .env_remove("TABLESQL_STORE")
        .output()?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("AccountKey is invalid: not base64"),
        "{stderr}"
    );
    assert!(!stderr.contains("s3cr3t"), "{stderr}");
    let dir = tempfile::tempdir()?;
    let out = tablesql(dir.path()).args(["scan", "Nope"]).output()?;
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("table \"Nope\" does not exist"));
    Ok(())
}

/// A loader killed mid-way leaves each transaction wholly present or wholly
/// absent, and every transaction it reported as committed is present.
#[test]
fn sigkill_during_demo_load_leaves_only_whole_transactions() -> TestResult {
    const ROWS: u64 = 20_000;
    let dir = tempfile::tempdir()?;
    let mut child = tablesql(dir.path())
        .args(["demo", "--rows", &ROWS.to_string(), "--print-commits"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let mut acked = Vec::new();
    for line in BufReader::new(stdout).lines().take(30) {
        let line = line?;
        let b: usize = line.split(' ').nth(1).ok_or("bad line")?.parse()?;
        acked.push(b);
    }
    child.kill()?; // SIGKILL on Unix
    child.wait()?;
    assert_eq!(acked.len(), 30, "the loader stopped before 30 commits");

    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async {
        let store = EmbeddedStore::open(dir.path())?;
        let table = TableName::new(TABLE)?;
        let plan = Plan::new(ROWS);
        let (mut whole, mut absent) = (0, 0);
        for b in 0..plan.len() {
            let ops = plan.batch(b)?;
            let mut present = 0;
            for op in &ops {
                let (pk, rk) = op.keys();
                present += usize::from(store.get(&table, pk, rk).await?.is_some());
            }
            match present {
                0 => absent += 1,
                n if n == ops.len() => whole += 1,
                n => panic!(
                    "transaction {b} is torn: {n} of {} entities present",
                    ops.len()
                ),
            }
            if acked.contains(&b) {
                assert_eq!(present, ops.len(), "acknowledged transaction {b} was lost");
            }
        }
        assert!(whole >= 30, "only {whole} transactions present");
        assert!(
            absent > 0,
            "the load finished before the kill; nothing was tested"
        );
        Ok::<_, Box<dyn std::error::Error>>(())
    })
}

/// `CREATE INDEX` killed with SIGKILL while it writes the index rows of
/// the existing base rows leaves the index declared but unused (building);
/// the same statement run again finishes the job, and CHECK then finds the
/// index whole: no row missing, none orphaned or stale, none twice.
#[test]
fn sigkill_during_create_index_then_the_same_statement_finishes_it() -> TestResult {
    const ROWS: u64 = 20_000;
    let dir = tempfile::tempdir()?;
    stdout_of(tablesql(dir.path()).args(["demo", "--rows", &ROWS.to_string()]))?;
    let create = "CREATE INDEX by_name ON registrations (name)";
    let mut child = tablesql(dir.path())
        .args(["query", "--print-progress", create])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let progress: Vec<String> = BufReader::new(stdout)
        .lines()
        .take(3)
        .collect::<Result<_, _>>()?;
    child.kill()?; // SIGKILL on Unix
    child.wait()?;
    assert!(
        progress.iter().all(|l| l.starts_with("progress ")),
        "{progress:?}"
    );
    let count = |sql: &str| -> Result<u64, Box<dyn std::error::Error>> {
        let out = stdout_of(tablesql(dir.path()).args(["query", "--format", "csv", sql]))?;
        Ok(out.lines().nth(1).ok_or("no row")?.trim().parse()?)
    };
    let rows_of_index = "SELECT count(*) FROM raw.registrations WHERE \"RowKey\" >= 'BY_NAME:' AND \"RowKey\" < 'BY_NAME;'";
    let written = count(rows_of_index)?;
    assert!(
        written > 0 && written < ROWS,
        "killed after {written} of {ROWS} index rows: nothing was tested"
    );
    // Building: queries do not read it yet.
    let plan = stdout_of(tablesql(dir.path()).args([
        "query",
        "EXPLAIN SELECT bib FROM registrations WHERE event = '2012 Boston Marathon' AND distance = 'Full' AND name = 'Pedro'",
    ]))?;
    assert!(!plan.contains("by_name"), "{plan}");
    let done = stdout_of(tablesql(dir.path()).args(["query", create]))?;
    assert!(done.contains("index by_name on registrations"), "{done}");
    assert_eq!(count(rows_of_index)?, ROWS);
    let check = stdout_of(tablesql(dir.path()).args([
        "query",
        "--format",
        "csv",
        "SELECT missing, orphaned, stale FROM tablesql_check_index('registrations', 'by_name')",
    ]))?;
    assert_eq!(check.lines().nth(1), Some("0,0,0"), "{check}");
    let plan = stdout_of(tablesql(dir.path()).args([
        "query",
        "EXPLAIN SELECT bib FROM registrations WHERE event = '2012 Boston Marathon' AND distance = 'Full' AND name = 'Pedro'",
    ]))?;
    assert!(plan.contains("access=index_point(by_name)"), "{plan}");
    Ok(())
}

/// The statements of issue 13 through `tablesql query`: the same counts as
/// over the wire (`server::correlated_subqueries_answer_over_the_wire`).
#[test]
fn correlated_subqueries_in_the_cli() -> TestResult {
    let dir = tempfile::tempdir()?;
    for sql in [
        "CREATE TABLE t1 (k INT NOT NULL, a INT, b INT) WITH (storage_table = 'CliT1', partition_key = 'P', row_key = '{k:03}')",
        "INSERT INTO t1 (k, a, b) VALUES (1, 1, 10), (2, 1, 20), (3, 2, 30), (4, NULL, NULL)",
    ] {
        stdout_of(tablesql(dir.path()).args(["query", sql]))?;
    }
    let query = |sql: &str| stdout_of(tablesql(dir.path()).args(["query", "--format", "csv", sql]));
    let by_b =
        query("SELECT b, (SELECT count(*) FROM t1 AS x WHERE x.b < t1.b) AS n FROM t1 ORDER BY k")?;
    assert_eq!(by_b, "b,n\n10,0\n20,1\n30,2\n,0\n");
    let by_a =
        query("SELECT b, (SELECT count(*) FROM t1 AS x WHERE x.a = t1.a) AS n FROM t1 ORDER BY k")?;
    assert_eq!(by_a, "b,n\n10,2\n20,2\n30,1\n,0\n");
    // DROP TABLE IF EXISTS of a missing table is fine here too; without IF EXISTS it is an error.
    stdout_of(tablesql(dir.path()).args(["query", "DROP TABLE IF EXISTS nosuch"]))?;
    let out = tablesql(dir.path())
        .args(["query", "DROP TABLE nosuch"])
        .output()?;
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("nosuch"));
    Ok(())
}

/// `tablesql analyze` records statistics that a query in another process
/// plans with; a table that does not exist is named.
#[test]
fn analyze_in_the_cli() -> TestResult {
    let dir = tempfile::tempdir()?;
    stdout_of(tablesql(dir.path()).args(["demo", "--rows", "2000"]))?;
    let said = stdout_of(tablesql(dir.path()).args([
        "analyze",
        "registrations",
        "--guidepost-every",
        "100",
    ]))?;
    assert!(
        said.starts_with("analyzed registrations: 12 partitions, 4000 entities"),
        "{said}"
    );
    let plan = stdout_of(tablesql(dir.path()).args([
        "--scan-policy",
        "allow",
        "query",
        "EXPLAIN SELECT count(*) FROM registrations",
    ]))?;
    assert!(plan.contains("fanout=chunks("), "{plan}");
    let out = tablesql(dir.path()).args(["analyze", "nosuch"]).output()?;
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("nosuch"));
    Ok(())
}
