//! `$filter` text for a query: the key ranges, plus as much of the property
//! filter as the service may evaluate within its limit of 15 comparisons.
//!
//! The store applies the whole filter again to what comes back, so a part left
//! out here only costs transfer, never correctness. Only parts whose server
//! answer can be a superset of ours are sent: comparisons and their And/Or.
//! `not` is kept client-side, since a service that treats a comparison on a
//! missing property as unknown rather than false would drop entities under it.
//! On an emulator, comparisons with Double, DateTime, Binary and Int64 literals
//! are kept client-side too: Azurite compares DateTimes at millisecond
//! precision and Binary values wrongly, fails (500) on an Int64 literal against
//! an Int32 property, and misreads some Double literals.

use std::ops::Bound;

use super::super::filter::{Filter, Operand};
use super::super::key::{PartitionKey, RowKey};
use super::super::query::{KeyRange, Query};
use super::super::value::{EdmValue, format_datetime};

/// Most comparisons one `$filter` may hold.
pub const MAX_COMPARISONS: usize = 15;

/// What of a property filter goes to the service.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Push {
    /// Key ranges only.
    KeysOnly,
    /// Comparisons of every type (Azure).
    AllTypes,
    /// Comparisons with String, Boolean, Int32 and Guid literals (emulators).
    SafeTypes,
}

/// The `$filter` for a query, or `None` for every entity. `resume` starts the
/// query at a key (a continuation that carries no service token). Without
/// `timestamp`, conditions on `Timestamp` stay on the client (Cosmos DB's
/// Table API matches nothing for them).
pub fn query_filter(
    query: &Query,
    push: Push,
    resume: Option<(&PartitionKey, &RowKey)>,
    timestamp: bool,
) -> Option<String> {
    let mut terms = Vec::new();
    key_terms("PartitionKey", &query.partitions, &mut terms);
    key_terms("RowKey", &query.rows, &mut terms);
    let mut used = terms.len();
    if let Some((pk, rk)) = resume {
        let pk = string_literal(pk.as_str());
        terms.push(format!(
            "(PartitionKey gt {pk} or (PartitionKey eq {pk} and RowKey ge {}))",
            string_literal(rk.as_str())
        ));
        used += 3;
    }
    if push != Push::KeysOnly
        && let Some(filter) = &query.filter
    {
        for c in filter.conjuncts() {
            if !timestamp && c.reads_timestamp() {
                continue;
            }
            let n = comparisons(c);
            if used + n <= MAX_COMPARISONS
                && let Some(text) = pushable(c, push == Push::AllTypes)
            {
                terms.push(text);
                used += n;
            }
        }
    }
    (!terms.is_empty()).then(|| terms.join(" and "))
}

/// The service's order is ordinal over UTF-16 code units, as ours is, so a key
/// range is two string comparisons.
fn key_terms<K: AsRef<str> + Ord>(name: &str, range: &KeyRange<K>, out: &mut Vec<String>) {
    let lit = |k: &K| string_literal(k.as_ref());
    match (&range.start, &range.end) {
        (Bound::Included(a), Bound::Included(b)) if a == b => {
            out.push(format!("{name} eq {}", lit(a)));
            return;
        }
        _ => {}
    }
    match &range.start {
        Bound::Included(k) => out.push(format!("{name} ge {}", lit(k))),
        Bound::Excluded(k) => out.push(format!("{name} gt {}", lit(k))),
        Bound::Unbounded => {}
    }
    match &range.end {
        Bound::Included(k) => out.push(format!("{name} le {}", lit(k))),
        Bound::Excluded(k) => out.push(format!("{name} lt {}", lit(k))),
        Bound::Unbounded => {}
    }
}

/// Comparisons in a filter, as the service counts them.
pub fn comparisons(f: &Filter) -> usize {
    match f {
        Filter::Compare { .. } => 1,
        Filter::And(a, b) | Filter::Or(a, b) => comparisons(a) + comparisons(b),
        Filter::Not(a) => comparisons(a),
    }
}

/// The filter as OData text, if all of it may go to the service.
fn pushable(f: &Filter, all_types: bool) -> Option<String> {
    match f {
        Filter::Compare { operand, op, value } => {
            if !all_types
                && matches!(
                    value,
                    EdmValue::Double(_)
                        | EdmValue::DateTime(_)
                        | EdmValue::Binary(_)
                        | EdmValue::Int64(_)
                )
            {
                return None;
            }
            let name = match operand {
                Operand::PartitionKey => "PartitionKey",
                Operand::RowKey => "RowKey",
                Operand::Timestamp => "Timestamp",
                Operand::Property(p) => p,
            };
            Some(format!("{name} {} {}", op.odata_name(), literal(value)?))
        }
        Filter::And(a, b) => Some(format!(
            "({} and {})",
            pushable(a, all_types)?,
            pushable(b, all_types)?
        )),
        Filter::Or(a, b) => Some(format!(
            "({} or {})",
            pushable(a, all_types)?,
            pushable(b, all_types)?
        )),
        Filter::Not(_) => None,
    }
}

