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

use datafusion::common::ScalarValue;
use datafusion::logical_expr::expr::{InList, Like};
use datafusion::logical_expr::{Between, BinaryExpr, Expr, Operator};

use super::access::{AccessKind, AccessPath, KeyRequest};
use crate::catalog::{ColumnType, TableDef};
use crate::keys::{FieldFormat, KeyBounds, KeyTemplate, KeyValue};
use crate::storage::key::{cmp_utf16, validate_key};
use crate::storage::{CmpOp, EdmValue, Filter, KeyKind, KeyRange, PartitionKey, RowKey};

/// Most keys or key prefixes one path enumerates; past that a field's value
/// set narrows nothing and its filter stays Inexact.
pub const MAX_REQUESTS: usize = 1000;

/// What the pushdown decided.
#[derive(Debug, Clone, PartialEq)]
pub struct Pushdown {
    /// The requests, and the property filter.
    pub path: AccessPath,
    /// Per input filter: whether the path answers it completely.
    pub exact: Vec<bool>,
}

/// What an atom constrains.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Target {
    Field(String),
    PartitionKey,
    RowKey,
}

/// The kind of constraint, for deciding what the path consumed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
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
pub fn push_down(def: Option<&TableDef>, filters: &[Expr]) -> Pushdown {
    let analyses: Vec<Analysis> = filters.iter().map(|f| analyze(def, f)).collect();
    let property_filter = def.and_then(|d| {
        filters
            .iter()
            .filter_map(|f| property_filter(d, f))
            .reduce(Filter::and)
    });
    if analyses.iter().any(|a| a.never) {
        return Pushdown {
            path: AccessPath {
                kind: AccessKind::Points,
                requests: Vec::new(),
                filter: None,
            },
            exact: analyses.iter().map(|a| a.complete).collect(),
        };
    }
    let atoms: Vec<&Atom> = analyses.iter().flat_map(|a| &a.atoms).collect();
    let mut consumed: BTreeSet<(String, u8)> = BTreeSet::new();
    let (path, contradiction) = plan(def, &atoms, &mut consumed);
    let exact = analyses
        .iter()
        .map(|a| {
            a.complete
                && (contradiction
                    || a.atoms.iter().all(|at| consumed.contains(&key_of(&at.target, at.kind()))))
        })
        .collect();
    let path = AccessPath {
        filter: property_filter.filter(|_| !contradiction),
        ..path
    };
    Pushdown { path, exact }
}

fn key_of(target: &Target, kind: Kind) -> (String, u8) {
    let name = match target {
        Target::Field(c) => format!("f:{c}"),
        Target::PartitionKey => "PartitionKey".into(),
        Target::RowKey => "RowKey".into(),
    };
    (name, kind as u8)
}

// ---------------------------------------------------------------- analysis

