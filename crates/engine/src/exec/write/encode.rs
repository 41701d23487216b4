//! Rows into entities, the write side of `read::decode`: a SQL row of a
//! mapped table becomes its base entity and one entity per index row, all
//! in the row's partition. Every non-null column is stored as a property of
//! each, the way applications write denormalized rows, so that an index row
//! answers a query without a second read. Pure: no I/O.

use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, BinaryArray, BooleanArray, Float64Array, Int32Array, Int64Array,
    StringArray,
};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::TimestampMicrosecondType;
use datafusion::arrow::record_batch::RecordBatch;

use crate::catalog::{ColumnType, TableDef};
use crate::exec::ExecError;
use crate::exec::read::decode::Layout;
use crate::keys::{KeyTemplate, KeyValue};
use crate::storage::{EdmValue, Entity, PartitionKey, RowKey, StorageError};

/// The entities one SQL row is stored as.
#[derive(Debug, Clone, PartialEq)]
pub struct RowEntities {
    /// The base row.
    pub base: Entity,
    /// One entity per index of the table, in catalog order.
    pub index: Vec<Entity>,
}

/// The columns of a batch in the table's layout, cast to the column types, so
/// that cells can be read by the column's type alone.
#[derive(Clone)]
pub struct Columns {
    arrays: Vec<ArrayRef>,
}

impl Columns {
    /// Casts each column of `batch` (in the layout's order) to its type.
    pub fn new(layout: &Layout, batch: &RecordBatch) -> Result<Self, ExecError> {
        let arrays = layout
            .columns
            .iter()
            .zip(batch.columns())
            .map(|((_, t), a)| {
                let want = t.arrow_type();
                if a.data_type() == &want {
                    Ok(a.clone())
                } else {
                    Ok(cast(a, &want)?)
                }
            })
            .collect::<Result<Vec<_>, ExecError>>()?;
        Ok(Self { arrays })
    }

    /// Replaces column `i` (an UPDATE's new values).
    pub fn set(&mut self, i: usize, array: ArrayRef, t: ColumnType) -> Result<(), ExecError> {
        let want = t.arrow_type();
        let array = if array.data_type() == &want {
            array
        } else {
            cast(&array, &want)?
        };
        if let Some(slot) = self.arrays.get_mut(i) {
            *slot = array;
        }
        Ok(())
    }

    /// The text in column `i` at `row` (system columns: keys, ETag).
    /// Row `row` of every column, as one-row arrays.
    pub fn row(&self, row: usize) -> Vec<ArrayRef> {
        self.arrays.iter().map(|a| a.slice(row, 1)).collect()
    }

    /// The time in column `i` at `row` (the Timestamp).
    pub fn timestamp(&self, i: usize, row: usize) -> Option<chrono::DateTime<chrono::Utc>> {
        let a = self
            .arrays
            .get(i)?
            .as_primitive_opt::<datafusion::arrow::datatypes::TimestampMicrosecondType>()?;
        (!a.is_null(row)).then(|| chrono::DateTime::from_timestamp_micros(a.value(row)))?
    }

    pub fn text(&self, i: usize, row: usize) -> Option<&str> {
        let a = self.arrays.get(i)?.as_string_opt::<i32>()?;
        (!a.is_null(row)).then(|| a.value(row))
    }

    /// The values of a row's mapped columns, in the layout's (and the
    /// definition's) order.
    pub fn values(&self, layout: &Layout, row: usize) -> Result<Vec<Option<EdmValue>>, ExecError> {
        let mut out = Vec::with_capacity(layout.columns.len());
        for (i, (source, t)) in layout.columns.iter().enumerate() {
            if let (Some(array), true) = (self.arrays.get(i), source.is_column()) {
                out.push(cell(array, *t, row, || layout.schema.field(i).name())?);
            }
        }
        Ok(out)
    }

    /// Checks that a row leaves the system columns (keys, Timestamp, ETag)
    /// NULL: an INSERT does not set them, the store and the templates do.
    pub fn refuse_system(&self, layout: &Layout, row: usize) -> Result<(), ExecError> {
        for (i, (source, _)) in layout.columns.iter().enumerate() {
            if !source.is_column() && self.arrays.get(i).is_some_and(|a| !a.is_null(row)) {
                return Err(ExecError::SystemColumn {
                    column: layout.schema.field(i).name().clone(),
                });
            }
        }
        Ok(())
    }
}

