//! The service's state and its operations, below HTTP: tables, writes and
//! query pages over a `TableStore`, each request paced by its range server
//! and the account, refused when their queues are too long, and given the
//! faults the limits ask for.

use std::collections::HashMap;
use std::sync::{Mutex, RwLock};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tablesql_storage::storage::{
    KeyRange, PartitionKey, StorageError, StoredEntity, TableName, TableStore, WriteOp,
    WriteOutcome,
};

use crate::counters::{Counters, Counts, Place, Snapshot};
use crate::limits::{Limits, Profile};
use crate::pace::Pace;
use crate::ranges::Ranges;

/// Why a request gets no answer of its own: the service refuses it, or the
/// answer is lost.
#[derive(Debug)]
pub enum Refusal {
    /// A storage error, answered with its status and code.
    Store(StorageError),
    /// Busy: 503 ServerBusy (`storage`) or 429 (`cosmos`), with the hint.
    Busy {
        hint: Option<Duration>,
        message: &'static str,
    },
    /// 500 OperationTimedOut.
    TimedOut,
    /// The request is malformed or over a limit: 400 (or 413) with a code.
    Bad {
        status: u16,
        code: &'static str,
        message: String,
    },
    /// The write was applied and its answer is lost: the connection closes.
    LostAnswer,
}

impl From<StorageError> for Refusal {
    fn from(e: StorageError) -> Self {
        Refusal::Store(e)
    }
}

/// The four messages Azure Storage gives a 503: the first for a range
/// server's limit, the others for the account's.
const BUSY_MESSAGES: [&str; 4] = [
    "The server is busy.",
    "Operations per second is over the account limit.",
    "Ingress is over the account limit.",
    "Egress is over the account limit.",
];

/// Which limit a busy answer is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Over {
    /// A range server's entities a second.
    Server,
    /// The account's.
    Account,
}

/// The local Table service over one store.
#[derive(Debug)]
pub struct Service {
    pub(crate) store: std::sync::Arc<dyn TableStore>,
    limits: RwLock<Limits>,
    pub(crate) counters: Counters,
    /// Range servers' queues by table and number, and the account's.
    queues: Mutex<Queues>,
    pub(crate) ranges: Ranges,
    /// Deleted tables' names (folded) and when they were deleted.
    deleted: Mutex<HashMap<String, Instant>>,
    rng: Mutex<StdRng>,
}

#[derive(Debug, Default)]
struct Queues {
    account: Pace,
    servers: HashMap<(String, usize), Pace>,
}

impl Service {
    pub fn new(store: std::sync::Arc<dyn TableStore>, limits: Limits) -> Self {
        let rng = StdRng::seed_from_u64(limits.seed);
        Self {
            store,
            limits: RwLock::new(limits),
            counters: Counters::default(),
            queues: Mutex::default(),
            ranges: Ranges::default(),
            deleted: Mutex::default(),
            rng: Mutex::new(rng),
        }
    }

