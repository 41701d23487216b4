//! The pushdown: ONE pure function from DataFusion filters to an access path,
//! the property filter the store applies, and which filters the path answers
//! exactly. `supports_filters_pushdown` and `scan` both call [`push_down`].
//!
//! Each filter becomes, where it can, a conjunction of atoms on key targets (a
//! template field, or the PartitionKey/RowKey columns): a set of values (`=`,
//! `IN`, an OR of `=`), a range (`<`, `BETWEEN`, on order-preserving integer
//! fields and on the raw keys) or a prefix (`LIKE 'p%'`). Per template, the
//! leading fields with value sets enumerate keys or key prefixes; the next
//! field's range or prefix bounds them. A filter is Exact when the path
//! encodes every atom it holds; everything else stays Inexact.

use std::collections::BTreeSet;
use std::ops::Bound;

use datafusion::logical_expr::Expr;

mod analyze;
pub mod cost;
mod covering;
mod domain;
mod keyset;
mod plan;
mod property;
mod scalar;

pub use covering::covering;
pub use scalar::key_of_scalar;

use analyze::*;
use domain::*;
use plan::*;
use property::*;

use crate::catalog::{ColumnType, TableDef};
use crate::exec::read::access::{Access, AccessPath, IndexRead, KeyRequest};
use crate::keys::{FieldFormat, KeyBounds, KeyTemplate, KeyValue};
use crate::storage::key::{cmp_utf16, validate_key};
use crate::storage::{CmpOp, EdmValue, Filter, KeyKind, KeyRange, PartitionKey, RowKey};

/// Most keys or key prefixes one path enumerates; past that a field's value
/// set narrows nothing and its filter stays Inexact.
pub const MAX_REQUESTS: usize = 1000;

/// The RowKeys between two bounds a template gave (`KeyBounds::Range`).
pub fn row_range(
    start: std::ops::Bound<String>,
    end: std::ops::Bound<String>,
) -> crate::storage::KeyRange<crate::storage::RowKey> {
    domain::key_range((start, end), crate::storage::RowKey::from_stored)
}

/// What the pushdown decided.
#[derive(Debug, Clone, PartialEq)]
pub struct Pushdown {
    /// The requests, and the property filter: over the base rows, or over
    /// the index rows whose leading fields the filters fix best.
    pub path: AccessPath,
    /// The other paths a scan may take for these filters, the base rows'
    /// first when `path` reads an index: the base rows when index use is
    /// off, an index whose order answers an ORDER BY.
    pub alternatives: Vec<AccessPath>,
    /// Per input filter: whether every path of `path` and `alternatives`
    /// answers it completely.
    pub exact: Vec<bool>,
}

impl Pushdown {
    /// The path over base rows.
    pub fn base(&self) -> &AccessPath {
        match self.path.index() {
            None => &self.path,
            Some(_) => self.alternatives.first().unwrap_or(&self.path),
        }
    }
}

/// What an atom constrains.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Target {
    Field(String),
    PartitionKey,
    RowKey,
}

/// The kind of constraint, for deciding what the path consumed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Kind {
    Values,
    Range,
    Prefix,
}

#[derive(Debug, Clone)]
enum Domain {
    Values(BTreeSet<KeyValue>),
    Range(Bound<KeyValue>, Bound<KeyValue>),
    Prefix(String),
}

#[derive(Debug, Clone)]
struct Atom {
    target: Target,
    domain: Domain,
}

impl Atom {
    fn kind(&self) -> Kind {
        match self.domain {
            Domain::Values(_) => Kind::Values,
            Domain::Range(..) => Kind::Range,
            Domain::Prefix(_) => Kind::Prefix,
        }
    }
}

/// One filter, analyzed: atoms to narrow with; `complete` when the filter is
/// exactly their conjunction; `never` when it can hold for no row.
#[derive(Debug, Default)]
struct Analysis {
    atoms: Vec<Atom>,
    complete: bool,
    never: bool,
}

