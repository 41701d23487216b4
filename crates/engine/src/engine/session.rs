//! One connection's session, and the one way a statement runs.
//!
//! Every front end (the wire server, the shell, `tablesql query`, an
//! embedder) answered statements its own way, and a change to how one runs
//! had to go into each: the same `CREATE TABLE` made a table in one front end
//! and was refused in another. A [`Session`] owns what a connection has (its
//! DataFusion session with its settings, its transaction block, its notices,
//! its sequences' `currval`, its page tokens) and [`Session::execute`] runs a
//! statement to a typed [`Outcome`]: rows, rows written, a change of the
//! transaction block, or a command done. Front ends only present outcomes
//! (a command tag, a table, a wire message) and errors (psql's `ERROR:`, a
//! SQLSTATE).
//!
//! The rule: a statement that fails fails the session's open block
//! (`engine::block`), wherever it failed: planning, running, or while its
//! rows streamed.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::error::DataFusionError;
use datafusion::execution::{RecordBatchStream, SendableRecordBatchStream};
use datafusion::prelude::SessionContext;
use datafusion::sql::sqlparser::ast::Statement;
use futures::{Stream, StreamExt};

use super::block::{self, BlockChange, BlockStatus};
use super::{
    Engine, EngineError, Notice, OneStatement, PreparedStatement, StatementKind,
    session_transaction,
};
use super::{run, session_notices, session_parameters};
use crate::exec::write::transaction::Transaction;

/// What the session ran without DataFusion (`Session::control`).
pub(crate) enum Control {
    Block(BlockChange),
    Ddl(StatementKind),
    /// `SHOW` of a setting, as PostgreSQL answers it.
    Shown(RecordBatch),
}

/// What a statement did.
#[non_exhaustive]
pub enum Outcome {
    /// A query's rows (`SELECT`, `VALUES`, `EXPLAIN`, `SHOW`), as they come.
    Rows(SendableRecordBatchStream),
    /// A write ran to its end: `rows` rows written.
    Written {
        /// `Insert`, `Update` or `Delete`.
        kind: StatementKind,
        /// How many rows it wrote.
        rows: u64,
    },
    /// Transaction control.
    Block(BlockChange),
    /// A command that answers with its tag alone (DDL, `SET`); its notices
    /// are the session's ([`Session::take_notices`]).
    Done(StatementKind),
}

impl std::fmt::Debug for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Outcome::Rows(s) => f.debug_tuple("Rows").field(&s.schema()).finish(),
            Outcome::Written { kind, rows } => f
                .debug_struct("Written")
                .field("kind", kind)
                .field("rows", rows)
                .finish(),
            Outcome::Block(c) => f.debug_tuple("Block").field(c).finish(),
            Outcome::Done(k) => f.debug_tuple("Done").field(k).finish(),
        }
    }
}

impl Outcome {
    /// The command tag PostgreSQL answers with (`INSERT 0 3`, `BEGIN`,
    /// `CREATE TABLE`); `None` for rows, whose tag counts them as read.
    pub fn tag(&self) -> Option<String> {
        match self {
            Outcome::Rows(_) => None,
            // PostgreSQL's INSERT tag carries an OID, always 0 now.
            Outcome::Written {
                kind: StatementKind::Insert,
                rows,
            } => Some(format!("INSERT 0 {rows}")),
            Outcome::Written { kind, rows } => {
                Some(format!("{} {rows}", kind.tag().unwrap_or("UPDATE")))
            }
            Outcome::Block(change) => Some(change.tag().to_owned()),
            Outcome::Done(kind) => Some(kind.tag().unwrap_or("OK").to_owned()),
        }
    }
}