/// The value at `row` of an array already cast to `t`'s Arrow type.
fn cell<'a>(
    array: &ArrayRef,
    t: ColumnType,
    row: usize,
    column: impl Fn() -> &'a String,
) -> Result<Option<EdmValue>, ExecError> {
    if array.is_null(row) {
        return Ok(None);
    }
    let wrong = || ExecError::BadValue {
        column: column().clone(),
        reason: format!("expected {t}, got Arrow {}", array.data_type()),
    };
    let any = array.as_any();
    Ok(Some(match t {
        ColumnType::Int => EdmValue::Int32(
            any.downcast_ref::<Int32Array>()
                .ok_or_else(wrong)?
                .value(row),
        ),
        ColumnType::BigInt => EdmValue::Int64(
            any.downcast_ref::<Int64Array>()
                .ok_or_else(wrong)?
                .value(row),
        ),
        ColumnType::Double => EdmValue::Double(
            any.downcast_ref::<Float64Array>()
                .ok_or_else(wrong)?
                .value(row),
        ),
        ColumnType::Text => EdmValue::String(
            any.downcast_ref::<StringArray>()
                .ok_or_else(wrong)?
                .value(row)
                .to_owned(),
        ),
        ColumnType::Uuid => {
            let text = any
                .downcast_ref::<StringArray>()
                .ok_or_else(wrong)?
                .value(row);
            EdmValue::Guid(text.parse().map_err(|_| ExecError::BadValue {
                column: column().clone(),
                reason: format!("{text:?} is not a UUID"),
            })?)
        }
        ColumnType::Boolean => EdmValue::Boolean(
            any.downcast_ref::<BooleanArray>()
                .ok_or_else(wrong)?
                .value(row),
        ),
        ColumnType::Timestamp => {
            let micros = array
                .as_primitive_opt::<TimestampMicrosecondType>()
                .ok_or_else(wrong)?
                .value(row);
            EdmValue::DateTime(chrono::DateTime::from_timestamp_micros(micros).ok_or_else(
                || ExecError::BadValue {
                    column: column().clone(),
                    reason: format!("{micros} µs is outside the dates a timestamp holds"),
                },
            )?)
        }
        ColumnType::Numeric { scale, .. } => {
            let v = array
                .as_primitive_opt::<datafusion::arrow::datatypes::Decimal128Type>()
                .ok_or_else(wrong)?
                .value(row);
            EdmValue::String(crate::catalog::decimal_text(v, scale))
        }
        ColumnType::Date => {
            let days = array
                .as_primitive_opt::<datafusion::arrow::datatypes::Date32Type>()
                .ok_or_else(wrong)?
                .value(row);
            EdmValue::DateTime(midnight(days).ok_or_else(|| ExecError::BadValue {
                column: column().clone(),
                reason: format!("{days} days is outside the dates a key holds"),
            })?)
        }
        ColumnType::Bytea => EdmValue::Binary(
            any.downcast_ref::<BinaryArray>()
                .ok_or_else(wrong)?
                .value(row)
                .to_vec(),
        ),
    }))
}

/// Midnight UTC of the date `days` after 1970-01-01: how a DATE is stored
/// (Edm.DateTime) and keyed (its microseconds).
pub(crate) fn midnight(days: i32) -> Option<chrono::DateTime<chrono::Utc>> {
    chrono::DateTime::from_timestamp(i64::from(days).checked_mul(86_400)?, 0)
}

/// A key field's value from a property value. A Guid is its UUID, a
/// DateTime its microseconds (the precision columns hold).
pub(crate) fn key_value(v: &EdmValue) -> Option<KeyValue> {
    Some(match v {
        EdmValue::Int32(i) => KeyValue::Int(i64::from(*i)),
        EdmValue::Int64(i) => KeyValue::Int(*i),
        EdmValue::String(s) => KeyValue::Text(s.clone()),
        EdmValue::Double(d) => KeyValue::Double(crate::keys::KeyFloat::new(*d)),
        EdmValue::Boolean(b) => KeyValue::Bool(*b),
        EdmValue::DateTime(t) => KeyValue::Timestamp(t.timestamp_micros()),
        EdmValue::Guid(g) => KeyValue::Uuid(g.as_u128()),
        EdmValue::Binary(_) => return None,
    })
}

