//! Fault injection: a small HTTP proxy on 127.0.0.1 in front of Azurite that
//! answers a share of requests with 503, 500 or 504, delays some, and drops
//! connections before or after forwarding (a lost answer). Through it, queries
//! still return exactly the complete answer and batches are applied exactly
//! once; the retries it took are reported.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tablesql::storage::azure::AzureConfig;
use tablesql::storage::{
    AzureStore, EdmValue, Entity, PartitionKey, Query, RowKey, StorageError, TableName, TableStore,
    WriteOp,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Mutex;

type TestResult<T = ()> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// What the proxy does with one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fate {
    Forward,
    /// Answer with this status without forwarding.
    Fail(u16),
    /// Answer 503 with `Retry-After: n` seconds.
    Busy(u64),
    /// Answer 500 `OperationTimedOut`, the service's own timeout.
    TimedOut,
    /// Forward, then pass the answer's head on at once and its body after
    /// this wait (past the client's timeout: the body read times out).
    StallBody(Duration),
    /// Wait, then forward.
    Delay(Duration),
    /// Wait past the client's request timeout, then forward (the client has
    /// given up by then, so a write lands with its answer lost).
    Stall(Duration),
    /// Close the connection without forwarding.
    DropBefore,
    /// Forward, then close the connection without passing the answer on.
    DropAfter,
}

/// Faults injected so far, by kind.
#[derive(Debug, Default)]
pub(crate) struct Injected {
    pub(crate) failed: AtomicU64,
    delayed: AtomicU64,
    stalled: AtomicU64,
    dropped_before: AtomicU64,
    pub(crate) dropped_after: AtomicU64,
    /// Injected answers the client counts as timeouts (408, 504, 500
    /// `OperationTimedOut`).
    timeout_answers: AtomicU64,
    /// Requests Azurite did not answer (it refused or reset the proxy's
    /// connection): the client sees its connection dropped.
    upstream_failed: AtomicU64,
    forwarded: AtomicU64,
    /// Requests read and not yet answered, dropped or forwarded: a stalled
    /// one lands after its client gave up.
    in_flight: AtomicU64,
}

/// A request counted in flight until dropped.
struct InFlight<'a>(&'a AtomicU64);

impl<'a> InFlight<'a> {
    fn new(n: &'a AtomicU64) -> Self {
        n.fetch_add(1, Ordering::SeqCst);
        Self(n)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

pub(crate) type Decide = Box<dyn FnMut(&str) -> Fate + Send>;

/// The proxy: listens on 127.0.0.1, port 0, and forwards to `upstream`.
pub(crate) struct Proxy {
    addr: std::net::SocketAddr,
    pub(crate) injected: Arc<Injected>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Proxy {
    pub(crate) async fn start(upstream: String, decide: Decide) -> TestResult<Proxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let injected = Arc::new(Injected::default());
        let decide = Arc::new(Mutex::new(decide));
        let counts = injected.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let (decide, counts, upstream) = (decide.clone(), counts.clone(), upstream.clone());
                tokio::spawn(async move {
                    let _ = serve(client, &upstream, &decide, &counts).await;
                });
            }
        });
        Ok(Proxy {
            addr,
            injected,
            task,
        })
    }

    /// Waits until no request is in flight: every write the client sent,
    /// stalled ones too, has landed or been dropped, so that two reads made
    /// after it see the same store.
    async fn until_idle(&self) -> TestResult {
        let mut deadline =
            crate::wait::Deadline::new(Duration::from_secs(60), "no request in flight");
        loop {
            let n = self.injected.in_flight.load(Ordering::SeqCst);
            if n == 0 {
                return Ok(());
            }
            deadline.again_async(format!("{n} in flight")).await?;
        }
    }

    /// An Azure configuration for `account` on Azurite, through this proxy.
    pub(crate) fn config(&self, account: &AzureConfig) -> AzureConfig {
        let mut config = account.clone();
        let path = account.base_path().to_owned();
        config.endpoint = format!("http://{}{path}", self.addr);
        config
    }
}