/// A string literal: single quotes, with `'` doubled.
pub fn string_literal(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// An OData literal of a value; `None` where OData has none (NaN, ±Infinity).
pub fn literal(value: &EdmValue) -> Option<String> {
    Some(match value {
        EdmValue::String(s) => string_literal(s),
        EdmValue::Boolean(b) => b.to_string(),
        EdmValue::Int32(i) => i.to_string(),
        EdmValue::Int64(i) => format!("{i}L"),
        EdmValue::Double(d) if d.is_finite() => {
            // A mantissa with a decimal point, so 2.0 stays a double: 2.0, 1.0e300.
            let text = format!("{d:?}");
            let (mantissa, exp) = text
                .split_once('e')
                .map_or((text.as_str(), None), |(m, e)| (m, Some(e)));
            let point = if mantissa.contains('.') { "" } else { ".0" };
            match exp {
                Some(e) => format!("{mantissa}{point}e{e}"),
                None => format!("{mantissa}{point}"),
            }
        }
        EdmValue::Double(_) => return None,
        EdmValue::DateTime(t) => format!("datetime'{}'", format_datetime(t)),
        EdmValue::Guid(g) => format!("guid'{g}'"),
        EdmValue::Binary(b) => {
            let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
            format!("X'{hex}'")
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::CmpOp;

    fn prop(n: &str, op: CmpOp, v: EdmValue) -> Filter {
        Filter::property(n, op, v)
    }

    #[test]
    fn key_ranges_become_comparisons() {
        let q = Query::partition(PartitionKey::new("it's").unwrap()).rows(KeyRange {
            start: Bound::Included(RowKey::new("a").unwrap()),
            end: Bound::Excluded(RowKey::new("b").unwrap()),
        });
        assert_eq!(
            query_filter(&q, Push::SafeTypes, None, true).unwrap(),
            "PartitionKey eq 'it''s' and RowKey ge 'a' and RowKey lt 'b'"
        );
        assert_eq!(
            query_filter(&Query::all(), Push::SafeTypes, None, true),
            None
        );
    }

    #[test]
    fn literals() {
        let t = crate::storage::value::from_ticks(1);
        let cases = [
            (EdmValue::Int64(-5), "-5L"),
            (EdmValue::Double(2.0), "2.0"),
            (EdmValue::Double(1e300), "1.0e300"),
            (EdmValue::Double(-2.5e-7), "-2.5e-7"),
            (
                EdmValue::DateTime(t),
                "datetime'1970-01-01T00:00:00.0000001Z'",
            ),
            (EdmValue::Binary(vec![0, 255]), "X'00ff'"),
            (EdmValue::Boolean(false), "false"),
        ];
        for (v, want) in cases {
            assert_eq!(literal(&v).unwrap(), want);
        }
        assert_eq!(literal(&EdmValue::Double(f64::NAN)), None);
    }

    #[test]
    fn at_most_fifteen_comparisons_are_pushed() {
        // 20 conjuncts: 15 fit (no key terms); the rest stay client-side.
        let f = (1..20).fold(prop("A0", CmpOp::Eq, EdmValue::Int32(0)), |f, i| {
            f.and(prop(&format!("A{i}"), CmpOp::Eq, EdmValue::Int32(i)))
        });
        let text =
            query_filter(&Query::all().filter(f.clone()), Push::SafeTypes, None, true).unwrap();
        assert_eq!(text.matches(" eq ").count(), 15);
        // An Or of 16 cannot be split: none of it goes, only the keys.
        let big_or = (1..16).fold(prop("B", CmpOp::Eq, EdmValue::Int32(0)), |f, i| {
            f.or(prop("B", CmpOp::Eq, EdmValue::Int32(i)))
        });
        let q = Query::partition(PartitionKey::new("p").unwrap()).filter(big_or);
        assert_eq!(
            query_filter(&q, Push::SafeTypes, None, true).unwrap(),
            "PartitionKey eq 'p'"
        );
        // Not stays client-side; its sibling conjunct goes.
        let f = prop("C", CmpOp::Eq, EdmValue::Int32(1)).negate().and(prop(
            "D",
            CmpOp::Gt,
            EdmValue::Int32(2),
        ));
        assert_eq!(
            query_filter(&Query::all().filter(f), Push::SafeTypes, None, true).unwrap(),
            "D gt 2"
        );
        let f = prop("D", CmpOp::Eq, EdmValue::Double(1.5));
        assert_eq!(
            query_filter(&Query::all().filter(f.clone()), Push::SafeTypes, None, true),
            None
        );
        assert_eq!(
            query_filter(&Query::all().filter(f.clone()), Push::AllTypes, None, true).unwrap(),
            "D eq 1.5"
        );
        assert_eq!(
            query_filter(&Query::all().filter(f), Push::KeysOnly, None, true),
            None
        );
    }
}
