//! Entities into Arrow: the layout of a table (where each SQL column comes
//! from: a key field, a property or a system column) and the decoding of a
//! page of entities into one record batch.

use std::sync::Arc;

use base64::Engine as _;
use datafusion::arrow::array::{
    ArrayRef, BinaryBuilder, BooleanBuilder, Float64Builder, Int32Builder, Int64Builder,
    StringBuilder, TimestampMicrosecondBuilder,
};
use datafusion::arrow::datatypes::{Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};

use super::ExecError;
use crate::catalog::raw::RawColumn;
use crate::catalog::{ColumnType, TableDef};
use crate::keys::KeyValue;
use crate::storage::value::format_datetime;
use crate::storage::{EdmValue, KeyKind, StoredEntity, TableName};

/// Where a column's values come from.
#[derive(Debug, Clone, PartialEq)]
pub enum Source {
    /// Field `n` of the PartitionKey template.
    PartitionField(usize),
    /// Field `n` of the base RowKey template.
    RowField(usize),
    /// A custom property; `lenient` converts values of other types (raw
    /// tables with mixed types) instead of refusing them.
    Property { name: String, lenient: bool },
    /// The PartitionKey.
    PartitionKey,
    /// The RowKey.
    RowKey,
    /// The Timestamp.
    Timestamp,
    /// The ETag.
    ETag,
}

impl Source {
    /// Whether the column is the row's own (a key field or a property), not
    /// one the store and the templates set (keys, Timestamp, ETag).
    pub fn is_column(&self) -> bool {
        matches!(
            self,
            Source::PartitionField(_) | Source::RowField(_) | Source::Property { .. }
        )
    }
}

/// A table's columns and where each comes from.
#[derive(Debug, Clone)]
pub struct Layout {
    /// The storage table.
    pub table: TableName,
    /// The mapping; `None` for a raw table.
    pub def: Option<Arc<TableDef>>,
    /// The SQL schema.
    pub schema: SchemaRef,
    /// Per schema field: its source and type.
    pub columns: Vec<(Source, ColumnType)>,
    /// The index whose rows this layout decodes (`RowField`s are its
    /// template's); `None` for base rows.
    pub index: Option<usize>,
}

fn system_columns() -> [(String, Source, ColumnType, bool); 4] {
    [
        (
            "PartitionKey".into(),
            Source::PartitionKey,
            ColumnType::Text,
            false,
        ),
        ("RowKey".into(), Source::RowKey, ColumnType::Text, false),
        (
            "Timestamp".into(),
            Source::Timestamp,
            ColumnType::Timestamp,
            false,
        ),
        ("_etag".into(), Source::ETag, ColumnType::Text, false),
    ]
}

impl Layout {
    fn build(
        table: TableName,
        def: Option<Arc<TableDef>>,
        cols: Vec<(String, Source, ColumnType, bool)>,
    ) -> Self {
        let fields: Vec<Field> = cols
            .iter()
            .map(|(name, _, t, nullable)| Field::new(name, t.arrow_type(), *nullable))
            .collect();
        Self {
            table,
            def,
            schema: Arc::new(Schema::new(fields)),
            columns: cols.into_iter().map(|(_, s, t, _)| (s, t)).collect(),
            index: None,
        }
    }

    /// The layout of index `position`'s rows, with the same schema: key
    /// fields from the PartitionKey and the index's RowKey, the other
    /// columns from properties. `None` for a raw table or no such index.
    pub fn over_index(&self, position: usize) -> Option<Layout> {
        let def = self.def.as_ref()?;
        let ix = def.indexes.get(position)?;
        let columns = self
            .columns
            .iter()
            .zip(self.schema.fields())
            .map(|((source, t), field)| {
                let source = match source {
                    Source::RowField(_) | Source::Property { .. } => {
                        match ix.row_key.columns().position(|c| c == field.name()) {
                            Some(n) => Source::RowField(n),
                            None => Source::Property {
                                name: field.name().clone(),
                                lenient: false,
                            },
                        }
                    }
                    other => other.clone(),
                };
                (source, *t)
            })
            .collect();
        Some(Layout {
            columns,
            index: Some(position),
            ..self.clone()
        })
    }

