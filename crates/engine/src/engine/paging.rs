//! Token paging through the engine: one page of a query of one table, and
//! the signed token of the next (`planner::page` runs the page,
//! `exec::read::token` signs). The library asks with [`Session::query_page`]; a
//! session (the wire, the shell) pages under `tablesql.page_size`.

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::error::DataFusionError;
use datafusion::execution::SessionState;
use datafusion::logical_expr::LogicalPlan;
use datafusion::prelude::SessionContext;

use super::{Engine, EngineError, Session};
use crate::catalog::secret;
use crate::exec::ExecError;
use crate::exec::notices::{Notice, NoticeKind, Notices};
use crate::exec::read::token::{Signer, fingerprint};
use crate::planner::page::{self, Paging};
use crate::planner::settings::TablesqlConfig;

/// One page of a query's rows.
#[derive(Debug)]
pub struct ResultPage {
    /// The query's columns.
    pub schema: SchemaRef,
    /// The rows, at most the page size, in the table's key order.
    pub batches: Vec<RecordBatch>,
    /// The token of the next page, `None` after the last. Any engine over
    /// the same store resumes from it ([`Session::query_page`]).
    pub next: Option<String>,
}

impl Session {
    /// One page of at most `size` rows of a query of one table, in key
    /// order, resuming after the page `token` ended (the first page for
    /// `None`); the page carries the next page's token. A stateless service
    /// hands the token to its client and resumes in any process over the
    /// same store. A token of another statement or store, or altered, is an
    /// error ([`ExecError::Token`]); so is a query that reads more than one
    /// table or sorts ([`ExecError::NotPageable`]).
    pub async fn query_page(
        &self,
        sql: &str,
        size: usize,
        token: Option<&str>,
    ) -> Result<ResultPage, EngineError> {
        let mut statements = self
            .parse(sql)
            .map_err(|e| DataFusionError::SQL(Box::new(e), None))?;
        if statements.len() != 1 {
            return Err(DataFusionError::NotImplemented(format!(
                "one statement at a time here, not {}",
                statements.len()
            ))
            .into());
        }
        let statement = statements.remove(0);
        let text = statement.to_string();
        let state = self.ctx.state();
        let plan = self.plan_statement(&state, statement).await?;
        if let Paging::Cannot(why) = page::paging(&plan) {
            return Err(DataFusionError::from(why).into());
        }
        self.page(&state, &plan, &text, size, token).await
    }
}

impl Engine {
    /// One page of an optimized query plan (as [`Self::query_page`]);
    /// `statement` names it: its text as parsed (normalized), with any
    /// parameter values. Not the plan: the optimizer folds `now()` into a
    /// literal, so a plan is another each time.
    pub(crate) async fn page(
        &self,
        state: &SessionState,
        plan: &LogicalPlan,
        statement: &str,
        size: usize,
        token: Option<&str>,
    ) -> Result<ResultPage, EngineError> {
        if size == 0 {
            return Err(
                DataFusionError::Configuration("a page holds at least one row".into()).into(),
            );
        }
        // The text, and what it read: a table dropped and mapped anew under
        // the same name is another statement.
        let statement = fingerprint(&format!("{statement}\n{}", page::identity(plan)));
        let signer = self.signer().await?;
        let after = match token {
            Some(t) => Some(
                signer
                    .open(t, &statement)
                    .map_err(|e| DataFusionError::from(ExecError::from(e)))?,
            ),
            None => None,
        };
        let rows = page::run_page(state, plan, size, after).await?;
        Ok(ResultPage {
            schema: rows.schema,
            batches: rows.batches,
            next: rows.last.map(|(pk, rk)| signer.issue(&statement, &pk, &rk)),
        })
    }