/// Serves the requests of one client connection until it closes.
async fn serve(
    mut client: TcpStream,
    upstream: &str,
    decide: &Mutex<Decide>,
    counts: &Injected,
) -> TestResult {
    loop {
        let Some(request) = read_request(&mut client).await? else {
            return Ok(());
        };
        let _in_flight = InFlight::new(&counts.in_flight);
        let first_line = String::from_utf8_lossy(&request)
            .lines()
            .next()
            .unwrap_or("")
            .to_owned();
        let fate = (decide.lock().await)(&first_line);
        match fate {
            Fate::Fail(_) | Fate::Busy(_) | Fate::TimedOut => {
                counts.failed.fetch_add(1, Ordering::Relaxed);
                if matches!(fate, Fate::Fail(408 | 504) | Fate::TimedOut) {
                    counts.timeout_answers.fetch_add(1, Ordering::Relaxed);
                }
                let (status, extra, code) = match fate {
                    Fate::Busy(secs) => {
                        (503, format!("Retry-After: {secs}\r\n"), "ServerBusy".into())
                    }
                    Fate::TimedOut => (500, String::new(), "OperationTimedOut".into()),
                    Fate::Fail(status) => (status, String::new(), format!("Injected{status}")),
                    _ => unreachable!("matched above"),
                };
                let body = format!(
                    "{{\"odata.error\":{{\"code\":\"{code}\",\"message\":{{\"lang\":\"en-US\",\"value\":\"injected\"}}}}}}"
                );
                let answer = format!(
                    "HTTP/1.1 {status} Injected\r\n{extra}Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                );
                client.write_all(answer.as_bytes()).await?;
                continue;
            }
            Fate::DropBefore => {
                counts.dropped_before.fetch_add(1, Ordering::Relaxed);
                return Ok(());
            }
            Fate::Delay(d) => {
                counts.delayed.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(d).await;
            }
            Fate::Stall(d) => {
                counts.stalled.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(d).await;
            }
            Fate::Forward | Fate::DropAfter | Fate::StallBody(_) => {}
        }
        let answer = forward(upstream, &request).await.inspect_err(|_| {
            // A stalled request's client has given up already: counted once.
            if !matches!(fate, Fate::Stall(_)) {
                counts.upstream_failed.fetch_add(1, Ordering::Relaxed);
            }
        })?;
        if let Fate::StallBody(wait) = fate {
            counts.stalled.fetch_add(1, Ordering::Relaxed);
            let head_end = find(&answer, b"\r\n\r\n").ok_or("an answer without a head")? + 4;
            client.write_all(&answer[..head_end]).await?;
            tokio::time::sleep(wait).await;
            // The client has given up by now; it may have closed.
            let _ = client.write_all(&answer[head_end..]).await;
            return Ok(());
        }
        if fate == Fate::DropAfter {
            counts.dropped_after.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
        counts.forwarded.fetch_add(1, Ordering::Relaxed);
        client.write_all(&answer).await?;
        // The answer says `Connection: close`; the client opens a new one.
        return Ok(());
    }
}

/// Reads one request (head and Content-Length body); `None` at a clean EOF.
async fn read_request(client: &mut TcpStream) -> TestResult<Option<Vec<u8>>> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    let head_end = loop {
        if let Some(i) = find(&buf, b"\r\n\r\n") {
            break i + 4;
        }
        let n = client.read(&mut chunk).await?;
        if n == 0 {
            return Ok(None);
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
    let length = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse::<usize>().ok())
        .unwrap_or(0);
    while buf.len() < head_end + length {
        let n = client.read(&mut chunk).await?;
        if n == 0 {
            return Err("client closed mid-request".into());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    Ok(Some(buf))
}

/// Sends a request to Azurite on a connection of its own, marked `Connection:
/// close`, and returns the whole answer as Azurite sent it.
async fn forward(upstream: &str, request: &[u8]) -> TestResult<Vec<u8>> {
    let head_end = find(request, b"\r\n\r\n").ok_or("no head")? + 4;
    let head = String::from_utf8_lossy(&request[..head_end - 4]);
    let mut rewritten: String = head
        .split("\r\n")
        .filter(|l| !l.to_ascii_lowercase().starts_with("connection:"))
        .collect::<Vec<_>>()
        .join("\r\n");
    rewritten.push_str("\r\nConnection: close\r\n\r\n");
    let mut server = TcpStream::connect(upstream).await?;
    server.write_all(rewritten.as_bytes()).await?;
    server.write_all(&request[head_end..]).await?;
    let mut answer = Vec::new();
    server.read_to_end(&mut answer).await?;
    Ok(answer)
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// `127.0.0.1:10002` from the test Azurite's endpoint.
pub(crate) fn upstream() -> TestResult<String> {
    let endpoint = crate::azurite::endpoint()?;
    Ok(endpoint
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_owned())
}

fn entity(p: &str, r: usize) -> TestResult<Entity> {
    Ok(
        Entity::new(PartitionKey::new(p)?, RowKey::new(format!("{r:05}"))?)
            .with("N", EdmValue::Int32(r as i32))
            .with("Text", EdmValue::String(format!("row {r} of {p}"))),
    )
}

/// `fate` for the first request whose request line matches, then forwarding.
fn first_matching(matches: impl Fn(&str) -> bool + Send + 'static, fate: Fate) -> Decide {
    let mut done = false;
    Box::new(move |line| {
        if !done && matches(line) {
            done = true;
            fate
        } else {
            Fate::Forward
        }
    })
}

/// The client's request timeout in the random-fault test; a stall outlasts it.
/// Wide enough that an honest answer from a CPU-starved Azurite (the rest of
/// the suite runs beside this test) does not time out and add a retry the
/// count below does not expect.
const TIMEOUT: Duration = Duration::from_millis(1500);

/// Random faults: of every 100 requests about 8 get 503, 3 each 500 and 504,
/// 2 each 408, 429 and 502, 8 are delayed a little and 3 past the client's
/// timeout, 4 are dropped before and 4 after forwarding.
fn random_faults(seed: u64) -> Decide {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    Box::new(move |_| match rng.random_range(0..100) {
        0..8 => Fate::Fail(503),
        8..11 => Fate::Fail(500),
        11..14 => Fate::Fail(504),
        14..16 => Fate::Fail(408),
        16..18 => Fate::Fail(429),
        18..20 => Fate::Fail(502),
        20..28 => Fate::Delay(Duration::from_millis(rng.random_range(10..80))),
        28..31 => Fate::Stall(TIMEOUT * 2),
        31..35 => Fate::DropBefore,
        35..39 => Fate::DropAfter,
        _ => Fate::Forward,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queries_and_batches_survive_injected_faults() -> TestResult {
    let _cpu = crate::exclusive();
    let account = crate::azurite::fresh_account()?;
    let direct = AzureStore::new(account.clone())?;
    let proxy = Proxy::start(upstream()?, random_faults(7)).await?;
    let mut config = proxy.config(&account);
    // Enough retries that a run of faults (p ≈ 0.4 each) is survived.
    config.retry.max_retries = 12;
    config.request_timeout = TIMEOUT;
    let faulty = AzureStore::new(config)?;

    let t = TableName::new("Faults")?;
    faulty.create_table(&t).await.or_else(|e| match e {
        // The create may have landed before its answer was lost.
        StorageError::AmbiguousRetry { .. } => Ok(()),
        e => Err(e),
    })?;

    // 24 batches of 50 inserts over 3 partitions, 4 at a time.
    let mut expected = Vec::new();
    let mut batches = Vec::new();
    for b in 0..24 {
        let p = format!("part{}", b % 3);
        let rows: Vec<Entity> = (0..50)
            .map(|i| entity(&p, b * 50 + i))
            .collect::<TestResult<_>>()?;
        expected.extend(rows.iter().cloned());
        batches.push(rows);
    }
    let ambiguous = AtomicU64::new(0);
    let results = futures::future::join_all(batches.into_iter().map(|rows| {
        let (faulty, t, ambiguous) = (&faulty, &t, &ambiguous);
        async move {
            let ops = rows.into_iter().map(WriteOp::Insert).collect();
            match faulty.execute_batch(t, ops).await {
                Ok(_) => Ok(()),
                // A retry after a lost answer met the batch's own rows:
                // reported as ambiguous, never as a plain duplicate.
                Err(StorageError::AmbiguousRetry { source, .. })
                    if matches!(source.root(), StorageError::EntityAlreadyExists { .. }) =>
                {
                    ambiguous.fetch_add(1, Ordering::Relaxed);
                    Ok(())
                }
                Err(e) => Err(e),
            }
        }
    }))
    .await;
    for r in results {
        r?;
    }

    // Exactly once: every row present once, with its values, nothing else.
    let stored = direct.query_all(&t, &Query::all()).await?;
    assert_eq!(stored.len(), expected.len());
    let mut want = expected.clone();
    want.sort_by(|a, b| (&a.partition_key, &a.row_key).cmp(&(&b.partition_key, &b.row_key)));
    for (got, want) in stored.iter().zip(&want) {
        assert_eq!(&got.entity, want);
    }

    // Complete answers through the faults: pages of 70, a filter, point gets.
    let paged = faulty.query_all(&t, &Query::all().top(70)).await?;
    assert_eq!(paged, direct.query_all(&t, &Query::all().top(70)).await?);
    let filter = tablesql::storage::Filter::property(
        "N",
        tablesql::storage::CmpOp::Lt,
        EdmValue::Int32(300),
    );
    let filtered = faulty
        .query_all(&t, &Query::all().filter(filter.clone()))
        .await?;
    assert_eq!(filtered.len(), 300);
    assert_eq!(
        filtered,
        direct.query_all(&t, &Query::all().filter(filter)).await?
    );
    for r in (0..1200).step_by(97) {
        let p = PartitionKey::new(format!("part{}", (r / 50) % 3))?;
        let got = faulty.get(&t, &p, &RowKey::new(format!("{r:05}"))?).await?;
        assert_eq!(got.map(|e| e.entity), Some(entity(p.as_str(), r)?));
    }

    let stats = faulty.stats();
    let inj = &proxy.injected;
    let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
    // The client's timeouts are the injected ones (timeout answers, stalls)
    // and honest answers that came too late from a CPU-starved Azurite: the
    // latter cost a retry too, and are counted apart rather than guessed.
    let injected_timeouts = load(&inj.timeout_answers) + load(&inj.stalled);
    assert!(
        stats.timeouts >= injected_timeouts,
        "the client saw {} timeouts of {injected_timeouts} injected",
        stats.timeouts
    );
    let late = stats.timeouts - injected_timeouts;
    let unanswered = load(&inj.upstream_failed);
    println!(
        "faults: {} requests, {} retries; injected {} errors, {} delays, {} stalls past the timeout, {} drops before and {} after forwarding; {late} honest answers too late, {unanswered} not answered by Azurite; {} batches reported ambiguous",
        stats.requests,
        stats.retries,
        load(&inj.failed),
        load(&inj.delayed),
        load(&inj.stalled),
        load(&inj.dropped_before),
        load(&inj.dropped_after),
        load(&ambiguous),
    );
    // Every kind of fault happened, and each cost a retry.
    for (kind, n) in [
        ("errors", &inj.failed),
        ("drops before", &inj.dropped_before),
        ("drops after", &inj.dropped_after),
        ("delays", &inj.delayed),
        ("stalls", &inj.stalled),
    ] {
        assert!(load(n) > 0, "no {kind} were injected");
    }
    let faults = load(&inj.failed)
        + load(&inj.stalled)
        + load(&inj.dropped_before)
        + load(&inj.dropped_after);
    assert_eq!(
        stats.retries,
        faults + late + unanswered,
        "one retry per failed attempt"
    );
    Ok(())
}

#[tokio::test]
async fn insert_retried_after_lost_answer_is_settled_as_applied() -> TestResult {
    let account = crate::azurite::fresh_account()?;
    let direct = AzureStore::new(account.clone())?;
    let t = TableName::new("Lost")?;
    direct.create_table(&t).await?;
    // Lose the answer to the first insert; forward everything else.
    let decide = first_matching(|line| line.starts_with("POST"), Fate::DropAfter);
    let proxy = Proxy::start(upstream()?, decide).await?;
    let faulty = AzureStore::new(proxy.config(&account))?;
    let e = entity("p", 1)?;
    // The retry meets its own first attempt (409); read back, the entity
    // is the one inserted, so the insert was applied, once.
    let wrote = faulty.execute(&t, WriteOp::Insert(e.clone())).await?;
    let got = direct.get(&t, &e.partition_key, &e.row_key).await?;
    assert_eq!(wrote.etag, got.as_ref().map(|s| s.etag.clone()));
    assert_eq!(got.map(|s| s.entity), Some(e));
    assert_eq!(faulty.stats().retries, 1);
    // A plain duplicate, with no lost answer, stays a plain duplicate.
    let again = faulty.execute(&t, WriteOp::Insert(entity("p", 1)?)).await;
    assert!(matches!(
        again,
        Err(StorageError::EntityAlreadyExists { .. })
    ));
    // A read has nothing to apply: a lost answer to a get of a missing entity
    // is retried and is plainly "not there".
    let point_read = |line: &str| line.starts_with("GET") && line.contains("(PartitionKey=");
    let decide = first_matching(point_read, Fate::DropAfter);
    let proxy = Proxy::start(upstream()?, decide).await?;
    let faulty = AzureStore::new(proxy.config(&account))?;
    let missing = faulty
        .get(&t, &PartitionKey::new("p")?, &RowKey::new("none")?)
        .await?;
    assert_eq!(missing, None);
    assert_eq!(faulty.stats().retries, 1);
    Ok(())
}

#[tokio::test]
async fn errors_that_would_repeat_are_not_retried() -> TestResult {
    let account = crate::azurite::fresh_account()?;
    for status in [400u16, 401, 403, 404, 409, 412, 501, 505] {
        let calls = Arc::new(AtomicU64::new(0));
        let seen = calls.clone();
        let decide: Decide = Box::new(move |_| {
            seen.fetch_add(1, Ordering::Relaxed);
            Fate::Fail(status)
        });
        let proxy = Proxy::start(upstream()?, decide).await?;
        let store = AzureStore::new(proxy.config(&account))?;
        assert!(store.list_tables().await.is_err());
        assert_eq!(
            calls.load(Ordering::Relaxed),
            1,
            "status {status} was retried"
        );
        assert_eq!(store.stats().retries, 0);
    }
    // 500 is retried until the policy gives up: 1 + max_retries attempts.
    let decide: Decide = Box::new(|_| Fate::Fail(500));
    let proxy = Proxy::start(upstream()?, decide).await?;
    let mut config = proxy.config(&account);
    config.retry.max_retries = 3;
    let store = AzureStore::new(config)?;
    let err = store.list_tables().await.err().ok_or("500 forever fails")?;
    assert!(err.is_retryable());
    assert!(
        matches!(err, StorageError::Unavailable { attempts: 4, .. }),
        "{err:?}"
    );
    assert_eq!(store.stats().retries, 3);
    // 503 ServerBusy refused the work undone: it is retried past
    // max_retries, until the busy timeout.
    let decide: Decide = Box::new(|_| Fate::Busy(0));
    let proxy = Proxy::start(upstream()?, decide).await?;
    let mut config = proxy.config(&account);
    config.retry.max_retries = 3;
    config.retry.delay = Duration::from_millis(1);
    config.retry.min_delay = Duration::from_millis(1);
    config.retry.max_delay = Duration::from_millis(5);
    config.retry.busy_timeout = Some(Duration::from_secs(2));
    let store = AzureStore::new(config)?;
    let err = store.list_tables().await.err().ok_or("503 forever fails")?;
    assert!(
        matches!(err, StorageError::Unavailable { attempts, .. } if attempts > 4),
        "{err:?}"
    );
    Ok(())
}

#[tokio::test]
async fn retry_after_is_honoured() -> TestResult {
    let account = crate::azurite::fresh_account()?;
    // Answers the first request with 503 and `Retry-After: secs`.
    let once_busy = |secs| first_matching(|_| true, Fate::Busy(secs));
    // The policy alone would wait about 25 ms; the service asks for 1 s.
    let proxy = Proxy::start(upstream()?, once_busy(1)).await?;
    let mut config = proxy.config(&account);
    config.retry.max_delay = Duration::from_secs(5);
    let store = AzureStore::new(config)?;
    let started = std::time::Instant::now();
    store.list_tables().await?;
    let waited = started.elapsed();
    assert!(waited >= Duration::from_secs(1), "{waited:?}");
    assert_eq!(store.stats().retries, 1);
    // A Retry-After beyond zmax waits zmax: a service cannot stall a client.
    let proxy = Proxy::start(upstream()?, once_busy(3600)).await?;
    let mut config = proxy.config(&account);
    config.retry.max_delay = Duration::from_millis(300);
    let store = AzureStore::new(config)?;
    let started = std::time::Instant::now();
    store.list_tables().await?;
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(300) && waited < Duration::from_secs(5),
        "{waited:?}"
    );
    Ok(())
}

#[tokio::test]
async fn filters_sent_hold_at_most_fifteen_comparisons() -> TestResult {
    use tablesql::storage::{CmpOp, Filter};
    let account = crate::azurite::fresh_account()?;
    let sent = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let log = sent.clone();
    let decide: Decide = Box::new(move |line| {
        if let Ok(mut log) = log.lock() {
            log.push(line.to_owned());
        }
        Fate::Forward
    });
    let proxy = Proxy::start(upstream()?, decide).await?;
    let store = AzureStore::new(proxy.config(&account))?;
    let t = TableName::new("Wide")?;
    store.create_table(&t).await?;
    let ops = (0..30)
        .map(|i| entity("p", i).map(WriteOp::Insert))
        .collect::<TestResult<Vec<_>>>()?;
    store.execute_batch(&t, ops).await?;
    // The partition plus 20 conjuncts: 21 comparisons asked for.
    let ne = |i| Filter::property("N", CmpOp::Ne, EdmValue::Int32(i));
    let filter = (1..20).fold(ne(0), |f, i| f.and(ne(i)));
    let q = Query::partition(PartitionKey::new("p")?).filter(filter);
    let got = store.query_all(&t, &q).await?;
    assert_eq!(got.len(), 10, "rows 20 to 29 pass");
    let lines = sent.lock().map_err(|_| "log poisoned")?.clone();
    let query = lines
        .iter()
        .find(|l| l.contains("$filter="))
        .ok_or("no query was sent")?;
    let comparisons: usize = ["eq", "ne", "gt", "ge", "lt", "le"]
        .iter()
        .map(|op| query.matches(&format!("%20{op}%20")).count())
        .sum();
    assert_eq!(comparisons, 15, "{query}");
    Ok(())
}

/// Faults on a sequence's counter: of every 100 requests 10 writes land with
/// their answer lost, 5 get 503 and 5 are dropped before forwarding.
fn counter_faults(seed: u64) -> Decide {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    Box::new(move |line| match rng.random_range(0..100) {
        0..10 if line.starts_with("PUT") => Fate::DropAfter,
        10..15 => Fate::Fail(503),
        15..20 => Fate::DropBefore,
        _ => Fate::Forward,
    })
}

/// Four engines (as four processes would) draw from one sequence through
/// the proxy: a reservation whose answer was lost may have landed, so its
/// values are skipped and a new block reserved; none is handed out twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sequence_hands_out_no_value_twice_through_injected_faults() -> TestResult {
    use tablesql::{Engine, EngineOptions};
    let account = crate::azurite::fresh_account()?;
    let direct: Arc<dyn TableStore> = Arc::new(AzureStore::new(account.clone())?);
    let setup = Engine::with_store(direct, EngineOptions::default())
        .await?
        .session();
    setup.sql("CREATE SEQUENCE ids").await?.collect().await?;
    let proxy = Proxy::start(upstream()?, counter_faults(11)).await?;
    const ENGINES: usize = 4;
    const CALLS: usize = 60;
    let mut tasks = Vec::new();
    for _ in 0..ENGINES {
        let store: Arc<dyn TableStore> = Arc::new(AzureStore::new(proxy.config(&account))?);
        tasks.push(tokio::spawn(async move {
            let engine = Engine::with_store(store, EngineOptions::default())
                .await?
                .session();
            let mut values = Vec::new();
            for _ in 0..CALLS {
                let batches = engine.sql("SELECT nextval('ids')").await?.collect().await?;
                let column = batches[0]
                    .column(0)
                    .as_any()
                    .downcast_ref::<datafusion::arrow::array::Int64Array>()
                    .ok_or("nextval is bigint")?
                    .value(0);
                values.push(column);
            }
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(values)
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await??);
    }
    let distinct: std::collections::BTreeSet<i64> = all.iter().copied().collect();
    assert_eq!(all.len(), ENGINES * CALLS);
    assert_eq!(distinct.len(), all.len(), "a value was handed out twice");
    let lost = proxy.injected.dropped_after.load(Ordering::Relaxed);
    assert!(
        lost > 0,
        "no reservation lost its answer: the test proved nothing"
    );
    // Values skipped for lost answers leave gaps, never repeats.
    println!(
        "{} values, largest {}, {lost} answers lost",
        all.len(),
        distinct.last().copied().unwrap_or(0)
    );
    Ok(())
}

/// Faults armed by the test as it goes: each `(pattern, fate)` meets the
/// first request whose line contains the pattern, once; the rest forward.
/// Patterns name the table: the engine's own reads of its catalog (the
/// version check as a statement starts) must not meet them.
type Armed = Arc<std::sync::Mutex<Vec<(&'static str, Fate)>>>;

fn armed() -> (Armed, Decide) {
    let armed: Armed = Arc::default();
    let faults = armed.clone();
    let decide: Decide = Box::new(move |line| {
        let Ok(mut faults) = faults.lock() else {
            return Fate::Forward;
        };
        match faults.iter().position(|(p, _)| line.contains(p)) {
            Some(i) => faults.remove(i).1,
            None => Fate::Forward,
        }
    });
    (armed, decide)
}

fn arm(armed: &Armed, faults: &[(&'static str, Fate)]) -> TestResult {
    armed
        .lock()
        .map_err(|_| "poisoned")?
        .extend_from_slice(faults);
    Ok(())
}

/// Fails unless every armed fault has met its request.
fn all_met(armed: &Armed, step: &str) -> TestResult {
    let left = armed.lock().map_err(|_| "poisoned")?;
    if left.is_empty() {
        Ok(())
    } else {
        Err(format!("{step}: faults never met: {left:?}").into())
    }
}

/// `(query, calls, requests, retries)` of each statement in the view.
async fn statement_retries(engine: &tablesql::Session) -> TestResult<Vec<(String, i64, i64, i64)>> {
    use datafusion::arrow::array::AsArray;
    use datafusion::arrow::datatypes::Int64Type;
    let batches = engine
        .collect("SELECT query, calls, requests, retries FROM tablesql_stat_statements")
        .await?;
    let mut rows = Vec::new();
    for b in &batches {
        for i in 0..b.num_rows() {
            let n = |c: usize| b.column(c).as_primitive::<Int64Type>().value(i);
            let query = b.column(0).as_string::<i32>().value(i).to_owned();
            rows.push((query, n(1), n(2), n(3)));
        }
    }
    Ok(rows)
}

/// Each statement's retries land on it in `tablesql_stat_statements`: a
/// prepared point read, a scan's pages, and a write's batch, each failed
/// once or twice by the proxy with 503, 500 `OperationTimedOut` or an
/// answer whose body never comes; the last two count as timeouts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statements_count_the_retries_their_requests_took() -> TestResult {
    use datafusion::scalar::ScalarValue;
    use tablesql::{Engine, EngineOptions};
    // Exact counts: no CPU-heavy test beside it to slow Azurite past the
    // timeout and add a retry.
    let _cpu = crate::exclusive();
    let account = crate::azurite::fresh_account()?;
    let direct = AzureStore::new(account.clone())?;
    tablesql::demo::load(&direct, 200, |_, _| {}).await?;
    let (armed, decide) = armed();
    let proxy = Proxy::start(upstream()?, decide).await?;
    let mut config = proxy.config(&account);
    config.retry.delay = Duration::from_millis(20);
    config.retry.min_delay = Duration::from_millis(5);
    config.request_timeout = TIMEOUT;
    let store = Arc::new(AzureStore::new(config)?);
    let engine = Engine::with_store(store.clone(), EngineOptions::default())
        .await?
        .session();
    engine.collect("SET tablesql.scan_policy = allow").await?;
    let point = engine
        .prepare("SELECT name FROM registrations WHERE event = $1 AND distance = $2 AND bib = $3")
        .await?;
    let r = tablesql::demo::registration(7);
    let args = || {
        vec![
            ScalarValue::from(r.event),
            ScalarValue::from(r.distance),
            ScalarValue::Int32(Some(r.bib)),
        ]
    };
    point.query(args()).await?; // planned, and its statement named, before the count
    engine.collect("SELECT tablesql_stat_reset()").await?;
    let before = store.stats();

    // The point read (a query of one entity: its RowKey ends with the
    // name), refused once as busy.
    arm(&armed, &[("Registrations()?$top=1&", Fate::Fail(503))])?;
    assert_eq!(point.query(args()).await?[0].num_rows(), 1);
    all_met(&armed, "the point read")?;
    point.query(args()).await?; // and once with no fault
    // A full scan's query pages: one times out at the service, one's body
    // never comes.
    arm(
        &armed,
        &[
            ("Registrations()?", Fate::TimedOut),
            ("Registrations()?", Fate::StallBody(TIMEOUT * 2)),
        ],
    )?;
    let counted = engine
        .collect("SELECT count(*) FROM registrations WHERE age > 0")
        .await?;
    assert_eq!(counted[0].num_rows(), 1);
    all_met(&armed, "the scan")?;
    // A write: its read of the stored entity and its batch, each refused
    // once as busy (the read inside the write's own count).
    arm(
        &armed,
        &[
            ("Registrations(PartitionKey=", Fate::Fail(503)),
            ("$batch", Fate::Fail(503)),
        ],
    )?;
    engine
        .collect(&format!(
            "UPDATE registrations SET age = age + 1 WHERE event = '{}' AND distance = '{}' AND bib = {}",
            r.event, r.distance, r.bib
        ))
        .await?;
    all_met(&armed, "the write")?;

    let rows = statement_retries(&engine).await?;
    let find = |start: &str| {
        rows.iter()
            .find(|(q, ..)| q.starts_with(start))
            .ok_or_else(|| format!("no statement {start}… in {rows:?}"))
    };
    let (_, calls, requests, retries) = find("SELECT name FROM registrations")?;
    assert_eq!((*calls, *requests, *retries), (2, 2, 1), "{rows:?}");
    let (_, calls, _, retries) = find("SELECT count(*)")?;
    assert_eq!((*calls, *retries), (1, 2), "{rows:?}");
    let (_, calls, _, retries) = find("UPDATE registrations")?;
    assert_eq!((*calls, *retries), (1, 2), "{rows:?}");

    let service = store.stats();
    assert_eq!(service.retries - before.retries, 5);
    assert_eq!(service.busy - before.busy, 3);
    assert_eq!(
        service.timeouts - before.timeouts,
        2,
        "500 OperationTimedOut and a body that never came are timeouts"
    );
    Ok(())
}

/// Writes to a table with a global index through the proxy, with few
/// retries, so that statements fail between their steps (the entity put,
/// the base row's transaction, the old entity's delete) with answers lost
/// and 503s: after every one, a lookup through the index answers exactly
/// what the base rows answer (never a row that is not there, never stale
/// values), no base row lacks its entity, and REPAIR leaves the index clean.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn global_index_writes_through_injected_faults_give_no_wrong_answer() -> TestResult {
    use tablesql::{Engine, EngineOptions};
    let _cpu = crate::exclusive();
    let account = crate::azurite::fresh_account()?;
    let direct: Arc<dyn TableStore> = Arc::new(AzureStore::new(account.clone())?);
    let checker = Engine::with_store(direct, EngineOptions::default())
        .await?
        .session();
    let rows: Vec<String> = (0..60)
        .map(|i| format!("({i}, 'e{}', 0)", i % 20))
        .collect();
    for sql in [
        "CREATE TABLE gf (id INT PRIMARY KEY, email TEXT, n INT)".to_owned(),
        format!("INSERT INTO gf VALUES {}", rows.join(", ")),
        "CREATE INDEX gf_email ON gf (email) WITH (global = true)".to_owned(),
    ] {
        checker.collect(&sql).await?;
    }
    let proxy = Proxy::start(upstream()?, random_faults(36)).await?;
    let mut config = proxy.config(&account);
    config.retry.max_retries = 2;
    config.retry.delay = Duration::from_millis(5);
    config.retry.min_delay = Duration::from_millis(5);
    config.request_timeout = TIMEOUT;
    let faulty_store: Arc<dyn TableStore> = Arc::new(AzureStore::new(config)?);
    // Opening reads the catalog through the faults too: a few tries.
    let mut faulty = None;
    for _ in 0..20 {
        if let Ok(e) = Engine::with_store(faulty_store.clone(), EngineOptions::default()).await {
            faulty = Some(e);
            break;
        }
    }
    let faulty = faulty
        .ok_or("the engine never opened through the proxy")?
        .session();
    let mut rng = ChaCha8Rng::seed_from_u64(36);
    let (mut failed, mut next) = (0, 1000);
    let emails: Vec<String> = (0..20).map(|i| format!("'e{i}'")).collect();
    let by_index = format!(
        "SELECT id, email, n FROM gf WHERE email IN ({}) ORDER BY id",
        emails.join(", ")
    );
    let plan = checker.collect(&format!("EXPLAIN {by_index}")).await?;
    let shown = datafusion::arrow::util::pretty::pretty_format_batches(&plan)?.to_string();
    assert!(
        shown.contains("access=global_index_points(gf_email"),
        "{shown}"
    );
    let by_base = by_index.replace("WHERE email IN", "WHERE email || '' IN");
    for step in 0..40 {
        let sql = match rng.random_range(0..3) {
            0 => format!(
                "UPDATE gf SET email = 'e{}', n = n + 1 WHERE id % 10 = {}",
                rng.random_range(0..20),
                rng.random_range(0..10)
            ),
            1 => format!("DELETE FROM gf WHERE id % 13 = {}", rng.random_range(0..13)),
            _ => {
                let rows: Vec<String> = (0..rng.random_range(1..8))
                    .map(|_| {
                        next += 1;
                        format!("({next}, 'e{}', {step})", rng.random_range(0..20))
                    })
                    .collect();
                format!("INSERT INTO gf VALUES {}", rows.join(", "))
            }
        };
        if faulty.collect(&sql).await.is_err() {
            failed += 1;
        }
        // A request the statement gave up on (a stall past its timeout)
        // lands later, as on Azure: compared while one is in flight, the
        // two reads below could see the store before and after it.
        proxy.until_idle().await?;
        let (a, b) = (
            checker.collect(&by_index).await?,
            checker.collect(&by_base).await?,
        );
        let show = |x: &[datafusion::arrow::array::RecordBatch]| {
            datafusion::arrow::util::pretty::pretty_format_batches(x).map(|t| t.to_string())
        };
        assert_eq!(show(&a)?, show(&b)?, "step {step}, after `{sql}`");
        let missing = checker
            .collect("SELECT missing FROM tablesql_check_index('gf')")
            .await?;
        assert_eq!(
            show(&missing)?.matches(" 0 ").count(),
            1,
            "step {step}: {}",
            show(&missing)?
        );
    }
    assert!(failed > 0, "no write failed: the faults tested nothing");
    checker
        .collect("SELECT * FROM tablesql_repair_index('gf')")
        .await?;
    let check = checker
        .collect("SELECT missing + orphaned + stale AS damaged FROM tablesql_check_index('gf')")
        .await?;
    let shown = datafusion::arrow::util::pretty::pretty_format_batches(&check)?.to_string();
    assert!(shown.contains("| 0 "), "{shown}");
    eprintln!(
        "global index through faults: {failed} of 40 writes failed; every lookup answered as the base rows"
    );
    Ok(())
}
