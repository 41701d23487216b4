//! The local Table service with Azure's limits (`tablesql::tableservice`),
//! started in the test's own runtime on a loopback port, over an embedded
//! store in a temporary directory; and the Azure client configured for it.

use std::time::Duration;

use tablesql::storage::azure::{AzureConfig, RetryPolicy};
use tablesql::storage::{AzureStore, EmbeddedStore};
use tablesql::tableservice::{Account, Limits, Profile, Running, Service};
use tempfile::TempDir;

type TestResult<T = ()> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// A running service and what keeps it alive.
pub struct Local {
    pub running: Running,
    _dir: TempDir,
}

/// Knobs every test service starts with: rates far above what a test
/// sends (a test that measures pacing sets its own), a deleted table's name
/// free at once, a fixed seed.
const QUICK: &[&str] = &[
    "partition_rate=1000000",
    "account_rate=10000000",
    "delete_grace_ms=0",
    "seed=7",
];

impl Local {
    /// A service of `profile` with [`QUICK`] and then `knobs`. Needs a
    /// running Tokio runtime (its accept loop is spawned on it).
    pub fn start(profile: Profile, knobs: &[&str]) -> TestResult<Local> {
        Self::start_with(profile, knobs, None)
    }

    /// As [`Local::start`], with an account that accepts `identity`'s
    /// Entra ID tokens.
    pub fn start_with(
        profile: Profile,
        knobs: &[&str],
        identity: Option<std::sync::Arc<tablesql::tableservice::Identity>>,
    ) -> TestResult<Local> {
        let mut limits = Limits::new(profile);
        for k in QUICK.iter().chain(knobs) {
            limits.set(k)?;
        }
        let dir = tempfile::tempdir()?;
        let store = EmbeddedStore::open(dir.path())?;
        let service = std::sync::Arc::new(Service::new(std::sync::Arc::new(store), limits));
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let listener = tokio::net::TcpListener::from_std(listener)?;
        let account = Account::new(
            tablesql::storage::azure::config::DEV_ACCOUNT,
            tablesql::storage::azure::config::DEV_ACCOUNT_KEY,
        )?;
        let account = match identity {
            Some(identity) => account.with_identity(identity),
            None => account,
        };
        let running = tablesql::tableservice::serve(listener, service, account)?;
        Ok(Local { running, _dir: dir })
    }

    /// The client's configuration: the service's connection string, with
    /// quick retries.
    pub fn config(&self) -> TestResult<AzureConfig> {
        let mut config = AzureConfig::parse(&self.running.connection_string())?;
        config.retry = RetryPolicy::default().with_max_retries(8).with_delays(
            Duration::from_millis(5),
            Duration::from_millis(1),
            Duration::from_millis(100),
        );
        Ok(config)
    }

    /// A client store on the service.
    pub fn store(&self) -> TestResult<AzureStore> {
        Ok(AzureStore::new(self.config()?)?)
    }

    pub fn service(&self) -> &Service {
        &self.running.service
    }
}

// ---- the service's limits, met by the real client --------------------------

use std::time::Instant;

use tablesql::storage::{
    CmpOp, EdmValue, Entity, Filter, IfMatch, PartitionKey, Query, RowKey, StorageError, TableName,
    TableStore, WriteOp,
};

fn row(pk: &str, rk: usize, n: i32) -> TestResult<Entity> {
    Ok(
        Entity::new(PartitionKey::new(pk)?, RowKey::new(format!("{rk:05}"))?)
            .with("n", EdmValue::Int32(n)),
    )
}

