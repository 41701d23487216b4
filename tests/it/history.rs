//! A history checker in the manner of Jepsen's Elle (list-append): clients
//! run transaction blocks over the wire against `tablesql serve`, each
//! block's invocation and completion recorded, while servers are killed
//! (SIGKILL) and, over Azurite, a fault proxy answers 503 and loses answers.
//! The checker then reads the final lists and looks for what REPEATABLE
//! READ excludes, instead of trusting an invariant the workload keeps.
//!
//! Each key holds a list of unique elements (a TEXT of space-separated
//! words). An append reads the key `FOR UPDATE` and writes the list with
//! its element at the end; a read reads it. Every block runs at REPEATABLE
//! READ over keys of one partition (one entity group transaction: what the
//! store makes atomic and isolated; docs/writes.md says why a block across
//! partitions is not isolated). A block ends `ok` (COMMIT answered), `fail`
//! (any failure before its COMMIT was sent, as a block's writes wait for
//! it, or a serialization failure, deadlock or lock refusal at COMMIT:
//! nothing written) or `info` (anything else at COMMIT: a lost connection,
//! 40003, 58000: it may or may not have committed). The anomalies looked
//! for:
//! - an aborted write seen (G1a): an element of a failed block in a list;
//! - a lost update: a list an `ok` block read or wrote that is not a prefix
//!   of the key's final list (a later writer wrote over a version it never
//!   read), or an `ok` append missing from it;
//! - a partial block: a block's appends present on some keys, not others;
//! - a fractured read: an `ok` block that saw another block's element on
//!   one key and not on another key that block appended to;
//! - a duplicate element (an append applied twice).
//!
//! Two set-ups: two servers over one Azurite account through the fault
//! proxy, one killed and replaced midway; and one server over the embedded
//! store, killed and started again on the same files. CI runs a small
//! history; `TABLESQL_HISTORY_BLOCKS` sets each client's block count for
//! a longer one.

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsString;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tokio_postgres::Client;

use crate::faults::{Fate, Proxy};
use crate::server::{Served, serve_store};

type TestResult<T = ()> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// Keys, all in one partition.
const KEYS: i32 = 6;
/// Concurrent clients.
const CLIENTS: usize = 6;
/// Blocks each client runs in CI.
const BLOCKS: usize = 20;
/// How long one block may take before its client gives it up (`info`).
const BLOCK_BOUND: Duration = Duration::from_secs(60);

/// One step of a block: what it did to a key.
#[derive(Debug, Clone)]
enum Step {
    Append(i32, String),
    Read(i32),
}

/// How a block ended.
#[derive(Debug, Clone, PartialEq)]
enum Outcome {
    /// Committed; per step, the list the step saw (an append: before it).
    Ok(Vec<Vec<String>>),
    /// Refused; nothing of it written.
    Fail(String),
    /// Unknown whether it committed.
    Info(String),
}

#[derive(Debug, Clone)]
struct Block {
    steps: Vec<Step>,
    outcome: Outcome,
}

/// How far the clients are: blocks done, and what each is doing (named
/// in the error if they stop moving).
struct Progress {
    done: AtomicUsize,
    doing: Mutex<Vec<String>>,
}

impl Progress {
    fn new() -> Self {
        Self {
            done: AtomicUsize::new(0),
            doing: Mutex::new(vec![String::new(); CLIENTS]),
        }
    }

    fn note(&self, c: usize, what: impl Into<String>) {
        if let Some(slot) = self
            .doing
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_mut(c)
        {
            *slot = what.into();
        }
    }

    fn doing(&self, c: usize) -> String {
        let doing = self.doing.lock().unwrap_or_else(|p| p.into_inner());
        doing.get(c).cloned().unwrap_or_default()
    }

    fn shown(&self) -> String {
        let doing = self.doing.lock().unwrap_or_else(|p| p.into_inner());
        format!(
            "{} blocks done; {}",
            self.done.load(Ordering::SeqCst),
            doing
                .iter()
                .enumerate()
                .map(|(c, d)| format!("client {c}: {d}"))
                .collect::<Vec<_>>()
                .join("; ")
        )
    }
}

/// Starts `serve` over one store, a new process at each call.
type Start = Box<dyn Fn() -> TestResult<Served> + Send + Sync>;

fn starter(store: OsString) -> Start {
    Box::new(move || Ok(serve_store(tempfile::tempdir()?, &store, &[]).map_err(|e| e.to_string())?))
}

/// The servers clients connect to; a killed one is replaced in place.
struct Servers {
    start: Start,
    running: Mutex<Vec<(SocketAddr, Option<Served>)>>,
}

