//! `pg_catalog` as drivers and BI tools read it: datafusion-pg-catalog's
//! tables and functions, with what their introspection queries need and it
//! lacks filled in beside it (each a gap to report upstream):
//!
//! - primary keys and indexes: `pg_index`, `pg_constraint` and the
//!   `pg_indexes` view with rows for
//!   each table's primary key (a mapped table's declared one, a raw table's
//!   `(PartitionKey, RowKey)`) and declared index rows, their vectors as
//!   lists, and an index relation in `pg_class` for each (`relkind = 'i'`,
//!   `relhasindex` on its table); `pg_class.reloptions`;
//! - `pg_settings` with the session's parameters (it held one row);
//! - `pg_table_is_visible`, which answered true for every table, so that
//!   SQLAlchemy listed each table of `public` again from `raw`;
//! - `pg_get_indexdef`, `pg_get_constraintdef`, `pg_get_serial_sequence`,
//!   `to_regtype`, `pg_get_function_result`, and, in the planner,
//!   `like_escape` (`LIKE ... ESCAPE`) and `_pg_expandarray`;
//! - `pg_proc`'s argument columns as arrays (`procs.rs`), and a
//!   `regtype` cast to text as the type's name (`regtype.rs`);
//! - `pg_attribute`'s NUMERIC type modifiers and index columns
//!   (`attributes.rs`);
//! - a regproc column (kept as the function's name) compared with 0
//!   (`regproc.rs`), as ADBC's driver asks at connect.

use std::collections::HashMap;
use std::sync::{Arc, Weak};

use async_trait::async_trait;
use datafusion::arrow::array::{Array, AsArray, RecordBatch};
use datafusion::arrow::datatypes::{Int32Type, SchemaRef};
use datafusion::catalog::{CatalogProviderList, SchemaProvider, Session, TableProvider};
use datafusion::datasource::TableType;
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::error::{DataFusionError, Result};
use datafusion::logical_expr::Expr;
use datafusion::physical_plan::{ExecutionPlan, collect};
use datafusion::prelude::SessionContext;
use datafusion_pg_catalog::pg_catalog::catalog_info::CatalogInfo;
use datafusion_pg_catalog::pg_catalog::context::EmptyContextProvider;
use datafusion_pg_catalog::pg_catalog::{PgCatalogSchemaProvider, PgCatalogStaticTables};

use crate::engine::TableInfo;

mod attributes;
mod dialect;
mod functions;
mod keys;
mod procs;
mod regproc;
mod regtype;
mod relations;
mod settings;
mod tables;

pub use dialect::PgDialect;
use relations::Known;

/// The catalog whose `public` and `raw` tables `pg_catalog` describes.
const CATALOG: &str = "datafusion";

