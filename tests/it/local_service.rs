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
    CmpOp, EdmValue, Entity, Filter, PartitionKey, Query, RowKey, StorageError, TableName,
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
async fn a_write_whose_answer_is_lost_is_applied_and_its_retry_says_so() -> TestResult {
    let local = Local::start(Profile::Storage, &[])?;
    let store = local.store()?;
    let t = TableName::new("Lost")?;
    store.create_table(&t).await?;
    local.service().set_limits(|l| l.lost_answers = 1.0);
    // The insert lands, its answer does not; the retry meets the entity.
    let err = store
        .execute(&t, WriteOp::Insert(row("p", 1, 1)?))
        .await
        .err()
        .ok_or("a lost answer to an insert cannot look like a success")?;
    assert!(
        matches!(
            &err,
            StorageError::AmbiguousRetry { .. }
                | StorageError::Unavailable {
                    may_have_applied: true,
                    ..
                }
        ),
        "{err:?}"
    );
    local.service().set_limits(|l| l.lost_answers = 0.0);
    assert!(
        store
            .get(&t, &PartitionKey::new("p")?, &RowKey::new("00001")?)
            .await?
            .is_some()
    );
    // An idempotent write gets through a lost answer as itself.
    local.service().set_limits(|l| l.lost_answers = 0.5);
    for i in 0..10 {
        store
            .execute(&t, WriteOp::InsertOrReplace(row("p", 2, i)?))
            .await?;
    }
    local.service().set_limits(|l| l.lost_answers = 0.0);
    let e = store
        .get(&t, &PartitionKey::new("p")?, &RowKey::new("00002")?)
        .await?;
    assert_eq!(
        e.and_then(|e| e.get("n").cloned()),
        Some(EdmValue::Int32(9))
    );
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
    // RowKeys past 255 bytes are refused.
    let long = Entity::new(PartitionKey::new("p")?, RowKey::new("r".repeat(300))?);
    let err = store
        .execute(&t, WriteOp::Insert(long))
        .await
        .err()
        .ok_or("a 300-byte RowKey")?;
    assert!(err.to_string().contains("KeyValueTooLarge"), "{err}");
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
