//! Index DDL: `CREATE INDEX` declares an index on a mapped table and writes
//! the index rows of its existing base rows; `DROP INDEX` removes the
//! declaration, and with `CASCADE` the rows too.
//!
//! `CREATE INDEX` first stores the declaration marked as building, so that
//! every write from then on keeps the new index's rows while the planner
//! leaves it unused; then it repairs the index partition by partition (the
//! rows a base row lacks are written, guarded by the base row's ETag; see
//! `exec::upkeep`), and only then marks it built. Killed halfway, the
//! declaration stays building, and the same statement run again finishes
//! the job: index rows are named by their base rows' values, so a row
//! written twice is the same row, never a duplicate.

use datafusion::sql::sqlparser::ast::{CreateIndex, ObjectName};

use super::{DdlOutcome, Engine, EngineError};
use crate::catalog::{CatalogError, TableDef, ddl, persist};
use crate::exec::upkeep::{self, IndexHealth, Upkeep};
use crate::keys::KeyBounds;
use crate::storage::{ContinuationToken, IfMatch, KeyRange, Query, RowKey, WriteOp};

/// Repair rounds `CREATE INDEX` makes while concurrent writes conflict.
const ROUNDS: usize = 3;

impl Engine {
    /// `CREATE INDEX name ON table (columns) [WITH (...)]`; `progress`
    /// hears of the base rows read so far as the rows are written.
    pub async fn create_index(
        &self,
        create: &CreateIndex,
        mut progress: impl FnMut(u64),
    ) -> Result<DdlOutcome, EngineError> {
        let table = ddl::object_name(&create.table_name)?;
        let mut def = self.mapped_def(&table).await?;
        let mut index = ddl::index_from_create(create, &def)?;
        let mut outcome = DdlOutcome::default();
        match def.indexes.iter().position(|i| i.name == index.name) {
            // Killed while building: the same declaration resumes.
            Some(i) if def.indexes[i].building && same(&def.indexes[i], &index) => {}
            Some(_) if create.if_not_exists => {
                outcome.notices.push(format!(
                    "relation \"{}\" already exists, skipping",
                    index.name
                ));
                return Ok(outcome);
            }
            Some(_) => {
                return Err(CatalogError::Inconsistent {
                    table,
                    reason: format!("index {} already exists", index.name),
                }
                .into());
            }
            None => {
                index.building = true;
                def.indexes.push(index.clone());
                def.validate()?;
                persist::save(self.store.as_ref(), &def, true).await?;
                self.refresh().await?;
            }
        }
        let position = def
            .indexes
            .iter()
            .position(|i| i.name == index.name)
            .unwrap_or_default();
        // Rows a concurrent writer changed during a round are left to it;
        // a further round sees them as they are now.
        let mut health = Vec::new();
        for _ in 0..ROUNDS {
            health = upkeep::run(
                self.store.as_ref(),
                &def,
                &[position],
                Upkeep::Repair,
                &mut progress,
            )
            .await
            .map_err(datafusion::error::DataFusionError::from)?;
            if health.iter().all(|h| h.conflicts == 0) {
                break;
            }
        }
        if let Some(h) = health.iter().find(|h| h.unindexable > 0 || h.conflicts > 0) {
            return Err(CatalogError::Inconsistent {
                table,
                reason: format!(
                    "index {} stays unused (building): {} base rows have values its template cannot write and {} changed during every round (e.g. {}); fix them and run CREATE INDEX again, or DROP INDEX {}",
                    h.index,
                    h.unindexable,
                    h.conflicts,
                    h.examples.join("; "),
                    h.index
                ),
            }
            .into());
        }
        // Only the mark changes: the definition is read again, so a change
        // made meanwhile (another index) is kept.
        let mut latest = self.mapped_def(&table).await?;
        match latest.indexes.iter_mut().find(|i| i.name == index.name) {
            Some(ix) if same(ix, &index) => ix.building = false,
            _ => {
                return Err(CatalogError::Inconsistent {
                    table,
                    reason: format!(
                        "index {} was changed or dropped while it was built",
                        index.name
                    ),
                }
                .into());
            }
        }
        persist::save(self.store.as_ref(), &latest, true).await?;
        self.refresh().await?;
        for h in &health {
            outcome.notices.push(format!(
                "index {} on {}: {} base rows in {} partitions, {} index rows written{}",
                h.index,
                def.name,
                h.base_rows,
                h.partitions,
                h.repaired,
                if h.conflicts > 0 {
                    format!(
                        " ({} rows changed meanwhile kept their writers' index rows)",
                        h.conflicts
                    )
                } else {
                    String::new()
                }
            ));
        }
        Ok(outcome)
    }

