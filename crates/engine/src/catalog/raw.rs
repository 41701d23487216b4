//! Tables without a mapping, read raw: PartitionKey, RowKey, Timestamp, `_etag`
//! and the properties found in a sample of the table's first entities.
//!
//! The rule for a property whose sampled values differ in type: Int32 with
//! Int64 reads as BIGINT; Int32 or Int64 with Double reads as DOUBLE; any other
//! mix reads as TEXT, each value in its text form (the OData literal: a number,
//! `true`/`false`, an RFC 3339 time, base64 bytes, a GUID). Properties that
//! first appear after the sample are not columns.

use std::collections::BTreeMap;

use super::ColumnType;
use crate::storage::{EdmType, StoredEntity};

/// Entities sampled to infer a raw table's columns (one page).
pub const SAMPLE_SIZE: u32 = 1000;

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
