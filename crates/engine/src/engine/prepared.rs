//! Prepared statements: a query or write parsed, analyzed and optimized once
//! with its placeholders, then run many times with values. A point read by
//! primary key is planned once whole (`planner::point`) and runs without
//! any planning; anything else binds its values into the optimized plan and
//! runs only the physical planner (`engine::start`: the library's
//! [`PreparedStatement::query`] returns all its rows; a wire client's
//! Execute is paged under `tablesql.page_size`, as its simple queries are).
//! A statement whose tables changed in the catalog since it was planned (a
//! `CREATE`, `DROP` or refresh through this engine) is planned again at its
//! next run.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::ParamValues;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::execution::SendableRecordBatchStream;
use datafusion::logical_expr::LogicalPlan;
use datafusion::sql::sqlparser::ast::Statement;

use super::run::{PointQuery, cast_placeholder_types, parameter_types, statement_label};
use super::{Engine, EngineError, Session, StatementKind};
use crate::exec::write::locks::Locking;

/// A statement planned once (see the module doc), from [`Session::prepare`].
pub struct PreparedStatement {
    /// The session it runs in (the one it was prepared in).
    session: Session,
    statement: Statement,
    /// The statement as parsed and printed again: what a page token names.
    text: String,
    /// The statement normalized: what its runs are recorded under.
    label: String,
    kind: StatementKind,
    /// The row locks its reads take (`FOR UPDATE`).
    locking: Option<Locking>,
    planned: std::sync::RwLock<Arc<Planned>>,
}

impl std::fmt::Debug for PreparedStatement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PreparedStatement")
            .field("statement", &self.statement.to_string())
            .finish()
    }
}

/// One planning of a prepared statement.
#[derive(Debug)]
pub(crate) struct Planned {
    /// The catalog version it was planned under.
    version: u64,
    /// The optimized plan, placeholders in place.
    pub(crate) plan: LogicalPlan,
    /// The placeholders' types, `$1` first (`None` where nothing says).
    pub(crate) params: Vec<Option<DataType>>,
    /// The plan as a point read, when it is one.
    pub(crate) point: Option<PointQuery>,
    /// The result columns as a client sees them, named once per planning.
    schema: SchemaRef,
}

impl Engine {
    /// The catalog's version in this engine: raised by every change of
    /// the tables it registers.
    pub(crate) fn catalog_version(&self) -> u64 {
        self.catalog_version.load(Ordering::Acquire)
    }

    /// Plans a prepared statement under the current catalog.
    pub(crate) async fn plan_prepared(
        &self,
        state: &datafusion::execution::session_state::SessionState,
        statement: &Statement,
    ) -> Result<Planned, EngineError> {
        let version = self.catalog_version();
        let plan = self.plan_statement(state, statement.clone()).await?;
        let mut types = parameter_types(&plan)?;
        for (id, t) in cast_placeholder_types(&plan)? {
            if let Some(slot @ None) = types.get_mut(&id) {
                *slot = Some(t);
            }
        }
        let count = types
            .keys()
            .filter_map(|id| id.strip_prefix('$')?.parse::<usize>().ok())
            .max()
            .unwrap_or(0);
        let params = (1..=count)
            .map(|n| types.get(&format!("${n}")).cloned().flatten())
            .collect();
        let point = PointQuery::of(&plan);
        let schema = crate::planner::output_names::shown(plan.schema().inner());
        Ok(Planned {
            version,
            plan,
            params,
            point,
            schema,
        })
    }
}

/// Whether a statement is a query or a write (what `prepare` takes).
fn preparable(statement: &Statement) -> bool {
    matches!(
        statement,
        Statement::Query(_)
            | Statement::Explain { .. }
            | Statement::Insert(_)
            | Statement::Update { .. }
            | Statement::Delete(_)
    )
}

impl PreparedStatement {
    /// Plans `statement` under `state`, a copy of `session`'s state the
    /// session keeps (a copy costs about 17 µs, which a driver that sends
    /// Parse for every query would pay each time).
    pub(super) async fn new(
        session: Session,
        state: &datafusion::execution::session_state::SessionState,
        statement: Statement,
    ) -> Result<Self, EngineError> {
        if !preparable(&statement) {
            return Err(DataFusionError::Plan(format!(
                "only queries and writes can be prepared, not: {statement}"
            ))
            .into());
        }
        let locking = super::block::locking(&statement)?;
        session.follow().await;
        let planned = session.plan_prepared(state, &statement).await?;
        Ok(PreparedStatement {
            locking,
            text: statement.to_string(),
            label: statement_label(&statement),
            kind: StatementKind::of(&statement),
            statement,
            planned: std::sync::RwLock::new(Arc::new(planned)),
            session,
        })
    }

    /// The placeholders' types, `$1` first; `None` where the statement
    /// does not say.
    pub fn parameter_types(&self) -> Vec<Option<DataType>> {
        self.current().params.clone()
    }

    /// The row locks its reads take (`FOR UPDATE`), if any.
    pub(crate) fn locking(&self) -> Option<Locking> {
        self.locking
    }

