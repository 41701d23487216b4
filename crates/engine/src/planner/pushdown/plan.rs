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
                let ranged = c.lo.is_some() || c.hi.is_some();
                let bounds = if ranged && matches!(format, FieldFormat::Typed(_)) {
                    template
                        .typed_range(leading, bound_ref(&c.lo), bound_ref(&c.hi))
                        .ok()
                        .flatten()
                } else if format.order().is_some() && ranged {
                    let int = |b: Option<Bound<KeyValue>>| match b {
                        Some(Bound::Included(KeyValue::Int(i))) => Bound::Included(i),
                        Some(Bound::Excluded(KeyValue::Int(i))) => Bound::Excluded(i),
                        _ => Bound::Unbounded,
                    };
                    template
                        .int_range(leading, int(c.lo.clone()), int(c.hi.clone()))
                        .ok()
                        .flatten()
                } else if is_text(format) && c.prefix.is_some() {
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

/// How well a row template's leading fields are fixed by the atoms: the
/// fields fixed by value sets, then whether the next one is bounded by a
/// range or a prefix. More is better; the pushdown prefers the base rows
/// on a tie.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub(super) struct Fit {
    pub(super) fixed: usize,
    pub(super) bounded: bool,
}

/// One planned path over the base rows or one index's rows.
#[derive(Debug)]
pub(super) struct Planned {
    pub(super) path: AccessPath,
    /// No row can match.
    pub(super) contradiction: bool,
    /// What the path answers: each target with the kinds of constraint on it.
    pub(super) consumed: BTreeSet<(Target, Kind)>,
    pub(super) fit: Fit,
}