    /// `DROP INDEX [IF EXISTS] name` (or `table.name`); with `cascade` its
    /// rows are deleted too, partition by partition.
    pub async fn drop_index(
        &self,
        names: &[ObjectName],
        if_exists: bool,
        cascade: bool,
    ) -> Result<DdlOutcome, EngineError> {
        let mut outcome = DdlOutcome::default();
        for n in names {
            let parts: Vec<String> =
                n.0.iter()
                    .filter_map(|p| p.as_ident().map(crate::catalog::normalize_ident))
                    .collect();
            let (table, index) = match parts.as_slice() {
                [index] => (None, index.clone()),
                [table, index] => (Some(table.clone()), index.clone()),
                _ => {
                    return Err(CatalogError::Definition(format!(
                        "DROP INDEX names an index or table.index, not {n}"
                    ))
                    .into());
                }
            };
            let defs = persist::load(self.store.as_ref()).await?;
            let owners: Vec<&TableDef> = defs
                .iter()
                .filter(|d| table.as_ref().is_none_or(|t| *t == d.name))
                .filter(|d| d.indexes.iter().any(|i| i.name == index))
                .collect();
            let mut def = match owners.as_slice() {
                [one] => (*one).clone(),
                [] if if_exists => {
                    outcome
                        .notices
                        .push(format!("index \"{index}\" does not exist, skipping"));
                    continue;
                }
                [] => {
                    return Err(CatalogError::Definition(format!(
                        "index \"{index}\" does not exist"
                    ))
                    .into());
                }
                many => {
                    let tables: Vec<&str> = many.iter().map(|d| d.name.as_str()).collect();
                    return Err(CatalogError::Definition(format!(
                        "index \"{index}\" is declared on {}: name it as table.{index}",
                        tables.join(" and ")
                    ))
                    .into());
                }
            };
            let Some(position) = def.indexes.iter().position(|i| i.name == index) else {
                continue;
            };
            let dropped = def.indexes.remove(position);
            persist::save(self.store.as_ref(), &def, true).await?;
            self.refresh().await?;
            if cascade {
                let n = self.delete_rows(&def, &dropped.row_key).await?;
                outcome
                    .notices
                    .push(format!("deleted {n} rows of index {index} on {}", def.name));
            }
        }
        Ok(outcome)
    }

    /// Checks the index rows of mapped table `table` (one index, or all),
    /// and with `repair` fixes them (see `exec::upkeep`); `progress`
    /// hears of the base rows read so far.
    pub async fn index_upkeep(
        &self,
        table: &str,
        index: Option<&str>,
        repair: bool,
        progress: impl FnMut(u64),
    ) -> Result<Vec<IndexHealth>, EngineError> {
        let def = self.mapped_def(table).await?;
        let positions = crate::planner::index_functions::positions(&def, index)?;
        let upkeep = if repair {
            Upkeep::Repair
        } else {
            Upkeep::Check
        };
        Ok(
            upkeep::run(self.store.as_ref(), &def, &positions, upkeep, progress)
                .await
                .map_err(datafusion::error::DataFusionError::from)?,
        )
    }

    async fn mapped_def(&self, name: &str) -> Result<TableDef, EngineError> {
        persist::load(self.store.as_ref())
            .await?
            .into_iter()
            .find(|d| d.name == name)
            .ok_or_else(|| CatalogError::UnknownTable(name.to_owned()).into())
    }

    /// Deletes every row whose RowKey `template` writes, per partition.
    async fn delete_rows(
        &self,
        def: &TableDef,
        template: &crate::keys::KeyTemplate,
    ) -> Result<u64, EngineError> {
        let rows = match template
            .prefix_range(&[], None)
            .map_err(CatalogError::from)?
        {
            KeyBounds::Range { start, end } => KeyRange {
                start: start.map(RowKey::from_stored),
                end: end.map(RowKey::from_stored),
            },
            KeyBounds::All | KeyBounds::Empty => return Ok(0),
        };
        let mut query = Query::all().select(Vec::<String>::new());
        query.rows = rows;
        let table = &def.storage_table;
        let mut deleted = 0;
        let mut token: Option<ContinuationToken> = None;
        loop {
            let page = self.store.query(table, &query, token.as_ref()).await?;
            // One transaction per partition's run of rows, 100 at most.
            let mut batch: Vec<WriteOp> = Vec::new();
            for e in page.entities {
                if batch.len() == 100
                    || batch
                        .first()
                        .is_some_and(|b| b.keys().0 != e.partition_key())
                {
                    deleted += batch.len() as u64;
                    self.store
                        .execute_batch(table, std::mem::take(&mut batch))
                        .await?;
                }
                batch.push(WriteOp::Delete {
                    partition_key: e.partition_key().clone(),
                    row_key: e.row_key().clone(),
                    if_match: IfMatch::Any,
                });
            }
            if !batch.is_empty() {
                deleted += batch.len() as u64;
                self.store.execute_batch(table, batch).await?;
            }
            match page.continuation {
                Some(next) => token = Some(next),
                None => return Ok(deleted),
            }
        }
    }
}

/// Whether two declarations are the same but for their building mark.
fn same(a: &crate::catalog::IndexDef, b: &crate::catalog::IndexDef) -> bool {
    a.row_key == b.row_key && a.covering == b.covering
}