impl Servers {
    fn new(start: Start) -> Self {
        Self {
            start,
            running: Mutex::new(Vec::new()),
        }
    }

    fn running(&self) -> std::sync::MutexGuard<'_, Vec<(SocketAddr, Option<Served>)>> {
        self.running.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts one more server; its address.
    fn add(&self) -> TestResult<SocketAddr> {
        let served = (self.start)()?;
        let addr = served.addr;
        self.running().push((addr, Some(served)));
        Ok(addr)
    }

    /// Kills server `i` (SIGKILL, as its drop does), its clients' blocks
    /// cut off, and starts another in its place.
    fn replace(&self, i: usize) -> TestResult {
        let killed = self.running().get_mut(i).and_then(|(_, s)| s.take());
        drop(killed);
        let next = (self.start)()?;
        if let Some(slot) = self.running().get_mut(i) {
            *slot = (next.addr, Some(next));
        }
        Ok(())
    }

    fn addr(&self, client: usize) -> Option<SocketAddr> {
        let running = self.running();
        (!running.is_empty()).then(|| running[client % running.len()].0)
    }
}

async fn connect(addr: SocketAddr) -> Result<Client, tokio_postgres::Error> {
    let client = crate::server::connect(&format!(
        "host={} port={} user=tablesql dbname=tablesql connect_timeout=10",
        addr.ip(),
        addr.port()
    ))
    .await?;
    // A wait past this ends on the server too (57014), so a block its
    // client gave up on lets go of its rows instead of holding them while
    // it waits.
    client
        .batch_execute("SET statement_timeout = 20000")
        .await?;
    Ok(client)
}

/// A connection to client `c`'s server, tried until one answers (a
/// server being replaced refuses for a while).
async fn reconnect(servers: &Servers, c: usize) -> TestResult<Client> {
    let mut deadline =
        crate::wait::Deadline::new(Duration::from_secs(120), "a server to connect to");
    loop {
        let seen = match servers.addr(c) {
            Some(addr) => match connect(addr).await {
                Ok(client) => return Ok(client),
                Err(e) => format!("{addr}: {e}"),
            },
            None => "no server".to_owned(),
        };
        deadline.again_async(seen).await?;
    }
}

/// The steps of a block: one or two appends, or reads of two or three keys.
fn plan(rng: &mut ChaCha8Rng, client: usize, n: usize) -> Vec<Step> {
    let mut keys: Vec<i32> = (0..KEYS).collect();
    let mut pick = |rng: &mut ChaCha8Rng| keys.swap_remove(rng.random_range(0..keys.len()));
    if rng.random_bool(0.6) {
        (0..rng.random_range(1..=2))
            .map(|i| Step::Append(pick(rng), format!("c{client}b{n}s{i}")))
            .collect()
    } else {
        (0..rng.random_range(2..=3))
            .map(|_| Step::Read(pick(rng)))
            .collect()
    }
}

fn words(v: &str) -> Vec<String> {
    v.split_whitespace().map(str::to_owned).collect()
}

/// Runs one block; `Err` is how it failed.
async fn run(
    client: &Client,
    steps: &[Step],
    note: impl Fn(String),
    committing: &AtomicBool,
) -> Result<Vec<Vec<String>>, tokio_postgres::Error> {
    note("BEGIN".into());
    client
        .batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        .await?;
    let mut seen = Vec::new();
    for step in steps {
        match step {
            Step::Append(k, element) => {
                note(format!("append {element} to {k}: SELECT FOR UPDATE"));
                let row = client
                    .query_one("SELECT v FROM lists WHERE k = $1 FOR UPDATE", &[k])
                    .await?;
                let list: String = row.get(0);
                let written = if list.is_empty() {
                    element.clone()
                } else {
                    format!("{list} {element}")
                };
                note(format!("append {element} to {k}: UPDATE"));
                client
                    .execute("UPDATE lists SET v = $1 WHERE k = $2", &[&written, k])
                    .await?;
                seen.push(words(&list));
            }
            Step::Read(k) => {
                note(format!("read {k}"));
                let row = client
                    .query_one("SELECT v FROM lists WHERE k = $1", &[k])
                    .await?;
                seen.push(words(&row.get::<_, String>(0)));
            }
        }
    }
    note("COMMIT".into());
    committing.store(true, Ordering::SeqCst);
    client.batch_execute("COMMIT").await?;
    Ok(seen)
}

