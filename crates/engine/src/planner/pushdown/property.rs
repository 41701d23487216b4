//! The property filter: conditions on non-key columns, and on the system
//! `Timestamp`, that the store can evaluate with the same answer as SQL.
//!
//! `Timestamp` is what "what changed since" asks of Azure Tables, and the
//! service evaluates it (it indexes nothing by it: a partition read with
//! such a condition is still scanned whole, but only what passes is sent
//! and billed as entities returned). The store's value has 100 ns ticks
//! where the SQL column has microseconds, truncated: the SQL comparison is
//! mapped onto ticks exactly ([`timestamp`]).

use chrono::{DateTime, Utc};
use datafusion::common::ScalarValue;
use datafusion::logical_expr::expr::InList;
use datafusion::logical_expr::{Between, BinaryExpr, Expr, Operator};

use super::*;
use crate::storage::Operand;

/// What a pushed comparison reads.
#[derive(Debug, Clone, Copy)]
pub(super) enum Compared<'a> {
    /// A mapped column's property (by its SQL name).
    Column(&'a str),
    /// The system column `Timestamp`: every table has it, raw ones too.
    Timestamp,
}

pub(super) fn property_filter(def: Option<&TableDef>, e: &Expr) -> Option<Filter> {
    match e {
        Expr::BinaryExpr(BinaryExpr {
            left,
            op: Operator::And,
            right,
        }) => match (property_filter(def, left), property_filter(def, right)) {
            (Some(l), Some(r)) => Some(l.and(r)),
            (l, r) => l.or(r),
        },
        Expr::BinaryExpr(BinaryExpr {
            left,
            op: Operator::Or,
            right,
        }) => Some(property_filter(def, left)?.or(property_filter(def, right)?)),
        Expr::BinaryExpr(BinaryExpr { left, op, right }) => {
            let (column, lit, op) = match (property_column(def, left), property_column(def, right))
            {
                (Some(c), None) => (c, right.as_ref(), *op),
                (None, Some(c)) => (c, left.as_ref(), op.swap()?),
                _ => return None,
            };
            compare(def, column, op, &literal(lit)?)
        }
        Expr::InList(InList {
            expr,
            list,
            negated: false,
        }) => {
            let column = property_column(def, expr)?;
            list.iter()
                .map(|item| compare(def, column, Operator::Eq, &literal(item)?))
                .collect::<Option<Vec<_>>>()?
                .into_iter()
                .reduce(Filter::or)
        }
        Expr::Between(Between {
            expr,
            negated: false,
            low,
            high,
        }) => {
            let column = property_column(def, expr)?;
            Some(
                compare(def, column, Operator::GtEq, &literal(low)?)?.and(compare(
                    def,
                    column,
                    Operator::LtEq,
                    &literal(high)?,
                )?),
            )
        }
        _ => None,
    }
}

/// A column whose comparisons the store can evaluate: a property, and not
/// one an absent property reads as a value of (`ColumnDef::fill`: the
/// store would take such a row as lacking it); or the system `Timestamp`.
pub(super) fn property_column<'a>(def: Option<&TableDef>, e: &'a Expr) -> Option<Compared<'a>> {
    let Expr::Column(c) = e else {
        return None;
    };
    // No declared column can take a system column's name (`validate`).
    if c.name == "Timestamp" {
        return Some(Compared::Timestamp);
    }
    let def = def?;
    (def.column(&c.name).is_some_and(|d| d.fill().is_none()) && !def.is_key_column(&c.name))
        .then_some(Compared::Column(&c.name))
}

