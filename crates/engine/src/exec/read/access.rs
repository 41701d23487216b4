//! Access paths: what a scan asks of the store, and how EXPLAIN names it
//! (`access=point`, `points(N)`, `row_range`, `partition_range`, `full_scan`,
//! and over index rows `index_point(name)`, `index_points(name, N)`,
//! `index_range(name)`).

use std::fmt;
use std::ops::Bound;

use crate::keys::{KeyTemplate, KeyValue};
use crate::storage::bill::Transactions;
use crate::storage::{Filter, KeyRange, PartitionKey, RowKey};

/// How a path reaches its rows, in EXPLAIN's vocabulary. A path over index
/// rows carries the index it reads: it cannot exist without one, and a
/// path over base rows cannot name one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Access {
    /// Every primary key column fixed: at most one row per request. A
    /// contradiction is `points(0)`.
    Points,
    /// Fixed partitions, a range of RowKeys in each.
    RowRange,
    /// A range of PartitionKeys.
    PartitionRange,
    /// Every partition.
    FullScan,
    /// Index rows whose leading fields equal given values: one key prefix
    /// per request (in one partition, or in every partition of a range).
    IndexPoints(IndexRead),
    /// Index rows whose leading fields are fixed and whose next field is in
    /// a range or starts with a prefix; or every index row of the
    /// partitions read, for the index's order.
    IndexRange(IndexRead),
}

impl Access {
    /// The index whose rows the path reads; `None` for base rows.
    pub fn index(&self) -> Option<&IndexRead> {
        match self {
            Access::IndexPoints(i) | Access::IndexRange(i) => Some(i),
            Access::Points | Access::RowRange | Access::PartitionRange | Access::FullScan => None,
        }
    }

    /// Its name in the workload statistics (`tablesql_stat_statements`).
    pub fn name(&self) -> &'static str {
        match self {
            Access::Points => "point",
            Access::RowRange => "row_range",
            Access::PartitionRange => "partition_range",
            Access::FullScan => "full_scan",
            Access::IndexPoints(_) => "index_point",
            Access::IndexRange(_) => "index_range",
        }
    }
}

/// The index rows a path reads instead of base rows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexRead {
    /// The index's position among the definition's indexes (its global
    /// indexes' where `global`).
    pub position: usize,
    /// Its name, for EXPLAIN.
    pub name: String,
    /// A global index: the requests are of its own storage table, and each
    /// entity read is checked against the base row it names.
    pub global: bool,
}

/// EXPLAIN's mark of a global index's path.
fn global(i: &IndexRead) -> &'static str {
    if i.global { "global_" } else { "" }
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
    /// How it reaches its rows (and over which index's rows).
    pub access: Access,
    /// The requests, sorted by key and disjoint, so their outputs concatenate in key order.
    pub requests: Vec<KeyRequest>,
    /// Conditions on properties the store evaluates (rows failing them are not sent).
    pub filter: Option<Filter>,
    /// Which listed partitions a fanned-out request reads (keyset paging).
    pub partition_bound: Option<PartitionBound>,
    /// What the planner estimated the path costs, where statistics let it
    /// (`planner::pushdown::cost`): shown by EXPLAIN.
    pub estimate: Option<Estimate>,
}

/// A path's estimated cost, from `ANALYZE`'s statistics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Estimate {
    /// Requests to the store.
    pub requests: u64,
    /// Entities read (at most).
    pub rows: u64,
}

/// A row-value bound on the primary key, `(pk fields, row fields) > (..)`:
/// Phoenix's keyset paging. Free-text key fields are escaped and
/// delimited, so their tuple order is not the keys' order and no key range
/// holds the rows after the bound; instead the fan-out compares each listed
/// partition's fields with the bound's and reads the partitions past it
/// whole, the bound's own partition from the RowKey the rest of the bound
/// gives, and none before it. The condition stays DataFusion's to check.
#[derive(Debug, Clone, PartialEq)]
pub struct PartitionBound {
    /// The PartitionKey template, to read a listed partition's fields.
    pub template: KeyTemplate,
    /// The bound's values of the PartitionKey fields, in template order.
    pub values: Vec<KeyValue>,
    /// Whether the rows wanted are above the bound (`>`, `>=`) or below it.
    pub above: bool,
    /// The rows to read in the bound's own partition; `None` reads none.
    pub at_bound: Option<KeyRange<RowKey>>,
    /// The condition, for EXPLAIN.
    pub shown: String,
}

/// What a bound makes of one listed partition.
#[derive(Debug, Clone, PartialEq)]
pub enum PartitionChoice {
    /// Not read.
    Skip,
    /// Read as the request would.
    Whole,
    /// Only these rows.
    Rows(KeyRange<RowKey>),
}

