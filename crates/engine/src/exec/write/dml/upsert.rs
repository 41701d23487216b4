//! `INSERT ... ON CONFLICT` rows (`planner::upsert`): each proposed row's
//! primary key is looked up first (a point read when the key is the whole
//! RowKey, else a one-entity prefix query); a new key is inserted with its
//! index rows, an existing one left alone (`DO NOTHING`) or updated as an
//! UPDATE is (`DO UPDATE`), If-Match the ETag just read, its old index
//! rows replaced in the same entity group transaction.
//!
//! A blind upsert needs no read, as the storage's guidance advises: on a
//! table without index rows whose primary key is its whole RowKey, a
//! `DO UPDATE SET` of every other column to its `EXCLUDED` value writes the
//! proposed row either way, so it is one InsertOrMerge (which keeps
//! properties the mapping does not declare, as UPDATE does). A row with a
//! NULL among those values takes the read path: a merge cannot remove a
//! property.

use std::sync::Arc;

use datafusion::arrow::array::{Array, AsArray, RecordBatch};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::error::{DataFusionError, Result};
use datafusion::physical_expr::PhysicalExpr;

use super::{Group, Writer};
use crate::exec::ExecError;
use crate::exec::read::decode::decode;
use crate::exec::write::encode::{Columns, entities, primary_prefix};
use crate::storage::{PartitionKey, StoredEntity, WriteOp};

/// Which conflicts `DO NOTHING` skips: PostgreSQL's arbiter. A conflict
/// on anything else fails the statement (23505), as there.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd)]
pub enum Arbiter {
    /// No conflict target: a taken primary key or unique value, any.
    Any,
    /// The primary key's columns (or `<table>_pkey`).
    PrimaryKey,
    /// A unique index's columns, by the index's name.
    Unique(String),
}

impl Arbiter {
    /// Whether a taken primary key is skipped.
    pub fn skips_key(&self) -> bool {
        matches!(self, Arbiter::Any | Arbiter::PrimaryKey)
    }

    /// Whether a value taken in unique index `name` is skipped.
    pub fn skips_unique(&self, name: &str) -> bool {
        match self {
            Arbiter::Any => true,
            Arbiter::PrimaryKey => false,
            Arbiter::Unique(n) => n == name,
        }
    }
}

/// What an upsert does with a row whose key exists.
#[derive(Debug, Clone)]
pub enum OnExisting {
    /// Leaves it, and skips the conflicts its arbiter names.
    Nothing(Arbiter),
    /// Sets the columns at these layout positions, where `filter` holds;
    /// evaluated over `row_schema`: the stored row, then `excluded`.
    Update {
        assignments: Vec<(usize, Arc<dyn PhysicalExpr>)>,
        filter: Option<Arc<dyn PhysicalExpr>>,
        row_schema: SchemaRef,
        /// Whether the update writes the proposed row as it is (see the
        /// module's doc): then no read is needed.
        blind: bool,
    },
}

