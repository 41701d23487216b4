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
/// absent, every transaction it reported as committed is present, and the
/// store's kept counts are what a scan finds.
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
        // The counts kept beside the entities committed with them: each
        // partition's, and each kind's, is what a scan finds.
        let scanned = store.query_all(&table, &Query::all()).await?;
        assert_eq!(store.count(&table).await?, scanned.len() as u64);
        let partitions = store.partitions(&table, &KeyRange::all(), None).await?;
        for pk in partitions.partitions {
            for kind in ["BIB", "AGE"] {
                let rows = KeyRange {
                    start: std::ops::Bound::Included(RowKey::new(format!("{kind}:"))?),
                    end: std::ops::Bound::Excluded(RowKey::new(format!("{kind};"))?),
                };
                let here = scanned
                    .iter()
                    .filter(|e| e.partition_key() == &pk && e.row_key().as_str().starts_with(kind))
                    .count() as u64;
                assert_eq!(
                    store.counted(&table, &KeyRange::exactly(pk.clone()), &rows)?,
                    Some(here),
                    "{pk:?} {kind}"
                );
            }
        }
        Ok::<_, Box<dyn std::error::Error>>(())
    })
}

/// `TRUNCATE` in `tablesql query` reports its progress as it deletes (a
/// bar on a terminal, `progress N` lines here), and leaves no row.
#[test]
fn truncate_reports_its_progress_and_empties_the_table() -> TestResult {
    const ROWS: u64 = 5_000;
    let dir = tempfile::tempdir()?;
    stdout_of(tablesql(dir.path()).args(["demo", "--rows", &ROWS.to_string()]))?;
    let out = stdout_of(tablesql(dir.path()).args([
        "query",
        "--print-progress",
        "TRUNCATE registrations",
    ]))?;
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.last(), Some(&"TRUNCATE TABLE"), "{out}");
    assert_eq!(
        lines.iter().rev().nth(1),
        Some(&format!("progress {ROWS}").as_str()),
        "{out}"
    );
    let count = stdout_of(tablesql(dir.path()).args([
        "query",
        "--format",
        "csv",
        "SELECT count(*) FROM registrations",
    ]))?;
    assert_eq!(count.lines().nth(1).map(str::trim), Some("0"), "{count}");
    Ok(())
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

/// `--derived-cache` sizes the embedded store's cache of decoded pages:
/// by default a scan asked again in the same process is served from it
/// (every partition's request), with 0 it is read again; a size without
/// a unit is refused, naming what is missing.
#[test]
fn the_derived_cache_is_sized_on_the_command_line() -> TestResult {
    let dir = tempfile::tempdir()?;
    stdout_of(tablesql(dir.path()).args(["demo", "--rows", "2000"]))?;
    let sql = "SELECT avg(age) FROM registrations; \
               EXPLAIN ANALYZE SELECT avg(age) FROM registrations";
    let cached = |size: Option<&str>| -> Result<String, Box<dyn std::error::Error>> {
        let mut cmd = tablesql(dir.path());
        cmd.env_remove("TABLESQL_DERIVED_CACHE");
        if let Some(size) = size {
            cmd.args(["--derived-cache", size]);
        }
        let out = stdout_of(cmd.args(["--scan-policy", "allow", "query", sql]))?;
        let scan = out
            .lines()
            .find(|l| l.contains("PartitionScanExec"))
            .ok_or_else(|| format!("no scan in {out}"))?;
        let at = scan
            .find("requests_cached=")
            .ok_or_else(|| format!("no requests_cached in {scan}"))?;
        Ok(scan[at..]
            .split([',', ']', ' '])
            .next()
            .unwrap_or_default()
            .to_owned())
    };
    assert_eq!(cached(None)?, "requests_cached=12");
    assert_eq!(cached(Some("64MB"))?, "requests_cached=12");
    assert_eq!(cached(Some("0"))?, "requests_cached=0");
    let out = tablesql(dir.path())
        .args(["--derived-cache", "256", "tables"])
        .output()?;
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("needs a unit"), "{err}");
    Ok(())
}

/// `tablesql advise`: the demo's registrations (12 equal partitions) are
/// healthy; a table loaded under one PartitionKey is flagged, with its
/// evidence, on the terminal and as JSON.
#[test]
fn advise_in_the_cli() -> TestResult {
    let dir = tempfile::tempdir()?;
    stdout_of(tablesql(dir.path()).args(["demo", "--rows", "1200"]))?;
    let healthy =
        stdout_of(tablesql(dir.path()).args(["advise", "registrations", "--format", "json"]))?;
    let none: Vec<serde_json::Value> = serde_json::from_str(&healthy)?;
    assert!(none.is_empty(), "no findings: {healthy}");
    stdout_of(tablesql(dir.path()).args([
        "query",
        "CREATE TABLE logs (id INT NOT NULL, msg TEXT NOT NULL, PRIMARY KEY (id)) \
         WITH (storage_table = 'Logs', partition_key = 'all', row_key = '{id:06}')",
    ]))?;
    let values: Vec<String> = (0..250).map(|i| format!("({i}, 'line {i}')")).collect();
    stdout_of(tablesql(dir.path()).args([
        "query",
        &format!("INSERT INTO logs (id, msg) VALUES {}", values.join(", ")),
    ]))?;
    let html = dir.path().join("report.html");
    let report = stdout_of(tablesql(dir.path()).arg("advise").arg("--html").arg(&html))?;
    assert!(report.contains("one_partition"), "{report}");
    let page = std::fs::read_to_string(&html)?;
    assert!(
        page.contains("<svg id=\"partition-sizes\"")
            && page.contains("Logs: 1 partitions, 250 entities"),
        "{page}"
    );
    assert!(
        report.contains("all 250 entities are in one partition"),
        "{report}"
    );
    let json = stdout_of(tablesql(dir.path()).args(["advise", "--format", "json"]))?;
    let findings: Vec<serde_json::Value> = serde_json::from_str(&json)?;
    assert_eq!(findings.len(), 1, "{json}");
    assert_eq!(findings[0]["table_name"], "Logs");
    assert_eq!(findings[0]["finding"], "one_partition");
    assert!(
        findings[0]["remedy"]
            .as_str()
            .is_some_and(|r| r.contains("2000 entities/s"))
    );
    Ok(())
}