fn analyze(def: Option<&TableDef>, expr: &Expr) -> Analysis {
    match expr {
        Expr::BinaryExpr(BinaryExpr { left, op: Operator::And, right }) => {
            let (l, r) = (analyze(def, left), analyze(def, right));
            let mut atoms = l.atoms;
            atoms.extend(r.atoms);
            Analysis {
                atoms,
                complete: l.complete && r.complete,
                never: l.never || r.never,
            }
        }
        Expr::BinaryExpr(BinaryExpr { left, op: Operator::Or, right }) => {
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
                    [Atom { target: a, domain: Domain::Values(x) }],
                    [Atom { target: b, domain: Domain::Values(y) }],
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
                Operator::Eq | Operator::NotEq | Operator::Lt | Operator::LtEq | Operator::Gt | Operator::GtEq
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
        Expr::Between(Between { expr, negated: false, low, high }) => {
            let Some(t) = target(def, expr) else {
                return Analysis::default();
            };
            match (literal(low), literal(high)) {
                (Some(l), Some(h)) if l.is_null() || h.is_null() => never(true),
                (Some(l), Some(h)) => match (key_value(def, &t, &l), key_value(def, &t, &h)) {
                    (Some(l), Some(h)) if order_safe(&l) && order_safe(&h) => one(t, Domain::Range(Bound::Included(l), Bound::Included(h))),
                    _ => Analysis::default(),
                },
                _ => Analysis::default(),
            }
        }
        Expr::InList(InList { expr, list, negated: false }) => {
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
        Expr::Like(Like { negated: false, expr, pattern, escape_char: None, case_insensitive: false }) => {
            let (Some(t), Some(ScalarValue::Utf8(Some(p)) | ScalarValue::Utf8View(Some(p)) | ScalarValue::LargeUtf8(Some(p)))) =
                (target(def, expr), literal(pattern))
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
        // Keys are never NULL.
        Expr::IsNull(e) if target(def, e).is_some() => never(true),
        Expr::IsNotNull(e) if target(def, e).is_some() => Analysis {
            complete: true,
            ..Analysis::default()
        },
        Expr::Literal(ScalarValue::Boolean(Some(true)), _) => Analysis {
            complete: true,
            ..Analysis::default()
        },
        Expr::Literal(ScalarValue::Boolean(Some(false)) | ScalarValue::Boolean(None), _) => never(true),
        _ => Analysis::default(),
    }
}

/// Whether comparing with this value orders the same in SQL (code points) and
/// in the store (UTF-16 code units): any text below U+D800 does.
fn order_safe(v: &KeyValue) -> bool {
    match v {
        KeyValue::Int(_) => true,
        KeyValue::Text(s) => s.chars().all(|c| (c as u32) < 0xD800),
    }
}

fn one(target: Target, domain: Domain) -> Analysis {
    let never = matches!(&domain, Domain::Values(v) if v.is_empty());
    Analysis {
        atoms: vec![Atom { target, domain }],
        complete: true,
        never,
    }
}

fn never(complete: bool) -> Analysis {
    Analysis {
        atoms: Vec::new(),
        complete,
        never: true,
    }
}

/// The key target an expression reads: a column, or a widening integer cast of one.
fn target(def: Option<&TableDef>, e: &Expr) -> Option<Target> {
    match e {
        Expr::Column(c) => match c.name.as_str() {
            "PartitionKey" => Some(Target::PartitionKey),
            "RowKey" => Some(Target::RowKey),
            name => def
                .filter(|d| d.is_key_column(name))
                .map(|_| Target::Field(name.to_owned())),
        },
        Expr::Cast(c) if c.field.data_type().is_integer() => match target(def, &c.expr)? {
            Target::Field(f) if def.and_then(|d| d.column(&f)).is_some_and(|c| c.column_type != ColumnType::Text) => {
                Some(Target::Field(f))
            }
            _ => None,
        },
        _ => None,
    }
}

fn text_target(def: Option<&TableDef>, t: &Target) -> bool {
    match t {
        Target::Field(f) => def.and_then(|d| d.column(f)).is_some_and(|c| c.column_type == ColumnType::Text),
        _ => true,
    }
}

/// A literal, with casts of literals folded.
fn literal(e: &Expr) -> Option<ScalarValue> {
    match e {
        Expr::Literal(v, _) => Some(v.clone()),
        Expr::Cast(c) => literal(&c.expr)?.cast_to(c.field.data_type()).ok(),
        Expr::TryCast(c) => literal(&c.expr)?.cast_to(c.field.data_type()).ok(),
        _ => None,
    }
}

/// A literal as a key value of the target's type; `None` where it is not one
/// (a float against an integer field, a number against text).
fn key_value(def: Option<&TableDef>, t: &Target, v: &ScalarValue) -> Option<KeyValue> {
    let text = |v: &ScalarValue| match v {
        ScalarValue::Utf8(Some(s)) | ScalarValue::Utf8View(Some(s)) | ScalarValue::LargeUtf8(Some(s)) => {
            Some(s.clone())
        }
        _ => None,
    };
    if text_target(def, t) {
        return text(v).map(KeyValue::Text);
    }
    let i = match v {
        ScalarValue::Int8(Some(i)) => i64::from(*i),
        ScalarValue::Int16(Some(i)) => i64::from(*i),
        ScalarValue::Int32(Some(i)) => i64::from(*i),
        ScalarValue::Int64(Some(i)) => *i,
        ScalarValue::UInt8(Some(i)) => i64::from(*i),
        ScalarValue::UInt16(Some(i)) => i64::from(*i),
        ScalarValue::UInt32(Some(i)) => i64::from(*i),
        ScalarValue::UInt64(Some(i)) => i64::try_from(*i).ok()?,
        _ => return None,
    };
    Some(KeyValue::Int(i))
}

// ---------------------------------------------------------------- planning

/// The domain of one target under all atoms: a value set, or bounds and a prefix.
#[derive(Debug, Default)]
struct Combined {
    values: Option<BTreeSet<KeyValue>>,
    lo: Option<Bound<KeyValue>>,
    hi: Option<Bound<KeyValue>>,
    prefix: Option<String>,
    empty: bool,
}

fn cmp_kv(a: &KeyValue, b: &KeyValue) -> std::cmp::Ordering {
    match (a, b) {
        (KeyValue::Text(x), KeyValue::Text(y)) => cmp_utf16(x, y),
        _ => a.cmp(b),
    }
}

fn above(v: &KeyValue, lo: &Bound<KeyValue>) -> bool {
    match lo {
        Bound::Unbounded => true,
        Bound::Included(l) => cmp_kv(v, l).is_ge(),
        Bound::Excluded(l) => cmp_kv(v, l).is_gt(),
    }
}

fn below(v: &KeyValue, hi: &Bound<KeyValue>) -> bool {
    match hi {
        Bound::Unbounded => true,
        Bound::Included(h) => cmp_kv(v, h).is_le(),
        Bound::Excluded(h) => cmp_kv(v, h).is_lt(),
    }
}

/// Ranges always narrow a value set; on their own they become key ranges
/// only on order-preserving fields (the caller decides).
fn combine(atoms: &[&Atom], target: &Target) -> Combined {
    let mut c = Combined::default();
    for a in atoms.iter().filter(|a| &a.target == target) {
        match &a.domain {
            Domain::Values(v) => {
                c.values = Some(match c.values.take() {
                    Some(old) => old.intersection(v).cloned().collect(),
                    None => v.clone(),
                });
            }
            Domain::Range(lo, hi) => {
                if c.lo.as_ref().is_none_or(|old| !above_bound(old, lo)) {
                    c.lo = Some(lo.clone());
                }
                if c.hi.as_ref().is_none_or(|old| !below_bound(old, hi)) {
                    c.hi = Some(hi.clone());
                }
            }
            Domain::Prefix(p) => {
                c.prefix = match c.prefix.take() {
                    None => Some(p.clone()),
                    Some(old) if old.starts_with(p.as_str()) => Some(old),
                    Some(old) if p.starts_with(old.as_str()) => Some(p.clone()),
                    Some(_) => {
                        c.empty = true;
                        None
                    }
                };
            }
        }
    }
    if let Some(values) = &mut c.values {
        let (lo, hi) = (c.lo.clone().unwrap_or(Bound::Unbounded), c.hi.clone().unwrap_or(Bound::Unbounded));
        values.retain(|v| {
            above(v, &lo)
                && below(v, &hi)
                && c.prefix.as_ref().is_none_or(|p| matches!(v, KeyValue::Text(s) if s.starts_with(p.as_str())))
        });
        c.empty |= values.is_empty();
    }
    c
}

/// Whether lower bound `old` is at least as tight as `new`.
fn above_bound(old: &Bound<KeyValue>, new: &Bound<KeyValue>) -> bool {
    match (old, new) {
        (_, Bound::Unbounded) => true,
        (Bound::Unbounded, _) => false,
        (Bound::Included(a), Bound::Included(b)) | (Bound::Excluded(a), Bound::Excluded(b)) => cmp_kv(a, b).is_ge(),
        (Bound::Excluded(a), Bound::Included(b)) => cmp_kv(a, b).is_ge(),
        (Bound::Included(a), Bound::Excluded(b)) => cmp_kv(a, b).is_gt(),
    }
}

/// Whether upper bound `old` is at least as tight as `new`.
fn below_bound(old: &Bound<KeyValue>, new: &Bound<KeyValue>) -> bool {
    match (old, new) {
        (_, Bound::Unbounded) => true,
        (Bound::Unbounded, _) => false,
        (Bound::Included(a), Bound::Included(b)) | (Bound::Excluded(a), Bound::Excluded(b)) => cmp_kv(a, b).is_le(),
        (Bound::Excluded(a), Bound::Included(b)) => cmp_kv(a, b).is_le(),
        (Bound::Included(a), Bound::Excluded(b)) => cmp_kv(a, b).is_lt(),
    }
}

/// The keys one template allows: whole keys, or key ranges.
#[derive(Debug)]
enum KeySpec {
    Exact(Vec<String>),
    Ranges(Vec<(Bound<String>, Bound<String>)>),
}

/// The keys a template allows under the atoms, plus how many leading fields it fixed.
fn template_spec(
    template: &KeyTemplate,
    atoms: &[&Atom],
    consumed: &mut Vec<(Target, Kind)>,
) -> Option<(KeySpec, usize)> {
    let mut combos: Vec<Vec<KeyValue>> = vec![Vec::new()];
    let n = template.columns().count();
    let mut fixed = 0;
    for (column, format) in (0..n).filter_map(|i| template.field(i)) {
        let t = Target::Field(column.to_owned());
        let c = combine(atoms, &t);
        if c.empty {
            return None;
        }
        let Some(values) = c.values else {
            // The next field: a range on an ordered integer field, or a text prefix.
            let mut ranges = Vec::new();
            for leading in &combos {
                let bounds = if format.order().is_some() && (c.lo.is_some() || c.hi.is_some()) {
                    let int = |b: Option<Bound<KeyValue>>| match b {
                        Some(Bound::Included(KeyValue::Int(i))) => Bound::Included(i),
                        Some(Bound::Excluded(KeyValue::Int(i))) => Bound::Excluded(i),
                        _ => Bound::Unbounded,
                    };
                    template.int_range(leading, int(c.lo.clone()), int(c.hi.clone())).ok().flatten()
                } else if format == FieldFormat::Text && c.prefix.is_some() {
                    template.prefix_range(leading, c.prefix.as_deref()).ok()
                } else {
                    None
                };
                let (bounds, kind) = match bounds {
                    // A prefix whose successor has no plain form (it ends in
                    // U+FFFF or beyond the BMP) gets an open end: it narrows
                    // but does not answer the filter.
                    Some(b @ KeyBounds::Range { end: Bound::Unbounded, .. }) if c.prefix.is_some() => (b, Kind::Values),
                    Some(b) => (b, if c.prefix.is_some() { Kind::Prefix } else { Kind::Range }),
                    None => (template.prefix_range(leading, None).ok()?, Kind::Values),
                };
                if kind != Kind::Values && ranges.is_empty() {
                    consumed.push((t.clone(), kind));
                }
                match bounds {
                    KeyBounds::Empty => {}
                    KeyBounds::All => ranges.push((Bound::Unbounded, Bound::Unbounded)),
                    KeyBounds::Range { start, end } => ranges.push((start, end)),
                }
            }
            return Some((KeySpec::Ranges(ranges), fixed));
        };
        if combos.len() * values.len() > MAX_REQUESTS {
            let ranges = combos
                .iter()
                .filter_map(|l| match template.prefix_range(l, None).ok()? {
                    KeyBounds::Range { start, end } => Some((start, end)),
                    KeyBounds::All => Some((Bound::Unbounded, Bound::Unbounded)),
                    KeyBounds::Empty => None,
                })
                .collect();
            return Some((KeySpec::Ranges(ranges), fixed));
        }
        // A value that does not fit the field (too wide, negative where the
        // format has no sign) is in no key.
        combos = combos
            .iter()
            .flat_map(|l| values.iter().map(move |v| [l.as_slice(), std::slice::from_ref(v)].concat()))
            .filter(|vs| template.compose_prefix(vs).is_ok())
            .collect();
        consumed.push((t, Kind::Values));
        consumed.push((Target::Field(column.to_owned()), Kind::Range));
        consumed.push((Target::Field(column.to_owned()), Kind::Prefix));
        fixed += 1;
    }
    let keys = combos.iter().filter_map(|vs| template.compose(vs).ok()).collect();
    Some((KeySpec::Exact(keys), fixed))
}

/// Narrows a spec by the atoms on a raw key column.
fn narrow_by_key_column(spec: KeySpec, atoms: &[&Atom], target: Target, consumed: &mut Vec<(Target, Kind)>) -> KeySpec {
    let c = combine(atoms, &target);
    let has = atoms.iter().any(|a| a.target == target);
    if !has {
        return spec;
    }
    let in_c = |k: &str| {
        let v = KeyValue::Text(k.to_owned());
        above(&v, c.lo.as_ref().unwrap_or(&Bound::Unbounded))
            && below(&v, c.hi.as_ref().unwrap_or(&Bound::Unbounded))
            && c.prefix.as_ref().is_none_or(|p| k.starts_with(p.as_str()))
            && c.values.as_ref().is_none_or(|vs| vs.contains(&v))
    };
    consumed.push((target.clone(), Kind::Values));
    consumed.push((target.clone(), Kind::Range));
    // A prefix without a plain successor leaves the range open (see above).
    if c.prefix.as_ref().is_none_or(|p| crate::keys::successor(p).is_some()) {
        consumed.push((target.clone(), Kind::Prefix));
    }
    if c.empty {
        return KeySpec::Exact(Vec::new());
    }
    match spec {
        KeySpec::Exact(keys) => KeySpec::Exact(keys.into_iter().filter(|k| in_c(k)).collect()),
        KeySpec::Ranges(ranges) => match &c.values {
            Some(values) => KeySpec::Exact(
                values
                    .iter()
                    .filter_map(|v| match v {
                        KeyValue::Text(s) => Some(s.clone()),
                        KeyValue::Int(_) => None,
                    })
                    .filter(|k| in_c(k) && ranges.iter().any(|r| in_range(k, r)))
                    .collect(),
            ),
            None => {
                let own = column_range(&c);
                KeySpec::Ranges(ranges.into_iter().filter_map(|r| intersect(r, &own)).collect())
            }
        },
    }
}

fn text_bound(b: Option<&Bound<KeyValue>>) -> Bound<String> {
    match b {
        Some(Bound::Included(KeyValue::Text(s))) => Bound::Included(s.clone()),
        Some(Bound::Excluded(KeyValue::Text(s))) => Bound::Excluded(s.clone()),
        _ => Bound::Unbounded,
    }
}

fn column_range(c: &Combined) -> (Bound<String>, Bound<String>) {
    let mut r = (text_bound(c.lo.as_ref()), text_bound(c.hi.as_ref()));
    if let Some(p) = &c.prefix {
        let end = crate::keys::successor(p).map_or(Bound::Unbounded, Bound::Excluded);
        r = intersect(r, &(Bound::Included(p.clone()), end)).unwrap_or((Bound::Included(p.clone()), Bound::Excluded(p.clone())));
    }
    r
}

fn in_range(k: &str, (lo, hi): &(Bound<String>, Bound<String>)) -> bool {
    let ok_lo = match lo {
        Bound::Unbounded => true,
        Bound::Included(l) => cmp_utf16(k, l).is_ge(),
        Bound::Excluded(l) => cmp_utf16(k, l).is_gt(),
    };
    let ok_hi = match hi {
        Bound::Unbounded => true,
        Bound::Included(h) => cmp_utf16(k, h).is_le(),
        Bound::Excluded(h) => cmp_utf16(k, h).is_lt(),
    };
    ok_lo && ok_hi
}

fn intersect(
    (a_lo, a_hi): (Bound<String>, Bound<String>),
    (b_lo, b_hi): &(Bound<String>, Bound<String>),
) -> Option<(Bound<String>, Bound<String>)> {
    let lo_key = |b: &Bound<String>| match b {
        Bound::Unbounded => None,
        Bound::Included(s) | Bound::Excluded(s) => Some(s.clone()),
    };
    let lo = match (&a_lo, b_lo) {
        (Bound::Unbounded, b) => b.clone(),
        (a, Bound::Unbounded) => a.clone(),
        (a, b) => match cmp_utf16(&lo_key(a)?, &lo_key(b)?) {
            std::cmp::Ordering::Greater => a.clone(),
            std::cmp::Ordering::Less => b.clone(),
            std::cmp::Ordering::Equal if matches!(a, Bound::Excluded(_)) => a.clone(),
            std::cmp::Ordering::Equal => b.clone(),
        },
    };
    let hi = match (&a_hi, b_hi) {
        (Bound::Unbounded, b) => b.clone(),
        (a, Bound::Unbounded) => a.clone(),
        (a, b) => match cmp_utf16(&lo_key(a)?, &lo_key(b)?) {
            std::cmp::Ordering::Less => a.clone(),
            std::cmp::Ordering::Greater => b.clone(),
            std::cmp::Ordering::Equal if matches!(a, Bound::Excluded(_)) => a.clone(),
            std::cmp::Ordering::Equal => b.clone(),
        },
    };
    // Drop an empty intersection.
    if let (Some(l), Some(h)) = (lo_key(&lo), lo_key(&hi)) {
        let ord = cmp_utf16(&l, &h);
        let empty = ord.is_gt() || (ord.is_eq() && !(matches!(lo, Bound::Included(_)) && matches!(hi, Bound::Included(_))));
        if empty {
            return None;
        }
    }
    Some((lo, hi))
}

fn key_range<K>(r: (Bound<String>, Bound<String>), make: impl Fn(String) -> K) -> KeyRange<K> {
    let map = |b: Bound<String>| match b {
        Bound::Unbounded => Bound::Unbounded,
        Bound::Included(s) => Bound::Included(make(s)),
        Bound::Excluded(s) => Bound::Excluded(make(s)),
    };
    KeyRange {
        start: map(r.0),
        end: map(r.1),
    }
}

/// Turns the atoms into requests; returns the path and whether it is a contradiction.
fn plan(def: Option<&TableDef>, atoms: &[&Atom], consumed_out: &mut BTreeSet<(String, u8)>) -> (AccessPath, bool) {
    let mut consumed = Vec::new();
    let everything = || KeySpec::Ranges(vec![(Bound::Unbounded, Bound::Unbounded)]);
    let empty_path = |kind| AccessPath { kind, requests: Vec::new(), filter: None };
    // Partitions.
    let (pk_spec, _) = match def {
        Some(d) => match template_spec(&d.partition_key, atoms, &mut consumed) {
            Some(s) => s,
            None => return (empty_path(AccessKind::Points), true),
        },
        None => (everything(), 0),
    };
    let pk_spec = narrow_by_key_column(pk_spec, atoms, Target::PartitionKey, &mut consumed);
    // Rows.
    let (rk_spec, rk_fixed) = match def {
        Some(d) => match template_spec(&d.row_key, atoms, &mut consumed) {
            Some(s) => s,
            None => return (empty_path(AccessKind::Points), true),
        },
        None => (everything(), 0),
    };
    let rk_spec = narrow_by_key_column(rk_spec, atoms, Target::RowKey, &mut consumed);
    let unique = def.is_some_and(|d| {
        let pk_fields = d.partition_key.columns().count();
        rk_fixed + pk_fields >= d.primary_key.len()
    });
    let pk = |s: String| PartitionKey::from_stored(s);
    let rk = |s: String| RowKey::from_stored(s);
    let mut requests = Vec::new();
    let kind;
    match pk_spec {
        KeySpec::Exact(mut pks) => {
            // A key the store could not hold is in no entity.
            pks.retain(|k| validate_key(KeyKind::PartitionKey, k).is_ok());
            pks.sort_by(|a, b| cmp_utf16(a, b));
            pks.dedup();
            let per_partition = match &rk_spec {
                KeySpec::Exact(rks) => rks.len(),
                KeySpec::Ranges(rs) => rs.len(),
            };
            let rk_spec = if pks.len().saturating_mul(per_partition) > MAX_REQUESTS {
                // Too many requests to build: fall through to the span below.
                KeySpec::Ranges(Vec::new())
            } else {
                rk_spec
            };
            let too_many = pks.len().saturating_mul(per_partition) > MAX_REQUESTS;
            match rk_spec {
                KeySpec::Exact(mut rks) => {
                    rks.retain(|k| validate_key(KeyKind::RowKey, k).is_ok());
                    rks.sort_by(|a, b| cmp_utf16(a, b));
                    rks.dedup();
                    kind = AccessKind::Points;
                    for p in &pks {
                        for r in &rks {
                            requests.push(KeyRequest::Get(pk(p.clone()), rk(r.clone())));
                        }
                    }
                }
                KeySpec::Ranges(mut ranges) => {
                    ranges.sort_by(|a, b| cmp_start(&a.0, &b.0));
                    kind = if unique { AccessKind::Points } else { AccessKind::RowRange };
                    for p in &pks {
                        for r in &ranges {
                            requests.push(KeyRequest::Scan {
                                partitions: KeyRange::exactly(pk(p.clone())),
                                rows: key_range(r.clone(), rk),
                                at_most_one: unique,
                            });
                        }
                    }
                }
            }
            if too_many {
                // Too many requests: one scan of the partitions' span instead.
                let (first, last) = (pks.first().cloned(), pks.last().cloned());
                consumed.clear();
                requests = vec![KeyRequest::Scan {
                    partitions: key_range(
                        (first.map_or(Bound::Unbounded, Bound::Included), last.map_or(Bound::Unbounded, Bound::Included)),
                        pk,
                    ),
                    rows: base_rows(def, rk),
                    at_most_one: false,
                }];
                return finish(AccessKind::PartitionRange, requests, consumed, consumed_out);
            }
        }
        KeySpec::Ranges(mut ranges) => {
            ranges.sort_by(|a, b| cmp_start(&a.0, &b.0));
            kind = if ranges.iter().all(|r| r == &(Bound::Unbounded, Bound::Unbounded)) {
                AccessKind::FullScan
            } else {
                AccessKind::PartitionRange
            };
            // One RowKey range applies within every partition; several do not fit one query.
            let rows = match rk_spec {
                KeySpec::Exact(rks) if rks.len() == 1 => {
                    let k = rks[0].clone();
                    (Bound::Included(k.clone()), Bound::Included(k))
                }
                KeySpec::Ranges(rs) if rs.len() == 1 => rs[0].clone(),
                KeySpec::Exact(rks) if rks.is_empty() => return finish(AccessKind::Points, Vec::new(), consumed, consumed_out),
                KeySpec::Ranges(rs) if rs.is_empty() => return finish(AccessKind::Points, Vec::new(), consumed, consumed_out),
                _ => {
                    consumed.retain(|(t, _)| is_partition_target(def, t));
                    let r = base_rows(def, |s| s);
                    (r.start, r.end)
                }
            };
            for p in ranges {
                requests.push(KeyRequest::Scan {
                    partitions: key_range(p, pk),
                    rows: key_range(rows.clone(), rk),
                    at_most_one: false,
                });
            }
        }
    }
    finish(kind, requests, consumed, consumed_out)
}

fn is_partition_target(def: Option<&TableDef>, t: &Target) -> bool {
    match t {
        Target::PartitionKey => true,
        Target::RowKey => false,
        Target::Field(f) => def.is_some_and(|d| d.partition_key.columns().any(|c| c == f)),
    }
}

fn finish(
    kind: AccessKind,
    requests: Vec<KeyRequest>,
    consumed: Vec<(Target, Kind)>,
    out: &mut BTreeSet<(String, u8)>,
) -> (AccessPath, bool) {
    let contradiction = requests.is_empty();
    out.extend(consumed.iter().map(|(t, k)| key_of(t, *k)));
    let kind = if contradiction { AccessKind::Points } else { kind };
    (AccessPath { kind, requests, filter: None }, contradiction)
}

/// The RowKeys of base rows: the RowKey template's leading literal.
fn base_rows<K>(def: Option<&TableDef>, make: impl Fn(String) -> K) -> KeyRange<K> {
    let r = match def.map(|d| d.row_key.prefix_range(&[], None)) {
        Some(Ok(KeyBounds::Range { start, end })) => (start, end),
        _ => (Bound::Unbounded, Bound::Unbounded),
    };
    key_range(r, make)
}

fn cmp_start(a: &Bound<String>, b: &Bound<String>) -> std::cmp::Ordering {
    match (a, b) {
        (Bound::Unbounded, Bound::Unbounded) => std::cmp::Ordering::Equal,
        (Bound::Unbounded, _) => std::cmp::Ordering::Less,
        (_, Bound::Unbounded) => std::cmp::Ordering::Greater,
        (Bound::Included(x) | Bound::Excluded(x), Bound::Included(y) | Bound::Excluded(y)) => cmp_utf16(x, y),
    }
}

// ---------------------------------------------------------------- property filter

/// The part of a filter on property columns that the store can evaluate with
/// the same answer as SQL (see the module notes); `None` where it cannot.
fn property_filter(def: &TableDef, e: &Expr) -> Option<Filter> {
    match e {
        Expr::BinaryExpr(BinaryExpr { left, op: Operator::And, right }) => {
            match (property_filter(def, left), property_filter(def, right)) {
                (Some(l), Some(r)) => Some(l.and(r)),
                (l, r) => l.or(r),
            }
        }
        Expr::BinaryExpr(BinaryExpr { left, op: Operator::Or, right }) => {
            Some(property_filter(def, left)?.or(property_filter(def, right)?))
        }
        Expr::BinaryExpr(BinaryExpr { left, op, right }) => {
            let (column, lit, op) = match (property_column(def, left), property_column(def, right)) {
                (Some(c), None) => (c, right.as_ref(), *op),
                (None, Some(c)) => (c, left.as_ref(), op.swap()?),
                _ => return None,
            };
            compare(def, column, op, &literal(lit)?)
        }
        Expr::InList(InList { expr, list, negated: false }) => {
            let column = property_column(def, expr)?;
            list.iter()
                .map(|item| compare(def, column, Operator::Eq, &literal(item)?))
                .collect::<Option<Vec<_>>>()?
                .into_iter()
                .reduce(Filter::or)
        }
        Expr::Between(Between { expr, negated: false, low, high }) => {
            let column = property_column(def, expr)?;
            Some(
                compare(def, column, Operator::GtEq, &literal(low)?)?
                    .and(compare(def, column, Operator::LtEq, &literal(high)?)?),
            )
        }
        _ => None,
    }
}

fn property_column<'a>(def: &TableDef, e: &'a Expr) -> Option<&'a str> {
    match e {
        Expr::Column(c) if def.column(&c.name).is_some() && !def.is_key_column(&c.name) => Some(&c.name),
        _ => None,
    }
}

/// `column op literal` as a store comparison. Only types whose store order is
/// SQL's: integers (an Int32 literal also for BIGINT columns, which read
/// Int32 values), booleans, and text compared with literals below U+D800
/// (where UTF-16 order is code point order). Doubles (−0, NaN) and times
/// (sub-microsecond ticks) stay with DataFusion.
fn compare(def: &TableDef, column: &str, op: Operator, lit: &ScalarValue) -> Option<Filter> {
    let op = match op {
        Operator::Eq => CmpOp::Eq,
        Operator::NotEq => CmpOp::Ne,
        Operator::Lt => CmpOp::Lt,
        Operator::LtEq => CmpOp::Le,
        Operator::Gt => CmpOp::Gt,
        Operator::GtEq => CmpOp::Ge,
        _ => return None,
    };
    let int = || key_value(Some(def), &Target::Field(String::new()), lit);
    match def.column(column)?.column_type {
        ColumnType::Int => match int()? {
            KeyValue::Int(i) => Some(Filter::property(column, op, EdmValue::Int32(i32::try_from(i).ok()?))),
            KeyValue::Text(_) => None,
        },
        ColumnType::BigInt => match int()? {
            KeyValue::Int(i) => {
                let narrow = i32::try_from(i).ok()?;
                Some(
                    Filter::property(column, op, EdmValue::Int64(i))
                        .or(Filter::property(column, op, EdmValue::Int32(narrow))),
                )
            }
            KeyValue::Text(_) => None,
        },
        ColumnType::Boolean => match (lit, op) {
            (ScalarValue::Boolean(Some(b)), CmpOp::Eq | CmpOp::Ne) => {
                Some(Filter::property(column, op, EdmValue::Boolean(*b)))
            }
            _ => None,
        },
        ColumnType::Text => match lit {
            ScalarValue::Utf8(Some(s)) | ScalarValue::Utf8View(Some(s)) | ScalarValue::LargeUtf8(Some(s))
                if s.chars().all(|c| (c as u32) < 0xD800) =>
            {
                Some(Filter::property(column, op, EdmValue::String(s.clone())))
            }
            _ => None,
        },
        _ => None,
    }
}
