//! Row-value comparisons on the primary key, `(event, distance, bib) >
//! ('2012 Boston Marathon', 'Full', 1234)`: keyset paging as Phoenix does
//! it. DataFusion plans them as a comparison of `struct(columns)` with a
//! struct literal. When the columns are the PartitionKey's fields then the
//! RowKey's leading fields, in template order, the path gets a
//! [`PartitionBound`] (see there for why not a key range).

use std::ops::Bound;

use datafusion::arrow::array::Array;
use datafusion::common::ScalarValue;
use datafusion::logical_expr::{BinaryExpr, Expr, Operator};

use super::analyze::{key_value, literal, order_safe, target};
use super::*;
use crate::exec::read::access::PartitionBound;

/// `(targets) op (values)`, `op` one of `<`, `<=`, `>`, `>=`.
#[derive(Debug, Clone)]
pub(super) struct RowValue {
    targets: Vec<Target>,
    values: Vec<KeyValue>,
    op: Operator,
}

/// The row-value comparison a filter is, if it is one on key columns.
pub(super) fn row_value(def: Option<&TableDef>, expr: &Expr) -> Option<RowValue> {
    let Expr::BinaryExpr(BinaryExpr { left, op, right }) = expr else {
        return None;
    };
    let (columns, lit, op) = match (struct_columns(left), struct_columns(right)) {
        (Some(c), None) => (c, right.as_ref(), *op),
        (None, Some(c)) => (c, left.as_ref(), op.swap()?),
        _ => return None,
    };
    if !matches!(
        op,
        Operator::Lt | Operator::LtEq | Operator::Gt | Operator::GtEq
    ) {
        return None;
    }
    let Some(ScalarValue::Struct(array)) = literal(lit) else {
        return None;
    };
    if array.len() != 1 || array.num_columns() != columns.len() {
        return None;
    }
    let mut targets = Vec::with_capacity(columns.len());
    let mut values = Vec::with_capacity(columns.len());
    for (column, field) in columns.iter().zip(array.columns()) {
        let t = target(def, column)?;
        let v = ScalarValue::try_from_array(field, 0).ok()?;
        if v.is_null() {
            return None;
        }
        let v = key_value(def, &t, &v)?;
        if !order_safe(&v) {
            return None;
        }
        targets.push(t);
        values.push(v);
    }
    Some(RowValue {
        targets,
        values,
        op,
    })
}

/// The columns of `struct(a, b, ...)`, under a cast of the struct if any.
fn struct_columns(e: &Expr) -> Option<Vec<Expr>> {
    match e {
        Expr::Cast(c) => struct_columns(&c.expr),
        Expr::ScalarFunction(f) if f.name() == "struct" => Some(f.args.clone()),
        _ => None,
    }
}

/// A row value's bound on a scan, and whether its rows at the bound are
/// exactly the row value's there.
pub(super) struct Bounded {
    pub(super) bound: PartitionBound,
    /// The rows at the bound are the comparison's own: the row value ends
    /// at the PartitionKey, or at one RowKey field whose order its key
    /// keeps (an integer or a typed field).
    pub(super) exact: bool,
}

/// The bound a row value puts on `request` (a scan spanning partitions):
/// `None` unless its columns are every PartitionKey field, then leading
/// RowKey fields, each in template order.
pub(super) fn bound(def: &TableDef, rv: &RowValue, request: &KeyRequest) -> Option<Bounded> {
    let KeyRequest::Scan { rows, .. } = request else {
        return None;
    };
    let pk_fields: Vec<&str> = def.partition_key.columns().collect();
    let rk_fields: Vec<&str> = def.row_key.columns().collect();
    let k = pk_fields.len();
    let fits = rv.targets.len() >= k
        && rv.targets.iter().enumerate().all(|(i, t)| {
            let name = if i < k {
                pk_fields.get(i)
            } else {
                rk_fields.get(i - k)
            };
            matches!((t, name), (Target::Field(f), Some(n)) if f == n)
        });
    if !fits || k == 0 {
        return None;
    }
    let above = matches!(rv.op, Operator::Gt | Operator::GtEq);
    let inclusive = matches!(rv.op, Operator::GtEq | Operator::LtEq);
    let rest = &rv.values[k..];
    // The next field bounds the RowKey where its key keeps its order (an
    // integer or a typed field); strict only when it is the last of the
    // row value, and then the rows are the row value's own there.
    let strict = rest.len() == 1 && !inclusive;
    let narrowed = match rest.first() {
        None => None,
        Some(v) if is_typed(def, 0) => {
            let (lo, hi) = side(v, strict, above);
            Some(def.row_key.typed_range(&[], lo, hi))
        }
        Some(KeyValue::Int(v)) => {
            let (lo, hi) = side(*v, strict, above);
            Some(def.row_key.int_range(&[], lo, hi))
        }
        Some(_) => Some(Ok(None)),
    };
    let mut exact = rest.len() <= 1;
    let at_bound = match narrowed {
        // The bound is the partition itself: in it for `>=`, out for `>`.
        None => inclusive.then(|| rows.clone()),
        Some(Ok(Some(KeyBounds::Empty))) => None,
        Some(Ok(Some(KeyBounds::Range { start, end }))) => Some(intersect(rows, start, end)),
        // Other fields narrow nothing here: the bound is on the partitions.
        Some(_) => {
            exact = false;
            Some(rows.clone())
        }
    };
    let columns: Vec<String> = rv
        .targets
        .iter()
        .map(|t| match t {
            Target::Field(f) => f.clone(),
            Target::PartitionKey => "PartitionKey".into(),
            Target::RowKey => "RowKey".into(),
        })
        .collect();
    let values: Vec<String> = rv
        .values
        .iter()
        .map(|v| match v {
            KeyValue::Int(i) => i.to_string(),
            KeyValue::Null => "NULL".into(),
            other => format!("'{}'", other.to_string().replace('\'', "''")),
        })
        .collect();
    Some(Bounded {
        bound: PartitionBound {
            template: def.partition_key.clone(),
            values: rv.values[..k].to_vec(),
            above,
            at_bound,
            shown: format!("({}) {} ({})", columns.join(", "), rv.op, values.join(", ")),
        },
        exact,
    })
}