impl PartitionBound {
    /// The choice for partition `pk`; a key that does not fit the template
    /// is read, for the decoder to report.
    pub fn choose(&self, pk: &PartitionKey) -> PartitionChoice {
        let Ok(values) = self.template.decompose(pk.as_str()) else {
            return PartitionChoice::Whole;
        };
        // KeyValue orders as SQL does: integers by value, text by code point.
        match (values.cmp(&self.values), self.above) {
            (std::cmp::Ordering::Equal, _) => self
                .at_bound
                .clone()
                .map_or(PartitionChoice::Skip, PartitionChoice::Rows),
            (std::cmp::Ordering::Greater, true) | (std::cmp::Ordering::Less, false) => {
                PartitionChoice::Whole
            }
            _ => PartitionChoice::Skip,
        }
    }
}

impl AccessPath {
    /// The path over base rows or `index`'s that `requests` make.
    pub fn new(access: Access, requests: Vec<KeyRequest>) -> Self {
        Self {
            access,
            requests,
            filter: None,
            partition_bound: None,
            estimate: None,
        }
    }

    /// The index whose rows the path reads; `None` for base rows.
    pub fn index(&self) -> Option<&IndexRead> {
        self.access.index()
    }

    /// The transactions the path costs, by kind, and whether that is an
    /// estimate rather than the least it can cost. Point reads are known
    /// before the run: a request per run of `keys_per_request` keys of a
    /// partition. Other paths are estimated from the statistics
    /// (`estimate`), `lookups` (a point read of a base row per index row)
    /// among them; without statistics, a request of the path's costs a
    /// page at least.
    pub fn bill(&self, keys_per_request: usize, lookups: bool) -> (Transactions, bool) {
        if self.access == Access::Points {
            // Keys go in runs only where every request is a key
            // (`units::batched`); a prefix read is a query of one page.
            let gets = self
                .requests
                .iter()
                .all(|r| matches!(r, KeyRequest::Get(..)));
            let run = if gets {
                keys_per_request.max(1) as u64
            } else {
                1
            };
            let mut t = Transactions::default();
            let mut exact = true;
            let mut in_run: Option<(&PartitionKey, u64)> = None;
            for request in &self.requests {
                match (request, &mut in_run) {
                    (KeyRequest::Get(pk, _), Some((p, n))) if *p == pk && *n < run => *n += 1,
                    (KeyRequest::Get(pk, _), _) => {
                        in_run = Some((pk, 1));
                        t.point_reads += 1;
                    }
                    (KeyRequest::Scan { at_most_one, .. }, _) => {
                        in_run = None;
                        t.query_pages += 1;
                        exact &= *at_most_one;
                    }
                }
            }
            return (t, exact);
        }
        match self.estimate {
            Some(e) => {
                let point_reads = if lookups { e.rows } else { 0 };
                let t = Transactions {
                    query_pages: e.requests.saturating_sub(point_reads),
                    point_reads,
                    ..Transactions::default()
                };
                (t, true)
            }
            None => {
                let t = Transactions {
                    query_pages: self.requests.len() as u64,
                    ..Transactions::default()
                };
                (t, false)
            }
        }
    }

    /// The path with a row-value bound (keyset paging): past it a scan of
    /// every partition reads a range of them (in the order of their
    /// fields), not the whole table.
    pub fn bounded_by(mut self, bound: PartitionBound) -> Self {
        if self.access == Access::FullScan {
            self.access = Access::PartitionRange;
        }
        self.partition_bound = Some(bound);
        self
    }

    /// Whether the path reads every partition (a full scan, or a RowKey
    /// range in every partition, with no row-value bound to pass partitions by).
    pub fn reads_every_partition(&self) -> bool {
        self.partition_bound.is_none() && self.requests.iter().any(|r| {
            matches!(
                r,
                KeyRequest::Scan { partitions, .. }
                    if partitions.start == Bound::Unbounded && partitions.end == Bound::Unbounded
            )
        })
    }

