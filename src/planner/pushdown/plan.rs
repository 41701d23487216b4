//! Atoms into requests: the keys or key ranges each template allows, then
//! the access path over partitions and rows.

use std::collections::BTreeSet;
use std::ops::Bound;

use super::*;

pub(super) fn template_spec(
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
                    template
                        .int_range(leading, int(c.lo.clone()), int(c.hi.clone()))
                        .ok()
                        .flatten()
                } else if format == FieldFormat::Text && c.prefix.is_some() {
                    template.prefix_range(leading, c.prefix.as_deref()).ok()
                } else {
                    None
                };
                let (bounds, kind) = match bounds {
                    // A prefix whose successor has no plain form (it ends in
                    // U+FFFF or beyond the BMP) gets an open end: it narrows
                    // but does not answer the filter.
                    Some(
                        b @ KeyBounds::Range {
                            end: Bound::Unbounded,
                            ..
                        },
                    ) if c.prefix.is_some() => (b, Kind::Values),
                    Some(b) => (
                        b,
                        if c.prefix.is_some() {
                            Kind::Prefix
                        } else {
                            Kind::Range
                        },
                    ),
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
            .flat_map(|l| {
                values
                    .iter()
                    .map(move |v| [l.as_slice(), std::slice::from_ref(v)].concat())
            })
            .filter(|vs| template.compose_prefix(vs).is_ok())
            .collect();
        consumed.push((t, Kind::Values));
        consumed.push((Target::Field(column.to_owned()), Kind::Range));
        consumed.push((Target::Field(column.to_owned()), Kind::Prefix));
        fixed += 1;
    }
    let keys = combos
        .iter()
        .filter_map(|vs| template.compose(vs).ok())
        .collect();
    Some((KeySpec::Exact(keys), fixed))
}

/// Narrows a spec by the atoms on a raw key column.
/// Turns the atoms into requests; returns the path and whether it is a contradiction.
pub(super) fn plan(
    def: Option<&TableDef>,
    atoms: &[&Atom],
    consumed_out: &mut BTreeSet<(String, u8)>,
) -> (AccessPath, bool) {
    let mut consumed = Vec::new();
    let everything = || KeySpec::Ranges(vec![(Bound::Unbounded, Bound::Unbounded)]);
    let empty_path = |kind| AccessPath {
        kind,
        requests: Vec::new(),
        filter: None,
        partition_bound: None,
    };
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
                    kind = if unique {
                        AccessKind::Points
                    } else {
                        AccessKind::RowRange
                    };
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
                        (
                            first.map_or(Bound::Unbounded, Bound::Included),
                            last.map_or(Bound::Unbounded, Bound::Included),
                        ),
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
            kind = if ranges
                .iter()
                .all(|r| r == &(Bound::Unbounded, Bound::Unbounded))
            {
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
                KeySpec::Exact(rks) if rks.is_empty() => {
                    return finish(AccessKind::Points, Vec::new(), consumed, consumed_out);
                }
                KeySpec::Ranges(rs) if rs.is_empty() => {
                    return finish(AccessKind::Points, Vec::new(), consumed, consumed_out);
                }
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

pub(super) fn is_partition_target(def: Option<&TableDef>, t: &Target) -> bool {
    match t {
        Target::PartitionKey => true,
        Target::RowKey => false,
        Target::Field(f) => def.is_some_and(|d| d.partition_key.columns().any(|c| c == f)),
    }
}

pub(super) fn finish(
    kind: AccessKind,
    requests: Vec<KeyRequest>,
    consumed: Vec<(Target, Kind)>,
    out: &mut BTreeSet<(String, u8)>,
) -> (AccessPath, bool) {
    let contradiction = requests.is_empty();
    out.extend(consumed.iter().map(|(t, k)| key_of(t, *k)));
    let kind = if contradiction {
        AccessKind::Points
    } else {
        kind
    };
    (
        AccessPath {
            kind,
            requests,
            filter: None,
            partition_bound: None,
        },
        contradiction,
    )
}

/// The RowKeys of base rows: the RowKey template's leading literal.
pub(super) fn base_rows<K>(def: Option<&TableDef>, make: impl Fn(String) -> K) -> KeyRange<K> {
    let r = match def.map(|d| d.row_key.prefix_range(&[], None)) {
        Some(Ok(KeyBounds::Range { start, end })) => (start, end),
        _ => (Bound::Unbounded, Bound::Unbounded),
    };
    key_range(r, make)
}

pub(super) fn cmp_start(a: &Bound<String>, b: &Bound<String>) -> std::cmp::Ordering {
    match (a, b) {
        (Bound::Unbounded, Bound::Unbounded) => std::cmp::Ordering::Equal,
        (Bound::Unbounded, _) => std::cmp::Ordering::Less,
        (_, Bound::Unbounded) => std::cmp::Ordering::Greater,
        (Bound::Included(x) | Bound::Excluded(x), Bound::Included(y) | Bound::Excluded(y)) => {
            cmp_utf16(x, y)
        }
    }
}
