//! `pg_index`, `pg_constraint` and the `pg_indexes` view (DuckDB's
//! postgres extension reads it to load a catalog): PostgreSQL's columns and types
//! (`int2vector` and `int2[]` as lists, so that `unnest`, subscripts and
//! `_pg_expandarray` read them; see `server::vectors`), with a row per index and per primary key
//! of the tables tablesql serves.
//!
//! A vector's subscripts count from 0, as PostgreSQL's (`indkey[0]` is the
//! first column; `server::vectors::VectorSubscripts`).
//!
//! datafusion-pg-catalog ships both as static copies of a PostgreSQL
//! install: rows for system catalogs whose oids its own `pg_class` never
//! assigns, with the vectors as text (`'1 2'`). Those rows point nowhere
//! here, so they are left out.

use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::common::ScalarValue;
use datafusion::error::Result;
use datafusion_pg_catalog::pg_catalog::oid_field::{kind, oid_field};

use super::relations::{Relations, int2_list, oid_list, rows_batch};
use crate::server::vectors::vector_field;

fn list(name: &str, item: DataType) -> Field {
    Field::new(
        name,
        DataType::List(Arc::new(Field::new("item", item, true))),
        true,
    )
}

fn flag(name: &str) -> Field {
    Field::new(name, DataType::Boolean, false)
}

pub fn pg_index_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        oid_field("indexrelid", kind::OID, false),
        oid_field("indrelid", kind::OID, false),
        Field::new("indnatts", DataType::Int16, false),
        Field::new("indnkeyatts", DataType::Int16, false),
        flag("indisunique"),
        flag("indnullsnotdistinct"),
        flag("indisprimary"),
        flag("indisexclusion"),
        flag("indimmediate"),
        flag("indisclustered"),
        flag("indisvalid"),
        flag("indcheckxmin"),
        flag("indisready"),
        flag("indislive"),
        flag("indisreplident"),
        vector_field("indkey", DataType::Int16, "int2vector"),
        vector_field("indcollation", DataType::Int32, "oidvector"),
        vector_field("indclass", DataType::Int32, "oidvector"),
        vector_field("indoption", DataType::Int16, "int2vector"),
        Field::new("indexprs", DataType::Utf8, true),
        Field::new("indpred", DataType::Utf8, true),
    ]))
}

pub fn pg_index(relations: &Relations) -> Result<RecordBatch> {
    let rows: Vec<_> = relations
        .indexes
        .iter()
        .map(|ix| {
            let n = i16::try_from(ix.attnums.len()).unwrap_or(i16::MAX);
            let zeros = vec![0; ix.attnums.len()];
            vec![
                ("indexrelid", ScalarValue::Int32(Some(ix.oid))),
                ("indrelid", ScalarValue::Int32(Some(ix.table))),
                ("indnatts", ScalarValue::Int16(Some(n))),
                ("indnkeyatts", ScalarValue::Int16(Some(n))),
                ("indisunique", ScalarValue::Boolean(Some(ix.unique))),
                ("indisprimary", ScalarValue::Boolean(Some(ix.primary))),
                ("indimmediate", ScalarValue::Boolean(Some(true))),
                ("indisvalid", ScalarValue::Boolean(Some(ix.valid))),
                ("indisready", ScalarValue::Boolean(Some(true))),
                ("indislive", ScalarValue::Boolean(Some(true))),
                ("indkey", int2_list(&ix.attnums)),
                ("indcollation", oid_list(&zeros)),
                ("indclass", oid_list(&zeros)),
                ("indoption", int2_list(&vec![0; ix.attnums.len()])),
            ]
        })
        .collect();
    rows_batch(&pg_index_schema(), &rows)
}

pub fn pg_constraint_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        oid_field("oid", kind::OID, false),
        Field::new("conname", DataType::Utf8, false),
        oid_field("connamespace", kind::OID, false),
        Field::new("contype", DataType::Utf8, false),
        flag("condeferrable"),
        flag("condeferred"),
        flag("convalidated"),
        oid_field("conrelid", kind::OID, false),
        oid_field("contypid", kind::OID, false),
        oid_field("conindid", kind::OID, false),
        oid_field("conparentid", kind::OID, false),
        oid_field("confrelid", kind::OID, false),
        Field::new("confupdtype", DataType::Utf8, false),
        Field::new("confdeltype", DataType::Utf8, false),
        Field::new("confmatchtype", DataType::Utf8, false),
        flag("conislocal"),
        Field::new("coninhcount", DataType::Int16, false),
        flag("connoinherit"),
        list("conkey", DataType::Int16),
        list("confkey", DataType::Int16),
        list("conpfeqop", DataType::Int32),
        list("conppeqop", DataType::Int32),
        list("conffeqop", DataType::Int32),
        list("confdelsetcols", DataType::Int16),
        list("conexclop", DataType::Int32),
        Field::new("conbin", DataType::Utf8, true),
    ]))
}

pub fn pg_constraint(relations: &Relations) -> Result<RecordBatch> {
    let rows: Vec<_> = relations
        .indexes
        .iter()
        .filter_map(|ix| {
            let oid = ix.constraint?;
            Some(vec![
                ("oid", ScalarValue::Int32(Some(oid))),
                ("conname", ScalarValue::from(ix.name.as_str())),
                ("connamespace", ScalarValue::Int32(Some(ix.namespace))),
                ("contype", ScalarValue::from("p")),
                ("convalidated", ScalarValue::Boolean(Some(true))),
                ("conrelid", ScalarValue::Int32(Some(ix.table))),
                ("conindid", ScalarValue::Int32(Some(ix.oid))),
                ("confupdtype", ScalarValue::from(" ")),
                ("confdeltype", ScalarValue::from(" ")),
                ("confmatchtype", ScalarValue::from(" ")),
                ("conislocal", ScalarValue::Boolean(Some(true))),
                ("connoinherit", ScalarValue::Boolean(Some(true))),
                ("conkey", int2_list(&ix.attnums)),
            ])
        })
        .collect();
    rows_batch(&pg_constraint_schema(), &rows)
}

/// The `pg_indexes` view: a row per index, with the definition
/// `pg_get_indexdef` gives.
pub fn pg_indexes_schema() -> SchemaRef {
    Arc::new(Schema::new(
        [
            "schemaname",
            "tablename",
            "indexname",
            "tablespace",
            "indexdef",
        ]
        .map(|name| Field::new(name, DataType::Utf8, name == "tablespace"))
        .to_vec(),
    ))
}

pub fn pg_indexes(relations: &Relations) -> Result<RecordBatch> {
    let rows: Vec<_> = relations
        .indexes
        .iter()
        .map(|ix| {
            vec![
                ("schemaname", ScalarValue::from(ix.schema.as_str())),
                ("tablename", ScalarValue::from(ix.table_name.as_str())),
                ("indexname", ScalarValue::from(ix.name.as_str())),
                ("tablespace", ScalarValue::Utf8(None)),
                (
                    "indexdef",
                    ScalarValue::Utf8(super::functions::index_def(ix, 0)),
                ),
            ]
        })
        .collect();
    rows_batch(&pg_indexes_schema(), &rows)
}
