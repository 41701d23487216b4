//! The catalog a session plans with: the engine's, seen through the
//! session's own relations (`engine::own`). Its open block's tables and
//! views stand over the shared ones of the same name, a relation the block
//! dropped is not there, and its temporary tables are in `pg_temp` and, as
//! PostgreSQL's search path puts `pg_temp` first, found by their bare
//! names. DataFusion's `information_schema` lists what this catalog lists.
//! Registering goes to the engine's catalog, as before.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::catalog::{CatalogProvider, CatalogProviderList, SchemaProvider, TableProvider};
use datafusion::error::Result;

use super::own::{OwnRelations, Seen};

/// The schema of a session's temporary tables.
pub(crate) const TEMP_SCHEMA: &str = "pg_temp";

/// The catalogs of one session (see the module doc).
#[derive(Debug)]
pub(crate) struct SessionCatalogs {
    pub(crate) base: Arc<dyn CatalogProviderList>,
    /// The catalog the session's relations are in.
    pub(crate) name: String,
    pub(crate) own: Arc<OwnRelations>,
}

impl CatalogProviderList for SessionCatalogs {
    fn register_catalog(
        &self,
        name: String,
        catalog: Arc<dyn CatalogProvider>,
    ) -> Option<Arc<dyn CatalogProvider>> {
        self.base.register_catalog(name, catalog)
    }

    fn catalog_names(&self) -> Vec<String> {
        self.base.catalog_names()
    }

    fn catalog(&self, name: &str) -> Option<Arc<dyn CatalogProvider>> {
        let base = self.base.catalog(name)?;
        if name != self.name {
            return Some(base);
        }
        Some(Arc::new(SessionCatalog {
            base,
            own: self.own.clone(),
        }))
    }
}

#[derive(Debug)]
struct SessionCatalog {
    base: Arc<dyn CatalogProvider>,
    own: Arc<OwnRelations>,
}

impl CatalogProvider for SessionCatalog {
    fn schema_names(&self) -> Vec<String> {
        let mut names = self.base.schema_names();
        if !self.own.temp_names().is_empty() {
            names.push(TEMP_SCHEMA.to_owned());
        }
        names
    }

    fn schema(&self, name: &str) -> Option<Arc<dyn SchemaProvider>> {
        if name == TEMP_SCHEMA {
            return Some(Arc::new(TempSchema(self.own.clone())));
        }
        let base = self.base.schema(name)?;
        if name != "public" {
            return Some(base);
        }
        Some(Arc::new(BlockSchema {
            base,
            own: self.own.clone(),
        }))
    }

    fn register_schema(
        &self,
        name: &str,
        schema: Arc<dyn SchemaProvider>,
    ) -> Result<Option<Arc<dyn SchemaProvider>>> {
        self.base.register_schema(name, schema)
    }

    fn deregister_schema(
        &self,
        name: &str,
        cascade: bool,
    ) -> Result<Option<Arc<dyn SchemaProvider>>> {
        self.base.deregister_schema(name, cascade)
    }
}

/// Schema `public` as the session sees it.
#[derive(Debug)]
struct BlockSchema {
    base: Arc<dyn SchemaProvider>,
    own: Arc<OwnRelations>,
}

#[async_trait]
impl SchemaProvider for BlockSchema {
    fn table_names(&self) -> Vec<String> {
        let (made, dropped) = self.own.names();
        let mut names: Vec<String> = self
            .base
            .table_names()
            .into_iter()
            .filter(|n| !dropped.contains(n) && !made.contains(n))
            .collect();
        names.extend(made);
        names
    }

    async fn table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>> {
        if let Some(t) = self.own.temp(name) {
            return Ok(Some(t));
        }
        match self.own.seen(name) {
            Seen::Changed(r) => Ok(Some(r.provider())),
            Seen::Dropped => Ok(None),
            Seen::Untouched => self.base.table(name).await,
        }
    }

    fn register_table(
        &self,
        name: String,
        table: Arc<dyn TableProvider>,
    ) -> Result<Option<Arc<dyn TableProvider>>> {
        self.base.register_table(name, table)
    }

    fn deregister_table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>> {
        self.base.deregister_table(name)
    }

    fn table_exist(&self, name: &str) -> bool {
        if self.own.temp(name).is_some() {
            return true;
        }
        match self.own.seen(name) {
            Seen::Changed(_) => true,
            Seen::Dropped => false,
            Seen::Untouched => self.base.table_exist(name),
        }
    }
}

/// Schema `pg_temp`: the session's temporary tables.
#[derive(Debug)]
struct TempSchema(Arc<OwnRelations>);

#[async_trait]
impl SchemaProvider for TempSchema {
    fn table_names(&self) -> Vec<String> {
        self.0.temp_names()
    }

    async fn table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>> {
        Ok(self.0.temp(name))
    }

    fn table_exist(&self, name: &str) -> bool {
        self.0.temp(name).is_some()
    }
}
