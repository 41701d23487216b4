//! Entities into Arrow: the layout of a table (where each SQL column comes
//! from: a key field, a property or a system column) and the decoding of a
//! page of entities into one record batch.

use std::sync::Arc;

use base64::Engine as _;
use datafusion::arrow::array::{
    ArrayRef, BinaryBuilder, BooleanBuilder, Date32Builder, Decimal128Builder, Float64Builder,
    Int32Builder, Int64Builder, StringBuilder, TimestampMicrosecondBuilder,
};
use datafusion::arrow::datatypes::{Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};

use crate::catalog::raw::RawColumn;
use crate::catalog::{ColumnType, TableDef};
use crate::exec::ExecError;
use std::ops::ControlFlow;

use crate::keys::{KeyRef, KeyValue};
use crate::storage::value::format_datetime;
use crate::storage::{
    ContinuationToken, EntityView, KeyKind, PageEnd, Query, RowSink, StorageError, StoredEntity,
    TableName, TableStore, ValueRef,
};

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
                            name: c.property_name().to_owned(),
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
    Date(Date32Builder),
    /// A NUMERIC's values in units of 10^-scale, with its scale.
    Decimal(Decimal128Builder, u8),
    Bytea(BinaryBuilder),
}

/// Microseconds in a day: a DATE's key and stored DateTime are its midnight.
const DAY_MICROS: i64 = 86_400_000_000;

/// The days since 1970-01-01 of the date `micros` falls on.
fn days(micros: i64) -> Option<i32> {
    i32::try_from(micros.div_euclid(DAY_MICROS)).ok()
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
            ColumnType::Date => Self::Date(Date32Builder::with_capacity(n)),
            ColumnType::Numeric { scale, .. } => Self::Decimal(
                Decimal128Builder::with_capacity(n).with_data_type(t.arrow_type()),
                scale,
            ),
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
            Self::Date(mut b) => Arc::new(b.finish()),
            Self::Decimal(mut b, ..) => Arc::new(b.finish()),
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
            Self::Date(b) => b.append_null(),
            Self::Decimal(b, ..) => b.append_null(),
            Self::Bytea(b) => b.append_null(),
        }
    }

    /// Appends a property value; `false` if the column cannot hold it.
    fn value(&mut self, v: ValueRef<'_>, lenient: bool) -> bool {
        match (self, v) {
            (Self::Int(b), ValueRef::Int32(i)) => b.append_value(i),
            (Self::BigInt(b), ValueRef::Int64(i)) => b.append_value(i),
            (Self::BigInt(b), ValueRef::Int32(i)) => b.append_value(i64::from(i)),
            (Self::Double(b), ValueRef::Double(d)) => b.append_value(d),
            (Self::Double(b), ValueRef::Int32(i)) => b.append_value(f64::from(i)),
            (Self::Double(b), ValueRef::Int64(i)) if lenient => b.append_value(i as f64),
            (Self::Text(b), ValueRef::String(s)) => b.append_value(s),
            (Self::Text(b), ValueRef::Guid(g)) => b.append_value(g.to_string()),
            (Self::Text(b), other) if lenient => b.append_value(text_form(other)),
            (Self::Boolean(b), ValueRef::Boolean(x)) => b.append_value(x),
            (Self::Timestamp(b), ValueRef::DateTime(t)) => b.append_value(t.timestamp_micros()),
            // The date it falls on (a DATE is stored as its midnight).
            (Self::Decimal(b, scale), ValueRef::String(s)) => {
                match crate::catalog::parse_decimal(s, *scale) {
                    Some(v) => b.append_value(v),
                    None => return false,
                }
            }
            (Self::Decimal(b, scale), ValueRef::Int32(i)) => {
                match i128::from(i).checked_mul(10i128.pow(u32::from(*scale))) {
                    Some(v) => b.append_value(v),
                    None => return false,
                }
            }
            (Self::Date(b), ValueRef::DateTime(t)) => match days(t.timestamp_micros()) {
                Some(d) => b.append_value(d),
                None => return false,
            },
            (Self::Bytea(b), ValueRef::Binary(x)) => b.append_value(x),
            _ => return false,
        }
        true
    }

    fn key(&mut self, v: &KeyRef<'_>) -> bool {
        match (self, v) {
            (Self::Int(b), KeyRef::Int(i)) => match i32::try_from(*i) {
                Ok(i) => b.append_value(i),
                Err(_) => return false,
            },
            (Self::BigInt(b), KeyRef::Int(i)) => b.append_value(*i),
            // An integer column in a free-text field: its decimal text.
            // (Canonical decimal only: `+7` or `007` would never match a lookup.)
            (Self::Int(b), KeyRef::Text(s)) => match canonical_int(s).map(i32::try_from) {
                Some(Ok(i)) => b.append_value(i),
                _ => return false,
            },
            (Self::BigInt(b), KeyRef::Text(s)) => match canonical_int(s) {
                Some(i) => b.append_value(i),
                None => return false,
            },
            (Self::Text(b), KeyRef::Text(s)) => b.append_value(s.as_ref()),
            (Self::Text(b), KeyRef::Uuid(u)) => {
                b.append_value(uuid::Uuid::from_u128(*u).hyphenated().to_string())
            }
            (Self::Double(b), KeyRef::Double(d)) => b.append_value(d.get()),
            (Self::Boolean(b), KeyRef::Bool(x)) => b.append_value(*x),
            (Self::Timestamp(b), KeyRef::Timestamp(t)) => b.append_value(*t),
            (Self::Decimal(b, ..), KeyRef::Int(i)) => b.append_value(i128::from(*i)),
            (Self::Date(b), KeyRef::Timestamp(t)) => match days(*t) {
                Some(d) => b.append_value(d),
                None => return false,
            },
            (builder, KeyRef::Null) => builder.null(),
            _ => return false,
        }
        true
    }

    fn key_value(&mut self, v: &KeyValue) -> bool {
        self.key(&v.as_ref())
    }
}

