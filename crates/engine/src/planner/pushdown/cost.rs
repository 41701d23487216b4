//! What a path costs, in requests to the store, by `ANALYZE`'s statistics
//! (or, for a table never analyzed, the store's kept counts: `TableStats::counted`).
//!
//! Requests are what a query over Azure Table Storage pays for, in time
//! (each is a round trip) and in money (each is billed). The paths for one
//! query differ most in them: a local index's range is one request per
//! partition, a global index's equality one request plus a point read per
//! row it names, a scan a request per 1,000 entities. Where the table (and,
//! for a global index, its index table) has statistics, the planner takes
//! the path of fewest estimated requests and EXPLAIN shows the estimate
//! (`cost=[requests=.. rows=..]`); without them it keeps the stated rule
//! of `push_down`.
//!
//! The estimate reads the requests a scan would make from the statistics
//! (`fanout::analyzed`, the same requests it runs), and counts per request
//! the pages its entities fill, at least one. A range within a partition
//! holds the entities between the guideposts it spans, plus one chunk. A
//! path that reads keys-only index rows, or a global index's entities,
//! adds a point read per entity.

use std::ops::Bound;
use std::sync::Arc;

use crate::catalog::TableDef;
use crate::catalog::stats::{PRIMARY_PATH, PartitionStats, TableStats, template_kind};
use crate::exec::read::access::{AccessPath, Estimate, KeyRequest};
use crate::exec::read::fanout::{analyzed, spans_partitions};
use crate::keys::{KeyTemplate, KeyValue};
use crate::storage::{KeyRange, PartitionKey, RowKey};

/// Entities in one page of a query's answer.
const PAGE: u64 = 1_000;

/// The statistics a choice is costed from: the table's, and each of its
/// global indexes' storage tables', by position.
#[derive(Debug, Clone, Default)]
pub struct Statistics {
    /// The table's.
    pub base: Option<Arc<TableStats>>,
    /// Its global indexes' tables', by position.
    pub globals: Vec<Option<Arc<TableStats>>>,
    /// RowKeys of one partition the store reads in one request
    /// (`TableStore::get_many_limit`): point reads cost a request per run
    /// of that many. 0 or 1: a request each.
    pub keys_per_request: usize,
}

/// The estimate for `path` over `def`'s table, or `None` where the
/// statistics it needs are missing.
pub fn estimate(def: &TableDef, path: &AccessPath, stats: &Statistics) -> Option<Estimate> {
    let index = path.index();
    let table = match index {
        Some(i) if i.global => stats.globals.get(i.position)?.as_deref()?,
        _ => stats.base.as_deref()?,
    };
    let lookups = match index {
        Some(i) if i.global => true,
        Some(i) => def.indexes.get(i.position).is_some_and(|x| !x.covering),
        None => false,
    };
    // The key path the requests read, by its name in the statistics and
    // its RowKey template's kind.
    let (name, template) = match index {
        Some(i) if i.global => (PRIMARY_PATH, &def.global_indexes.get(i.position)?.row_key),
        Some(i) => {
            let ix = def.indexes.get(i.position)?;
            (ix.name.as_str(), &ix.row_key)
        }
        None => (PRIMARY_PATH, &def.row_key),
    };
    let key_path = (name, template_kind(template));
    let mut out = Estimate {
        requests: 0,
        rows: 0,
    };
    // Point reads of one partition go in runs of `keys_per_request`: the
    // requests are sorted, so a partition's are adjacent.
    let run = stats.keys_per_request.max(1) as u64;
    let mut keys_in_run: Option<(&PartitionKey, u64)> = None;
    let analyzed = analyzed(table, path);
    for request in &analyzed.requests {
        let (requests, rows) = match request {
            KeyRequest::Get(pk, _) => match &mut keys_in_run {
                Some((p, n)) if *p == pk && *n < run => {
                    *n += 1;
                    (0, 1)
                }
                _ => {
                    keys_in_run = Some((pk, 1));
                    (1, 1)
                }
            },
            KeyRequest::Scan {
                partitions,
                rows,
                at_most_one,
            } => {
                let per: Vec<u64> = in_range(&table.partitions, partitions)
                    .iter()
                    .map(|p| rows_in(p, rows, table, key_path))
                    .collect::<Option<_>>()?;
                let found: u64 = per.iter().sum();
                let pages: u64 = per.iter().map(|n| n.div_ceil(PAGE)).sum();
                let found = if *at_most_one { found.min(1) } else { found };
                // A request spanning partitions that the statistics do not
                // split still lists or pages through them: one at least.
                let extra = u64::from(spans_partitions(request) && per.is_empty());
                (pages.max(1) + extra, found)
            }
        };
        out.requests += requests;
        out.rows += rows;
    }
    if lookups {
        out.requests += out.rows;
    }
    Some(out)
}