const STOCK: &str = "CREATE TABLE stock (shop TEXT NOT NULL, item INT NOT NULL, name TEXT, \
    qty BIGINT NOT NULL, PRIMARY KEY (shop, item)) \
    WITH (storage_table = 'Stock', partition_key = '{shop}', row_key = 'ITEM:{item:05}', \
    index_qty = 'QTY:{qty:06}__{item}')";

fn count_of(dir: &std::path::Path, sql: &str) -> Result<String, Box<dyn std::error::Error>> {
    let out = stdout_of(tablesql(dir).args(["query", sql, "--format", "csv"]))?;
    Ok(out.lines().nth(1).unwrap_or_default().to_owned())
}

/// `tablesql load` of CSV: every row with its index row; run again it
/// stops on the first existing key, passes over them with `--mode skip`,
/// overwrites them with `--mode upsert`.
#[test]
fn load_csv_and_run_it_again() -> TestResult {
    let dir = tempfile::tempdir()?;
    let store = dir.path().join("store");
    stdout_of(tablesql(&store).args(["query", STOCK]))?;
    let csv = dir.path().join("stock.csv");
    let mut text = String::from("shop,item,name,qty\n");
    for i in 0..12_000 {
        text.push_str(&format!("s{},{i},\"item, {i}\",{}\n", i % 3, i % 97));
    }
    std::fs::write(&csv, &text)?;
    let out = stdout_of(tablesql(&store).arg("load").arg("stock").arg(&csv))?;
    assert!(
        out.starts_with("loaded 12000 rows (24000 entities) into stock"),
        "{out}"
    );
    assert_eq!(count_of(&store, "SELECT count(*) FROM stock")?, "12000");
    assert_eq!(
        count_of(&store, "SELECT count(*) FROM stock WHERE qty = 5")?,
        "124"
    );
    assert_eq!(count_of(&store, "SELECT count(*) FROM raw.stock")?, "24000");
    let again = tablesql(&store)
        .arg("load")
        .arg("stock")
        .arg(&csv)
        .output()?;
    let err = String::from_utf8_lossy(&again.stderr);
    assert!(
        !again.status.success() && err.contains("already exists"),
        "{err}"
    );
    assert!(err.contains("0 rows were written before it"), "{err}");
    let out = stdout_of(
        tablesql(&store)
            .arg("load")
            .arg("stock")
            .arg(&csv)
            .args(["--mode", "skip"]),
    )?;
    assert!(out.starts_with("loaded 0 rows"), "{out}");
    std::fs::write(&csv, text.replace(",\"item, ", ",\"renamed "))?;
    let out = stdout_of(
        tablesql(&store)
            .arg("load")
            .arg("stock")
            .arg(&csv)
            .args(["--mode", "upsert"]),
    )?;
    assert!(out.starts_with("loaded 12000 rows"), "{out}");
    assert_eq!(
        count_of(
            &store,
            "SELECT count(*) FROM stock WHERE name LIKE 'renamed %'"
        )?,
        "12000"
    );
    assert_eq!(count_of(&store, "SELECT count(*) FROM raw.stock")?, "24000");
    Ok(())
}

/// A bad line stops the load with its number and what was written before
/// it; with `--reject` every good row loads and the bad one goes to the
/// file. JSON lines load the same way.
#[test]
fn load_stops_at_a_bad_line_or_rejects_it() -> TestResult {
    let dir = tempfile::tempdir()?;
    let store = dir.path().join("store");
    stdout_of(tablesql(&store).args(["query", STOCK]))?;
    let csv = dir.path().join("bad.csv");
    let mut text = String::from("shop,item,name,qty\n");
    for i in 0..7_000 {
        if i == 6_000 {
            text.push_str("s1,not-a-number,x,1\n");
        }
        text.push_str(&format!("s1,{i},n{i},{i}\n"));
    }
    std::fs::write(&csv, &text)?;
    let out = tablesql(&store)
        .arg("load")
        .arg("stock")
        .arg(&csv)
        .output()?;
    let err = String::from_utf8_lossy(&out.stderr);
    // The header is line 1, so the bad row is line 6,002; the first
    // 5,000 rows were written as a chunk before it.
    assert!(!out.status.success() && err.contains("line 6002"), "{err}");
    assert!(err.contains("5000 rows were written before it"), "{err}");
    let rejects = dir.path().join("rejects.csv");
    let out = stdout_of(
        tablesql(&store)
            .arg("load")
            .arg("stock")
            .arg(&csv)
            .args(["--mode", "skip", "--reject"])
            .arg(&rejects),
    )?;
    assert!(out.contains("1 rows rejected"), "{out}");
    // With the header, so that the file loads as it is once fixed.
    assert_eq!(
        std::fs::read_to_string(&rejects)?,
        "shop,item,name,qty\ns1,not-a-number,x,1\n"
    );
    assert_eq!(count_of(&store, "SELECT count(*) FROM stock")?, "7000");

    let jsonl = dir.path().join("more.jsonl");
    std::fs::write(
        &jsonl,
        "{\"shop\": \"s9\", \"item\": 1, \"name\": null, \"qty\": 3}\n{\"shop\": \"s9\", \"item\": 2, \"qty\": 4}\n",
    )?;
    let out = stdout_of(tablesql(&store).arg("load").arg("stock").arg(&jsonl))?;
    assert!(out.starts_with("loaded 2 rows"), "{out}");
    // A NOT NULL column the file does not carry is refused before a row.
    let partial = dir.path().join("partial.csv");
    std::fs::write(&partial, "shop,item\ns1,99999\n")?;
    let out = tablesql(&store)
        .arg("load")
        .arg("stock")
        .arg(&partial)
        .output()?;
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("\"qty\""), "{err}");
    assert_eq!(
        count_of(&store, "SELECT sum(qty) FROM stock WHERE shop = 's9'")?,
        "7"
    );
    Ok(())
}