    /// The limits in force.
    pub fn limits(&self) -> Limits {
        self.limits
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Changes the limits while the service runs (a capacity halved mid-run).
    pub fn set_limits(&self, f: impl FnOnce(&mut Limits)) {
        f(&mut self.limits.write().unwrap_or_else(|p| p.into_inner()));
    }

    /// What the service has done so far.
    pub fn counters(&self) -> Snapshot {
        self.counters.snapshot()
    }

    pub(crate) fn chance(&self, p: f64) -> bool {
        p > 0.0
            && self
                .rng
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .random::<f64>()
                < p
    }

    pub(crate) fn shuffle<T>(&self, items: &mut [T]) {
        use rand::seq::SliceRandom as _;
        items.shuffle(&mut *self.rng.lock().unwrap_or_else(|e| e.into_inner()));
    }

    /// The latency to add to one answer: the median times a log-normal factor.
    pub fn latency(&self) -> Duration {
        let l = self.limits();
        if l.latency.is_zero() {
            return Duration::ZERO;
        }
        let (u1, u2): (f64, f64) = {
            let mut rng = self.rng.lock().unwrap_or_else(|e| e.into_inner());
            (
                rng.random::<f64>().max(f64::MIN_POSITIVE),
                rng.random::<f64>(),
            )
        };
        // Box-Muller: a standard normal from two uniforms.
        let normal = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
        // Capped at a thousand times the median, and at a minute.
        let factor = (l.latency_sigma * normal).exp().min(1000.0);
        Duration::try_from_secs_f64(l.latency.as_secs_f64() * factor)
            .unwrap_or(Duration::MAX)
            .min(Duration::from_secs(60))
    }

    /// A busy answer as the profile gives it, for the limit `over` (any of
    /// them for `None`, an injected fault).
    pub(crate) fn busy(&self, over: Option<Over>) -> Refusal {
        let l = self.limits();
        let hinted = self.chance(l.retry_hint);
        let mut rng = self.rng.lock().unwrap_or_else(|e| e.into_inner());
        let which = match over {
            Some(Over::Server) => 0,
            Some(Over::Account) => rng.random_range(1..4),
            None => rng.random_range(0..4),
        };
        drop(rng);
        let hint = match l.profile {
            // Azure Storage's hint is whole seconds; Cosmos DB's is milliseconds.
            Profile::Storage => hinted.then_some(Duration::from_secs(1)),
            Profile::Cosmos => hinted.then(|| {
                Duration::from_millis(
                    self.rng
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .random_range(5..200),
                )
            }),
        };
        Refusal::Busy {
            hint,
            message: match l.profile {
                Profile::Storage => BUSY_MESSAGES[which],
                Profile::Cosmos => "Message: {\"Errors\":[\"Request rate is large.\"]}",
            },
        }
    }

    /// The injected faults every request may meet before it does anything:
    /// a busy answer or the service's own timeout.
    pub(crate) fn injected(&self) -> Result<(), Refusal> {
        let l = self.limits();
        if self.chance(l.busy) {
            return Err(self.busy(None));
        }
        if self.chance(l.timeouts) {
            return Err(Refusal::TimedOut);
        }
        Ok(())
    }

    /// Refuses work as busy where the account's queue, or the range server's
    /// of `partition`, is longer than the backlog allows.
    pub(crate) fn admit(
        &self,
        table: &str,
        partition: Option<&PartitionKey>,
    ) -> Result<(), Refusal> {
        let l = self.limits();
        let now = Instant::now();
        let server = partition.map(|p| self.ranges.server_of(table, p, l.partitions_per_server));
        let over = {
            let q = self.queues.lock().unwrap_or_else(|e| e.into_inner());
            let server_over = || {
                server.is_some_and(|s| {
                    q.servers
                        .get(&(table.to_owned(), s))
                        .is_some_and(|p| p.backlog(now) > l.busy_backlog)
                })
            };
            if q.account.backlog(now) > l.busy_backlog {
                Some(Over::Account)
            } else {
                server_over().then_some(Over::Server)
            }
        };
        if let Some(over) = over {
            if let (Some(p), Some(s)) = (partition, server) {
                let at = Place {
                    table,
                    partition: p.as_str(),
                    server: s,
                };
                self.counters.add(
                    at,
                    Counts {
                        throttled: 1,
                        ..Counts::default()
                    },
                );
            }
            return Err(self.busy(Some(over)));
        }
        Ok(())
    }

    /// Queues `n` entities of work on a range server and the account, up to
    /// what fits before `deadline`; the count taken and when it is done.
    pub(crate) fn take(
        &self,
        table: &str,
        server: usize,
        n: usize,
        deadline: Option<Instant>,
    ) -> (usize, Instant) {
        let l = self.limits();
        let now = Instant::now();
        let mut q = self.queues.lock().unwrap_or_else(|e| e.into_inner());
        let q = &mut *q;
        let sp = q.servers.entry((table.to_owned(), server)).or_default();
        let fit = match deadline {
            None => n,
            Some(d) => {
                n.min(sp.room(now, l.partition_rate, d))
                    .min(q.account.room(now, l.account_rate, d))
            }
        };
        // A request that reads nothing still costs the account one.
        let done = sp
            .take(now, fit as f64, l.partition_rate)
            .max(q.account.take(now, fit.max(1) as f64, l.account_rate));
        (fit, done)
    }

    // ---- tables ----

    pub async fn create_table(&self, table: &TableName) -> Result<(), Refusal> {
        let grace = self.limits().delete_grace;
        let being_deleted = self
            .deleted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&table.folded())
            .is_some_and(|at| at.elapsed() < grace);
        if being_deleted {
            return Err(StorageError::TableBeingDeleted(table.as_str().to_owned()).into());
        }
        self.store.create_table(table).await?;
        Ok(())
    }

    pub async fn delete_table(&self, table: &TableName) -> Result<(), Refusal> {
        let table = self.resolve(table).await?;
        self.store.delete_table(&table).await?;
        self.deleted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(table.folded(), Instant::now());
        self.ranges.forget(table.as_str());
        Ok(())
    }

    pub async fn list_tables(&self) -> Result<Vec<TableName>, Refusal> {
        Ok(self.store.list_tables().await?)
    }