/// Installs `pg_catalog` and its functions on `ctx`, the engine's context,
/// which every session copies.
pub async fn install(ctx: &SessionContext) -> Result<()> {
    datafusion_pg_catalog::setup_pg_catalog(ctx, CATALOG, EmptyContextProvider).map_err(|e| *e)?;
    // The engine's, which datafusion-pg-catalog's replaced: it reads
    // `"public" . "t"` as PostgreSQL does (its `regclass` lookups use it).
    ctx.register_udf(crate::engine::parse_ident_udf());
    let Some(catalog) = ctx.catalog(CATALOG) else {
        return Err(DataFusionError::Internal(format!("no catalog {CATALOG}")));
    };
    let catalogs = Arc::downgrade(ctx.state().catalog_list());
    // Its tables again, over the tables' own columns (`OwnColumns`).
    let inner: Arc<dyn SchemaProvider> = Arc::new(PgCatalogSchemaProvider::try_new(
        OwnColumns(catalogs.clone()),
        Arc::new(PgCatalogStaticTables::try_new()?),
        EmptyContextProvider,
    )?);
    let class = match inner.table("pg_class").await? {
        Some(t) => relations::pg_class_schema(&t.schema()),
        None => return Err(DataFusionError::Internal("no pg_class".into())),
    };
    let settings = match inner.table("pg_settings").await? {
        Some(t) => t.schema(),
        None => return Err(DataFusionError::Internal("no pg_settings".into())),
    };
    let attribute = match inner.table("pg_attribute").await? {
        Some(t) => t.schema(),
        None => return Err(DataFusionError::Internal("no pg_attribute".into())),
    };
    let (types, type_names) = type_maps(ctx).await?;
    let (types, type_names) = (Arc::new(types), Arc::new(type_names));
    let procs = match inner.table("pg_proc").await? {
        Some(t) => {
            let state = ctx.state();
            let plan = t.scan(&state, None, &[], None).await?;
            let all = collect(plan, state.task_ctx()).await?;
            let all = datafusion::arrow::compute::concat_batches(&t.schema(), &all)?;
            procs::typed(&all)?
        }
        None => return Err(DataFusionError::Internal("no pg_proc".into())),
    };
    let results = Arc::new(function_results(ctx).await?);
    let shared = Arc::new(Shared {
        inner,
        catalogs,
        known: Arc::default(),
        class,
        settings,
        attribute,
        procs,
    });
    for udf in functions::udfs(&shared.known, &types, &results) {
        ctx.register_udf(udf);
    }
    ctx.register_udf(datafusion::logical_expr::ScalarUDF::new_from_impl(
        regtype::RegtypeOut::new(type_names),
    ));
    catalog.register_schema("pg_catalog", Arc::new(PgCatalog { shared }))?;
    {
        use datafusion::execution::FunctionRegistry as _;
        let state = ctx.state_ref();
        let mut state = state.write();
        state.register_expr_planner(Arc::new(regproc::RegprocZero))?;
    }
    {
        // First among the planners: DataFusion's own plans every subscript
        // and asks no planner after it (`register_expr_planner` appends).
        use datafusion::execution::session_state::SessionStateBuilder;
        use datafusion::logical_expr::planner::ExprPlanner;
        let state = ctx.state_ref();
        let existing = state.read().clone();
        let mut planners: Vec<Arc<dyn ExprPlanner>> =
            vec![Arc::new(crate::server::vectors::VectorSubscripts)];
        planners.extend(existing.expr_planners().iter().cloned());
        *state.write() = SessionStateBuilder::new_from_existing(existing)
            .with_expr_planners(planners)
            .build();
    }
    Ok(())
}

/// The catalog as `pg_attribute` lists it: a mapped table's own columns,
/// without its system columns (`PartitionKey`, `RowKey`, `Timestamp`,
/// `_etag`), as PostgreSQL lists no `ctid` or `xmin` (they are last, so the
/// others keep their numbers). psql's `\d`, JDBC's `getColumns` and
/// SQLAlchemy's reflection then see the columns a table was created with;
/// a query still names the system columns.
///
/// It holds the catalogs weakly, as `Shared::catalogs` does: they hold the
/// `pg_catalog` schema that holds this, and a strong reference made a
/// cycle that kept every table provider, and with them the store, alive
/// past the engine's close (a server's stop waited out its 5 s for the
/// store and then left it open).
#[derive(Debug, Clone)]
struct OwnColumns(Weak<dyn CatalogProviderList>);

impl OwnColumns {
    fn catalogs(&self) -> Result<Arc<dyn CatalogProviderList>> {
        self.0
            .upgrade()
            .ok_or_else(|| DataFusionError::Execution("the engine is closed".into()))
    }
}

#[async_trait]
impl CatalogInfo for OwnColumns {
    async fn catalog_names(&self) -> Result<Vec<String>> {
        self.catalogs()?.catalog_names().await
    }

    async fn schema_names(&self, catalog: &str) -> Result<Option<Vec<String>>> {
        CatalogInfo::schema_names(&self.catalogs()?, catalog).await
    }

