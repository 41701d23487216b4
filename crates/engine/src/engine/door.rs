//! The engine's statement door: a statement's text or its parsed form to
//! a DataFrame, with what the engine answers itself (transaction control,
//! catalog DDL, `SET` and `SHOW`) run before DataFusion plans the rest.

use super::*;

impl Engine {
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

    pub(super) async fn statement_frame(
        &self,
        statement: Statement,
    ) -> Result<DataFrame, EngineError> {
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
    pub(super) async fn frame(&self, statement: Statement) -> Result<DataFrame, EngineError> {
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
    pub(super) async fn datafusion_statement(
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
