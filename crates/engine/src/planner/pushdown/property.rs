//! The property filter: conditions on non-key columns the store can
//! evaluate with the same answer as SQL.

use datafusion::common::ScalarValue;
use datafusion::logical_expr::expr::InList;
use datafusion::logical_expr::{Between, BinaryExpr, Expr, Operator};

use super::*;

/// The part of a filter on property columns that the store can evaluate with
/// the same answer as SQL (see the module notes); `None` where it cannot.
pub(super) fn property_filter(def: &TableDef, e: &Expr) -> Option<Filter> {
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
/// store would take such a row as lacking it).
pub(super) fn property_column<'a>(def: &TableDef, e: &'a Expr) -> Option<&'a str> {
    match e {
        Expr::Column(c)
            if def.column(&c.name).is_some_and(|d| d.fill().is_none())
                && !def.is_key_column(&c.name) =>
        {
            Some(&c.name)
        }
        _ => None,
    }
}

/// `column op literal` as a store comparison. Only types whose store order is
/// SQL's: integers (an Int32 literal also for BIGINT columns, which read
/// Int32 values), booleans, and text compared with literals below U+D800
/// (where UTF-16 order is code point order). Doubles (−0, NaN) and times
/// (sub-microsecond ticks) stay with DataFusion.
pub(super) fn compare(
    def: &TableDef,
    column: &str,
    op: Operator,
    lit: &ScalarValue,
) -> Option<Filter> {
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
