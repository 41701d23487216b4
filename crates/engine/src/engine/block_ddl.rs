//! DDL that belongs to the transaction block (`engine::own` says why and
//! how): `CREATE TABLE [AS]`, `DROP TABLE|VIEW`, `ALTER TABLE` and
//! `CREATE VIEW` in a block change the session's own relations; COMMIT
//! writes them, ROLLBACK forgets them.
//!
//! The store cannot make a catalog change and rows of tables that existed
//! before the block one atomic write. COMMIT writes the block's rows first,
//! all of them of tables it made (no one reads those before the catalog
//! names them), then its catalog changes in one entity group transaction:
//! a failure anywhere leaves nothing of the block visible. So a block that
//! changes the catalog may write rows only to the tables it made; the other
//! order is refused where it shows (DDL after such a write) and at COMMIT.

use datafusion::datasource::ViewTable;
use datafusion::sql::sqlparser::ast::{
    AlterTableOperation, CreateTable, Ident, ObjectNamePart, RenameTableNameKind,
};

use super::own::{Ended, OwnRelations, Relation, Seen};
use super::*;
use crate::catalog::persist::Change;

/// What a name is to a session.
pub(super) enum Named {
    /// A mapped table.
    Table(Arc<TableDef>),
    /// A view, by its `CREATE VIEW` text.
    View(String),
    /// One of its temporary tables.
    Temp,
    /// A raw storage table or an embedder's.
    Other,
    /// Nothing.
    Missing,
}

/// Why a block cannot write its catalog changes and these rows together.
const MIXED: &str = ": a block that changes the catalog writes rows only to the tables it made (the store cannot commit a catalog change and other tables' rows together)";

impl Session {
    /// The session's own relations.
    pub(super) fn own(&self) -> Option<Arc<OwnRelations>> {
        session_relations(&self.ctx)
    }

    /// The session's own relations while a block is open.
    pub(super) fn block_own(&self) -> Option<Arc<OwnRelations>> {
        self.own().filter(|o| o.is_open())
    }

    /// What `name` is to this session: its temporary tables first, then
    /// what its block changed, then the stored catalog.
    pub(super) async fn named(&self, name: &str) -> Result<Named, EngineError> {
        if let Some(own) = self.own() {
            if own.temp(name).is_some() {
                return Ok(Named::Temp);
            }
            match own.seen(name) {
                Seen::Changed(Relation::Table { def, .. }) => return Ok(Named::Table(def)),
                Seen::Changed(Relation::View { sql, .. }) => return Ok(Named::View(sql)),
                Seen::Dropped => return Ok(Named::Missing),
                Seen::Untouched => {}
            }
        }
        let stored = persist::load_all(self.store.as_ref()).await?;
        if let Some(def) = stored.tables.into_iter().find(|d| d.name == name) {
            return Ok(Named::Table(Arc::new(def)));
        }
        if let Some((_, sql)) = stored.views.into_iter().find(|(n, _)| n == name) {
            return Ok(Named::View(sql));
        }
        Ok(match self.public_schema().table(name).await? {
            Some(_) => Named::Other,
            None => Named::Missing,
        })
    }

    /// Refuses DDL in a block that wrote rows of tables it did not make
    /// (see the module doc).
    pub(super) fn refuse_mixed(
        &self,
        own: &OwnRelations,
        tag: &'static str,
    ) -> Result<(), EngineError> {
        let mixed = self
            .transaction()
            .is_some_and(|tx| tx.written_tables().iter().any(|t| !own.made(t)));
        if mixed {
            return Err(EngineError::InTransactionBlock { tag, why: MIXED });
        }
        Ok(())
    }

    /// Catalog DDL inside a transaction block; `None` for a statement the
    /// block does not hold (it runs as outside one).
    pub(super) async fn block_ddl(
        &self,
        own: &OwnRelations,
        statement: &Statement,
    ) -> Result<Option<DdlOutcome>, EngineError> {
        let outcome = match statement {
            Statement::CreateTable(create) if ddl::is_mapping(create) => {
                self.create_in_block(own, create).await?
            }
            Statement::Drop {
                object_type: object @ (ObjectType::Table | ObjectType::View),
                if_exists,
                names,
                ..
            } => {
                let view = *object == ObjectType::View;
                match self.drop_in_block(own, names, *if_exists, view).await? {
                    Some(outcome) => outcome,
                    None => return Ok(None),
                }
            }
            Statement::AlterTable(alter) => match self.alter_in_block(own, alter).await? {
                Some(outcome) => outcome,
                None => return Ok(None),
            },
            Statement::CreateView(_) => self.view_in_block(own, statement).await?,
            _ => return Ok(None),
        };
        self.engine.catalog_changed();
        Ok(Some(outcome))
    }