/// One connection's state over an engine's tables (see the module doc),
/// from [`Engine::session`]. Clones share it. A session reaches what its
/// engine shares (the store, `ANALYZE`, the catalog's descriptions)
/// through `Deref`.
#[derive(Clone)]
pub struct Session {
    /// What every session of the engine shares.
    pub(super) engine: Engine,
    /// Its DataFusion context, copied from the engine's: its settings,
    /// notices, transaction block and `currval`s are its own.
    pub(super) ctx: SessionContext,
    /// Its transaction block, held here: the wire server asks for its
    /// status after every message.
    pub(super) tx: Option<Arc<Transaction>>,
    /// Its PostgreSQL parameters (shared with its context's extension).
    pub(super) parameters: crate::planner::parameters::SessionParameters,
    /// Its state for planning, taken when first needed (`engine::start`).
    pub(super) snapshot: Arc<std::sync::RwLock<Option<super::direct::Snapshot>>>,
    /// The database it is in (`engine::database`).
    pub(super) database: Arc<std::sync::Mutex<String>>,
}

impl Engine {
    /// A new session over this engine's tables: its settings, transaction
    /// block and notices are its own. The one way to run statements.
    pub fn session(&self) -> Session {
        let ctx = self.session_context();
        let tx = session_transaction(&ctx);
        let parameters = session_parameters(&ctx);
        let database = crate::planner::identity::DEFAULT_DATABASE;
        // Over the wire server's `pg_catalog` one, which names DataFusion's
        // catalog.
        ctx.register_udf(crate::planner::identity::current_database_udf(database));
        Session {
            engine: self.clone(),
            ctx,
            tx,
            parameters,
            snapshot: Arc::default(),
            database: Arc::new(std::sync::Mutex::new(database.to_owned())),
        }
    }
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("engine", &self.engine)
            .field("status", &self.status())
            .finish()
    }
}

impl std::ops::Deref for Session {
    type Target = Engine;

    fn deref(&self) -> &Engine {
        &self.engine
    }
}

impl Session {
    /// The session's transaction block, if its engine keeps one.
    pub(super) fn transaction(&self) -> Option<Arc<Transaction>> {
        self.tx.clone()
    }

    /// The engine: what this session shares with the others.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The session's DataFusion context.
    pub fn context(&self) -> &SessionContext {
        &self.ctx
    }

    /// Splits and parses a query string (PostgreSQL's dialect), the
    /// session's database taken off its three-part names
    /// (`engine::database`: every door a statement reaches refuses another
    /// database's).
    pub fn parse(
        &self,
        sql: &str,
    ) -> Result<Vec<Statement>, datafusion::sql::sqlparser::parser::ParserError> {
        let mut statements = self.engine.parse(sql)?;
        let database = self.database();
        for statement in &mut statements {
            super::database::strip(statement, &database);
        }
        Ok(statements)
    }

    /// Whether a statement reads `pg_catalog` or `information_schema`.
    pub fn reads_system_catalog(&self, statement: &Statement) -> bool {
        self.engine.reads_system_catalog(statement)
    }

    /// Where the session's transaction block stands.
    pub fn status(&self) -> BlockStatus {
        match &self.tx {
            Some(tx) => block::status(tx),
            None => BlockStatus::Idle,
        }
    }

    /// A statement of the session failed where the engine did not see it
    /// (the wire protocol's own errors: a Bind that does not fit): its
    /// open block fails, as any statement's failure fails it.
    pub fn statement_failed(&self) {
        self.fail_block();
    }

    /// Whether the session's block is failed, as an error for a statement
    /// about to run outside [`Self::execute`] (a prepared statement's run).
    pub fn admit(&self, statement: &Statement) -> Result<(), EngineError> {
        match &self.tx {
            Some(tx) => block::admit(tx, statement),
            None => Ok(()),
        }
    }

    /// Whether the session pages its queries (`tablesql.page_size` above 0).
    pub fn pages(&self) -> bool {
        super::paging::paging_on(&self.ctx)
    }

    /// A session parameter's value (`application_name`, `DateStyle`,
    /// `search_path`: what `SHOW` and `current_setting` read).
    pub fn parameter(&self, name: &str) -> Result<String, EngineError> {
        Ok(self.parameters.get(name)?)
    }

