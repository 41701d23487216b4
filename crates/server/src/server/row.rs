//! A prepared point read's row straight into a DataRow, and the row
//! descriptions a prepared query keeps.
//!
//! A point read's answer went through a one-row Arrow batch, a stream of
//! it, and arrow-pg's encoding back into a row, with the description
//! (`result_fields`, and the column names before it) worked out again at
//! every Execute. Under pgbench that was as much of the server's time as
//! the store's read (`perf`, BENCHMARKS.md). Here the engine's [`Row`] is
//! encoded as arrow-pg encodes the same values (the same Rust types through
//! pgwire's `ToSql`/`ToSqlText`), so a client reads the same bytes by
//! either path; the description is made once per plan and format.

use std::sync::{Arc, Mutex};

use datafusion::arrow::datatypes::SchemaRef;
use pgwire::api::Type;
use pgwire::api::portal::Format;
use pgwire::api::results::{DataRowEncoder, FieldFormat, FieldInfo};
use pgwire::error::PgWireResult;
use pgwire::messages::data::DataRow;

use super::plan::{internal, result_fields};
use super::sqlstate::{NUMERIC_OUT_OF_RANGE, error};
use tablesql_engine::{Cell, Row};

/// `row` as a DataRow of `fields` (its description, with each column's
/// type and format).
pub fn data_row(row: &Row, fields: &Arc<Vec<FieldInfo>>) -> PgWireResult<DataRow> {
    if row.len() != fields.len() {
        return Err(internal(format!(
            "a row of {} columns for a description of {}",
            row.len(),
            fields.len()
        )));
    }
    let mut encoder = DataRowEncoder::new(fields.clone());
    for (i, field) in fields.iter().enumerate() {
        let cell = row
            .get(i)
            .ok_or_else(|| internal(format!("no column {i} in a point read's row")))?;
        encode(&mut encoder, cell, field)?;
    }
    Ok(encoder.take_row())
}

fn encode(encoder: &mut DataRowEncoder, cell: Cell<'_>, field: &FieldInfo) -> PgWireResult<()> {
    let mut put = |value: &dyn Encodable| value.put(encoder, field);
    match cell {
        Cell::Null => put(&None::<i8>),
        Cell::Int(v) => put(&v),
        Cell::BigInt(v) => put(&v),
        Cell::Double(v) => put(&v),
        Cell::Text(v) => put(&v),
        Cell::Boolean(v) => put(&v),
        // In text as PostgreSQL writes it, as a batch's are
        // (`batch::as_written`).
        Cell::Timestamp(micros) if field.format() == FieldFormat::Text => {
            let mut text = String::with_capacity(24);
            let zone = *field.datatype() != Type::TIMESTAMP;
            crate::load::pg_text::write_timestamp(micros, zone, &mut text)
                .map_err(|e| internal(e.to_string()))?;
            put(&text)
        }
        // As arrow-pg reads a timestamp column in "+00:00": the instant at
        // offset zero (none where chrono cannot hold it).
        Cell::Timestamp(micros) => {
            put(&chrono::DateTime::from_timestamp_micros(micros).map(|t| t.fixed_offset()))
        }
        Cell::Date(days) => put(
            &chrono::DateTime::from_timestamp(i64::from(days) * 86_400, 0).map(|t| t.date_naive()),
        ),
        Cell::Numeric(units, scale) => {
            let value = rust_decimal::Decimal::try_from_i128_with_scale(units, u32::from(scale))
                .map_err(|e| error(NUMERIC_OUT_OF_RANGE, e.to_string()))?;
            put(&value)
        }
        Cell::Bytes(v) => put(&v),
    }
}

/// A value pgwire can encode in either format, behind one object type so
/// that `encode` names each conversion once.
trait Encodable {
    fn put(&self, encoder: &mut DataRowEncoder, field: &FieldInfo) -> PgWireResult<()>;
}

impl<T: pgwire::types::ToSqlText + postgres_types::ToSql> Encodable for T {
    fn put(&self, encoder: &mut DataRowEncoder, field: &FieldInfo) -> PgWireResult<()> {
        encoder.encode_field_with_type_and_format(
            self,
            field.datatype(),
            field.format(),
            field.format_options(),
        )
    }
}

