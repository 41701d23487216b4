//! The relations tablesql adds to `pg_catalog`: each table's primary key
//! and declared indexes, as the index relations (`pg_class` rows of kind
//! `i`), `pg_index` rows and primary-key constraints (`pg_constraint`)
//! that PostgreSQL would show for them.
//!
//! Tables keep the oids datafusion-pg-catalog gives them (its `pg_class`
//! and `pg_attribute` are read as they are); indexes and constraints get
//! oids of their own from [`INDEX_OID_BASE`] up, stable for the server's
//! life, so that a client that cached one finds it again.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use datafusion::arrow::array::{Array, AsArray, BooleanArray, Int32Array, RecordBatch};
use datafusion::arrow::datatypes::{DataType, Field, Int32Type, Schema, SchemaRef};
use datafusion::common::{DataFusionError, ScalarValue};
use datafusion::error::Result;

use crate::engine::{IndexInfo, TableInfo};

/// The first oid of an index or constraint: far above the oids
/// datafusion-pg-catalog counts up from 16384, one per schema and table.
pub const INDEX_OID_BASE: i32 = 1_000_000_000;

/// The schemas a bare table name finds (`pg_table_is_visible`): the
/// session's search path, which is fixed at `public`, and `pg_catalog`.
const VISIBLE_SCHEMAS: [&str; 2] = ["public", "pg_catalog"];

/// A relation of datafusion-pg-catalog's `pg_class`.
#[derive(Debug, Clone)]
pub struct Relation {
    pub namespace: i32,
    pub schema: String,
    pub name: String,
    /// `relkind`: `r` a table, `v` a view.
    pub kind: String,
}

/// An index relation: a table's primary key or one of its declared indexes.
#[derive(Debug, Clone)]
pub struct IndexRelation {
    pub oid: i32,
    /// The primary key's constraint, `None` for a declared index.
    pub constraint: Option<i32>,
    pub name: String,
    pub table: i32,
    pub namespace: i32,
    pub schema: String,
    pub table_name: String,
    pub columns: Vec<String>,
    /// 1-based column numbers in the table, as `pg_attribute` counts them.
    pub attnums: Vec<i16>,
    pub primary: bool,
    /// `CREATE UNIQUE INDEX` (the primary key is unique too).
    pub unique: bool,
    /// A global index (`WITH (global = true)`).
    pub global: bool,
    /// False while `CREATE INDEX` is writing its rows.
    pub valid: bool,
}

/// What the catalog showed at its last read.
#[derive(Debug, Default)]
pub struct Relations {
    pub tables: HashMap<i32, Relation>,
    pub indexes: Vec<IndexRelation>,
}

impl Relations {
    /// `pg_table_is_visible`: false only for a relation known to live in a
    /// schema off the search path (`raw`, `information_schema`).
    pub fn visible(&self, oid: i32) -> bool {
        let schema = match self.tables.get(&oid) {
            Some(t) => t.schema.as_str(),
            None => match self.index(oid) {
                Some(ix) => ix.schema.as_str(),
                None => return true,
            },
        };
        VISIBLE_SCHEMAS.contains(&schema)
    }

    pub fn index(&self, oid: i32) -> Option<&IndexRelation> {
        self.indexes.iter().find(|ix| ix.oid == oid)
    }

    pub fn constraint(&self, oid: i32) -> Option<&IndexRelation> {
        self.indexes.iter().find(|ix| ix.constraint == Some(oid))
    }
}

/// What an oid of [`Known`] names: an index declared `t_pkey` is not the
/// primary key's index of the same name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    PrimaryKey,
    Constraint,
    Index,
}

/// The relations of the last read, shared by the catalog tables that
/// build them and the functions that look oids up in them.
#[derive(Debug, Default)]
pub struct Known {
    relations: RwLock<Arc<Relations>>,
    /// (schema, table, what, name) to oid, never forgotten.
    oids: Mutex<HashMap<(String, String, Kind, String), i32>>,
}