/// A key field's value as a property of its column's type: the inverse of
/// [`key_value`] (an integer column in a free-text field is its canonical
/// decimal text); `None` for a value the column cannot hold, and for NULL.
pub(crate) fn key_cell(t: ColumnType, v: &KeyValue) -> Option<EdmValue> {
    let int = || match v {
        KeyValue::Int(i) => Some(*i),
        KeyValue::Text(s) => s.parse::<i64>().ok().filter(|i| i.to_string() == *s),
        _ => None,
    };
    match (t, v) {
        (ColumnType::Int, _) => int()
            .and_then(|i| i32::try_from(i).ok())
            .map(EdmValue::Int32),
        (ColumnType::BigInt, _) => int().map(EdmValue::Int64),
        (ColumnType::Text, KeyValue::Text(s)) => Some(EdmValue::String(s.clone())),
        (ColumnType::Double, KeyValue::Double(d)) => Some(EdmValue::Double(d.get())),
        (ColumnType::Boolean, KeyValue::Bool(b)) => Some(EdmValue::Boolean(*b)),
        (ColumnType::Timestamp | ColumnType::Date, KeyValue::Timestamp(t)) => {
            chrono::DateTime::from_timestamp_micros(*t).map(EdmValue::DateTime)
        }
        (ColumnType::Uuid, KeyValue::Uuid(u)) => Some(EdmValue::Guid(uuid::Uuid::from_u128(*u))),
        (ColumnType::Numeric { scale, .. }, KeyValue::Int(v)) => Some(EdmValue::String(
            crate::catalog::decimal_text(i128::from(*v), scale),
        )),
        _ => None,
    }
}

/// Writes a key from a row's values (`values` in `def.columns` order).
pub fn compose(
    def: &TableDef,
    template: &KeyTemplate,
    values: &[Option<EdmValue>],
) -> Result<String, ExecError> {
    let fields = key_values(def, template, values, usize::MAX)?;
    Ok(template.compose(&fields)?)
}

/// The key text a template's first `n` fields fix (with the literal after
/// the last of them), from a row's values.
pub fn compose_first(
    def: &TableDef,
    template: &KeyTemplate,
    values: &[Option<EdmValue>],
    n: usize,
) -> Result<String, ExecError> {
    let fields = key_values(def, template, values, n)?;
    Ok(template.compose_prefix(&fields)?.0)
}

/// The RowKey prefix a row's primary key fixes, when the primary key is
/// shorter than the RowKey (`BIB:00042__` of `BIB:{bib:05}__{name}__...`):
/// two entities under one prefix are the same SQL row. `None` when the
/// primary key is the whole RowKey.
pub fn primary_prefix(
    def: &TableDef,
    values: &[Option<EdmValue>],
) -> Result<Option<String>, ExecError> {
    let in_row_key = def
        .primary_key
        .len()
        .saturating_sub(def.partition_key.columns().count());
    if in_row_key >= def.row_key.columns().count() {
        return Ok(None);
    }
    let fields = key_values(def, &def.row_key, values, in_row_key)?;
    Ok(Some(def.row_key.compose_prefix(&fields)?.0))
}

/// The values of a template's first `n` fields.
fn key_values(
    def: &TableDef,
    template: &KeyTemplate,
    values: &[Option<EdmValue>],
    n: usize,
) -> Result<Vec<KeyValue>, ExecError> {
    (0..template.columns().count().min(n))
        .filter_map(|f| template.field(f))
        .map(|(name, format)| {
            let column = def.columns.iter().position(|c| c.name == name);
            let v = column.and_then(|i| values.get(i)?.as_ref());
            // A NUMERIC keys as its value in units of 10^-scale.
            if let (Some(ColumnType::Numeric { scale, .. }), Some(EdmValue::String(text))) =
                (column.map(|i| def.columns[i].column_type), v)
            {
                return crate::catalog::parse_decimal(text, scale)
                    .and_then(|v| i64::try_from(v).ok())
                    .map(KeyValue::Int)
                    .ok_or_else(|| ExecError::BadValue {
                        column: name.to_owned(),
                        reason: format!("{text} does not fit the key's integer"),
                    });
            }
            match v {
                Some(v) => key_value(v).ok_or_else(|| ExecError::BadValue {
                    column: name.to_owned(),
                    reason: "a BYTEA value cannot be written in a key".into(),
                }),
                // A typed field writes NULL as its token (index rows of
                // nullable columns); base keys never reach here with NULL.
                None if format.holds_null() => Ok(KeyValue::Null),
                None => Err(ExecError::NullValue {
                    table: def.name.clone(),
                    column: name.to_owned(),
                }),
            }
        })
        .collect()
}

/// The base row's PartitionKey and RowKey for a row's values (`values` in
/// `def.columns` order; only the key columns are read).
pub fn keys(
    def: &TableDef,
    values: &[Option<EdmValue>],
) -> Result<(PartitionKey, RowKey), ExecError> {
    let invalid = |e| ExecError::Storage(StorageError::Invalid(e));
    let rk = RowKey::new(compose(def, &def.row_key, values)?).map_err(invalid)?;
    let fields = key_values(def, &def.partition_key, values, usize::MAX)?;
    let pk = def.partition_key.compose_partition(&fields, rk.as_str())?;
    Ok((PartitionKey::new(pk).map_err(invalid)?, rk))
}