/// What a failure says of the block: refused for certain, or unknown.
/// Before its COMMIT was sent, any failure is a refusal: a block's writes
/// are buffered until COMMIT, and a session that goes rolls back.
fn outcome_of(e: &tokio_postgres::Error, committing: bool) -> Outcome {
    if !committing {
        return Outcome::Fail(match e.code() {
            Some(c) => c.code().to_owned(),
            None => format!("before COMMIT: {e}"),
        });
    }
    match e.code().map(|c| c.code()) {
        // Serialization failure, deadlock, lock not available: the block
        // was refused before or by its one entity group transaction.
        Some(code @ ("40001" | "40P01" | "55P03")) => Outcome::Fail(code.to_owned()),
        Some(code) => Outcome::Info(format!("{code}: {e}")),
        None => Outcome::Info(e.to_string()),
    }
}

/// One client: `blocks` blocks, each recorded with its outcome.
async fn client_history(
    servers: Arc<Servers>,
    c: usize,
    blocks: usize,
    progress: Arc<Progress>,
) -> TestResult<Vec<Block>> {
    let mut rng = ChaCha8Rng::seed_from_u64(c as u64);
    let mut history = Vec::new();
    let mut client = reconnect(&servers, c).await?;
    for n in 0..blocks {
        let steps = plan(&mut rng, c, n);
        if client.is_closed() {
            client = reconnect(&servers, c).await?;
        }
        let note = |what: String| progress.note(c, format!("block {n}: {what}"));
        let committing = AtomicBool::new(false);
        let block = run(&client, &steps, note, &committing);
        let outcome = match tokio::time::timeout(BLOCK_BOUND, block).await {
            Ok(Ok(seen)) => Outcome::Ok(seen),
            Ok(Err(e)) => outcome_of(&e, committing.load(Ordering::SeqCst)),
            Err(_) => {
                let why = format!("no answer within {BLOCK_BOUND:?} ({})", progress.doing(c));
                match committing.load(Ordering::SeqCst) {
                    true => Outcome::Info(why),
                    false => Outcome::Fail(why),
                }
            }
        };
        if let Outcome::Info(_) | Outcome::Fail(_) = &outcome {
            // A broken connection is replaced; a live one leaves the block.
            progress.note(c, format!("block {n}: ROLLBACK after {outcome:?}"));
            let rolled_back = matches!(
                tokio::time::timeout(BLOCK_BOUND, client.batch_execute("ROLLBACK")).await,
                Ok(Ok(_))
            );
            if client.is_closed() || !rolled_back {
                client = reconnect(&servers, c).await?;
            }
        }
        history.push(Block { steps, outcome });
        progress.done.fetch_add(1, Ordering::SeqCst);
    }
    Ok(history)
}

/// The anomalies of a history, given each key's final list.
fn check(history: &[Block], finals: &BTreeMap<i32, Vec<String>>) -> Vec<String> {
    let mut anomalies = Vec::new();
    // Each element's block, and the keys each block appended to.
    let mut writer: HashMap<&str, usize> = HashMap::new();
    for (b, block) in history.iter().enumerate() {
        for step in &block.steps {
            if let Step::Append(_, e) = step {
                writer.insert(e, b);
            }
        }
    }
    let empty = Vec::new();
    let final_of = |k: &i32| finals.get(k).unwrap_or(&empty);
    for (k, list) in finals {
        let mut seen = std::collections::HashSet::new();
        for e in list {
            if !seen.insert(e) {
                anomalies.push(format!("key {k}: {e} appended twice: {list:?}"));
            }
            match writer.get(e.as_str()).map(|&b| &history[b].outcome) {
                None => anomalies.push(format!("key {k}: {e} was never appended")),
                Some(Outcome::Fail(code)) => anomalies.push(format!(
                    "aborted write seen (G1a): key {k} holds {e}, of a block refused with {code}"
                )),
                Some(_) => {}
            }
        }
    }
    for block in history {
        // All of a block's appends or none.
        let present: Vec<bool> = block
            .steps
            .iter()
            .filter_map(|s| match s {
                Step::Append(k, e) => Some(final_of(k).contains(e)),
                Step::Read(_) => None,
            })
            .collect();
        if present.iter().any(|p| *p) && !present.iter().all(|p| *p) {
            anomalies.push(format!(
                "partial block: {:?} ({:?})",
                block.steps, block.outcome
            ));
        }
        let Outcome::Ok(seen) = &block.outcome else {
            continue;
        };
        if present.iter().any(|p| !p) {
            anomalies.push(format!(
                "lost update: committed {:?} is missing",
                block.steps
            ));
        }
        for (step, list) in block.steps.iter().zip(seen) {
            let (k, after) = match step {
                Step::Append(k, e) => (k, list.iter().chain(Some(e))),
                Step::Read(k) => (k, list.iter().chain(None)),
            };
            let fin = final_of(k);
            let after: Vec<&String> = after.collect();
            if after.len() > fin.len() || after.iter().zip(fin).any(|(a, f)| *a != f) {
                anomalies.push(format!(
                    "lost update: {step:?} of a committed block saw or wrote {after:?}, not a prefix of key {k}'s final {fin:?}"
                ));
            }
        }
        // Another block's appends, seen on one key and not on another.
        let observed: BTreeMap<i32, &Vec<String>> = block
            .steps
            .iter()
            .zip(seen)
            .map(|(s, l)| match s {
                Step::Append(k, _) | Step::Read(k) => (*k, l),
            })
            .collect();
        for other in history {
            let appends: Vec<(i32, &String)> = other
                .steps
                .iter()
                .filter_map(|s| match s {
                    Step::Append(k, e) if observed.contains_key(k) => Some((*k, e)),
                    _ => None,
                })
                .collect();
            let saw: Vec<bool> = appends
                .iter()
                .map(|(k, e)| observed[k].contains(e))
                .collect();
            if saw.iter().any(|s| *s) && !saw.iter().all(|s| *s) {
                anomalies.push(format!(
                    "fractured read: {:?} saw {:?} in part: {saw:?}",
                    block.steps, other.steps
                ));
            }
        }
    }
    anomalies
}