impl Known {
    pub fn current(&self) -> Arc<Relations> {
        self.relations
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn oid(&self, schema: &str, table: &str, kind: Kind, name: &str) -> i32 {
        let mut oids = self.oids.lock().unwrap_or_else(PoisonError::into_inner);
        let next = INDEX_OID_BASE.saturating_add(i32::try_from(oids.len()).unwrap_or(i32::MAX));
        *oids
            .entry((schema.to_owned(), table.to_owned(), kind, name.to_owned()))
            .or_insert(next)
    }

    /// Builds the relations from datafusion-pg-catalog's `pg_class` and
    /// `pg_namespace` rows and the engine's tables, and keeps them.
    pub fn update(
        &self,
        pg_class: &[RecordBatch],
        pg_namespace: &[RecordBatch],
        tables: &[TableInfo],
    ) -> Result<Arc<Relations>> {
        let mut relations = Relations {
            tables: relations_of(pg_class, &namespaces_of(pg_namespace)?)?,
            indexes: Vec::new(),
        };
        for t in tables {
            let found = relations
                .tables
                .iter()
                .find(|(_, r)| r.schema == t.schema && r.name == t.name);
            if let Some((&table, r)) = found {
                let namespace = r.namespace;
                relations
                    .indexes
                    .extend(self.indexes_of(t, table, namespace));
            }
        }
        let relations = Arc::new(relations);
        *self
            .relations
            .write()
            .unwrap_or_else(PoisonError::into_inner) = relations.clone();
        Ok(relations)
    }

    /// Table `t`'s primary key and declared indexes, as index relations.
    fn indexes_of(&self, t: &TableInfo, table: i32, namespace: i32) -> Vec<IndexRelation> {
        let attnums = |cols: &[String]| -> Vec<i16> {
            cols.iter()
                .map(|c| {
                    t.columns
                        .iter()
                        .position(|x| x == c)
                        .and_then(|p| i16::try_from(p + 1).ok())
                        .unwrap_or(0)
                })
                .collect()
        };
        // The primary key is unique; a declared index is where its
        // definition says so.
        let index = |name: String, columns: &[String], primary: bool, info: Option<&IndexInfo>| {
            let kind = if primary {
                Kind::PrimaryKey
            } else {
                Kind::Index
            };
            IndexRelation {
                oid: self.oid(&t.schema, &t.name, kind, &name),
                constraint: primary.then(|| self.oid(&t.schema, &t.name, Kind::Constraint, &name)),
                table,
                namespace,
                schema: t.schema.clone(),
                table_name: t.name.clone(),
                columns: columns.to_vec(),
                attnums: attnums(columns),
                primary,
                unique: primary || info.is_some_and(|i| i.unique),
                global: info.is_some_and(|i| i.global),
                valid: info.is_none_or(|i| !i.building),
                name,
            }
        };
        let mut out = Vec::new();
        if !t.primary_key.is_empty() {
            out.push(index(
                format!("{}_pkey", t.name),
                &t.primary_key,
                true,
                None,
            ));
        }
        for ix in &t.indexes {
            out.push(index(ix.name.clone(), &ix.columns, false, Some(ix)));
        }
        out
    }
}

/// `pg_namespace`'s oids to names.
fn namespaces_of(pg_namespace: &[RecordBatch]) -> Result<HashMap<i32, String>> {
    let mut namespaces = HashMap::new();
    for batch in pg_namespace {
        let oids = int32_column(batch, "oid")?;
        let names = string_column(batch, "nspname")?;
        for i in 0..batch.num_rows() {
            namespaces.insert(oids.value(i), names.value(i).to_owned());
        }
    }
    Ok(namespaces)
}

/// `pg_class`'s relations by oid.
fn relations_of(
    pg_class: &[RecordBatch],
    namespaces: &HashMap<i32, String>,
) -> Result<HashMap<i32, Relation>> {
    let mut out = HashMap::new();
    for batch in pg_class {
        let oids = int32_column(batch, "oid")?;
        let names = string_column(batch, "relname")?;
        let spaces = int32_column(batch, "relnamespace")?;
        let kinds = string_column(batch, "relkind")?;
        for i in 0..batch.num_rows() {
            out.insert(
                oids.value(i),
                Relation {
                    namespace: spaces.value(i),
                    schema: namespaces
                        .get(&spaces.value(i))
                        .cloned()
                        .unwrap_or_default(),
                    name: names.value(i).to_owned(),
                    kind: kinds.value(i).to_owned(),
                },
            );
        }
    }
    Ok(out)
}

pub(super) fn column<'a>(batch: &'a RecordBatch, name: &str) -> Result<&'a Arc<dyn Array>> {
    batch
        .column_by_name(name)
        .ok_or_else(|| DataFusionError::Internal(format!("pg_catalog: no column {name}")))
}

pub(super) fn int32_column<'a>(
    batch: &'a RecordBatch,
    name: &str,
) -> Result<&'a datafusion::arrow::array::PrimitiveArray<Int32Type>> {
    column(batch, name)?
        .as_primitive_opt::<Int32Type>()
        .ok_or_else(|| DataFusionError::Internal(format!("pg_catalog: {name} is not int4")))
}

fn string_column<'a>(
    batch: &'a RecordBatch,
    name: &str,
) -> Result<&'a datafusion::arrow::array::StringArray> {
    column(batch, name)?
        .as_string_opt::<i32>()
        .ok_or_else(|| DataFusionError::Internal(format!("pg_catalog: {name} is not text")))
}