    async fn create_in_block(
        &self,
        own: &OwnRelations,
        create: &CreateTable,
    ) -> Result<DdlOutcome, EngineError> {
        let def = ddl::from_create_table(create)?;
        let mut outcome = DdlOutcome::default();
        if !matches!(self.named(&def.name).await?, Named::Missing) {
            if create.if_not_exists {
                outcome.notices.push(exists_skipping(&def.name));
                return Ok(outcome);
            }
            return Err(CatalogError::TableExists(def.name.clone()).into());
        }
        outcome.notices = self.foreign_key_notices(create, &def.name).await?;
        self.define_in_block(own, def).await?;
        Ok(outcome)
    }

    /// The notices of a `CREATE TABLE`'s foreign keys, which are accepted
    /// and not enforced; a key naming no table is refused.
    pub(super) async fn foreign_key_notices(
        &self,
        create: &CreateTable,
        name: &str,
    ) -> Result<Vec<Notice>, EngineError> {
        let mut notices = Vec::new();
        for (columns, fk) in ddl::foreign_keys(create)? {
            let target = ddl::object_name(&fk.foreign_table)?;
            if target != name && matches!(self.named(&target).await?, Named::Missing) {
                return Err(CatalogError::UnknownTable(target).into());
            }
            notices.push(Notice::new(
                NoticeKind::NotEnforced,
                format!(
                    "FOREIGN KEY ({}) REFERENCES {target} is accepted but not enforced",
                    columns.join(", ")
                ),
            ));
        }
        Ok(notices)
    }

    /// A new table: in the open block's relations, or in the catalog at
    /// once outside a block.
    pub(super) async fn define_table(&self, def: TableDef) -> Result<(), EngineError> {
        match self.block_own() {
            Some(own) => self.define_in_block(&own, def).await,
            None => self.create_table(def, false).await,
        }
    }