    /// The RowKey template of the rows it decodes.
    pub fn row_template(&self) -> Option<&crate::keys::KeyTemplate> {
        let def = self.def.as_ref()?;
        match self.index {
            None => Some(&def.row_key),
            Some(i) => def.indexes.get(i).map(|ix| &ix.row_key),
        }
    }

    /// The layout of a mapped table: its columns, then the system columns.
    pub fn mapped(def: Arc<TableDef>) -> Self {
        let field_of =
            |t: &crate::keys::KeyTemplate, name: &str| t.columns().position(|c| c == name);
        let mut cols: Vec<(String, Source, ColumnType, bool)> = def
            .columns
            .iter()
            .map(|c| {
                let (source, key) = match (
                    field_of(&def.partition_key, &c.name),
                    field_of(&def.row_key, &c.name),
                ) {
                    (Some(n), _) => (Source::PartitionField(n), true),
                    (None, Some(n)) => (Source::RowField(n), true),
                    (None, None) => (
                        Source::Property {
                            name: c.name.clone(),
                            lenient: false,
                        },
                        false,
                    ),
                };
                (c.name.clone(), source, c.column_type, !key)
            })
            .collect();
        cols.extend(system_columns());
        Self::build(def.storage_table.clone(), Some(def), cols)
    }

    /// The layout of a raw table: the system columns, then the inferred ones.
    pub fn raw(table: TableName, inferred: &[RawColumn]) -> Self {
        let mut cols: Vec<_> = system_columns().into_iter().collect();
        let system: Vec<String> = cols.iter().map(|c| c.0.clone()).collect();
        cols.extend(
            inferred
                .iter()
                .filter(|c| !system.contains(&c.name))
                .map(|c| {
                    (
                        c.name.clone(),
                        Source::Property {
                            name: c.name.clone(),
                            lenient: c.mixed,
                        },
                        c.column_type,
                        true,
                    )
                }),
        );
        Self::build(table, None, cols)
    }

    /// The custom properties the projected columns read.
    pub fn properties(&self, projection: &[usize]) -> Vec<String> {
        projection
            .iter()
            .filter_map(|&i| match &self.columns.get(i)?.0 {
                Source::Property { name, .. } => Some(name.clone()),
                _ => None,
            })
            .collect()
    }
}

enum Builder {
    Int(Int32Builder),
    BigInt(Int64Builder),
    Double(Float64Builder),
    Text(StringBuilder),
    Boolean(BooleanBuilder),
    Timestamp(TimestampMicrosecondBuilder),
    Bytea(BinaryBuilder),
}

impl Builder {
    fn new(t: ColumnType, n: usize) -> Self {
        match t {
            ColumnType::Int => Self::Int(Int32Builder::with_capacity(n)),
            ColumnType::BigInt => Self::BigInt(Int64Builder::with_capacity(n)),
            ColumnType::Double => Self::Double(Float64Builder::with_capacity(n)),
            ColumnType::Text | ColumnType::Uuid => {
                Self::Text(StringBuilder::with_capacity(n, n * 16))
            }
            ColumnType::Boolean => Self::Boolean(BooleanBuilder::with_capacity(n)),
            ColumnType::Timestamp => Self::Timestamp(TimestampMicrosecondBuilder::with_capacity(n)),
            ColumnType::Bytea => Self::Bytea(BinaryBuilder::with_capacity(n, n * 16)),
        }
    }

    fn finish(self) -> ArrayRef {
        match self {
            Self::Int(mut b) => Arc::new(b.finish()),
            Self::BigInt(mut b) => Arc::new(b.finish()),
            Self::Double(mut b) => Arc::new(b.finish()),
            Self::Text(mut b) => Arc::new(b.finish()),
            Self::Boolean(mut b) => Arc::new(b.finish()),
            Self::Timestamp(mut b) => Arc::new(b.finish().with_timezone("+00:00")),
            Self::Bytea(mut b) => Arc::new(b.finish()),
        }
    }

