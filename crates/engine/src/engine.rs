//! The engine and its sessions. An [`Engine`] is what every session over a
//! store shares: the store, the catalog's tables registered for DataFusion
//! (mapped through the catalog, or raw), statistics, sequences and the
//! workload. A [`Session`] is one connection's state over it (settings, a
//! transaction block, notices) and the one door statements run through
//! ([`Session::execute`]), the catalog DDL DataFusion does not know
//! (`CREATE TABLE ... WITH (partition_key = ...)`, `DROP TABLE` of a mapped
//! table) included. Front ends (the CLI, the wire server, the shell) and
//! embedders all go through it: `engine.session()`, then statements.
//!
//! - `session`: `Session`, one connection's state (its DataFusion context,
//!   settings, transaction block, notices), which `Engine::session` alone
//!   gives; `Session::execute` and `execute_sql`, the one door every statement
//!   runs through to a typed `Outcome`; `prepare`.
//! - `context`: a session's DataFusion context, built from the engine's: its
//!   own settings, notices, transaction block and share of memory.
//! - `door`: what a session answers before DataFusion plans (transaction
//!   control, catalog DDL, `SET`, `SHOW`), and `sql`, `execute_stream` and
//!   `collect` for an embedder.
//! - `start`: how the session starts a query (a prepared point read without
//!   planning, a page, the direct path or DataFusion's) and a `Write` (its run
//!   can be interrupted and say what it committed), for every front end alike.
//! - `run`: a run's pieces: its optimized plan and placeholder types, the
//!   prepared point query, its record in the workload statistics.
//! - `direct`: fully pushed scans without the physical planner, and the
//!   session's planning snapshot.
//! - `prepared`: `PreparedStatement`, the one prepared statement (the library's
//!   and the server's), planned again after a catalog change.
//! - `bind`: a run's values bound into its scans' filters without DataFusion's
//!   rebuild of every node.
//! - `paging`: token paging (`Session::query_page`).
//! - `block`: transaction control and the one authority on a failed block.
//! - `kind`: `StatementKind`, a statement's command tag, whether it writes
//!   rows, whether it changes the catalog.
//! - `show`: `SHOW` as the session answers it.
//! - `table_ddl`: catalog DDL: `CREATE TABLE ... WITH`, `ALTER TABLE`,
//!   `DROP TABLE` and `TRUNCATE` of a mapped table.
//! - `create_as`: `CREATE TABLE ... AS <query>`.
//! - `indexes`: `CREATE INDEX` and `DROP INDEX`.
//! - `views`: `CREATE VIEW` kept in the catalog, and `DROP VIEW`.
//! - `analyze`: `ANALYZE`: statistics taken (whole or sampled) and stored.
//! - `apply`: catalog directories (`tablesql apply`).
//! - `refuse`: the statements refused because what they create would live only
//!   in memory.
//! - `bulk`: what COPY and `tablesql load` (`crate::load`) ask of the planner
//!   and executor.
//! - `options`: `EngineOptions`, what an engine is opened with.
//! - `tables`: the tables an engine registers (mapped and raw), found by SQL
//!   name.
//! - `schema`: schema `public`: the store's tables, replaced whole at a reload,
//!   beside what an embedder or `CREATE VIEW` registers.
//! - `follow`: the live catalog: other engines' changes, followed by the stored
//!   catalog's version.
//! - `rules`: the optimizer rules the sessions plan with.
//! - `memory`: memory limits, for the process and for each session.
//! - `persist_timer`: the timer that stores the workload statistics.
//! - `describe`: what the tables are (primary keys, indexes), for front ends
//!   that describe them.
//! - `error`: `EngineError` and the SQLSTATE of each failure.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::record_batch::RecordBatch;
use datafusion::catalog::{MemorySchemaProvider, SchemaProvider, TableProvider};
use datafusion::dataframe::DataFrame;
use datafusion::datasource::MemTable;
use datafusion::error::DataFusionError;
use datafusion::execution::SendableRecordBatchStream;
use datafusion::execution::session_state::SessionStateBuilder;

