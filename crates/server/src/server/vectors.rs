//! `int2vector` and `oidvector`, the catalogs' vector types (`pg_index.indkey`,
//! `indoption`, `indclass`): lists inside a query, so that `unnest`,
//! subscripts and `_pg_expandarray` read them, and on the wire the
//! space-separated text PostgreSQL sends (`1 2 3`), which drivers split
//! themselves (SQLAlchemy reads `indoption` so).
//!
//! arrow-pg knows no vector type, so a catalog column declares itself one
//! in its field's metadata, and a result column that still carries the
//! mark is turned to text before it is encoded.
//!
//! A vector's subscripts start at 0 (`indkey[0]` is an index's first
//! column, psqlODBC's primary-key query reads `indkey[ia.attnum - 1]`),
//! where an array's and a list's start at 1: [`VectorSubscripts`], asked
//! as each subscript is planned, adds 1 to a subscript of a marked column,
//! and `generate_subscripts` of one counts from 0 (`pg_functions`).

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, RecordBatch, StringBuilder};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::common::cast::{as_list_array, as_string_array};
use datafusion::common::{DFSchema, ExprSchema};
use datafusion::error::Result;
use datafusion::logical_expr::planner::{ExprPlanner, PlannerResult, RawFieldAccessExpr};
use datafusion::logical_expr::{Expr, GetFieldAccess, lit};
use pgwire::api::results::FieldInfo;

/// datafusion-pg-catalog's mark of an oid column (arrow-pg's contract).
const OID_ALIAS_KEY: &str = "pg.oid_alias";

/// The field metadata naming a list column's PostgreSQL vector type.
const VECTOR_KEY: &str = tablesql_engine::planner::pg_functions::PG_VECTOR_KEY;

/// A list field of `item`s that PostgreSQL calls `vector_type`
/// (`int2vector`, `oidvector`).
pub fn vector_field(name: &str, item: DataType, vector_type: &str) -> Field {
    Field::new(
        name,
        DataType::List(Arc::new(Field::new("item", item, true))),
        true,
    )
    .with_metadata(HashMap::from([(
        VECTOR_KEY.to_owned(),
        vector_type.to_owned(),
    )]))
}

/// The expression planner of the module doc.
#[derive(Debug, Default)]
pub struct VectorSubscripts;

impl ExprPlanner for VectorSubscripts {
    fn plan_field_access(
        &self,
        expr: RawFieldAccessExpr,
        schema: &DFSchema,
    ) -> Result<PlannerResult<RawFieldAccessExpr>> {
        let RawFieldAccessExpr { field_access, expr } = expr;
        let field_access = match field_access {
            GetFieldAccess::ListIndex { key }
                if matches!(&expr, Expr::Column(c)
                    if schema.field_from_column(c).is_ok_and(|f| is_vector(f))) =>
            {
                GetFieldAccess::ListIndex {
                    key: Box::new(*key + lit(1i64)),
                }
            }
            other => other,
        };
        Ok(PlannerResult::Original(RawFieldAccessExpr {
            field_access,
            expr,
        }))
    }
}

/// The PostgreSQL type a vector column is described as, where its text
/// is sent: psqlODBC reads `indkey` into an array of shorts only when the
/// column is an `int2vector` (its default C type), and as text it took the
/// characters for numbers. In binary a column stays `text`: the binary form
/// of a vector is an array's, which is not what is sent.
pub fn text_type(field: &Field) -> Option<pgwire::api::Type> {
    if !is_vector(field) {
        return None;
    }
    match field.metadata().get(VECTOR_KEY).map(String::as_str) {
        Some("int2vector") => Some(pgwire::api::Type::INT2_VECTOR),
        Some("oidvector") => Some(pgwire::api::Type::OID_VECTOR),
        _ => None,
    }
}

/// `info` as `text` where [`text_type`] made it a vector.
pub fn described_as_text(info: FieldInfo) -> FieldInfo {
    if ![
        pgwire::api::Type::INT2_VECTOR,
        pgwire::api::Type::OID_VECTOR,
    ]
    .contains(info.datatype())
    {
        return info;
    }
    FieldInfo::new(
        info.name().to_owned(),
        info.table_id(),
        info.column_id(),
        pgwire::api::Type::TEXT,
        info.format(),
    )
}

