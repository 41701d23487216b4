//! A record batch's rows as DataRows: the common column types written
//! straight from their arrays, the rest through arrow-pg.
//!
//! arrow-pg encodes a batch value by value: a downcast of the column at
//! each value, a generic trip through pgwire's `ToSqlText` or `ToSql`
//! (integers through `fmt`), and a row buffer that allocates again every
//! few rows. A read of 1,000 rows spent 11% of the server's user time
//! there (perf, BENCHMARKS.md). Here a batch whose columns are all text,
//! integers or booleans, of the types their description names (what a
//! mapped table's columns mostly are), is typed once per column and
//! written into buffers its rows share; any other batch is arrow-pg's.
//! Either way a client reads the same bytes (the tests compare them).

use std::sync::Arc;

use arrow_pg::datatypes::encode_recordbatch;
use bytes::{BufMut, BytesMut};
use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, Int16Array, Int32Array, Int64Array, LargeStringArray,
    RecordBatch, StringArray, StringViewArray,
};
use datafusion::arrow::datatypes::{DataType, Field, Int16Type, Int32Type, Int64Type, Schema};
use pgwire::api::Type;
use pgwire::api::results::{FieldFormat, FieldInfo};
use pgwire::error::PgWireResult;
use pgwire::messages::data::DataRow;

use super::plan::internal;

/// The most bytes one shared buffer is made with: a bigger batch's rows
/// take several, so one large value does not hold all its rows' memory.
const BUFFER: usize = 64 * 1024;

/// The rows of `batch` as DataRows of `fields` (its description).
pub fn data_rows(
    fields: Arc<Vec<FieldInfo>>,
    batch: RecordBatch,
) -> Box<dyn Iterator<Item = PgWireResult<DataRow>> + Send> {
    let (fields, batch) = as_written(fields, batch);
    match Rows::of(&fields, &batch) {
        Some(rows) => Box::new(rows),
        None => encode_recordbatch(fields, batch),
    }
}

/// `fields` and `batch` as written: a column sent in text whose text
/// arrow-pg would write otherwise than PostgreSQL is made that text here,
/// and encoded as `text` (the client's description keeps its type):
/// - a vector (`int2vector`, `oidvector`; text already,
///   `vectors::wire_batch`): pgwire counts the vector types as arrays and
///   would quote the text as an array's element (`"1 2"`), which psqlODBC
///   cannot read as a vector;
/// - a timestamp: arrow-pg writes `2011-04-20 15:40:00.000000+00`,
///   PostgreSQL `2011-04-20 15:40:00+00`, as COPY and the shell write it
///   (`load::pg_text`).
fn as_written(
    fields: Arc<Vec<FieldInfo>>,
    batch: RecordBatch,
) -> (Arc<Vec<FieldInfo>>, RecordBatch) {
    let texts: Vec<Option<ArrayRef>> = fields
        .iter()
        .zip(batch.columns())
        .map(|(f, column)| {
            if f.format() != FieldFormat::Text {
                None
            } else if [Type::INT2_VECTOR, Type::OID_VECTOR].contains(f.datatype()) {
                Some(column.clone())
            } else {
                timestamp_text(column)
            }
        })
        .collect();
    if texts.iter().all(Option::is_none) {
        return (fields, batch);
    }
    let schema = batch.schema();
    let (mut infos, mut own, mut columns) = (Vec::new(), Vec::new(), Vec::new());
    for (((info, field), column), text) in fields
        .iter()
        .zip(schema.fields())
        .zip(batch.columns())
        .zip(texts)
    {
        match text {
            Some(text) => {
                infos.push(FieldInfo::new(
                    info.name().to_owned(),
                    info.table_id(),
                    info.column_id(),
                    Type::TEXT,
                    info.format(),
                ));
                own.push(Field::new(field.name(), text.data_type().clone(), true));
                columns.push(text);
            }
            None => {
                infos.push(info.clone());
                own.push(field.as_ref().clone());
                columns.push(column.clone());
            }
        }
    }
    match RecordBatch::try_new(Arc::new(Schema::new(own)), columns) {
        Ok(written) => (Arc::new(infos), written),
        Err(_) => (fields, batch),
    }
}

/// A timestamp column as PostgreSQL's text (`load::pg_text`); `None` for
/// any other column.
fn timestamp_text(column: &ArrayRef) -> Option<ArrayRef> {
    let text = crate::load::pg_text::timestamp_strings(column.as_ref())?;
    Some(Arc::new(text))
}

/// A column typed once, with the format it is sent in.
struct Column {
    values: Values,
    binary: bool,
}

enum Values {
    Utf8(StringArray),
    LargeUtf8(LargeStringArray),
    Utf8View(StringViewArray),
    Int16(Int16Array),
    Int32(Int32Array),
    Int64(Int64Array),
    Boolean(BooleanArray),
}

