//! The tables an engine registers: mapped tables from the stored catalog,
//! every storage table under `raw`, their providers, and the lookups of a
//! table by its SQL name.

use super::*;

impl Engine {
    /// Re-reads the catalog and the store's tables and registers them anew:
    /// mapped tables by their SQL names, every storage table in schema `raw`,
    /// and unmapped ones also by their lower-cased names. Both sets are
    /// built aside and put in place at once (`schema::PublicSchema`), so a
    /// statement planning meanwhile sees the old tables or the new, and the
    /// tables an embedder or a `CREATE VIEW` registered stay.
    pub(super) async fn reload(&self) -> Result<(), EngineError> {
        let persist::Relations {
            tables: defs,
            views,
        } = persist::load_all(self.store.as_ref()).await?;
        self.stats
            .replace_all(stats::load_all(self.store.as_ref()).await?);
        let raw = Arc::new(MemorySchemaProvider::new());
        let mut tables: HashMap<String, Arc<dyn TableProvider>> = HashMap::new();
        for def in &defs {
            let (name, provider) = self.mapped_provider(def.clone())?;
            tables.insert(name, provider);
        }
        for table in self.store.list_tables().await? {
            if table.as_str().eq_ignore_ascii_case(CATALOG_TABLE) {
                continue;
            }
            let provider = Arc::new(self.raw_table(&table).await?);
            let name = table.as_str().to_lowercase();
            raw.register_table(name.clone(), provider.clone())?;
            if !tables.contains_key(&name) && !defs.iter().any(|d| d.storage_table == table) {
                tables.insert(name, provider);
            }
        }
        if let Some(catalog) = self.base.catalog("datafusion") {
            catalog.register_schema(RAW_SCHEMA, raw)?;
        }
        self.public.replace_store_tables(tables.clone())?;
        // Views are planned over the tables just registered (and over one
        // another: a view whose relation is not there yet waits a round).
        let mut pending = views;
        while !pending.is_empty() {
            let before = pending.len();
            let mut waiting = Vec::new();
            for (name, sql) in pending {
                match self.view_provider(&sql).await {
                    Ok(view) => {
                        tables.insert(name, view);
                        self.public.replace_store_tables(tables.clone())?;
                    }
                    Err(e) => waiting.push((name, sql, e)),
                }
            }
            if waiting.len() == before {
                // What is left names relations that are gone (a view is not
                // dropped with its table): not registered, so a query of it
                // finds no such relation, and DROP VIEW still removes it.
                break;
            }
            pending = waiting.into_iter().map(|(n, s, _)| (n, s)).collect();
        }
        // Raised once the tables are in place: a statement planned while
        // they changed carries the old version and is planned again.
        self.catalog_changed();
        Ok(())
    }

    pub(super) fn catalog_changed(&self) {
        self.catalog_version
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    }

    /// Schema `public`: the engine holds it (`schema::PublicSchema`), so
    /// no lookup through the context's catalog.
    pub(super) fn public_schema(&self) -> Arc<dyn SchemaProvider> {
        self.public.clone()
    }

    pub(super) fn provider(&self, layout: Layout) -> StoreTable {
        let t = StoreTable::new(self.store.clone(), layout, self.options.scan)
            .with_stats(self.stats.clone());
        if !self.options.pushdown {
            t.without_pushdown()
        } else {
            t
        }
    }

    /// Registers a mapped table, in place of a store table of the same name
    /// (a raw alias, or an older mapping).
    pub(super) fn register_mapped(&self, def: TableDef) -> Result<(), EngineError> {
        let (name, provider) = self.mapped_provider(def)?;
        self.public.put_store_table(name, provider)?;
        self.catalog_changed();
        Ok(())
    }

    /// A mapped table's name and provider.
    pub(super) fn mapped_provider(
        &self,
        def: TableDef,
    ) -> Result<(String, Arc<dyn TableProvider>), EngineError> {
        let name = def.name.clone();
        let layout = Layout::mapped(Arc::new(def));
        let defaults = self.column_defaults(&layout)?;
        Ok((
            name,
            Arc::new(self.provider(layout).with_defaults(defaults)),
        ))
    }

    /// The `DEFAULT` expressions of a mapped table's columns, planned
    /// against its schema (they may call `nextval`).
    pub(super) fn column_defaults(
        &self,
        layout: &Layout,
    ) -> Result<std::collections::HashMap<String, datafusion::prelude::Expr>, EngineError> {
        let Some(def) = &layout.def else {
            return Ok(Default::default());
        };
        let schema = datafusion::common::DFSchema::try_from(layout.schema.as_ref().clone())?;
        def.columns
            .iter()
            .filter_map(|c| c.default.as_ref().map(|d| (c, d)))
            .map(|(c, d)| Ok((c.name.clone(), self.base.parse_sql_expr(d, &schema)?)))
            .collect()
    }

