//! DDL that belongs to the transaction block (`engine::own` says why and
//! how): `CREATE TABLE [AS]`, `DROP TABLE|VIEW`, `ALTER TABLE` and
//! `CREATE VIEW` in a block change the session's own relations; COMMIT
//! writes them, ROLLBACK forgets them.
//!
//! The store cannot make a catalog change and rows of other partitions one
//! atomic write, but a block's COMMIT already writes across partitions
//! through its record (`exec::write::commit`): whole, or put back, or
//! finished by a recovery. So the catalog's changes go in as writes of the
//! catalog's partition, each If-Match the entity as the block first found
//! it (an insert where there was none), and land last, in one entity group
//! transaction: a reader sees the new tables' names only once their rows
//! are there, and all of the block's names at once.

use datafusion::sql::sqlparser::ast::{
    AlterTableOperation, CreateTable, Ident, ObjectNamePart, RenameTableNameKind,
};

use super::own::{Ended, OwnRelations, Relation, Seen};
use super::*;
use crate::catalog::persist::{BlockChange as Changed, Change};
use crate::exec::write::commit::Order;

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

impl Session {
    /// The session's own relations.
    pub(super) fn own(&self) -> Option<Arc<OwnRelations>> {
        session_relations(&self.ctx)
    }

    /// The session's own relations while a block is open (its transaction
    /// and its relations both).
    pub(super) fn block_own(&self) -> Option<Arc<OwnRelations>> {
        let open = self.transaction().is_some_and(|tx| tx.is_open());
        self.own().filter(|o| open && o.is_open())
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
            // An unmapped storage table is listed by its name until a
            // mapping takes the name (`Engine::name_taken`).
            Some(t) if (t.as_ref() as &dyn std::any::Any).is::<StoreTable>() => Named::Missing,
            Some(_) => Named::Other,
            None => Named::Missing,
        })
    }

    /// Notes the stored entity of each of `names` the block changes for
    /// the first time (COMMIT writes If-Match its version:
    /// `persist::block_writes`), before the block decides anything of it:
    /// a name another session takes after this read fails the COMMIT.
    pub(super) async fn touch(
        &self,
        own: &OwnRelations,
        names: &[&str],
    ) -> Result<(), EngineError> {
        for name in names {
            if own.needs_base(name) {
                own.set_base(name, persist::stored(self.store.as_ref(), name).await?);
            }
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
        self.touch(own, &[&def.name]).await?;
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
            def.storage_table = self.created_storage_table(&def.storage_table).await?;
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
        self.touch(own, &[&name]).await?;
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
            self.touch(own, &[&name]).await?;
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
        self.touch(own, &[&name]).await?;
        match self.named(&name).await? {
            Named::Table(def) => {
                let changed = ddl::alter(&def, alter)?;
                self.touch(own, &[&changed.name]).await?;
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
                self.touch(own, &[&to]).await?;
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

    /// `CREATE INDEX` in a block: of a table the block made and has not
    /// written yet, the index joins its definition (there is nothing to
    /// build); of a table the block changed otherwise it would write a
    /// definition the COMMIT then overwrites, so it is refused; of any
    /// other table it runs at once, as outside a block (`None`).
    pub(super) async fn index_in_block(
        &self,
        own: &OwnRelations,
        create: &datafusion::sql::sqlparser::ast::CreateIndex,
    ) -> Result<Option<DdlOutcome>, EngineError> {
        let table = ddl::object_name(&create.table_name)?;
        let later = EngineError::InTransactionBlock {
            tag: "CREATE INDEX",
            why: " on a table the block changed or wrote to: COMMIT first",
        };
        let def = match own.seen(&table) {
            Seen::Untouched => return Ok(None),
            Seen::Changed(Relation::Table { def, .. }) => def,
            Seen::Changed(Relation::View { .. }) | Seen::Dropped => {
                return Err(CatalogError::UnknownTable(table).into());
            }
        };
        let written = self
            .transaction()
            .is_some_and(|tx| tx.written_tables().contains(&def.storage_table));
        if !own.made(&def.storage_table) || written {
            return Err(later);
        }
        let ddl::NewIndex::Local(index) = ddl::index_from_create(create, &def)? else {
            return Err(later);
        };
        let mut outcome = DdlOutcome::default();
        if def.indexes.iter().any(|i| i.name == index.name) {
            if create.if_not_exists {
                outcome.notices.push(exists_skipping(&index.name));
                return Ok(Some(outcome));
            }
            return Err(CatalogError::Inconsistent {
                table,
                reason: format!("index {} already exists", index.name),
            }
            .into());
        }
        let mut changed = def.as_ref().clone();
        changed.indexes.push(index);
        changed.validate()?;
        let (name, provider) = self.mapped_provider(changed.clone())?;
        own.put(
            &name,
            Some(Relation::Table {
                def: Arc::new(changed),
                provider,
            }),
        );
        self.engine.catalog_changed();
        Ok(Some(outcome))
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
        self.touch(own, &[&name]).await?;
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
        self.view_planned(&self.ctx.state(), sql).await
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
        let changes = [
            Changed {
                base: persist::stored(self.store.as_ref(), &name).await?,
                name,
                change: None,
            },
            Changed {
                base: None,
                name: to,
                change: Some(Change::View(sql)),
            },
        ];
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
        // The relations close once the outcome is known: a COMMIT dropped
        // before it takes the buffer leaves the block as it was.
        let changes: Vec<Changed> = own
            .pending()
            .iter()
            .map(|(name, base, r)| Changed {
                name: name.clone(),
                base: base.clone(),
                change: r.as_ref().map(|r| match r {
                    Relation::Table { def, .. } => Change::Table(Box::new(def.as_ref().clone())),
                    Relation::View { sql, .. } => Change::View(sql.clone()),
                }),
            })
            .collect();
        let written = async {
            persist::check(self.store.as_ref(), &changes).await?;
            let (catalog, writes, replaced) = persist::block_writes(&changes)?;
            persist::created(self.store.as_ref()).await?;
            // Global index entities around the base rows, as any COMMIT
            // writes them, and the catalog last, after the rows it names.
            let stored = persist::load(self.store.as_ref()).await?;
            let order = Order::new(
                stored
                    .iter()
                    .chain(changes.iter().filter_map(|c| match &c.change {
                        Some(Change::Table(def)) => Some(def.as_ref()),
                        _ => None,
                    }))
                    .flat_map(|d| d.global_indexes.iter().map(|g| &g.table)),
            )
            .landing_last(&catalog);
            let extra = writes
                .into_iter()
                .map(|(op, before)| crate::exec::write::commit::Change {
                    table: catalog.clone(),
                    op,
                    before,
                    first: false,
                })
                .collect();
            tx.commit_with(self.store.as_ref(), &order, extra).await?;
            Ok::<_, EngineError>(replaced)
        };
        let replaced = match written.await {
            Ok(replaced) => replaced,
            Err(e) => {
                tx.rollback();
                let ended = own.end(false);
                self.engine.catalog_changed();
                // What the block made goes, but what the catalog names: a
                // batch whose answer was lost may have landed. A commit
                // whose outcome is unknown is recovery's to finish, and
                // may yet name all of it.
                if e.sqlstate() != crate::sqlstate::STATEMENT_COMPLETION_UNKNOWN
                    && let Ok(named) = persist::load(self.store.as_ref()).await
                {
                    self.delete_made(&ended, &named.iter().collect::<Vec<_>>())
                        .await;
                }
                return Err(e);
            }
        };
        let ended = own.end(true);
        self.engine.catalog_changed();
        // What the catalog no longer names goes: tables the block made and
        // dropped, and the storage of the tables it dropped.
        let kept: Vec<&TableDef> = changes
            .iter()
            .filter_map(|c| match &c.change {
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
        // Landed: a failed reload is the next statement's to retry.
        if let Err(e) = self.refresh().await {
            self.notice(Notice::new(
                NoticeKind::CatalogChanged,
                format!("the catalog committed, but reloading it failed: {e}"),
            ));
        }
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