use crate::exec::stats::analyze::{Analysis, KeyPath};
use crate::exec::stats::observed::ObservedStore;
use crate::exec::stats::persist::PersistedWorkload;
use crate::exec::stats::sample::{SampleReport, analyze_sampled};
use crate::exec::stats::workload::Workload;
use crate::exec::write::upkeep::Upkeep;
use crate::planner::index_functions::{self, IndexFunction};
use crate::planner::workload_views::{self, WorkloadView};
use datafusion::logical_expr::LogicalPlan;
use datafusion::optimizer::{Optimizer, OptimizerRule};
use datafusion::prelude::{SessionConfig, SessionContext};
use datafusion::sql::parser::{DFParser, Statement as DfStatement};
use datafusion::sql::sqlparser::ast::{ObjectName, ObjectType, Statement};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::ParserError;

use crate::catalog::persist::CATALOG_TABLE;
use crate::catalog::raw::{SAMPLE_SIZE, infer};
use crate::catalog::sequence::{self, SequenceDef};
use crate::catalog::stats::{PRIMARY_PATH, StatsCache, TableStats};
use crate::catalog::{CatalogError, TableDef, ddl, persist, stats};
use crate::exec::ops::coop::YieldingJoins;
use crate::exec::read::token::Signer;
use crate::exec::write::locks::RowLocks;
use crate::exec::write::sequences::Sequences;
use crate::exec::{Layout, ScanOptions};
use crate::planner::checked::CheckedIntegers;
use crate::planner::dml_shape::{DmlShape, EmptyDml};
use crate::planner::lookup::LookupJoins;
use crate::planner::parameters::{self as parameters, ParameterError, SessionParameters};
use crate::planner::policy::{Notices, ScanPolicy};
use crate::planner::sequence_functions::{self, AsyncValues, SequenceSession};
use crate::planner::settings::TablesqlConfig;
use crate::planner::subquery::ExtractSubqueries;
use crate::planner::subquery_rules::{
    AggregateScalarSubqueries, CorrelatedNotIn, NameComparedValues, NameSetComparisons,
    RefuseUnrunnableSubqueries,
};
use crate::planner::{StoreTable, TablesqlQueryPlanner};
use crate::storage::{Query, StorageError, StoreLocation, TableName, TableStore};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_optimizer::optimizer::PhysicalOptimizer;

mod analyze;
mod apply;
mod bind;
mod block;
mod block_ddl;
pub mod bulk;
mod context;
mod create_as;
mod database;
mod describe;
mod direct;
mod door;
mod error;
mod follow;
mod indexes;
mod kind;
mod memory;
mod options;
mod overlay;
mod own;
mod paging;
mod persist_timer;
mod prepared;
pub(crate) mod refuse;
mod rules;
mod run;
mod schema;
mod session;
mod show;
mod start;
mod table_ddl;
mod tables;
mod temp;
mod views;

pub use crate::exec::notices::{Notice, NoticeKind};
pub use crate::exec::stats::advise::PARTITION_TARGET_PER_S;
pub use crate::exec::stats::workload::PartitionTraffic;
pub use crate::exec::write::upkeep::IndexHealth;
pub use crate::planner::identity::{DEFAULT_DATABASE, PG_VERSION, PG_VERSION_NUM};
pub use crate::planner::parse_ident::parse_ident_udf;
pub use crate::planner::sql::{Dialect, Respell, SqlParser};
pub use analyze::Reading;
pub use apply::Applied;
pub use block::{BlockChange, BlockEnd, BlockStatus};
pub(crate) use context::{
    session_notices, session_parameters, session_relations, session_setting, session_transaction,
};
pub use describe::{
    ColumnInfo, IndexInfo, IndexTemplate, MappingInfo, StoredAs, TableDescription, TableInfo,
};
pub use error::{EngineError, datafusion_sqlstate};
pub use follow::DEFAULT_CATALOG_CHECK;
pub use kind::{StatementKind, returns_rows};
pub use memory::MemoryLimits;
pub use options::EngineOptions;
pub use paging::ResultPage;
pub use prepared::PreparedStatement;
use rules::{optimizer_rules, physical_optimizer_rules};
pub use run::{Transaction, statement_label};
pub use session::{Outcome, Session};
pub use start::Write;

