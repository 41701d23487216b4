//! Billable transactions: what a statement costs on Azure, where every
//! request is billed, counted by kind as the store is asked (a page of a
//! query, a point read, an entity group transaction, a single write).
//! A [`MeteredStore`] over a [`Bill`] counts the requests made through it;
//! the engine gives each scan and each write of a plan a store of its own,
//! so that EXPLAIN ANALYZE shows each one's bill and the statement's is
//! their sum. A store that keeps no accounts (the embedded one) is billed
//! all the same: the figures say what the statement would cost on Azure.
//!
//! A retry the store below makes is not seen here: the counts are the
//! requests the engine asked for, which is what a plan can change.

use std::fmt;
use std::ops::AddAssign;
use std::sync::atomic::{AtomicU64, Ordering};

use super::TableStore;
#[cfg(doc)]
use super::metered::MeteredStore;

/// The requests a store is asked, as a [`Meter`] counts them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// A point read: a GET, or a query of a run of keys of one partition.
    Get,
    /// A page of a query.
    QueryPage,
    /// A write of one entity.
    Write,
    /// An entity group transaction.
    Batch,
    /// A page of a partition listing.
    Partitions,
    /// A table created, deleted or listed.
    Tables,
}

impl Operation {
    /// Every operation.
    pub const ALL: [Operation; 6] = [
        Operation::Get,
        Operation::QueryPage,
        Operation::Write,
        Operation::Batch,
        Operation::Partitions,
        Operation::Tables,
    ];
}

/// What counts the requests of a [`MeteredStore`]: the server's counters,
/// or a [`Bill`].
pub trait Meter: std::fmt::Debug + Send + Sync {
    /// `n` requests of `operation`.
    fn add(&self, operation: Operation, n: u64);
}

/// Transactions by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Transactions {
    /// Pages of queries, partition listings among them.
    pub query_pages: u64,
    /// Point reads: a GET of one entity, or a query of a run of keys of
    /// one partition (`TableStore::get_many_limit`).
    pub point_reads: u64,
    /// Entity group transactions (`$batch`), each one transaction.
    pub batches: u64,
    /// Writes of one entity sent on their own.
    pub writes: u64,
    /// Tables created, deleted or listed.
    pub other: u64,
}

/// The kinds' names, in the order of [`Transactions::by_kind`]: metric
/// labels and column names.
const KINDS: [&str; 5] = ["query_pages", "point_reads", "batches", "writes", "other"];

/// The position among [`KINDS`] of the kind `operation` is billed as.
fn kind(operation: Operation) -> usize {
    match operation {
        Operation::QueryPage | Operation::Partitions => 0,
        Operation::Get => 1,
        Operation::Batch => 2,
        Operation::Write => 3,
        Operation::Tables => 4,
    }
}

impl Transactions {
    fn counts(&self) -> [u64; 5] {
        [
            self.query_pages,
            self.point_reads,
            self.batches,
            self.writes,
            self.other,
        ]
    }

    fn from_counts([query_pages, point_reads, batches, writes, other]: [u64; 5]) -> Self {
        Self {
            query_pages,
            point_reads,
            batches,
            writes,
            other,
        }
    }

    /// `n` requests of `operation`.
    pub fn of(operation: Operation, n: u64) -> Self {
        let mut t = Self::default();
        t.add(operation, n);
        t
    }

    /// Adds `n` requests of `operation`, as the kind they are billed as.
    pub fn add(&mut self, operation: Operation, n: u64) {
        let mut counts = self.counts();
        counts[kind(operation)] += n;
        *self = Self::from_counts(counts);
    }

    /// Every kind together.
    pub fn total(&self) -> u64 {
        self.counts().iter().sum()
    }

    /// The kinds as `(name, count)`, in a fixed order.
    pub fn by_kind(&self) -> [(&'static str, u64); 5] {
        let counts = self.counts();
        std::array::from_fn(|i| (KINDS[i], counts[i]))
    }
}

impl AddAssign for Transactions {
    fn add_assign(&mut self, o: Self) {
        let (mine, theirs) = (self.counts(), o.counts());
        *self = Self::from_counts(std::array::from_fn(|i| mine[i] + theirs[i]));
    }
}

/// `7 (query_pages=2 point_reads=5)`: the total, then the kinds that are
/// not zero.
impl fmt::Display for Transactions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.total())?;
        let mut kinds = self.by_kind().into_iter().filter(|(_, n)| *n > 0);
        if let Some((name, n)) = kinds.next() {
            write!(f, " ({name}={n}")?;
            for (name, n) in kinds {
                write!(f, " {name}={n}")?;
            }
            write!(f, ")")?;
        }
        Ok(())
    }
}

/// Transactions counted as they are made, from any thread.
#[derive(Debug, Default)]
pub struct Bill([AtomicU64; 5]);

impl Bill {
    /// The counts so far.
    pub fn get(&self) -> Transactions {
        Transactions::from_counts(std::array::from_fn(|i| self.0[i].load(Ordering::Relaxed)))
    }

    /// Adds `t`.
    pub fn add_all(&self, t: Transactions) {
        for (c, n) in self.0.iter().zip(t.counts()) {
            if n > 0 {
                c.fetch_add(n, Ordering::Relaxed);
            }
        }
    }
}

impl Meter for Bill {
    fn add(&self, operation: Operation, n: u64) {
        self.0[kind(operation)].fetch_add(n, Ordering::Relaxed);
    }
}

/// The requests a read of `keys` RowKeys of one partition takes from
/// `store`: one per run it reads together, or one per key.
pub fn point_read_requests(store: &dyn TableStore, keys: usize) -> u64 {
    keys.div_ceil(store.get_many_limit().max(1)) as u64
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::storage::entity::Entity;
    use crate::storage::metered::MeteredStore;
    use crate::storage::{MemoryStore, PartitionKey, Query, Result, RowKey, TableName, WriteOp};

    #[tokio::test]
    async fn each_request_is_billed_by_its_kind() -> Result<()> {
        let bill = Arc::new(Bill::default());
        let store = MeteredStore::over(Arc::new(MemoryStore::new()), bill.clone());
        let t = TableName::new("Billed")?;
        store.create_table(&t).await?;
        let (pk, rk) = (PartitionKey::new("p")?, RowKey::new("r")?);
        let entity = Entity::new(pk.clone(), rk.clone());
        store.execute(&t, WriteOp::Insert(entity.clone())).await?;
        store
            .execute_batch(&t, vec![WriteOp::InsertOrReplace(entity)])
            .await?;
        store.get(&t, &pk, &rk).await?;
        // The memory store reads a key a request: three keys, three reads.
        let keys = [rk.clone(), RowKey::new("s")?, RowKey::new("t")?];
        store.get_many(&t, &pk, &keys).await?;
        store.query(&t, &Query::all(), None).await?;
        let billed = bill.get();
        assert_eq!(
            billed,
            Transactions {
                query_pages: 1,
                point_reads: 4,
                batches: 1,
                writes: 1,
                other: 1,
            }
        );
        assert_eq!(
            billed.to_string(),
            "8 (query_pages=1 point_reads=4 batches=1 writes=1 other=1)"
        );
        assert_eq!(Transactions::default().to_string(), "0");
        Ok(())
    }
}
