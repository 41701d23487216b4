//! Schema `public` of an engine: the store's tables (mapped, and raw ones
//! without a mapping) beside the tables an embedder or DataFusion's own DDL
//! (`CREATE VIEW`) registers. A reload of the catalog replaces the store's
//! tables whole, in one step, and never touches the others: a statement
//! planning meanwhile sees the old set or the new, and a view created
//! meanwhile stays.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use async_trait::async_trait;
use datafusion::catalog::{SchemaProvider, TableProvider};
use datafusion::error::{DataFusionError, Result};

type Tables = HashMap<String, Arc<dyn TableProvider>>;

/// See the module doc.
#[derive(Debug, Default)]
pub(super) struct PublicSchema {
    /// The store's tables, replaced whole by a reload.
    store: RwLock<Arc<Tables>>,
    /// Everyone else's.
    others: RwLock<Tables>,
}

fn poisoned() -> DataFusionError {
    DataFusionError::Internal("a catalog lock was poisoned".into())
}

impl PublicSchema {
    /// Puts `tables` in place of the store's tables, at once.
    pub(super) fn replace_store_tables(&self, tables: Tables) -> Result<()> {
        *self.store.write().map_err(|_| poisoned())? = Arc::new(tables);
        Ok(())
    }

    /// Adds or replaces one of the store's tables (a table this engine
    /// just defined).
    pub(super) fn put_store_table(
        &self,
        name: String,
        table: Arc<dyn TableProvider>,
    ) -> Result<()> {
        let mut store = self.store.write().map_err(|_| poisoned())?;
        let mut tables = Tables::clone(&store);
        tables.insert(name, table);
        *store = Arc::new(tables);
        Ok(())
    }

    fn store_tables(&self) -> Arc<Tables> {
        match self.store.read() {
            Ok(t) => t.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }
}

#[async_trait]
impl SchemaProvider for PublicSchema {
    fn table_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.store_tables().keys().cloned().collect();
        if let Ok(others) = self.others.read() {
            names.extend(
                others
                    .keys()
                    .filter(|n| !names.contains(n))
                    .cloned()
                    .collect::<Vec<_>>(),
            );
        }
        names
    }

    async fn table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>> {
        if let Some(t) = self.store_tables().get(name) {
            return Ok(Some(t.clone()));
        }
        Ok(self
            .others
            .read()
            .map_err(|_| poisoned())?
            .get(name)
            .cloned())
    }

    fn register_table(
        &self,
        name: String,
        table: Arc<dyn TableProvider>,
    ) -> Result<Option<Arc<dyn TableProvider>>> {
        if self.table_exist(&name) {
            return Err(DataFusionError::Execution(format!(
                "The table {name} already exists"
            )));
        }
        Ok(self
            .others
            .write()
            .map_err(|_| poisoned())?
            .insert(name, table))
    }

    fn deregister_table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>> {
        if let Some(t) = self.others.write().map_err(|_| poisoned())?.remove(name) {
            return Ok(Some(t));
        }
        let mut store = self.store.write().map_err(|_| poisoned())?;
        if !store.contains_key(name) {
            return Ok(None);
        }
        let mut tables = Tables::clone(&store);
        let removed = tables.remove(name);
        *store = Arc::new(tables);
        Ok(removed)
    }

    fn table_exist(&self, name: &str) -> bool {
        self.store_tables().contains_key(name)
            || self.others.read().is_ok_and(|o| o.contains_key(name))
    }
}