/// The stack each thread that runs statements needs. A statement's
/// syntax tree is cloned, printed and dropped by recursion that nothing
/// guards (sqlparser's derives), so an expression nested as deep as
/// PostgreSQL takes it (hundreds of parentheses or ANDs) needs more than
/// tokio's 2 MiB. Only the pages a thread touches are ever committed.
pub const THREAD_STACK: usize = 32 * 1024 * 1024;

/// The schema that holds every storage table read raw.
pub const RAW_SCHEMA: &str = "raw";
/// The schema of mapped tables (DataFusion's default).
const PUBLIC_SCHEMA: &str = "public";

/// SQL over one store: what every session shares (the store, the catalog
/// and its tables, statistics, sequences, the workload). Statements run in
/// a [`Session`], one connection's state, which [`Engine::session`] gives;
/// clones of an engine share everything.
#[derive(Clone)]
pub struct Engine {
    /// The context every session's own is copied from: the tables, the
    /// functions and the rules, never a statement's state.
    base: SessionContext,
    store: Arc<dyn TableStore>,
    options: EngineOptions,
    parser: Arc<SqlParser>,
    /// Signs page tokens with the store's secret, read on first use.
    signer: Arc<tokio::sync::OnceCell<Signer>>,
    /// `ANALYZE`'s statistics, which scans plan their fan-out from.
    stats: Arc<StatsCache>,
    /// The blocks of sequence values this process holds.
    sequences: Arc<Sequences>,
    /// The row locks its sessions' `FOR UPDATE` reads hold (`exec::write::locks`).
    locks: Arc<RowLocks>,
    /// Raised by every change of the tables registered: prepared
    /// statements planned under an older version plan again.
    catalog_version: Arc<std::sync::atomic::AtomicU64>,
    /// The stored catalog's version the tables reflect (`follow`).
    watch: Arc<follow::CatalogWatch>,
    /// Schema `public`, shared by every session of the engine.
    public: Arc<schema::PublicSchema>,
    /// What statements asked of each partition (`tablesql_stat_partitions`).
    workload: Arc<Workload>,
    /// The workload statistics in the store, when they are kept there.
    persisted: Option<Arc<PersistedWorkload>>,
    /// The store, its requests not counted in the workload statistics: for
    /// the engine's own reading (a raw table's sample at each reload).
    unobserved: Arc<dyn TableStore>,
}

/// A query string's one statement (`Session::one_statement`). Made once per
/// statement and matched at once: not worth a box.
#[allow(clippy::large_enum_variant)]
pub(crate) enum OneStatement {
    /// Parsed by the PostgreSQL dialect every front end reads.
    Parsed(Statement),
    /// One of DataFusion's own statements, planned.
    DataFusion(DataFrame),
}

/// What catalog DDL did, when a statement was catalog DDL.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DdlOutcome {
    /// What PostgreSQL would say as a NOTICE (`table "x" does not exist, skipping`).
    pub notices: Vec<Notice>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("store", &self.store)
            .field("options", &self.options)
            .finish()
    }
}

impl Engine {
    /// Opens the store at a location and registers its tables.
    pub async fn open(location: &StoreLocation) -> Result<Self, EngineError> {
        let store: Arc<dyn TableStore> = location.open()?;
        Self::with_store(store, EngineOptions::default()).await
    }