/// A read and a write of one registration, by bib, in pgbench's syntax.
const STRESS_SCRIPT: &str = "-- a registration read by bib, and its finish time written\n\
    \\set bib random(1, 100)\n\
    SELECT name, finish FROM :table\n WHERE event = '2012 Boston Marathon' AND distance = 'Full' AND bib = :bib;\n\
    UPDATE :table SET finish = finish + 1\n WHERE event = '2012 Boston Marathon' AND distance = 'Full' AND bib = :bib;\n";

/// `tablesql stress` on the demo's registrations in the store `store`:
/// its report, after checking what every report says; the test table is
/// gone afterwards.
fn stress_report(store: &str, dir: &std::path::Path) -> Result<String, Box<dyn std::error::Error>> {
    let run = |args: &[&str]| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_tablesql"));
        cmd.args(["--store", store])
            .args(args)
            .env_remove("TABLESQL_STORE");
        stdout_of(&mut cmd)
    };
    run(&["demo", "--rows", "1200"])?;
    let script = dir.join("workload.sql");
    std::fs::write(&script, STRESS_SCRIPT)?;
    let script = script.to_string_lossy().into_owned();
    let report = run(&[
        "stress",
        "registrations",
        "--partition",
        "2012 Boston Marathon__Full",
        "--script",
        &script,
        "--clients",
        "4",
        "--duration",
        "1.5",
    ])?;
    assert!(report.contains("100 rows loaded into a copy"), "{report}");
    let line = |start: &str| {
        report
            .lines()
            .find(|l| l.starts_with(start))
            .map(str::to_owned)
            .ok_or_else(|| format!("no line {start:?} in {report}"))
    };
    // Every run reads one registration and writes it with its index row.
    let rates = line("GET ")?;
    let figure = |after: &str| -> u64 {
        rates
            .split(after)
            .nth(1)
            .and_then(|s| s.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    let (get, put) = (figure("GET "), figure("PUT "));
    assert!(get >= 20 && put >= 20, "{report}");
    assert!(
        line("latency of a run (ms): mean ")?.contains(" p99 "),
        "{report}"
    );
    // The verdict agrees with the rate it names.
    let verdict = line("verdict: ")?;
    let rate: f64 = verdict
        .split(|c: char| !c.is_ascii_digit())
        .find(|w| !w.is_empty())
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| format!("a rate in {verdict}"))?;
    if verdict.starts_with("verdict: MEETS ") {
        assert!(rate >= 2000.0, "{report}");
    } else {
        assert!(
            verdict.starts_with("verdict: BELOW ") && rate < 2000.0,
            "{report}"
        );
    }
    let tables = run(&["tables"])?;
    assert!(
        !tables.contains("Stress"),
        "the test table is removed: {tables}"
    );
    let names = run(&["query", "SELECT table_name FROM information_schema.tables"])?;
    assert!(!names.contains("stress_"), "its definition too: {names}");
    Ok(report)
}

/// Against the embedded store: where the local store stands against the
/// 2,000/s a partition serves, and no service answers to count.
#[test]
fn stress_the_embedded_store() -> TestResult {
    let dir = tempfile::tempdir()?;
    let store = dir.path().join("store");
    let report = stress_report(&store.to_string_lossy(), dir.path())?;
    assert!(
        report.contains("service: none (the embedded store"),
        "{report}"
    );
    // A partition with no rows to copy is an error, and leaves nothing.
    let script = dir.path().join("workload.sql");
    let out = Command::new(env!("CARGO_BIN_EXE_tablesql"))
        .arg("--store")
        .arg(&store)
        .args([
            "stress",
            "registrations",
            "--partition",
            "no such race",
            "--script",
        ])
        .arg(&script)
        .env_remove("TABLESQL_STORE")
        .output()?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("holds no rows to load the test table with"),
        "{stderr}"
    );
    let tables = stdout_of(tablesql(&store).arg("tables"))?;
    assert!(!tables.contains("Stress"), "{tables}");
    Ok(())
}

/// Against Azurite: the service's requests, retries and busy answers are
/// counted.
#[test]
fn stress_azurite() -> TestResult {
    let store = crate::azurite::store_argument(&crate::azurite::fresh_account()?);
    let dir = tempfile::tempdir()?;
    let report = stress_report(&store, dir.path())?;
    let service = report
        .lines()
        .find(|l| l.starts_with("service: "))
        .ok_or("a service line")?;
    let requests: u64 = service
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| format!("requests in {service}"))?;
    assert!(requests >= 40, "{report}");
    assert!(service.contains(" busy answers, "), "{report}");
    Ok(())
}