/// The requests of `groups` (the RowKeys a path of points reads in each
/// partition, in key order) read as points and as the spans from each
/// partition's first key to its last, judged by the RowKey template alone
/// where no statistics are at hand: a span of a template whose last field
/// is a fixed-width integer, its other fields equal at both ends, holds a
/// key per integer between them at most, if the span's entities are the
/// template's (other rows sharing its prefix, a raw writer's or another
/// mapping's, make it cost more; never answer otherwise: the keys are
/// still the filter). `None` where a span is not such.
pub fn by_key_domain(
    template: &KeyTemplate,
    groups: &[(&PartitionKey, Vec<&RowKey>)],
    keys_per_request: usize,
) -> Option<(Estimate, Estimate)> {
    let run = keys_per_request.max(1) as u64;
    let (mut spans, mut points) = (0, 0);
    let mut rows = 0;
    for (_, keys) in groups {
        let (first, last) = (keys.first()?, keys.last()?);
        spans += integers_between(template, first, last)?
            .div_ceil(PAGE)
            .max(1);
        points += (keys.len() as u64).div_ceil(run);
        rows += keys.len() as u64;
    }
    let estimate = |requests| Estimate { requests, rows };
    Some((estimate(spans), estimate(points)))
}

/// The keys `template` can write from `first` to `last`, both included,
/// where they differ only in a last field of fixed-width integers.
fn integers_between(template: &KeyTemplate, first: &RowKey, last: &RowKey) -> Option<u64> {
    let n = template.columns().count();
    let (_, format) = template.field(n.checked_sub(1)?)?;
    format.int_range()?;
    let (a, b) = (
        template.decompose(first.as_str()).ok()?,
        template.decompose(last.as_str()).ok()?,
    );
    match (a.split_last()?, b.split_last()?) {
        ((KeyValue::Int(x), lead_a), (KeyValue::Int(y), lead_b)) if lead_a == lead_b => {
            Some(x.abs_diff(*y) + 1)
        }
        _ => None,
    }
}

/// The partitions of `all` (in key order) in `range`: found by a binary
/// search, not a walk of them all, since a fan-out asks once per partition.
fn in_range<'p>(all: &'p [PartitionStats], range: &KeyRange<PartitionKey>) -> &'p [PartitionStats] {
    let first = all.partition_point(|p| match &range.start {
        Bound::Included(s) => p.partition < *s,
        Bound::Excluded(s) => p.partition <= *s,
        Bound::Unbounded => false,
    });
    let rest = &all[first..];
    let len = rest.partition_point(|p| match &range.end {
        Bound::Included(e) => p.partition <= *e,
        Bound::Excluded(e) => p.partition < *e,
        Bound::Unbounded => true,
    });
    &rest[..len]
}