/// Writes `rows` entities into each of `partitions` partitions `p000`,
/// `p001`, ... in batches.
async fn fill(store: &dyn TableStore, t: &TableName, partitions: usize, rows: usize) -> TestResult {
    for p in 0..partitions {
        let pk = format!("p{p:03}");
        let all: Vec<WriteOp> = (0..rows)
            .map(|r| row(&pk, r, r as i32).map(WriteOp::Insert))
            .collect::<TestResult<_>>()?;
        for chunk in all.chunks(100) {
            store.execute_batch(t, chunk.to_vec()).await?;
        }
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_is_scanned_at_its_servers_rate_and_counted() -> TestResult {
    let local = Local::start(Profile::Storage, &[])?;
    let store = local.store()?;
    let t = TableName::new("Paced")?;
    store.create_table(&t).await?;
    fill(&store, &t, 1, 600).await?;
    // 600 entities at 2,000 per second take at least 0.3 s to scan, with a
    // filter that keeps one of them: the rate is of entities scanned.
    local.service().set_limits(|l| l.partition_rate = 2000.0);
    let q = Query::partition(PartitionKey::new("p000")?).filter(Filter::property(
        "n",
        CmpOp::Eq,
        EdmValue::Int32(599),
    ));
    let before = local.service().counters();
    let started = Instant::now();
    let found = store.query_all(&t, &q).await?;
    let took = started.elapsed();
    assert_eq!(found.len(), 1);
    assert!(
        took >= Duration::from_millis(290),
        "600 entities at 2,000/s in {took:?}"
    );
    let after = local.service().counters();
    let scanned = after.table("Paced").scanned - before.table("Paced").scanned;
    let returned = after.table("Paced").returned - before.table("Paced").returned;
    assert_eq!((scanned, returned), (600, 1));
    let part = &after.partitions[&("Paced".to_owned(), "p000".to_owned())];
    assert_eq!((part.scanned, part.returned), (600 + 600, 1), "{part:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_end_at_range_boundaries_and_at_the_query_budget_and_the_client_reads_through()
-> TestResult {
    let local = Local::start(Profile::Storage, &["partitions_per_server=2"])?;
    let store = local.store()?;
    let t = TableName::new("Budget")?;
    store.create_table(&t).await?;
    fill(&store, &t, 6, 150).await?;
    // Six partitions on three range servers: a page never spans two.
    let mut token = None;
    let mut pages = Vec::new();
    loop {
        let page = store.query(&t, &Query::all(), token.as_ref()).await?;
        let servers: std::collections::BTreeSet<_> = page
            .entities
            .iter()
            .map(|e| {
                e.partition_key().as_str()[1..]
                    .parse::<usize>()
                    .unwrap_or(0)
                    / 2
            })
            .collect();
        assert!(servers.len() <= 1, "a page spans servers {servers:?}");
        pages.push(page.entities.len());
        match page.continuation {
            Some(c) => token = Some(c),
            None => break,
        }
    }
    assert_eq!(pages.iter().sum::<usize>(), 900);
    assert!(pages.len() >= 3, "{pages:?}");
    // A budget of 20 ms at 2,000 entities/s reads about 40 entities a page:
    // a selective filter gets short and empty pages, each with a token,
    // and still its whole answer.
    local.service().set_limits(|l| {
        l.partition_rate = 2000.0;
        l.query_budget = Duration::from_millis(20);
    });
    let q = Query::all().filter(Filter::property("n", CmpOp::Ge, EdmValue::Int32(148)));
    let before = local.service().counters().account;
    let found = store.query_all(&t, &q).await?;
    assert_eq!(found.len(), 12);
    let after = local.service().counters().account;
    assert!(
        after.requests - before.requests > 10,
        "{before:?} {after:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn throttled_scans_slow_down_and_never_fail() -> TestResult {
    // No backlog: a range server busy with one page refuses the next.
    let local = Local::start(Profile::Storage, &["partitions_per_server=100"])?;
    let store = std::sync::Arc::new(local.store()?);
    let t = TableName::new("Busy")?;
    store.create_table(&t).await?;
    fill(&*store, &t, 8, 100).await?;
    local.service().set_limits(|l| {
        // Each partition's scan takes a quarter of a second.
        l.partition_rate = 400.0;
        l.busy_backlog = Duration::ZERO;
    });
    let scans = (0..8).map(|p| {
        let store = store.clone();
        let t = t.clone();
        tokio::spawn(async move {
            let q = Query::partition(PartitionKey::new(format!("p{p:03}"))?);
            store
                .query_all(&t, &q)
                .await
                .map(|rows| rows.len())
                .map_err(|e| Box::new(e) as Box<dyn std::error::Error + Send + Sync>)
        })
    });
    for scan in scans.collect::<Vec<_>>() {
        assert_eq!(scan.await??, 100);
    }
    let counts = local.service().counters();
    assert!(counts.account.throttled > 0, "{:?}", counts.account);
    assert!(store.stats().busy > 0);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_whose_answer_is_lost_is_settled_by_reading_it_back() -> TestResult {
    let local = Local::start(Profile::Storage, &[])?;
    let store = local.store()?;
    let t = TableName::new("Lost")?;
    store.create_table(&t).await?;
    let (p, r1) = (PartitionKey::new("p")?, RowKey::new("00001")?);
    // The insert lands and its answer does not; the retry meets the entity
    // (409), which, read back, is what the insert wrote: it was applied,
    // once, and its ETag is the entity's.
    local.service().set_limits(|l| l.lost_answers = 1.0);
    let wrote = store.execute(&t, WriteOp::Insert(row("p", 1, 1)?)).await?;
    local.service().set_limits(|l| l.lost_answers = 0.0);
    let now = store
        .get(&t, &p, &r1)
        .await?
        .ok_or("the insert is not there")?;
    assert_eq!(wrote.etag, Some(now.etag.clone()));
    // A batch likewise: an update and a delete of any version.
    store.execute(&t, WriteOp::Insert(row("p", 3, 3)?)).await?;
    local.service().set_limits(|l| l.lost_answers = 1.0);
    let ops = vec![
        WriteOp::Update(row("p", 1, 10)?, IfMatch::Any),
        WriteOp::Delete {
            partition_key: p.clone(),
            row_key: RowKey::new("00003")?,
            if_match: IfMatch::Any,
        },
    ];
    store.execute_batch(&t, ops).await?;
    local.service().set_limits(|l| l.lost_answers = 0.0);
    let now = store
        .get(&t, &p, &r1)
        .await?
        .ok_or("the update lost the entity")?;
    assert_eq!(now.get("n"), Some(&EdmValue::Int32(10)));
    assert!(store.get(&t, &p, &RowKey::new("00003")?).await?.is_none());
    // A write conditional on a version is settled by the id it carried,
    // which no read shows: another client's equal write would read the
    // same by its values.
    local.service().set_limits(|l| l.lost_answers = 1.0);
    let conditional = WriteOp::Update(row("p", 1, 11)?, IfMatch::ETag(now.etag));
    let wrote = store.execute(&t, conditional).await?;
    local.service().set_limits(|l| l.lost_answers = 0.0);
    let now = store.get(&t, &p, &r1).await?.ok_or("the update lost it")?;
    assert_eq!(wrote.etag, Some(now.etag.clone()));
    assert_eq!(now.entity.properties.len(), 1, "{:?}", now.entity);
    assert_eq!(now.get("n"), Some(&EdmValue::Int32(11)));
    let scanned = store.query_all(&t, &Query::partition(p.clone())).await?;
    assert!(scanned.iter().all(|e| e.entity.properties.len() == 1));
    // A delete conditional on a version is not: the entity is gone
    // whoever deleted it.
    local.service().set_limits(|l| l.lost_answers = 1.0);
    let delete = WriteOp::Delete {
        partition_key: p.clone(),
        row_key: r1.clone(),
        if_match: IfMatch::ETag(now.etag),
    };
    let err = store.execute(&t, delete).await.err().ok_or("settled")?;
    assert!(
        matches!(err, StorageError::AmbiguousRetry { .. }),
        "{err:?}"
    );
    local.service().set_limits(|l| l.lost_answers = 0.0);
    // Whether what a retry reads back shows the write applied, another
    // client's change included, is `reads_as_applied`'s unit test.
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_tables_name_is_being_deleted_for_a_while() -> TestResult {
    let local = Local::start(Profile::Storage, &["delete_grace_ms=60000"])?;
    let store = local.store()?;
    let t = TableName::new("Gone")?;
    store.create_table(&t).await?;
    store.delete_table(&t).await?;
    let err = store
        .create_table(&t)
        .await
        .err()
        .ok_or("recreated at once")?;
    assert!(matches!(err, StorageError::TableBeingDeleted(_)), "{err:?}");
    local
        .service()
        .set_limits(|l| l.delete_grace = Duration::ZERO);
    store.create_table(&t).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cosmos_answers_429_with_and_without_hints_and_in_no_key_order() -> TestResult {
    let local = Local::start(Profile::Cosmos, &["busy=0.3", "retry_hint=0.5"])?;
    let store = local.store()?;
    let t = TableName::new("Cosmos")?;
    store.create_table(&t).await?;
    fill(&store, &t, 5, 40).await?;
    // Busy answers come by chance: a bounded number of reads sees one.
    for _ in 0..200 {
        if store.stats().busy > 0 {
            break;
        }
        store.list_tables().await?;
    }
    let stats = store.stats();
    assert!(stats.busy > 0, "{stats:?}");
    local.service().set_limits(|l| l.busy = 0.0);
    // A page of every partition, in an order that is not the keys'.
    let page = store.query(&t, &Query::all(), None).await?;
    let keys: Vec<_> = page
        .entities
        .iter()
        .map(|e| (e.partition_key().clone(), e.row_key().clone()))
        .collect();
    let mut sorted = keys.clone();
    sorted.sort();
    assert_eq!(keys.len(), 200);
    assert_ne!(keys, sorted, "cosmos answered in key order");
    // RowKeys past 255 bytes are refused, by the client before the service.
    let long = Entity::new(PartitionKey::new("p")?, RowKey::new("r".repeat(300))?);
    let err = store
        .execute(&t, WriteOp::Insert(long))
        .await
        .err()
        .ok_or("a 300-byte RowKey")?;
    assert!(err.to_string().contains("takes at most 255"), "{err}");
    // Table names are case-sensitive.
    let err = store
        .query(&TableName::new("COSMOS")?, &Query::all(), None)
        .await
        .err();
    assert!(
        matches!(err, Some(StorageError::TableNotFound(_))),
        "{err:?}"
    );
    Ok(())
}

// ---- the engine on a store without key order ------------------------------

use tablesql::datafusion::arrow::util::pretty::pretty_format_batches;

/// The demo over the `cosmos` profile (pages in no key order, opaque
/// tokens, shuffled pages) answers every ordered query exactly as over the
/// embedded store: ORDER BY, LIMIT on a key prefix, keyset pages, GROUP BY,
/// the index rows' order, and writes in a block read back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_over_cosmos_answers_ordered_queries_as_over_the_embedded_store() -> TestResult {
    let local = Local::start(Profile::Cosmos, &["busy=0.02", "empty_pages=0.05"])?;
    let cosmos: std::sync::Arc<dyn TableStore> = std::sync::Arc::new(local.store()?);
    let embedded: std::sync::Arc<dyn TableStore> =
        std::sync::Arc::new(tablesql::storage::EmbeddedStore::in_memory()?);
    for store in [&cosmos, &embedded] {
        tablesql::demo::load(store.as_ref(), 300, |_, _| {}).await?;
    }
    assert!(!cosmos.key_ordered() && embedded.key_ordered());
    let options = || tablesql::EngineOptions::default();
    let on_cosmos = tablesql::Engine::with_store(cosmos, options())
        .await?
        .session();
    let on_embedded = tablesql::Engine::with_store(embedded, options())
        .await?
        .session();
    let boston = "event = '2012 Boston Marathon' AND distance = 'Full'";
    let queries = [
        "SELECT event, distance, bib, name, age FROM registrations ORDER BY event, distance, bib LIMIT 25".to_owned(),
        format!("SELECT bib, name, age FROM registrations WHERE {boston} ORDER BY bib LIMIT 10"),
        format!("SELECT bib, name FROM registrations WHERE {boston} AND bib > 40 ORDER BY bib LIMIT 5"),
        format!("SELECT bib, name FROM registrations WHERE {boston} ORDER BY bib DESC LIMIT 5"),
        "SELECT bib, name FROM registrations WHERE (event, distance, bib) > ('2012 Boston Marathon', 'Half', 250) ORDER BY event, distance, bib LIMIT 6".to_owned(),
        "SELECT event, count(*) AS n, avg(age) AS a, min(bib) AS b FROM registrations GROUP BY event ORDER BY event".to_owned(),
        "SELECT gender, count(*) AS n FROM registrations GROUP BY gender ORDER BY gender".to_owned(),
        format!("SELECT age, bib FROM registrations WHERE {boston} AND age BETWEEN 30 AND 40 ORDER BY age, bib"),
        "SELECT name, age FROM registrations ORDER BY age DESC, event, distance, bib LIMIT 8".to_owned(),
        "SELECT distance, count(*) AS n FROM registrations WHERE event = '2013 Chicago Marathon' GROUP BY distance ORDER BY distance".to_owned(),
        "SELECT count(*) AS n FROM registrations".to_owned(),
        "SELECT e.city, count(*) AS n FROM registrations r JOIN events e ON r.event = e.event AND r.distance = e.distance GROUP BY e.city ORDER BY e.city".to_owned(),
    ];
    for sql in &queries {
        let want = pretty_format_batches(&on_embedded.collect(sql).await?)?.to_string();
        let got = pretty_format_batches(&on_cosmos.collect(sql).await?)?.to_string();
        assert_eq!(got, want, "{sql}");
    }
    // A block's own writes among the store's pages, then the rows in order.
    for session in [&on_cosmos, &on_embedded] {
        session.collect("BEGIN").await?;
        session
            .collect(
                "INSERT INTO registrations (event, distance, bib, name, gender, age) VALUES ('2012 Boston Marathon', 'Full', 99999, 'Zed', 'M', 33)",
            )
            .await?;
        session
            .collect(&format!(
                "DELETE FROM registrations WHERE {boston} AND bib = 1"
            ))
            .await?;
    }
    let sql =
        format!("SELECT bib, name FROM registrations WHERE {boston} ORDER BY bib DESC LIMIT 3");
    let want = pretty_format_batches(&on_embedded.collect(&sql).await?)?.to_string();
    let got = pretty_format_batches(&on_cosmos.collect(&sql).await?)?.to_string();
    assert_eq!(got, want);
    let sql = format!("SELECT count(*) AS n FROM registrations WHERE {boston}");
    let want = pretty_format_batches(&on_embedded.collect(&sql).await?)?.to_string();
    let got = pretty_format_batches(&on_cosmos.collect(&sql).await?)?.to_string();
    assert_eq!(got, want);
    for session in [&on_cosmos, &on_embedded] {
        session.collect("COMMIT").await?;
    }
    let want = pretty_format_batches(&on_embedded.collect(&sql).await?)?.to_string();
    let got = pretty_format_batches(&on_cosmos.collect(&sql).await?)?.to_string();
    assert_eq!(got, want);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scan_of_many_partitions_reads_segments_of_the_key_space_side_by_side() -> TestResult {
    // Four partitions to a range server: a fan-out in key order would keep
    // its four requests on one or two of them.
    let local = Local::start(Profile::Storage, &["partitions_per_server=4"])?;
    let store: std::sync::Arc<dyn TableStore> = std::sync::Arc::new(local.store()?);
    let t = TableName::new("spread")?;
    store.create_table(&t).await?;
    fill(&*store, &t, 64, 5).await?;
    let options = tablesql::EngineOptions::default()
        .with_scan(tablesql::ScanOptions::default().with_max_in_flight(4))
        .with_scan_policy(tablesql::ScanPolicy::Allow);
    let session = tablesql::Engine::with_store(store, options)
        .await?
        .session();
    let sql = "SELECT count(*) AS c, sum(n) AS s FROM raw.spread";
    let plan = pretty_format_batches(&session.collect(&format!("EXPLAIN ANALYZE {sql}")).await?)?
        .to_string();
    let line = plan
        .lines()
        .find(|l| l.contains("PartitionScanExec"))
        .ok_or("a scan")?;
    assert!(line.contains("fanout=partitions(listed) lanes=4"), "{plan}");
    // The listing found the first partitions, probed the rest of the key
    // space for places to start, and read from each: four segments a lane
    // (fewer where the probes found fewer partitions, never more than the
    // 56 partitions after the first eight listed).
    let run = metric_of(line, "lanes_run")?;
    assert!((8..=57).contains(&run), "{plan}");
    assert!(
        metric_of(line, "requests")? < 64,
        "a chain per segment: {plan}"
    );
    // Every partition read once: 64 partitions of n = 0..4.
    let got = pretty_format_batches(&session.collect(sql).await?)?.to_string();
    let want = "+-----+-----+\n| c   | s   |\n+-----+-----+\n| 320 | 640 |\n+-----+-----+";
    assert_eq!(got, want);
    Ok(())
}

/// The value of ` name=` on a plan line.
fn metric_of(line: &str, name: &str) -> TestResult<usize> {
    let value = line
        .split(&format!(" {name}="))
        .nth(1)
        .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
        .ok_or_else(|| format!("no {name}= in {line}"))?;
    Ok(value.parse()?)
}