/// `tablesql apply DIR`: the project's `catalog/` onto an empty store, then
/// again (nothing to do), then a changed copy (one table replaced, a new
/// file's table created); a bad file anywhere changes nothing.
#[test]
fn apply_a_catalog_directory() -> TestResult {
    let store = tempfile::tempdir()?;
    let shipped = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("catalog");
    let apply = |dir: &std::path::Path| stdout_of(tablesql(store.path()).arg("apply").arg(dir));
    assert_eq!(apply(&shipped)?, "created events\ncreated registrations\n");
    assert_eq!(
        apply(&shipped)?,
        "unchanged events\nunchanged registrations\n"
    );
    // The definitions are the store's: SQL in another process plans with them.
    let plan = stdout_of(tablesql(store.path()).args([
        "query",
        "EXPLAIN SELECT city FROM events WHERE event = '2012 Boston Marathon' AND distance = 'Full'",
    ]))?;
    assert!(plan.contains("access=point"), "{plan}");

    // A copy with a column added to events and a file of its own.
    let changed = tempfile::tempdir()?;
    for name in ["events.sql", "registrations.sql"] {
        std::fs::copy(shipped.join(name), changed.path().join(name))?;
    }
    let events = std::fs::read_to_string(changed.path().join("events.sql"))?;
    std::fs::write(
        changed.path().join("events.sql"),
        events.replace(
            "cutoff_minutes INT",
            "cutoff_minutes INT,\n    sponsor TEXT",
        ),
    )?;
    std::fs::write(
        changed.path().join("sensors.sql"),
        "-- one sensor's readings\nCREATE TABLE sensors (id TEXT NOT NULL, at INT NOT NULL, v DOUBLE, \
         PRIMARY KEY (id, at)) WITH (partition_key = '{id}', row_key = '{at:08}');\n",
    )?;
    assert_eq!(
        apply(changed.path())?,
        "replaced events\nunchanged registrations\ncreated sensors\n"
    );
    let columns = stdout_of(tablesql(store.path()).args([
        "query",
        "SELECT sponsor FROM events LIMIT 1",
        "--format",
        "csv",
    ]))?;
    assert!(columns.starts_with("sponsor"), "{columns}");

    // A file that is not a table: an error naming it, and nothing stored.
    std::fs::write(
        changed.path().join("zz_bad.sql"),
        "CREATE VIEW plain AS SELECT 1;",
    )?;
    std::fs::write(
        changed.path().join("aa_new.sql"),
        "CREATE TABLE extra (k TEXT NOT NULL, PRIMARY KEY (k)) WITH (partition_key = '{k}', row_key = 'x');",
    )?;
    let out = tablesql(store.path())
        .arg("apply")
        .arg(changed.path())
        .output()?;
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("zz_bad.sql") && err.contains("CREATE TABLE statements only"),
        "{err}"
    );
    let tables = stdout_of(tablesql(store.path()).args([
        "query",
        "SELECT table_name FROM information_schema.tables WHERE table_name = 'extra'",
        "--format",
        "csv",
    ]))?;
    assert_eq!(tables.trim(), "table_name", "nothing applied: {tables}");
    Ok(())
}

/// Writes to a table with a global index, each `tablesql query` killed
/// with SIGKILL at a random moment: the entity is written before the base
/// row and the old one deleted after, so whatever step a kill lands in,
/// every base row keeps its entity (CHECK finds none missing), a lookup
/// through the index answers what the base rows answer (a stale or orphan
/// entity stands for no row), and REPAIR leaves the index clean.
#[test]
fn sigkill_during_writes_through_a_global_index_leaves_no_wrong_answer() -> TestResult {
    use rand::{Rng, SeedableRng};
    const ROWS: usize = 300;
    let dir = tempfile::tempdir()?;
    let run = |sql: &str| stdout_of(tablesql(dir.path()).args(["query", "--format", "csv", sql]));
    run("CREATE TABLE gk (id INT PRIMARY KEY, email TEXT, n INT)")?;
    let rows: Vec<String> = (0..ROWS).map(|i| format!("({i}, 'e{i}', 0)")).collect();
    run(&format!("INSERT INTO gk VALUES {}", rows.join(", ")))?;
    run("CREATE INDEX gk_email ON gk (email) WITH (global = true)")?;
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(36);
    let mut emails: Vec<String> = (0..ROWS).map(|i| format!("e{i}")).collect();
    let mut killed = 0;
    for round in 0..8 {
        let sql = match round % 3 {
            0 => format!(
                "UPDATE gk SET email = 'r{round}-' || id WHERE id % 2 = {}",
                round % 2
            ),
            1 => format!("DELETE FROM gk WHERE id % 7 = {round}"),
            _ => {
                let rows: Vec<String> = (0..100)
                    .map(|i| format!("({}, 'r{round}-{i}', {round})", ROWS * (round + 1) + i))
                    .collect();
                format!("INSERT INTO gk VALUES {}", rows.join(", "))
            }
        };
        emails.extend((0..ROWS).map(|i| format!("r{round}-{i}")));
        let mut child = tablesql(dir.path())
            .args(["query", &sql])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        std::thread::sleep(std::time::Duration::from_millis(rng.random_range(30..400)));
        if child.try_wait()?.is_none() {
            killed += 1;
        }
        child.kill()?; // SIGKILL on Unix
        child.wait()?;
        // Through the index, and through the base rows (an expression on
        // the column pushes nothing down).
        // A sample of the values written so far: within the 1,000 keys a
        // path enumerates, so the lookup reads the index.
        let list: Vec<String> = (0..500)
            .map(|_| format!("'{}'", emails[rng.random_range(0..emails.len())]))
            .collect();
        let list = list.join(", ");
        if round == 0 {
            let plan = run(&format!(
                "EXPLAIN SELECT id FROM gk WHERE email IN ({list})"
            ))?;
            assert!(
                plan.contains("access=global_index_points(gk_email"),
                "{plan}"
            );
        }
        let by_index = run(&format!(
            "SELECT id, email FROM gk WHERE email IN ({list}) ORDER BY id"
        ))?;
        let by_base = run(&format!(
            "SELECT id, email FROM gk WHERE email || '' IN ({list}) ORDER BY id"
        ))?;
        assert_eq!(by_index, by_base, "round {round}: {sql}");
        let check = run("SELECT missing FROM tablesql_check_index('gk')")?;
        assert_eq!(check.lines().nth(1), Some("0"), "round {round}: {check}");
    }
    assert!(killed > 0, "no write was killed: nothing was tested");
    run("SELECT * FROM tablesql_repair_index('gk')")?;
    let check = run("SELECT missing, orphaned, stale FROM tablesql_check_index('gk')")?;
    assert_eq!(check.lines().nth(1), Some("0,0,0"), "{check}");
    Ok(())
}

