//! Catalog DDL: what `CREATE TABLE ... WITH`, `ALTER TABLE`, `DROP TABLE`
//! and `TRUNCATE` do to a mapped table, its definition in the store and
//! its storage table. DataFusion knows none of them; [`Engine::catalog_ddl`]
//! is where a statement is told apart from DataFusion's.

use super::*;

impl Engine {
    /// Adds a mapped table: persists its definition, creates its storage
    /// table if missing, and registers it. `replace` overwrites a definition
    /// of the same name.
    pub async fn create_table(&self, def: TableDef, replace: bool) -> Result<(), EngineError> {
        if !replace && self.name_taken(&def.name).await? {
            return Err(CatalogError::TableExists(def.name.clone()).into());
        }
        let mut def = def;
        let mut created = false;
        if def.owned {
            // Replacing a table that owns its storage keeps it (and its rows).
            let kept = persist::load(self.store.as_ref())
                .await?
                .into_iter()
                .find(|d| d.name == def.name && d.owned)
                .map(|d| d.storage_table);
            match kept {
                Some(t) => def.storage_table = t,
                None => {
                    def.storage_table = self.created_storage_table(&def.storage_table).await?;
                    created = true;
                }
            }
        }
        if !created {
            match self.store.create_table(&def.storage_table).await {
                Ok(()) | Err(StorageError::TableAlreadyExists(_)) => {}
                Err(e) => return Err(e.into()),
            }
        }
        // Defaults that do not plan are refused before anything is stored
        // (a stored one would fail every later start).
        self.column_defaults(&Layout::mapped(Arc::new(def.clone())))?;
        // Identity columns' sequences first: a table is never stored with
        // a default that names a missing sequence.
        for seq in def.columns.iter().filter_map(|c| c.identity.as_ref()) {
            sequence::create(self.store.as_ref(), seq, replace).await?;
        }
        // Not while the tables reload: the reload would put back a schema
        // read before this table was there.
        let _reloading = self.watch.lock().await;
        persist::save(self.store.as_ref(), &def, replace).await?;
        self.register_mapped(def)?;
        Ok(())
    }

    /// `ALTER TABLE` of a mapped table (`catalog::ddl::alter` says what it
    /// changes): the definition replaced in one catalog write, the tables
    /// registered again. `None` for a table that is not mapped here (an
    /// embedder's, DataFusion's to answer).
    pub(super) async fn alter_table(
        &self,
        alter: &datafusion::sql::sqlparser::ast::AlterTable,
    ) -> Result<Option<DdlOutcome>, EngineError> {
        let name = ddl::object_name(&alter.name)?;
        let defs = persist::load(self.store.as_ref()).await?;
        let Some(def) = defs.iter().find(|d| d.name == name) else {
            return match self.public_schema().table(&name).await? {
                Some(t) if (t.as_ref() as &dyn std::any::Any).is::<StoreTable>() => {
                    Err(CatalogError::NotDroppable(name).into())
                }
                Some(_) => Ok(None),
                None if alter.if_exists => Ok(Some(DdlOutcome {
                    notices: vec![Notice::new(
                        NoticeKind::DoesNotExist,
                        format!("relation \"{name}\" does not exist, skipping"),
                    )],
                })),
                None => Err(CatalogError::UnknownTable(name).into()),
            };
        };
        // Checked before the write: a view or an embedder's table of the
        // new name is not in the catalog's partition to collide with.
        let renamed = ddl::alter(def, alter)?.name;
        if renamed != def.name && self.name_taken(&renamed).await? {
            return Err(CatalogError::TableExists(renamed).into());
        }
        {
            let _reloading = self.watch.lock().await;
            persist::alter(self.store.as_ref(), &def.name, |d| ddl::alter(d, alter)).await?;
        }
        self.refresh().await?;
        Ok(Some(DdlOutcome::default()))
    }