/// Rows given as (column, value) pairs, as a batch of `schema`: a column a
/// row leaves out is NULL where it may be, else its type's zero (`0`,
/// `false`, `''`, an empty list).
pub fn rows_batch(schema: &SchemaRef, rows: &[Vec<(&str, ScalarValue)>]) -> Result<RecordBatch> {
    let columns = schema
        .fields()
        .iter()
        .map(|field| {
            let values = rows
                .iter()
                .map(|row| match row.iter().find(|(n, _)| *n == field.name()) {
                    Some((_, v)) => Ok(v.clone()),
                    None if field.is_nullable() => ScalarValue::try_from(field.data_type()),
                    None => ScalarValue::new_default(field.data_type()),
                })
                .collect::<Result<Vec<_>>>()?;
            if values.is_empty() {
                return Ok(datafusion::arrow::array::new_empty_array(field.data_type()));
            }
            // Typed to the field: a NULL list scalar may carry another
            // element type.
            let array = ScalarValue::iter_to_array(values)?;
            Ok(datafusion::arrow::compute::cast(&array, field.data_type())?)
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(RecordBatch::try_new(schema.clone(), columns)?)
}

/// `int2[]`, `int2vector`.
pub fn int2_list(values: &[i16]) -> ScalarValue {
    let items: Vec<ScalarValue> = values
        .iter()
        .map(|v| ScalarValue::Int16(Some(*v)))
        .collect();
    ScalarValue::List(ScalarValue::new_list_nullable(&items, &DataType::Int16))
}

/// `oidvector`, `oid[]`.
pub fn oid_list(values: &[i32]) -> ScalarValue {
    let items: Vec<ScalarValue> = values
        .iter()
        .map(|v| ScalarValue::Int32(Some(*v)))
        .collect();
    ScalarValue::List(ScalarValue::new_list_nullable(&items, &DataType::Int32))
}

/// datafusion-pg-catalog's `pg_class` rows with each table's
/// `relhasindex` set, a `reloptions` column, and an `i` row per index.
pub fn pg_class(
    schema: &SchemaRef,
    theirs: &[RecordBatch],
    relations: &Relations,
) -> Result<RecordBatch> {
    let mut batches = Vec::new();
    for batch in theirs {
        let oids = int32_column(batch, "oid")?;
        let has_index: BooleanArray = (0..batch.num_rows())
            .map(|i| Some(relations.indexes.iter().any(|ix| ix.table == oids.value(i))))
            .collect();
        // No table here is stored in pages: 0, as PostgreSQL says of a
        // table it has not measured. datafusion-pg-catalog's 1 made
        // DuckDB split its scans by `ctid` page ranges.
        let pages: Arc<dyn Array> = Arc::new(Int32Array::from(vec![0; batch.num_rows()]));
        let mut columns = Vec::with_capacity(schema.fields().len());
        for field in schema.fields() {
            columns.push(match field.name().as_str() {
                "relhasindex" => Arc::new(has_index.clone()) as Arc<dyn Array>,
                "relpages" => pages.clone(),
                name => match batch.column_by_name(name) {
                    Some(c) => c.clone(),
                    None => datafusion::arrow::array::new_null_array(
                        field.data_type(),
                        batch.num_rows(),
                    ),
                },
            });
        }
        batches.push(RecordBatch::try_new(schema.clone(), columns)?);
    }
    let rows: Vec<Vec<(&str, ScalarValue)>> = relations
        .indexes
        .iter()
        .map(|ix| {
            vec![
                ("oid", ScalarValue::Int32(Some(ix.oid))),
                ("relname", ScalarValue::from(ix.name.as_str())),
                ("relnamespace", ScalarValue::Int32(Some(ix.namespace))),
                ("relam", ScalarValue::Int32(Some(BTREE))),
                ("relfilenode", ScalarValue::Int32(Some(ix.oid))),
                ("relpages", ScalarValue::Int32(Some(1))),
                ("relkind", ScalarValue::from("i")),
                ("relpersistence", ScalarValue::from("p")),
                ("relispopulated", ScalarValue::Boolean(Some(true))),
                ("relreplident", ScalarValue::from("n")),
                (
                    "relnatts",
                    ScalarValue::Int16(i16::try_from(ix.columns.len()).ok()),
                ),
            ]
        })
        .collect();
    batches.push(rows_batch(schema, &rows)?);
    Ok(datafusion::arrow::compute::concat_batches(
        schema, &batches,
    )?)
}

/// PostgreSQL's btree access method (`pg_am`): what Table Storage's one
/// index, ordered by key, is.
pub const BTREE: i32 = 403;

/// `pg_class`'s schema: datafusion-pg-catalog's and `reloptions`.
pub fn pg_class_schema(theirs: &Schema) -> SchemaRef {
    let mut fields: Vec<Field> = theirs.fields().iter().map(|f| f.as_ref().clone()).collect();
    if !fields.iter().any(|f| f.name() == "reloptions") {
        fields.push(Field::new(
            "reloptions",
            DataType::List(Arc::new(Field::new("item", DataType::Utf8, true))),
            true,
        ));
    }
    Arc::new(Schema::new(fields))
}
