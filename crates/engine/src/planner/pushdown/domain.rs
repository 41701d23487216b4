//! Atoms combined per target, and key ranges intersected and compared in
//! the store's order (UTF-16 code units).

use std::cmp::Ordering;
use std::collections::BTreeSet;
use std::ops::Bound;

use super::*;

/// The domain of one target under all atoms: a value set, or bounds and a prefix.
#[derive(Debug, Default)]
pub(super) struct Combined {
    pub(super) values: Option<BTreeSet<KeyValue>>,
    pub(super) lo: Option<Bound<KeyValue>>,
    pub(super) hi: Option<Bound<KeyValue>>,
    pub(super) prefix: Option<String>,
    pub(super) empty: bool,
}

pub(super) fn cmp_kv(a: &KeyValue, b: &KeyValue) -> std::cmp::Ordering {
    match (a, b) {
        (KeyValue::Text(x), KeyValue::Text(y)) => cmp_utf16(x, y),
        _ => a.cmp(b),
    }
}

/// Whether `v` is on the kept side of bound `b`: above it as a lower bound
/// (`lower`), below it as an upper one.
fn within<T>(v: &T, b: &Bound<T>, lower: bool, cmp: impl Fn(&T, &T) -> Ordering) -> bool {
    let ord = match b {
        Bound::Unbounded => return true,
        Bound::Included(x) | Bound::Excluded(x) if lower => cmp(v, x),
        Bound::Included(x) | Bound::Excluded(x) => cmp(x, v),
    };
    ord.is_gt() || (ord.is_eq() && matches!(b, Bound::Included(_)))
}

/// Whether bound `old` keeps no more than bound `new` (both lower bounds if
/// `lower`, else both upper).
pub(super) fn tighter<T>(
    old: &Bound<T>,
    new: &Bound<T>,
    lower: bool,
    cmp: impl Fn(&T, &T) -> Ordering,
) -> bool {
    match (old, new) {
        (_, Bound::Unbounded) => true,
        (Bound::Unbounded, _) => false,
        (Bound::Included(a) | Bound::Excluded(a), Bound::Included(b) | Bound::Excluded(b)) => {
            let ord = if lower { cmp(a, b) } else { cmp(b, a) };
            ord.is_gt()
                || (ord.is_eq()
                    && (matches!(old, Bound::Excluded(_)) || matches!(new, Bound::Included(_))))
        }
    }
}

pub(super) fn above(v: &KeyValue, lo: &Bound<KeyValue>) -> bool {
    within(v, lo, true, cmp_kv)
}

pub(super) fn below(v: &KeyValue, hi: &Bound<KeyValue>) -> bool {
    within(v, hi, false, cmp_kv)
}

// The comparator of `String` bounds, passed where `&T` is `&String`.
#[allow(clippy::ptr_arg)]
fn cmp_key(a: &String, b: &String) -> Ordering {
    cmp_utf16(a, b)
}

/// Ranges always narrow a value set; on their own they become key ranges
/// only on order-preserving fields (the caller decides).
pub(super) fn combine(atoms: &[&Atom], target: &Target) -> Combined {
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
                if c.lo
                    .as_ref()
                    .is_none_or(|old| !tighter(old, lo, true, cmp_kv))
                {
                    c.lo = Some(lo.clone());
                }
                if c.hi
                    .as_ref()
                    .is_none_or(|old| !tighter(old, hi, false, cmp_kv))
                {
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
        // A range or a prefix (`<`, `LIKE`, `IS NOT NULL`) is never true of NULL.
        if c.lo.is_some() || c.hi.is_some() || c.prefix.is_some() {
            values.remove(&KeyValue::Null);
        }
        let (lo, hi) = (
            c.lo.clone().unwrap_or(Bound::Unbounded),
            c.hi.clone().unwrap_or(Bound::Unbounded),
        );
        values.retain(|v| {
            above(v, &lo)
                && below(v, &hi)
                && c.prefix
                    .as_ref()
                    .is_none_or(|p| matches!(v, KeyValue::Text(s) if s.starts_with(p.as_str())))
        });
        c.empty |= values.is_empty();
    }
    c
}

/// The keys one template allows: whole keys, or key ranges.
#[derive(Debug)]
pub(super) enum KeySpec {
    Exact(Vec<String>),
    Ranges(Vec<(Bound<String>, Bound<String>)>),
}

/// The keys a template allows under the atoms, plus how many leading fields it fixed.
pub(super) fn narrow_by_key_column(
    spec: KeySpec,
    atoms: &[&Atom],
    target: Target,
    consumed: &mut Vec<(Target, Kind)>,
) -> KeySpec {
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
    if c.prefix
        .as_ref()
        .is_none_or(|p| crate::keys::successor(p).is_some())
    {
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
                        _ => None,
                    })
                    .filter(|k| in_c(k) && ranges.iter().any(|r| in_range(k, r)))
                    .collect(),
            ),
            None => {
                let own = column_range(&c);
                KeySpec::Ranges(
                    ranges
                        .into_iter()
                        .filter_map(|r| intersect(r, &own))
                        .collect(),
                )
            }
        },
    }
}

pub(super) fn text_bound(b: Option<&Bound<KeyValue>>) -> Bound<String> {
    match b {
        Some(Bound::Included(KeyValue::Text(s))) => Bound::Included(s.clone()),
        Some(Bound::Excluded(KeyValue::Text(s))) => Bound::Excluded(s.clone()),
        _ => Bound::Unbounded,
    }
}

pub(super) fn column_range(c: &Combined) -> (Bound<String>, Bound<String>) {
    let mut r = (text_bound(c.lo.as_ref()), text_bound(c.hi.as_ref()));
    if let Some(p) = &c.prefix {
        let end = crate::keys::successor(p).map_or(Bound::Unbounded, Bound::Excluded);
        r = intersect(r, &(Bound::Included(p.clone()), end))
            .unwrap_or((Bound::Included(p.clone()), Bound::Excluded(p.clone())));
    }
    r
}

pub(super) fn in_range(k: &String, (lo, hi): &(Bound<String>, Bound<String>)) -> bool {
    within(k, lo, true, cmp_key) && within(k, hi, false, cmp_key)
}

/// The keys in both ranges; `None` when none are.
pub(super) fn intersect(
    (a_lo, a_hi): (Bound<String>, Bound<String>),
    (b_lo, b_hi): &(Bound<String>, Bound<String>),
) -> Option<(Bound<String>, Bound<String>)> {
    let lo = if tighter(&a_lo, b_lo, true, cmp_key) {
        a_lo
    } else {
        b_lo.clone()
    };
    let hi = if tighter(&a_hi, b_hi, false, cmp_key) {
        a_hi
    } else {
        b_hi.clone()
    };
    // An empty intersection: the lower end is not below the upper one.
    if let (Bound::Included(l) | Bound::Excluded(l), Bound::Included(h) | Bound::Excluded(h)) =
        (&lo, &hi)
    {
        let ord = cmp_utf16(l, h);
        let both_in = matches!(lo, Bound::Included(_)) && matches!(hi, Bound::Included(_));
        if ord.is_gt() || (ord.is_eq() && !both_in) {
            return None;
        }
    }
    Some((lo, hi))
}

pub(super) fn key_range<K>(
    r: (Bound<String>, Bound<String>),
    make: impl Fn(String) -> K,
) -> KeyRange<K> {
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