    fn null(&mut self) {
        match self {
            Self::Int(b) => b.append_null(),
            Self::BigInt(b) => b.append_null(),
            Self::Double(b) => b.append_null(),
            Self::Text(b) => b.append_null(),
            Self::Boolean(b) => b.append_null(),
            Self::Timestamp(b) => b.append_null(),
            Self::Bytea(b) => b.append_null(),
        }
    }

    /// Appends a property value; `false` if the column cannot hold it.
    fn value(&mut self, v: &EdmValue, lenient: bool) -> bool {
        match (self, v) {
            (Self::Int(b), EdmValue::Int32(i)) => b.append_value(*i),
            (Self::BigInt(b), EdmValue::Int64(i)) => b.append_value(*i),
            (Self::BigInt(b), EdmValue::Int32(i)) => b.append_value(i64::from(*i)),
            (Self::Double(b), EdmValue::Double(d)) => b.append_value(*d),
            (Self::Double(b), EdmValue::Int32(i)) => b.append_value(f64::from(*i)),
            (Self::Double(b), EdmValue::Int64(i)) if lenient => b.append_value(*i as f64),
            (Self::Text(b), EdmValue::String(s)) => b.append_value(s),
            (Self::Text(b), EdmValue::Guid(g)) => b.append_value(g.to_string()),
            (Self::Text(b), other) if lenient => b.append_value(text_form(other)),
            (Self::Boolean(b), EdmValue::Boolean(x)) => b.append_value(*x),
            (Self::Timestamp(b), EdmValue::DateTime(t)) => b.append_value(t.timestamp_micros()),
            (Self::Bytea(b), EdmValue::Binary(x)) => b.append_value(x),
            _ => return false,
        }
        true
    }

    fn key(&mut self, v: &KeyValue) -> bool {
        match (self, v) {
            (Self::Int(b), KeyValue::Int(i)) => match i32::try_from(*i) {
                Ok(i) => b.append_value(i),
                Err(_) => return false,
            },
            (Self::BigInt(b), KeyValue::Int(i)) => b.append_value(*i),
            // An integer column in a free-text field: its decimal text.
            // (Canonical decimal only: `+7` or `007` would never match a lookup.)
            (Self::Int(b), KeyValue::Text(s)) => match s.parse::<i32>() {
                Ok(i) if i.to_string() == *s => b.append_value(i),
                _ => return false,
            },
            (Self::BigInt(b), KeyValue::Text(s)) => match s.parse::<i64>() {
                Ok(i) if i.to_string() == *s => b.append_value(i),
                _ => return false,
            },
            (Self::Text(b), KeyValue::Text(s)) => b.append_value(s),
            _ => return false,
        }
        true
    }
}

/// A value's text form, for raw columns of mixed types.
fn text_form(v: &EdmValue) -> String {
    match v {
        EdmValue::String(s) => s.clone(),
        EdmValue::Binary(b) => base64::engine::general_purpose::STANDARD.encode(b),
        EdmValue::Boolean(b) => b.to_string(),
        EdmValue::DateTime(t) => format_datetime(t),
        EdmValue::Double(d) => d.to_string(),
        EdmValue::Guid(g) => g.to_string(),
        EdmValue::Int32(i) => i.to_string(),
        EdmValue::Int64(i) => i.to_string(),
    }
}

/// What decoding one page found besides rows.
#[derive(Debug, Default, Clone, Copy)]
pub struct Skipped {
    /// Index rows met (and left out).
    pub index_rows: usize,
}