/// A `tablesql query` run: exit code, stdout, stderr.
fn query_run(
    dir: &std::path::Path,
    args: &[&str],
    stdin: Option<&str>,
) -> Result<(Option<i32>, String, String), Box<dyn std::error::Error>> {
    use std::io::Write;
    let mut child = tablesql(dir)
        .arg("query")
        .args(args)
        .env("RUST_BACKTRACE", "0")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    if let Some(mut input) = child.stdin.take() {
        input.write_all(stdin.unwrap_or_default().as_bytes())?;
    }
    let out = child.wait_with_output()?;
    Ok((
        out.status.code(),
        String::from_utf8(out.stdout)?,
        String::from_utf8(out.stderr)?,
    ))
}

/// psql's -c and -f: several statements in each, run in the order given,
/// with psql's exit codes and error lines.
#[test]
fn query_runs_c_and_f_as_psql_does() -> TestResult {
    let dir = tempfile::tempdir()?;
    let store = dir.path().join("store");
    let script = dir.path().join("script.sql");
    std::fs::write(
        &script,
        "SELECT 'f1' AS f1;\nSELECT nope_f;\nSELECT 'f2' AS f2;\n",
    )?;
    let script = script.to_str().ok_or("path")?;

    // Several statements in one -c, then a file, then -c: in that order.
    let (code, out, err) = query_run(
        &store,
        &[
            "-c",
            "SELECT 1 AS a; SELECT 2 AS b",
            "-f",
            script,
            "-c",
            "SELECT 3 AS c",
        ],
        None,
    )?;
    assert_eq!(code, Some(0), "{out}\n{err}");
    let at = |s: &str| out.find(s).ok_or_else(|| format!("{s} not in {out}"));
    assert!(at("│ a │")? < at("│ b │")?);
    assert!(at("│ b │")? < at("│ f1 │")?);
    // Without ON_ERROR_STOP a file runs on after an error (psql's default).
    assert!(at("│ f1 │")? < at("│ f2 │")?);
    assert!(at("│ f2 │")? < at("│ c │")?);
    assert_eq!(out.matches("(1 row)").count(), 5, "{out}");
    assert!(
        err.contains("ERROR:  Schema error: No field named nope_f"),
        "{err}"
    );

    // A failed -c: its later statements do not run; exit code 1; the next
    // -c runs (ON_ERROR_STOP is off), and the last action's code counts.
    let (code, out, err) = query_run(
        &store,
        &[
            "-c",
            "SELECT 1 AS one; SELECT nope_c; SELECT 2 AS never",
            "-c",
            "SELECT 4 AS four",
        ],
        None,
    )?;
    assert_eq!(code, Some(0), "{out}\n{err}");
    assert!(out.contains("│ one │") && out.contains("│ four │"), "{out}");
    assert!(!out.contains("never"), "{out}");
    let (code, out, _) = query_run(
        &store,
        &["-c", "SELECT 4 AS four", "-c", "SELECT nope_c"],
        None,
    )?;
    assert_eq!(code, Some(1), "{out}");

    // ON_ERROR_STOP: a file ends at its error with exit code 3, and
    // nothing after it runs; the SQLSTATE with VERBOSITY verbose.
    let (code, out, err) = query_run(
        &store,
        &[
            "-v",
            "ON_ERROR_STOP=1",
            "-v",
            "VERBOSITY=verbose",
            "-f",
            script,
            "-c",
            "SELECT 5 AS five",
        ],
        None,
    )?;
    assert_eq!(code, Some(3), "{out}\n{err}");
    assert!(
        out.contains("│ f1 │") && !out.contains("f2") && !out.contains("five"),
        "{out}"
    );
    assert!(err.contains("ERROR:  42703: "), "{err}");
    let (code, _, _) = query_run(
        &store,
        &["-v", "ON_ERROR_STOP=1", "-c", "SELECT nope"],
        None,
    )?;
    assert_eq!(code, Some(1));

    // `-f -` and no action at all read stdin.
    let (code, out, _) = query_run(&store, &["-f", "-"], Some("SELECT 'in' AS stdin_f;"))?;
    assert_eq!(code, Some(0));
    assert!(out.contains("stdin_f"), "{out}");
    let (code, out, _) = query_run(&store, &[], Some("SELECT 1 AS x; SELECT 2 AS y;"))?;
    assert_eq!(code, Some(0));
    assert!(out.contains("│ x │") && out.contains("│ y │"), "{out}");

    // Errors of the tool's own: 1, as psql's.
    let (code, _, err) = query_run(&store, &["-f", "/nonexistent/x.sql"], None)?;
    assert_eq!(code, Some(1));
    assert_eq!(
        err.trim(),
        "tablesql: error: /nonexistent/x.sql: No such file or directory"
    );
    let (code, _, err) = query_run(&store, &["--no-such-option"], None)?;
    assert_eq!(code, Some(1), "{err}");
    let (code, out, _) = query_run(&store, &["--help"], None)?;
    assert_eq!(code, Some(0));
    assert!(out.contains("-c, --command <SQL>"), "{out}");

    // The SQL argument still runs as before: a script ended by its error.
    let (code, out, _) = query_run(&store, &["SELECT 1 AS p; SELECT nope; SELECT 2 AS q"], None)?;
    assert_eq!(code, Some(1));
    assert!(out.contains("│ p │") && !out.contains("│ q │"), "{out}");
    let (code, out, _) = query_run(&store, &["SELECT 1 AS many UNION ALL SELECT 2"], None)?;
    assert_eq!(code, Some(0));
    assert!(out.ends_with("(2 rows)\n"), "{out}");

    // FETCH_COUNT: a table per that many rows, as psql prints with it.
    let (code, out, _) = query_run(
        &store,
        &[
            "-v",
            "FETCH_COUNT=2",
            "-c",
            "SELECT value FROM generate_series(1, 5)",
        ],
        None,
    )?;
    assert_eq!(code, Some(0));
    assert_eq!(out.matches("│ value │").count(), 3, "{out}");
    assert!(out.ends_with("(5 rows)\n"), "{out}");
    Ok(())
}

