//! The join differential (issue 38): random scenarios of two or three
//! tables (`joins/tables.rs`: keys of several shapes, plain and mapped,
//! local and global indexes, NULLs and values no key holds in the join
//! columns) and random equi-joins between them (`joins/queries.rs`: inner,
//! left, right, semi, anti, three-table chains, with filters, ORDER BY and
//! LIMIT). Each query runs on PostgreSQL and on tablesql with
//! `tablesql.enable_lookup_join` = `always` (under a random
//! `tablesql.lookup_join_batch`, small ones crossing batch boundaries),
//! `off` and `on`: each must give PostgreSQL's rows (in order where the
//! query orders every output column, else as a multiset), on the memory
//! store, the embedded store and Azurite. A clear refusal (a SQLSTATE other
//! than XX000) is tolerated and counted, as the other differential tests
//! do, up to 2%; `EXPLAIN` tells how many plans read a side by key
//! (`LookupJoinExec`), and a third of the queries must under `always`.
//! Ordered outer joins leave out of their output the NULL-extended columns
//! their ON clause fixes, which DataFusion 55.2 sorts wrongly with lookup
//! joins off too (`joins/queries.rs` says how).
//!
//! A failure shrinks the rows (removed while the query still differs) and
//! prints, and saves under the target directory, the seed, the setting,
//! the tables' statements and rows, and the query. `TABLESQL_DIFF_SEED`
//! changes the seed, `TABLESQL_DIFF_JOIN_SCENARIOS` the number of scenarios
//! (default 12 of 12 queries each; a third as many on Azurite),
//! `TABLESQL_DIFF_VERBOSE` prints each query as it runs, and
//! `TABLESQL_DIFF_KEEP_GOING` prints each failure and runs on (the test
//! fails at the end), to find several in one run.

mod queries;
mod tables;

use std::collections::BTreeMap;
use std::sync::Arc;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tablesql::storage::{EmbeddedStore, MemoryStore, TableStore};
use tablesql::{Engine, EngineOptions, Session};
use tokio_postgres::Client;

use super::{Answer, TestResult, batch_rows, env_number, postgres, same_rows, simple_query};
use queries::Query;
use tables::{Statement, Table, pick};

type Error = Box<dyn std::error::Error>;

/// Queries per scenario: its tables are made and loaded once.
const QUERIES_PER_SCENARIO: usize = 12;

/// The settings of `tablesql.enable_lookup_join` each query runs under.
const MODES: [&str; 3] = ["always", "off", "on"];

/// `tablesql.lookup_join_batch` values: one row a batch, a few, the most.
const BATCHES: [usize; 5] = [1, 2, 3, 7, 1000];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn joins_answer_alike_with_lookup_joins_always_off_and_on_and_as_postgresql() -> TestResult {
    let seed: u64 = env_number("TABLESQL_DIFF_SEED", 13);
    let scenarios: usize = env_number("TABLESQL_DIFF_JOIN_SCENARIOS", 12);
    let mut stores: Vec<(&str, Arc<dyn TableStore>, usize)> = vec![
        ("memory", Arc::new(MemoryStore::new()), scenarios),
        ("embedded", Arc::new(EmbeddedStore::in_memory()?), scenarios),
    ];
    // Azurite: fewer scenarios, each request a round trip.
    if std::env::var_os("TABLESQL_TEST_AZURITE").is_some() {
        let account = crate::azurite::fresh_account()?;
        let store = tablesql::storage::AzureStore::new(account)?;
        stores.push(("azurite", Arc::new(store), scenarios.div_ceil(3)));
    }
    // Every store's tally is printed before any is judged.
    let mut tallies = Vec::new();
    for (label, store, n) in stores {
        let tally = run(label, store, n, seed).await?;
        tally.print(label, seed, n);
        tallies.push((label, tally));
    }
    for (label, tally) in tallies {
        assert_eq!(
            tally.differed, 0,
            "{label}: queries answered otherwise than PostgreSQL"
        );
        let runs = tally.queries * MODES.len();
        let refused: usize = tally.refused.values().map(|(n, _)| n).sum();
        assert!(
            refused * 100 <= runs * 2,
            "{label}: {refused} of {runs} runs were refused by tablesql"
        );
        // Most queries join on a key or an index's leading columns; a
        // third must read their inner side by key when told to always.
        let always = tally.kinds.values().map(|c| c[1]).sum::<usize>();
        assert!(
            always * 3 >= tally.queries,
            "{label}: only {always} of {} queries planned a LookupJoinExec under enable_lookup_join = always",
            tally.queries
        );
    }
    Ok(())
}

