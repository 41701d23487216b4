//! The engine: a DataFusion `SessionContext` whose tables are the store's,
//! mapped through the catalog (or raw), plus the catalog DDL DataFusion does
//! not know (`CREATE TABLE ... WITH (partition_key = ...)`, `DROP TABLE` of a
//! mapped table). Front ends (the CLI, the wire server, the shell) and
//! embedders all go through it.

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
};
use crate::planner::{SqlParser, StoreTable, TablesqlQueryPlanner};
use crate::storage::{Query, StorageError, StoreLocation, TableName, TableStore};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_optimizer::optimizer::PhysicalOptimizer;

mod analyze;
mod apply;
mod bind;
mod block;
pub mod bulk;
mod create_as;
mod describe;
mod direct;
mod follow;
mod indexes;
mod kind;
mod memory;
mod paging;
mod persist_timer;
mod prepared;
pub(crate) mod refuse;
mod run;
mod schema;
mod session;
mod show;
mod start;
mod table_ddl;
mod views;

pub use crate::exec::notices::{Notice, NoticeKind};
/// The SQLSTATE of a DataFusion failure, through the wrappers it adds:
/// for the front ends, which reach exec through the engine.
pub(crate) use crate::exec::sqlstate::of_datafusion as datafusion_sqlstate;
pub(crate) use crate::exec::stats::advise::PARTITION_TARGET_PER_S;
pub(crate) use crate::exec::stats::workload::PartitionTraffic;
pub use crate::exec::write::upkeep::IndexHealth;
pub use crate::planner::identity::{PG_VERSION, PG_VERSION_NUM};
pub use analyze::Reading;
pub use apply::Applied;
pub use block::{BlockChange, BlockEnd, BlockStatus};
pub use describe::{
    ColumnInfo, IndexInfo, IndexTemplate, MappingInfo, StoredAs, TableDescription, TableInfo,
};
pub use follow::DEFAULT_CATALOG_CHECK;
pub use kind::{StatementKind, reads_system_catalog, returns_rows};
pub use memory::MemoryLimits;
pub use paging::ResultPage;
pub use prepared::PreparedStatement;
pub(crate) use run::{Transaction, statement_label};
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