/// The rows one value of `columns` holds on `path`'s key path (the primary
/// key's, or the index's the path reads), by the distinct key prefixes
/// `ANALYZE` counted: the path's entities over the distinct values of the
/// partition and the leading RowKey fields `columns` fix. `None` where the
/// statistics lack them, or `columns` leave the partition open.
pub fn rows_per_key(
    def: &TableDef,
    path: &AccessPath,
    columns: &[String],
    stats: &Statistics,
) -> Option<f64> {
    let (name, partition_key, row_key, table) = match path.index() {
        Some(i) if i.global => {
            let g = def.global_indexes.get(i.position)?;
            let table = stats.globals.get(i.position)?.as_deref()?;
            (PRIMARY_PATH, &g.partition_key, &g.row_key, table)
        }
        Some(i) => {
            let ix = def.indexes.get(i.position)?;
            (
                ix.name.as_str(),
                &def.partition_key,
                &ix.row_key,
                stats.base.as_deref()?,
            )
        }
        None => (
            PRIMARY_PATH,
            &def.partition_key,
            &def.row_key,
            stats.base.as_deref()?,
        ),
    };
    let fixed = |c: &str| columns.iter().any(|x| x == c);
    if !partition_key.columns().all(fixed) {
        return None;
    }
    let fields = row_key.columns().take_while(|c| fixed(c)).count();
    // A bucket of the RowKey is fixed only by the whole RowKey: a prefix's
    // rows spread over the buckets.
    if partition_key.row_buckets().is_some() && fields < row_key.columns().count() {
        return None;
    }
    let entities = table.path_entities(name)?;
    let distinct = table.distinct(name, fields)?;
    Some(entities as f64 / distinct.max(1) as f64)
}