    /// A table the block makes: its storage table and its identity
    /// sequences are created now (nothing names them until COMMIT, and
    /// ROLLBACK deletes them), its definition waits in the block.
    async fn define_in_block(&self, own: &OwnRelations, def: TableDef) -> Result<(), EngineError> {
        let mut def = def;
        if def.owned {
            let wanted = def.storage_table.clone();
            let mut lost = std::collections::HashSet::new();
            loop {
                def.storage_table = self.fresh_storage_table(&wanted, &lost).await?;
                match self.store.create_table(&def.storage_table).await {
                    Ok(()) => break,
                    Err(StorageError::TableAlreadyExists(_)) if lost.len() < 10 => {
                        lost.insert(def.storage_table.as_str().to_lowercase());
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            own.made_storage(def.storage_table.clone());
        } else {
            match self.store.create_table(&def.storage_table).await {
                Ok(()) => own.made_storage(def.storage_table.clone()),
                Err(StorageError::TableAlreadyExists(_)) => {}
                Err(e) => return Err(e.into()),
            }
        }
        // Its defaults plan (a stored one that does not would fail every
        // later start) before a sequence is made for them.
        let (name, provider) = self.mapped_provider(def.clone())?;
        for seq in def.columns.iter().filter_map(|c| c.identity.as_ref()) {
            sequence::create(self.store.as_ref(), seq, false).await?;
            own.made_sequence(seq.name.clone());
        }
        own.put(
            &name,
            Some(Relation::Table {
                def: Arc::new(def),
                provider,
            }),
        );
        Ok(())
    }

    /// Forgets a table the block made (a `CREATE TABLE AS` whose rows
    /// failed).
    pub(super) fn undefine_in_block(&self, name: &str) {
        if let Some(own) = self.block_own() {
            own.put(name, None);
        }
    }

    async fn drop_in_block(
        &self,
        own: &OwnRelations,
        names: &[ObjectName],
        if_exists: bool,
        view: bool,
    ) -> Result<Option<DdlOutcome>, EngineError> {
        let kind = if view { "view" } else { "table" };
        let mut outcome = DdlOutcome::default();
        let mut gone = Vec::new();
        for n in names {
            if is_raw(n) {
                return Err(CatalogError::NotDroppable(n.to_string()).into());
            }
            let name = ddl::object_name(n)?;
            match self.named(&name).await? {
                Named::Table(_) if !view => gone.push(name),
                Named::View(_) if view => gone.push(name),
                Named::Table(_) | Named::View(_) | Named::Temp => {
                    return Err(
                        CatalogError::Definition(format!("\"{name}\" is not a {kind}")).into(),
                    );
                }
                // An embedder's table is DataFusion's to drop.
                Named::Other => return Ok(None),
                Named::Missing if if_exists => outcome.notices.push(Notice::new(
                    NoticeKind::DoesNotExist,
                    format!("{kind} \"{name}\" does not exist, skipping"),
                )),
                Named::Missing => return Err(CatalogError::UnknownTable(name).into()),
            }
        }
        for name in gone {
            own.put(&name, None);
        }
        Ok(Some(outcome))
    }

    async fn alter_in_block(
        &self,
        own: &OwnRelations,
        alter: &datafusion::sql::sqlparser::ast::AlterTable,
    ) -> Result<Option<DdlOutcome>, EngineError> {
        let name = ddl::object_name(&alter.name)?;
        match self.named(&name).await? {
            Named::Table(def) => {
                let changed = ddl::alter(&def, alter)?;
                if changed.name != name {
                    self.check_free(&changed.name).await?;
                    own.put(&name, None);
                }
                let (new, provider) = self.mapped_provider(changed.clone())?;
                own.put(
                    &new,
                    Some(Relation::Table {
                        def: Arc::new(changed),
                        provider,
                    }),
                );
            }
            Named::View(sql) => {
                let to = view_rename(alter)?;
                self.check_free(&to).await?;
                let provider = self.plan_view(&renamed_view(&sql, &to)?).await?;
                own.put(&name, None);
                own.put(
                    &to,
                    Some(Relation::View {
                        sql: renamed_view(&sql, &to)?,
                        provider,
                    }),
                );
            }
            Named::Temp => {
                return Err(EngineError::NotSupported(
                    "ALTER TABLE of a temporary table is not supported".into(),
                ));
            }
            Named::Other => return Ok(None),
            Named::Missing if alter.if_exists => {
                return Ok(Some(DdlOutcome {
                    notices: vec![Notice::new(
                        NoticeKind::DoesNotExist,
                        format!("relation \"{name}\" does not exist, skipping"),
                    )],
                }));
            }
            Named::Missing => return Err(CatalogError::UnknownTable(name).into()),
        }
        Ok(Some(DdlOutcome::default()))
    }

    async fn check_free(&self, name: &str) -> Result<(), EngineError> {
        match self.named(name).await? {
            Named::Missing => Ok(()),
            _ => Err(CatalogError::TableExists(name.to_owned()).into()),
        }
    }

    async fn view_in_block(
        &self,
        own: &OwnRelations,
        statement: &Statement,
    ) -> Result<DdlOutcome, EngineError> {
        let Statement::CreateView(view) = statement else {
            return Ok(DdlOutcome::default());
        };
        refuse_view_kind(view)?;
        let name = ddl::object_name(&view.name)?;
        match self.named(&name).await? {
            Named::Missing => {}
            Named::View(_) if view.or_replace => {}
            _ if view.if_not_exists => return Ok(DdlOutcome::default()),
            _ => return Err(CatalogError::TableExists(name).into()),
        }
        let sql = statement.to_string();
        let provider = self.plan_view(&sql).await?;
        own.put(&name, Some(Relation::View { sql, provider }));
        Ok(DdlOutcome::default())
    }

    /// A view's `CREATE VIEW` text planned as this session sees the
    /// relations (its block's among them).
    async fn plan_view(&self, sql: &str) -> Result<Arc<dyn TableProvider>, EngineError> {
        let statement = self
            .parse(sql)
            .map_err(|e| CatalogError::Definition(format!("view: {e}")))?
            .into_iter()
            .next()
            .ok_or_else(|| CatalogError::Definition("view: no statement".into()))?;
        let state = self.ctx.state();
        match crate::planner::upsert::statement_to_plan(&state, statement).await? {
            LogicalPlan::Ddl(datafusion::logical_expr::DdlStatement::CreateView(view)) => {
                Ok(Arc::new(ViewTable::new(
                    view.input.as_ref().clone(),
                    view.definition.clone(),
                )))
            }
            _ => Err(CatalogError::Definition("view: not CREATE VIEW".into()).into()),
        }
    }

    /// `ALTER TABLE|VIEW v RENAME TO w` of a stored view, outside a block:
    /// both names in one catalog write.
    pub(super) async fn rename_stored_view(
        &self,
        alter: &datafusion::sql::sqlparser::ast::AlterTable,
    ) -> Result<Option<DdlOutcome>, EngineError> {
        let name = ddl::object_name(&alter.name)?;
        let Named::View(sql) = self.named(&name).await? else {
            return Ok(None);
        };
        let to = view_rename(alter)?;
        self.check_free(&to).await?;
        let sql = renamed_view(&sql, &to)?;
        self.plan_view(&sql).await?;
        let changes = [(name, None), (to, Some(Change::View(sql)))];
        persist::apply(self.store.as_ref(), &changes).await?;
        self.refresh().await?;
        Ok(Some(DdlOutcome::default()))
    }

    /// COMMIT of a block that changed the catalog (see the module doc).
    pub(super) async fn commit_with_ddl(
        &self,
        tx: &Transaction,
        own: &OwnRelations,
    ) -> Result<BlockChange, EngineError> {
        if tx.is_aborted() {
            tx.rollback();
            self.end_own(own, false).await;
            return Ok(BlockChange::Ended(BlockEnd::RolledBack));
        }
        if let Err(e) = self.refuse_mixed(own, "COMMIT") {
            tx.rollback();
            self.end_own(own, false).await;
            return Err(e);
        }
        let tables = own.tables();
        let order = crate::exec::write::commit::Order::new(
            tables
                .iter()
                .flat_map(|d| d.global_indexes.iter().map(|g| &g.table)),
        );
        // The block's rows, all in tables nothing names yet.
        if let Err(e) = tx.commit(self.store.as_ref(), &order).await {
            self.end_own(own, false).await;
            return Err(e.into());
        }
        let ended = own.end(true);
        let changes: Vec<(String, Option<Change>)> = ended
            .relations
            .iter()
            .map(|(name, r)| {
                let change = r.as_ref().map(|r| match r {
                    Relation::Table { def, .. } => Change::Table(Box::new(def.as_ref().clone())),
                    Relation::View { sql, .. } => Change::View(sql.clone()),
                });
                (name.clone(), change)
            })
            .collect();
        let replaced = match persist::apply(self.store.as_ref(), &changes).await {
            Ok(r) => r,
            Err(e) => {
                self.delete_made(&ended, &[]).await;
                return Err(e.into());
            }
        };
        // What the catalog no longer names goes: tables the block made and
        // dropped, and the storage of the tables it dropped.
        let kept: Vec<&TableDef> = changes
            .iter()
            .filter_map(|(_, c)| match c {
                Some(Change::Table(def)) => Some(def.as_ref()),
                _ => None,
            })
            .collect();
        self.delete_made(&ended, &kept).await;
        let renamed = |d: &TableDef| kept.iter().any(|k| k.storage_table == d.storage_table);
        for def in replaced.iter().filter(|d| !renamed(d)) {
            // Best effort: the COMMIT has landed; what stays is unnamed.
            let _ = self.drop_storage(def).await;
        }
        self.refresh().await?;
        Ok(BlockChange::Ended(BlockEnd::Committed))
    }

    /// Closes the session's own side of a block that ended without a
    /// catalog write: what it made in the store goes.
    pub(super) async fn end_own(&self, own: &OwnRelations, committed: bool) {
        let ended = own.end(committed);
        self.delete_made(&ended, &[]).await;
        self.engine.catalog_changed();
    }

    /// Deletes the storage tables and sequences a block made, but those of
    /// the tables in `kept`. Best effort: nothing names them.
    async fn delete_made(&self, ended: &Ended, kept: &[&TableDef]) {
        for table in &ended.made {
            if !kept.iter().any(|d| d.storage_table == *table) {
                let _ = self.store.delete_table(table).await;
            }
        }
        for seq in &ended.sequences {
            let used = kept.iter().any(|d| {
                d.columns
                    .iter()
                    .any(|c| c.identity.as_ref().is_some_and(|i| i.name == *seq))
            });
            if !used {
                let _ = sequence::drop(self.store.as_ref(), seq, true).await;
                self.sequences.forget(seq);
            }
        }
    }
}

impl Engine {
    /// Deletes what a dropped table's definition owned: its storage table
    /// when it owns its rows, its derived global indexes' tables (CREATE
    /// INDEX made them; declared ones are the application's), and its
    /// identity columns' sequences, as PostgreSQL drops them with it.
    pub(super) async fn drop_storage(&self, def: &TableDef) -> Result<(), EngineError> {
        let tables = def.owned.then_some(&def.storage_table).into_iter().chain(
            def.global_indexes
                .iter()
                .filter(|g| !g.declared)
                .map(|g| &g.table),
        );
        for table in tables {
            match self.store.delete_table(table).await {
                Ok(()) | Err(StorageError::TableNotFound(_)) => {}
                Err(e) => return Err(e.into()),
            }
        }
        for seq in def
            .columns
            .iter()
            .filter_map(|c| ddl::owned_sequence(&def.name, c))
        {
            sequence::drop(self.store.as_ref(), &seq, true).await?;
            self.sequences.forget(&seq);
        }
        Ok(())
    }
}

/// PostgreSQL's notice for `IF NOT EXISTS` over a taken name.
pub(super) fn exists_skipping(name: &str) -> Notice {
    Notice::new(
        NoticeKind::AlreadyExists,
        format!("relation \"{name}\" already exists, skipping"),
    )
}

/// Whether `name` is qualified by schema `raw`.
pub(super) fn is_raw(name: &ObjectName) -> bool {
    name.0.len() > 1
        && name.0[name.0.len() - 2]
            .as_ident()
            .is_some_and(|i| i.value.eq_ignore_ascii_case(RAW_SCHEMA))
}

/// Refuses the kinds of view that are not a stored query.
pub(super) fn refuse_view_kind(
    view: &datafusion::sql::sqlparser::ast::CreateView,
) -> Result<(), EngineError> {
    if view.materialized || view.temporary {
        return Err(EngineError::NotSupported(
            "CREATE MATERIALIZED or TEMPORARY VIEW is not supported: a view is stored as its query"
                .into(),
        ));
    }
    Ok(())
}

/// The new name of an `ALTER TABLE|VIEW v RENAME TO w` of a view (the one
/// change a view takes here).
fn view_rename(alter: &datafusion::sql::sqlparser::ast::AlterTable) -> Result<String, EngineError> {
    match alter.operations.as_slice() {
        [
            AlterTableOperation::RenameTable {
                table_name: RenameTableNameKind::To(to) | RenameTableNameKind::As(to),
            },
        ] => Ok(ddl::object_name(to)?),
        _ => Err(EngineError::NotSupported(
            "a view takes ALTER ... RENAME TO; to change its query, CREATE OR REPLACE VIEW".into(),
        )),
    }
}

/// A view's `CREATE VIEW` text under a new name.
fn renamed_view(sql: &str, to: &str) -> Result<String, EngineError> {
    let parsed = datafusion::sql::sqlparser::parser::Parser::parse_sql(
        &datafusion::sql::sqlparser::dialect::PostgreSqlDialect {},
        sql,
    )
    .map_err(|e| CatalogError::Definition(format!("stored view: {e}")))?;
    match <[Statement; 1]>::try_from(parsed) {
        Ok([Statement::CreateView(mut view)]) => {
            view.name = ObjectName(vec![ObjectNamePart::Identifier(Ident::with_quote('"', to))]);
            Ok(Statement::CreateView(view).to_string())
        }
        _ => Err(CatalogError::Definition("stored view: not one CREATE VIEW".into()).into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_renamed_view_keeps_its_query_under_the_quoted_name() {
        let sql =
            renamed_view("CREATE VIEW v AS SELECT a FROM t WHERE b > 1", "New v").expect("renames");
        assert_eq!(sql, "CREATE VIEW \"New v\" AS SELECT a FROM t WHERE b > 1");
    }
}