/// A failure of the engine.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    /// The catalog refused a definition or could not be read.
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    /// The store failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// DataFusion failed: planning (unknown table or column, a type mismatch)
    /// or execution (which carries the scan's own errors).
    #[error(transparent)]
    DataFusion(#[from] DataFusionError),
    /// A statement tablesql does not run, with why (for one, what it would
    /// create would live only in this process's memory: `engine::refuse`).
    #[error("{0}")]
    NotSupported(String),
    /// A statement other than its end in a transaction block that failed.
    #[error("current transaction is aborted, commands ignored until end of transaction block")]
    InFailedTransaction,
    /// A savepoint statement (named) outside a transaction block.
    #[error("{0} can only be used in transaction blocks")]
    NoTransactionBlock(&'static str),
    /// A savepoint name that no savepoint of the block has.
    #[error("savepoint \"{0}\" does not exist")]
    NoSavepoint(String),
    /// `SHOW` of a `tablesql.*` name that is no setting.
    #[error("unrecognized configuration parameter \"{0}\"")]
    UnknownSetting(String),
    /// A session parameter (`SET application_name`, `SHOW DateStyle`)
    /// that cannot be set or read.
    #[error(transparent)]
    Parameter(#[from] ParameterError),
    /// A statement that cannot run in a transaction block: its command
    /// tag, and why (after a colon, or empty).
    #[error("{tag} cannot run inside a transaction block{why}")]
    InTransactionBlock {
        /// The statement's command tag.
        tag: &'static str,
        /// Why, as `: ...`.
        why: &'static str,
    },
}

impl EngineError {
    /// The SQLSTATE a client is told (`crate::sqlstate`): what the wire
    /// server answers, what the shell prints under `VERBOSITY verbose`,
    /// and what an embedder that answers PostgreSQL clients of its own
    /// reports.
    pub fn sqlstate(&self) -> &'static str {
        use crate::sqlstate as code;
        match self {
            EngineError::Catalog(c) => c.sqlstate(),
            EngineError::Storage(s) => s.sqlstate(),
            EngineError::DataFusion(d) => crate::exec::sqlstate::of_datafusion(d),
            EngineError::NotSupported(_) => code::FEATURE_NOT_SUPPORTED,
            EngineError::InFailedTransaction => code::IN_FAILED_TRANSACTION,
            EngineError::NoTransactionBlock(_) => code::NO_ACTIVE_TRANSACTION,
            EngineError::NoSavepoint(_) => code::INVALID_SAVEPOINT,
            EngineError::InTransactionBlock { .. } => code::ACTIVE_TRANSACTION,
            EngineError::UnknownSetting(_) => code::UNDEFINED_OBJECT,
            EngineError::Parameter(p) => p.sqlstate(),
        }
    }

    /// The storage error under it, if one is (through any DataFusion error that wraps it).
    pub fn storage_cause(&self) -> Option<&StorageError> {
        match self {
            EngineError::Storage(s) => Some(s.root()),
            EngineError::DataFusion(d) => crate::exec::storage_cause(d),
            EngineError::Catalog(_)
            | EngineError::NotSupported(_)
            | EngineError::InFailedTransaction
            | EngineError::NoTransactionBlock(_)
            | EngineError::NoSavepoint(_)
            | EngineError::UnknownSetting(_)
            | EngineError::Parameter(_)
            | EngineError::InTransactionBlock { .. } => None,
        }
    }
}

/// Options of an engine: [`EngineOptions::default`], then the `with_`
/// methods for what differs.
///
/// ```
/// use std::time::Duration;
/// use tablesql::{EngineOptions, ScanPolicy};
///
/// let options = EngineOptions::default()
///     .with_scan_policy(ScanPolicy::Allow)
///     .with_catalog_check(Duration::from_secs(5));
/// assert!(options.statistics);
/// ```
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct EngineOptions {
    /// Scan tuning (requests in flight).
    pub scan: ScanOptions,
    /// Whether filters are pushed into the store's requests (on by
    /// default). Off, every table is read whole and filtered in DataFusion:
    /// the reference the pushdown is tested and measured against.
    pub pushdown: bool,
    /// What a statement reading every partition of a table gets, until a
    /// session's `SET tablesql.scan_policy` says otherwise.
    pub scan_policy: ScanPolicy,
    /// How often a statement reads whether the stored catalog changed
    /// elsewhere (one point read; see `Engine::follow_catalog`).
    pub catalog_check: std::time::Duration,
    /// Whether the engine keeps workload statistics
    /// (`tablesql_stat_statements`, `tablesql_stat_partitions`, the
    /// advisor); on by default. Off, the engine counts nothing of its
    /// own: the views are empty, or show what other processes stored
    /// (with `workload_flush`).
    pub statistics: bool,
    /// Whether, and how often, the workload statistics are stored in the
    /// store (`exec::stats::persist`): read from it when the engine opens,
    /// merged with every other process's, written every this often (taken
    /// between 50 ms and an hour) when they changed, and by
    /// [`Engine::close`]. `None` (the default): they
    /// live in this process's memory only. The `tablesql` binary stores
    /// them every 10 s.
    pub workload_flush: Option<std::time::Duration>,
    /// What statements may hold in memory, all together and one
    /// session's (`engine::memory`); past it sorts and aggregates spill to
    /// disk, and what cannot spill fails with 53200.
    pub memory: MemoryLimits,
}

impl Default for EngineOptions {
    fn default() -> Self {
        Self {
            scan: ScanOptions::default(),
            pushdown: true,
            scan_policy: ScanPolicy::default(),
            catalog_check: DEFAULT_CATALOG_CHECK,
            statistics: true,
            workload_flush: None,
            memory: MemoryLimits::default(),
        }
    }
}

impl EngineOptions {
    /// The shortest `workload_flush` taken: a shorter one would only load
    /// the store.
    pub const WORKLOAD_FLUSH_SHORTEST: std::time::Duration = std::time::Duration::from_millis(50);
    /// The longest: statistics an hour old are stale for an advisor.
    pub const WORKLOAD_FLUSH_LONGEST: std::time::Duration = std::time::Duration::from_secs(3600);

    /// With these memory limits.
    pub fn with_memory(mut self, memory: MemoryLimits) -> Self {
        self.memory = memory;
        self
    }

    /// With these scan settings.
    pub fn with_scan(mut self, scan: ScanOptions) -> Self {
        self.scan = scan;
        self
    }

    /// With the pushdown off (`false`): every table is read whole.
    pub fn with_pushdown(mut self, pushdown: bool) -> Self {
        self.pushdown = pushdown;
        self
    }

    /// With this default for statements that read every partition.
    pub fn with_scan_policy(mut self, policy: ScanPolicy) -> Self {
        self.scan_policy = policy;
        self
    }

    /// Reading whether the stored catalog changed at most this often.
    pub fn with_catalog_check(mut self, every: std::time::Duration) -> Self {
        self.catalog_check = every;
        self
    }

    /// With or without workload statistics.
    pub fn with_statistics(mut self, on: bool) -> Self {
        self.statistics = on;
        self
    }

    /// With the workload statistics stored every `every` (`None`: kept in
    /// memory only). See [`EngineOptions::workload_flush`].
    pub fn with_workload_flush(mut self, every: Option<std::time::Duration>) -> Self {
        self.workload_flush = every;
        self
    }
}

/// DataFusion's optimizer rules, with [`ExtractSubqueries`] around its
/// decorrelation rules: before them the subqueries they fail on, after
/// them what they leave, before projections are pruned.
fn optimizer_rules() -> Vec<Arc<dyn OptimizerRule + Send + Sync>> {
    let mut rules = Optimizer::new().rules;
    let position = |rules: &[Arc<dyn OptimizerRule + Send + Sync>], name: &str| {
        rules.iter().position(|r| r.name() == name)
    };
    let after = position(&rules, "decorrelate_lateral_join").map_or(rules.len(), |i| i + 1);
    rules.insert(after, Arc::new(ExtractSubqueries::Rest));
    let before = position(&rules, "decorrelate_predicate_subquery").unwrap_or(0);
    rules.insert(before, Arc::new(ExtractSubqueries::Deep));
    rules
}

/// DataFusion's physical optimizer rules, with [`LookupJoins`] right after
/// its join selection (so that the distribution and sorting it enforces
/// next see the lookup joins), and [`YieldingJoins`] last.
fn physical_optimizer_rules() -> Vec<Arc<dyn PhysicalOptimizerRule + Send + Sync>> {
    let mut rules = PhysicalOptimizer::new().rules;
    let after = rules
        .iter()
        .position(|r| r.name() == "join_selection")
        .map_or(0, |i| i + 1);
    rules.insert(after, Arc::new(LookupJoins));
    rules.push(Arc::new(YieldingJoins));
    rules
}

/// SQL over one store. An engine is one session: its clones share its
/// settings and its transaction block; [`Engine::session_context`] gives
/// another session over the same tables.
#[derive(Clone)]
pub struct Engine {
    ctx: SessionContext,
    store: Arc<dyn TableStore>,
    options: EngineOptions,
    parser: Arc<SqlParser>,
    /// Signs page tokens with the store's secret, read on first use.
    signer: Arc<tokio::sync::OnceCell<Signer>>,
    /// `ANALYZE`'s statistics, which scans plan their fan-out from.
    stats: Arc<StatsCache>,
    /// The blocks of sequence values this process holds.
    sequences: Arc<Sequences>,
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

/// A query string's one statement (`Engine::one_statement`).
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
        let store: Arc<dyn TableStore> = Arc::from(location.open()?);
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
            .with_optimizer_rules(optimizer_rules())
            .with_optimizer_rule(Arc::new(EmptyDml))
            .build();
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
        ctx.register_udf(crate::planner::pg_functions::like_escape_udf());
        ctx.register_udf(crate::planner::pg_functions::expandarray_items_udf());
        ctx.register_udf(crate::planner::pg_functions::subscripts_udf());
        ctx.register_udf(crate::planner::pg_functions::json_build_object_udf());
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
            ctx,
            store,
            options,
            parser: Arc::new(SqlParser::new()),
            signer: Arc::default(),
            stats,
            sequences,
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

    /// The DataFusion session, for users who want it whole.
    pub fn context(&self) -> &SessionContext {
        &self.ctx
    }

    /// The notices the session's statements left since the last call (a
    /// scan of every partition under `tablesql.scan_policy = warn`), for the
    /// front end to show.
    pub fn take_notices(&self) -> Vec<Notice> {
        session_notices(&self.ctx)
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn TableStore> {
        &self.store
    }

    /// Re-reads the catalog and the store's tables and registers them anew:
    /// mapped tables by their SQL names, every storage table in schema `raw`,
    /// and unmapped ones also by their lower-cased names. Both sets are
    /// built aside and put in place at once (`schema::PublicSchema`), so a
    /// statement planning meanwhile sees the old tables or the new, and the
    /// tables an embedder or a `CREATE VIEW` registered stay.
    async fn reload(&self) -> Result<(), EngineError> {
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
        if let Some(catalog) = self.ctx.catalog("datafusion") {
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

    fn catalog_changed(&self) {
        self.catalog_version
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    }

    /// Schema `public`: the engine holds it (`schema::PublicSchema`), so
    /// no lookup through the context's catalog.
    fn public_schema(&self) -> Arc<dyn SchemaProvider> {
        self.public.clone()
    }

    fn provider(&self, layout: Layout) -> StoreTable {
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
    fn register_mapped(&self, def: TableDef) -> Result<(), EngineError> {
        let (name, provider) = self.mapped_provider(def)?;
        self.public.put_store_table(name, provider)?;
        self.catalog_changed();
        Ok(())
    }

    /// A mapped table's name and provider.
    fn mapped_provider(
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
    fn column_defaults(
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
            .map(|(c, d)| Ok((c.name.clone(), self.ctx.parse_sql_expr(d, &schema)?)))
            .collect()
    }

    /// Whether `name` is taken by a mapping, or by a table the embedder registered.
    async fn name_taken(&self, name: &str) -> Result<bool, EngineError> {
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

    async fn raw_table(&self, table: &TableName) -> Result<StoreTable, EngineError> {
        // Not the users' workload: every process over the store samples
        // every raw table when it opens.
        let sample = self
            .unobserved
            .query(table, &Query::all().top(SAMPLE_SIZE), None)
            .await?;
        Ok(self.provider(Layout::raw(table.clone(), &infer(&sample.entities))))
    }

    /// The statements of a query string, as every front end reads them
    /// (PostgreSQL's dialect; see `planner::sql`).
    pub fn parse(&self, sql: &str) -> Result<Vec<Statement>, ParserError> {
        self.parser.parse(sql)
    }

    /// Plans one statement. Catalog DDL runs here and yields an empty frame;
    /// everything else is DataFusion's.
    pub async fn sql(&self, sql: &str) -> Result<DataFrame, EngineError> {
        match self.one_statement(sql).await? {
            OneStatement::Parsed(statement) => self.statement(statement).await,
            OneStatement::DataFusion(frame) => Ok(frame),
        }
    }

    /// The one statement of a query string: parsed, or, where PostgreSQL's
    /// grammar lacks it, one of DataFusion's own, planned
    /// (`datafusion_statement`). Several statements are refused.
    pub(crate) async fn one_statement(&self, sql: &str) -> Result<OneStatement, EngineError> {
        let mut statements = match self.parse(sql) {
            Ok(s) => s,
            Err(e) => {
                let frame = self.datafusion_statement(sql, e).await?;
                return Ok(OneStatement::DataFusion(frame));
            }
        };
        if statements.len() != 1 {
            return Err(DataFusionError::NotImplemented(format!(
                "one statement at a time here, not {}",
                statements.len()
            ))
            .into());
        }
        Ok(OneStatement::Parsed(statements.remove(0)))
    }

    /// Plans one parsed statement (catalog DDL runs here, as in [`Self::sql`]).
    /// Under `tablesql.page_size` a query of one table runs here, as one
    /// page, resumable from `tablesql.page_token`. A statement that fails
    /// here fails the session's transaction block (`engine::block`).
    pub async fn statement(&self, statement: Statement) -> Result<DataFrame, EngineError> {
        let planned = self.statement_frame(statement).await;
        if planned.is_err() {
            self.fail_block();
        }
        planned
    }

    async fn statement_frame(&self, statement: Statement) -> Result<DataFrame, EngineError> {
        match self.control(&statement).await? {
            Some(session::Control::Shown(batch)) => Ok(self.ctx.read_batch(batch)?),
            Some(_) => Ok(self.ctx.read_empty()?),
            None => self.frame(statement).await,
        }
    }

    /// Runs `statement` if the engine answers it without DataFusion:
    /// transaction control, catalog DDL (whose notices the session keeps
    /// for `take_notices`) and `SHOW tablesql.*`. Refuses anything but a
    /// block's end in a failed block. `None` for the rest.
    pub(crate) async fn control(
        &self,
        statement: &Statement,
    ) -> Result<Option<session::Control>, EngineError> {
        self.follow_catalog().await;
        if let Some(tx) = session_transaction(&self.ctx) {
            block::admit(&tx, statement)?;
            if let Some(change) = block::control(&tx, self.store.as_ref(), statement).await {
                return Ok(Some(session::Control::Block(change?)));
            }
        }
        if let Some(shown) = self.show_setting(statement)? {
            return Ok(Some(session::Control::Shown(shown)));
        }
        if let Some(shown) = self.show_create_table(statement).await? {
            return Ok(Some(session::Control::Shown(shown)));
        }
        if let Some(target) = parameters::set_target(statement) {
            let (name, value) = target?;
            self.parameters().set(&name, &value)?;
            return Ok(Some(session::Control::Ddl(StatementKind::Set)));
        }
        if let Some(shown) = parameters::show_target(statement) {
            return Ok(Some(session::Control::Shown(self.show_parameters(&shown)?)));
        }
        if matches!(statement, Statement::Copy { .. }) {
            return Err(EngineError::NotSupported(refuse::COPY.into()));
        }
        if let Some(why) = refuse::unsupported_write(statement) {
            return Err(EngineError::NotSupported(why));
        }
        if let Statement::Truncate(truncate) = statement {
            Box::pin(self.truncate(truncate, |_| {})).await?;
            return Ok(Some(session::Control::Ddl(StatementKind::Truncate)));
        }
        let Some(outcome) = self.catalog_ddl(statement).await? else {
            return Ok(None);
        };
        if let Some(notices) = self.ctx.state().config().get_extension::<Notices>() {
            for n in outcome.notices {
                notices.push(n);
            }
        }
        Ok(Some(session::Control::Ddl(StatementKind::of(statement))))
    }

    /// The session's PostgreSQL parameters (`planner::parameters`).
    pub(crate) fn parameters(&self) -> SessionParameters {
        self.ctx
            .state_ref()
            .read()
            .config()
            .options()
            .extensions
            .get::<SessionParameters>()
            .cloned()
            .unwrap_or_default()
    }

    /// Marks the session's open transaction block failed (`engine::block`).
    pub(crate) fn fail_block(&self) {
        if let Some(tx) = session_transaction(&self.ctx) {
            tx.fail();
        }
    }

    /// A query's or write's frame: one page under `tablesql.page_size`,
    /// else DataFusion's plan.
    async fn frame(&self, statement: Statement) -> Result<DataFrame, EngineError> {
        // One copy of the session state serves planning and the frame (a
        // copy costs about 17 µs, a tenth of a point query's planning).
        let state = self.ctx.state();
        // What a page token names (only paging needs it).
        let paging = paging::paging_on(&self.ctx);
        let text = if paging {
            statement.to_string()
        } else {
            String::new()
        };
        let plan = crate::planner::upsert::statement_to_plan(&state, statement).await?;
        if paging && paging::is_read(&plan) {
            let optimized = state.optimize(&plan)?;
            if let Some(page) = self.session_page(&self.ctx, &optimized, &text).await? {
                let table = MemTable::try_new(page.schema, vec![page.batches])?;
                return Ok(self.ctx.read_table(Arc::new(table))?);
            }
        }
        Ok(match plan {
            // DDL, SET and PREPARE act on the context.
            LogicalPlan::Ddl(_) | LogicalPlan::Statement(_) => {
                let frame = self.ctx.execute_logical_plan(plan).await?;
                // A SET: the session's planning snapshot is taken again.
                direct::ConfigGeneration::raise(&self.ctx);
                frame
            }
            plan => DataFrame::new(state, plan),
        })
    }

    /// DataFusion's own statements, which PostgreSQL's grammar lacks
    /// (`CREATE EXTERNAL TABLE`, `COPY ... TO`); anything else keeps the
    /// PostgreSQL parser's error.
    async fn datafusion_statement(
        &self,
        sql: &str,
        error: ParserError,
    ) -> Result<DataFrame, EngineError> {
        let own = DFParser::parse_sql_with_dialect(sql, &PostgreSqlDialect {})
            .ok()
            .filter(|s| s.len() == 1 && !matches!(s[0], DfStatement::Statement(_)));
        match own.and_then(|mut s| s.pop_front()) {
            Some(DfStatement::CreateExternalTable(_)) => {
                Err(EngineError::NotSupported(refuse::EXTERNAL_TABLE.into()))
            }
            Some(statement) => {
                let plan = self.ctx.state().statement_to_plan(statement).await?;
                Ok(self.ctx.execute_logical_plan(plan).await?)
            }
            None => Err(DataFusionError::SQL(Box::new(error), None).into()),
        }
    }

    /// A new session over the same tables (the wire server's connections):
    /// settings are its own, the catalog and the tables are shared.
    pub fn session_context(&self) -> SessionContext {
        let mut state = self.ctx.state();
        // Its own notices: another session's must not reach it.
        state
            .config_mut()
            .set_extension(Arc::new(Notices::default()));
        // Its own transaction block.
        state
            .config_mut()
            .set_extension(Arc::new(Transaction::default()));
        // Its own configuration, changed by its own SETs.
        state
            .config_mut()
            .set_extension(Arc::new(direct::ConfigGeneration::default()));
        // Its own `currval`s.
        state
            .config_mut()
            .options_mut()
            .extensions
            .insert(SequenceSession::default());
        // Its own parameters (`SET application_name`, `statement_timeout`).
        state
            .config_mut()
            .options_mut()
            .extensions
            .insert(SessionParameters::default());
        // Its own share of the engine's memory.
        let state = memory::share(state, self.options.memory);
        SessionContext::new_with_state(state)
    }

    /// A mapped table's definition, as stored.
    pub async fn table_def(&self, name: &str) -> Result<TableDef, EngineError> {
        persist::load(self.store.as_ref())
            .await?
            .into_iter()
            .find(|d| d.name == name)
            .ok_or_else(|| CatalogError::UnknownTable(name.to_owned()).into())
    }

    /// Another session over the same tables, statistics and store: its
    /// settings and transaction block are its own (see
    /// [`Engine::session_context`]).
    pub fn new_session(&self) -> Engine {
        Engine {
            ctx: self.session_context(),
            ..self.clone()
        }
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

    /// Runs one statement and streams its rows; the run is recorded in
    /// the workload statistics when the stream ends or is dropped.
    pub async fn execute_stream(
        &self,
        sql: &str,
    ) -> Result<SendableRecordBatchStream, EngineError> {
        let (label, frame) = match self.parse(sql) {
            Ok(mut s) if s.len() == 1 => {
                let statement = s.remove(0);
                (
                    statement_label(&statement),
                    self.statement(statement).await?,
                )
            }
            // What our parser refuses (DataFusion's own statements): their
            // text may hold values (secrets, paths), so only its first word.
            _ => {
                let first = sql.split_whitespace().next().unwrap_or_default();
                (
                    format!("{} ...", first.to_uppercase()),
                    self.sql(sql).await?,
                )
            }
        };
        let task = Arc::new(frame.task_ctx());
        let plan = frame.create_physical_plan().await?;
        let stream = datafusion::physical_plan::execute_stream(plan.clone(), task)?;
        Ok(self.recorded(label, Some(plan), stream))
    }

    /// Runs one statement and collects its rows (recorded as
    /// [`Self::execute_stream`] records).
    pub async fn collect(&self, sql: &str) -> Result<Vec<RecordBatch>, EngineError> {
        let stream = self.execute_stream(sql).await?;
        Ok(datafusion::physical_plan::common::collect(stream).await?)
    }
}

/// The notices a session's statements left since the last call.
pub(crate) fn session_notices(ctx: &SessionContext) -> Vec<Notice> {
    ctx.state_ref()
        .read()
        .config()
        .get_extension::<Notices>()
        .map(|n| n.take())
        .unwrap_or_default()
}

/// The transaction block of a session (an engine's own, or one of
/// [`Engine::session_context`]'s).
pub(crate) fn session_transaction(ctx: &SessionContext) -> Option<Arc<Transaction>> {
    ctx.state_ref()
        .read()
        .config()
        .get_extension::<Transaction>()
}

/// A `tablesql.*` setting of a session, by its full name: `None` for a
/// name that is no such setting, `Some(None)` for one not set.
pub(crate) fn session_setting(
    state: &datafusion::execution::session_state::SessionState,
    name: &str,
) -> Option<Option<String>> {
    let entries = state
        .config_options()
        .extensions
        .get::<TablesqlConfig>()
        .map(datafusion::config::ExtensionOptions::entries)
        .unwrap_or_default();
    entries.into_iter().find(|e| e.key == name).map(|e| e.value)
}