    /// Sets a session parameter as `SET` does (a wire client's startup
    /// parameters, say).
    pub fn set_parameter(&self, name: &str, value: &str) -> Result<(), EngineError> {
        Ok(self.parameters.set(name, value)?)
    }

    /// The parameters a client is told about that changed since the last
    /// call (the wire's ParameterStatus), as (name, value).
    pub fn take_reported(&self) -> Vec<(String, String)> {
        self.parameters.take_reported()
    }

    /// The session's `statement_timeout`, when one is set.
    pub fn statement_timeout(&self) -> Option<std::time::Duration> {
        self.parameters.statement_timeout()
    }

    /// The parameters every session has, in name order (`pg_settings`).
    pub fn parameter_names() -> Vec<String> {
        crate::planner::parameters::SessionParameters::default_names()
    }

    /// The columns a `SHOW` of session parameters answers with, known
    /// before it runs (a wire client's Describe); `None` for any other
    /// statement.
    pub fn shown_columns(statement: &Statement) -> Option<Vec<String>> {
        crate::planner::parameters::show_target(statement).map(|s| s.columns())
    }

    /// `DISCARD ALL`'s part in the engine: the session forgets the sequence
    /// values it holds (`currval`) and its temporary tables, and its
    /// parameters go back to their defaults. Outside a transaction block only, as in PostgreSQL (a
    /// pooler discards between clients).
    pub fn discard(&self) -> Result<(), EngineError> {
        if self.status() != BlockStatus::Idle {
            return Err(EngineError::InTransactionBlock {
                tag: "DISCARD ALL",
                why: "",
            });
        }
        self.parameters.reset();
        // Its temporary tables go, as PostgreSQL's DISCARD ALL drops them.
        if let Some(own) = super::session_relations(&self.ctx) {
            own.clear_temp();
        }
        let state = &self.ctx.state();
        let extensions = &state.config().options().extensions;
        if let Some(sequences) =
            extensions.get::<crate::planner::sequence_functions::SequenceSession>()
        {
            sequences.clear();
        }
        Ok(())
    }

    /// The notices the session's statements left since the last call.
    pub fn take_notices(&self) -> Vec<Notice> {
        session_notices(&self.ctx)
    }

    /// Plans a query or write (`SELECT`, `VALUES`, `INSERT`, `UPDATE`,
    /// `DELETE`, with `$1`, `$2`, ... placeholders) for running many times;
    /// its runs are this session's. Other statements (DDL, `SET`, `BEGIN`)
    /// are refused: run them with [`Session::execute_sql`].
    ///
    /// ```no_run
    /// # async fn f(engine: tablesql_engine::Engine) -> Result<(), tablesql_engine::EngineError> {
    /// use datafusion::scalar::ScalarValue;
    /// let by_bib = engine
    ///     .session()
    ///     .prepare("SELECT name FROM registrations WHERE event = $1 AND distance = $2 AND bib = $3")
    ///     .await?;
    /// let rows = by_bib
    ///     .query(vec![
    ///         ScalarValue::from("2012 Boston Marathon"),
    ///         ScalarValue::from("Full"),
    ///         ScalarValue::Int32(Some(42)),
    ///     ])
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub async fn prepare(&self, sql: &str) -> Result<PreparedStatement, EngineError> {
        let mut statements = self
            .parse(sql)
            .map_err(|e| EngineError::DataFusion(DataFusionError::SQL(Box::new(e), None)))?;
        if statements.len() != 1 {
            return Err(DataFusionError::Plan(format!(
                "a prepared statement is one statement, not {}",
                statements.len()
            ))
            .into());
        }
        self.prepare_statement(statements.remove(0)).await
    }