/// Decides the access path for a table (`None`: a raw table) under `filters`.
///
/// The rule for index rows: the base RowKey template and each declared
/// index template are planned alike, and an index is chosen when its
/// leading fields are fixed better than the base template's: more fields
/// fixed by values (`=`, `IN`, `LIKE` without a wildcard), then the next
/// field bounded by a range or a `LIKE 'p%'` prefix. A tie goes to the
/// base rows, and so does a point read of one base row, a condition on the
/// RowKey column (the base row's key) and a row-value bound; and an index
/// is passed over where it does not answer a condition the base rows
/// answer (a range on the base RowKey's leading field, say).
pub fn push_down(def: Option<&TableDef>, filters: &[Expr]) -> Pushdown {
    push_down_with(def, filters, &cost::Statistics::default())
}

/// [`push_down`], choosing between the paths by their estimated requests
/// where `stats` cover every one of them (`cost`), and marking each path
/// with its estimate.
pub fn push_down_with(
    def: Option<&TableDef>,
    filters: &[Expr],
    stats: &cost::Statistics,
) -> Pushdown {
    let analyses: Vec<Analysis> = filters.iter().map(|f| analyze(def, f)).collect();
    let property_filter = filters
        .iter()
        .filter_map(|f| property_filter(def, f))
        .reduce(Filter::and);
    if analyses.iter().any(|a| a.never) {
        return Pushdown {
            path: AccessPath::new(Access::Points, Vec::new()),
            alternatives: Vec::new(),
            exact: analyses.iter().map(|a| a.complete).collect(),
        };
    }
    let atoms: Vec<&Atom> = analyses.iter().flat_map(|a| &a.atoms).collect();
    let mut base = plan(def, None, &atoms);
    let bound = match (def, base.path.requests.as_slice()) {
        (Some(d), [request]) if crate::exec::read::fanout::spans_partitions(request) => filters
            .iter()
            .enumerate()
            .filter_map(|(i, f)| Some((i, keyset::row_value(def, f)?)))
            .find_map(|(i, rv)| Some((i, keyset::bound(d, &rv, request)?, d, request.clone()))),
        _ => None,
    };
    // A row value the keys answer exactly, as key ranges: the filter it is.
    let mut keyset_exact = None;
    if let Some((i, bounded, d, request)) = bound {
        match keyset::split(d, &bounded, &request) {
            Some(requests) => {
                if base.path.access == Access::FullScan {
                    base.path.access = Access::PartitionRange;
                }
                base.path.requests = requests;
                keyset_exact = Some(i);
            }
            None => base.path = base.path.bounded_by(bounded.bound),
        }
    }
    let mut candidates = vec![base];
    let indexes = def.map_or(0, |d| d.indexes.len());
    let base = &candidates[0];
    let may_use_index = !base.contradiction
        && base.path.access != Access::Points
        && base.path.partition_bound.is_none()
        && keyset_exact.is_none()
        && !atoms.iter().any(|a| a.target == Target::RowKey);
    if may_use_index {
        let base_fit = base.fit;
        // The conditions the base rows answer: an index must answer them
        // too. So what DataFusion drops as Exact is answered by whichever
        // path a scan takes, even when its optimizer pushes the filters of
        // one scan in several passes.
        let answered: Vec<&Analysis> = analyses
            .iter()
            .filter(|a| a.complete && answers(base, a))
            .collect();
        // An index still being built holds only some rows.
        let built = |i: &usize| def.is_some_and(|d| d.indexes.get(*i).is_some_and(|x| !x.building));
        for i in (0..indexes).filter(built) {
            let p = plan(def, Some(i), &atoms);
            if !p.contradiction && p.fit >= base_fit && answered.iter().all(|a| answers(&p, a)) {
                candidates.push(p);
            }
        }
        if let Some(d) = def {
            for (gi, _) in d
                .global_indexes
                .iter()
                .enumerate()
                .filter(|(_, g)| !g.building)
            {
                let Some(p) = plan_global(d, gi, &atoms) else {
                    continue;
                };
                if !p.contradiction && p.fit > base_fit && answered.iter().all(|a| answers(&p, a)) {
                    candidates.push(p);
                }
            }
        }
    }
    // Where the base rows' path spans partitions, a local index's does
    // too (a range in every partition: a request per partition), while a
    // global index's reads the partitions its values name: it goes first.
    // Otherwise the first index that fits strictly best; else the base rows.
    let spans = candidates[0]
        .path
        .requests
        .iter()
        .any(crate::exec::read::fanout::spans_partitions);
    let global = |c: &Planned| c.path.index().is_some_and(|r| r.global);
    let ruled = (1..candidates.len())
        .filter(|&i| candidates[i].fit > candidates[0].fit)
        .max_by_key(|&i| {
            let c = &candidates[i];
            (spans && global(c), c.fit, std::cmp::Reverse(i))
        })
        .unwrap_or(0);
    // With statistics for every path, the fewest requests win; a tie goes
    // to the rule's choice.
    for c in &mut candidates {
        c.path.estimate = def.and_then(|d| cost::estimate(d, &c.path, stats));
    }
    let costs: Option<Vec<u64>> = candidates
        .iter()
        .map(|c| c.path.estimate.map(|e| e.requests))
        .collect();
    let chosen = match costs {
        Some(costs) => (0..candidates.len())
            .min_by_key(|&i| (costs[i], i != ruled, i))
            .unwrap_or(ruled),
        None => ruled,
    };
    let contradiction = candidates[0].contradiction;
    let mut exact: Vec<bool> = analyses
        .iter()
        .map(|a| a.complete && candidates.iter().all(|c| c.contradiction || answers(c, a)))
        .collect();
    if let Some(e) = keyset_exact.and_then(|i| exact.get_mut(i)) {
        *e = true;
    }
    let filter = property_filter.filter(|_| !contradiction);
    let mut paths: Vec<AccessPath> = candidates
        .into_iter()
        .map(|c| AccessPath {
            filter: filter.clone(),
            ..c.path
        })
        .collect();
    let path = paths.remove(chosen);
    // The other paths are for a base-row scan to switch to (an index's
    // order): a global index's entities are not read by one.
    paths.retain(|p| p.index().is_none_or(|r| !r.global));
    Pushdown {
        path,
        alternatives: paths,
        exact,
    }
}

