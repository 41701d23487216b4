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

/// The bound a row value puts on `request` (a scan spanning partitions):
/// `None` unless its columns are every PartitionKey field, then leading
/// RowKey fields, each in template order.
pub(super) fn bound(def: &TableDef, rv: &RowValue, request: &KeyRequest) -> Option<PartitionBound> {
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
    let at_bound = match rest.first() {
        // The bound is the partition itself: in it for `>=`, out for `>`.
        None => inclusive.then(|| rows.clone()),
        Some(KeyValue::Int(v)) => {
            // The next field bounds the RowKey where it preserves order;
            // strict only when it is the last of the row value.
            let end = if rest.len() == 1 && !inclusive {
                Bound::Excluded(*v)
            } else {
                Bound::Included(*v)
            };
            let (lo, hi) = if above {
                (end, Bound::Unbounded)
            } else {
                (Bound::Unbounded, end)
            };
            match def.row_key.int_range(&[], lo, hi) {
                Ok(Some(KeyBounds::Empty)) => None,
                Ok(Some(KeyBounds::Range { start, end })) => Some(intersect(rows, start, end)),
                _ => Some(rows.clone()),
            }
        }
        // Other fields narrow nothing here: the bound is on the partitions.
        Some(_) => Some(rows.clone()),
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
    Some(PartitionBound {
        template: def.partition_key.clone(),
        values: rv.values[..k].to_vec(),
        above,
        at_bound,
        shown: format!("({}) {} ({})", columns.join(", "), rv.op, values.join(", ")),
    })
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