fn is_vector(field: &Field) -> bool {
    field.metadata().contains_key(VECTOR_KEY) && matches!(field.data_type(), DataType::List(_))
}

/// Whether a result column of a query over the system catalogs is a list
/// of oids, `oid[]` on the wire: the catalogs have no `int4[]` column, so a
/// list of int4 there comes from oids (`array_agg(atttypid)`), whose mark
/// DataFusion drops through aggregates, CASE and UNION. asyncpg's type
/// introspection needs it: it decodes `oid[]` with a built-in codec, while
/// `int4[]` it would have to introspect with the same query, without end.
pub fn is_oid_list(field: &Field) -> bool {
    matches!(field.data_type(), DataType::List(item) if item.data_type() == &DataType::Int32)
}

/// The positions of a result's vector columns; empty for nearly every query.
pub fn vector_columns(schema: &Schema) -> Vec<usize> {
    schema
        .fields()
        .iter()
        .enumerate()
        .filter(|(_, f)| is_vector(f))
        .map(|(i, _)| i)
        .collect()
}

/// The schema as sent: each vector column as text, and the oid mark off
/// every column that is no longer an oid. DataFusion keeps a column's
/// metadata through a cast (`typelem::regtype::text`), and arrow-pg would
/// describe the text as an oid while it sends text: asyncpg then reads four
/// bytes from a one-byte value.
pub fn wire_schema(schema: &Schema, vectors: &[usize]) -> Schema {
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .enumerate()
        .map(|(i, f)| {
            if vectors.contains(&i) {
                Field::new(f.name(), DataType::Utf8, true)
            } else if f.metadata().contains_key(OID_ALIAS_KEY) && f.data_type() != &DataType::Int32
            {
                let mut metadata = f.metadata().clone();
                metadata.remove(OID_ALIAS_KEY);
                f.as_ref().clone().with_metadata(metadata)
            } else {
                f.as_ref().clone()
            }
        })
        .collect();
    Schema::new_with_metadata(fields, schema.metadata().clone())
}

/// A result batch as sent: its vector columns as text.
pub fn wire_batch(batch: RecordBatch, vectors: &[usize]) -> Result<RecordBatch> {
    if vectors.is_empty() {
        return Ok(batch);
    }
    let schema: SchemaRef = Arc::new(wire_schema(&batch.schema(), vectors));
    let columns = batch
        .columns()
        .iter()
        .enumerate()
        .map(|(i, c)| {
            if vectors.contains(&i) {
                as_text(c)
            } else {
                Ok(c.clone())
            }
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(RecordBatch::try_new(schema, columns)?)
}

fn as_text(column: &ArrayRef) -> Result<ArrayRef> {
    let lists = as_list_array(column)?;
    let mut out = StringBuilder::with_capacity(lists.len(), lists.len() * 4);
    for i in 0..lists.len() {
        if lists.is_null(i) {
            out.append_null();
            continue;
        }
        let items = cast(&lists.value(i), &DataType::Utf8)?;
        let items = as_string_array(&items)?;
        let text: Vec<&str> = items.iter().map(|v| v.unwrap_or("0")).collect();
        out.append_value(text.join(" "));
    }
    Ok(Arc::new(out.finish()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Int16Builder, ListBuilder};

    #[test]
    fn a_vector_goes_out_as_spaced_text() {
        let field = vector_field("indkey", DataType::Int16, "int2vector");
        let mut b = ListBuilder::new(Int16Builder::new()).with_field(Arc::new(Field::new(
            "item",
            DataType::Int16,
            true,
        )));
        b.values().append_slice(&[1, 2, 13]);
        b.append(true);
        b.append_null();
        let schema = Arc::new(Schema::new(vec![field]));
        let batch = RecordBatch::try_new(schema.clone(), vec![Arc::new(b.finish())])
            .unwrap_or_else(|e| panic!("{e}"));
        let vectors = vector_columns(&schema);
        assert_eq!(vectors, vec![0]);
        let out = wire_batch(batch, &vectors).unwrap_or_else(|e| panic!("{e}"));
        let text = as_string_array(out.column(0)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(text.value(0), "1 2 13");
        assert!(text.is_null(1));
    }
}