    /// The table a name means: Azure Storage ignores case; Cosmos DB does
    /// not, so there a name in another case is no table.
    pub async fn resolve(&self, table: &TableName) -> Result<TableName, Refusal> {
        if self.limits().profile == Profile::Storage {
            return Ok(table.clone());
        }
        let tables = self.store.list_tables().await?;
        match tables.into_iter().find(|t| t.folded() == table.folded()) {
            Some(t) if t.as_str() == table.as_str() => Ok(t),
            _ => Err(StorageError::TableNotFound(table.as_str().to_owned()).into()),
        }
    }

    // ---- entities ----

    pub async fn get(
        &self,
        table: &TableName,
        pk: &PartitionKey,
        rk: &tablesql_storage::storage::RowKey,
    ) -> Result<Option<StoredEntity>, Refusal> {
        let table = self.resolve(table).await?;
        self.map_ranges(&table, false).await?;
        self.admit(table.as_str(), Some(pk))?;
        let found = self.store.get(&table, pk, rk).await?;
        let server = self
            .ranges
            .server_of(table.as_str(), pk, self.limits().partitions_per_server);
        let (_, done) = self.take(table.as_str(), server, 1, None);
        sleep_until(done).await;
        let at = Place {
            table: table.as_str(),
            partition: pk.as_str(),
            server,
        };
        let n = u64::from(found.is_some());
        self.counters.add(
            at,
            Counts {
                requests: 1,
                scanned: n,
                returned: n,
                ..Counts::default()
            },
        );
        Ok(found)
    }

    /// Writes of one partition, applied together (a batch) or alone; the
    /// answer may then be lost.
    pub async fn write(
        &self,
        table: &TableName,
        mut ops: Vec<WriteOp>,
        batch: bool,
    ) -> Result<Vec<WriteOutcome>, Refusal> {
        let table = self.resolve(table).await?;
        let l = self.limits();
        let Some(pk) = ops.first().map(|op| op.keys().0.clone()) else {
            return Err(
                StorageError::from(tablesql_storage::storage::InvalidInput::EmptyBatch).into(),
            );
        };
        for op in &ops {
            let rk = op.keys().1.as_str();
            if rk.len() > l.max_row_key_bytes {
                return Err(Refusal::Bad {
                    status: 400,
                    code: "KeyValueTooLarge",
                    message: format!(
                        "The RowKey is {} bytes, over {}.",
                        rk.len(),
                        l.max_row_key_bytes
                    ),
                });
            }
        }
        self.map_ranges(&table, false).await?;
        self.admit(table.as_str(), Some(&pk))?;
        let server = self
            .ranges
            .server_of(table.as_str(), &pk, l.partitions_per_server);
        let (_, done) = self.take(table.as_str(), server, ops.len(), None);
        sleep_until(done).await;
        let n = ops.len() as u64;
        let outcome = if batch {
            self.store
                .execute_batch(&table, std::mem::take(&mut ops))
                .await
        } else {
            match ops.pop() {
                Some(op) => self.store.execute(&table, op).await.map(|o| vec![o]),
                None => Ok(Vec::new()),
            }
        };
        self.ranges.touch(table.as_str());
        let at = Place {
            table: table.as_str(),
            partition: pk.as_str(),
            server,
        };
        self.counters.add(
            at,
            Counts {
                requests: 1,
                scanned: n,
                ..Counts::default()
            },
        );
        let outcome = outcome?;
        if self.chance(l.lost_answers) {
            return Err(Refusal::LostAnswer);
        }
        Ok(outcome)
    }

    /// Lists the table's partitions anew where the range servers' map (or,
    /// `exact`, a walk over every partition) needs it.
    pub(crate) async fn map_ranges(
        &self,
        table: &TableName,
        exact: bool,
    ) -> Result<(), StorageError> {
        if let Some(began) = self.ranges.stale(table.as_str(), exact) {
            let partitions = self.partitions(table).await?;
            self.ranges.set(table.as_str(), partitions, began);
        }
        Ok(())
    }

    /// Every partition of a table in key order (the range servers' map and
    /// Cosmos DB's walk read it).
    pub(crate) async fn partitions(
        &self,
        table: &TableName,
    ) -> Result<Vec<PartitionKey>, StorageError> {
        let mut out = Vec::new();
        let mut after: Option<PartitionKey> = None;
        loop {
            let page = self
                .store
                .partitions(table, &KeyRange::all(), after.as_ref())
                .await?;
            out.extend(page.partitions);
            match page.after {
                Some(a) => after = Some(a),
                None => return Ok(out),
            }
        }
    }
}

pub(crate) async fn sleep_until(t: Instant) {
    tokio::time::sleep_until(tokio::time::Instant::from_std(t)).await;
}