    /// A new storage table: [`Self::fresh_storage_table`]'s name, created.
    /// The store says last whether a name is free: another engine may have
    /// taken the one listed free meanwhile, and the next free one is tried.
    pub(super) async fn created_storage_table(
        &self,
        wanted: &TableName,
    ) -> Result<TableName, EngineError> {
        let mut lost = std::collections::HashSet::new();
        loop {
            let table = self.fresh_storage_table(wanted, &lost).await?;
            match self.store.create_table(&table).await {
                Ok(()) => return Ok(table),
                Err(StorageError::TableAlreadyExists(_)) if lost.len() < 10 => {
                    lost.insert(table.as_str().to_lowercase());
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// A storage table for a table that owns its rows: `wanted`, or where
    /// that name is taken (rows of a table dropped without its storage, an
    /// application's table), `wanted` and the first free number, so that a
    /// new table never shows rows it did not write. Storage names compare
    /// without case.
    pub(super) async fn fresh_storage_table(
        &self,
        wanted: &TableName,
        also_taken: &std::collections::HashSet<String>,
    ) -> Result<TableName, EngineError> {
        let mut taken: std::collections::HashSet<String> = self
            .store
            .list_tables()
            .await?
            .iter()
            .map(|t| t.as_str().to_lowercase())
            .collect();
        taken.extend(also_taken.iter().cloned());
        if !taken.contains(&wanted.as_str().to_lowercase()) {
            return Ok(wanted.clone());
        }
        for n in 2u32..10_000 {
            let name = format!("{}{n}", wanted.as_str());
            if !taken.contains(&name.to_lowercase()) {
                return Ok(TableName::new(name).map_err(StorageError::from)?);
            }
        }
        Err(CatalogError::Definition(format!(
            "no free storage table name like {wanted}: set storage_table"
        ))
        .into())
    }

    /// Removes a mapped table's definition; its entities stay in the store.
    pub async fn drop_table(&self, name: &str) -> Result<(), EngineError> {
        persist::remove(self.store.as_ref(), name).await?;
        self.refresh().await
    }
}

impl Session {
    /// `TRUNCATE t [, u ...]`: every row of each table deleted, as a
    /// `DELETE FROM t` deletes them (partition by partition in entity group
    /// transactions, index rows with their base rows). In a transaction
    /// block, its deletes wait for COMMIT as a `DELETE`'s do (and count
    /// against the block's limit). `RESTART IDENTITY`, `CASCADE` and
    /// `PARTITION` have nothing here to act on and are refused. `progress`
    /// hears the rows deleted so far, about every 200 ms (a front end's
    /// progress bar on long work).
    pub async fn truncate(
        &self,
        truncate: &datafusion::sql::sqlparser::ast::Truncate,
        progress: impl Fn(u64),
    ) -> Result<u64, EngineError> {
        if truncate.identity.is_some()
            || truncate.cascade.is_some()
            || truncate.partitions.is_some()
        {
            return Err(EngineError::NotSupported(
                "TRUNCATE with RESTART IDENTITY, CASCADE or PARTITION is not supported".into(),
            ));
        }
        let mut deleted = 0;
        for target in &truncate.table_names {
            let delete = format!("DELETE FROM {}", target.name);
            let Some(statement) = self.parse(&delete).ok().and_then(|s| s.into_iter().next())
            else {
                return Err(CatalogError::UnknownTable(target.name.to_string()).into());
            };
            let write = self.write(statement).await?;
            let run = write.run();
            tokio::pin!(run);
            let mut tick = tokio::time::interval(std::time::Duration::from_millis(200));
            let rows = loop {
                tokio::select! {
                    done = &mut run => break done?,
                    _ = tick.tick() => progress(deleted + write.committed()),
                }
            };
            deleted += rows;
            progress(deleted);
        }
        Ok(deleted)
    }

    /// Runs a statement if it is catalog DDL; `None` if it is not (DataFusion's).
    /// Refuses, for every front end, what would create an object that only
    /// this process remembers (`engine::refuse`).
    pub async fn catalog_ddl(
        &self,
        statement: &Statement,
    ) -> Result<Option<DdlOutcome>, EngineError> {
        if let Some(why) = refuse::in_memory_only(statement) {
            return Err(EngineError::NotSupported(why));
        }
        if let Some(outcome) = self.temp_ddl(statement).await? {
            return Ok(Some(outcome));
        }
        // The DDL a block holds until COMMIT (`engine::block_ddl`).
        let held = matches!(
            statement,
            Statement::CreateTable(_)
                | Statement::CreateView(_)
                | Statement::AlterTable(_)
                | Statement::Drop {
                    object_type: ObjectType::Table | ObjectType::View,
                    ..
                }
        );
        let ddl = held
            || matches!(
                statement,
                Statement::CreateIndex(_)
                    | Statement::CreateSequence { .. }
                    | Statement::Drop { .. }
            );
        let tag = StatementKind::of(statement).tag().unwrap_or("catalog DDL");
        let own = self.block_own();
        if let (Some(own), Statement::CreateIndex(create)) = (&own, statement)
            && let Some(outcome) = self.index_in_block(own, create).await?
        {
            return Ok(Some(outcome));
        }
        if let Some(own) = own.filter(|_| held) {
            if let Some(outcome) = self.block_ddl(&own, statement).await? {
                return Ok(Some(outcome));
            }
        } else if ddl
            && self
                .transaction()
                .is_some_and(|tx| tx.has_buffered_writes())
        {
            // The rest of DDL runs at once, not as part of the block: in a
            // block, only before its first write.
            return Err(EngineError::InTransactionBlock {
                tag,
                why: " after the block's writes: the store cannot commit catalog changes and rows together",
            });
        }
        match statement {
            Statement::CreateTable(create) if ddl::is_mapping(create) => {
                let def = ddl::from_create_table(create)?;
                if create.if_not_exists && self.name_taken(&def.name).await? {
                    return Ok(Some(DdlOutcome::default()));
                }
                let outcome = DdlOutcome {
                    notices: self.foreign_key_notices(create, &def.name).await?,
                };
                self.create_table(def, create.or_replace).await?;
                Ok(Some(outcome))
            }
            // Boxed: its planning and writing futures are large, and every
            // DDL statement's future would carry them.
            Statement::CreateTable(create) => {
                Box::pin(self.create_table_as(create)).await.map(Some)
            }
            Statement::Drop {
                object_type: ObjectType::Table,
                if_exists,
                names,
                ..
            } => self.drop_tables(names, *if_exists).await,
            Statement::CreateIndex(create) => self.create_index(create, |_| {}).await.map(Some),
            Statement::AlterTable(alter) => match self.rename_stored_view(alter).await? {
                Some(outcome) => Ok(Some(outcome)),
                None => self.alter_table(alter).await,
            },
            Statement::CreateView(_) => self.create_view(statement).await,
            Statement::Drop {
                object_type: ObjectType::View,
                if_exists,
                names,
                ..
            } => self.drop_views(names, *if_exists).await,
            Statement::Drop {
                object_type: ObjectType::Index,
                if_exists,
                names,
                cascade,
                ..
            } => self.drop_index(names, *if_exists, *cascade).await.map(Some),
            Statement::Analyze(analyze) => {
                let settings = TablesqlConfig::of(self.ctx.state().config());
                let how = Reading {
                    every: settings.guidepost_every,
                    sample: settings.analyze_sample,
                };
                self.analyze_statement(analyze, how).await.map(Some)
            }
            Statement::CreateSequence {
                temporary,
                if_not_exists,
                name,
                data_type,
                sequence_options,
                owned_by,
            } => {
                if *temporary || owned_by.is_some() {
                    return Err(CatalogError::Definition(
                        "TEMPORARY and OWNED BY sequences are not supported".into(),
                    )
                    .into());
                }
                if data_type
                    .as_ref()
                    .is_some_and(|t| !t.to_string().eq_ignore_ascii_case("bigint"))
                {
                    return Err(CatalogError::Definition(
                        "sequences are bigint (AS bigint or no AS)".into(),
                    )
                    .into());
                }
                let name = sequence::object_name(name)?;
                let def = SequenceDef::from_options(&name, sequence_options)
                    .map_err(CatalogError::from)?;
                let mut outcome = DdlOutcome::default();
                if !sequence::create(self.store.as_ref(), &def, *if_not_exists).await? {
                    outcome.notices.push(Notice::new(
                        NoticeKind::AlreadyExists,
                        format!("relation \"{name}\" already exists, skipping"),
                    ));
                }
                Ok(Some(outcome))
            }
            Statement::Drop {
                object_type: ObjectType::Sequence,
                if_exists,
                names,
                ..
            } => {
                let mut outcome = DdlOutcome::default();
                for n in names {
                    let name = sequence::object_name(n)?;
                    if sequence::drop(self.store.as_ref(), &name, *if_exists).await? {
                        self.sequences.forget(&name);
                    } else {
                        outcome.notices.push(Notice::new(
                            NoticeKind::DoesNotExist,
                            format!("sequence \"{name}\" does not exist, skipping"),
                        ));
                    }
                }
                Ok(Some(outcome))
            }
            _ => Ok(None),
        }
    }
}

impl Engine {
    /// `DROP TABLE [IF EXISTS] a, b`, as PostgreSQL: every name is checked
    /// before anything is dropped; a missing one is an error (42P01), or a
    /// notice with IF EXISTS. Mapped tables lose their definition (the
    /// entities stay); storage tables without a mapping are refused. `None`
    /// leaves tables an embedder registered to DataFusion.
    pub(super) async fn drop_tables(
        &self,
        names: &[ObjectName],
        if_exists: bool,
    ) -> Result<Option<DdlOutcome>, EngineError> {
        let defs = persist::load(self.store.as_ref()).await?;
        let mut mapped = Vec::new();
        let mut outcome = DdlOutcome::default();
        for n in names {
            if block_ddl::is_raw(n) {
                return Err(CatalogError::NotDroppable(n.to_string()).into());
            }
            let name = ddl::object_name(n)?;
            if defs.iter().any(|d| d.name == name) {
                mapped.push(name);
                continue;
            }
            match self.public_schema().table(&name).await? {
                Some(t) => {
                    let any: &dyn std::any::Any = t.as_ref();
                    if any.is::<StoreTable>() {
                        return Err(CatalogError::NotDroppable(name).into());
                    }
                    return Ok(None);
                }
                None if if_exists => outcome.notices.push(Notice::new(
                    NoticeKind::DoesNotExist,
                    format!("table \"{name}\" does not exist, skipping"),
                )),
                None => return Err(CatalogError::UnknownTable(name).into()),
            }
        }
        if !mapped.is_empty() {
            for name in &mapped {
                persist::remove(self.store.as_ref(), name).await?;
                if let Some(def) = defs.iter().find(|d| d.name == *name) {
                    self.drop_storage(def).await?;
                }
            }
            self.refresh().await?;
        }
        Ok(Some(outcome))
    }
}