/// The integer `s` spells as Rust and PostgreSQL print it: an optional
/// `-`, then digits without a leading zero (`0` alone); no `+`, no `-0`.
/// Checked byte by byte rather than by printing the value back, since a
/// scan reads one per row.
fn canonical_int(s: &str) -> Option<i64> {
    let (negative, digits) = match s.as_bytes() {
        [b'-', rest @ ..] => (true, rest),
        all => (false, all),
    };
    match digits {
        [] => return None,
        [b'0'] if !negative => return Some(0),
        [b'0', ..] => return None,
        _ => {}
    }
    // Accumulated negative, so that i64::MIN fits.
    let mut n: i64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        n = n.checked_mul(10)?.checked_sub(i64::from(d - b'0'))?;
    }
    if negative { Some(n) } else { n.checked_neg() }
}

/// A value's text form, for raw columns of mixed types.
fn text_form(v: ValueRef<'_>) -> String {
    match v {
        ValueRef::String(s) => s.to_owned(),
        ValueRef::Binary(b) => base64::engine::general_purpose::STANDARD.encode(b),
        ValueRef::Boolean(b) => b.to_string(),
        ValueRef::DateTime(t) => format_datetime(&t),
        ValueRef::Double(d) => d.to_string(),
        ValueRef::Guid(g) => g.to_string(),
        ValueRef::Int32(i) => i.to_string(),
        ValueRef::Int64(i) => i.to_string(),
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
    let plan = DecodePlan::new(Arc::new(layout.clone()), projection, schema);
    decode_with(&Arc::new(plan), entities)
}

/// As `decode`, with a plan made once for many pages.
pub fn decode_with(
    plan: &Arc<DecodePlan>,
    entities: &[StoredEntity],
) -> Result<(RecordBatch, Skipped), ExecError> {
    let mut sink = BatchSink::new(plan.clone(), entities.len());
    for e in entities {
        if sink.push(e).is_break() {
            break;
        }
    }
    sink.finish()
}

/// One page of `query` read by `store` into `sink`, which comes back with
/// the page's rows: the sink is shared with the store (which may fill it on
/// another thread) only for the call.
pub async fn page_into(
    store: &dyn TableStore,
    table: &TableName,
    query: &Query,
    token: Option<&ContinuationToken>,
    sink: BatchSink,
) -> Result<(PageEnd, BatchSink), StorageError> {
    let sink = Arc::new(std::sync::Mutex::new(sink));
    let shared: Arc<std::sync::Mutex<dyn RowSink>> = sink.clone();
    let end = store.query_into(table, query, token, shared).await?;
    let sink = Arc::try_unwrap(sink)
        .map_err(|_| StorageError::Task("a store kept a page's sink".into()))?
        .into_inner()
        .map_err(|_| StorageError::Task("a page's sink panicked".into()))?;
    Ok((end, sink))
}

/// What decoding needs to know of a layout and a projection, worked out
/// once per scan: which key fields and properties to read.
#[derive(Debug)]
pub struct DecodePlan {
    layout: Arc<Layout>,
    projection: Vec<usize>,
    schema: SchemaRef,
    /// The properties the projection reads, and for each the builder it
    /// fills, whether it converts leniently, and its column's type.
    properties: Vec<String>,
    property_columns: Vec<(usize, bool, ColumnType)>,
    /// Per property, what a row without it reads as (`ColumnDef::fill`;
    /// `None`: NULL).
    fills: Vec<Option<crate::storage::EdmValue>>,
    /// The RowKey fields the projection reads, each as (field, builder):
    /// filled as the key's check reads them.
    row_fields: Vec<(usize, usize)>,
    /// The RowKey template compiled for reading keys (`KeyTemplate::reader`),
    /// and a bit for each field in `row_fields`.
    reader: Option<(crate::keys::KeyReader, u64)>,
    needs_pk: bool,
}

impl DecodePlan {
    /// The layout's columns decoded, as positions in the layout.
    pub fn projection(&self) -> &[usize] {
        &self.projection
    }

    /// The plan for decoding `projection` of `layout` into `schema`.
    pub fn new(layout: Arc<Layout>, projection: &[usize], schema: &SchemaRef) -> Self {
        let mut properties = Vec::new();
        let mut property_columns = Vec::new();
        let mut fills = Vec::new();
        for (b, &i) in projection.iter().enumerate() {
            if let Some((Source::Property { name, lenient }, t)) = layout.columns.get(i) {
                properties.push(name.clone());
                property_columns.push((b, *lenient, *t));
                let column = layout.schema.field(i).name();
                fills.push(
                    layout
                        .def
                        .as_ref()
                        .and_then(|d| d.column(column))
                        .and_then(crate::catalog::ColumnDef::fill),
                );
            }
        }
        let needs_pk = projection
            .iter()
            .any(|&i| matches!(layout.columns.get(i), Some((Source::PartitionField(_), _))));
        let row_fields = projection
            .iter()
            .enumerate()
            .filter_map(|(b, &i)| match layout.columns.get(i) {
                Some((Source::RowField(n), _)) => Some((*n, b)),
                _ => None,
            })
            .collect::<Vec<_>>();
        let template = layout
            .row_template()
            .or(layout.def.as_deref().map(|d| &d.row_key));
        let reader = template.and_then(|t| t.reader()).and_then(|r| {
            let mut wanted = 0u64;
            for &(n, ..) in &row_fields {
                wanted |= 1u64.checked_shl(u32::try_from(n).ok()?)?;
            }
            Some((r, wanted))
        });
        Self {
            projection: projection.to_vec(),
            schema: schema.clone(),
            properties,
            property_columns,
            fills,
            row_fields,
            reader,
            needs_pk,
            layout,
        }
    }
}

/// Decodes entities into Arrow builders as a store lends them (`RowSink`):
/// each value copied once, key fields read only where projected, index
/// rows told by their RowKey's literals before any property is read. The
/// first error stops the page; `finish` returns it.
pub struct BatchSink {
    /// Shared by a scan's requests, so it is only ever borrowed per row:
    /// a count per row on its reference count made both cores fight over
    /// its cache line (`perf`: a quarter of a full scan's time).
    plan: Arc<DecodePlan>,
    state: Decoding,
    error: Option<ExecError>,
    /// The PartitionKeys met, each once per run of rows.
    partitions: Vec<String>,
}

/// What a sink fills and reuses from row to row.
struct Decoding {
    builders: Vec<Builder>,
    rows: usize,
    skipped: Skipped,
    /// The last PartitionKey decomposed, and its values.
    last_pk: Option<(String, Vec<KeyValue>)>,
    /// The RowKey's field spans.
    spans: Vec<std::ops::Range<usize>>,
    /// Which property columns the current row filled.
    filled: Vec<bool>,
}

impl BatchSink {
    /// A sink for about `capacity` rows.
    pub fn new(plan: Arc<DecodePlan>, capacity: usize) -> Self {
        let builders = plan
            .projection
            .iter()
            .map(|&i| Builder::new(plan.layout.columns[i].1, capacity))
            .collect();
        let filled = vec![false; plan.properties.len()];
        Self {
            plan,
            state: Decoding {
                builders,
                rows: 0,
                skipped: Skipped::default(),
                last_pk: None,
                spans: Vec::new(),
                filled,
            },
            error: None,
            partitions: Vec::new(),
        }
    }

    /// The PartitionKeys of the entities pushed (index rows included), in
    /// order, each once per run.
    pub fn partitions(&self) -> &[String] {
        &self.partitions
    }

    /// The batch of the rows taken, or the error that stopped them.
    pub fn finish(self) -> Result<(RecordBatch, Skipped), ExecError> {
        if let Some(e) = self.error {
            return Err(e);
        }
        let state = self.state;
        let arrays: Vec<ArrayRef> = state.builders.into_iter().map(Builder::finish).collect();
        let options = RecordBatchOptions::new().with_row_count(Some(state.rows));
        let batch = RecordBatch::try_new_with_options(self.plan.schema.clone(), arrays, &options)?;
        Ok((batch, state.skipped))
    }
}

impl Decoding {
    /// Takes one entity: `Ok(false)` for an index row skipped.
    fn take(&mut self, plan: &DecodePlan, e: &dyn EntityView) -> Result<bool, ExecError> {
        let layout = &plan.layout;
        let rk = e.row_key();
        // The first builder (in projection order, as errors are named)
        // that refused its RowKey field.
        let mut wrong: Option<usize> = None;
        if let Some(def) = &layout.def {
            let template = layout.row_template().unwrap_or(&def.row_key);
            // Base rows without a literal prefix: an index's prefix tells
            // its rows apart.
            if layout.index.is_none() && def.index_prefix_of(rk).is_some() {
                self.skipped.index_rows += 1;
                return Ok(false);
            }
            let builders = &mut self.builders;
            let mut put = |n: usize, value: KeyRef<'_>| {
                for &(field, b) in &plan.row_fields {
                    if field == n && !builders[b].key(&value) {
                        wrong = Some(wrong.map_or(b, |w| w.min(b)));
                    }
                }
            };
            let read = plan
                .reader
                .as_ref()
                .and_then(|(r, wanted)| r.read(rk, *wanted, &mut self.spans, &mut put));
            // The general reading, where the compiled one does not decide:
            // it tells index rows apart and names what is wrong.
            if read.is_none() {
                if let Err(err) = template.split(rk, &mut self.spans) {
                    // Base rows and index rows share partitions.
                    let is_index_row = |t: &crate::keys::KeyTemplate| {
                        let mut spans = Vec::new();
                        t.split(rk, &mut spans).is_ok() && t.check_fields(rk, &spans).is_ok()
                    };
                    if layout.index.is_none()
                        && def.indexes.iter().any(|i| is_index_row(&i.row_key))
                    {
                        self.skipped.index_rows += 1;
                        return Ok(false);
                    }
                    return Err(key_mismatch(def, KeyKind::RowKey, e, &err));
                }
                // Every field's spelling is checked, so that a stray key is
                // an error even where no field is read: a count must not
                // count what a lookup would never find. (A `count(*)` the
                // embedded store answers from its counts reads no key, and
                // counts it: `PartitionScanExec::counted_rows`.) The fields
                // projected are taken from that check.
                template
                    .read_fields(rk, &self.spans, &mut put)
                    .map_err(|err| key_mismatch(def, KeyKind::RowKey, e, &err))?;
            }
            if plan.needs_pk
                && self
                    .last_pk
                    .as_ref()
                    .is_none_or(|(t, _)| t != e.partition_key())
            {
                let values = def
                    .partition_key
                    .decompose(e.partition_key())
                    .map_err(|err| key_mismatch(def, KeyKind::PartitionKey, e, &err))?;
                self.last_pk = Some((e.partition_key().to_owned(), values));
            }
        }
        for (b, &i) in plan.projection.iter().enumerate() {
            let (source, column_type) = &layout.columns[i];
            let builder = &mut self.builders[b];
            let ok = match source {
                Source::PartitionField(n) => self
                    .last_pk
                    .as_ref()
                    .and_then(|(_, v)| v.get(*n))
                    .is_some_and(|v| builder.key_value(v)),
                // Filled by the key's check above, from the layout's own
                // template; a field it lacks was never filled.
                Source::RowField(n) => {
                    layout.row_template().is_some() && *n < self.spans.len() && wrong != Some(b)
                }
                // Filled below, all in one walk of the properties.
                Source::Property { .. } => true,
                Source::PartitionKey => builder.key(&KeyRef::Text(e.partition_key().into())),
                Source::RowKey => builder.key(&KeyRef::Text(rk.into())),
                Source::Timestamp => builder.value(ValueRef::DateTime(e.timestamp()), false),
                Source::ETag => builder.value(ValueRef::String(&e.etag().to_string()), false),
            };
            if !ok {
                return Err(type_mismatch(layout, i, *column_type, e, None));
            }
        }
        if !plan.properties.is_empty() {
            self.properties(plan, e)?;
        }
        Ok(true)
    }

    /// Fills the property columns from one walk of the entity's properties;
    /// a property it lacks is its column's fill, or NULL.
    fn properties(&mut self, plan: &DecodePlan, e: &dyn EntityView) -> Result<(), ExecError> {
        self.filled.fill(false);
        let mut wrong: Option<(usize, crate::storage::EdmType)> = None;
        let (builders, filled) = (&mut self.builders, &mut self.filled);
        e.select(&plan.properties, &mut |p, v| {
            let (b, lenient, t) = plan.property_columns[p];
            if filled[p] || wrong.is_some() {
                return;
            }
            filled[p] = true;
            if !((lenient || t.reads(v.edm_type())) && builders[b].value(v, lenient)) {
                wrong = Some((p, v.edm_type()));
            }
        });
        if let Some((p, found)) = wrong {
            let (b, _, t) = plan.property_columns[p];
            return Err(type_mismatch(
                &plan.layout,
                plan.projection[b],
                t,
                e,
                Some(found),
            ));
        }
        for (p, done) in self.filled.iter().enumerate() {
            if !done {
                let builder = &mut self.builders[plan.property_columns[p].0];
                match plan.fills.get(p).and_then(Option::as_ref) {
                    Some(fill) => {
                        builder.value(fill.as_ref(), false);
                    }
                    None => builder.null(),
                }
            }
        }
        Ok(())
    }
}

