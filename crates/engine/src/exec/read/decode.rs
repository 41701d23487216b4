//! Entities into Arrow: the layout of a table (where each SQL column comes
//! from: a key field, a property or a system column) and the decoding of a
//! page of entities into one record batch.

use std::sync::{Arc, OnceLock};

use datafusion::arrow::array::{
    ArrayRef, BinaryBuilder, BooleanBuilder, Date32Builder, Decimal128Builder, Float64Builder,
    Int32Builder, Int64Builder, StringBuilder, TimestampMicrosecondBuilder,
};
use datafusion::arrow::datatypes::{Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};

use super::cells::{Columns, Kind, Target, put_key, put_value};
use crate::catalog::raw::RawColumn;
use crate::catalog::{ColumnType, TableDef};
use crate::exec::ExecError;
use std::ops::ControlFlow;

use crate::keys::{KeyRef, KeyValue};
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
    /// Every custom property no other column reads, as one JSON object
    /// (a raw table's `_properties`): what a raw table's columns, found
    /// from a sample, do not name is still read.
    Rest,
}

/// The column a raw table keeps its other properties in.
pub const REST_COLUMN: &str = "_properties";

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
    /// This layout's `Debug` text, made at its first use.
    printed: Printed,
}

/// A layout's `Debug` text, kept: a scan's pages are named by it in the
/// store's derived cache (`scan::cached`), and it prints the whole table
/// definition, which took more time than the rest of a range read's
/// planning when made at every run. A layout is not changed once built;
/// one built from another starts with none.
#[derive(Clone, Default)]
struct Printed(OnceLock<Arc<str>>);