impl Writer {
    /// The group of one proposed row, or `None` when it writes nothing.
    pub(super) async fn upsert(
        &mut self,
        on_existing: &OnExisting,
        new: &Columns,
        row: usize,
    ) -> Result<Option<(PartitionKey, Group)>> {
        new.refuse_system(&self.layout, row)?;
        let values = new.values(&self.layout, row)?;
        let proposed = entities(&self.def, &values)?;
        let partition = proposed.base.partition_key.clone();
        let prefix = primary_prefix(&self.def, &values)?;
        let key = prefix
            .clone()
            .unwrap_or_else(|| proposed.base.row_key.as_str().to_owned());
        // A key an earlier row of this statement wrote is not in the store
        // yet: that row is the existing one.
        let seen = (partition.clone(), key);
        if self.keys.contains(&seen) {
            return match on_existing {
                OnExisting::Nothing(a) if a.skips_key() => Ok(None),
                OnExisting::Nothing(_) => Err(self.duplicate(&self.shown_key(&values))),
                OnExisting::Update { .. } => Err(ExecError::UpsertTwice {
                    table: self.def.name.clone(),
                }
                .into()),
            };
        }
        if let OnExisting::Update { blind: true, .. } = on_existing
            && proposed.index.is_empty()
            && self.def.global_indexes.is_empty()
            && values.iter().all(Option::is_some)
        {
            self.keys.insert(seen);
            let op = WriteOp::InsertOrMerge(proposed.base);
            return Ok(Some((partition, Group::of(vec![op]))));
        }
        let stored = match &prefix {
            Some(prefix) => self.first_under(&partition, prefix, true).await?,
            None => self
                .store
                .get(&self.layout.table, &partition, &proposed.base.row_key)
                .await
                .map_err(ExecError::from)?,
        };
        let written = match stored {
            None => {
                let ops = std::iter::once(WriteOp::Insert(proposed.base))
                    .chain(proposed.index.into_iter().map(WriteOp::InsertOrReplace))
                    .collect();
                let mut group = Group::of(ops);
                self.global_sides(&mut group, None, Some(&values))?;
                Some((partition, group))
            }
            Some(stored) => {
                let old = if self.def.global_indexes.is_empty() {
                    None
                } else {
                    Some(super::super::upkeep::row_values(&self.def, &stored)?)
                };
                let mut written = self.update_stored(on_existing, stored, new, row).await?;
                if let (Some(old), Some((_, group))) = (old, written.as_mut()) {
                    // The row as the group writes it: its base entity's values.
                    let new_values = group.ops.iter().find_map(WriteOp::entity).map(|e| {
                        self.def
                            .columns
                            .iter()
                            .map(|c| e.properties.get(c.property_name()).cloned())
                            .collect::<Vec<_>>()
                    });
                    if let Some(new_values) = new_values {
                        self.global_sides(group, Some(&old), Some(&new_values))?;
                    }
                }
                written
            }
        };
        let mut written = written;
        if let Some((_, group)) = written.as_mut() {
            self.keys.insert(seen.clone());
            // A row `DO NOTHING` skips for a taken unique value gives its
            // key back (`dml/globals.rs`).
            group.claimed = Some(seen);
        }
        Ok(written)
    }

    /// `DO UPDATE` of the stored row (`None` for `DO NOTHING`, or where its
    /// WHERE does not hold).
    async fn update_stored(
        &mut self,
        on_existing: &OnExisting,
        stored: StoredEntity,
        new: &Columns,
        row: usize,
    ) -> Result<Option<(PartitionKey, Group)>> {
        let (assignments, filter, row_schema) = match on_existing {
            OnExisting::Update {
                assignments,
                filter,
                row_schema,
                ..
            } => (assignments, filter, row_schema),
            OnExisting::Nothing(a) if a.skips_key() => return Ok(None),
            // A unique index is the arbiter: a taken key is an error.
            OnExisting::Nothing(_) => {
                let values = super::super::upkeep::row_values(&self.def, &stored)?;
                return Err(self.duplicate(&self.shown_key(&values)));
            }
        };
        let all: Vec<usize> = (0..self.layout.columns.len()).collect();
        let (old_batch, _) = decode(&self.layout, &all, &self.layout.schema, &[stored])
            .map_err(DataFusionError::from)?;
        let mut columns = old_batch.columns().to_vec();
        columns.extend(new.row(row));
        let both = RecordBatch::try_new(row_schema.clone(), columns)?;
        if let Some(filter) = filter {
            let keep = filter.evaluate(&both)?.into_array(1)?;
            if !keep
                .as_boolean_opt()
                .is_some_and(|k| k.is_valid(0) && k.value(0))
            {
                return Ok(None);
            }
        }
        let old = Columns::new(&self.layout, &old_batch)?;
        let mut next = old.clone();
        for (i, expr) in assignments {
            let value = expr.evaluate(&both)?.into_array(1)?;
            let t = self
                .layout
                .columns
                .get(*i)
                .map(|c| c.1)
                .ok_or_else(|| DataFusionError::Internal(format!("no column {i} to assign")))?;
            next.set(*i, value, t)?;
        }
        self.update(&old, &next, 0).await.map(Some)
    }
}
