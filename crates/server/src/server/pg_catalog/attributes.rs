//! `pg_attribute` as drivers read it: datafusion-pg-catalog's rows, with
//! what they lack for the relations tablesql has:
//!
//! - a NUMERIC column's `atttypmod`, its precision and scale as PostgreSQL
//!   packs them. Without it (-1) DuckDB reads a `NUMERIC(12,3)` column as
//!   a DOUBLE, and `format_type(atttypid, atttypmod)` says `numeric`;
//! - the columns of each index relation (`relations.rs`), numbered from 1
//!   in the index's order, under the index's oid: psqlODBC's primary-key
//!   and statistics queries join `pg_attribute` on `pg_index.indexrelid`.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::array::{
    Array, AsArray, BooleanArray, Int16Array, Int32Array, RecordBatch, UInt32Array,
};
use datafusion::arrow::compute::{concat_batches, take};
use datafusion::arrow::datatypes::{DataType, Int16Type, SchemaRef};
use datafusion::common::DataFusionError;
use datafusion::error::Result;

use super::relations::{Relations, column, int32_column};

/// PostgreSQL's `atttypmod` of a column of type `t`: `numeric(p, s)` is
/// `(p << 16 | s) + 4` (`numeric_typmod_in`); -1 for a type without one.
pub fn typmod(t: &DataType) -> i32 {
    match t {
        DataType::Decimal32(p, s)
        | DataType::Decimal64(p, s)
        | DataType::Decimal128(p, s)
        | DataType::Decimal256(p, s)
            if *s >= 0 =>
        {
            ((i32::from(*p) << 16) | i32::from(*s)) + 4
        }
        _ => -1,
    }
}

/// `pg_attribute`: `theirs` (datafusion-pg-catalog's rows, of `schema`)
/// with the type modifiers of the tables' columns (`tables`: a table's oid
/// to its columns, as `pg_attribute` numbers them from 1) and a row per
/// column of each index relation.
pub fn pg_attribute(
    schema: &SchemaRef,
    theirs: &[RecordBatch],
    relations: &Relations,
    tables: &HashMap<i32, SchemaRef>,
) -> Result<RecordBatch> {
    let all = concat_batches(schema, theirs)?;
    let relids = int32_column(&all, "attrelid")?;
    let nums = column(&all, "attnum")?
        .as_primitive_opt::<Int16Type>()
        .ok_or_else(|| DataFusionError::Internal("pg_catalog: attnum is not int2".into()))?;
    let typmods: Int32Array = (0..all.num_rows())
        .map(|i| {
            let field = tables.get(&relids.value(i)).and_then(|s| {
                let n = usize::try_from(nums.value(i)).ok()?.checked_sub(1)?;
                s.fields().get(n).cloned()
            });
            Some(field.map_or(-1, |f| typmod(f.data_type())))
        })
        .collect();
    // The table's row of each index column, to copy under the index's oid.
    let rows: HashMap<(i32, i16), u32> = (0..all.num_rows())
        .filter_map(|i| Some(((relids.value(i), nums.value(i)), u32::try_from(i).ok()?)))
        .collect();
    let (mut taken, mut index_oids, mut index_nums) = (Vec::new(), Vec::new(), Vec::new());
    for ix in &relations.indexes {
        for (n, attnum) in (1..).zip(&ix.attnums) {
            if let Some(row) = rows.get(&(ix.table, *attnum)) {
                taken.push(*row);
                index_oids.push(ix.oid);
                index_nums.push(n);
            }
        }
    }
    let taken = UInt32Array::from(taken);
    let index_oids: Arc<dyn Array> = Arc::new(Int32Array::from(index_oids));
    let index_nums: Arc<dyn Array> = Arc::new(Int16Array::from(index_nums));
    let typmods: Arc<dyn Array> = Arc::new(typmods);
    let mut columns = Vec::with_capacity(schema.fields().len());
    for (field, own) in schema.fields().iter().zip(all.columns()) {
        let own = match field.name().as_str() {
            "atttypmod" => &typmods,
            _ => own,
        };
        let of_indexes = match field.name().as_str() {
            "attrelid" => index_oids.clone(),
            "attnum" => index_nums.clone(),
            // An index's columns have no NOT NULL or default of their own.
            "attnotnull" | "atthasdef" => Arc::new(BooleanArray::from(vec![false; taken.len()])),
            _ => take(own.as_ref(), &taken, None)?,
        };
        columns.push(datafusion::arrow::compute::concat(&[
            own.as_ref(),
            of_indexes.as_ref(),
        ])?);
    }
    Ok(RecordBatch::try_new(schema.clone(), columns)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numeric_typmods_are_postgresqls() {
        // SELECT atttypmod of numeric(12,3), numeric(38,10) in PostgreSQL 15.
        assert_eq!(typmod(&DataType::Decimal128(12, 3)), 786_439);
        assert_eq!(typmod(&DataType::Decimal128(38, 10)), 2_490_382);
        assert_eq!(typmod(&DataType::Int32), -1);
        assert_eq!(typmod(&DataType::Utf8), -1);
    }
}