impl std::fmt::Debug for Printed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Not itself: the text it keeps is the layout's.
        f.write_str("_")
    }
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
            printed: Printed::default(),
        }
    }

    /// The layout's `Debug` text, made once.
    pub fn printed(&self) -> Arc<str> {
        self.printed
            .0
            .get_or_init(|| format!("{self:?}").into())
            .clone()
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
            printed: Printed::default(),
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

    /// The layout of a raw table: the system columns, then the inferred
    /// ones, then `_properties` (every other property).
    pub fn raw(table: TableName, inferred: &[RawColumn]) -> Self {
        let mut cols: Vec<_> = system_columns().into_iter().collect();
        let mut system: Vec<String> = cols.iter().map(|c| c.0.clone()).collect();
        system.push(REST_COLUMN.to_owned());
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
        cols.push((REST_COLUMN.to_owned(), Source::Rest, ColumnType::Text, true));
        Self::build(table, None, cols)
    }

    /// Whether `projection` reads every property (`_properties`): then the
    /// store is asked for all of them, not a `$select`.
    pub fn reads_every_property(&self, projection: &[usize]) -> bool {
        projection
            .iter()
            .any(|&i| matches!(self.columns.get(i), Some((Source::Rest, _))))
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

    fn kind(&self) -> Kind {
        match self {
            Self::Int(_) => Kind::Int,
            Self::BigInt(_) => Kind::BigInt,
            Self::Double(_) => Kind::Double,
            Self::Text(_) => Kind::Text,
            Self::Boolean(_) => Kind::Boolean,
            Self::Timestamp(_) => Kind::Timestamp,
            Self::Date(_) => Kind::Date,
            Self::Decimal(_, scale) => Kind::Decimal(*scale),
            Self::Bytea(_) => Kind::Bytea,
        }
    }
}

/// Each append goes to the builder of its kind (`cells::put_value` and
/// `put_key` call only that one).
impl Target for Builder {
    fn int(&mut self, v: i32) {
        if let Self::Int(b) = self {
            b.append_value(v);
        }
    }
    fn bigint(&mut self, v: i64) {
        if let Self::BigInt(b) = self {
            b.append_value(v);
        }
    }
    fn double(&mut self, v: f64) {
        if let Self::Double(b) = self {
            b.append_value(v);
        }
    }
    fn text(&mut self, v: &str) {
        if let Self::Text(b) = self {
            b.append_value(v);
        }
    }
    fn boolean(&mut self, v: bool) {
        if let Self::Boolean(b) = self {
            b.append_value(v);
        }
    }
    fn micros(&mut self, v: i64) {
        if let Self::Timestamp(b) = self {
            b.append_value(v);
        }
    }
    fn days(&mut self, v: i32) {
        if let Self::Date(b) = self {
            b.append_value(v);
        }
    }
    fn decimal(&mut self, v: i128) {
        if let Self::Decimal(b, _) = self {
            b.append_value(v);
        }
    }
    fn bytes(&mut self, v: &[u8]) {
        if let Self::Bytea(b) = self {
            b.append_value(v);
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
}

impl Columns for Vec<Builder> {
    fn value(&mut self, b: usize, v: ValueRef<'_>, lenient: bool) -> bool {
        let builder = &mut self[b];
        put_value(builder.kind(), builder, v, lenient)
    }
    fn key(&mut self, b: usize, v: &KeyRef<'_>) -> bool {
        let builder = &mut self[b];
        put_key(builder.kind(), builder, v)
    }
    fn null(&mut self, b: usize) {
        Target::null(&mut self[b]);
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
pub async fn page_into<S: RowSink + 'static>(
    store: &dyn TableStore,
    table: &TableName,
    query: &Query,
    token: Option<&ContinuationToken>,
    sink: S,
) -> Result<(PageEnd, S), StorageError> {
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
    /// The builder of `_properties`, if projected, and the properties the
    /// layout's other columns read (sorted), which it leaves out.
    rest: Option<(usize, Vec<String>)>,
}

impl DecodePlan {
    /// The layout's columns decoded, as positions in the layout.
    pub fn projection(&self) -> &[usize] {
        &self.projection
    }

    /// The types of the columns decoded, in order.
    pub fn column_types(&self) -> impl Iterator<Item = ColumnType> + '_ {
        self.projection.iter().map(|&i| self.layout.columns[i].1)
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
        let rest = projection
            .iter()
            .position(|&i| matches!(layout.columns.get(i), Some((Source::Rest, _))))
            .map(|b| {
                let mut named: Vec<String> = layout
                    .columns
                    .iter()
                    .filter_map(|(s, _)| match s {
                        Source::Property { name, .. } => Some(name.clone()),
                        _ => None,
                    })
                    .collect();
                named.sort_unstable();
                (b, named)
            });
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
            rest,
            layout,
        }
    }
}

/// `e`'s properties but `named` (sorted), as a JSON object in name order:
/// strings, numbers and booleans as JSON's own, other types in their text
/// form (a time in RFC 3339, bytes in base64, a GUID), as a raw column of
/// mixed types reads them.
fn rest_json(e: &dyn EntityView, named: &[String]) -> String {
    let mut found: Vec<(String, serde_json::Value)> = Vec::new();
    e.each(&mut |name, v| {
        if named.binary_search_by(|n| n.as_str().cmp(name)).is_ok() {
            return;
        }
        let value = match v {
            ValueRef::String(s) => serde_json::Value::from(s),
            ValueRef::Int32(i) => serde_json::Value::from(i),
            ValueRef::Int64(i) => serde_json::Value::from(i),
            ValueRef::Boolean(b) => serde_json::Value::from(b),
            // NaN and the infinities are no JSON numbers.
            ValueRef::Double(d) if d.is_finite() => serde_json::Value::from(d),
            other => serde_json::Value::from(super::cells::text_form(other)),
        };
        found.push((name.to_owned(), value));
    });
    found.sort_by(|a, b| a.0.cmp(&b.0));
    let mut out = String::from("{");
    for (i, (name, value)) in found.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&serde_json::Value::from(name.as_str()).to_string());
        out.push(':');
        out.push_str(&value.to_string());
    }
    out.push('}');
    out
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
    state: Decoding<Vec<Builder>>,
    error: Option<ExecError>,
    /// The PartitionKeys met, each once per run of rows.
    partitions: Vec<String>,
}

/// What a sink fills and reuses from row to row.
pub(super) struct Decoding<C> {
    /// The row's columns: Arrow builders, or one row's cells.
    columns: C,
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
        Self {
            state: Decoding::new(builders, &plan),
            plan,
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
        let arrays: Vec<ArrayRef> = state.columns.into_iter().map(Builder::finish).collect();
        let options = RecordBatchOptions::new().with_row_count(Some(state.rows));
        let batch = RecordBatch::try_new_with_options(self.plan.schema.clone(), arrays, &options)?;
        Ok((batch, state.skipped))
    }
}