/// What a run's queries did.
#[derive(Debug, Default)]
struct Tally {
    queries: usize,
    /// Per kind of join, and per what the join fixes of the inner table:
    /// queries, and how many planned a `LookupJoinExec` under `always` and
    /// under `on`.
    kinds: BTreeMap<&'static str, [usize; 3]>,
    patterns: BTreeMap<&'static str, [usize; 3]>,
    both_failed: usize,
    /// Queries that answered otherwise than PostgreSQL (counted where
    /// `TABLESQL_DIFF_KEEP_GOING` runs on past them).
    differed: usize,
    /// Queries PostgreSQL answered with no rows.
    empty: usize,
    /// Per refusal (setting, SQLSTATE, first line): how many, and a query.
    refused: BTreeMap<String, (usize, String)>,
}

impl Tally {
    fn print(&self, label: &str, seed: u64, scenarios: usize) {
        let sum = |i: usize| self.kinds.values().map(|c| c[i]).sum::<usize>();
        eprintln!(
            "join differential on {label}, seed {seed}: {scenarios} scenarios, {} queries, \
             {} with a LookupJoinExec under always, {} under on; {} answered no rows, {} failed on both, \
             {} answered otherwise than PostgreSQL",
            self.queries,
            sum(1),
            sum(2),
            self.empty,
            self.both_failed,
            self.differed
        );
        eprintln!("  {:<34} {:>7} {:>7} {:>7}", "", "queries", "always", "on");
        for (name, c) in self.kinds.iter().chain(&self.patterns) {
            eprintln!("  {name:<34} {:>7} {:>7} {:>7}", c[0], c[1], c[2]);
        }
        for (refusal, (n, example)) in &self.refused {
            eprintln!("  {n:>5} refused, {refusal}\n         e.g. {example}");
        }
    }
}

/// PostgreSQL and one engine over the store under test; the engine's
/// session takes each setting in turn.
struct Systems {
    pg: Client,
    engine: Session,
}

/// How tablesql's answer compares with PostgreSQL's.
enum Verdict {
    Agree,
    BothFailed,
    Refused(String),
    Differ,
}

async fn run(
    label: &str,
    store: Arc<dyn TableStore>,
    scenarios: usize,
    seed: u64,
) -> Result<Tally, Error> {
    let (pg, connection) = tokio_postgres::connect(&postgres()?, tokio_postgres::NoTls).await?;
    tokio::spawn(connection);
    let engine = Engine::with_store(store, EngineOptions::default())
        .await?
        .session();
    let systems = Systems { pg, engine };
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut tally = Tally::default();
    let verbose = std::env::var_os("TABLESQL_DIFF_VERBOSE").is_some();
    let keep_going = std::env::var_os("TABLESQL_DIFF_KEEP_GOING").is_some();
    for n in 0..scenarios {
        let count = if rng.random_bool(0.5) { 2 } else { 3 };
        let mut tables: Vec<Table> = (0..count)
            .map(|i| {
                let name = format!("lj_{label}_{n}_t{i}");
                tables::table(&mut rng, &name, &format!("Lj{label}{n}t{i}"))
            })
            .collect();
        tables::link(&mut rng, &mut tables);
        let place = format!("{label}, seed {seed}, scenario {n}");
        systems
            .setup(&tables)
            .await
            .map_err(|e| format!("{place}: {e}\n{}", script(&tables, &rows_of(&tables))))?;
        for q in 0..QUERIES_PER_SCENARIO {
            let query = queries::query(&mut rng, &tables);
            let batch = *pick(&mut rng, &BATCHES);
            tally.queries += 1;
            tally.kinds.entry(query.kind).or_default()[0] += 1;
            tally.patterns.entry(query.pattern).or_default()[0] += 1;
            let expected = simple_query(&systems.pg, &query.sql).await;
            if matches!(&expected, Answer::Rows(rows) if rows.is_empty()) {
                tally.empty += 1;
            }
            if verbose {
                let rows = match &expected {
                    Answer::Rows(rows) => format!("{} rows", rows.len()),
                    Answer::Error { code, .. } => format!("error {code}"),
                };
                eprintln!("{place}, query {q} (batch {batch}, {rows}): {}", query.sql);
            }
            for mode in MODES {
                let answer = systems.answer(&query.sql, mode, batch).await?;
                match judge(&expected, &answer, query.ordered) {
                    Verdict::Agree => {}
                    Verdict::BothFailed => tally.both_failed += 1,
                    Verdict::Refused(why) => {
                        let entry = tally
                            .refused
                            .entry(format!("{mode}: {why}"))
                            .or_insert((0, query.sql.clone()));
                        entry.0 += 1;
                    }
                    Verdict::Differ => {
                        let report = systems
                            .report(&place, q, &tables, &query, mode, batch)
                            .await?;
                        if !keep_going {
                            return Err(report.into());
                        }
                        // The case is printed and saved; the scenario goes
                        // on with its rows back.
                        eprintln!("{report}");
                        tally.differed += 1;
                        systems.reload(&tables, &rows_of(&tables)).await?;
                        break;
                    }
                }
                let slot = match mode {
                    "always" => 1,
                    "on" => 2,
                    _ => continue,
                };
                if matches!(answer, Answer::Rows(_)) && systems.reads_by_key(&query.sql).await? {
                    tally.kinds.entry(query.kind).or_default()[slot] += 1;
                    tally.patterns.entry(query.pattern).or_default()[slot] += 1;
                }
            }
        }
        systems.drop(&tables).await;
    }
    Ok(tally)
}