impl RowSink for BatchSink {
    fn push(&mut self, e: &dyn EntityView) -> ControlFlow<()> {
        if self.error.is_some() {
            return ControlFlow::Break(());
        }
        if self
            .partitions
            .last()
            .is_none_or(|p| p != e.partition_key())
        {
            self.partitions.push(e.partition_key().to_owned());
        }
        match self.state.take(&self.plan, e) {
            Ok(true) => self.state.rows += 1,
            Ok(false) => {}
            Err(err) => {
                self.error = Some(err);
                return ControlFlow::Break(());
            }
        }
        ControlFlow::Continue(())
    }
}

fn key_mismatch(
    def: &TableDef,
    kind: KeyKind,
    e: &dyn EntityView,
    err: &crate::keys::KeyError,
) -> ExecError {
    ExecError::KeyMismatch {
        table: def.name.clone(),
        kind,
        partition_key: e.partition_key().to_owned(),
        row_key: e.row_key().to_owned(),
        reason: err.to_string(),
    }
}

fn type_mismatch(
    layout: &Layout,
    i: usize,
    expected: ColumnType,
    e: &dyn EntityView,
    found: Option<crate::storage::EdmType>,
) -> ExecError {
    ExecError::TypeMismatch {
        table: layout
            .def
            .as_ref()
            .map_or_else(|| layout.table.as_str().to_owned(), |d| d.name.clone()),
        column: schema_name(layout, i),
        expected,
        found: found.map_or_else(
            || "a key value that does not fit".into(),
            |t| format!("{t:?}"),
        ),
        partition_key: e.partition_key().to_owned(),
        row_key: e.row_key().to_owned(),
    }
}

fn schema_name(layout: &Layout, i: usize) -> String {
    layout.schema.field(i).name().clone()
}

#[cfg(test)]
mod tests {
    use super::canonical_int;

    #[test]
    fn canonical_int_takes_exactly_what_an_integer_prints_as() {
        for i in [
            0i64,
            7,
            -7,
            10,
            -10,
            55,
            i64::from(i32::MAX),
            i64::MAX,
            i64::MIN,
            -1,
        ] {
            assert_eq!(canonical_int(&i.to_string()), Some(i), "{i}");
        }
        for bad in [
            "",
            "-",
            "+7",
            "007",
            "-0",
            "-07",
            "7 ",
            " 7",
            "7a",
            "1e3",
            "99999999999999999999",
        ] {
            assert_eq!(canonical_int(bad), None, "{bad:?}");
        }
    }
}