    /// An engine over any store.
    pub async fn with_store(
        store: Arc<dyn TableStore>,
        options: EngineOptions,
    ) -> Result<Self, EngineError> {
        // Stored through the store as given: storing the statistics is not
        // the users' workload.
        let unobserved = store.clone();
        // Every request of every statement is seen by the statistics.
        let (workload, store): (Arc<Workload>, Arc<dyn TableStore>) = if options.statistics {
            let workload = Arc::new(Workload::default());
            let store = Arc::new(ObservedStore::new(store, workload.clone()));
            (workload, store)
        } else {
            (Arc::new(Workload::off()), store)
        };
        let settings = TablesqlConfig {
            scan_policy: options.scan_policy,
            ..TablesqlConfig::default()
        };
        let mut config = SessionConfig::new()
            .with_information_schema(true)
            .with_option_extension(settings)
            .with_option_extension(SequenceSession::default())
            .with_option_extension(SessionParameters::default())
            .with_extension(Arc::new(Notices::default()))
            .with_extension(Arc::new(Transaction::default()))
            .with_extension(Arc::new(direct::ConfigGeneration::default()));
        // DataFusion's own parser (a fallback, and embedders' `ctx.sql`)
        // reads the dialect every front end uses.
        config.options_mut().sql_parser.dialect = datafusion::config::Dialect::PostgreSQL;
        // As deep as the engine's own parser reads (`planner::sql`): an
        // expression DataFusion parses again (RETURNING's) is as deep.
        config.options_mut().sql_parser.recursion_limit =
            datafusion::config::ConfigNonZeroUsize::try_new(crate::planner::sql::RECURSION_LIMIT)?;
        let state = SessionStateBuilder::new()
            .with_config(config)
            .with_runtime_env(memory::runtime(options.memory)?)
            .with_default_features()
            .with_query_planner(Arc::new(TablesqlQueryPlanner))
            .with_physical_optimizer_rules(physical_optimizer_rules())
            // Before DataFusion's own: literals typed as PostgreSQL types
            // them, then coerced as it coerces them.
            .with_analyzer_rules(vec![
                Arc::new(crate::planner::literals::IntegerLiterals),
                Arc::new(datafusion::optimizer::analyzer::resolve_grouping_function::ResolveGroupingFunction::new()),
                Arc::new(datafusion::optimizer::analyzer::type_coercion::TypeCoercion::new()),
            ])
            .with_analyzer_rule(Arc::new(DmlShape))
            .with_analyzer_rule(Arc::new(AsyncValues))
            .with_analyzer_rule(Arc::new(CheckedIntegers::default()))
            .with_analyzer_rule(Arc::new(NameSetComparisons))
            .with_analyzer_rule(Arc::new(NameComparedValues))
            .with_analyzer_rule(Arc::new(CorrelatedNotIn))
            .with_analyzer_rule(Arc::new(AggregateScalarSubqueries::default()))
            .with_analyzer_rule(Arc::new(RefuseUnrunnableSubqueries))
            .with_analyzer_rule(Arc::new(
                crate::planner::timestamp_text::TimestampText::default(),
            ))
            .with_optimizer_rules(optimizer_rules())
            .with_optimizer_rule(Arc::new(EmptyDml))
            .build();
        // After DataFusion's own planners, which plan no comparison.
        let mut state = state;
        {
            use datafusion::execution::FunctionRegistry as _;
            state
                .register_expr_planner(Arc::new(crate::planner::bool_literals::BooleanLiterals))?;
        }
        let ctx = SessionContext::new_with_state(state);
        let public = Arc::new(schema::PublicSchema::default());
        if let Some(catalog) = ctx.catalog("datafusion") {
            catalog.register_schema(PUBLIC_SCHEMA, public.clone())?;
        }
        ctx.register_udf(crate::planner::identity::version_udf());
        ctx.register_udf(crate::planner::parameters::current_setting_udf());
        ctx.register_udf(crate::planner::parameters::set_config_udf());
        ctx.register_udf(workload_views::reset_udf(workload.clone()));
        let stats: Arc<StatsCache> = Arc::default();
        let advisor = workload_views::Advisor::new(workload.clone(), stats.clone());
        ctx.register_udtf(
            workload_views::ADVISE,
            Arc::new(workload_views::AdviseFunction(advisor.clone())),
        );
        ctx.register_udtf(
            workload_views::ADVISE_REPORT,
            Arc::new(workload_views::AdviseReportFunction(advisor)),
        );
        ctx.register_table(
            workload_views::STATEMENTS_VIEW,
            Arc::new(WorkloadView::statements(workload.clone())),
        )?;
        ctx.register_table(
            workload_views::PARTITIONS_VIEW,
            Arc::new(WorkloadView::partitions(workload.clone())),
        )?;
        ctx.register_table(
            workload_views::TABLES_VIEW,
            Arc::new(WorkloadView::tables(workload.clone())),
        )?;
        ctx.register_udf(crate::planner::pg_functions::like_escape_udf());
        ctx.register_udf(crate::planner::pg_functions::expandarray_items_udf());
        ctx.register_udf(crate::planner::pg_functions::subscripts_udf());
        ctx.register_udf(crate::planner::pg_functions::json_build_object_udf());
        ctx.register_udf(crate::planner::pg_functions::json_extract_path_text_udf());
        for f in crate::planner::pg_functions::quote_udfs() {
            ctx.register_udf(f);
        }
        for f in crate::planner::pg_functions::constant_udfs() {
            ctx.register_udf(f);
        }
        ctx.register_udf(crate::planner::pg_functions::pg_typeof_udf());
        ctx.register_udf(crate::planner::parse_ident::parse_ident_udf());
        let sequences = Arc::new(Sequences::new(store.clone()));
        for f in sequence_functions::udfs(sequences.clone()) {
            ctx.register_udf(f);
        }
        for upkeep in [Upkeep::Check, Upkeep::Repair] {
            let f = IndexFunction::new(store.clone(), upkeep);
            let name = match upkeep {
                Upkeep::Check => index_functions::CHECK,
                Upkeep::Repair => index_functions::REPAIR,
            };
            ctx.register_udtf(name, Arc::new(f));
        }
        let engine = Self {
            base: ctx,
            store,
            options,
            parser: Arc::new(SqlParser::new()),
            signer: Arc::default(),
            stats,
            sequences,
            locks: Arc::default(),
            catalog_version: Arc::default(),
            watch: Arc::default(),
            public,
            persisted: options.workload_flush.map(|every| {
                Arc::new(PersistedWorkload::new(
                    unobserved.clone(),
                    workload.clone(),
                    every,
                ))
            }),
            unobserved,
            workload,
        };
        engine.refresh().await?;
        if let Some(p) = &engine.persisted {
            // Statistics only: a store whose copy cannot be read opens
            // without the history.
            let _ = p.refresh().await;
            persist_timer::start(p);
        }
        // A transaction block a stopped process was committing across
        // partitions is finished (`exec::write::commit`). Best effort: a
        // store that cannot be written still opens for reading.
        let _ = crate::exec::write::commit::recover(
            engine.store.as_ref(),
            crate::exec::write::commit::RECOVER_AFTER,
        )
        .await;
        Ok(engine)
    }

