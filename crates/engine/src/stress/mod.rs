//! `tablesql stress`: the storage guidance's test of a PartitionKey made a
//! command. A copy of a mapped table (same columns, templates and indexes,
//! a storage table of its own) is loaded with the rows of one partition;
//! clients run a workload script (pgbench's syntax, `script`) against it
//! for a while; the report gives the entities/s that one partition served
//! for reads (GET) and writes (PUT), the latency of each run of the script,
//! the service's busy and timed-out answers and the retries, and the
//! verdict against the 2,000 entities/s a partition serves (`outcome`).
//! The copy is removed at the end, whatever happened.
//!
//! - `script`: workload scripts in pgbench's syntax.
//! - `outcome`: the figures and the verdict; pure.

mod outcome;
pub mod script;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use rand::SeedableRng;

pub use outcome::{Failures, Latency, StressReport, Verdict};
pub use script::Script;

use crate::engine::{Engine, EngineError, Session};
use crate::storage::{StorageError, TableName};

/// Why a stress test could not run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StressError {
    /// The workload script does not parse.
    #[error("script line {line}: {reason}")]
    Script {
        /// The line's number, from 1.
        line: usize,
        /// What is wrong with it.
        reason: String,
    },
    /// A `\set` could not be computed.
    #[error("script: {0}")]
    Evaluation(String),
    /// The options ask for nothing to run.
    #[error("{0}")]
    Options(String),
    /// Making, loading or removing the test table failed.
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// A client task died.
    #[error("a client task failed: {0}")]
    Client(String),
    /// The partition has no rows to copy.
    #[error("partition {partition:?} of {table} holds no rows to load the test table with")]
    EmptyPartition {
        /// The mapped table's SQL name.
        table: String,
        /// The PartitionKey.
        partition: String,
    },
    /// Interrupted (Ctrl-C) before the end.
    #[error("interrupted; the test table was removed")]
    Interrupted,
}

/// What to test.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct StressOptions {
    /// The mapped table whose mapping is tested (its SQL name).
    pub table: String,
    /// The PartitionKey whose rows are loaded into the test table.
    pub partition: String,
    /// The workload; `:table` names the test table in it.
    pub script: Script,
    /// Most rows copied into the test table.
    pub rows: u64,
    /// Clients running the script at once, each in a session of its own.
    pub clients: usize,
    /// How long they run.
    pub duration: Duration,
    /// The entities/s the partition is judged against.
    pub target_per_s: u64,
}

impl StressOptions {
    /// A test of `partition` of `table` under `script`: 1,000 rows, 8
    /// clients, 10 seconds, against 2,000 entities/s.
    pub fn new(table: impl Into<String>, partition: impl Into<String>, script: Script) -> Self {
        Self {
            table: table.into(),
            partition: partition.into(),
            script,
            rows: 1000,
            clients: 8,
            duration: Duration::from_secs(10),
            target_per_s: crate::engine::PARTITION_TARGET_PER_S,
        }
    }
}

/// The variables every script may use besides its own.
pub const BUILTINS: [&str; 2] = ["table", "client_id"];

/// Runs the test `options` describes on `engine`'s store; `progress` hears
/// what it is doing.
pub async fn run(
    engine: &Engine,
    options: &StressOptions,
    progress: impl Fn(&str),
) -> Result<StressReport, StressError> {
    if options.clients == 0 || options.duration.is_zero() {
        return Err(StressError::Options(
            "a stress test needs at least one client and a duration".into(),
        ));
    }
    let source = engine.table_def(&options.table).await?;
    let tag = unique_tag();
    let mut def = source.clone();
    def.name = format!("stress_{tag}");
    def.storage_table = TableName::new(format!("Stress{tag}"))
        .map_err(|e| EngineError::from(StorageError::from(e)))?;
    // The copy's rows come with their values; it makes no sequence of its own.
    for c in &mut def.columns {
        c.identity = None;
    }
    let (name, storage) = (def.name.clone(), def.storage_table.clone());
    let columns: Vec<String> = def.columns.iter().map(|c| quote(&c.name)).collect();
    if let Err(e) = engine.create_table(def, false).await {
        // It may have made the storage table before it failed.
        let _removed = engine.store().delete_table(&storage).await;
        return Err(e.into());
    }
    progress(&format!(
        "created the test table {name} (storage table {})",
        storage.as_str()
    ));
    // Ctrl-C stops the clients; the copy is removed all the same.
    let ran = tokio::select! {
        ran = load_and_run(engine, options, &name, &storage, &columns, &progress) => ran,
        _ = tokio::signal::ctrl_c() => Err(StressError::Interrupted),
    };
    // Removed whatever happened: the definition, then its entities.
    let dropped = engine.drop_table(&name).await;
    let deleted = engine.store().delete_table(&storage).await;
    let report = ran?;
    dropped?;
    deleted.map_err(EngineError::from)?;
    progress(&format!("removed the test table {name}"));
    Ok(report)
}