impl<C: Columns> Decoding<C> {
    pub(super) fn new(columns: C, plan: &DecodePlan) -> Self {
        Self {
            columns,
            rows: 0,
            skipped: Skipped::default(),
            last_pk: None,
            spans: Vec::new(),
            filled: vec![false; plan.properties.len()],
        }
    }

    /// The columns filled.
    pub(super) fn into_columns(self) -> C {
        self.columns
    }

    /// Takes one entity: `Ok(false)` for an index row skipped.
    pub(super) fn take(
        &mut self,
        plan: &DecodePlan,
        e: &dyn EntityView,
    ) -> Result<bool, ExecError> {
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
            let columns = &mut self.columns;
            let mut put = |n: usize, value: KeyRef<'_>| {
                for &(field, b) in &plan.row_fields {
                    if field == n && !columns.key(b, &value) {
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
            let columns = &mut self.columns;
            let ok = match source {
                Source::PartitionField(n) => self
                    .last_pk
                    .as_ref()
                    .and_then(|(_, v)| v.get(*n))
                    .is_some_and(|v| columns.key(b, &v.as_ref())),
                // Filled by the key's check above, from the layout's own
                // template; a field it lacks was never filled.
                Source::RowField(n) => {
                    layout.row_template().is_some() && *n < self.spans.len() && wrong != Some(b)
                }
                // Filled below, all in one walk of the properties.
                Source::Property { .. } | Source::Rest => true,
                Source::PartitionKey => columns.key(b, &KeyRef::Text(e.partition_key().into())),
                Source::RowKey => columns.key(b, &KeyRef::Text(rk.into())),
                Source::Timestamp => columns.value(b, ValueRef::DateTime(e.timestamp()), false),
                Source::ETag => columns.value(b, ValueRef::String(&e.etag().to_string()), false),
            };
            if !ok {
                return Err(type_mismatch(layout, i, *column_type, e, None));
            }
        }
        if !plan.properties.is_empty() {
            self.properties(plan, e)?;
        }
        if let Some((b, named)) = &plan.rest {
            self.columns
                .value(*b, ValueRef::String(&rest_json(e, named)), false);
        }
        Ok(true)
    }

    /// Fills the property columns from one walk of the entity's properties;
    /// a property it lacks is its column's fill, or NULL.
    fn properties(&mut self, plan: &DecodePlan, e: &dyn EntityView) -> Result<(), ExecError> {
        self.filled.fill(false);
        let mut wrong: Option<(usize, crate::storage::EdmType)> = None;
        let (columns, filled) = (&mut self.columns, &mut self.filled);
        e.select(&plan.properties, &mut |p, v| {
            let (b, lenient, t) = plan.property_columns[p];
            if filled[p] || wrong.is_some() {
                return;
            }
            filled[p] = true;
            if !((lenient || t.reads(v.edm_type())) && columns.value(b, v, lenient)) {
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
                let b = plan.property_columns[p].0;
                match plan.fills.get(p).and_then(Option::as_ref) {
                    Some(fill) => {
                        self.columns.value(b, fill.as_ref(), false);
                    }
                    None => self.columns.null(b),
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
    use std::sync::Arc;

    use super::Layout;
    use crate::catalog::ddl;

    /// The kept text names a scan's pages in the derived cache: it must be
    /// the layout's own, and a layout over an index must not inherit its
    /// base's (their pages differ).
    #[test]
    fn a_layout_prints_as_its_debug_text_and_an_index_layout_prints_its_own() {
        let def = ddl::parse(
            "CREATE TABLE runs (e TEXT, bib INT NOT NULL, age INT NOT NULL, PRIMARY KEY (e, bib)) \
             WITH (partition_key = '{e}', row_key = 'BIB:{bib:05}', index_age = 'AGE:{age:03}__{bib}')",
        )
        .expect("definition");
        let base = Layout::mapped(Arc::new(def));
        let printed = base.printed();
        assert_eq!(*printed, *format!("{base:?}"));
        assert!(Arc::ptr_eq(&printed, &base.printed()), "made once");
        let index = base.over_index(0).expect("an index layout");
        assert_eq!(*index.printed(), *format!("{index:?}"));
        assert_ne!(index.printed(), printed);
    }
}