/// The row descriptions of one prepared query, made once per plan (a
/// change of the catalog plans it again, with a schema of its own) and
/// result format.
#[derive(Debug, Default)]
pub struct Descriptions {
    /// Text, then binary.
    made: Mutex<[Option<Described>; 2]>,
}

/// A schema, and its description in one format.
type Described = (SchemaRef, Arc<Vec<FieldInfo>>);

impl Descriptions {
    /// The description of `schema` in `format`; `catalog` as
    /// `result_fields` takes it.
    pub fn of(
        &self,
        schema: &SchemaRef,
        format: &Format,
        catalog: bool,
    ) -> PgWireResult<Arc<Vec<FieldInfo>>> {
        let slot = match format {
            Format::UnifiedText => 0,
            Format::UnifiedBinary => 1,
            Format::Individual(_) => return Ok(Arc::new(result_fields(schema, format, catalog)?)),
        };
        if let Ok(made) = self.made.lock()
            && let Some((described, fields)) = &made[slot]
            && Arc::ptr_eq(described, schema)
        {
            return Ok(fields.clone());
        }
        let fields = Arc::new(result_fields(schema, format, catalog)?);
        if let Ok(mut made) = self.made.lock() {
            made[slot] = Some((schema.clone(), fields.clone()));
        }
        Ok(fields)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::common::ParamValues;
    use datafusion::scalar::ScalarValue;
    use pgwire::api::portal::Format;

    use super::data_row;
    use crate::server::plan::result_fields;
    use crate::storage::MemoryStore;
    use tablesql_engine::{Engine, EngineOptions};

    /// Every column type a table maps, in a row of values and a row of
    /// NULLs, through the row path and the batch path, in both formats:
    /// a client must read the same bytes whichever path a read took.
    #[tokio::test]
    async fn a_point_reads_row_encodes_as_its_batch_does_in_text_and_binary() {
        let engine = Engine::with_store(Arc::new(MemoryStore::new()), EngineOptions::default())
            .await
            .expect("engine");
        let session = engine.session();
        session
            .collect(
                "CREATE TABLE every (k TEXT PRIMARY KEY, i INT, b BIGINT, d DOUBLE, t TEXT, \
                 u UUID, f BOOLEAN, ts TIMESTAMP, dt DATE, n NUMERIC(12, 3), y BYTEA)",
            )
            .await
            .expect("create");
        session
            .collect(
                "INSERT INTO every VALUES ('full', -7, 9007199254740993, 0.1, 'a \"q\" ü', \
                 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', true, '2024-02-29 23:59:58.123456', \
                 '1969-12-31', -123456.789, '\\x00ff10'), \
                 ('nulls', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)",
            )
            .await
            .expect("insert");
        for sql in [
            "SELECT * FROM every WHERE k = $1",
            // Reordered, the key among them.
            "SELECT y, n, k, i, dt FROM every WHERE k = $1",
        ] {
            let statement = session.parse(sql).expect("parse").remove(0);
            let prepared = session.prepare_statement(statement).await.expect("prepare");
            assert!(prepared.is_point_read(), "{sql}");
            for key in ["full", "nulls", "absent"] {
                let values = ParamValues::from(vec![ScalarValue::from(key)]);
                let row = session
                    .point_row(&prepared, &values)
                    .await
                    .expect("point read")
                    .expect("a point read");
                let batches = datafusion::physical_plan::common::collect(
                    session
                        .query_prepared(&prepared, &values)
                        .await
                        .expect("query"),
                )
                .await
                .expect("batches");
                for format in [Format::UnifiedText, Format::UnifiedBinary] {
                    let fields = Arc::new(
                        result_fields(&prepared.schema(), &format, false).expect("fields"),
                    );
                    let want: Vec<_> = batches
                        .iter()
                        .flat_map(|b| super::super::batch::data_rows(fields.clone(), b.clone()))
                        .map(|r| r.expect("encoded").data)
                        .collect();
                    let got: Vec<_> = row
                        .iter()
                        .map(|r| data_row(r, &fields).expect("encoded").data)
                        .collect();
                    assert_eq!(got, want, "{sql} with {key} in {format:?}");
                    assert_eq!(got.len(), usize::from(key != "absent"));
                }
            }
        }
    }
}