async fn load_and_run(
    engine: &Engine,
    options: &StressOptions,
    name: &str,
    storage: &TableName,
    columns: &[String],
    progress: &impl Fn(&str),
) -> Result<StressReport, StressError> {
    let list = columns.join(", ");
    let copy = format!(
        "INSERT INTO {} ({list}) SELECT {list} FROM {} WHERE \"PartitionKey\" = '{}' LIMIT {}",
        quote(name),
        quote(&options.table),
        options.partition.replace('\'', "''"),
        options.rows
    );
    let batches = engine.session().collect(&copy).await?;
    let loaded = rows_written(&batches);
    if loaded == 0 {
        return Err(StressError::EmptyPartition {
            table: options.table.clone(),
            partition: options.partition.clone(),
        });
    }
    progress(&format!(
        "loaded {loaded} rows of partition {:?}; running {} clients for {:?}",
        options.partition, options.clients, options.duration
    ));

    let before = engine.partition_traffic(storage, &options.partition);
    let counters_before = engine.store().service_counters();
    let start = Instant::now();
    let deadline = start + options.duration;
    // Dropped on an early return, the set aborts the clients still running.
    let mut tasks = tokio::task::JoinSet::new();
    for id in 0..options.clients {
        let session = engine.session();
        let script = options.script.clone();
        let vars = HashMap::from([
            ("table".to_owned(), quote(name)),
            ("client_id".to_owned(), id.to_string()),
        ]);
        tasks.spawn(client(session, script, vars, deadline, id as u64));
    }
    let mut runs = Vec::with_capacity(options.clients);
    while let Some(done) = tasks.join_next().await {
        runs.push(done.map_err(|e| StressError::Client(e.to_string()))??);
    }
    let elapsed = start.elapsed();
    let after = engine.partition_traffic(storage, &options.partition);
    let service = engine
        .store()
        .service_counters()
        .zip(counters_before)
        .map(|(a, b)| a.since(&b));
    Ok(outcome::report(
        options, loaded, elapsed, &before, &after, service, runs,
    ))
}

/// What one client did.
#[derive(Debug, Default)]
pub(crate) struct ClientRun {
    /// Each whole run of the script, in microseconds.
    pub latencies_us: Vec<u64>,
    pub statements: u64,
    pub failures: Failures,
}

/// One client: runs the script until `deadline`, a run that fails ending
/// at its failed statement.
async fn client(
    session: Session,
    script: Script,
    mut vars: HashMap<String, String>,
    deadline: Instant,
    seed: u64,
) -> Result<ClientRun, StressError> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut run = ClientRun::default();
    // A statement still running at the deadline may finish; one stuck
    // past this much more is a failure, so the test always ends.
    let grace = Duration::from_secs(60);
    while Instant::now() < deadline {
        let start = Instant::now();
        let mut ok = true;
        for step in script.steps(&mut vars, &mut rng)? {
            match step {
                script::Step::Sleep(d) => {
                    let until = (Instant::now() + d).min(deadline);
                    tokio::time::sleep_until(until.into()).await;
                }
                script::Step::Sql(sql) => {
                    let done =
                        tokio::time::timeout_at((deadline + grace).into(), session.collect(&sql))
                            .await;
                    match done {
                        Ok(Ok(_)) => run.statements += 1,
                        Ok(Err(e)) => {
                            run.failures.add(&e);
                            ok = false;
                            break;
                        }
                        Err(_) => {
                            run.failures.stuck += 1;
                            return Ok(run);
                        }
                    }
                }
            }
        }
        if ok {
            run.latencies_us.push(start.elapsed().as_micros() as u64);
        }
    }
    Ok(run)
}

/// A name no other test table has: the time in microseconds, in hex.
fn unique_tag() -> String {
    let micros = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros());
    format!("{:x}", micros & 0xff_ffff_ffff_ffff)
}

/// The count an INSERT answers with.
fn rows_written(batches: &[datafusion::arrow::array::RecordBatch]) -> u64 {
    use datafusion::arrow::array::{Array, UInt64Array};
    batches
        .first()
        .and_then(|b| b.columns().first())
        .and_then(|c| c.as_any().downcast_ref::<UInt64Array>())
        .filter(|c| !c.is_empty())
        .map_or(0, |c| c.value(0))
}

/// An SQL identifier, quoted.
fn quote(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}
