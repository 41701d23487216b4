//! Index rows that do not carry what a query needs lead back to their base
//! rows: the primary key is decomposed from the index row's keys (a
//! definition whose index lacks a primary-key field is refused), and the base
//! row is read by a point get when the index fixes its whole RowKey, or by a
//! one-entity prefix query when it fixes only the primary key's part. Pure:
//! the scan runs the requests.

use std::collections::HashMap;

use super::access::KeyRequest;
use crate::catalog::{IndexDef, TableDef};
use crate::exec::ExecError;
use crate::keys::{KeyBounds, KeyValue};
use crate::storage::{EdmValue, KeyKind, KeyRange, RowKey, StoredEntity};

/// The key fields of `entity` by column: the PartitionKey's, then those
/// of its RowKey as `rows` (the base template or an index's) writes it.
pub(crate) fn key_fields<'d>(
    def: &'d TableDef,
    rows: &'d crate::keys::KeyTemplate,
    entity: &StoredEntity,
) -> Result<Vec<(&'d str, KeyValue)>, ExecError> {
    let mismatch = |kind, err: crate::keys::KeyError| ExecError::KeyMismatch {
        table: def.name.clone(),
        kind,
        partition_key: entity.partition_key().as_str().to_owned(),
        row_key: entity.row_key().as_str().to_owned(),
        reason: err.to_string(),
    };
    let pk = def
        .partition_key
        .decompose(entity.partition_key().as_str())
        .map_err(|e| mismatch(KeyKind::PartitionKey, e))?;
    let rk = rows
        .decompose(entity.row_key().as_str())
        .map_err(|e| mismatch(KeyKind::RowKey, e))?;
    Ok(def
        .partition_key
        .columns()
        .zip(pk)
        .chain(rows.columns().zip(rk))
        .collect())
}

/// The key fields an index row names, by column, typed as their columns.
fn index_values(
    def: &TableDef,
    ix: &IndexDef,
    entity: &StoredEntity,
) -> Result<HashMap<String, KeyValue>, ExecError> {
    key_fields(def, &ix.row_key, entity)?
        .into_iter()
        .map(|(c, v)| {
            let v = typed(def, c, v).map_err(|e| ExecError::KeyMismatch {
                table: def.name.clone(),
                kind: KeyKind::RowKey,
                partition_key: entity.partition_key().as_str().to_owned(),
                row_key: entity.row_key().as_str().to_owned(),
                reason: e.to_string(),
            })?;
            Ok((c.to_owned(), v))
        })
        .collect()
}

/// A field's value as its column's type holds it: an integer column in a
/// free-text field (`{bib}`) reads back as text, and another template may
/// write it as a fixed-width integer (`{bib:05}`).
fn typed(def: &TableDef, column: &str, v: KeyValue) -> Result<KeyValue, crate::keys::KeyError> {
    let integer = def.column(column).is_some_and(|c| {
        matches!(
            c.column_type,
            crate::catalog::ColumnType::Int | crate::catalog::ColumnType::BigInt
        )
    });
    match v {
        KeyValue::Text(s) if integer => match s.parse::<i64>() {
            Ok(i) if i.to_string() == s => Ok(KeyValue::Int(i)),
            _ => Err(crate::keys::KeyError::Mismatch {
                column: column.to_owned(),
                text: s,
            }),
        },
        v => Ok(v),
    }
}

/// The request that reads the base row of index row `entity`.
pub fn base_request(
    def: &TableDef,
    ix: &IndexDef,
    entity: &StoredEntity,
) -> Result<KeyRequest, ExecError> {
    let values = index_values(def, ix, entity)?;
    let leading: Vec<KeyValue> = def
        .row_key
        .columns()
        .map_while(|c| values.get(c).cloned())
        .collect();
    let pk = entity.partition_key().clone();
    if leading.len() == def.row_key.columns().count() {
        let rk = def.row_key.compose(&leading)?;
        return Ok(KeyRequest::Get(pk, RowKey::from_stored(rk)));
    }
    // The primary key's RowKey fields lead the template and are all in
    // the index (`TableDef::validate`), so this prefix names one row.
    let rows = match def.row_key.prefix_range(&leading, None)? {
        KeyBounds::Range { start, end } => KeyRange {
            start: start.map(RowKey::from_stored),
            end: end.map(RowKey::from_stored),
        },
        KeyBounds::All => KeyRange::all(),
        KeyBounds::Empty => KeyRange {
            start: std::ops::Bound::Excluded(RowKey::from_stored(String::new())),
            end: std::ops::Bound::Excluded(RowKey::from_stored(String::new())),
        },
    };
    Ok(KeyRequest::Scan {
        partitions: KeyRange::exactly(pk),
        rows,
        at_most_one: true,
    })
}

