//! Index DDL: `CREATE INDEX` declares an index on a mapped table and writes
//! the index rows of its existing base rows; `DROP INDEX` removes the
//! declaration, and with `CASCADE` the rows too (a global index's table,
//! which is its own, always). Every change of the
//! definition is made If-Match the version read (`persist::update`), so
//! concurrent DDL on one table never loses a change.
//!
//! `CREATE INDEX` first stores the declaration marked as building, so that
//! every write from then on keeps the new index's rows while the planner
//! leaves it unused; then it repairs the index partition by partition (the
//! rows a base row lacks are written, guarded by the base row's ETag; see
//! `exec::write::upkeep`), and only then marks it built. Killed halfway, the
//! declaration stays building, and the same statement run again finishes
//! the job: index rows are named by their base rows' values, so a row
//! written twice is the same row, never a duplicate.
//!
//! `DROP INDEX ... CASCADE` marks the index building (unused by reads),
//! deletes its rows, removes the declaration, then deletes the rows writes
//! made meanwhile. Killed before the declaration is gone, the same
//! statement run again finishes the job.

use datafusion::sql::sqlparser::ast::{CreateIndex, ObjectName};

use super::{DdlOutcome, Engine, EngineError, Notice, NoticeKind};
use crate::catalog::{CatalogError, GlobalIndexDef, IndexDef, TableDef, ddl, persist};
use crate::exec::write::upkeep::{self, IndexHealth, Upkeep};
use crate::keys::{KeyBounds, KeyTemplate};
use crate::storage::{
    ContinuationToken, IfMatch, KeyRange, PartitionKey, Query, RowKey, StorageError, WriteOp,
};

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
        let def = self.mapped_def(&table).await?;
        let index = match ddl::index_from_create(create, &def)? {
            ddl::NewIndex::Local(ix) => ix,
            ddl::NewIndex::Global(g) => {
                return Box::pin(self.create_global_index(
                    &table,
                    &def,
                    g,
                    create.if_not_exists,
                    progress,
                ))
                .await;
            }
        };
        let mut outcome = DdlOutcome::default();
        let exists = |reason: String| CatalogError::Inconsistent {
            table: table.clone(),
            reason,
        };
        if def.global_indexes.iter().any(|g| g.name == index.name) {
            if create.if_not_exists {
                outcome.notices.push(Notice::new(
                    NoticeKind::AlreadyExists,
                    format!("relation \"{}\" already exists, skipping", index.name),
                ));
                return Ok(outcome);
            }
            return Err(exists(format!("index {} already exists", index.name)).into());
        }
        match def.indexes.iter().find(|i| i.name == index.name) {
            // Killed while building: the same declaration resumes.
            Some(old) if old.building && same(old, &index) => {}
            Some(old) if old.building => {
                return Err(exists(format!(
                    "index {} is being built with another template ({}); run CREATE INDEX as it was, or DROP INDEX {} first",
                    index.name, old.row_key, index.name
                ))
                .into());
            }
            Some(_) if create.if_not_exists => {
                outcome.notices.push(Notice::new(
                    NoticeKind::AlreadyExists,
                    format!("relation \"{}\" already exists, skipping", index.name),
                ));
                return Ok(outcome);
            }
            Some(_) => return Err(exists(format!("index {} already exists", index.name)).into()),
            None => {
                let building = IndexDef {
                    building: true,
                    ..index.clone()
                };
                persist::update(self.store.as_ref(), &table, |d| {
                    if d.indexes.iter().any(|i| i.name == building.name) {
                        return Err(CatalogError::Inconsistent {
                            table: d.name.clone(),
                            reason: format!("index {} was created meanwhile", building.name),
                        });
                    }
                    d.indexes.push(building.clone());
                    Ok(())
                })
                .await?;
                self.refresh().await?;
            }
        }
        let health = self.backfill(&table, &index.name, &mut progress).await?;
        if health.unindexable > 0 || health.conflicts > 0 {
            return Err(exists(unfinished(&health)).into());
        }
        // Only the mark changes, on the definition as it is now.
        persist::update(self.store.as_ref(), &table, |d| {
            match d.indexes.iter_mut().find(|i| i.name == index.name) {
                Some(ix) if same(ix, &index) => {
                    ix.building = false;
                    Ok(())
                }
                _ => Err(CatalogError::Inconsistent {
                    table: d.name.clone(),
                    reason: format!(
                        "index {} was changed or dropped while it was built",
                        index.name
                    ),
                }),
            }
        })
        .await?;
        self.refresh().await?;
        outcome.notices.push(Notice::new(
            NoticeKind::Done,
            format!(
                "index {} on {}: {} base rows in {} partitions, {} index rows written",
                health.index, table, health.base_rows, health.partitions, health.repaired
            ),
        ));
        Ok(outcome)
    }

    /// `CREATE INDEX ... WITH (global = true)`: a storage table of its own
    /// (a fresh name), the declaration stored as building, every base
    /// row's entity written (see `exec::write::global`), then the mark
    /// cleared. Killed halfway, the same statement run again resumes.
    async fn create_global_index(
        &self,
        table: &str,
        def: &TableDef,
        mut g: GlobalIndexDef,
        if_not_exists: bool,
        mut progress: impl FnMut(u64),
    ) -> Result<DdlOutcome, EngineError> {
        let mut outcome = DdlOutcome::default();
        let exists = |reason: String| CatalogError::Inconsistent {
            table: table.to_owned(),
            reason,
        };
        let local = def.indexes.iter().any(|i| i.name == g.name);
        let name = g.name.clone();
        let already = |mut outcome: DdlOutcome| {
            if if_not_exists {
                outcome.notices.push(Notice::new(
                    NoticeKind::AlreadyExists,
                    format!("relation \"{name}\" already exists, skipping"),
                ));
                Ok(outcome)
            } else {
                Err(EngineError::from(exists(format!(
                    "index {name} already exists"
                ))))
            }
        };
        match def.global_indexes.iter().find(|x| x.name == g.name) {
            // Killed while building: the same declaration resumes.
            Some(old)
                if old.building
                    && old.partition_key == g.partition_key
                    && old.row_key == g.row_key
                    && old.unique == g.unique =>
            {
                g.table = old.table.clone();
            }
            Some(old) if old.building && !if_not_exists => {
                return Err(exists(format!(
                    "index {} is being built with another definition; run CREATE INDEX as it was, or DROP INDEX {} first",
                    g.name, g.name
                ))
                .into());
            }
            Some(_) => return already(outcome),
            None if local => return already(outcome),
            // An application's table: used as it is, made if missing.
            None if g.declared => {
                match self.store.create_table(&g.table).await {
                    Ok(()) | Err(StorageError::TableAlreadyExists(_)) => {}
                    Err(e) => return Err(e.into()),
                }
                self.declare_building(table, &g).await?;
            }
            None => {
                g.table = self.created_storage_table(&g.table).await?;
                self.declare_building(table, &g).await?;
            }
        }
        let def = self.mapped_def(table).await?;
        let now = def
            .global_indexes
            .iter()
            .find(|x| x.name == g.name)
            .ok_or_else(|| exists(format!("index {} was dropped while it was built", g.name)))?;
        let health =
            crate::exec::write::global::upkeep(self.store.as_ref(), &def, now, true, &mut progress)
                .await
                .map_err(datafusion::error::DataFusionError::from)?;
        if health.unindexable > 0 && g.unique.is_some() {
            // As PostgreSQL: a unique index over repeated values is not
            // created (declared, its writes would refuse the repeats).
            persist::update(self.store.as_ref(), table, |d| {
                d.global_indexes.retain(|x| x.name != g.name);
                Ok(())
            })
            .await?;
            self.refresh().await?;
            match self.store.delete_table(&g.table).await {
                Ok(()) | Err(StorageError::TableNotFound(_)) => {}
                Err(e) => return Err(e.into()),
            }
            return Err(exists(format!(
                "could not create unique index {}: {} rows repeat a value ({})",
                g.name,
                health.unindexable,
                health.examples.join("; ")
            ))
            .into());
        }
        if health.unindexable > 0 {
            return Err(exists(unfinished(&health)).into());
        }
        persist::update(self.store.as_ref(), table, |d| {
            match d.global_indexes.iter_mut().find(|x| x.name == g.name) {
                Some(x) => {
                    x.building = false;
                    Ok(())
                }
                None => Err(CatalogError::Inconsistent {
                    table: d.name.clone(),
                    reason: format!("index {} was dropped while it was built", g.name),
                }),
            }
        })
        .await?;
        self.refresh().await?;
        outcome.notices.push(Notice::new(
            NoticeKind::Done,
            format!(
                "global index {} on {} in storage table {}: {} base rows, {} entities written",
                g.name, table, g.table, health.base_rows, health.repaired
            ),
        ));
        Ok(outcome)
    }

    /// Stores global index `g` of `table`, marked building.
    async fn declare_building(&self, table: &str, g: &GlobalIndexDef) -> Result<(), EngineError> {
        let building = GlobalIndexDef {
            building: true,
            ..g.clone()
        };
        persist::update(self.store.as_ref(), table, |d| {
            if d.global_indexes.iter().any(|x| x.name == building.name)
                || d.indexes.iter().any(|x| x.name == building.name)
            {
                return Err(CatalogError::Inconsistent {
                    table: d.name.clone(),
                    reason: format!("index {} was created meanwhile", building.name),
                });
            }
            d.global_indexes.push(building.clone());
            Ok(())
        })
        .await?;
        self.refresh().await
    }

    /// Repairs index `name` of `table` until a round meets no concurrent
    /// change (at most `ROUNDS`); the last round's counts, with the rows
    /// written summed over the rounds.
    async fn backfill(
        &self,
        table: &str,
        name: &str,
        progress: &mut impl FnMut(u64),
    ) -> Result<IndexHealth, EngineError> {
        let mut written = 0;
        let mut last = IndexHealth::default();
        for _ in 0..ROUNDS {
            let def = self.mapped_def(table).await?;
            let position = def
                .indexes
                .iter()
                .position(|i| i.name == name)
                .ok_or_else(|| CatalogError::Inconsistent {
                    table: table.to_owned(),
                    reason: format!("index {name} was dropped while it was built"),
                })?;
            let health = upkeep::run(
                self.store.as_ref(),
                &def,
                &[position],
                Upkeep::Repair,
                &mut *progress,
            )
            .await
            .map_err(datafusion::error::DataFusionError::from)?;
            last = health.into_iter().next().unwrap_or_default();
            written += last.repaired;
            if last.conflicts == 0 {
                break;
            }
        }
        last.repaired = written;
        Ok(last)
    }

    /// `DROP INDEX [IF EXISTS] name` (or `table.name`); with `cascade` its
    /// rows are deleted too, partition by partition; a global index's table
    /// is deleted whatever `cascade` says.
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
                .filter(|d| {
                    d.indexes.iter().any(|i| i.name == index)
                        || d.global_indexes.iter().any(|g| g.name == index)
                })
                .collect();
            let def = match owners.as_slice() {
                [one] => (*one).clone(),
                [] if if_exists => {
                    outcome.notices.push(Notice::new(
                        NoticeKind::DoesNotExist,
                        format!("index \"{index}\" does not exist, skipping"),
                    ));
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
            if let Some(g) = def.global_indexes.iter().find(|g| g.name == index) {
                // Its declaration first: no write keeps the entities after.
                persist::update(self.store.as_ref(), &def.name, |d| {
                    d.global_indexes.retain(|g| g.name != index);
                    Ok(())
                })
                .await?;
                self.refresh().await?;
                // A derived index's table is its own (CREATE INDEX made it,
                // under a name no other table had), so it goes with the
                // index, CASCADE or not, as a PostgreSQL index's storage
                // does; a declared one's is the application's, deleted only
                // with CASCADE, as local index rows are.
                if g.declared && !cascade {
                    continue;
                }
                match self.store.delete_table(&g.table).await {
                    Ok(()) | Err(StorageError::TableNotFound(_)) => {}
                    Err(e) => return Err(e.into()),
                }
                outcome.notices.push(Notice::new(
                    NoticeKind::Done,
                    format!("deleted storage table {} of index {index}", g.table),
                ));
                continue;
            }
            let Some(dropped) = def.indexes.iter().find(|i| i.name == index).cloned() else {
                continue;
            };
            let mut deleted = 0;
            if cascade {
                // Unused by reads first; the declaration stays until its
                // rows are gone, so a killed DROP can be run again.
                self.change_index(&def.name, &index, |ix| ix.building = true)
                    .await?;
                deleted += self.delete_rows(&def, &dropped.row_key).await?;
            }
            persist::update(self.store.as_ref(), &def.name, |d| {
                d.indexes.retain(|i| i.name != index);
                Ok(())
            })
            .await?;
            self.refresh().await?;
            if cascade {
                // Rows written while the first pass ran.
                deleted += self.delete_rows(&def, &dropped.row_key).await?;
                outcome.notices.push(Notice::new(
                    NoticeKind::Done,
                    format!("deleted {deleted} rows of index {index} on {}", def.name),
                ));
            }
        }
        Ok(outcome)
    }

    /// Checks the index rows of mapped table `table` (one index, or all),
    /// and with `repair` fixes them (see `exec::write::upkeep`); `progress`
    /// hears of the base rows read so far.
    pub async fn index_upkeep(
        &self,
        table: &str,
        index: Option<&str>,
        repair: bool,
        progress: impl FnMut(u64),
    ) -> Result<Vec<IndexHealth>, EngineError> {
        let def = self.mapped_def(table).await?;
        let upkeep = if repair {
            Upkeep::Repair
        } else {
            Upkeep::Check
        };
        Ok(crate::planner::index_functions::health(
            self.store.as_ref(),
            &def,
            index,
            upkeep,
            progress,
        )
        .await?)
    }

    async fn mapped_def(&self, name: &str) -> Result<TableDef, EngineError> {
        persist::load(self.store.as_ref())
            .await?
            .into_iter()
            .find(|d| d.name == name)
            .ok_or_else(|| CatalogError::UnknownTable(name.to_owned()).into())
    }

    /// Changes one index's declaration, and lets this engine see it.
    async fn change_index(
        &self,
        table: &str,
        index: &str,
        change: impl Fn(&mut IndexDef),
    ) -> Result<(), EngineError> {
        persist::update(self.store.as_ref(), table, |d| {
            if let Some(ix) = d.indexes.iter_mut().find(|i| i.name == index) {
                change(ix);
            }
            Ok(())
        })
        .await?;
        self.refresh().await
    }

    /// Deletes every row whose RowKey `template` writes, partition by
    /// partition (a RowKey range with a PartitionKey, as the service reads
    /// best), 100 to a transaction; a row already gone is done.
    async fn delete_rows(
        &self,
        def: &TableDef,
        template: &KeyTemplate,
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
        let table = &def.storage_table;
        let mut deleted = 0;
        let mut after: Option<PartitionKey> = None;
        loop {
            let page = self
                .store
                .partitions(table, &KeyRange::all(), after.as_ref())
                .await?;
            for pk in page.partitions {
                let mut query = Query::partition(pk).select(Vec::<String>::new());
                query.rows = rows.clone();
                let mut token: Option<ContinuationToken> = None;
                loop {
                    let found = self.store.query(table, &query, token.as_ref()).await?;
                    let ops: Vec<WriteOp> = found
                        .entities
                        .iter()
                        .map(|e| WriteOp::Delete {
                            partition_key: e.partition_key().clone(),
                            row_key: e.row_key().clone(),
                            if_match: IfMatch::Any,
                        })
                        .collect();
                    for chunk in ops.chunks(100) {
                        deleted += self.delete(table, chunk).await?;
                    }
                    match found.continuation {
                        Some(next) => token = Some(next),
                        None => break,
                    }
                }
            }
            match page.after {
                Some(next) => after = Some(next),
                None => return Ok(deleted),
            }
        }
    }

    /// Deletes `ops` in one transaction, or one by one where a row went
    /// meanwhile; returns the rows this call deleted.
    async fn delete(
        &self,
        table: &crate::storage::TableName,
        ops: &[WriteOp],
    ) -> Result<u64, EngineError> {
        let gone = |e: &StorageError| match e {
            StorageError::Batch { source, .. } => {
                matches!(**source, StorageError::EntityNotFound { .. })
            }
            other => matches!(other, StorageError::EntityNotFound { .. }),
        };
        match self.store.execute_batch(table, ops.to_vec()).await {
            Ok(_) => Ok(ops.len() as u64),
            Err(e) if gone(&e) => {
                let mut deleted = 0;
                for op in ops {
                    match self.store.execute(table, op.clone()).await {
                        Ok(_) => deleted += 1,
                        Err(e) if gone(&e) => {}
                        Err(e) => return Err(e.into()),
                    }
                }
                Ok(deleted)
            }
            Err(e) => Err(e.into()),
        }
    }
}

/// Whether two declarations are the same but for their building mark.
fn same(a: &IndexDef, b: &IndexDef) -> bool {
    a.row_key == b.row_key && a.covering == b.covering
}

/// Why a backfill left the index building.
fn unfinished(h: &IndexHealth) -> String {
    let mut why = Vec::new();
    if h.unindexable > 0 {
        why.push(format!(
            "{} base rows cannot have its row (a value its template cannot write, a key the table's templates did not write, or a row sharing its index row with another){}; their writes fail while it is declared",
            h.unindexable,
            match h.examples.iter().filter(|e| e.starts_with("unindexable")).collect::<Vec<_>>() {
                shown if shown.is_empty() => String::new(),
                shown => format!(
                    " (e.g. {})",
                    shown.iter().map(|s| s.as_str()).collect::<Vec<_>>().join("; ")
                ),
            }
        ));
    }
    if h.conflicts > 0 {
        why.push(format!(
            "{} rows were still being changed by other writers in the last of {ROUNDS} rounds",
            h.conflicts
        ));
    }
    format!(
        "index {} stays unused (building): {}; fix them and run CREATE INDEX again, or DROP INDEX {}",
        h.index,
        why.join(", and "),
        h.index
    )
}
