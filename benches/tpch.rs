//! TPC-H at scale factor 0.1 (issue 38): the 22 queries on tablesql (an
//! in-process `Engine` over the embedded store) and on PostgreSQL 15 (over
//! loopback), their answers compared and their times side by side.
//!
//! The data comes from the `tpchgen` crate (a dev-dependency: pure Rust with
//! no dependencies of its own, about 5,000 lines plus the answer tables it
//! ships, a few seconds of CI's build), the generator the DataFusion
//! community maintains, which writes what the spec's `dbgen` writes. The
//! PyPI `tpchgen-cli` would add no build time, but the bench would need the
//! project's Python environment at run time and a file per table.
//!
//! The mapping (`TPCH_LAYOUT=tuned`, the default):
//! - `region`, `nation`, `part`, `supplier`, `customer`, `orders`: plain
//!   `CREATE TABLE ... PRIMARY KEY (x_key)`, as an ORM writes it: the RowKey
//!   is the key, the PartitionKey its bucket among 16. A join that reads one
//!   of them by key reads one entity; a scan reads 16 partitions, in chunks
//!   between the guideposts `ANALYZE` keeps.
//! - `lineitem` (600,000 rows) and `partsupp` (80,000): one partition each,
//!   the RowKey the primary key (`{l_orderkey:+10}__{l_linenumber:+10}`,
//!   `{ps_partkey:+10}__{ps_suppkey:+10}`). The plain mapping of their
//!   composite keys partitions by the first column: 150,000 partitions of
//!   4 lines and 20,000 of 4 suppliers, so every scan (most queries scan
//!   lineitem) is one request per partition. In one partition an order's
//!   lines, or a part's suppliers, are still one key range (what a join by
//!   `l_orderkey` or `ps_partkey` reads), and a scan after `ANALYZE` fans
//!   out over the guideposts' chunks (400 at most). The cost is on Azure's
//!   side: one partition is served by one server and takes about 2,000
//!   writes a second, which a fact table loaded in bulk and then read can
//!   afford. `TPCH_LAYOUT=plain` loads the plain mapping for every table
//!   instead, for comparison.
//!
//! Text columns are VARCHAR where the spec says CHAR (`schema`'s doc says why).
//!
//! The queries are the spec's, with the validation run's substitution
//! parameters (Q11's fraction is 0.0001 / SF), in `tpch/queries/`; Q15's
//! view is written as a common table expression, the variant the spec
//! allows. Each runs once to warm up and then `TPCH_RUNS` times (3) on
//! each system; the median is reported. A query slower than 30 s runs once.
//!
//! Run with `cargo bench --bench tpch`, PostgreSQL from
//! `TABLESQL_TEST_POSTGRES` (default the one `./scripts/postgres start`
//! runs). The first run generates and loads the data (in a debug build:
//! 13 s into PostgreSQL, 3.5 min into tablesql, of which 2 min 40 s is
//! lineitem's load and `ANALYZE`); later runs reuse both. `cargo bench --bench tpch -- 1 6`
//! runs Q1 and Q6 only. The stores, the plans (`plans/qNN.txt`: tablesql's
//! EXPLAIN and EXPLAIN ANALYZE, PostgreSQL's EXPLAIN) and the report
//! (`report.md`) are under `<target>/tpch/`.

// Tests and benchmarks may unwrap: a failure names its line.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "tpch/compare.rs"]
mod compare;
#[path = "tpch/load.rs"]
mod load;
#[path = "tpch/schema.rs"]
mod schema;

use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use compare::{Verdict, batch_rows, plan_summary, postgres_rows, verdict};
use tablesql::Session;
use tokio_postgres::Client;

const SCALE: f64 = 0.1;
/// A query whose warm-up run takes longer is timed by that run alone.
const SLOW: Duration = Duration::from_secs(30);