    /// Runs one statement of a query string (see the module doc). What
    /// PostgreSQL's grammar lacks goes to DataFusion's own parser, as in
    /// [`Session::sql`]; a statement that does not parse fails the open block.
    pub async fn execute_sql(&self, sql: &str) -> Result<Outcome, EngineError> {
        match self.one_statement(sql).await {
            Ok(OneStatement::Parsed(statement)) => self.execute(statement).await,
            Ok(OneStatement::DataFusion(frame)) => {
                // One of DataFusion's own may change the configuration.
                self.configuration_changed();
                // Recorded under its first word: its text may hold values
                // (secrets, paths).
                let first = sql.split_whitespace().next().unwrap_or_default();
                let label = format!("{} ...", first.to_uppercase());
                let stream = self.run_frame(label, frame).await?;
                let tx = self.tx.clone();
                Ok(Outcome::Rows(Box::pin(FailsBlock { stream, tx })))
            }
            Err(e) => {
                self.fail_block();
                Err(e)
            }
        }
    }

    /// Runs one statement: the engine's answer first (transaction control,
    /// catalog DDL, refusals), then DataFusion's. A failure fails the
    /// session's open block.
    pub async fn execute(&self, statement: Statement) -> Result<Outcome, EngineError> {
        let done = self.run(statement).await;
        if done.is_err() {
            self.fail_block();
        }
        done
    }

    /// Runs a frame DataFusion planned, recorded under `label` in the
    /// workload statistics as its rows stream.
    async fn run_frame(
        &self,
        label: String,
        frame: datafusion::dataframe::DataFrame,
    ) -> Result<SendableRecordBatchStream, EngineError> {
        let task = Arc::new(frame.task_ctx());
        let plan = frame.create_physical_plan().await?;
        let stream = datafusion::physical_plan::execute_stream(plan.clone(), task)?;
        Ok(self.engine.recorded(label, Some(plan), stream))
    }

    async fn run(&self, statement: Statement) -> Result<Outcome, EngineError> {
        let statement = self.local_names(statement)?;
        match self.control(&statement).await? {
            Some(Control::Block(change)) => return Ok(Outcome::Block(change)),
            Some(Control::Ddl(kind)) => return Ok(Outcome::Done(kind)),
            Some(Control::Shown(batch)) => {
                let schema = batch.schema();
                let rows = futures::stream::iter([Ok(batch)]);
                return Ok(Outcome::Rows(Box::pin(
                    datafusion::physical_plan::stream::RecordBatchStreamAdapter::new(schema, rows),
                )));
            }
            None => {}
        }
        let kind = StatementKind::of(&statement);
        let returning = super::returns_rows(&statement);
        if kind.writes_rows() && !returning {
            let write = self.write(statement).await?;
            let rows = write.run().await?;
            return Ok(Outcome::Written { kind, rows });
        }
        if returning || matches!(statement, Statement::Query(_) | Statement::Explain { .. }) {
            return Ok(Outcome::Rows(self.query(statement).await?));
        }
        // The rest is DataFusion's: SET, and its DDL of an embedder's tables.
        let label = run::statement_label(&statement);
        let frame = self.frame(statement).await?;
        let stream = self.run_frame(label, frame).await?;
        if stream.schema().fields().is_empty() && kind.tag().is_some() {
            datafusion::physical_plan::common::collect(stream).await?;
            return Ok(Outcome::Done(kind));
        }
        let tx = self.tx.clone();
        Ok(Outcome::Rows(Box::pin(FailsBlock { stream, tx })))
    }
}

/// A query's rows; an error among them fails the session's open block.
pub(super) struct FailsBlock {
    stream: SendableRecordBatchStream,
    tx: Option<Arc<Transaction>>,
}

impl FailsBlock {
    pub(super) fn new(stream: SendableRecordBatchStream, tx: Option<Arc<Transaction>>) -> Self {
        Self { stream, tx }
    }
}

impl Stream for FailsBlock {
    type Item = datafusion::error::Result<RecordBatch>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let next = self.stream.poll_next_unpin(cx);
        if let (Poll::Ready(Some(Err(_))), Some(tx)) = (&next, &self.tx) {
            tx.fail();
        }
        next
    }
}

impl RecordBatchStream for FailsBlock {
    fn schema(&self) -> SchemaRef {
        self.stream.schema()
    }
}
