//! The differential test: random tables loaded identically into PostgreSQL
//! 15 and into mapped tablesql tables, random queries with subqueries
//! (scalar, EXISTS, IN, ANY/ALL; correlated on one or two columns, by
//! equality or not, nested; in SELECT lists, WHERE and HAVING; with
//! aggregates, CASE, BETWEEN, IN lists, ORDER BY and LIMIT), each run on
//! PostgreSQL, on tablesql in-process and on tablesql over the wire. Every
//! query must give PostgreSQL's rows, or a clear error from tablesql (a
//! SQLSTATE other than XX000), never other rows. Where PostgreSQL fails
//! with a data or cardinality exception (classes 22 and 21), tablesql may
//! also answer: whether such an error is met depends on the order in which
//! expressions are evaluated, which SQL leaves to the implementation. A failure is shrunk (rows
//! removed while it still fails) and saved under the target directory.
//!
//! A second test runs random scenarios of DDL and DML (`scenario.rs`:
//! plain tables with and without keys, SERIAL, INSERT with RETURNING,
//! INSERT ... SELECT *, UPDATE and DELETE by a condition or a subquery,
//! ALTER TABLE ADD COLUMN, views, TRUNCATE) on both, statement by statement,
//! and compares every answer and every table after it.
//!
//! `scripts/test` starts PostgreSQL (`scripts/postgres`) and names it in
//! `TABLESQL_TEST_POSTGRES`. `TABLESQL_DIFF_SEED` and `TABLESQL_DIFF_QUERIES`
//! change the seed and the number of queries (default 5,000);
//! `TABLESQL_DIFF_SCENARIOS` the number of scenarios (default 60).

mod generate;
mod indexed;
mod joins;
mod names;
mod scenario;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use tablesql::datafusion::arrow::array::RecordBatch;
use tablesql::datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
use tablesql::server::{AuthMode, Server, ServerConfig};
use tablesql::storage::{EmbeddedStore, TableStore};
use tablesql::{Engine, EngineOptions, Session};
use tokio_postgres::{Client, NoTls, SimpleQueryMessage};

use generate::{Data, Generator, TABLES};

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// Queries per data set: each set is loaded once into both systems.
const QUERIES_PER_DATA: usize = 50;

/// A result: its rows (values as text, NULL as `None`) or an error's SQLSTATE
/// and message.
#[derive(Debug, Clone)]
enum Answer {
    Rows(Vec<Vec<Option<String>>>),
    Error { code: String, message: String },
}