    /// The traffic the workload statistics hold for one partition of a
    /// storage table (none where it saw none).
    pub(crate) fn partition_traffic(&self, table: &TableName, partition: &str) -> PartitionTraffic {
        self.workload
            .partitions()
            .into_iter()
            .find(|p| p.table == table.as_str() && p.partition == partition)
            .map(|p| p.traffic)
            .unwrap_or_default()
    }

    /// Stores the workload statistics now, when they are kept in the store
    /// (`EngineOptions::workload_flush`), and reads the other processes'.
    pub async fn flush_workload(&self) -> Result<(), EngineError> {
        if let Some(p) = &self.persisted {
            p.flush(false).await?;
        }
        Ok(())
    }

    /// Ends the engine's work for a shutdown: stores the workload
    /// statistics a last time, marked as this process's last (the next
    /// process to flush takes them over as its own), and stops the timer
    /// that stores them. Statements may still run after it; what they
    /// count is stored only by another `flush_workload` or `close`.
    pub async fn close(&self) -> Result<(), EngineError> {
        if let Some(p) = &self.persisted {
            persist_timer::stop(p);
            p.flush(true).await?;
        }
        Ok(())
    }

    /// The DataFusion context every session is copied from: a function or
    /// catalog registered here is in each session made afterwards (the wire
    /// server's `pg_catalog`). Statements run in a [`Session`].
    pub fn context(&self) -> &SessionContext {
        &self.base
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn TableStore> {
        &self.store
    }

    /// The statements of a query string, as every front end reads them
    /// (PostgreSQL's dialect; see `planner::sql`).
    pub fn parse(&self, sql: &str) -> Result<Vec<Statement>, ParserError> {
        self.parser.parse(sql)
    }

    /// The engine, its sessions reading SQL with `dialect`'s spellings and
    /// catalog parser: the wire server gives its own with `pg_catalog`.
    #[must_use]
    pub fn with_dialect(mut self, dialect: Arc<dyn Dialect>) -> Self {
        self.parser = Arc::new(SqlParser::with_dialect(dialect));
        self
    }

    /// Whether a statement reads a relation of `pg_catalog` or
    /// `information_schema` (the wire server presents some of their
    /// columns as PostgreSQL's catalogs type them).
    pub fn reads_system_catalog(&self, statement: &Statement) -> bool {
        self.parser.reads_system_catalog(statement)
    }
}