    async fn table_names(&self, catalog: &str, schema: &str) -> Result<Option<Vec<String>>> {
        CatalogInfo::table_names(&self.catalogs()?, catalog, schema).await
    }

    async fn table_schema(
        &self,
        catalog: &str,
        schema: &str,
        table: &str,
    ) -> Result<Option<SchemaRef>> {
        let provider = match self
            .catalogs()?
            .catalog(catalog)
            .and_then(|c| c.schema(schema))
        {
            Some(s) => s.table(table).await?,
            None => None,
        };
        Ok(provider.map(|t| {
            let full = t.schema();
            let Some(def) = crate::engine::bulk::mapping(t.as_ref()) else {
                return full;
            };
            let hidden = def.hidden_columns();
            let own: Vec<_> = full
                .fields()
                .iter()
                .filter(|f| !hidden.contains(&f.name().as_str()))
                .cloned()
                .collect();
            Arc::new(datafusion::arrow::datatypes::Schema::new_with_metadata(
                own,
                full.metadata().clone(),
            ))
        }))
    }

    async fn table_type(
        &self,
        catalog: &str,
        schema: &str,
        table: &str,
    ) -> Result<Option<TableType>> {
        CatalogInfo::table_type(&self.catalogs()?, catalog, schema, table).await
    }
}

/// `pg_type`'s names to oids, for `to_regtype`, and its oids to the names
/// a `regtype` prints (static), from one read:
/// `format_type`'s (`integer`, `text[]`); for a type it does not know (it
/// says `oid(N)`), the type's own name, an array's as its element's with
/// `[]` (`aclitem[]`), quoted where PostgreSQL's `format_type` quotes it
/// (`"any"`, a keyword).
async fn type_maps(ctx: &SessionContext) -> Result<(HashMap<String, i32>, HashMap<i32, String>)> {
    let batches = ctx
        .sql("SELECT oid, format_type(oid, NULL), typname, typelem FROM pg_catalog.pg_type")
        .await?
        .collect()
        .await?;
    let mut oids_by_name = HashMap::new();
    let mut known = HashMap::new();
    let mut others = Vec::new();
    for b in &batches {
        let (Some(oids), Some(formatted), Some(names), Some(elements)) = (
            b.column(0).as_primitive_opt::<Int32Type>(),
            b.column(1).as_string_opt::<i32>(),
            b.column(2).as_string_opt::<i32>(),
            b.column(3).as_primitive_opt::<Int32Type>(),
        ) else {
            return Err(DataFusionError::Internal(
                "pg_type: unexpected types".into(),
            ));
        };
        for i in 0..b.num_rows() {
            oids_by_name.insert(names.value(i).to_owned(), oids.value(i));
            if formatted.is_valid(i) && !formatted.value(i).starts_with("oid(") {
                known.insert(oids.value(i), formatted.value(i).to_owned());
            } else {
                others.push((oids.value(i), names.value(i).to_owned(), elements.value(i)));
            }
        }
    }
    let own = |name: &str| match name {
        "any" => "\"any\"".to_owned(),
        other => other.to_owned(),
    };
    let mut out = known.clone();
    for (oid, name, element) in &others {
        let array_of = name.strip_prefix('_').and_then(|_| {
            known.get(element).cloned().or_else(|| {
                others
                    .iter()
                    .find(|(o, ..)| o == element)
                    .map(|(_, n, _)| own(n))
            })
        });
        let shown = match array_of {
            Some(element) => format!("{element}[]"),
            None => own(name),
        };
        out.insert(*oid, shown);
    }
    Ok((oids_by_name, out))
}

