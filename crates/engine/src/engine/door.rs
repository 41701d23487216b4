//! What a session answers itself before DataFusion plans a statement
//! (transaction control, catalog DDL, `SET` and `SHOW`: `control`), and
//! the shortcuts over [`Session::execute`] for an embedder: a statement's
//! rows streamed or collected, or its DataFrame to go on composing.

use super::session::Outcome;
use super::*;
use crate::exec::write::reads::Isolation;

impl Session {
    /// The DataFrame of one statement, for an embedder who goes on
    /// composing it with DataFusion. What the session answers itself
    /// (catalog DDL, transaction control, `SET`) runs here and yields an
    /// empty or a shown frame. To run a statement, [`Session::execute_sql`].
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
                // Boxed: DataFusion's planning future, rarely needed.
                let frame = Box::pin(self.datafusion_statement(sql, e)).await?;
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
    async fn statement(&self, statement: Statement) -> Result<DataFrame, EngineError> {
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
        self.follow().await;
        if let Some(tx) = self.transaction() {
            block::admit(&tx, statement)?;
            let default = self.default_isolation();
            let own = self.own();
            // A block whose COMMIT was dropped midway (a cancel, a
            // timeout) closed without its relations: they close now. What
            // it made in the store stays: the COMMIT may have landed, or a
            // recovery may yet land it.
            if let Some(own) = own.as_deref()
                && own.is_open()
                && !tx.is_open()
            {
                own.end(false);
                self.engine.catalog_changed();
            }
            let change = match (statement, own.as_deref()) {
                // A block that changed the catalog writes it at COMMIT
                // (`engine::block_ddl`).
                (Statement::Commit { chain: false, .. }, Some(own)) if own.has_changes() => {
                    Some(Box::pin(self.commit_with_ddl(&tx, own)).await)
                }
                _ => {
                    let change =
                        block::control(&tx, self.store().as_ref(), statement, default).await;
                    if let (Some(changed), Some(own)) = (&change, own.as_deref()) {
                        self.follow_block(&tx, own, statement, changed.as_ref().ok())
                            .await;
                    }
                    change
                }
            };
            if let Some(change) = change {
                // `transaction_isolation` is the block's, or the default.
                let level = tx.isolation().unwrap_or(default);
                self.parameters.set("transaction_isolation", level.name())?;
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
            self.set_parameter(&name, &value)?;
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
        for n in outcome.notices {
            self.notice(n);
        }
        Ok(Some(session::Control::Ddl(StatementKind::of(statement))))
    }

    /// The session's own relations follow what transaction control did
    /// to its block (`engine::own`): `None` for a statement that failed.
    /// They close with the block, however it closed (a failed COMMIT
    /// closes it; a refused `COMMIT AND CHAIN` does not).
    async fn follow_block(
        &self,
        tx: &Transaction,
        own: &own::OwnRelations,
        statement: &Statement,
        change: Option<&BlockChange>,
    ) {
        let name = |n: &datafusion::sql::sqlparser::ast::Ident| crate::catalog::normalize_ident(n);
        match (change, statement) {
            (Some(BlockChange::Began), _) => own.begin(),
            (Some(BlockChange::Savepoint), Statement::Savepoint { name: n }) => {
                own.savepoint(&name(n));
            }
            (Some(BlockChange::Released), Statement::ReleaseSavepoint { name: n }) => {
                own.release(&name(n));
            }
            (
                Some(BlockChange::RolledBackTo),
                Statement::Rollback {
                    savepoint: Some(n), ..
                },
            ) => {
                own.rollback_to(&name(n));
                // Plans made since the mark may name what is gone.
                self.engine.catalog_changed();
            }
            _ => {}
        }
        if own.is_open() && !tx.is_open() {
            let committed = change == Some(&BlockChange::Ended(BlockEnd::Committed));
            self.end_own(own, committed).await;
        }
    }

    /// The level a `BEGIN` that names none opens its block at.
    fn default_isolation(&self) -> Isolation {
        self.parameters
            .get("default_transaction_isolation")
            .ok()
            .and_then(|v| Isolation::named(&v))
            .unwrap_or_default()
    }

    /// Leaves a notice for the front end ([`Session::take_notices`]).
    pub(crate) fn notice(&self, notice: Notice) {
        if let Some(notices) = self
            .ctx
            .state_ref()
            .read()
            .config()
            .get_extension::<Notices>()
        {
            notices.push(notice);
        }
    }

    /// Catches up with the catalog as [`Engine::follow_catalog`] does, the
    /// notice of a check that failed left for this session.
    pub(crate) async fn follow(&self) {
        if let Some(n) = self.engine().follow_catalog().await {
            self.notice(n);
        }
    }

    /// Marks the session's open transaction block failed (`engine::block`),
    /// after a statement failed. A failed statement may have changed the
    /// catalog all the same (a write whose answer was lost, then applied):
    /// the next statement reads the catalog's version rather than trust the
    /// tables registered.
    pub(crate) fn fail_block(&self) {
        self.engine().recheck_catalog();
        if let Some(tx) = self.transaction() {
            tx.fail();
        }
    }

    /// A query's or write's frame: one page under `tablesql.page_size`,
    /// else DataFusion's plan.
    pub(super) async fn frame(&self, statement: Statement) -> Result<DataFrame, EngineError> {
        // A frame runs later, or never: no lock could be held for it.
        if block::locking(&statement)?.is_some() {
            return Err(EngineError::NotSupported(
                "FOR UPDATE and FOR SHARE run through Session::execute, not as a DataFrame".into(),
            ));
        }
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

    /// Runs one statement ([`Session::execute_sql`]) and streams its rows:
    /// a write's are one row of its count (DataFusion's `count`), a
    /// command's none.
    pub async fn execute_stream(
        &self,
        sql: &str,
    ) -> Result<SendableRecordBatchStream, EngineError> {
        // Boxed: a statement's future is large (planning, catalog DDL), and
        // an embedder's own future, on its thread's stack, would carry it.
        Ok(match Box::pin(self.execute_sql(sql)).await? {
            Outcome::Rows(stream) => stream,
            Outcome::Written { rows, .. } => {
                let count = crate::exec::write::dml::count_batch(rows)?;
                let schema = count.schema();
                Box::pin(
                    datafusion::physical_plan::stream::RecordBatchStreamAdapter::new(
                        schema,
                        futures::stream::iter([Ok(count)]),
                    ),
                )
            }
            Outcome::Block(_) | Outcome::Done(_) => {
                Box::pin(datafusion::physical_plan::EmptyRecordBatchStream::new(
                    Arc::new(datafusion::arrow::datatypes::Schema::empty()),
                ))
            }
        })
    }

    /// Runs one statement and collects its rows (as
    /// [`Self::execute_stream`] streams them).
    pub async fn collect(&self, sql: &str) -> Result<Vec<RecordBatch>, EngineError> {
        let stream = self.execute_stream(sql).await?;
        Ok(datafusion::physical_plan::common::collect(stream).await?)
    }
}
