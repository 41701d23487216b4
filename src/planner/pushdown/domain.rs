//! Atoms combined per target, and key ranges intersected and compared in
//! the store's order (UTF-16 code units).

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

pub(super) fn above(v: &KeyValue, lo: &Bound<KeyValue>) -> bool {
    match lo {
        Bound::Unbounded => true,
        Bound::Included(l) => cmp_kv(v, l).is_ge(),
        Bound::Excluded(l) => cmp_kv(v, l).is_gt(),
    }
}

pub(super) fn below(v: &KeyValue, hi: &Bound<KeyValue>) -> bool {
    match hi {
        Bound::Unbounded => true,
        Bound::Included(h) => cmp_kv(v, h).is_le(),
        Bound::Excluded(h) => cmp_kv(v, h).is_lt(),
    }
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

/// Whether lower bound `old` is at least as tight as `new`.
pub(super) fn above_bound(old: &Bound<KeyValue>, new: &Bound<KeyValue>) -> bool {
    match (old, new) {
        (_, Bound::Unbounded) => true,
        (Bound::Unbounded, _) => false,
        (Bound::Included(a), Bound::Included(b)) | (Bound::Excluded(a), Bound::Excluded(b)) => {
            cmp_kv(a, b).is_ge()
        }
        (Bound::Excluded(a), Bound::Included(b)) => cmp_kv(a, b).is_ge(),
        (Bound::Included(a), Bound::Excluded(b)) => cmp_kv(a, b).is_gt(),
    }
}

/// Whether upper bound `old` is at least as tight as `new`.
pub(super) fn below_bound(old: &Bound<KeyValue>, new: &Bound<KeyValue>) -> bool {
    match (old, new) {
        (_, Bound::Unbounded) => true,
        (Bound::Unbounded, _) => false,
        (Bound::Included(a), Bound::Included(b)) | (Bound::Excluded(a), Bound::Excluded(b)) => {
            cmp_kv(a, b).is_le()
        }
        (Bound::Excluded(a), Bound::Included(b)) => cmp_kv(a, b).is_le(),
        (Bound::Included(a), Bound::Excluded(b)) => cmp_kv(a, b).is_lt(),
    }
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
                        KeyValue::Int(_) => None,
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

pub(super) fn in_range(k: &str, (lo, hi): &(Bound<String>, Bound<String>)) -> bool {
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

pub(super) fn intersect(
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
        let empty = ord.is_gt()
            || (ord.is_eq()
                && !(matches!(lo, Bound::Included(_)) && matches!(hi, Bound::Included(_))));
        if empty {
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