impl Values {
    /// `array` typed, where its field and its description are a pair
    /// written here as arrow-pg writes them: no metadata (arrow-pg reads
    /// `"char"` and oid columns off it), the description's type the one
    /// arrow-pg gives the array's.
    fn of(array: &dyn Array, field: &Field, info: &FieldInfo) -> Option<Self> {
        if !field.metadata().is_empty() {
            return None;
        }
        let ty = info.datatype();
        let text = [Type::TEXT, Type::VARCHAR].contains(ty);
        Some(match array.data_type() {
            DataType::Utf8 if text => Self::Utf8(array.as_string::<i32>().clone()),
            DataType::LargeUtf8 if text => Self::LargeUtf8(array.as_string::<i64>().clone()),
            DataType::Utf8View if text => Self::Utf8View(array.as_string_view().clone()),
            DataType::Int16 if *ty == Type::INT2 => {
                Self::Int16(array.as_primitive::<Int16Type>().clone())
            }
            DataType::Int32 if *ty == Type::INT4 => {
                Self::Int32(array.as_primitive::<Int32Type>().clone())
            }
            DataType::Int64 if *ty == Type::INT8 => {
                Self::Int64(array.as_primitive::<Int64Type>().clone())
            }
            DataType::Boolean if *ty == Type::BOOL => Self::Boolean(array.as_boolean().clone()),
            _ => return None,
        })
    }

    fn array(&self) -> &dyn Array {
        match self {
            Self::Utf8(a) => a,
            Self::LargeUtf8(a) => a,
            Self::Utf8View(a) => a,
            Self::Int16(a) => a,
            Self::Int32(a) => a,
            Self::Int64(a) => a,
            Self::Boolean(a) => a,
        }
    }

    /// About how many bytes the column's values take on the wire, with
    /// their lengths.
    fn wire_size(&self) -> usize {
        let rows = self.array().len();
        4 * rows
            + match self {
                Self::Utf8(a) => a.values().len(),
                Self::LargeUtf8(a) => a.values().len(),
                Self::Utf8View(a) => a.total_buffer_bytes_used() + 12 * rows,
                Self::Int16(_) => 6 * rows,
                Self::Int32(_) => 11 * rows,
                Self::Int64(_) => 20 * rows,
                Self::Boolean(_) => rows,
            }
    }
}

/// A batch's rows, written one at a time as they are taken.
struct Rows {
    columns: Vec<Column>,
    rows: usize,
    next: usize,
    buffer: BytesMut,
}

impl Rows {
    /// `None` where a column is not one written here.
    fn of(fields: &[FieldInfo], batch: &RecordBatch) -> Option<Self> {
        if fields.len() != batch.num_columns() {
            return None;
        }
        let schema = batch.schema_ref();
        let columns = fields
            .iter()
            .zip(batch.columns())
            .zip(schema.fields())
            .map(|((info, array), field)| {
                Some(Column {
                    values: Values::of(array.as_ref(), field, info)?,
                    binary: info.format() == FieldFormat::Binary,
                })
            })
            .collect::<Option<Vec<_>>>()?;
        let size: usize = columns.iter().map(|c| c.values.wire_size()).sum();
        Some(Self {
            columns,
            rows: batch.num_rows(),
            next: 0,
            buffer: BytesMut::with_capacity(size.clamp(64, BUFFER)),
        })
    }

    fn write(&mut self, row: usize) -> PgWireResult<DataRow> {
        let out = &mut self.buffer;
        for column in &self.columns {
            let values = &column.values;
            if values.array().is_null(row) {
                out.put_i32(-1);
                continue;
            }
            match values {
                Values::Utf8(a) => put_bytes(out, a.value(row).as_bytes())?,
                Values::LargeUtf8(a) => put_bytes(out, a.value(row).as_bytes())?,
                Values::Utf8View(a) => put_bytes(out, a.value(row).as_bytes())?,
                Values::Int16(a) if column.binary => put_bytes(out, &a.value(row).to_be_bytes())?,
                Values::Int32(a) if column.binary => put_bytes(out, &a.value(row).to_be_bytes())?,
                Values::Int64(a) if column.binary => put_bytes(out, &a.value(row).to_be_bytes())?,
                Values::Int16(a) => {
                    put_bytes(out, itoa::Buffer::new().format(a.value(row)).as_bytes())?
                }
                Values::Int32(a) => {
                    put_bytes(out, itoa::Buffer::new().format(a.value(row)).as_bytes())?
                }
                Values::Int64(a) => {
                    put_bytes(out, itoa::Buffer::new().format(a.value(row)).as_bytes())?
                }
                // PostgreSQL's text is `t` or `f`, its binary one byte.
                Values::Boolean(a) => match (a.value(row), column.binary) {
                    (v, true) => put_bytes(out, &[u8::from(v)])?,
                    (true, false) => put_bytes(out, b"t")?,
                    (false, false) => put_bytes(out, b"f")?,
                },
            }
        }
        let count = i16::try_from(self.columns.len())
            .map_err(|_| internal("a row of more columns than the protocol counts"))?;
        Ok(DataRow::new(out.split(), count))
    }
}

