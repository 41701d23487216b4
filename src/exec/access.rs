//! Access paths: what a scan asks of the store, and how EXPLAIN names it
//! (`access=point`, `points(N)`, `row_range`, `partition_range`, `full_scan`).

use std::fmt;
use std::ops::Bound;

use crate::storage::{Filter, KeyRange, PartitionKey, RowKey};

/// The kind of access, in EXPLAIN's vocabulary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AccessKind {
    /// Every primary key column fixed: at most one row per request. A
    /// contradiction is `points(0)`.
    Points,
    /// Fixed partitions, a range of RowKeys in each.
    RowRange,
    /// A range of PartitionKeys.
    PartitionRange,
    /// Every partition.
    FullScan,
}

/// One request to the store.
#[derive(Debug, Clone, PartialEq)]
pub enum KeyRequest {
    /// A point read by both keys.
    Get(PartitionKey, RowKey),
    /// A ranged query; `at_most_one` when the range holds at most one base row
    /// (a primary key fixed by a RowKey prefix), so one entity ends it.
    Scan {
        /// The partitions.
        partitions: KeyRange<PartitionKey>,
        /// The rows within each partition.
        rows: KeyRange<RowKey>,
        /// Whether one entity answers it.
        at_most_one: bool,
    },
}

/// The requests a scan runs, in key order, plus the property filter the store applies.
#[derive(Debug, Clone, PartialEq)]
pub struct AccessPath {
    /// The kind, for EXPLAIN.
    pub kind: AccessKind,
    /// The requests, sorted by key and disjoint, so their outputs concatenate in key order.
    pub requests: Vec<KeyRequest>,
    /// Conditions on properties the store evaluates (rows failing them are not sent).
    pub filter: Option<Filter>,
}

impl AccessPath {
    /// Whether the path reads every partition (a full scan, or a RowKey
    /// range in every partition).
    pub fn reads_every_partition(&self) -> bool {
        self.requests.iter().any(|r| {
            matches!(
                r,
                KeyRequest::Scan { partitions, .. }
                    if partitions.start == Bound::Unbounded && partitions.end == Bound::Unbounded
            )
        })
    }

    /// Whether all rows come from one partition (so they arrive in RowKey order).
    pub fn single_partition(&self) -> bool {
        let mut pks = self.requests.iter().map(|r| match r {
            KeyRequest::Get(pk, _) => Some(pk),
            KeyRequest::Scan { partitions, .. } => match (&partitions.start, &partitions.end) {
                (Bound::Included(a), Bound::Included(b)) if a == b => Some(a),
                _ => None,
            },
        });
        match pks.next() {
            None => true,
            Some(None) => false,
            Some(Some(first)) => pks.all(|p| p == Some(first)),
        }
    }
}

fn range<K: fmt::Display>(f: &mut fmt::Formatter<'_>, r: &KeyRange<K>) -> fmt::Result {
    match (&r.start, &r.end) {
        (Bound::Included(a), Bound::Included(b)) if a.to_string() == b.to_string() => {
            return write!(f, "{a:?}", a = a.to_string());
        }
        _ => {}
    }
    match &r.start {
        Bound::Unbounded => f.write_str("(-inf")?,
        Bound::Included(a) => write!(f, "[{:?}", a.to_string())?,
        Bound::Excluded(a) => write!(f, "({:?}", a.to_string())?,
    }
    match &r.end {
        Bound::Unbounded => f.write_str(", +inf)"),
        Bound::Included(b) => write!(f, ", {:?}]", b.to_string()),
        Bound::Excluded(b) => write!(f, ", {:?})", b.to_string()),
    }
}

/// Most requests EXPLAIN lists before it elides the rest.
const SHOWN: usize = 4;

impl fmt::Display for KeyRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyRequest::Get(pk, rk) => write!(f, "pk={:?} rk={:?}", pk.as_str(), rk.as_str()),
            KeyRequest::Scan {
                partitions, rows, ..
            } => {
                f.write_str("pk=")?;
                range(f, partitions)?;
                f.write_str(" rk=")?;
                range(f, rows)
            }
        }
    }
}

impl fmt::Display for AccessPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.requests.len();
        match self.kind {
            AccessKind::Points if n == 1 => f.write_str("access=point")?,
            AccessKind::Points => write!(f, "access=points({n})")?,
            AccessKind::RowRange => f.write_str("access=row_range")?,
            AccessKind::PartitionRange => f.write_str("access=partition_range")?,
            AccessKind::FullScan => f.write_str("access=full_scan")?,
        }
        for (i, r) in self.requests.iter().take(SHOWN).enumerate() {
            write!(f, "{}{r}", if i == 0 { " " } else { "; " })?;
        }
        if n > SHOWN {
            write!(f, "; ... {} more", n - SHOWN)?;
        }
        match &self.filter {
            Some(filter) => write!(f, " filter=[{filter}]"),
            None => Ok(()),
        }
    }
}

/// The facts of a scan of every partition: the table and the key columns
/// that would narrow it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WholeTable {
    /// The SQL name, or the storage table's of a raw table.
    pub table: String,
    /// The columns of the PartitionKey (`PartitionKey` itself for a raw table).
    pub partition_columns: Vec<String>,
    /// The further columns that name one row.
    pub row_columns: Vec<String>,
}

impl fmt::Display for WholeTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the statement reads every partition of table {}: a condition on {} reads one partition",
            self.table,
            self.partition_columns.join(", ")
        )?;
        if !self.row_columns.is_empty() {
            write!(
                f,
                ", and on {} as well one row",
                self.row_columns.join(", ")
            )?;
        }
        Ok(())
    }
}