/// Decodes entities into a batch of the projected columns. Index rows are
/// skipped and counted; a key that fits no template, or a property of a type
/// its column cannot hold, is an error naming the entity.
pub fn decode(
    layout: &Layout,
    projection: &[usize],
    schema: &SchemaRef,
    entities: &[StoredEntity],
) -> Result<(RecordBatch, Skipped), ExecError> {
    let mut builders: Vec<Builder> = projection
        .iter()
        .map(|&i| Builder::new(layout.columns[i].1, entities.len()))
        .collect();
    let needs_pk = projection
        .iter()
        .any(|&i| matches!(layout.columns[i].0, Source::PartitionField(_)));
    let mut skipped = Skipped::default();
    let mut rows = 0;
    let mut last_pk: Option<(&str, Vec<KeyValue>)> = None;
    for e in entities {
        let (pk_values, rk_values) = match &layout.def {
            None => (None, None),
            Some(def) => {
                let template = layout.row_template().unwrap_or(&def.row_key);
                let rk = match template.decompose(e.row_key().as_str()) {
                    Ok(v) => v,
                    Err(err) => {
                        // Base rows and index rows share partitions.
                        if layout.index.is_none()
                            && def
                                .indexes
                                .iter()
                                .any(|i| i.row_key.decompose(e.row_key().as_str()).is_ok())
                        {
                            skipped.index_rows += 1;
                            continue;
                        }
                        return Err(ExecError::KeyMismatch {
                            table: def.name.clone(),
                            kind: KeyKind::RowKey,
                            partition_key: e.partition_key().as_str().to_owned(),
                            row_key: e.row_key().as_str().to_owned(),
                            reason: err.to_string(),
                        });
                    }
                };
                let pk_text = e.partition_key().as_str();
                if needs_pk && last_pk.as_ref().is_none_or(|(t, _)| *t != pk_text) {
                    let values = def.partition_key.decompose(pk_text).map_err(|err| {
                        ExecError::KeyMismatch {
                            table: def.name.clone(),
                            kind: KeyKind::PartitionKey,
                            partition_key: pk_text.to_owned(),
                            row_key: e.row_key().as_str().to_owned(),
                            reason: err.to_string(),
                        }
                    })?;
                    last_pk = Some((pk_text, values));
                }
                (last_pk.as_ref().map(|(_, v)| v), Some(rk))
            }
        };
        for (b, &i) in builders.iter_mut().zip(projection) {
            let (source, column_type) = &layout.columns[i];
            let ok = match source {
                Source::PartitionField(n) => {
                    pk_values.and_then(|v| v.get(*n)).is_some_and(|v| b.key(v))
                }
                Source::RowField(n) => rk_values
                    .as_ref()
                    .and_then(|v| v.get(*n))
                    .is_some_and(|v| b.key(v)),
                Source::Property { name, lenient } => match e.get(name) {
                    None => {
                        b.null();
                        true
                    }
                    Some(v) => {
                        (*lenient || column_type.reads(v.edm_type())) && b.value(v, *lenient)
                    }
                },
                Source::PartitionKey => {
                    b.key(&KeyValue::Text(e.partition_key().as_str().to_owned()))
                }
                Source::RowKey => b.key(&KeyValue::Text(e.row_key().as_str().to_owned())),
                Source::Timestamp => b.value(&EdmValue::DateTime(e.timestamp), false),
                Source::ETag => b.value(&EdmValue::String(e.etag.to_string()), false),
            };
            if !ok {
                let found = match source {
                    Source::Property { name, .. } => {
                        e.get(name).map(|v| format!("{:?}", v.edm_type()))
                    }
                    _ => None,
                };
                return Err(ExecError::TypeMismatch {
                    table: layout
                        .def
                        .as_ref()
                        .map_or_else(|| layout.table.as_str().to_owned(), |d| d.name.clone()),
                    column: schema_name(layout, i),
                    expected: *column_type,
                    found: found.unwrap_or_else(|| "a key value that does not fit".into()),
                    partition_key: e.partition_key().as_str().to_owned(),
                    row_key: e.row_key().as_str().to_owned(),
                });
            }
        }
        rows += 1;
    }
    let arrays: Vec<ArrayRef> = builders.into_iter().map(Builder::finish).collect();
    let options = RecordBatchOptions::new().with_row_count(Some(rows));
    let batch = RecordBatch::try_new_with_options(schema.clone(), arrays, &options)?;
    Ok((batch, skipped))
}

fn schema_name(layout: &Layout, i: usize) -> String {
    layout.schema.field(i).name().clone()
}