/// A field's values past `v` (`above`) or before it, `v` itself kept
/// unless `strict`, as the low and high bounds of a range.
fn side<T>(v: T, strict: bool, above: bool) -> (Bound<T>, Bound<T>) {
    let end = if strict {
        Bound::Excluded(v)
    } else {
        Bound::Included(v)
    };
    if above {
        (end, Bound::Unbounded)
    } else {
        (Bound::Unbounded, end)
    }
}

/// Whether RowKey field `n` is a typed field (`keys::typed`).
fn is_typed(def: &TableDef, n: usize) -> bool {
    matches!(def.row_key.field(n), Some((_, FieldFormat::Typed(_))))
}

/// An exact bound as key ranges in key order: the bound's partition's
/// rows, then the partitions after it (below the bound: the partitions
/// before it, then its rows). Only where the PartitionKey's text order is
/// its fields' order (every field ascending and order-preserving, no
/// buckets): then the partitions past the bound are a key range, and none
/// need listing and comparing (`PartitionBound::choose`). A LIMIT then
/// reads the first page or two of the ranges, in order, and stops.
pub(super) fn split(def: &TableDef, b: &Bounded, request: &KeyRequest) -> Option<Vec<KeyRequest>> {
    let KeyRequest::Scan {
        partitions, rows, ..
    } = request
    else {
        return None;
    };
    let template = &def.partition_key;
    // A NULL key field (a table mapped without a PRIMARY KEY clause may
    // write one) sorts where no SQL comparison with a value puts it.
    let not_null = |c: &str| def.column(c).is_some_and(|c| c.not_null);
    let keys_not_null =
        template.columns().all(not_null) && def.row_key.field(0).is_none_or(|(c, _)| not_null(c));
    let ordered = keys_not_null
        && template.row_buckets().is_none()
        && (0..b.bound.values.len()).all(|i| {
            template
                .field(i)
                .is_some_and(|(_, format)| format.order() == Some(true))
        });
    if !b.exact || !ordered {
        return None;
    }
    let pk = PartitionKey::from_stored(template.compose(&b.bound.values).ok()?);
    let scan = |partitions: KeyRange<PartitionKey>, rows: KeyRange<RowKey>| KeyRequest::Scan {
        partitions,
        rows,
        at_most_one: false,
    };
    let others = if b.bound.above {
        partitions.after(Some(&pk))
    } else {
        let below = Bound::Excluded(pk.clone());
        KeyRange {
            start: partitions.start.clone(),
            end: if super::domain::tighter(&partitions.end, &below, false, PartitionKey::cmp) {
                partitions.end.clone()
            } else {
                below
            },
        }
    };
    let mut out = Vec::with_capacity(2);
    let here = b
        .bound
        .at_bound
        .as_ref()
        .filter(|r| partitions.contains(&pk) && !r.is_empty())
        .map(|r| scan(KeyRange::exactly(pk.clone()), r.clone()));
    if !b.bound.above {
        out.extend(others_request(others, rows, &scan));
        out.extend(here);
    } else {
        out.extend(here);
        out.extend(others_request(others, rows, &scan));
    }
    Some(out)
}

/// The scan of the partitions past a bound, if any are left.
fn others_request(
    others: KeyRange<PartitionKey>,
    rows: &KeyRange<RowKey>,
    scan: &impl Fn(KeyRange<PartitionKey>, KeyRange<RowKey>) -> KeyRequest,
) -> Option<KeyRequest> {
    (!others.is_empty()).then(|| scan(others, rows.clone()))
}

/// `rows` narrowed to `[start, end)` of a RowKey bound.
fn intersect(
    rows: &KeyRange<RowKey>,
    start: Bound<String>,
    end: Bound<String>,
) -> KeyRange<RowKey> {
    let (start, end) = (start.map(RowKey::from_stored), end.map(RowKey::from_stored));
    let pick = |old: &Bound<RowKey>, new: Bound<RowKey>, lower| {
        if super::domain::tighter(old, &new, lower, RowKey::cmp) {
            old.clone()
        } else {
            new
        }
    };
    KeyRange {
        start: pick(&rows.start, start, true),
        end: pick(&rows.end, end, false),
    }
}
