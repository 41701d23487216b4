//! Tables without a mapping, read raw: PartitionKey, RowKey, Timestamp, `_etag`,
//! the properties found in a sample, and `_properties`, every other property
//! as one JSON object, so that nothing an entity holds is lost.
//!
//! The sample is the table's first page, then a few entities of each RowKey
//! kind (`BIB:`, `AGE:`: the text through a short prefix's `:`) of the first
//! partitions: each kind is found by a query that starts past the kind
//! before it, so a kind that is rare, or comes late in key order, is seen
//! whatever precedes it, at a request a kind (`engine::tables`).
//!
//! The rule for a property whose sampled values differ in type: Int32 with
//! Int64 reads as BIGINT; Int32 or Int64 with Double reads as DOUBLE; any other
//! mix reads as TEXT, each value in its text form (the OData literal: a number,
//! `true`/`false`, an RFC 3339 time, base64 bytes, a GUID). Properties the
//! sample did not meet are read in `_properties`.

use std::collections::BTreeMap;

use super::ColumnType;
use crate::storage::{EdmType, StoredEntity};

/// Entities sampled to infer a raw table's columns (one page).
pub const SAMPLE_SIZE: u32 = 1000;
/// Partitions whose RowKey kinds are sampled, the first in key order.
pub const KIND_PARTITIONS: usize = 4;
/// Kinds sampled per partition, and entities per kind.
pub const KINDS_PER_PARTITION: usize = 16;
pub const PER_KIND: u32 = 20;
/// The longest kind prefix: a longer text before a `:` is data, not a kind.
const KIND_PREFIX: usize = 16;

/// The RowKey kind of `row_key`: its text through the first `:`, where
/// that comes within a short prefix (`BIB:01234__John` is of kind `BIB:`);
/// `None` for a key of no kind.
pub fn kind_of(row_key: &str) -> Option<&str> {
    let end = row_key.find(':')?;
    (end > 0 && end < KIND_PREFIX).then(|| &row_key[..=end])
}

/// One inferred column.
#[derive(Debug, Clone, PartialEq)]
pub struct RawColumn {
    /// The property name.
    pub name: String,
    /// The type its values read as.
    pub column_type: ColumnType,
    /// Whether the sample held values of several types: values are then
    /// converted (to a wider number, or to text) rather than refused.
    pub mixed: bool,
}

fn column_type(t: EdmType) -> ColumnType {
    match t {
        EdmType::String => ColumnType::Text,
        EdmType::Binary => ColumnType::Bytea,
        EdmType::Boolean => ColumnType::Boolean,
        EdmType::DateTime => ColumnType::Timestamp,
        EdmType::Double => ColumnType::Double,
        EdmType::Guid => ColumnType::Uuid,
        EdmType::Int32 => ColumnType::Int,
        EdmType::Int64 => ColumnType::BigInt,
    }
}

/// The type a column of two sampled types reads as (the rule above).
fn merge(a: ColumnType, b: ColumnType) -> ColumnType {
    use ColumnType::*;
    match (a, b) {
        _ if a == b => a,
        (Int, BigInt) | (BigInt, Int) => BigInt,
        (Int | BigInt | Double, Int | BigInt | Double) => Double,
        _ => Text,
    }
}

/// The columns of a sample, sorted by name.
pub fn infer(sample: &[StoredEntity]) -> Vec<RawColumn> {
    let mut columns: BTreeMap<&str, RawColumn> = BTreeMap::new();
    for e in sample {
        for (name, value) in &e.entity.properties {
            let t = column_type(value.edm_type());
            columns
                .entry(name.as_str())
                .and_modify(|c| {
                    if c.column_type != t {
                        c.mixed = true;
                        c.column_type = merge(c.column_type, t);
                    }
                })
                .or_insert_with(|| RawColumn {
                    name: name.clone(),
                    column_type: t,
                    mixed: false,
                });
        }
    }
    columns.into_values().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kind_is_a_short_prefix_through_its_colon() {
        assert_eq!(kind_of("BIB:01234__John__M__55"), Some("BIB:"));
        assert_eq!(kind_of("AGE:055__1234"), Some("AGE:"));
        assert_eq!(kind_of("00042"), None);
        assert_eq!(kind_of(":x"), None);
        assert_eq!(kind_of("a-long-free-text-key:with a colon"), None);
    }
    use crate::storage::{EdmValue, Entity, PartitionKey, RowKey};

    fn entity(props: &[(&str, EdmValue)]) -> StoredEntity {
        let mut e = Entity::new(PartitionKey::new("p").unwrap(), RowKey::new("r").unwrap());
        for (n, v) in props {
            e = e.with(*n, v.clone());
        }
        let now = chrono::Utc::now();
        StoredEntity {
            entity: e,
            timestamp: now,
            etag: crate::storage::ETag::for_timestamp(&now),
        }
    }

    #[test]
    fn conflicting_types_follow_the_rule() {
        let sample = [
            entity(&[
                ("a", EdmValue::Int32(1)),
                ("b", EdmValue::Int32(1)),
                ("c", EdmValue::Int32(1)),
            ]),
            entity(&[
                ("a", EdmValue::Int64(2)),
                ("b", EdmValue::Double(0.5)),
                ("c", EdmValue::Boolean(true)),
            ]),
            entity(&[("d", EdmValue::String("x".into()))]),
        ];
        let cols = infer(&sample);
        let got: Vec<(&str, ColumnType, bool)> = cols
            .iter()
            .map(|c| (c.name.as_str(), c.column_type, c.mixed))
            .collect();
        assert_eq!(
            got,
            [
                ("a", ColumnType::BigInt, true),
                ("b", ColumnType::Double, true),
                ("c", ColumnType::Text, true),
                ("d", ColumnType::Text, false)
            ]
        );
    }
}