    /// Whether `name` is taken by a mapping, or by a table the embedder registered.
    pub(super) async fn name_taken(&self, name: &str) -> Result<bool, EngineError> {
        if persist::load(self.store.as_ref())
            .await?
            .iter()
            .any(|d| d.name == name)
        {
            return Ok(true);
        }
        Ok(match self.public_schema().table(name).await? {
            Some(t) => {
                let any: &dyn std::any::Any = t.as_ref();
                !any.is::<StoreTable>()
            }
            None => false,
        })
    }

    /// Samples storage table `table` again and registers its raw table
    /// anew (`ANALYZE` of a raw table): properties met since it was
    /// sampled become columns. This process's; another's at its next
    /// catalog load.
    pub(super) async fn refresh_raw(&self, table: &TableName) -> Result<(), EngineError> {
        let provider: Arc<dyn TableProvider> = Arc::new(self.raw_table(table).await?);
        let name = table.as_str().to_lowercase();
        if let Some(raw) = self
            .base
            .catalog("datafusion")
            .and_then(|c| c.schema(RAW_SCHEMA))
        {
            raw.deregister_table(&name)?;
            raw.register_table(name.clone(), provider.clone())?;
        }
        // Its alias in `public`, where the name is the raw table's.
        let aliased =
            self.public.table(&name).await?.is_some_and(|t| {
                StoreTable::of(t.as_ref()).is_some_and(|s| s.layout().def.is_none())
            });
        if aliased {
            self.public.put_store_table(name, provider)?;
        }
        self.catalog_changed();
        Ok(())
    }

    pub(super) async fn raw_table(&self, table: &TableName) -> Result<StoreTable, EngineError> {
        // Not the users' workload: every process over the store samples
        // every raw table when it opens.
        let sample = raw_sample(self.unobserved.as_ref(), table).await?;
        Ok(self.provider(Layout::raw(table.clone(), &infer(&sample))))
    }

    /// A mapped table's definition, as stored.
    pub async fn table_def(&self, name: &str) -> Result<TableDef, EngineError> {
        persist::load(self.store.as_ref())
            .await?
            .into_iter()
            .find(|d| d.name == name)
            .ok_or_else(|| CatalogError::UnknownTable(name.to_owned()).into())
    }

    /// The storage table of a mapped table (its SQL name), or a storage
    /// table by its name or as `raw.<name>`.
    pub async fn storage_table(&self, name: &str) -> Result<TableName, EngineError> {
        let defs = persist::load(self.store.as_ref()).await?;
        if let Some(d) = defs.iter().find(|d| d.name == name) {
            return Ok(d.storage_table.clone());
        }
        match TableName::new(match name.get(..4) {
            Some(p) if p.eq_ignore_ascii_case("raw.") => &name[4..],
            _ => name,
        }) {
            Ok(t)
                if !t.as_str().eq_ignore_ascii_case(CATALOG_TABLE)
                    && self.store.list_tables().await?.contains(&t) =>
            {
                Ok(t)
            }
            _ => Err(CatalogError::UnknownTable(name.to_owned()).into()),
        }
    }
}

/// A raw table's sample (`catalog::raw`): its first page, then up to
/// `PER_KIND` entities of each RowKey kind of its first `KIND_PARTITIONS`
/// partitions, a kind found by a query from past the one before it, and a
/// partition by one from past the last: a request a kind and a partition.
async fn raw_sample(
    store: &dyn TableStore,
    table: &TableName,
) -> Result<Vec<crate::storage::StoredEntity>, EngineError> {
    use std::ops::Bound;

    use crate::catalog::raw::{KIND_PARTITIONS, KINDS_PER_PARTITION, PER_KIND, kind_of};
    use crate::storage::{KeyRange, RowKey};
    let first = store
        .query(table, &Query::all().top(SAMPLE_SIZE), None)
        .await?;
    let mut sample = first.entities;
    let mut partition = sample.first().map(|e| e.partition_key().clone());
    for _ in 0..KIND_PARTITIONS {
        let Some(pk) = partition.take() else {
            break;
        };
        let mut from = Bound::Unbounded;
        for _ in 0..KINDS_PER_PARTITION {
            let query = Query::partition(pk.clone())
                .rows(KeyRange {
                    start: from,
                    end: Bound::Unbounded,
                })
                .top(PER_KIND);
            let page = store.query(table, &query, None).await?;
            // The kind after the last one read: past every key it can have.
            let next = page
                .entities
                .last()
                .and_then(|e| kind_of(e.row_key().as_str()))
                .and_then(crate::keys::successor)
                .and_then(|k| RowKey::new(k).ok());
            sample.extend(page.entities);
            match next {
                Some(k) => from = Bound::Included(k),
                None => break,
            }
        }
        let after = Query {
            partitions: KeyRange {
                start: Bound::Excluded(pk),
                end: Bound::Unbounded,
            },
            ..Query::all().top(1)
        };
        let next = store.query(table, &after, None).await?;
        partition = next.entities.first().map(|e| e.partition_key().clone());
    }
    Ok(sample)
}