/// The entities of partition `p` in `rows`: all of them for the whole
/// partition, else a chunk per guidepost inside the range, plus one. A
/// guidepost the range starts at begins its first chunk rather than
/// splitting it: the fan-out's chunks start at guideposts, and counting
/// theirs made every chunk two.
fn rows_in(
    p: &PartitionStats,
    rows: &KeyRange<RowKey>,
    table: &TableStats,
    (name, kind): (&str, &str),
) -> Option<u64> {
    if rows.start == Bound::Unbounded && rows.end == Bound::Unbounded {
        return Some(p.entities);
    }
    if table.counted {
        // Kept counts have no guideposts: they know a range only where it
        // is the key path's whole kind.
        return match rows.kind() {
            Some(k) if !k.is_empty() && k == kind => Some(p.prefixes.entities(name).unwrap_or(0)),
            _ => None,
        };
    }
    let inside =
        |g: &&RowKey| rows.contains(g) && !matches!(&rows.start, Bound::Included(s) if s == *g);
    let spanned = p.guideposts.iter().filter(inside).count() as u64;
    Some(((spanned + 1) * table.guidepost_every.max(1)).min(p.entities))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::read::access::Access;
    use crate::storage::PartitionKey;

    fn stats(partitions: &[(&str, u64)]) -> Arc<TableStats> {
        Arc::new(TableStats {
            taken: chrono::Utc::now(),
            guidepost_every: 1_000,
            counted: false,
            partitions: partitions
                .iter()
                .map(|(pk, n)| PartitionStats {
                    partition: PartitionKey::new(*pk).expect("a key"),
                    entities: *n,
                    bytes: 0,
                    largest: 0,
                    widest: 0,
                    guideposts: Vec::new(),
                    oldest: None,
                    newest: None,
                    prefixes: Default::default(),
                })
                .collect(),
        })
    }

    fn scan(partitions: KeyRange<PartitionKey>, rows: KeyRange<RowKey>) -> AccessPath {
        AccessPath::new(
            Access::FullScan,
            vec![KeyRequest::Scan {
                partitions,
                rows,
                at_most_one: false,
            }],
        )
    }

    fn def() -> TableDef {
        crate::catalog::ddl::parse(include_str!("../../../../../catalog/registrations.sql"))
            .expect("parses")
    }

    #[test]
    fn a_request_per_page_of_each_partition_read() {
        let s = Statistics {
            base: Some(stats(&[("a", 2_500), ("b", 10), ("c", 0)])),
            globals: Vec::new(),
            keys_per_request: 1,
        };
        let whole = estimate(&def(), &scan(KeyRange::all(), KeyRange::all()), &s).expect("costed");
        // 3 pages of a, 1 of b, 1 (empty) of c.
        assert_eq!(
            whole,
            Estimate {
                requests: 5,
                rows: 2_510
            }
        );
        let one = PartitionKey::new("b").expect("a key");
        let b =
            estimate(&def(), &scan(KeyRange::exactly(one), KeyRange::all()), &s).expect("costed");
        assert_eq!(
            b,
            Estimate {
                requests: 1,
                rows: 10
            }
        );
    }

    #[test]
    fn a_chunk_between_two_guideposts_holds_one_chunk_of_entities() {
        let rk = |s: &str| RowKey::new(s).expect("a key");
        let table = stats(&[("a", 3_500)]);
        let mut p = table.partitions[0].clone();
        let base = (PRIMARY_PATH, "BIB:");
        p.guideposts = vec![rk("r:1000"), rk("r:2000"), rk("r:3000")];
        // The fan-out's chunk from a guidepost to the next.
        let chunk = KeyRange {
            start: Bound::Included(rk("r:1000")),
            end: Bound::Excluded(rk("r:2000")),
        };
        assert_eq!(rows_in(&p, &chunk, &table, base), Some(1_000));
        // The base rows' range spans all three guideposts: four chunks,
        // at most the partition's entities.
        let all = KeyRange {
            start: Bound::Included(rk("r:")),
            end: Bound::Excluded(rk("r;")),
        };
        assert_eq!(rows_in(&p, &all, &table, base), Some(3_500));
        let first = KeyRange {
            start: Bound::Unbounded,
            end: Bound::Excluded(rk("r:1000")),
        };
        assert_eq!(rows_in(&p, &first, &table, base), Some(1_000));
    }

    #[test]
    fn without_statistics_there_is_no_estimate() {
        let none = Statistics::default();
        assert_eq!(
            estimate(&def(), &scan(KeyRange::all(), KeyRange::all()), &none),
            None
        );
    }

    /// A table never analyzed, costed from the store's kept counts: a
    /// path's whole kind in each partition is known exactly, a narrower
    /// range not at all (so the rule, not a guess, picks the path).
    #[test]
    fn kept_counts_cost_a_whole_kind_and_nothing_narrower() {
        let pk = |s: &str| PartitionKey::new(s).expect("a key");
        let rk = |s: &str| RowKey::new(s).expect("a key");
        let kinds = |n: u64| vec![("AGE:".to_owned(), n), ("BIB:".to_owned(), n)];
        let counts = [
            crate::storage::PartitionCount {
                partition: pk("a"),
                kinds: kinds(2_500),
            },
            crate::storage::PartitionCount {
                partition: pk("b"),
                kinds: kinds(10),
            },
        ];
        let d = def();
        let s = Statistics {
            base: Some(Arc::new(TableStats::counted(Some(&d), &counts))),
            globals: Vec::new(),
            keys_per_request: 1,
        };
        let kind = |k: &str, next: &str| KeyRange {
            start: Bound::Included(rk(k)),
            end: Bound::Excluded(rk(next)),
        };
        let base = estimate(&d, &scan(KeyRange::all(), kind("BIB:", "BIB;")), &s);
        assert_eq!(
            base,
            Some(Estimate {
                requests: 4,
                rows: 2_510
            })
        );
        let whole = estimate(&d, &scan(KeyRange::all(), KeyRange::all()), &s);
        assert_eq!(whole.map(|e| e.rows), Some(5_020));
        let narrower = estimate(
            &d,
            &scan(KeyRange::all(), kind("BIB:00001", "BIB:00002")),
            &s,
        );
        assert_eq!(narrower, None);
        // Another path's kind is not the base rows'.
        assert_eq!(
            estimate(&d, &scan(KeyRange::all(), kind("AGE:", "AGE;")), &s),
            None
        );
    }
}
