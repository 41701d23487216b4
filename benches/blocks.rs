//! What a transaction block's kept reads cost (issue 70): one block that
//! reads account `a`, reads account `b`, and writes `b` from what it read
//! (the read-then-write of an application), at each level and with `FOR
//! UPDATE`, beside the same block at READ COMMITTED without a lock, over
//! an embedded store on disk. Account `a` is read and not written, so a
//! level that keeps reads checks it again at COMMIT (one point read) and,
//! where it must, writes it back in the block's entity group transaction
//! (one operation more in the same request).
//!
//! Before timing, each variant runs once over a counting store, and the
//! requests one block makes are printed: the figure that is the bill on
//! Azure, and does not drift with the machine.
//!
//! Run with `cargo bench --bench blocks`.

// Tests and benchmarks may unwrap: a failure names its line.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, LazyLock};

use divan::Bencher;
use tablesql::storage::metered::{MeteredStore, StoreCounters};
use tablesql::storage::*;
use tablesql::{Engine, EngineOptions, Session};
use tokio::runtime::Runtime;

const ACCOUNTS: i64 = 1_000;

/// The variants: a name, the `BEGIN`, and the lock clause of the reads.
const VARIANTS: [(&str, &str, &str); 4] = [
    ("read_committed", "BEGIN", ""),
    ("for_update", "BEGIN", " FOR UPDATE"),
    (
        "repeatable_read",
        "BEGIN ISOLATION LEVEL REPEATABLE READ",
        "",
    ),
    ("serializable", "BEGIN ISOLATION LEVEL SERIALIZABLE", ""),
];

struct Fixture {
    rt: Runtime,
    session: Session,
    counters: Arc<StoreCounters>,
    dir: tempfile::TempDir,
}

static FIXTURE: LazyLock<Fixture> = LazyLock::new(|| {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let dir = tempfile::tempdir().expect("temp dir");
    let embedded: Arc<dyn TableStore> = Arc::new(EmbeddedStore::open(dir.path()).expect("store"));
    let (store, counters) = MeteredStore::wrap(embedded);
    let session = rt.block_on(async {
        let options = EngineOptions::default().with_statistics(false);
        let session = Engine::with_store(store, options)
            .await
            .expect("engine")
            .session();
        session
            .collect(
                "CREATE TABLE accounts (id BIGINT NOT NULL, balance BIGINT NOT NULL, \
                 PRIMARY KEY (id)) WITH (storage_table = 'Accounts', \
                 partition_key = 'bank', row_key = '{id:06}')",
            )
            .await
            .expect("table");
        let values: Vec<String> = (0..ACCOUNTS).map(|i| format!("({i}, 1000)")).collect();
        for chunk in values.chunks(100) {
            let sql = format!(
                "INSERT INTO accounts (id, balance) VALUES {}",
                chunk.join(", ")
            );
            session.collect(&sql).await.expect("rows");
        }
        session
    });
    Fixture {
        rt,
        session,
        counters,
        dir,
    }
});

/// One block of `variant` over accounts `a` and `b`.
async fn block(session: &Session, variant: usize, a: i64, b: i64) {
    let (_, begin, lock) = VARIANTS[variant];
    session.collect(begin).await.expect("begin");
    for id in [a, b] {
        let sql = format!("SELECT balance FROM accounts WHERE id = {id}{lock}");
        session.collect(&sql).await.expect("read");
    }
    let sql = format!("UPDATE accounts SET balance = balance + 1 WHERE id = {b}");
    session.collect(&sql).await.expect("write");
    session.collect("COMMIT").await.expect("commit");
}

fn requests(counters: &StoreCounters) -> u64 {
    counters.by_operation().iter().map(|(_, n)| n).sum()
}

fn main() {
    let f = &*FIXTURE;
    for (variant, (name, ..)) in VARIANTS.iter().enumerate() {
        let before = requests(&f.counters);
        f.rt.block_on(block(&f.session, variant, 1, 2));
        let by = f.counters.by_operation();
        eprintln!(
            "{name}: {} requests a block ({by:?} since start)",
            requests(&f.counters) - before
        );
    }
    divan::main();
    // A static is never dropped: its store would stay in the temp
    // directory after every run.
    let _ = std::fs::remove_dir_all(f.dir.path());
}

fn run(bencher: Bencher, variant: usize) {
    let f = &*FIXTURE;
    let mut next = 0i64;
    bencher.bench_local(|| {
        next = (next + 2) % ACCOUNTS;
        f.rt.block_on(block(&f.session, variant, next, next + 1));
    });
}

#[divan::bench]
fn read_committed(bencher: Bencher) {
    run(bencher, 0);
}

#[divan::bench]
fn for_update(bencher: Bencher) {
    run(bencher, 1);
}

#[divan::bench]
fn repeatable_read(bencher: Bencher) {
    run(bencher, 2);
}

#[divan::bench]
fn serializable(bencher: Bencher) {
    run(bencher, 3);
}