/// The entities of one row (`values` in `def.columns` order): NOT NULL and key
/// columns checked, keys composed, every entity within the store's limits.
pub fn entities(def: &TableDef, values: &[Option<EdmValue>]) -> Result<RowEntities, ExecError> {
    for (c, v) in def.columns.iter().zip(values) {
        if v.is_none() && (c.not_null || def.is_key_column(&c.name)) {
            return Err(ExecError::NullValue {
                table: def.name.clone(),
                column: c.name.clone(),
            });
        }
    }
    let invalid = |e| ExecError::Storage(StorageError::Invalid(e));
    let (pk, rk) = keys(def, values)?;
    if let Some(ix) = def.index_prefix_of(rk.as_str()) {
        return Err(ExecError::BadValue {
            column: def.row_key.columns().next().unwrap_or_default().to_owned(),
            reason: format!(
                "RowKey {:?} starts like the rows of index {} (a base row may not: scans would read it as an index row)",
                rk.as_str(),
                ix.name
            ),
        });
    }
    let mut base = Entity::new(pk, rk);
    for (c, v) in def.columns.iter().zip(values) {
        if let Some(v) = v {
            base.properties
                .insert(c.property_name().to_owned(), v.clone());
        }
    }
    base.validate().map_err(invalid)?;
    let index = def
        .indexes
        .iter()
        .map(|ix| {
            let mut e = base.clone();
            e.row_key = RowKey::new(compose(def, &ix.row_key, values)?).map_err(invalid)?;
            if !ix.covering {
                e.properties.clear();
            }
            e.validate().map_err(invalid)?;
            Ok(e)
        })
        .collect::<Result<Vec<_>, ExecError>>()?;
    Ok(RowEntities { base, index })
}

/// The mapped table's definition behind a layout, or the error for a raw one.
pub fn mapped(layout: &Layout) -> Result<&Arc<TableDef>, ExecError> {
    layout.def.as_ref().ok_or_else(|| ExecError::RawTable {
        table: layout.table.as_str().to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::ddl;

    fn def() -> TableDef {
        ddl::parse(include_str!("../../../../../catalog/registrations.sql"))
            .expect("catalog parses")
    }

    fn values(name: &str, club: Option<&str>) -> Vec<Option<EdmValue>> {
        vec![
            Some(EdmValue::String("Berlin".into())),
            Some(EdmValue::String("10K".into())),
            Some(EdmValue::Int32(42)),
            Some(EdmValue::String(name.into())),
            Some(EdmValue::String("F".into())),
            Some(EdmValue::Int32(31)),
            Some(EdmValue::Int64(3600)),
            None,
            club.map(|c| EdmValue::String(c.into())),
        ]
    }

    #[test]
    fn a_row_becomes_its_base_and_index_rows() {
        let row = entities(&def(), &values("Ana", Some("Tri"))).expect("row encodes");
        assert_eq!(row.base.partition_key.as_str(), "Berlin__10K");
        assert_eq!(row.base.row_key.as_str(), "BIB:00042__Ana__F__31");
        assert_eq!(row.index.len(), 1);
        assert_eq!(row.index[0].row_key.as_str(), "AGE:031__42__Ana__F");
        assert_eq!(row.index[0].properties, row.base.properties);
        // NULL columns are absent, not stored as empty values.
        assert!(!row.base.properties.contains_key("registered"));
        assert_eq!(row.base.properties.len(), 8);
        // The primary key (event, distance, bib) fixes a RowKey prefix.
        assert_eq!(
            primary_prefix(&def(), &values("Ana", None)).expect("prefix"),
            Some("BIB:00042__".to_owned())
        );
    }

    #[test]
    fn null_keys_and_values_that_do_not_fit_are_refused() {
        let mut v = values("Ana", None);
        v[2] = None;
        assert!(matches!(
            entities(&def(), &v),
            Err(ExecError::NullValue { column, .. }) if column == "bib"
        ));
        let mut v = values("Ana", None);
        v[2] = Some(EdmValue::Int32(123_456));
        assert!(matches!(entities(&def(), &v), Err(ExecError::Key(_))));
        let long = "x".repeat(40_000);
        assert!(matches!(
            entities(&def(), &values("Ana", Some(&long))),
            Err(ExecError::Storage(StorageError::Invalid(_)))
        ));
    }
}