const QUERIES: [&str; 22] = [
    include_str!("tpch/queries/q01.sql"),
    include_str!("tpch/queries/q02.sql"),
    include_str!("tpch/queries/q03.sql"),
    include_str!("tpch/queries/q04.sql"),
    include_str!("tpch/queries/q05.sql"),
    include_str!("tpch/queries/q06.sql"),
    include_str!("tpch/queries/q07.sql"),
    include_str!("tpch/queries/q08.sql"),
    include_str!("tpch/queries/q09.sql"),
    include_str!("tpch/queries/q10.sql"),
    include_str!("tpch/queries/q11.sql"),
    include_str!("tpch/queries/q12.sql"),
    include_str!("tpch/queries/q13.sql"),
    include_str!("tpch/queries/q14.sql"),
    include_str!("tpch/queries/q15.sql"),
    include_str!("tpch/queries/q16.sql"),
    include_str!("tpch/queries/q17.sql"),
    include_str!("tpch/queries/q18.sql"),
    include_str!("tpch/queries/q19.sql"),
    include_str!("tpch/queries/q20.sql"),
    include_str!("tpch/queries/q21.sql"),
    include_str!("tpch/queries/q22.sql"),
];

fn main() {
    // Query numbers to run; cargo's own flags (`--bench`) are not ours.
    let chosen: Vec<usize> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .filter_map(|a| a.trim_start_matches(['q', 'Q']).parse().ok())
        .collect();
    let runs: usize = std::env::var("TPCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let layout = schema::Layout::from_env();
    let conninfo = std::env::var("TABLESQL_TEST_POSTGRES")
        .unwrap_or_else(|_| "host=127.0.0.1 port=15433 user=postgres dbname=postgres".into());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let dir = load::work_dir();
    let plans = dir.join("plans");
    std::fs::create_dir_all(&plans).expect("plans dir");
    rt.block_on(async {
        let mut rows = load::Rows::new(SCALE);
        let pg = load::postgres(&mut rows, SCALE, &conninfo).await;
        let engine = load::tablesql(&mut rows, SCALE, layout, &dir).await;
        drop(rows);
        let mut report = "| query | tablesql ms | PostgreSQL ms | ratio | answer | tablesql plan: joins, then scans (table:access) |\n\
             | --- | --- | --- | --- | --- | --- |\n".to_string();
        let mut findings = String::new();
        for (i, sql) in QUERIES.iter().enumerate() {
            let n = i + 1;
            if !chosen.is_empty() && !chosen.contains(&n) {
                continue;
            }
            let line = query(&engine, &pg, n, sql, runs, &plans, &mut findings).await;
            println!("{line}");
            report.push_str(&line);
            report.push('\n');
        }
        println!("\n{findings}");
        let header = format!(
            "TPC-H SF {SCALE}, layout {}, median of {runs} runs after a warm-up\n\n",
            layout.name()
        );
        std::fs::write(dir.join("report.md"), format!("{header}{report}\n{findings}"))
            .expect("report");
        eprintln!("report and plans in {}", dir.display());
    });
}

/// Runs query `n` on both systems: compares, times, writes its plans;
/// its report line (and any finding's detail into `findings`).
async fn query(
    engine: &Session,
    pg: &Client,
    n: usize,
    sql: &str,
    runs: usize,
    plans: &Path,
    findings: &mut String,
) -> String {
    eprintln!("Q{n}");
    let expected = postgres_rows(pg, sql).await;
    let pg_ms = match &expected {
        Ok(_) if runs == 0 => "-".into(),
        Ok(_) => {
            let times = timed(runs, || async { postgres_rows(pg, sql).await.map(|_| ()) }).await;
            format!("{:.1}", times)
        }
        Err(_) => "error".into(),
    };
    let mut plan_text = String::new();
    let explain = engine.collect(&format!("EXPLAIN {sql}")).await;
    let summary = match &explain {
        Ok(batches) => {
            let physical = physical_plan(batches);
            let _ = writeln!(plan_text, "-- tablesql EXPLAIN\n{physical}");
            plan_summary(&physical)
        }
        Err(_) => String::new(),
    };
    let started = Instant::now();
    let first = engine.collect(sql).await;
    let warm = started.elapsed();
    let (ts_ms, answer) = match (&first, &expected) {
        (Err(e), _) => {
            let _ = writeln!(findings, "- Q{n} refused by tablesql: {e}");
            ("refused".to_owned(), "refused".to_owned())
        }
        (Ok(_), Err(e)) => {
            let _ = writeln!(findings, "- Q{n} PostgreSQL failed: {e}");
            (String::new(), "PostgreSQL failed".to_owned())
        }
        (Ok(batches), Ok(expected)) => {
            let actual = batch_rows(batches);
            let answer = match verdict(expected, &actual) {
                Verdict::Agrees => format!("agrees ({} rows)", actual.len()),
                Verdict::OtherOrder => {
                    let _ = writeln!(
                        findings,
                        "- Q{n}: the same rows in another order (ties of the ORDER BY?)"
                    );
                    format!("same rows, other order ({})", actual.len())
                }
                Verdict::Differs(d) => {
                    let _ = writeln!(findings, "- Q{n} DIFFERS: {d}");
                    "**differs**".to_owned()
                }
            };
            let ms = if runs == 0 {
                format!("{:.1} (warm-up)", warm.as_secs_f64() * 1e3)
            } else if warm > SLOW {
                format!("{:.1} (1 run)", warm.as_secs_f64() * 1e3)
            } else {
                let times = timed(runs, || async {
                    engine
                        .collect(sql)
                        .await
                        .map(|_| ())
                        .map_err(|e| e.to_string())
                })
                .await;
                format!("{times:.1}")
            };
            (ms, answer)
        }
    };
    if first.is_ok()
        && let Ok(batches) = engine.collect(&format!("EXPLAIN ANALYZE {sql}")).await
    {
        let _ = writeln!(
            plan_text,
            "-- tablesql EXPLAIN ANALYZE\n{}",
            physical_plan(&batches)
        );
    }
    if let Ok(rows) = postgres_rows(pg, &format!("EXPLAIN {sql}")).await {
        let lines: Vec<String> = rows.into_iter().filter_map(|r| r[0].clone()).collect();
        let _ = writeln!(plan_text, "-- PostgreSQL EXPLAIN\n{}", lines.join("\n"));
    }
    if let Err(e) = &explain {
        let _ = writeln!(plan_text, "-- tablesql EXPLAIN failed: {e}");
    }
    let _ = std::fs::write(
        plans.join(format!("q{n:02}.txt")),
        format!("{sql}\n{plan_text}"),
    );
    let ratio = match (
        ts_ms.split(' ').next().map(str::parse::<f64>),
        pg_ms.parse::<f64>(),
    ) {
        (Some(Ok(t)), Ok(p)) if p > 0.0 => format!("{:.1}×", t / p),
        _ => String::new(),
    };
    format!("| Q{n} | {ts_ms} | {pg_ms} | {ratio} | {answer} | {summary} |")
}

/// The median of `runs` runs of `f`, in milliseconds (a failed run counts
/// as it took). `TPCH_RUNS=0` times nothing but the warm-up: a check of
/// the answers in a debug build.
async fn timed<F, Fut, E>(runs: usize, f: F) -> f64
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<(), E>>,
{
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs {
        let started = Instant::now();
        let _ = f().await;
        times.push(started.elapsed().as_secs_f64() * 1e3);
    }
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

/// The physical plan's text from an EXPLAIN's batches (`plan_type`, `plan`).
fn physical_plan(batches: &[tablesql::datafusion::arrow::array::RecordBatch]) -> String {
    let rows = batch_rows(batches);
    rows.iter()
        .filter(|r| {
            r.first()
                .and_then(|t| t.as_deref())
                .is_some_and(|t| t.contains("physical_plan") || t == "Plan with Metrics")
        })
        .filter_map(|r| r.get(1).cloned().flatten())
        .collect::<Vec<_>>()
        .join("\n")
}