    /// A session's query (an optimized plan, named by `statement` as in
    /// [`Self::page`]) under `tablesql.page_size`, as one page. It resumes
    /// from `tablesql.page_token`, which it clears once the page is read
    /// (or the token refused: it can never serve), and leaves the next
    /// page's token in `tablesql.next_page_token`, with a notice saying how
    /// to resume. `None` when paging is off or the plan reads no store
    /// table; a query of a store table that cannot page runs whole, with a
    /// notice, and leaves no next token.
    pub(crate) async fn session_page(
        &self,
        ctx: &SessionContext,
        plan: &LogicalPlan,
        statement: &str,
    ) -> Result<Option<ResultPage>, EngineError> {
        if !paging_on(ctx) || !is_read(plan) {
            return Ok(None);
        }
        let state = ctx.state();
        let notices = state.config().get_extension::<Notices>();
        match page::paging(plan) {
            Paging::Pages => {}
            Paging::NoStoreTable => return Ok(None),
            Paging::Cannot(why) => {
                if let Some(n) = &notices {
                    n.push(Notice::new(
                        NoticeKind::Page,
                        format!("{why}: it ran whole (tablesql.page_size)"),
                    ));
                }
                set(ctx, |s| s.next_page_token.clear());
                return Ok(None);
            }
        }
        let settings = TablesqlConfig::of(state.config());
        let taken = settings.page_token;
        set(ctx, |s| s.next_page_token.clear());
        let token = Some(taken.as_str()).filter(|t| !t.is_empty());
        // The token is cleared only if still the one read: another task on
        // a shared session may have set a new one meanwhile.
        let page = match self
            .page(&state, plan, statement, settings.page_size, token)
            .await
        {
            Ok(page) => page,
            Err(e) => {
                if is_token_error(&e) {
                    set(ctx, |s| {
                        if s.page_token == taken {
                            s.page_token.clear();
                        }
                    });
                }
                return Err(e);
            }
        };
        let next = page.next.clone().unwrap_or_default();
        set(ctx, |s| {
            if s.page_token == taken {
                s.page_token.clear();
            }
            s.next_page_token = next;
        });
        if let (Some(n), Some(next)) = (&notices, &page.next) {
            n.push(Notice::new(
                NoticeKind::Page,
                format!(
                    "more rows follow: SET tablesql.page_token = '{next}' and run the statement again"
                ),
            ));
        }
        Ok(Some(page))
    }

    async fn signer(&self) -> Result<&Signer, EngineError> {
        self.signer
            .get_or_try_init(|| async {
                let secret = secret::page_token_key(self.store.as_ref()).await?;
                Ok::<_, EngineError>(Signer::new(&secret))
            })
            .await
    }
}

/// Whether the session pages (`tablesql.page_size` above 0).
pub(super) fn paging_on(ctx: &SessionContext) -> bool {
    TablesqlConfig::get(ctx.state_ref().read().config()).is_some_and(|s| s.page_size > 0)
}

/// Whether a plan reads rows and writes none: what paging applies to.
pub(super) fn is_read(plan: &LogicalPlan) -> bool {
    !crate::planner::upsert::is_upsert_plan(plan)
        && !matches!(
            plan,
            LogicalPlan::Dml(_)
                | LogicalPlan::Ddl(_)
                | LogicalPlan::Statement(_)
                | LogicalPlan::Explain(_)
                | LogicalPlan::Analyze(_)
                | LogicalPlan::Copy(_)
                | LogicalPlan::DescribeTable(_)
        )
}

/// Changes the session's settings.
fn set(ctx: &SessionContext, change: impl FnOnce(&mut TablesqlConfig)) {
    let shared = ctx.state_ref();
    let mut state = shared.write();
    if let Some(settings) = state
        .config_mut()
        .options_mut()
        .extensions
        .get_mut::<TablesqlConfig>()
    {
        change(settings);
    }
}

fn is_token_error(e: &EngineError) -> bool {
    let EngineError::DataFusion(DataFusionError::External(x)) = e else {
        return false;
    };
    matches!(x.downcast_ref::<ExecError>(), Some(ExecError::Token(_)))
}