/// Whether tablesql's answer is PostgreSQL's: the same rows, in order
/// where the query orders every output column, else as multisets.
fn judge(expected: &Answer, actual: &Answer, ordered: bool) -> Verdict {
    match (expected, actual) {
        (Answer::Rows(e), Answer::Rows(a)) => {
            let agree = if ordered {
                same_rows(e, a)
            } else {
                let (mut e, mut a) = (e.clone(), a.clone());
                e.sort();
                a.sort();
                same_rows(&e, &a)
            };
            if agree {
                Verdict::Agree
            } else {
                Verdict::Differ
            }
        }
        (Answer::Error { .. }, Answer::Error { .. }) => Verdict::BothFailed,
        (Answer::Rows(_), Answer::Error { code, message }) if code != "XX000" => {
            let first = message.lines().next().unwrap_or_default();
            Verdict::Refused(format!("{code}: {first}"))
        }
        _ => Verdict::Differ,
    }
}

impl Systems {
    /// tablesql's answer to `sql` under a lookup-join setting.
    async fn answer(&self, sql: &str, mode: &str, batch: usize) -> Result<Answer, Error> {
        self.engine
            .collect(&format!("SET tablesql.enable_lookup_join = {mode}"))
            .await?;
        self.engine
            .collect(&format!("SET tablesql.lookup_join_batch = {batch}"))
            .await?;
        Ok(match self.engine.collect(sql).await {
            Ok(batches) => Answer::Rows(batches.iter().flat_map(batch_rows).collect()),
            Err(e) => Answer::Error {
                code: e.sqlstate().to_owned(),
                message: e.to_string(),
            },
        })
    }

    /// The plan of `sql` under the session's settings, one line a row.
    async fn plan(&self, sql: &str) -> Result<String, Error> {
        let plan = self
            .engine
            .collect(&format!("EXPLAIN {sql}"))
            .await
            .map_err(|e| format!("EXPLAIN {sql}: {e}"))?;
        let lines: Vec<String> = plan
            .iter()
            .flat_map(batch_rows)
            .flatten()
            .flatten()
            .collect();
        Ok(lines.join("\n"))
    }

    /// Whether the plan reads a side of a join by key.
    async fn reads_by_key(&self, sql: &str) -> Result<bool, Error> {
        Ok(self.plan(sql).await?.contains("LookupJoinExec"))
    }

    /// Makes the tables, their indexes and rows on both systems; any
    /// statement that fails on either is the error.
    async fn setup(&self, tables: &[Table]) -> Result<(), String> {
        for t in tables {
            simple_query(&self.pg, &format!("DROP TABLE IF EXISTS {}", t.name)).await;
            for step in t.setup() {
                self.both(&step).await?;
            }
        }
        Ok(())
    }