    /// The part of the path after the key `(pk, rk)`, in key order: where a
    /// page that ended on that row resumes. A range holding `pk` becomes the
    /// rest of `pk`'s partition, then the partitions after it.
    pub fn after_key(&self, pk: &PartitionKey, rk: &RowKey) -> AccessPath {
        let mut requests = Vec::new();
        for r in &self.requests {
            match r {
                KeyRequest::Get(p, k) => {
                    if (p, k) > (pk, rk) {
                        requests.push(r.clone());
                    }
                }
                KeyRequest::Scan {
                    partitions,
                    rows,
                    at_most_one,
                } => {
                    if partitions.is_before(pk) {
                        requests.push(r.clone());
                        continue;
                    }
                    if partitions.contains(pk) {
                        let rest = rows.after(Some(rk));
                        if !rest.is_empty() && !rows.is_after(rk) {
                            requests.push(KeyRequest::Scan {
                                partitions: KeyRange::exactly(pk.clone()),
                                rows: rest,
                                at_most_one: *at_most_one,
                            });
                        }
                    }
                    let later = partitions.after(Some(pk));
                    if !later.is_empty() && !partitions.is_after(pk) {
                        requests.push(KeyRequest::Scan {
                            partitions: later,
                            rows: rows.clone(),
                            at_most_one: *at_most_one,
                        });
                    }
                }
            }
        }
        AccessPath {
            access: self.access.clone(),
            requests,
            filter: self.filter.clone(),
            partition_bound: self.partition_bound.clone(),
            estimate: self.estimate,
        }
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
        match &self.access {
            Access::Points if n == 1 => f.write_str("access=point")?,
            Access::Points => write!(f, "access=points({n})")?,
            Access::RowRange => f.write_str("access=row_range")?,
            Access::PartitionRange => f.write_str("access=partition_range")?,
            Access::FullScan => f.write_str("access=full_scan")?,
            Access::IndexPoints(i) if n == 1 => {
                write!(f, "access={}index_point({})", global(i), i.name)?
            }
            Access::IndexPoints(i) => {
                write!(f, "access={}index_points({}, {n})", global(i), i.name)?
            }
            Access::IndexRange(i) => write!(f, "access={}index_range({})", global(i), i.name)?,
        }
        for (i, r) in self.requests.iter().take(SHOWN).enumerate() {
            write!(f, "{}{r}", if i == 0 { " " } else { "; " })?;
        }
        if n > SHOWN {
            write!(f, "; ... {} more", n - SHOWN)?;
        }
        if let Some(bound) = &self.partition_bound {
            write!(f, " keyset=[{}]", bound.shown)?;
        }
        if let Some(filter) = &self.filter {
            write!(f, " filter=[{filter}]")?;
            // The service evaluates it entity by entity: it narrows what is
            // sent, not what is read (nor the partitions' rate it costs).
            if filter.reads_timestamp() {
                f.write_str(
                    " note=[Timestamp is not indexed: every entity of the partitions read is scanned]",
                )?;
            }
        }
        match &self.estimate {
            Some(e) => write!(f, " cost=[requests={} rows={}]", e.requests, e.rows),
            None => Ok(()),
        }
    }
}

/// The facts of a scan of every partition: the table and the key columns
/// that would narrow it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct WholeTable {
    /// The SQL name, or the storage table's of a raw table.
    pub table: String,
    /// For a scan of part of the table: the partitions it reads by the
    /// statistics, and the threshold they pass (`tablesql.partition_threshold`).
    pub partitions: Option<(usize, usize)>,
    /// The columns of the PartitionKey (`PartitionKey` itself for a raw table).
    pub partition_columns: Vec<String>,
    /// The further columns that name one row.
    pub row_columns: Vec<String>,
}

impl fmt::Display for WholeTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // A bucketed table's (`{#N}`) partition follows from its whole key.
        if self.partition_columns.is_empty() {
            return write!(
                f,
                "the statement reads every partition of table {}: a condition on {} reads one row",
                self.table,
                self.row_columns.join(", ")
            );
        }
        match self.partitions {
            Some((n, threshold)) => write!(
                f,
                "the statement reads {n} partitions of table {} (more than tablesql.partition_threshold = {threshold}): a condition on {} reads one partition",
                self.table,
                self.partition_columns.join(", ")
            )?,
            None => write!(
                f,
                "the statement reads every partition of table {}: a condition on {} reads one partition",
                self.table,
                self.partition_columns.join(", ")
            )?,
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn pk(s: &str) -> PartitionKey {
        PartitionKey::from_stored(s.into())
    }

    fn rk(s: &str) -> RowKey {
        RowKey::from_stored(s.into())
    }

    #[test]
    fn a_path_resumes_after_a_key() {
        let path = AccessPath::new(
            Access::PartitionRange,
            vec![
                KeyRequest::Get(pk("a"), rk("1")),
                KeyRequest::Scan {
                    partitions: KeyRange {
                        start: Bound::Included(pk("b")),
                        end: Bound::Excluded(pk("m")),
                    },
                    rows: KeyRange {
                        start: Bound::Included(rk("R:")),
                        end: Bound::Excluded(rk("R;")),
                    },
                    at_most_one: false,
                },
                KeyRequest::Get(pk("z"), rk("1")),
            ],
        );
        let shown = |p: AccessPath| {
            p.requests
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
        };
        // Inside the range: the rest of the partition, then the partitions after it.
        assert_eq!(
            shown(path.after_key(&pk("c"), &rk("R:5"))),
            [
                r#"pk="c" rk=("R:5", "R;")"#,
                r#"pk=("c", "m") rk=["R:", "R;")"#,
                r#"pk="z" rk="1""#,
            ]
        );
        // Before the range, and past the partition's rows.
        assert_eq!(
            shown(path.after_key(&pk("a"), &rk("1"))),
            [r#"pk=["b", "m") rk=["R:", "R;")"#, r#"pk="z" rk="1""#]
        );
        assert_eq!(
            shown(path.after_key(&pk("c"), &rk("S"))),
            [r#"pk=("c", "m") rk=["R:", "R;")"#, r#"pk="z" rk="1""#]
        );
        // After everything: nothing left.
        assert!(path.after_key(&pk("z"), &rk("1")).requests.is_empty());
    }
}