/// A store `tablesql serve` holds: exit code 2 and the way in, through
/// the server; psql (when the tests have it) gets there.
#[test]
fn a_store_held_by_serve_exits_with_2_and_a_hint() -> TestResult {
    let dir = tempfile::tempdir()?;
    let store = dir.path().join("store");
    stdout_of(tablesql(&store).args(["query", "-c", "SELECT 1"]))?;
    let mut serve = tablesql(&store)
        .args(["serve", "--listen", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let mut first = String::new();
    BufReader::new(serve.stdout.take().ok_or("no stdout")?).read_line(&mut first)?;
    let addr = first
        .trim()
        .strip_prefix("listening on ")
        .ok_or(first.clone())?
        .to_owned();
    let held = query_run(&store, &["-c", "SELECT 1"], None);
    let shell = tablesql(&store).arg("shell").stdin(Stdio::null()).output();
    let psql = std::env::var("TABLESQL_TEST_PSQL").ok().map(|psql| {
        let (host, port) = addr.rsplit_once(':').unwrap_or_default();
        Command::new(psql)
            .args([
                "-X", "-h", host, "-p", port, "-U", "tablesql", "-d", "tablesql",
            ])
            .args(["-At", "-c", "SELECT 40 + 2"])
            .output()
    });
    let _ = serve.kill();
    let _ = serve.wait();
    let (code, _, err) = held?;
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.starts_with("tablesql: error: cannot open the store at"),
        "{err}"
    );
    assert!(err.contains("in use by another process"), "{err}");
    assert!(
        err.contains("HINT:  ") && err.contains("tablesql serve"),
        "{err}"
    );
    assert_eq!(shell?.status.code(), Some(2));
    if let Some(psql) = psql {
        let psql = psql?;
        let answer = String::from_utf8_lossy(&psql.stdout).trim().to_owned();
        assert_eq!(answer, "42", "{psql:?}");
    }
    Ok(())
}

/// The peak resident memory of `tablesql ARGS` (stdout drained), in KiB,
/// and the lines it wrote: from `/usr/bin/time` when there is one, else
/// VmHWM sampled.
fn peak_kib(
    store: &std::path::Path,
    args: &[&str],
) -> Result<(u64, u64), Box<dyn std::error::Error>> {
    use std::io::Read;
    let time = std::path::Path::new("/usr/bin/time");
    let report = store.with_extension("time");
    let mut cmd = if time.exists() {
        let mut c = Command::new(time);
        c.arg("-o").arg(&report).args(["-f", "%M"]);
        c.arg(env!("CARGO_BIN_EXE_tablesql"));
        c
    } else {
        Command::new(env!("CARGO_BIN_EXE_tablesql"))
    };
    cmd.arg("--store")
        .arg(store)
        .env_remove("TABLESQL_STORE")
        .args(args);
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()?;
    let pid = child.id();
    let mut stdout = child.stdout.take().ok_or("no stdout")?;
    let reader = std::thread::spawn(move || {
        let (mut lines, mut buf) = (0u64, vec![0u8; 1 << 16]);
        while let Ok(n) = stdout.read(&mut buf) {
            if n == 0 {
                break;
            }
            lines += buf[..n].iter().filter(|b| **b == b'\n').count() as u64;
        }
        lines
    });
    let mut sampled = 0;
    let started = std::time::Instant::now();
    while child.try_wait()?.is_none() {
        if started.elapsed() > std::time::Duration::from_secs(300) {
            let _ = child.kill();
            return Err("the query did not end within 300 s".into());
        }
        // VmHWM: the high-water mark, so a late sample is still the peak.
        if let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status"))
            && let Some(kib) = status
                .lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        {
            sampled = sampled.max(kib);
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let lines = reader.join().map_err(|_| "reader panicked")?;
    let peak = match std::fs::read_to_string(&report) {
        Ok(text) => text.trim().lines().last().unwrap_or_default().parse()?,
        Err(_) => sampled,
    };
    Ok((peak, lines))
}

/// A million rows go through `query` in every format in about the memory
/// of ten thousand: they are written as they come, never held whole.
#[test]
fn a_million_rows_stream_in_flat_memory() -> TestResult {
    let dir = tempfile::tempdir()?;
    let store = dir.path().join("store");
    stdout_of(tablesql(&store).args(["query", "-c", "SELECT 1"]))?;
    // 100 bytes a row: a million held whole would be 100 MB and more.
    let sql = |n: u64| {
        format!("SELECT value, repeat('x', 100) AS pad FROM generate_series(1, {n}) ORDER BY value")
    };
    for format in ["table", "csv", "ndjson", "json", "tsv"] {
        let (small, lines) = peak_kib(&store, &["query", "--format", format, "-c", &sql(10_000)])?;
        assert!(lines >= 10_000, "{format}: {lines} lines");
        let (big, lines) = peak_kib(
            &store,
            &["query", "--format", format, "-c", &sql(1_000_000)],
        )?;
        assert!(lines >= 1_000_000, "{format}: {lines} lines");
        assert!(
            big <= small + 48 * 1024,
            "{format}: 1,000,000 rows peaked at {big} KiB, 10,000 at {small} KiB"
        );
    }
    Ok(())
}

/// `tablesql scan` of 100,000 entities in about the memory of 1,000: a
/// page at a time (held whole, they took over 100 MB more). The pages of
/// the file it reads are kept too, up to `--page-cache` (1 GB by default,
/// 43 MB of this store's 64): bounded here, so that what is measured is
/// the scan's own. (A debug build once read the whole file at every open,
/// redb's debug assertions, and so both runs held all its pages.)
#[test]
fn scan_streams_in_flat_memory() -> TestResult {
    let dir = tempfile::tempdir()?;
    let store = dir.path().join("store");
    stdout_of(tablesql(&store).args(["demo", "--rows", "50000"]))?;
    for format in ["csv", "ndjson", "table"] {
        let scan = [
            "--page-cache",
            "8MB",
            "scan",
            "Registrations",
            "--format",
            format,
        ];
        let (small, _) = peak_kib(&store, &[&scan[..], &["--limit", "1000"]].concat())?;
        let (big, lines) = peak_kib(&store, &scan)?;
        assert!(lines >= 100_000, "{format}: {lines} lines");
        assert!(
            big <= small + 32 * 1024,
            "{format}: 100,000 entities peaked at {big} KiB, 1,000 at {small} KiB"
        );
    }
    Ok(())
}

/// `query --format csv` writes COPY's CSV, which `load` reads back: NULL
/// and '' stay apart, commas, quotes and line breaks survive.
#[test]
fn csv_from_query_round_trips_through_load() -> TestResult {
    let dir = tempfile::tempdir()?;
    let store = dir.path().join("store");
    let table = |name: &str| {
        format!(
            "CREATE TABLE {name} (k INT NOT NULL, v TEXT, PRIMARY KEY (k)) \
             WITH (partition_key = 'P', row_key = '{{k:04}}')"
        )
    };
    stdout_of(tablesql(&store).args(["query", "-c", &table("rtsrc"), "-c", &table("rtdst")]))?;
    stdout_of(tablesql(&store).args([
        "query",
        "-c",
        "INSERT INTO rtsrc (k, v) VALUES (1, NULL), (2, ''), (3, 'a,b'), (4, 'say \"hi\"'), \
         (5, 'two\nlines'), (6, '\\N'), (7, ' spaced ')",
    ]))?;
    let csv = stdout_of(tablesql(&store).args([
        "query",
        "--format",
        "csv",
        "-c",
        "SELECT k, v FROM rtsrc ORDER BY k",
    ]))?;
    assert!(
        csv.starts_with("k,v\n1,\n2,\"\"\n3,\"a,b\"\n4,\"say \"\"hi\"\"\"\n"),
        "{csv}"
    );
    let file = dir.path().join("rows.csv");
    std::fs::write(&file, &csv)?;
    stdout_of(tablesql(&store).arg("load").arg("rtdst").arg(&file))?;
    let compare = "SELECT k, v IS NULL AS is_null, v FROM {} ORDER BY k";
    let src = stdout_of(tablesql(&store).args([
        "query",
        "--format",
        "ndjson",
        "-c",
        &compare.replace("{}", "rtsrc"),
    ]))?;
    let dst = stdout_of(tablesql(&store).args([
        "query",
        "--format",
        "ndjson",
        "-c",
        &compare.replace("{}", "rtdst"),
    ]))?;
    assert_eq!(src, dst);
    assert!(
        src.contains("{\"k\":1,\"is_null\":true,\"v\":null}"),
        "{src}"
    );
    assert!(
        src.contains("{\"k\":2,\"is_null\":false,\"v\":\"\"}"),
        "{src}"
    );
    assert!(src.contains("\"v\":\"two\\nlines\""), "{src}");
    assert_eq!(src.lines().count(), 7, "{src}");

    // The same through TSV (COPY's text format).
    stdout_of(tablesql(&store).args(["query", "-c", &table("rttsv")]))?;
    let tsv = stdout_of(tablesql(&store).args([
        "query",
        "--format",
        "tsv",
        "-c",
        "SELECT k, v FROM rtsrc ORDER BY k",
    ]))?;
    assert!(tsv.starts_with("k\tv\n1\t\\N\n2\t\n"), "{tsv}");
    let file = dir.path().join("rows.tsv");
    std::fs::write(&file, &tsv)?;
    stdout_of(tablesql(&store).arg("load").arg("rttsv").arg(&file))?;
    let back = stdout_of(tablesql(&store).args([
        "query",
        "--format",
        "ndjson",
        "-c",
        &compare.replace("{}", "rttsv"),
    ]))?;
    assert_eq!(src, back);
    Ok(())
}

/// JSON, JSON lines and TSV: nested values (lists, structs) as JSON, not
/// as display strings; NULL and '' apart in each.
#[test]
fn json_ndjson_and_tsv_formats() -> TestResult {
    let dir = tempfile::tempdir()?;
    let store = dir.path().join("store");
    let sql = "SELECT 1 AS i, make_array(1, 2) AS l, named_struct('a', 1, 'b', 'x') AS s, \
               CAST(NULL AS TEXT) AS n, '' AS e, 'a\tb' AS t";
    let ndjson = stdout_of(tablesql(&store).args(["query", "--format", "ndjson", "-c", sql]))?;
    assert_eq!(
        ndjson,
        "{\"i\":1,\"l\":[1,2],\"s\":{\"a\":1,\"b\":\"x\"},\"n\":null,\"e\":\"\",\"t\":\"a\\tb\"}\n"
    );
    let json = stdout_of(tablesql(&store).args([
        "query",
        "--format",
        "json",
        "-c",
        &format!("{sql} UNION ALL {}", sql.replace("1 AS i", "2 AS i")),
    ]))?;
    let rows: serde_json::Value = serde_json::from_str(&json)?;
    assert_eq!(rows.as_array().map(Vec::len), Some(2), "{json}");
    assert_eq!(rows[0]["l"], serde_json::json!([1, 2]), "{json}");
    assert_eq!(rows[0]["s"]["b"], "x", "{json}");
    assert_eq!(rows[0]["n"], serde_json::Value::Null, "{json}");
    let empty = stdout_of(tablesql(&store).args([
        "query",
        "--format",
        "json",
        "-c",
        "SELECT 1 AS i WHERE false",
    ]))?;
    assert_eq!(empty, "[\n]\n");
    let tsv = stdout_of(tablesql(&store).args(["query", "--format", "tsv", "-c", sql]))?;
    assert_eq!(
        tsv,
        "i\tl\ts\tn\te\tt\n1\t[1, 2]\t{a: 1, b: x}\t\\N\t\ta\\tb\n"
    );
    Ok(())
}

/// `tablesql scan` pages through a table: CSV's header has every
/// property (read in a first pass), every format counts every entity.
#[test]
fn scan_streams_every_format() -> TestResult {
    let dir = tempfile::tempdir()?;
    let store = dir.path().join("store");
    stdout_of(tablesql(&store).args(["demo", "--rows", "1500"]))?;
    let storage = "Registrations";
    let csv = stdout_of(tablesql(&store).args(["scan", storage, "--format", "csv"]))?;
    assert_eq!(csv.lines().count(), 3001, "{}", &csv[..200.min(csv.len())]);
    let header = csv.lines().next().unwrap_or_default();
    assert!(
        header.starts_with("PartitionKey,RowKey,Timestamp,"),
        "{header}"
    );
    let ndjson = stdout_of(tablesql(&store).args(["scan", storage, "--format", "ndjson"]))?;
    assert_eq!(ndjson.lines().count(), 3000);
    let json =
        stdout_of(tablesql(&store).args(["scan", storage, "--format", "json", "--limit", "1200"]))?;
    let rows: serde_json::Value = serde_json::from_str(&json)?;
    assert_eq!(rows.as_array().map(Vec::len), Some(1200));
    let table = stdout_of(tablesql(&store).args(["scan", storage, "--limit", "2500"]))?;
    assert!(
        table.ends_with("(2500 entities)\n"),
        "{}",
        &table[table.len().saturating_sub(200)..]
    );
    Ok(())
}

/// Completions for bash parse; the man page renders; docs/cli.md is what
/// the code generates (`UPDATE_CLI_DOC=1` rewrites it).
#[test]
fn completions_man_page_and_cli_doc() -> TestResult {
    let dir = tempfile::tempdir()?;
    let store = dir.path().join("store");
    let bash = stdout_of(tablesql(&store).args(["completions", "bash"]))?;
    assert!(
        bash.contains("tablesql") && bash.contains("--format"),
        "{bash}"
    );
    let file = dir.path().join("tablesql.bash");
    std::fs::write(&file, &bash)?;
    let checked = Command::new("bash").arg("-n").arg(&file).output()?;
    assert!(
        checked.status.success(),
        "{}",
        String::from_utf8_lossy(&checked.stderr)
    );
    for shell in ["zsh", "fish", "elvish", "powershell"] {
        assert!(!stdout_of(tablesql(&store).args(["completions", shell]))?.is_empty());
    }
    let man = stdout_of(tablesql(&store).arg("man"))?;
    assert!(
        man.contains(".TH tablesql 1") && man.contains(".SH NAME"),
        "{man}"
    );
    if Command::new("man")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        let page = dir.path().join("tablesql.1");
        std::fs::write(&page, &man)?;
        let rendered = Command::new("man")
            .arg("-l")
            .arg(&page)
            .env("MANPAGER", "cat")
            .env("PAGER", "cat")
            .env("MANWIDTH", "100")
            .output()?;
        let text = String::from_utf8_lossy(&rendered.stdout);
        assert!(
            rendered.status.success(),
            "{}",
            String::from_utf8_lossy(&rendered.stderr)
        );
        assert!(text.contains("NAME") && text.contains("tablesql"), "{text}");
    }
    let generated = stdout_of(tablesql(&store).arg("cli-doc"))?;
    assert!(
        generated.contains("## tablesql query") && generated.contains("`-c, --command <SQL>`"),
        "{generated}"
    );
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/cli.md");
    if std::env::var_os("UPDATE_CLI_DOC").is_some() {
        std::fs::write(&path, &generated)?;
    }
    let stored = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        stored == generated,
        "docs/cli.md differs from what `tablesql cli-doc` generates: run \
         UPDATE_CLI_DOC=1 cargo test --all-features --test it completions_man_page_and_cli_doc"
    );
    Ok(())
}

/// A store of format 1 as a user meets it: `tablesql query` refuses it
/// (exit code 2) naming the command that converts it, `tablesql migrate`
/// converts it, and the same query then answers.
#[test]
fn a_format_1_store_is_refused_then_migrated_by_the_command() -> TestResult {
    let dir = tempfile::tempdir()?;
    crate::embedded::format1_fixture(dir.path())?;
    let count = "SELECT count(*) FROM registrations";
    let refused = tablesql(dir.path()).args(["query", count]).output()?;
    assert_eq!(refused.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("format version 1") && stderr.contains("tablesql migrate"),
        "{stderr}"
    );
    let migrated = stdout_of(tablesql(dir.path()).arg("migrate"))?;
    assert!(
        migrated.contains("migrated 5 tables from format 1"),
        "{migrated}"
    );
    let answer = stdout_of(tablesql(dir.path()).args(["query", "--format", "csv", count]))?;
    assert!(answer.contains("108"), "{answer}");
    let again = stdout_of(tablesql(dir.path()).arg("migrate"))?;
    assert!(again.contains("in format 2 already"), "{again}");
    Ok(())
}