/// The systems under test.
struct Systems {
    postgres: Client,
    engine: Session,
    wire: Client,
    /// The local Table service the engine's store talks to, if it does.
    _service: Option<crate::local_service::Local>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subqueries_answer_as_postgresql_does() -> TestResult {
    let total: usize = env_number("TABLESQL_DIFF_QUERIES", 5_000);
    subqueries(Systems::start(&postgres()?).await?, total).await
}

/// The faults of the local Table service the differential tests meet on
/// both profiles: busy answers with and without hints, empty pages, a
/// short query budget and lost answers to applied writes.
const SERVICE_FAULTS: &[&str] = &[
    "busy=0.03",
    "retry_hint=0.5",
    "empty_pages=0.05",
    "partition_rate=200000",
    "query_budget_ms=20",
    "lost_answers=0.05",
];

/// Whether a failure is a write's that may have been applied: its answer
/// was lost and the retry met what it would have done, which no read can
/// tell from another client's write (a conditional delete, found gone).
/// PostgreSQL answers there; the table read next shows the write applied.
fn answer_lost(code: &str, message: &str) -> bool {
    code == "58000" && message.contains("may have been applied")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subqueries_answer_as_postgresql_does_on_the_local_table_service() -> TestResult {
    use tablesql::tableservice::Profile;
    for profile in [Profile::Storage, Profile::Cosmos] {
        let local = crate::local_service::Local::start(profile, SERVICE_FAULTS)
            .map_err(|e| e.to_string())?;
        let schema = format!("svc_subq_{profile:?}").to_lowercase();
        let systems = Systems::on_service(&postgres()?, &schema, local).await?;
        subqueries(systems, 150)
            .await
            .map_err(|e| format!("{profile:?}: {e}"))?;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ddl_and_dml_answer_as_postgresql_does_on_the_local_table_service() -> TestResult {
    use tablesql::tableservice::Profile;
    for profile in [Profile::Storage, Profile::Cosmos] {
        let local = crate::local_service::Local::start(profile, SERVICE_FAULTS)
            .map_err(|e| e.to_string())?;
        let schema = format!("svc_ddl_{profile:?}").to_lowercase();
        let systems = Systems::on_service(&postgres()?, &schema, local).await?;
        ddl_and_dml(systems, 6)
            .await
            .map_err(|e| format!("{profile:?}: {e}"))?;
    }
    Ok(())
}

async fn subqueries(systems: Systems, total: usize) -> TestResult {
    let seed: u64 = env_number("TABLESQL_DIFF_SEED", 13);
    systems.create_tables().await?;
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    // Per kind of outcome: how many, and the first query of that kind.
    let mut tally: BTreeMap<String, (usize, String)> = BTreeMap::new();
    let mut run = 0;
    while run < total {
        let data = generate::data(&mut rng);
        systems.load(&data).await?;
        for _ in 0..QUERIES_PER_DATA.min(total - run) {
            run += 1;
            let sql = Generator::new(&mut rng).query();
            if std::env::var_os("TABLESQL_DIFF_VERBOSE").is_some() {
                eprintln!("{run}: {sql}");
            }
            let outcome = systems.check(&sql).await?;
            if let Some(failure) = outcome.failure {
                let report = systems
                    .shrink_and_save(&data, &sql, &failure, seed, run)
                    .await?;
                return Err(report.into());
            }
            tally.entry(outcome.kind).or_insert((0, sql.clone())).0 += 1;
        }
    }
    eprintln!("differential test, seed {seed}: {total} queries");
    for (kind, (n, example)) in &tally {
        eprintln!("  {n:>5}  {kind}\n         e.g. {example}");
    }
    // A tablesql that refused everything would pass the comparison: at
    // most 2% may be refusals, and most queries must give rows on both.
    let count = |prefix: &str| -> usize {
        tally
            .iter()
            .filter(|(kind, _)| kind.starts_with(prefix))
            .map(|(_, (n, _))| n)
            .sum()
    };
    let (agreed, refused) = (count("rows"), count("refused"));
    assert!(
        refused * 100 <= total * 2 && agreed * 100 >= total * 90,
        "{agreed} of {total} queries gave rows on both, {refused} were refused by tablesql alone"
    );
    Ok(())
}

/// DDL and DML as an application sends them (`scenario.rs`): each statement
/// runs on PostgreSQL and once on tablesql, by turns in-process and over the
/// wire; its answer (rows, RETURNING's rows in any order, or an error on
/// both) and then every row of the table, read both ways, must be
/// PostgreSQL's. No statement of these shapes may be refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ddl_and_dml_answer_as_postgresql_does() -> TestResult {
    let scenarios: usize = env_number("TABLESQL_DIFF_SCENARIOS", 60);
    ddl_and_dml(Systems::start(&postgres()?).await?, scenarios).await
}

async fn ddl_and_dml(systems: Systems, scenarios: usize) -> TestResult {
    let seed: u64 = env_number("TABLESQL_DIFF_SEED", 13);
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut statements = 0;
    let mut both_failed = Vec::new();
    let mut ambiguous = 0;
    for n in 0..scenarios {
        let s = scenario::scenario(&mut rng, &format!("ddl{n}"));
        let first = scenario::Scenario {
            columns: s.initial.clone(),
            ..s.clone()
        };
        let mut run = vec![(s.create(), first.read_all())];
        run.extend(s.steps.iter().cloned());
        let shown: Vec<String> = run.iter().map(|(step, _)| step.clone()).collect();
        for (i, (step, read)) in run.iter().enumerate() {
            for sql in step.split("; ") {
                statements += 1;
                let expected = simple_query(&systems.postgres, sql).await;
                let answer = if i % 2 == 0 {
                    systems.in_process(sql).await
                } else {
                    simple_query(&systems.wire, sql).await
                };
                let path = if i % 2 == 0 { "in-process" } else { "wire" };
                let agree = match (&expected, &answer) {
                    (Answer::Rows(e), Answer::Rows(a)) => {
                        // A command's answer in-process is a batch without
                        // columns; over the wire, no rows.
                        let columns = |rows: &[Vec<Option<String>>]| -> Vec<Vec<Option<String>>> {
                            rows.iter().filter(|r| !r.is_empty()).cloned().collect()
                        };
                        let (mut e, mut a) = (columns(e), columns(a));
                        // A write's count is a row in-process, a command
                        // tag over the wire; the table's read checks it.
                        let write = ["INSERT", "UPDATE", "DELETE"]
                            .iter()
                            .any(|w| sql.starts_with(w));
                        if write && !sql.contains("RETURNING") {
                            a.clear();
                        }
                        if sql.contains("RETURNING") {
                            e.sort();
                            a.sort();
                        }
                        same_rows(&e, &a)
                    }
                    (Answer::Error { .. }, Answer::Error { .. }) => {
                        both_failed.push(sql.to_owned());
                        true
                    }
                    // A write whose answer the service lost, and whose
                    // retry met what it had done, says so; the table read
                    // next shows whether it was applied, once.
                    (Answer::Rows(_), Answer::Error { code, message })
                        if answer_lost(code, message) =>
                    {
                        ambiguous += 1;
                        true
                    }
                    _ => false,
                };
                if !agree {
                    return Err(format!(
                        "seed {seed}, scenario {n}, {path}: `{sql}`\n  tablesql {answer:?}\n  PostgreSQL {expected:?}\n  after: {}",
                        shown[..i].join(";\n    ")
                    )
                    .into());
                }
            }
            let expected = simple_query(&systems.postgres, read).await;
            for (path, answer) in [
                ("in-process", systems.in_process(read).await),
                ("wire", simple_query(&systems.wire, read).await),
            ] {
                let agree = matches!((&expected, &answer),
                    (Answer::Rows(e), Answer::Rows(a)) if same_rows(e, a));
                if !agree {
                    return Err(format!(
                        "seed {seed}, scenario {n}, {path}: the table after `{step}`\n  tablesql {answer:?}\n  PostgreSQL {expected:?}\n  steps: {}",
                        shown[..=i].join(";\n    ")
                    )
                    .into());
                }
            }
        }
        for sql in [format!("DROP TABLE {}", s.table)] {
            simple_query(&systems.postgres, &sql).await;
            systems.in_process(&sql).await;
        }
    }
    eprintln!(
        "ddl and dml differential, seed {seed}: {scenarios} scenarios, {statements} statements, {} failed on both, e.g. {:?}; {ambiguous} writes said they may have been applied",
        both_failed.len(),
        both_failed.first()
    );
    // The scenarios are written to succeed: a comparison of errors alone
    // would prove little.
    assert!(
        both_failed.len() * 100 <= statements,
        "{} of {statements} statements failed on both",
        both_failed.len()
    );
    Ok(())
}

/// The PostgreSQL the answers are compared with (`scripts/test` starts it).
fn postgres() -> Result<String, &'static str> {
    std::env::var("TABLESQL_TEST_POSTGRES").map_err(|_| {
        "TABLESQL_TEST_POSTGRES is not set, so there is no PostgreSQL to compare with: \
         run the tests with ./scripts/test (scripts/postgres starts one)"
    })
}

fn env_number<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// What one query did.
struct Outcome {
    /// `rows`, `both failed`, or the SQLSTATE tablesql refused with.
    kind: String,
    failure: Option<String>,
}

impl Systems {
    async fn start(postgres: &str) -> Result<Self, Box<dyn std::error::Error>> {
        let store: Arc<dyn TableStore> = Arc::new(EmbeddedStore::in_memory()?);
        Self::over(postgres, None, store, None).await
    }

    /// The engine over the Azure client on a local Table service; on
    /// PostgreSQL, the tables of a schema of its own, so that it runs beside
    /// the tests on the embedded store.
    async fn on_service(
        postgres: &str,
        schema: &str,
        local: crate::local_service::Local,
    ) -> Result<Self, Box<dyn std::error::Error>> {
        let store: Arc<dyn TableStore> = Arc::new(local.store().map_err(|e| e.to_string())?);
        Self::over(postgres, Some(schema), store, Some(local)).await
    }

    async fn over(
        postgres: &str,
        schema: Option<&str>,
        store: Arc<dyn TableStore>,
        service: Option<crate::local_service::Local>,
    ) -> Result<Self, Box<dyn std::error::Error>> {
        let (pg, connection) = tokio_postgres::connect(postgres, NoTls).await?;
        tokio::spawn(connection);
        if let Some(schema) = schema {
            pg.batch_execute(&format!(
                "DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}; SET search_path TO {schema}"
            ))
            .await?;
        }
        let engine = Engine::with_store(store, EngineOptions::default()).await?;
        let listen: SocketAddr = "127.0.0.1:0".parse()?;
        let server =
            Server::bind(engine.clone(), ServerConfig::new(listen, AuthMode::Trust)).await?;
        let engine = engine.session();
        let addr = server.local_addr()?;
        tokio::spawn(server.run());
        let conninfo = format!(
            "host={} port={} user=tablesql dbname=tablesql",
            addr.ip(),
            addr.port()
        );
        let (wire, connection) = tokio_postgres::connect(&conninfo, NoTls).await?;
        tokio::spawn(connection);
        Ok(Self {
            postgres: pg,
            engine,
            wire,
            _service: service,
        })
    }

    async fn create_tables(&self) -> TestResult {
        for (i, t) in TABLES.iter().enumerate() {
            let columns =
                "k INT NOT NULL, g INT NOT NULL, a INT, b INT, c TEXT, PRIMARY KEY (g, k)";
            self.postgres
                .batch_execute(&format!(
                    "DROP TABLE IF EXISTS {t}; CREATE TABLE {t} ({columns})"
                ))
                .await?;
            self.engine
                .collect(&format!(
                    "CREATE TABLE {t} ({columns}) WITH (storage_table = 'Diff{i}', \
                     partition_key = 'G{{g:02}}', row_key = 'K{{k:04}}')"
                ))
                .await?;
        }
        Ok(())
    }

    async fn load(&self, data: &Data) -> TestResult {
        for (t, rows) in TABLES.iter().zip(data) {
            self.postgres
                .batch_execute(&format!("DELETE FROM {t}"))
                .await?;
            let clear = format!("DELETE FROM {t}");
            match self.engine.collect(&clear).await {
                Err(e) if answer_lost(e.sqlstate(), &e.to_string()) => {
                    let left = self.engine.collect(&format!("SELECT 1 FROM {t}")).await?;
                    if left.iter().any(|b| b.num_rows() > 0) {
                        return Err(format!("`{clear}` left rows after {e}").into());
                    }
                }
                other => {
                    other?;
                }
            }
            if rows.is_empty() {
                continue;
            }
            let values: Vec<String> = rows.iter().map(|r| r.values()).collect();
            let insert = format!(
                "INSERT INTO {t} (k, g, a, b, c) VALUES {}",
                values.join(", ")
            );
            self.postgres.batch_execute(&insert).await?;
            self.engine.collect(&insert).await?;
        }
        Ok(())
    }

    /// Runs `sql` everywhere and compares.
    async fn check(&self, sql: &str) -> Result<Outcome, Box<dyn std::error::Error>> {
        let expected = simple_query(&self.postgres, sql).await;
        let mut kind = "rows".to_owned();
        for (path, answer) in [
            ("in-process", self.in_process(sql).await),
            ("wire", simple_query(&self.wire, sql).await),
        ] {
            match (&expected, &answer) {
                (Answer::Rows(e), Answer::Rows(a)) if same_rows(e, a) => {}
                (Answer::Error { .. }, Answer::Error { .. }) => kind = "both failed".to_owned(),
                // A data exception (22: out of range, division by zero) or a
                // cardinality one (21: two rows for a scalar subquery) is met
                // only if that expression is evaluated for that row, and SQL
                // leaves the order of evaluation open: PostgreSQL may test
                // the subquery before the EXISTS that excludes the row.
                (Answer::Error { code, .. }, Answer::Rows(_))
                    if code.starts_with("21") || code.starts_with("22") =>
                {
                    kind = format!("PostgreSQL alone failed, {code}");
                }
                (Answer::Rows(_), Answer::Error { code, message }) if code != "XX000" => {
                    // The first line names the refusal; the tally shows which.
                    let first = message.lines().next().unwrap_or_default();
                    kind = format!("refused {code}: {first}");
                }
                _ => {
                    return Ok(Outcome {
                        kind,
                        failure: Some(format!(
                            "{path}: tablesql answered\n{answer:?}\nPostgreSQL answered\n{expected:?}"
                        )),
                    });
                }
            }
        }
        Ok(Outcome {
            kind,
            failure: None,
        })
    }

    async fn in_process(&self, sql: &str) -> Answer {
        match self.engine.collect(sql).await {
            Ok(batches) => Answer::Rows(batches.iter().flat_map(batch_rows).collect()),
            Err(e) => Answer::Error {
                code: e.sqlstate().to_owned(),
                message: e.to_string(),
            },
        }
    }

    /// Removes rows while the query still fails, then writes the case to a
    /// file; returns the report.
    async fn shrink_and_save(
        &self,
        data: &Data,
        sql: &str,
        failure: &str,
        seed: u64,
        run: usize,
    ) -> Result<String, Box<dyn std::error::Error>> {
        let mut data = data.clone();
        let mut failure = failure.to_owned();
        let mut progress = true;
        while progress {
            progress = false;
            for t in 0..data.len() {
                let mut i = 0;
                while i < data[t].len() {
                    let mut smaller = data.clone();
                    smaller[t].remove(i);
                    self.load(&smaller).await?;
                    match self.check(sql).await?.failure {
                        Some(f) => {
                            data = smaller;
                            failure = f;
                            progress = true;
                        }
                        None => i += 1,
                    }
                }
            }
        }
        let mut case = format!("-- seed {seed}, query {run}\n");
        for (t, rows) in TABLES.iter().zip(&data) {
            let values: Vec<String> = rows.iter().map(|r| r.values()).collect();
            case += &format!("-- {t}: {}\n", values.join(", "));
        }
        case += &format!("{sql};\n-- {}\n", failure.replace('\n', "\n-- "));
        let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("differential");
        std::fs::create_dir_all(&dir)?;
        let path = dir.join(format!("seed{seed}-query{run}.sql"));
        std::fs::write(&path, &case)?;
        Ok(format!(
            "a different answer (saved in {}):\n{case}",
            path.display()
        ))
    }
}

async fn simple_query(client: &Client, sql: &str) -> Answer {
    match client.simple_query(sql).await {
        Ok(messages) => Answer::Rows(
            messages
                .iter()
                .filter_map(|m| match m {
                    SimpleQueryMessage::Row(row) => Some(
                        (0..row.len())
                            .map(|i| row.get(i).map(str::to_owned))
                            .collect(),
                    ),
                    _ => None,
                })
                .collect(),
        ),
        Err(e) => match e.as_db_error() {
            Some(db) => Answer::Error {
                code: db.code().code().to_owned(),
                message: db.message().to_owned(),
            },
            None => Answer::Error {
                code: "XX000".to_owned(),
                message: e.to_string(),
            },
        },
    }
}

fn batch_rows(batch: &RecordBatch) -> Vec<Vec<Option<String>>> {
    let options = FormatOptions::default();
    let formatters: Vec<_> = batch
        .columns()
        .iter()
        .map(|c| ArrayFormatter::try_new(c.as_ref(), &options))
        .collect::<Result<_, _>>()
        .unwrap_or_default();
    (0..batch.num_rows())
        .map(|r| {
            batch
                .columns()
                .iter()
                .zip(&formatters)
                // Logical nulls: a NULL-typed column has no null buffer.
                .map(|(c, f)| {
                    let null = c.logical_nulls().is_some_and(|n| n.is_null(r));
                    (!null).then(|| f.value(r).to_string())
                })
                .collect()
        })
        .collect()
}

/// Rows in the same order with the same values: numbers compared as
/// numbers (PostgreSQL's avg of integers is numeric, `2.5000000000000000`;
/// tablesql's a double, `2.5`), booleans in either spelling.
fn same_rows(expected: &[Vec<Option<String>>], actual: &[Vec<Option<String>>]) -> bool {
    expected.len() == actual.len()
        && expected.iter().zip(actual).all(|(e, a)| {
            e.len() == a.len()
                && e.iter().zip(a).all(|(e, a)| match (e, a) {
                    (None, None) => true,
                    (Some(e), Some(a)) => same_value(e, a),
                    _ => false,
                })
        })
}

fn same_value(e: &str, a: &str) -> bool {
    if e == a {
        return true;
    }
    let truth = |v: &str| match v {
        "t" | "true" => Some(true),
        "f" | "false" => Some(false),
        _ => None,
    };
    if let (Some(x), Some(y)) = (truth(e), truth(a)) {
        return x == y;
    }
    match (e.parse::<f64>(), a.parse::<f64>()) {
        // `Infinity` and `inf` are one value; NaN is not, and is compared as text.
        (Ok(x), Ok(y)) => x == y || (x - y).abs() <= 1e-9 * x.abs().max(1.0),
        _ => false,
    }
}