/// Whether a planned path answers every atom of a filter.
fn answers(p: &Planned, a: &Analysis) -> bool {
    a.atoms
        .iter()
        .all(|at| p.consumed.contains(&(at.target.clone(), at.kind())))
}

#[cfg(test)]
mod tests {
    use datafusion::prelude::{col, lit};

    use super::*;
    use crate::catalog::ddl;

    fn registrations() -> TableDef {
        ddl::parse(include_str!("../../../../../catalog/registrations.sql")).unwrap()
    }

    fn kinds(filters: &[Expr]) -> (String, Vec<bool>) {
        let p = push_down(Some(&registrations()), filters);
        let text = p.path.to_string();
        (
            text.split(' ').next().unwrap_or_default().to_owned(),
            p.exact,
        )
    }

    #[test]
    fn the_access_paths() {
        let event = || col("event").eq(lit("2012 Boston Marathon"));
        let distance = || col("distance").eq(lit("Full"));
        let (k, e) = kinds(&[event(), distance(), lit(42).eq(col("bib"))]);
        assert_eq!((k.as_str(), e), ("access=point", vec![true, true, true]));
        let (k, e) = kinds(&[
            event(),
            distance(),
            col("bib").in_list(vec![lit(1), lit(2)], false),
        ]);
        assert_eq!(
            (k.as_str(), e),
            ("access=points(2)", vec![true, true, true])
        );
        let (k, e) = kinds(&[event(), distance(), col("bib").between(lit(5), lit(9))]);
        assert_eq!(
            (k.as_str(), e),
            ("access=row_range", vec![true, true, true])
        );
        let (k, e) = kinds(&[event(), col("club").eq(lit("Harriers"))]);
        assert_eq!(
            (k.as_str(), e),
            ("access=partition_range", vec![true, false])
        );
        let (k, e) = kinds(&[col("club").eq(lit("Harriers"))]);
        assert_eq!((k.as_str(), e), ("access=full_scan", vec![false]));
        let (k, e) = kinds(&[col("bib").eq(lit(1)), col("bib").eq(lit(2))]);
        assert_eq!((k.as_str(), e), ("access=points(0)", vec![true, true]));
    }