/// A value with its length before it.
fn put_bytes(out: &mut BytesMut, value: &[u8]) -> PgWireResult<()> {
    let len = i32::try_from(value.len())
        .map_err(|_| internal("a value longer than the protocol's 2 GB"))?;
    out.put_i32(len);
    out.put_slice(value);
    Ok(())
}

impl Iterator for Rows {
    type Item = PgWireResult<DataRow>;

    fn next(&mut self) -> Option<Self::Item> {
        (self.next < self.rows).then(|| {
            self.next += 1;
            self.write(self.next - 1)
        })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = self.rows - self.next;
        (left, Some(left))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_pg::datatypes::encode_recordbatch;
    use datafusion::arrow::array::{
        ArrayRef, BooleanArray, Float64Array, Int16Array, Int32Array, Int64Array, LargeStringArray,
        RecordBatch, StringArray, StringViewArray,
    };
    use pgwire::api::portal::Format;

    use super::{Rows, data_rows};
    use crate::server::plan::result_fields;

    fn batch(columns: Vec<(&str, ArrayRef)>) -> RecordBatch {
        RecordBatch::try_from_iter(columns).expect("batch")
    }

    /// A row's bytes and its count of columns.
    type Row = (Vec<u8>, i16);

    /// The rows in `format` by both paths, and whether they were written
    /// here.
    fn encoded(batch: &RecordBatch, format: &Format) -> (Vec<Row>, Vec<Row>, bool) {
        let fields = Arc::new(result_fields(&batch.schema(), format, false).expect("description"));
        let theirs = encode_recordbatch(fields.clone(), batch.clone())
            .map(|r| {
                r.map(|r| (r.data.to_vec(), r.field_count))
                    .expect("arrow-pg")
            })
            .collect();
        let ours = data_rows(fields.clone(), batch.clone())
            .map(|r| r.map(|r| (r.data.to_vec(), r.field_count)).expect("ours"))
            .collect();
        (ours, theirs, Rows::of(&fields, batch).is_some())
    }

    /// Every type written here, with NULLs, extremes, empty and non-ASCII
    /// text, in text, in binary, and each column in its own format.
    #[test]
    fn text_integers_and_booleans_encode_as_arrow_pg_encodes_them() {
        let b = batch(vec![
            (
                "s",
                Arc::new(StringArray::from(vec![Some("a \"q\" ü"), None, Some("")])) as ArrayRef,
            ),
            (
                "l",
                Arc::new(LargeStringArray::from(vec![None, Some("long"), Some("x")])),
            ),
            (
                "v",
                Arc::new(StringViewArray::from(vec![
                    Some("a view longer than twelve bytes"),
                    Some("short"),
                    None,
                ])),
            ),
            (
                "i2",
                Arc::new(Int16Array::from(vec![Some(i16::MIN), None, Some(0)])),
            ),
            (
                "i4",
                Arc::new(Int32Array::from(vec![Some(-7), Some(i32::MAX), None])),
            ),
            (
                "i8",
                Arc::new(Int64Array::from(vec![
                    None,
                    Some(i64::MIN),
                    Some(9_007_199_254_740_993),
                ])),
            ),
            (
                "b",
                Arc::new(BooleanArray::from(vec![Some(true), Some(false), None])),
            ),
        ]);
        for format in [
            Format::UnifiedText,
            Format::UnifiedBinary,
            Format::Individual(vec![0, 1, 0, 1, 0, 1, 0]),
            Format::Individual(vec![1, 0, 1, 0, 1, 0, 1]),
        ] {
            let (ours, theirs, here) = encoded(&b, &format);
            assert!(here, "{format:?}: written here");
            assert_eq!(ours, theirs, "{format:?}");
            assert_eq!(ours.len(), 3);
        }
    }

    /// A batch with any other column is arrow-pg's, whole; an empty batch
    /// has no rows either way.
    #[test]
    fn any_other_column_leaves_the_batch_to_arrow_pg() {
        let b = batch(vec![
            ("i4", Arc::new(Int32Array::from(vec![1, 2])) as ArrayRef),
            ("d", Arc::new(Float64Array::from(vec![0.1, f64::NAN]))),
        ]);
        let (ours, theirs, here) = encoded(&b, &Format::UnifiedText);
        assert!(!here);
        assert_eq!(ours, theirs);
        let empty = batch(vec![(
            "i4",
            Arc::new(Int32Array::from(Vec::<i32>::new())) as ArrayRef,
        )]);
        let (ours, theirs, here) = encoded(&empty, &Format::UnifiedBinary);
        assert!(here && ours.is_empty() && theirs.is_empty());
    }
}