/// Every key's list as it ends, read through `client`.
async fn finals(client: &Client) -> TestResult<BTreeMap<i32, Vec<String>>> {
    Ok(client
        .query("SELECT k, v FROM lists ORDER BY k", &[])
        .await?
        .iter()
        .map(|r| (r.get::<_, i32>(0), words(&r.get::<_, String>(1))))
        .collect())
}

async fn create_lists(client: &Client) -> TestResult {
    client
        .batch_execute(
            "CREATE TABLE lists (k INT NOT NULL, v TEXT NOT NULL, PRIMARY KEY (k)) \
             WITH (storage_table = 'Lists', partition_key = 'h', row_key = '{k:03}')",
        )
        .await?;
    let values: Vec<String> = (0..KEYS).map(|k| format!("({k}, '')")).collect();
    client
        .batch_execute(&format!(
            "INSERT INTO lists (k, v) VALUES {}",
            values.join(", ")
        ))
        .await?;
    Ok(())
}

fn blocks_per_client() -> usize {
    std::env::var("TABLESQL_HISTORY_BLOCKS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(BLOCKS)
}

/// Runs the clients against `servers`; once a third of the blocks are
/// done, server 0 is replaced (SIGKILL and a new process). Returns the
/// history and prints its figures.
async fn history_with_a_kill(name: &str, servers: Arc<Servers>) -> TestResult<Vec<Block>> {
    let blocks = blocks_per_client();
    let progress = Arc::new(Progress::new());
    let clients: Vec<_> = (0..CLIENTS)
        .map(|c| tokio::spawn(client_history(servers.clone(), c, blocks, progress.clone())))
        .collect();
    let total = CLIENTS * blocks;
    let mut deadline = crate::wait::Deadline::new(
        Duration::from_secs(300),
        format!("{} of {total} blocks done", total / 3),
    );
    while progress.done.load(Ordering::SeqCst) < total / 3 {
        deadline.again_async(progress.shown()).await?;
    }
    let replacing = servers.clone();
    tokio::task::spawn_blocking(move || replacing.replace(0)).await??;
    let mut history = Vec::new();
    for c in clients {
        history.extend(c.await??);
    }
    let count = |f: fn(&Outcome) -> bool| history.iter().filter(|b| f(&b.outcome)).count();
    println!(
        "history {name}: {} blocks by {CLIENTS} clients over {KEYS} keys: {} ok, {} fail, {} info",
        history.len(),
        count(|o| matches!(o, Outcome::Ok(_))),
        count(|o| matches!(o, Outcome::Fail(_))),
        count(|o| matches!(o, Outcome::Info(_))),
    );
    let mut why: BTreeMap<String, usize> = BTreeMap::new();
    for b in &history {
        if let Outcome::Fail(w) | Outcome::Info(w) = &b.outcome {
            *why.entry(w.chars().take(120).collect()).or_default() += 1;
        }
    }
    println!("history {name}: not ok: {why:?}");
    Ok(history)
}

fn assert_none(name: &str, history: &[Block], finals: &BTreeMap<i32, Vec<String>>) {
    let anomalies = check(history, finals);
    let elements: usize = finals.values().map(Vec::len).sum();
    println!(
        "history {name}: {elements} elements in the final lists; anomalies: {}",
        anomalies.len()
    );
    assert!(
        anomalies.is_empty(),
        "{name}: {} anomalies:\n{}",
        anomalies.len(),
        anomalies.join("\n")
    );
    assert!(
        history.iter().any(|b| matches!(b.outcome, Outcome::Ok(_))),
        "{name}: no block committed"
    );
}

/// Two servers over one Azurite account, through a proxy that answers 3%
/// of requests with 503 and loses 2% of answers; server 0 is killed and
/// replaced midway.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_append_over_two_servers_on_azurite_finds_no_anomaly() -> TestResult {
    let account = crate::azurite::fresh_account()?;
    let faulty = Arc::new(AtomicBool::new(false));
    let mut rng = ChaCha8Rng::seed_from_u64(70);
    let on = faulty.clone();
    let proxy = Proxy::start(
        crate::faults::upstream()?,
        Box::new(move |_| {
            if !on.load(Ordering::Relaxed) {
                return Fate::Forward;
            }
            match rng.random_range(0..100) {
                0..3 => Fate::Fail(503),
                3..5 => Fate::DropAfter,
                _ => Fate::Forward,
            }
        }),
    )
    .await?;
    let store = crate::azurite::store_argument(&proxy.config(&account));
    let servers = Arc::new(Servers::new(starter(store.into())));
    let first = servers.add()?;
    create_lists(&connect(first).await?).await?;
    servers.add()?;
    faulty.store(true, Ordering::Relaxed);
    let history = history_with_a_kill("azurite", servers.clone()).await?;

    faulty.store(false, Ordering::Relaxed);
    let finals = finals(&connect(servers.addr(1).ok_or("no server")?).await?).await?;
    let injected = &proxy.injected;
    println!(
        "history azurite: the proxy answered {} requests with 503 and lost {} answers",
        injected.failed.load(Ordering::Relaxed),
        injected.dropped_after.load(Ordering::Relaxed)
    );
    assert_none("azurite", &history, &finals);
    Ok(())
}