/// Turns the atoms into requests over the base rows (`index` `None`) or the
/// rows of index `index` of the definition.
pub(super) fn plan(def: Option<&TableDef>, index: Option<usize>, atoms: &[&Atom]) -> Planned {
    let mut consumed = Vec::new();
    let everything = || KeySpec::Ranges(vec![(Bound::Unbounded, Bound::Unbounded)]);
    let read = index.and_then(|i| {
        let ix = def?.indexes.get(i)?;
        Some((
            IndexRead {
                position: i,
                name: ix.name.clone(),
                global: false,
            },
            &ix.row_key,
        ))
    });
    let row_template = match (&read, def) {
        (Some((_, t)), _) => Some(*t),
        (None, Some(d)) => Some(&d.row_key),
        (None, None) => None,
    };
    let index = read.map(|(r, _)| r);
    // No rows: a path over base rows, whatever index was asked.
    let contradiction = || Planned {
        path: AccessPath::new(Access::Points, Vec::new()),
        contradiction: true,
        consumed: BTreeSet::new(),
        fit: Fit::default(),
    };
    // Partitions. A `{#N}` PartitionKey is the bucket of the base row's
    // RowKey: every bucket, paired below with the RowKeys that fall in it.
    let buckets = def.and_then(|d| d.partition_key.row_buckets());
    let (pk_spec, _) = match def {
        Some(d) if buckets.is_some() => (KeySpec::Exact(d.partition_key.buckets()), 0),
        Some(d) => match template_spec(&d.partition_key, atoms, &mut consumed) {
            Some(s) => s,
            None => return contradiction(),
        },
        None => (everything(), 0),
    };
    let pk_spec = narrow_by_key_column(pk_spec, atoms, Target::PartitionKey, &mut consumed);
    // Rows.
    let pk_consumed = consumed.len();
    let (rk_spec, rk_fixed) = match row_template {
        Some(t) => match template_spec(t, atoms, &mut consumed) {
            Some(s) => s,
            None => return contradiction(),
        },
        None => (everything(), 0),
    };
    let bounded = row_template
        .and_then(|t| t.field(rk_fixed))
        .is_some_and(|(column, _)| {
            consumed[pk_consumed..].iter().any(|(t, k)| {
                *t == Target::Field(column.to_owned()) && matches!(k, Kind::Range | Kind::Prefix)
            })
        });
    let mut fit = Fit {
        fixed: rk_fixed,
        bounded,
    };
    // The RowKey column is the base row's, whichever rows are read.
    let rk_spec = match index {
        None => narrow_by_key_column(rk_spec, atoms, Target::RowKey, &mut consumed),
        Some(_) => rk_spec,
    };
    let unique = index.is_none()
        && def.is_some_and(|d| {
            let pk_fields = d.partition_key.columns().count();
            rk_fixed + pk_fields >= d.primary_key.len()
        });
    let all_rows = || rows_of(row_template, |s| s);
    // Every bucket of a `{#N}` table with no RowKey narrowing is the whole
    // table: read as one, as a full scan of any other table is.
    let pk_spec = match (&pk_spec, buckets, &rk_spec) {
        (KeySpec::Exact(pks), Some(n), KeySpec::Ranges(rs))
            if index.is_none() && pks.len() == usize::from(n) && rs.len() == 1 && {
                let all = all_rows();
                rs[0] == (Bound::Unbounded, Bound::Unbounded) || rs[0] == (all.start, all.end)
            } =>
        {
            everything()
        }
        _ => pk_spec,
    };
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
            // Base rows' RowKeys name their bucket: one request each.
            let paired = buckets.filter(|_| index.is_none());
            let request_count = match &rk_spec {
                KeySpec::Exact(rks) if paired.is_some() => rks.len(),
                KeySpec::Exact(rks) => pks.len().saturating_mul(rks.len()),
                KeySpec::Ranges(rs) => pks.len().saturating_mul(rs.len()),
            };
            if request_count > MAX_REQUESTS {
                // Too many requests: one scan of the partitions' span instead.
                let (first, last) = (pks.first().cloned(), pks.last().cloned());
                consumed.clear();
                let rows = all_rows();
                requests = vec![KeyRequest::Scan {
                    partitions: key_range(
                        (
                            first.map_or(Bound::Unbounded, Bound::Included),
                            last.map_or(Bound::Unbounded, Bound::Included),
                        ),
                        pk,
                    ),
                    rows: key_range((rows.start, rows.end), rk),
                    at_most_one: false,
                }];
                return finish(
                    Access::PartitionRange,
                    requests,
                    consumed,
                    index,
                    Fit::default(),
                );
            }
            match rk_spec {
                KeySpec::Exact(mut rks) => {
                    rks.retain(|k| validate_key(KeyKind::RowKey, k).is_ok());
                    rks.sort_by(|a, b| cmp_utf16(a, b));
                    rks.dedup();
                    kind = Access::Points;
                    for p in &pks {
                        for r in &rks {
                            if paired.is_some_and(|n| crate::keys::bucket_of(r, n) != *p) {
                                continue;
                            }
                            requests.push(KeyRequest::Get(pk(p.clone()), rk(r.clone())));
                        }
                    }
                }
                KeySpec::Ranges(mut ranges) => {
                    ranges.sort_by(|a, b| cmp_start(&a.0, &b.0));
                    kind = if unique {
                        Access::Points
                    } else {
                        Access::RowRange
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
        }
        KeySpec::Ranges(mut ranges) => {
            ranges.sort_by(|a, b| cmp_start(&a.0, &b.0));
            kind = if ranges
                .iter()
                .all(|r| r == &(Bound::Unbounded, Bound::Unbounded))
            {
                Access::FullScan
            } else {
                Access::PartitionRange
            };
            // One RowKey range applies within every partition; several do not fit one query.
            let rows = match rk_spec {
                KeySpec::Exact(rks) if rks.len() == 1 => {
                    let k = rks[0].clone();
                    (Bound::Included(k.clone()), Bound::Included(k))
                }
                KeySpec::Ranges(rs) if rs.len() == 1 => rs[0].clone(),
                KeySpec::Exact(rks) if rks.is_empty() => {
                    return finish(Access::Points, Vec::new(), consumed, index, fit);
                }
                KeySpec::Ranges(rs) if rs.is_empty() => {
                    return finish(Access::Points, Vec::new(), consumed, index, fit);
                }
                _ => {
                    // The row template's fields narrow nothing after all.
                    consumed.retain(|(t, _)| is_partition_target(def, t));
                    fit = Fit::default();
                    let r = all_rows();
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
    finish(kind, requests, consumed, index, fit)
}

fn bound_ref(b: &Option<Bound<KeyValue>>) -> Bound<&KeyValue> {
    match b {
        Some(Bound::Included(v)) => Bound::Included(v),
        Some(Bound::Excluded(v)) => Bound::Excluded(v),
        _ => Bound::Unbounded,
    }
}

/// Whether a field holds text a `LIKE 'p%'` prefix narrows.
fn is_text(format: FieldFormat) -> bool {
    match format {
        FieldFormat::Text => true,
        FieldFormat::Typed(t) => t.kind == crate::keys::TypedKind::Text,
        _ => false,
    }
}

/// Turns the atoms into requests over global index `gi`'s entities:
/// values of the PartitionKey's fields fix partitions (one request each),
/// and within a fixed partition the RowKey's leading fields narrow as a
/// local index's do; a range or prefix on the PartitionKey's field reads a
/// range of partitions. `None` where the atoms fix nothing of it.
pub(super) fn plan_global(def: &TableDef, gi: usize, atoms: &[&Atom]) -> Option<Planned> {
    let g = def.global_indexes.get(gi)?;
    // A unique index's entity is keyed by its unique columns alone where
    // they are all set: the fields after them (the primary key's) narrow
    // nothing, and a condition on them stays DataFusion's.
    let unique: Vec<&str> = match g.unique {
        Some(n) => g.key_columns().take(n).collect(),
        None => g.key_columns().collect(),
    };
    let atoms: Vec<&Atom> = atoms
        .iter()
        .copied()
        .filter(|a| matches!(&a.target, Target::Field(f) if unique.contains(&f.as_str())))
        .collect();
    let atoms = atoms.as_slice();
    // IS NOT NULL alone bounds nothing worth a lookup per row.
    let first = g.partition_key.columns().next()?;
    let bounded = atoms.iter().any(|a| {
        a.target == Target::Field(first.to_owned())
            && !matches!(&a.domain, Domain::Range(Bound::Unbounded, Bound::Unbounded))
    });
    if !bounded {
        return None;
    }
    let read = IndexRead {
        position: gi,
        name: g.name.clone(),
        global: true,
    };
    let mut consumed = Vec::new();
    let (pk_spec, pk_fixed) = template_spec(&g.partition_key, atoms, &mut consumed)?;
    let pk = |s: String| PartitionKey::from_stored(s);
    let rk = |s: String| RowKey::from_stored(s);
    let mut requests = Vec::new();
    let mut fit = Fit::default();
    match pk_spec {
        KeySpec::Exact(mut pks) if pk_fixed > 0 => {
            pks.retain(|k| validate_key(KeyKind::PartitionKey, k).is_ok());
            pks.sort_by(|a, b| cmp_utf16(a, b));
            pks.dedup();
            let (rk_spec, rk_fixed) = template_spec(&g.row_key, atoms, &mut consumed)?;
            let bounded = g.row_key.field(rk_fixed).is_some_and(|(column, _)| {
                consumed.iter().any(|(t, k)| {
                    *t == Target::Field(column.to_owned())
                        && matches!(k, Kind::Range | Kind::Prefix)
                })
            });
            fit = Fit {
                fixed: pk_fixed + rk_fixed,
                bounded,
            };
            for p in &pks {
                match &rk_spec {
                    KeySpec::Exact(rks) => {
                        for r in rks
                            .iter()
                            .filter(|k| validate_key(KeyKind::RowKey, k).is_ok())
                        {
                            requests.push(KeyRequest::Get(pk(p.clone()), rk(r.clone())));
                        }
                    }
                    KeySpec::Ranges(rs) => {
                        for r in rs {
                            requests.push(KeyRequest::Scan {
                                partitions: KeyRange::exactly(pk(p.clone())),
                                rows: key_range(r.clone(), rk),
                                at_most_one: false,
                            });
                        }
                    }
                }
            }
        }
        KeySpec::Ranges(ranges) => {
            // Only the PartitionKey's field bounds the read.
            fit.bounded = !consumed.is_empty();
            if !fit.bounded {
                return None;
            }
            for r in ranges {
                requests.push(KeyRequest::Scan {
                    partitions: key_range(r, pk),
                    rows: KeyRange::all(),
                    at_most_one: false,
                });
            }
        }
        KeySpec::Exact(_) => return None,
    }
    if requests.len() > MAX_REQUESTS {
        return None;
    }
    Some(finish(Access::Points, requests, consumed, Some(read), fit))
}

pub(super) fn is_partition_target(def: Option<&TableDef>, t: &Target) -> bool {
    match t {
        Target::PartitionKey => true,
        Target::RowKey => false,
        Target::Field(f) => def.is_some_and(|d| d.partition_key.columns().any(|c| c == f)),
    }
}

pub(super) fn finish(
    kind: Access,
    requests: Vec<KeyRequest>,
    consumed: Vec<(Target, Kind)>,
    index: Option<IndexRead>,
    fit: Fit,
) -> Planned {
    let contradiction = requests.is_empty();
    let access = match (contradiction, index) {
        (true, _) => Access::Points,
        (false, None) => kind,
        // Over index rows, values fix key prefixes, not rows; with none
        // fixed, the index is read whole (for its order).
        (false, Some(i)) if fit.fixed > 0 && !fit.bounded => Access::IndexPoints(i),
        (false, Some(i)) => Access::IndexRange(i),
    };
    Planned {
        path: AccessPath::new(access, requests),
        contradiction,
        consumed: consumed.into_iter().collect(),
        fit,
    }
}

/// The RowKeys a row template writes: its leading literal's range.
pub(super) fn rows_of<K>(
    template: Option<&KeyTemplate>,
    make: impl Fn(String) -> K,
) -> KeyRange<K> {
    let r = match template.map(|t| t.prefix_range(&[], None)) {
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