/// `column op literal` as a store comparison. Only types whose store order is
/// SQL's: integers (an Int32 literal also for BIGINT columns, which read
/// Int32 values), booleans, and text compared with literals below U+D800
/// (where UTF-16 order is code point order). Doubles (−0, NaN) and times
/// (sub-microsecond ticks) stay with DataFusion.
pub(super) fn compare(
    def: Option<&TableDef>,
    column: Compared<'_>,
    op: Operator,
    lit: &ScalarValue,
) -> Option<Filter> {
    let column = match column {
        Compared::Timestamp => return timestamp(op, micros(lit)?),
        Compared::Column(c) => c,
    };
    let def = def?;
    let op = match op {
        Operator::Eq => CmpOp::Eq,
        Operator::NotEq => CmpOp::Ne,
        Operator::Lt => CmpOp::Lt,
        Operator::LtEq => CmpOp::Le,
        Operator::Gt => CmpOp::Gt,
        Operator::GtEq => CmpOp::Ge,
        _ => return None,
    };
    let int = || key_of_scalar(ColumnType::BigInt, lit);
    let declared = def.column(column)?;
    // The store compares the property the column's values are stored under.
    let column = declared.property_name();
    match declared.column_type {
        ColumnType::Int => match int()? {
            KeyValue::Int(i) => Some(Filter::property(
                column,
                op,
                EdmValue::Int32(i32::try_from(i).ok()?),
            )),
            _ => None,
        },
        ColumnType::BigInt => match int()? {
            KeyValue::Int(i) => {
                let narrow = i32::try_from(i).ok()?;
                Some(
                    Filter::property(column, op, EdmValue::Int64(i)).or(Filter::property(
                        column,
                        op,
                        EdmValue::Int32(narrow),
                    )),
                )
            }
            _ => None,
        },
        ColumnType::Boolean => match (lit, op) {
            (ScalarValue::Boolean(Some(b)), CmpOp::Eq | CmpOp::Ne) => {
                Some(Filter::property(column, op, EdmValue::Boolean(*b)))
            }
            _ => None,
        },
        ColumnType::Text => match lit {
            ScalarValue::Utf8(Some(s))
            | ScalarValue::Utf8View(Some(s))
            | ScalarValue::LargeUtf8(Some(s))
                if s.chars().all(|c| (c as u32) < 0xD800) =>
            {
                Some(Filter::property(column, op, EdmValue::String(s.clone())))
            }
            _ => None,
        },
        _ => None,
    }
}

/// A timestamp literal in microseconds since the epoch, where it is one
/// exactly (a nanosecond literal with a fraction of a microsecond is not:
/// DataFusion compares it with the column cast to nanoseconds).
fn micros(lit: &ScalarValue) -> Option<i64> {
    match lit {
        ScalarValue::TimestampSecond(Some(v), _) => v.checked_mul(1_000_000),
        ScalarValue::TimestampMillisecond(Some(v), _) => v.checked_mul(1_000),
        ScalarValue::TimestampMicrosecond(Some(v), _) => Some(*v),
        ScalarValue::TimestampNanosecond(Some(v), _) => (v % 1_000 == 0).then_some(v / 1_000),
        _ => None,
    }
}

/// `Timestamp op x` over the store's ticks. The SQL value is the stored
/// time truncated to a microsecond, so with `y` = `x` + 1 µs: `> x` holds
/// from `y` on, `<= x` below `y`, `= x` in `[x, y)` and `<> x` outside it.
pub(super) fn timestamp(op: Operator, x: i64) -> Option<Filter> {
    use chrono::Datelike;
    // OData writes four-digit years: a bound outside them stays here.
    let at = |m: i64| {
        DateTime::<Utc>::from_timestamp_micros(m).filter(|t| (1..=9999).contains(&t.year()))
    };
    let (x, y) = (at(x)?, at(x.checked_add(1)?)?);
    let cmp = |op, t: DateTime<Utc>| Filter::Compare {
        operand: Operand::Timestamp,
        op,
        value: EdmValue::DateTime(t),
    };
    Some(match op {
        Operator::GtEq => cmp(CmpOp::Ge, x),
        Operator::Gt => cmp(CmpOp::Ge, y),
        Operator::Lt => cmp(CmpOp::Lt, x),
        Operator::LtEq => cmp(CmpOp::Lt, y),
        Operator::Eq => cmp(CmpOp::Ge, x).and(cmp(CmpOp::Lt, y)),
        Operator::NotEq => cmp(CmpOp::Lt, x).or(cmp(CmpOp::Ge, y)),
        _ => return None,
    })
}