    async fn both(&self, step: &Statement) -> Result<(), String> {
        if let Answer::Error { message, .. } = simple_query(&self.pg, &step.postgres).await {
            return Err(format!("PostgreSQL refused `{}`: {message}", step.postgres));
        }
        match self.engine.collect(&step.tablesql).await {
            Ok(_) => Ok(()),
            Err(e) => Err(format!("tablesql refused `{}`: {e}", step.tablesql)),
        }
    }

    /// Replaces every table's rows with `rows` on both systems.
    async fn reload(&self, tables: &[Table], rows: &[Vec<Vec<String>>]) -> Result<(), String> {
        for (t, rows) in tables.iter().zip(rows) {
            let delete = format!("DELETE FROM {}", t.name);
            self.both(&Statement {
                tablesql: delete.clone(),
                postgres: delete,
            })
            .await?;
            if let Some(insert) = t.insert(rows) {
                self.both(&insert).await?;
            }
        }
        Ok(())
    }

    async fn drop(&self, tables: &[Table]) {
        for t in tables {
            let drop = format!("DROP TABLE {}", t.name);
            simple_query(&self.pg, &drop).await;
            let _ = self.engine.collect(&drop).await;
        }
    }

    /// Whether `query` still differs from PostgreSQL under `mode`.
    async fn differs(&self, query: &Query, mode: &str, batch: usize) -> Result<bool, Error> {
        let expected = simple_query(&self.pg, &query.sql).await;
        let answer = self.answer(&query.sql, mode, batch).await?;
        Ok(matches!(
            judge(&expected, &answer, query.ordered),
            Verdict::Differ
        ))
    }

    /// Shrinks the rows while the query still differs, and returns the
    /// case (also saved under the target directory).
    async fn report(
        &self,
        place: &str,
        q: usize,
        tables: &[Table],
        query: &Query,
        mode: &str,
        batch: usize,
    ) -> Result<String, Error> {
        let plan = self
            .plan(&query.sql)
            .await
            .unwrap_or_else(|e| e.to_string());
        let mut rows = rows_of(tables);
        let mut progress = true;
        while progress {
            progress = false;
            for t in 0..rows.len() {
                let mut i = 0;
                while i < rows[t].len() {
                    let mut fewer = rows.clone();
                    fewer[t].remove(i);
                    self.reload(tables, &fewer).await?;
                    if self.differs(query, mode, batch).await? {
                        rows = fewer;
                        progress = true;
                    } else {
                        i += 1;
                    }
                }
            }
        }
        self.reload(tables, &rows).await?;
        let expected = simple_query(&self.pg, &query.sql).await;
        let answer = self.answer(&query.sql, mode, batch).await?;
        let case = format!(
            "-- {place}, query {q}: tablesql.enable_lookup_join = {mode}, \
             tablesql.lookup_join_batch = {batch} ({}, {})\n{}\n{};\n\
             -- tablesql:   {answer:?}\n-- PostgreSQL: {expected:?}\n-- the plan (before shrinking):\n-- {}\n",
            query.kind,
            query.pattern,
            script(tables, &rows),
            query.sql,
            plan.replace('\n', "\n-- ")
        );
        let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("differential");
        std::fs::create_dir_all(&dir)?;
        let path = dir.join(format!("joins-{}-q{q}.sql", place.replace([',', ' '], "")));
        std::fs::write(&path, &case)?;
        Ok(format!(
            "a different answer (rows shrunk; saved in {}):\n{case}",
            path.display()
        ))
    }
}

fn rows_of(tables: &[Table]) -> Vec<Vec<Vec<String>>> {
    tables.iter().map(|t| t.rows.clone()).collect()
}

/// The statements that make `tables` with `rows`, in tablesql's spelling
/// (PostgreSQL's drops each `WITH (...)`).
fn script(tables: &[Table], rows: &[Vec<Vec<String>>]) -> String {
    let mut lines = Vec::new();
    for (t, rows) in tables.iter().zip(rows) {
        lines.push(format!("-- {}: {}", t.name, t.shape));
        let shrunk = Table {
            rows: rows.clone(),
            ..t.clone()
        };
        lines.extend(
            shrunk
                .setup()
                .into_iter()
                .map(|s| format!("{};", s.tablesql)),
        );
    }
    lines.join("\n")
}
