//! Filters into atoms: each DataFusion filter becomes, where it can, a
//! conjunction of value sets, ranges and prefixes on key targets.

use std::collections::BTreeSet;
use std::ops::Bound;

use datafusion::common::ScalarValue;
use datafusion::logical_expr::expr::{InList, Like};
use datafusion::logical_expr::{Between, BinaryExpr, Expr, Operator};

use super::*;

pub(super) fn analyze(def: Option<&TableDef>, expr: &Expr) -> Analysis {
    match expr {
        Expr::BinaryExpr(BinaryExpr {
            left,
            op: Operator::And,
            right,
        }) => {
            let (l, r) = (analyze(def, left), analyze(def, right));
            let mut atoms = l.atoms;
            atoms.extend(r.atoms);
            Analysis {
                atoms,
                complete: l.complete && r.complete,
                never: l.never || r.never,
            }
        }
        Expr::BinaryExpr(BinaryExpr {
            left,
            op: Operator::Or,
            right,
        }) => {
            let (l, r) = (analyze(def, left), analyze(def, right));
            match (l.never, r.never) {
                (true, true) => return never(l.complete && r.complete),
                (true, false) if l.complete => return r,
                (false, true) if r.complete => return l,
                _ => {}
            }
            // Only ORs of value sets on one target combine (points).
            match (l.atoms.as_slice(), r.atoms.as_slice()) {
                (
                    [
                        Atom {
                            target: a,
                            domain: Domain::Values(x),
                        },
                    ],
                    [
                        Atom {
                            target: b,
                            domain: Domain::Values(y),
                        },
                    ],
                ) if a == b && l.complete && r.complete => one(a.clone(), Domain::Values(x | y)),
                _ => Analysis::default(),
            }
        }
        Expr::BinaryExpr(BinaryExpr { left, op, right }) => {
            let (target, lit, op) = match (target(def, left), target(def, right)) {
                (Some(t), None) => (t, right.as_ref(), *op),
                (None, Some(t)) => match op.swap() {
                    Some(op) => (t, left.as_ref(), op),
                    None => return Analysis::default(),
                },
                _ => return Analysis::default(),
            };
            let Some(lit) = literal(lit) else {
                return Analysis::default();
            };
            let comparison = matches!(
                op,
                Operator::Eq
                    | Operator::NotEq
                    | Operator::Lt
                    | Operator::LtEq
                    | Operator::Gt
                    | Operator::GtEq
            );
            if !comparison {
                return Analysis::default();
            }
            if lit.is_null() {
                return never(true);
            }
            let Some(v) = key_value(def, &target, &lit) else {
                return Analysis::default();
            };
            if op != Operator::Eq && !order_safe(&v) {
                return Analysis::default();
            }
            let domain = match op {
                Operator::Eq => Domain::Values(BTreeSet::from([v])),
                Operator::Lt => Domain::Range(Bound::Unbounded, Bound::Excluded(v)),
                Operator::LtEq => Domain::Range(Bound::Unbounded, Bound::Included(v)),
                Operator::Gt => Domain::Range(Bound::Excluded(v), Bound::Unbounded),
                Operator::GtEq => Domain::Range(Bound::Included(v), Bound::Unbounded),
                _ => return Analysis::default(),
            };
            one(target, domain)
        }
        Expr::Between(Between {
            expr,
            negated: false,
            low,
            high,
        }) => {
            let Some(t) = target(def, expr) else {
                return Analysis::default();
            };
            match (literal(low), literal(high)) {
                (Some(l), Some(h)) if l.is_null() || h.is_null() => never(true),
                (Some(l), Some(h)) => match (key_value(def, &t, &l), key_value(def, &t, &h)) {
                    (Some(l), Some(h)) if order_safe(&l) && order_safe(&h) => {
                        one(t, Domain::Range(Bound::Included(l), Bound::Included(h)))
                    }
                    _ => Analysis::default(),
                },
                _ => Analysis::default(),
            }
        }
        Expr::InList(InList {
            expr,
            list,
            negated: false,
        }) => {
            let Some(t) = target(def, expr) else {
                return Analysis::default();
            };
            let mut values = BTreeSet::new();
            for item in list {
                match literal(item) {
                    // `x IN (1, NULL)` is never true through the NULL.
                    Some(l) if l.is_null() => {}
                    Some(l) => match key_value(def, &t, &l) {
                        Some(v) => {
                            values.insert(v);
                        }
                        None => return Analysis::default(),
                    },
                    None => return Analysis::default(),
                }
            }
            one(t, Domain::Values(values))
        }
        Expr::Like(Like {
            negated: false,
            expr,
            pattern,
            escape_char: None,
            case_insensitive: false,
        }) => {
            let (
                Some(t),
                Some(
                    ScalarValue::Utf8(Some(p))
                    | ScalarValue::Utf8View(Some(p))
                    | ScalarValue::LargeUtf8(Some(p)),
                ),
            ) = (target(def, expr), literal(pattern))
            else {
                return Analysis::default();
            };
            if !text_target(def, &t) || p.contains('\\') {
                return Analysis::default();
            }
            let body = p.strip_suffix('%').unwrap_or(&p);
            if body.contains(['%', '_']) {
                return Analysis::default();
            }
            if body.len() == p.len() {
                one(t, Domain::Values(BTreeSet::from([KeyValue::Text(p)])))
            } else {
                one(t, Domain::Prefix(body.to_owned()))
            }
        }
        // Base rows' keys are never NULL.
        Expr::IsNull(e) if base_key(def, e) => never(true),
        Expr::IsNotNull(e) if base_key(def, e) => Analysis {
            complete: true,
            ..Analysis::default()
        },
        // An index's typed field writes NULL as a value of its own, placed
        // as PostgreSQL sorts it; IS NOT NULL is every other value.
        // Only where a field writes NULL: a legacy field has none (an
        // application's row may still hold NULL there).
        Expr::IsNull(e) => match target(def, e) {
            Some(Target::Field(f)) if def.is_some_and(|d| holds_null(d, &f)) => one(
                Target::Field(f),
                Domain::Values(BTreeSet::from([KeyValue::Null])),
            ),
            _ => Analysis::default(),
        },
        Expr::IsNotNull(e) => match target(def, e) {
            Some(t @ Target::Field(_)) => one(t, Domain::Range(Bound::Unbounded, Bound::Unbounded)),
            _ => Analysis::default(),
        },
        Expr::Literal(ScalarValue::Boolean(Some(true)), _) => Analysis {
            complete: true,
            ..Analysis::default()
        },
        Expr::Literal(ScalarValue::Boolean(Some(false)) | ScalarValue::Boolean(None), _) => {
            never(true)
        }
        _ => Analysis::default(),
    }
}