/// One server over the embedded store, killed midway and started again
/// on the same files.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_append_on_the_embedded_store_finds_no_anomaly() -> TestResult {
    let dir = tempfile::tempdir()?;
    let servers = Arc::new(Servers::new(starter(dir.path().join("store").into())));
    let first = servers.add()?;
    create_lists(&connect(first).await?).await?;
    let history = history_with_a_kill("embedded", servers.clone()).await?;

    let addr = servers.addr(0).ok_or("no server")?;
    let finals = finals(&connect(addr).await?).await?;
    assert_none("embedded", &history, &finals);
    Ok(())
}

/// The checker is not blind: a history with each anomaly it looks for,
/// planted by hand, is reported for each.
#[test]
fn the_checker_finds_what_it_looks_for() {
    let append = |k, e: &str| Step::Append(k, e.to_owned());
    let list = |l: &[&str]| l.iter().map(|e| (*e).to_owned()).collect::<Vec<_>>();
    let history = vec![
        // Committed a then b on key 0; only b is in the final list: a lost
        // update (b wrote over a version it never read).
        Block {
            steps: vec![append(0, "a")],
            outcome: Outcome::Ok(vec![list(&[])]),
        },
        Block {
            steps: vec![append(0, "b")],
            outcome: Outcome::Ok(vec![list(&[])]),
        },
        // Refused, yet its element is in key 1's list (G1a).
        Block {
            steps: vec![append(1, "c")],
            outcome: Outcome::Fail("40001".into()),
        },
        // Unknown, on keys 2 and 3; present on 2 only: a partial block.
        Block {
            steps: vec![append(2, "d"), append(3, "e")],
            outcome: Outcome::Info("connection closed".into()),
        },
        // Saw d on key 2 but not e on key 3: a fractured read.
        Block {
            steps: vec![Step::Read(2), Step::Read(3)],
            outcome: Outcome::Ok(vec![list(&["d"]), list(&[])]),
        },
    ];
    let finals: BTreeMap<i32, Vec<String>> = [
        (0, list(&["b"])),
        (1, list(&["c", "c"])),
        (2, list(&["d"])),
        (3, list(&[])),
    ]
    .into_iter()
    .collect();
    let found = check(&history, &finals).join("\n");
    for kind in [
        "lost update",
        "aborted write seen",
        "appended twice",
        "partial block",
        "fractured read",
    ] {
        assert!(found.contains(kind), "no {kind} in:\n{found}");
    }
}
