//! Property filters: the small expression tree a query carries (OData `$filter`:
//! eq ne gt ge lt le, and, or, not), and its evaluation against an entity.

use std::cmp::Ordering;

use super::key::cmp_utf16;
use super::value::EdmValue;
use super::view::{EntityView, compare_refs};

/// What a comparison reads from an entity.
#[derive(Debug, Clone, PartialEq)]
pub enum Operand {
    /// The PartitionKey, compared as a String.
    PartitionKey,
    /// The RowKey, compared as a String.
    RowKey,
    /// The Timestamp, compared as a DateTime.
    Timestamp,
    /// A custom property.
    Property(String),
}

/// A comparison operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmpOp {
    /// `eq`
    Eq,
    /// `ne`
    Ne,
    /// `gt`
    Gt,
    /// `ge`
    Ge,
    /// `lt`
    Lt,
    /// `le`
    Le,
}

/// A filter over entities.
///
/// A comparison is true only when the entity has the operand and it has the
/// literal's type: a missing property or another type (Int32 against an Int64
/// literal, too) makes it false, as the service does not coerce. `not` negates the
/// result of its operand.
#[derive(Debug, Clone, PartialEq)]
pub enum Filter {
    /// `operand op literal`
    Compare {
        /// What is read from the entity.
        operand: Operand,
        /// The comparison.
        op: CmpOp,
        /// The literal compared against.
        value: EdmValue,
    },
    /// Both hold.
    And(Box<Filter>, Box<Filter>),
    /// Either holds.
    Or(Box<Filter>, Box<Filter>),
    /// The operand does not hold.
    Not(Box<Filter>),
}

impl CmpOp {
    /// The operator's OData name (`eq`, `ne`, `gt`, `ge`, `lt`, `le`).
    pub fn odata_name(self) -> &'static str {
        match self {
            CmpOp::Eq => "eq",
            CmpOp::Ne => "ne",
            CmpOp::Gt => "gt",
            CmpOp::Ge => "ge",
            CmpOp::Lt => "lt",
            CmpOp::Le => "le",
        }
    }
}

impl std::fmt::Display for Filter {
    /// OData-like text, for EXPLAIN: `club eq 'Harriers' and age ge 30`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Filter::Compare { operand, op, value } => {
                match operand {
                    Operand::PartitionKey => f.write_str("PartitionKey")?,
                    Operand::RowKey => f.write_str("RowKey")?,
                    Operand::Timestamp => f.write_str("Timestamp")?,
                    Operand::Property(p) => f.write_str(p)?,
                }
                let op = op.odata_name();
                match value {
                    EdmValue::String(s) => write!(f, " {op} '{}'", s.replace('\'', "''")),
                    EdmValue::Int32(v) => write!(f, " {op} {v}"),
                    EdmValue::Int64(v) => write!(f, " {op} {v}L"),
                    EdmValue::Boolean(v) => write!(f, " {op} {v}"),
                    EdmValue::DateTime(t) => {
                        write!(f, " {op} datetime'{}'", super::value::format_datetime(t))
                    }
                    other => write!(f, " {op} {other:?}"),
                }
            }
            Filter::And(a, b) => write!(f, "{a} and {b}"),
            Filter::Or(a, b) => write!(f, "({a} or {b})"),
            Filter::Not(a) => write!(f, "not ({a})"),
        }
    }
}

impl Filter {
    /// A comparison of a custom property.
    pub fn property(name: impl Into<String>, op: CmpOp, value: EdmValue) -> Self {
        Filter::Compare {
            operand: Operand::Property(name.into()),
            op,
            value,
        }
    }

    /// `self and other`.
    pub fn and(self, other: Filter) -> Self {
        Filter::And(Box::new(self), Box::new(other))
    }

    /// `self or other`.
    pub fn or(self, other: Filter) -> Self {
        Filter::Or(Box::new(self), Box::new(other))
    }

    /// `not self`.
    pub fn negate(self) -> Self {
        Filter::Not(Box::new(self))
    }

    /// The filter's top-level conjuncts: the terms of its `and`s, each of
    /// which must hold (a filter that is no `and` is its one conjunct).
    pub fn conjuncts(&self) -> Vec<&Filter> {
        fn walk<'a>(f: &'a Filter, out: &mut Vec<&'a Filter>) {
            match f {
                Filter::And(a, b) => {
                    walk(a, out);
                    walk(b, out);
                }
                other => out.push(other),
            }
        }
        let mut out = Vec::new();
        walk(self, &mut out);
        out
    }

    /// Whether the entity passes the filter.
    pub fn matches(&self, e: &(impl EntityView + ?Sized)) -> bool {
        match self {
            Filter::And(a, b) => a.matches(e) && b.matches(e),
            Filter::Or(a, b) => a.matches(e) || b.matches(e),
            Filter::Not(a) => !a.matches(e),
            Filter::Compare { operand, op, value } => {
                let ord = match (operand, value) {
                    (Operand::PartitionKey, EdmValue::String(s)) => {
                        Some(cmp_utf16(e.partition_key(), s))
                    }
                    (Operand::RowKey, EdmValue::String(s)) => Some(cmp_utf16(e.row_key(), s)),
                    (Operand::Timestamp, EdmValue::DateTime(t)) => Some(e.timestamp().cmp(t)),
                    (Operand::Property(name), lit) => match e.property(name) {
                        // No coercion: another type is false for every operator.
                        Some(v) if v.edm_type() == lit.edm_type() => compare_refs(v, lit.as_ref()),
                        _ => return false,
                    },
                    _ => return false,
                };
                apply(*op, ord)
            }
        }
    }

    /// Whether any comparison reads the Timestamp (which Cosmos DB's Table
    /// API matches nothing for, and no service indexes).
    pub fn reads_timestamp(&self) -> bool {
        match self {
            Filter::Compare { operand, .. } => *operand == Operand::Timestamp,
            Filter::And(a, b) | Filter::Or(a, b) => a.reads_timestamp() || b.reads_timestamp(),
            Filter::Not(a) => a.reads_timestamp(),
        }
    }

    /// Calls `f` with the name of every custom property the filter reads.
    pub fn visit_properties<'a>(&'a self, f: &mut impl FnMut(&'a str)) {
        match self {
            Filter::Compare {
                operand: Operand::Property(name),
                ..
            } => f(name),
            Filter::Compare { .. } => {}
            Filter::And(a, b) | Filter::Or(a, b) => {
                a.visit_properties(f);
                b.visit_properties(f);
            }
            Filter::Not(a) => a.visit_properties(f),
        }
    }
}

/// Orders two values of one type; `None` when the types differ or a Double is NaN.
pub fn compare_values(a: &EdmValue, b: &EdmValue) -> Option<Ordering> {
    compare_refs(a.as_ref(), b.as_ref())
}

/// Applies an operator to an ordering of two values of one type; `None` (a NaN)
/// is unequal to everything, so only `ne` holds.
fn apply(op: CmpOp, ord: Option<Ordering>) -> bool {
    match (op, ord) {
        (CmpOp::Ne, ord) => ord != Some(Ordering::Equal),
        (_, None) => false,
        (CmpOp::Eq, Some(o)) => o.is_eq(),
        (CmpOp::Gt, Some(o)) => o.is_gt(),
        (CmpOp::Ge, Some(o)) => o.is_ge(),
        (CmpOp::Lt, Some(o)) => o.is_lt(),
        (CmpOp::Le, Some(o)) => o.is_le(),
    }
}