/// Whether `base` holds the values index row `index_row` was written
/// from: a stale index row (its base row changed since) does not stand
/// for the base row, so that rows come back in the index's order and
/// only where the index's key fields hold.
pub fn agrees(
    def: &TableDef,
    ix: &IndexDef,
    index_row: &StoredEntity,
    base: &StoredEntity,
) -> bool {
    let Ok(wanted) = index_values(def, ix, index_row) else {
        return false;
    };
    let Ok(base_keys) = key_fields(def, &def.row_key, base) else {
        return false;
    };
    let base_keys: HashMap<&str, KeyValue> = base_keys.into_iter().collect();
    ix.row_key.columns().all(|c| {
        let have = match base_keys.get(c) {
            Some(v) => Some(v.to_string()),
            None => base.get(c).and_then(text_of),
        };
        have.is_some_and(|h| wanted.get(c).is_some_and(|w| w.to_string() == h))
    })
}

/// A property's value as a key field writes it (integers and text).
fn text_of(v: &EdmValue) -> Option<String> {
    match v {
        EdmValue::String(s) => Some(s.clone()),
        EdmValue::Int32(i) => Some(i.to_string()),
        EdmValue::Int64(i) => Some(i.to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::ddl;
    use crate::exec::write::encode;
    use crate::storage::ETag;

    fn def(index: &str) -> TableDef {
        ddl::parse(&format!(
            "CREATE TABLE runs (e TEXT, bib INT NOT NULL, name TEXT NOT NULL, age INT NOT NULL, PRIMARY KEY (e, bib)) WITH (
               partition_key = '{{e}}', row_key = 'BIB:{{bib:05}}__{{name}}',
               index_age = '{index}', covering_age = false)"
        ))
        .expect("definition")
    }

    fn stored(e: crate::storage::Entity) -> StoredEntity {
        StoredEntity {
            entity: e,
            etag: ETag::from_wire("W/\"1\""),
            timestamp: chrono::Utc::now(),
        }
    }

    fn row(def: &TableDef, age: i32) -> encode::RowEntities {
        let values = [
            Some(EdmValue::String("Berlin".into())),
            Some(EdmValue::Int32(42)),
            Some(EdmValue::String("Ann".into())),
            Some(EdmValue::Int32(age)),
        ];
        encode::entities(def, &values).expect("entities")
    }

    #[test]
    fn an_index_row_leads_to_its_base_row() -> Result<(), ExecError> {
        // The index fixes the whole base RowKey: a point get.
        let d = def("AGE:{age:03}__{bib}__{name}");
        let r = row(&d, 55);
        let index_row = stored(r.index[0].clone());
        assert!(index_row.entity.properties.is_empty(), "keys only");
        assert_eq!(
            base_request(&d, &d.indexes[0], &index_row)?.to_string(),
            r#"pk="Berlin" rk="BIB:00042__Ann""#
        );
        // Only the primary key: a one-entity prefix query.
        let d = def("AGE:{age:03}__{bib}");
        let r = row(&d, 55);
        let index_row = stored(r.index[0].clone());
        assert_eq!(
            base_request(&d, &d.indexes[0], &index_row)?.to_string(),
            r#"pk="Berlin" rk=["BIB:00042__", "BIB:00042_`")"#
        );
        // A stale index row does not stand for the base row.
        assert!(agrees(
            &d,
            &d.indexes[0],
            &index_row,
            &stored(r.base.clone())
        ));
        let moved = row(&d, 56);
        assert!(!agrees(&d, &d.indexes[0], &index_row, &stored(moved.base)));
        Ok(())
    }
}