/// `pg_proc`'s functions to their result types as PostgreSQL prints them
/// (static), for `pg_get_function_result`.
async fn function_results(ctx: &SessionContext) -> Result<HashMap<i32, String>> {
    let batches = ctx
        .sql(
            "SELECT oid, CASE WHEN proretset THEN 'SETOF ' ELSE '' END \
             || format_type(prorettype, NULL) FROM pg_catalog.pg_proc",
        )
        .await?
        .collect()
        .await?;
    let mut out = HashMap::new();
    for b in &batches {
        let (Some(oids), Some(results)) = (
            b.column(0).as_primitive_opt::<Int32Type>(),
            b.column(1).as_string_opt::<i32>(),
        ) else {
            return Err(DataFusionError::Internal(
                "pg_proc: unexpected types".into(),
            ));
        };
        for i in 0..b.num_rows() {
            if results.is_valid(i) {
                out.insert(oids.value(i), results.value(i).to_owned());
            }
        }
    }
    Ok(out)
}

#[derive(Debug)]
struct Shared {
    /// datafusion-pg-catalog's schema.
    inner: Arc<dyn SchemaProvider>,
    /// The context's catalogs, weakly: they hold this schema.
    catalogs: Weak<dyn CatalogProviderList>,
    known: Arc<Known>,
    /// `pg_class` with `reloptions`.
    class: SchemaRef,
    /// datafusion-pg-catalog's `pg_settings`.
    settings: SchemaRef,
    /// datafusion-pg-catalog's `pg_attribute`.
    attribute: SchemaRef,
    /// `pg_proc`, typed (static).
    procs: RecordBatch,
}

impl Shared {
    async fn scan_inner(&self, name: &str, state: &dyn Session) -> Result<Vec<RecordBatch>> {
        let Some(table) = self.inner.table(name).await? else {
            return Err(DataFusionError::Internal(format!("no {name}")));
        };
        let plan = table.scan(state, None, &[], None).await?;
        collect(plan, state.task_ctx()).await
    }

    /// Reads the tables and their oids afresh: datafusion-pg-catalog
    /// assigns oids as its `pg_class` is read.
    async fn read(
        &self,
        state: &dyn Session,
    ) -> Result<(Vec<RecordBatch>, Arc<relations::Relations>)> {
        let class = self.scan_inner("pg_class", state).await?;
        let namespaces = self.scan_inner("pg_namespace", state).await?;
        let tables = match self.catalogs.upgrade().and_then(|c| c.catalog(CATALOG)) {
            Some(catalog) => TableInfo::all_in(catalog.as_ref()).await?,
            None => Vec::new(),
        };
        let relations = self.known.update(&class, &namespaces, &tables)?;
        Ok((class, relations))
    }

    /// The columns of each table that `pg_attribute` (`theirs`) gives a
    /// NUMERIC column, by the table's oid: the precision and scale that
    /// its `atttypmod` tells are in the table's schema only.
    async fn numeric_tables(
        &self,
        theirs: &[RecordBatch],
        relations: &relations::Relations,
    ) -> Result<HashMap<i32, SchemaRef>> {
        const NUMERIC: i32 = 1700;
        let mut oids = std::collections::BTreeSet::new();
        for b in theirs {
            let (Some(relids), Some(types)) = (
                b.column_by_name("attrelid")
                    .and_then(|c| c.as_primitive_opt::<Int32Type>()),
                b.column_by_name("atttypid")
                    .and_then(|c| c.as_primitive_opt::<Int32Type>()),
            ) else {
                return Err(DataFusionError::Internal(
                    "pg_attribute: unexpected types".into(),
                ));
            };
            oids.extend(
                (0..b.num_rows())
                    .filter(|&i| types.value(i) == NUMERIC)
                    .map(|i| relids.value(i)),
            );
        }
        let columns = OwnColumns(self.catalogs.clone());
        let mut out = HashMap::new();
        for oid in oids {
            let Some(r) = relations.tables.get(&oid) else {
                continue;
            };
            if let Some(schema) = columns.table_schema(CATALOG, &r.schema, &r.name).await? {
                out.insert(oid, schema);
            }
        }
        Ok(out)
    }
}

