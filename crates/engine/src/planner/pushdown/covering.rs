//! Point reads as covering ranges. A path of point reads that fixes many
//! RowKeys of one partition costs a request per run of the keys the store
//! reads together (`Statistics::keys_per_request`: twelve on Azure, where
//! each request is a billed transaction): a hundred keys, nine requests.
//! Where the keys are dense, the span from a partition's first key to its
//! last fills a page or two, and reading it costs fewer. The guideposts of
//! `ANALYZE` say how many entities a span holds (`cost::estimate`), so a
//! span is read only where the statistics show it cheaper. Without them,
//! a RowKey whose keys differ in a fixed-width integer bounds a span by
//! its key domain: `r:07000` to `r:07099` holds at most 100 of the
//! template's entities (`cost::by_key_domain`).
//!
//! The span's rows are not all the keys': the path carries the keys as a
//! filter (`PartitionKey eq p and (RowKey eq a or ...)`) that the store
//! applies to what it reads, so the path answers exactly what the point
//! reads did, and the filters it answers stay answered.

use super::cost::{self, Statistics};
use super::*;
use crate::storage::Operand;

/// The covering path for `points` (an `access=points(N)` path), where the
/// statistics (or the key domain) show it costs fewer requests; `None`
/// otherwise. Applied by the scan that knows its store (`StoreTable::build`): the filters the
/// path answers are the points', so the choice is the scan's alone.
pub fn covering(def: &TableDef, points: &AccessPath, stats: &Statistics) -> Option<AccessPath> {
    if stats.keys_per_request < 2 || points.access != Access::Points || points.requests.len() < 2 {
        return None;
    }
    let mut groups: Vec<(&PartitionKey, Vec<&RowKey>)> = Vec::new();
    for request in &points.requests {
        let KeyRequest::Get(pk, rk) = request else {
            return None;
        };
        match groups.last_mut() {
            Some((p, keys)) if *p == pk => keys.push(rk),
            _ => groups.push((pk, vec![rk])),
        }
    }
    if groups.iter().all(|(_, keys)| keys.len() < 2) {
        return None;
    }
    let key = |operand, value: &str| Filter::Compare {
        operand,
        op: CmpOp::Eq,
        value: EdmValue::String(value.to_owned()),
    };
    let mut requests = Vec::with_capacity(groups.len());
    let mut keys: Option<Filter> = None;
    for (pk, rks) in &groups {
        let (first, last) = (rks.first()?, rks.last()?);
        requests.push(KeyRequest::Scan {
            partitions: KeyRange::exactly((*pk).clone()),
            rows: KeyRange {
                start: Bound::Included((*first).clone()),
                end: Bound::Included((*last).clone()),
            },
            at_most_one: rks.len() == 1,
        });
        let rows = rks
            .iter()
            .map(|rk| key(Operand::RowKey, rk.as_str()))
            .reduce(Filter::or)?;
        let these = key(Operand::PartitionKey, pk.as_str()).and(rows);
        keys = Some(match keys {
            None => these,
            Some(k) => k.or(these),
        });
    }
    let filter = match (&points.filter, keys) {
        (Some(f), Some(k)) => Some(f.clone().and(k)),
        (None, k) => k,
        (Some(f), None) => Some(f.clone()),
    };
    let mut path = AccessPath {
        access: Access::RowRange,
        requests,
        filter,
        partition_bound: None,
        estimate: None,
    };
    let (spans, each) = match (
        cost::estimate(def, &path, stats),
        cost::estimate(def, points, stats),
    ) {
        (Some(spans), Some(each)) => (spans, each),
        _ => cost::by_key_domain(&def.row_key, &groups, stats.keys_per_request)?,
    };
    if spans.requests >= each.requests {
        return None;
    }
    path.estimate = Some(crate::exec::read::access::Estimate {
        requests: spans.requests,
        rows: each.rows,
    });
    Some(path)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::catalog::stats::{PartitionStats, TableStats};

    /// One partition `p` of 20,000 entities `r:00000` ... with a guidepost
    /// every 1,000.
    fn statistics(keys_per_request: usize) -> Statistics {
        let rk = |n: u64| RowKey::from_stored(format!("r:{n:05}"));
        let partition = PartitionStats {
            partition: PartitionKey::from_stored("p".into()),
            entities: 20_000,
            bytes: 0,
            largest: 0,
            widest: 0,
            guideposts: (1..20).map(|i| rk(i * 1_000)).collect(),
            oldest: None,
            newest: None,
            prefixes: Default::default(),
        };
        Statistics {
            base: Some(Arc::new(TableStats {
                taken: chrono::Utc::now(),
                guidepost_every: 1_000,
                counted: false,
                partitions: vec![partition],
            })),
            globals: Vec::new(),
            keys_per_request,
        }
    }

    fn def() -> TableDef {
        crate::catalog::ddl::parse(
            "CREATE TABLE things (p TEXT NOT NULL, n INT NOT NULL, PRIMARY KEY (p, n)) \
             WITH (partition_key = '{p}', row_key = 'r:{n:05}')",
        )
        .expect("parses")
    }

    fn points(keys: impl Iterator<Item = u64>) -> AccessPath {
        let requests = keys
            .map(|n| {
                KeyRequest::Get(
                    PartitionKey::from_stored("p".into()),
                    RowKey::from_stored(format!("r:{n:05}")),
                )
            })
            .collect();
        AccessPath::new(Access::Points, requests)
    }

    #[test]
    fn dense_keys_are_read_as_their_span_and_sparse_ones_by_key() {
        let def = def();
        // 100 keys in one chunk of 1,000: one page, where 12 keys to a
        // request take 9.
        let dense = points(5_000..5_100);
        let span = covering(&def, &dense, &statistics(12)).expect("a span");
        assert_eq!(
            span.to_string().split(" filter").next(),
            Some(r#"access=row_range pk="p" rk=["r:05000", "r:05099"]"#)
        );
        assert_eq!(
            span.estimate,
            Some(crate::exec::read::access::Estimate {
                requests: 1,
                rows: 100
            })
        );
        // The keys, as the filter the store applies to the span's rows.
        let filter = span.filter.expect("the keys").to_string();
        assert!(
            filter.starts_with("PartitionKey eq 'p' and ((((("),
            "{filter}"
        );
        assert_eq!(filter.matches("RowKey eq 'r:0").count(), 100, "{filter}");
        // 100 keys over the whole partition: 20 pages, more than 9.
        let sparse = points((0..100).map(|i| i * 200));
        assert_eq!(covering(&def, &sparse, &statistics(12)), None);
        // A store that reads a key a request: no runs to compare with
        // here (the embedded store, where a point read is no transaction).
        assert_eq!(covering(&def, &dense, &statistics(1)), None);
    }

    #[test]
    fn without_statistics_a_span_of_integer_keys_is_costed_by_the_keys_it_can_hold() {
        let def = def();
        let none = Statistics {
            keys_per_request: 12,
            ..Statistics::default()
        };
        // `r:05000` to `r:05099`: at most 100 entities, one page.
        let span = covering(&def, &points(5_000..5_100), &none).expect("a span");
        assert_eq!(span.estimate.map(|e| e.requests), Some(1));
        // `r:00000` to `r:19800`: up to 19,801 entities, 20 pages, not 9.
        assert_eq!(
            covering(&def, &points((0..100).map(|i| i * 200)), &none),
            None
        );
        // A text RowKey bounds nothing.
        let text = crate::catalog::ddl::parse(
            "CREATE TABLE things (p TEXT NOT NULL, n TEXT NOT NULL, PRIMARY KEY (p, n)) \
             WITH (partition_key = '{p}', row_key = 'r:{n}')",
        )
        .expect("parses");
        assert_eq!(covering(&text, &points(5_000..5_100), &none), None);
    }
}