/// Whether comparing with this value orders the same in SQL (code points) and
/// in the store (UTF-16 code units): any text below U+D800 does.
pub(super) fn order_safe(v: &KeyValue) -> bool {
    match v {
        KeyValue::Text(s) => s.chars().all(|c| (c as u32) < 0xD800),
        KeyValue::Null => false,
        // Keys fold −0 into 0 and every NaN into one; DataFusion orders
        // them apart (`total_cmp`).
        KeyValue::Double(d) => {
            let x = d.get();
            !(x.is_nan() || (x == 0.0 && x.is_sign_negative()))
        }
        _ => true,
    }
}

pub(super) fn one(target: Target, domain: Domain) -> Analysis {
    let never = matches!(&domain, Domain::Values(v) if v.is_empty());
    Analysis {
        atoms: vec![Atom { target, domain }],
        complete: true,
        never,
    }
}

pub(super) fn never(complete: bool) -> Analysis {
    Analysis {
        atoms: Vec::new(),
        complete,
        never: true,
    }
}

/// The key target an expression reads: a column, or a widening integer cast of one.
pub(super) fn target(def: Option<&TableDef>, e: &Expr) -> Option<Target> {
    match e {
        Expr::Column(c) => match c.name.as_str() {
            "PartitionKey" => Some(Target::PartitionKey),
            "RowKey" => Some(Target::RowKey),
            name => def
                .filter(|d| d.is_template_column(name))
                .map(|_| Target::Field(name.to_owned())),
        },
        Expr::Cast(c) if c.field.data_type().is_integer() => match target(def, &c.expr)? {
            Target::Field(f)
                if def.and_then(|d| d.column(&f)).is_some_and(|c| {
                    matches!(c.column_type, ColumnType::Int | ColumnType::BigInt)
                }) =>
            {
                Some(Target::Field(f))
            }
            _ => None,
        },
        _ => None,
    }
}

/// Whether every template field of `column` writes NULL (typed fields).
fn holds_null(def: &TableDef, column: &str) -> bool {
    let templates = def.indexes.iter().map(|i| &i.row_key).chain(
        def.global_indexes
            .iter()
            .flat_map(|g| [&g.partition_key, &g.row_key]),
    );
    templates
        .flat_map(|t| (0..t.columns().count()).filter_map(move |n| t.field(n)))
        .filter(|(c, _)| *c == column)
        .all(|(_, f)| f.holds_null())
}

/// Whether an expression reads a key of the base rows.
fn base_key(def: Option<&TableDef>, e: &Expr) -> bool {
    match target(def, e) {
        Some(Target::Field(f)) => def.is_some_and(|d| d.is_key_column(&f)),
        Some(_) => true,
        None => false,
    }
}

pub(super) fn text_target(def: Option<&TableDef>, t: &Target) -> bool {
    match t {
        Target::Field(f) => def
            .and_then(|d| d.column(f))
            .is_some_and(|c| c.column_type == ColumnType::Text),
        _ => true,
    }
}

/// A literal, with casts of literals folded.
pub(super) fn literal(e: &Expr) -> Option<ScalarValue> {
    match e {
        Expr::Literal(v, _) => Some(v.clone()),
        Expr::Cast(c) => literal(&c.expr)?.cast_to(c.field.data_type()).ok(),
        Expr::TryCast(c) => literal(&c.expr)?.cast_to(c.field.data_type()).ok(),
        _ => None,
    }
}

/// A literal as a key value of the target's type; `None` where it is not one
/// (a float against an integer field, a number against text).
pub(super) fn key_value(def: Option<&TableDef>, t: &Target, v: &ScalarValue) -> Option<KeyValue> {
    let column_type = match t {
        Target::Field(f) => def.and_then(|d| d.column(f))?.column_type,
        Target::PartitionKey | Target::RowKey => ColumnType::Text,
    };
    key_of_scalar(column_type, v)
}