    #[test]
    fn index_rows_are_read_where_they_fix_more_than_the_base_rows() {
        let event = || col("event").eq(lit("2012 Boston Marathon"));
        let distance = || col("distance").eq(lit("Full"));
        let shown = |filters: &[Expr]| {
            let p = push_down(Some(&registrations()), filters);
            (p.path.to_string(), p.exact)
        };
        // age leads the AGE: rows; the filter stays DataFusion's too, as
        // the base rows (index use off) do not answer it.
        let (path, exact) = shown(&[event(), distance(), col("age").eq(lit(55))]);
        assert_eq!(
            path,
            r#"access=index_point(age) pk="2012 Boston Marathon__Full" rk=["AGE:055__", "AGE:055_`")"#
        );
        assert_eq!(exact, [true, true, false]);
        // Two prefixes in every partition do not fit one request per
        // partition: every AGE: row would be read, no better than the base rows.
        let (path, _) = shown(&[col("age").in_list(vec![lit(30), lit(31)], false)]);
        assert!(path.starts_with("access=full_scan"), "{path}");
        let (path, _) = shown(&[
            event(),
            distance(),
            col("age").in_list(vec![lit(30), lit(31)], false),
        ]);
        assert!(path.starts_with("access=index_points(age, 2) "), "{path}");
        // Every partition: the AGE:055 range in each.
        let (path, _) = shown(&[col("age").eq(lit(55))]);
        assert_eq!(
            path,
            r#"access=index_point(age) pk=(-inf, +inf) rk=["AGE:055__", "AGE:055_`")"#
        );
        let (path, _) = shown(&[event(), distance(), col("age").between(lit(50), lit(59))]);
        assert_eq!(
            path,
            r#"access=index_range(age) pk="2012 Boston Marathon__Full" rk=["AGE:050", "AGE:05:")"#
        );
        // Ties and point reads go to the base rows.
        let (path, _) = shown(&[event(), distance()]);
        assert!(path.starts_with("access=row_range"), "{path}");
        let (path, _) = shown(&[
            event(),
            distance(),
            col("bib").eq(lit(7)),
            col("age").eq(lit(55)),
        ]);
        assert!(path.starts_with("access=point "), "{path}");
        let p = push_down(Some(&registrations()), &[event(), distance()]);
        assert_eq!(p.alternatives.len(), 1, "the index, for its order");
        // The base rows answer the bib range and the index would not: the
        // base rows, so that what DataFusion drops is answered whatever
        // the path.
        let p = push_down(
            Some(&registrations()),
            &[
                event(),
                distance(),
                col("bib").between(lit(1), lit(5)),
                col("age").eq(lit(55)),
            ],
        );
        assert!(
            p.path.to_string().starts_with("access=row_range"),
            "{}",
            p.path
        );
        assert!(p.alternatives.is_empty());
        assert_eq!(p.exact, [true, true, true, false]);
    }

    #[test]
    fn a_row_value_on_the_primary_key_bounds_the_partitions() {
        let p = push_down(Some(&registrations()), &[keyset(">", 1234)]);
        let bound = p.path.partition_bound.as_ref().expect("a bound");
        assert_eq!(p.path.access, Access::PartitionRange);
        assert!(bound.above);
        assert_eq!(
            bound.values,
            [
                KeyValue::Text("2012 Boston Marathon".into()),
                KeyValue::Text("Full".into())
            ]
        );
        // In the bound's partition, the rows after bib 1234.
        let rows = bound.at_bound.as_ref().expect("rows at the bound");
        assert_eq!(
            rows.start,
            Bound::Included(RowKey::from_stored("BIB:01235".into()))
        );
        assert_eq!(
            rows.end,
            Bound::Excluded(RowKey::from_stored("BIB:9999:".into()))
        );
        assert_eq!(p.exact, [false]);
        // Partitions before the bound are passed by, after it read whole.
        use crate::exec::read::access::PartitionChoice;
        let pk = |s: &str| PartitionKey::from_stored(s.into());
        assert_eq!(
            bound.choose(&pk("2011 New York City Marathon__Full")),
            PartitionChoice::Skip
        );
        assert_eq!(
            bound.choose(&pk("2012 Boston Marathon__Half")),
            PartitionChoice::Whole
        );
        // "2012 Boston Marathon 2" sorts after "2012 Boston Marathon" as SQL
        // text, though its key sorts before "2012 Boston Marathon__Full".
        assert_eq!(
            bound.choose(&pk("2012 Boston Marathon 2__Full")),
            PartitionChoice::Whole
        );
        // `<=` keeps the other side, and the bound's rows up to bib 1234.
        let p = push_down(Some(&registrations()), &[keyset("<=", 1234)]);
        let bound = p.path.partition_bound.expect("a bound");
        assert!(!bound.above);
        let rows = bound.at_bound.expect("rows at the bound");
        assert_eq!(
            rows.end,
            Bound::Excluded(RowKey::from_stored("BIB:01235".into()))
        );
    }