#[derive(Debug)]
struct PgCatalog {
    shared: Arc<Shared>,
}

#[async_trait]
impl SchemaProvider for PgCatalog {
    fn table_names(&self) -> Vec<String> {
        let mut names = self.shared.inner.table_names();
        names.push("pg_indexes".to_owned());
        names
    }

    async fn table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>> {
        let kind = match name.to_ascii_lowercase().as_str() {
            "pg_settings" => Kind::Settings,
            "pg_class" => Kind::Class,
            "pg_index" => Kind::Index,
            "pg_constraint" => Kind::Constraint,
            "pg_indexes" => Kind::Indexes,
            "pg_attribute" => Kind::Attribute,
            "pg_proc" => Kind::Proc,
            "pg_tables" => Kind::Tables,
            "pg_views" => Kind::Views,
            _ => return self.shared.inner.table(name).await,
        };
        Ok(Some(Arc::new(CatalogTable {
            shared: self.shared.clone(),
            kind,
        })))
    }

    fn table_exist(&self, name: &str) -> bool {
        name.eq_ignore_ascii_case("pg_indexes") || self.shared.inner.table_exist(name)
    }
}

#[derive(Debug, Clone, Copy)]
enum Kind {
    Settings,
    Class,
    Index,
    Constraint,
    Indexes,
    Attribute,
    Proc,
    Tables,
    Views,
}

/// A catalog table computed afresh at each scan.
#[derive(Debug)]
struct CatalogTable {
    shared: Arc<Shared>,
    kind: Kind,
}

#[async_trait]
impl TableProvider for CatalogTable {
    fn schema(&self) -> SchemaRef {
        match self.kind {
            Kind::Settings => self.shared.settings.clone(),
            Kind::Class => self.shared.class.clone(),
            Kind::Index => keys::pg_index_schema(),
            Kind::Constraint => keys::pg_constraint_schema(),
            Kind::Indexes => keys::pg_indexes_schema(),
            Kind::Attribute => self.shared.attribute.clone(),
            Kind::Proc => self.shared.procs.schema(),
            Kind::Tables => tables::pg_tables_schema(),
            Kind::Views => tables::pg_views_schema(),
        }
    }

    fn table_type(&self) -> TableType {
        match self.kind {
            Kind::Indexes | Kind::Tables | Kind::Views => TableType::View,
            _ => TableType::Base,
        }
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let batch = match self.kind {
            Kind::Settings => settings::pg_settings(&self.shared.settings, state)?,
            Kind::Class => {
                let (class, relations) = self.shared.read(state).await?;
                relations::pg_class(&self.shared.class, &class, &relations)?
            }
            Kind::Index => keys::pg_index(&self.shared.read(state).await?.1)?,
            Kind::Constraint => keys::pg_constraint(&self.shared.read(state).await?.1)?,
            Kind::Indexes => keys::pg_indexes(&self.shared.read(state).await?.1)?,
            Kind::Attribute => {
                let theirs = self.shared.scan_inner("pg_attribute", state).await?;
                let relations = self.shared.read(state).await?.1;
                let tables = self.shared.numeric_tables(&theirs, &relations).await?;
                attributes::pg_attribute(&self.shared.attribute, &theirs, &relations, &tables)?
            }
            Kind::Proc => self.shared.procs.clone(),
            Kind::Tables => tables::pg_tables(&self.shared.read(state).await?.1)?,
            Kind::Views => {
                let relations = self.shared.read(state).await?.1;
                let catalog = self
                    .shared
                    .catalogs
                    .upgrade()
                    .and_then(|c| c.catalog(CATALOG));
                tables::pg_views(&relations, catalog).await?
            }
        };
        let exec =
            MemorySourceConfig::try_new_exec(&[vec![batch]], self.schema(), projection.cloned())?;
        Ok(exec)
    }
}