    /// Whether a run reads one entity by its keys without planning.
    pub fn is_point_read(&self) -> bool {
        self.current().point.is_some()
    }

    /// The planning as last planned (the result's shape never changes).
    pub(crate) fn current(&self) -> Arc<Planned> {
        match self.planned.read() {
            Ok(p) => p.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// The planning to run: planned again, and kept, when a table changed
    /// in the catalog since (here, or in another process once
    /// `Engine::follow_catalog` saw it), so that a prepared write never
    /// writes under a replaced definition. As in PostgreSQL, a new plan
    /// whose rows differ in shape is an error.
    pub(crate) async fn planned(&self) -> Result<Arc<Planned>, EngineError> {
        let current = self.current();
        if current.version == self.session.engine().catalog_version() {
            return Ok(current);
        }
        // Boxed, as the physical path below: planning's futures are large,
        // and a point read's future should not carry them.
        Box::pin(self.plan_again(&current)).await
    }

    async fn plan_again(&self, old: &Planned) -> Result<Arc<Planned>, EngineError> {
        let fresh = self
            .session
            .plan_prepared(&self.session.context().state(), &self.statement)
            .await?;
        if fresh.plan.schema().as_arrow() != old.plan.schema().as_arrow() {
            return Err(EngineError::NotSupported(
                "cached plan must not change result type".into(),
            ));
        }
        let fresh = Arc::new(fresh);
        if let Ok(mut p) = self.planned.write() {
            *p = fresh.clone();
        }
        Ok(fresh)
    }

    /// Runs the statement with `params` (`$1` first) and collects its rows
    /// (a write's: its count). A failure fails the session's open block.
    pub async fn query(
        &self,
        params: impl Into<ParamValues>,
    ) -> Result<Vec<RecordBatch>, EngineError> {
        let stream = self.stream(params).await?;
        let collected = datafusion::physical_plan::common::collect(stream).await;
        Ok(collected?)
    }

    /// Runs the statement with `params` and streams its rows (all of them:
    /// a prepared statement is not paged here).
    pub async fn stream(
        &self,
        params: impl Into<ParamValues>,
    ) -> Result<SendableRecordBatchStream, EngineError> {
        self.session
            .query_prepared_whole(self, &params.into())
            .await
    }

    /// The statement's result columns (a write's: its count): the same
    /// `Arc` until the statement is planned again.
    pub fn schema(&self) -> SchemaRef {
        self.current().schema.clone()
    }

    /// What the statement is (`Select`, `Insert`, ...).
    pub fn kind(&self) -> StatementKind {
        self.kind
    }

    /// Whether it is a write with RETURNING (its rows are its answer).
    pub fn returns_rows(&self) -> bool {
        super::returns_rows(&self.statement)
    }

    /// The statement as parsed and printed again.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// What the statement's runs are recorded under.
    pub(crate) fn label(&self) -> &str {
        &self.label
    }
}

/// A prepared plan with values in place of its placeholders.
pub fn bind(
    plan: &LogicalPlan,
    params: &[Option<DataType>],
    values: &ParamValues,
) -> DfResult<LogicalPlan> {
    if params.is_empty() {
        return Ok(plan.clone());
    }
    if let Some(bound) = super::bind::filters(plan, values)? {
        return Ok(bound);
    }
    let plan = plan
        .clone()
        .replace_params_with_values(values)
        .and_then(|p| crate::planner::upsert::bind_values(p, values))?;
    fold_limits(plan)
}

/// `LIMIT $1::INTEGER` bound after optimization is a cast of a literal, and
/// the physical planner takes only a literal there (psycopg 3 sends
/// SQLAlchemy's `.limit(n)` so): each cast is folded into its literal.
fn fold_limits(plan: LogicalPlan) -> DfResult<LogicalPlan> {
    use datafusion::logical_expr::{Expr, Limit};
    // Takes and gives the Box a `Limit` holds its expressions in.
    #[allow(clippy::boxed_local)]
    fn fold(e: Box<Expr>) -> datafusion::error::Result<Box<Expr>> {
        match *e {
            Expr::Cast(c) => match *fold(c.expr)? {
                Expr::Literal(v, meta) => Ok(Box::new(Expr::Literal(
                    v.cast_to(c.field.data_type())?,
                    meta,
                ))),
                other => Ok(Box::new(Expr::Cast(
                    datafusion::logical_expr::Cast::new_from_field(Box::new(other), c.field),
                ))),
            },
            other => Ok(Box::new(other)),
        }
    }
    plan.transform_up(|p| match p {
        LogicalPlan::Limit(Limit { skip, fetch, input }) => {
            let skip = skip.map(fold).transpose()?;
            let fetch = fetch.map(fold).transpose()?;
            Ok(Transformed::yes(LogicalPlan::Limit(Limit {
                skip,
                fetch,
                input,
            })))
        }
        other => Ok(Transformed::no(other)),
    })
    .map(|t| t.data)
}