    /// `(event, distance, bib) op ('2012 Boston Marathon', 'Full', bib)`,
    /// as DataFusion plans it.
    fn keyset(op: &str, bib: i64) -> Expr {
        use datafusion::arrow::array::{ArrayRef, Int64Array, StringArray, StructArray};
        use datafusion::arrow::datatypes::{DataType, Field};
        use datafusion::common::ScalarValue;
        use std::sync::Arc;
        let columns = datafusion::functions::core::expr_fn::r#struct(vec![
            col("event"),
            col("distance"),
            col("bib"),
        ]);
        let fields = vec![
            Arc::new(Field::new("c0", DataType::Utf8, false)),
            Arc::new(Field::new("c1", DataType::Utf8, false)),
            Arc::new(Field::new("c2", DataType::Int64, false)),
        ];
        let arrays: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from(vec!["2012 Boston Marathon"])),
            Arc::new(StringArray::from(vec!["Full"])),
            Arc::new(Int64Array::from(vec![bib])),
        ];
        let value = ScalarValue::Struct(Arc::new(StructArray::new(fields.into(), arrays, None)));
        let op = match op {
            ">" => datafusion::logical_expr::Operator::Gt,
            _ => datafusion::logical_expr::Operator::LtEq,
        };
        datafusion::logical_expr::binary_expr(columns, op, lit(value))
    }

    #[test]
    fn a_bucketed_table_reads_a_key_in_its_bucket_and_a_range_in_every_bucket() {
        let def = ddl::parse(
            "CREATE TABLE members (id BIGINT NOT NULL, name TEXT, PRIMARY KEY (id)) \
             WITH (partition_key = '{#16}', row_key = 'r:{id:+18}')",
        )
        .unwrap();
        let requests = |filters: &[Expr]| push_down(Some(&def), filters).path;
        // One id: one Get, in the bucket of its RowKey.
        let p = requests(&[col("id").eq(lit(7i64))]);
        let rk = def.row_key.compose(&[KeyValue::Int(7)]).unwrap();
        assert_eq!(p.access, Access::Points);
        assert_eq!(
            p.requests,
            [KeyRequest::Get(
                PartitionKey::from_stored(crate::keys::bucket_of(&rk, 16)),
                RowKey::from_stored(rk)
            )]
        );
        // Three ids: three Gets.
        let p = requests(&[col("id").in_list(vec![lit(1i64), lit(2i64), lit(3i64)], false)]);
        assert_eq!((p.access.clone(), p.requests.len()), (Access::Points, 3));
        // A range: that range in each of the 16 buckets.
        let p = requests(&[col("id").gt(lit(100i64))]);
        assert_eq!((p.access.clone(), p.requests.len()), (Access::RowRange, 16));
        // Nothing on the key: the whole table, as one scan the policy sees.
        let p = requests(&[col("name").eq(lit("x"))]);
        assert_eq!(p.access, Access::FullScan);
        assert!(p.reads_every_partition());
    }

    #[test]
    fn a_row_value_over_ordered_not_null_keys_is_two_key_ranges_and_exact() {
        use datafusion::arrow::array::{ArrayRef, Int64Array};
        use datafusion::arrow::datatypes::{DataType, Field};
        use datafusion::common::ScalarValue;
        use std::sync::Arc;
        let row_value = || {
            let columns =
                datafusion::functions::core::expr_fn::r#struct(vec![col("region"), col("seq")]);
            let fields = vec![
                Arc::new(Field::new("c0", DataType::Int64, false)),
                Arc::new(Field::new("c1", DataType::Int64, false)),
            ];
            let arrays: Vec<ArrayRef> = vec![
                Arc::new(Int64Array::from(vec![3])),
                Arc::new(Int64Array::from(vec![5])),
            ];
            let value = datafusion::arrow::array::StructArray::new(fields.into(), arrays, None);
            columns.gt(lit(ScalarValue::Struct(Arc::new(value))))
        };
        let table = |keys: &str| {
            ddl::parse(&format!(
                "CREATE TABLE events (region BIGINT{keys}, seq BIGINT{keys}, v INT{}) \
                 WITH (partition_key = '{{region:i10}}', row_key = '{{seq:i10}}')",
                if keys.is_empty() {
                    ""
                } else {
                    ", PRIMARY KEY (region, seq)"
                }
            ))
            .unwrap()
        };
        let p = push_down(Some(&table(" NOT NULL")), &[row_value()]);
        assert_eq!(p.exact, [true]);
        assert_eq!(p.path.requests.len(), 2, "{}", p.path);
        assert!(p.path.partition_bound.is_none());
        // Keys that may be NULL sort where no comparison with a value puts
        // them: the bound stays a bound on listed partitions, inexact.
        let p = push_down(Some(&table("")), &[row_value()]);
        assert_eq!(p.exact, [false]);
        assert!(p.path.partition_bound.is_some(), "{}", p.path);
    }

    #[test]
    fn a_timestamp_condition_goes_to_the_store_in_its_ticks_on_every_table() {
        use datafusion::common::ScalarValue;
        // 2026-01-01T00:00:00.000001Z, in microseconds.
        let t = || {
            lit(ScalarValue::TimestampMicrosecond(
                Some(1_767_225_600_000_001),
                None,
            ))
        };
        let filter = |def: Option<&TableDef>, e: Expr| {
            let p = push_down(def, &[e]);
            assert_eq!(p.exact, [false], "DataFusion keeps the condition");
            p.path.filter.map(|f| f.to_string()).unwrap_or_default()
        };
        let def = registrations();
        let ts = || datafusion::prelude::ident("Timestamp");
        for def in [Some(&def), None] {
            assert_eq!(
                filter(def, ts().gt(t())),
                "Timestamp ge datetime'2026-01-01T00:00:00.0000020Z'"
            );
            assert_eq!(
                filter(def, ts().lt_eq(t())),
                "Timestamp lt datetime'2026-01-01T00:00:00.0000020Z'"
            );
            assert_eq!(
                filter(def, t().eq(ts())),
                "Timestamp ge datetime'2026-01-01T00:00:00.0000010Z' \
                 and Timestamp lt datetime'2026-01-01T00:00:00.0000020Z'"
            );
        }
        // Not a timestamp, or one OData cannot write: nothing is sent.
        assert_eq!(filter(None, ts().eq(lit(3))), "");
        let year_10000 = ScalarValue::TimestampMicrosecond(Some(253_402_300_800_000_000), None);
        assert_eq!(filter(None, ts().gt(lit(year_10000))), "");
    }

    #[test]
    fn what_stays_inexact() {
        // A range on a free-text field; a prefix with no plain successor; NOT.
        let (_, e) = kinds(&[col("name").gt(lit("M"))]);
        assert_eq!(e, [false]);
        let (_, e) = kinds(&[col("event").like(lit("2012😀%"))]);
        assert_eq!(e, [false]);
        let (_, e) = kinds(&[!col("bib").eq(lit(3))]);
        assert_eq!(e, [false]);
        // A range compared with text beyond U+D7FF is not pushed at all.
        let p = push_down(
            Some(&registrations()),
            &[col("PartitionKey").gt(lit("\u{E000}"))],
        );
        assert_eq!((&p.path.access, p.exact), (&Access::FullScan, vec![false]));
    }
}
