//! The pieces a session's run is made of (`engine::start` puts them
//! together): a statement's optimized plan and its placeholders' types, the
//! prepared point read by primary key, and the run recorded in the
//! workload statistics, so that a statement behaves and counts alike
//! through every door.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use datafusion::arrow::datatypes::DataType;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::ParamValues;
use datafusion::error::DataFusionError;
use datafusion::error::Result as DfResult;
use datafusion::execution::SendableRecordBatchStream;
use datafusion::execution::session_state::SessionState;
use datafusion::logical_expr::LogicalPlan;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::SessionContext;
use datafusion::sql::sqlparser::ast::Statement;

use super::{Engine, session_transaction};
use crate::exec::read::row::Row;
use crate::exec::stats::recorded::plan_run;
use crate::exec::stats::recorded::{normalize, recorded};
use crate::exec::stats::workload::Run;
use crate::planner::point::{PointAnswer, PointRead};
use crate::storage::bill::Transactions;

pub use crate::exec::write::transaction::Transaction;

/// What a statement's runs are recorded under: its text with each literal
/// as a placeholder, as `pg_stat_statements` shows it.
pub fn statement_label(statement: &Statement) -> String {
    normalize(statement)
}

/// The placeholders of an optimized plan and their types where the plan
/// says, those of an upsert's `DO UPDATE` included (DataFusion sees only
/// its INSERT's).
pub(crate) fn parameter_types(plan: &LogicalPlan) -> DfResult<HashMap<String, Option<DataType>>> {
    let mut types = plan.get_parameter_types()?;
    for (id, t) in crate::planner::upsert::placeholder_types(plan) {
        let slot = types.entry(id).or_insert(None);
        if slot.is_none() {
            *slot = t;
        }
    }
    Ok(types)
}

/// The types of placeholders DataFusion left untyped that are cast where
/// they appear (`ti.oid = any($1::oid[])`, asyncpg's type introspection):
/// the cast's type, as PostgreSQL infers it. Left unknown, a wire client
/// has no codec for the parameter.
pub(crate) fn cast_placeholder_types(plan: &LogicalPlan) -> DfResult<Vec<(String, DataType)>> {
    use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
    use datafusion::logical_expr::{Expr, expr::Placeholder};
    let mut found = Vec::new();
    plan.apply_with_subqueries(|node| {
        node.apply_expressions(|e| {
            e.apply(|e| {
                if let Expr::Cast(c) = e
                    && let Expr::Placeholder(Placeholder { id, field: None }) = c.expr.as_ref()
                {
                    found.push((id.clone(), c.field.data_type().clone()));
                }
                Ok(TreeNodeRecursion::Continue)
            })
        })
    })?;
    Ok(found)
}

impl Engine {
    /// A statement's analyzed and optimized logical plan under a session's
    /// `state` (upserts included, which DataFusion does not plan).
    pub(crate) async fn plan_statement(
        &self,
        state: &SessionState,
        statement: Statement,
    ) -> DfResult<LogicalPlan> {
        let plan = crate::planner::upsert::statement_to_plan(state, statement).await?;
        state.optimize(&plan)
    }

    /// `stream` of `physical`, recorded under `label` when it ends or is
    /// dropped, its rows counted as they pass.
    pub(crate) fn recorded(
        &self,
        label: String,
        physical: Option<Arc<dyn ExecutionPlan>>,
        stream: SendableRecordBatchStream,
    ) -> SendableRecordBatchStream {
        recorded(self.workload.clone(), label, physical, stream)
    }

    /// A write that ran to its end: `rows` written since `started`, with
    /// what its plan's scans and writes counted.
    pub(crate) fn record_write(
        &self,
        label: &str,
        started: Instant,
        rows: u64,
        physical: &Arc<dyn ExecutionPlan>,
    ) {
        let mut run = Run {
            elapsed: started.elapsed(),
            rows,
            ..Run::default()
        };
        plan_run(physical, &mut run);
        self.workload.ran(label, run);
    }

    /// A statement that failed: a refusal of a key taken (a conflict) is
    /// counted against it.
    pub(crate) fn record_failure(&self, label: &str, e: &DataFusionError) {
        if crate::exec::is_conflict(e) {
            self.workload.refused(label);
        }
    }
}

/// A query that reads one entity by its primary key, planned whole once:
/// each run reads it without any planning.
#[derive(Debug)]
pub(crate) struct PointQuery(PointRead);

impl PointQuery {
    /// `plan` as a point query, if it is one.
    pub(crate) fn of(plan: &LogicalPlan) -> Option<Self> {
        PointRead::of(plan).map(Self)
    }

    /// Reads the entity whose keys `values` give, in session `ctx`'s
    /// transaction block if it has one, and records the run under `label`.
    /// `None` when the values are no keys (a NULL, a text for an integer):
    /// the caller plans the bound statement instead.
    pub(crate) async fn run(
        &self,
        engine: &Engine,
        ctx: &SessionContext,
        label: &str,
        values: &ParamValues,
    ) -> DfResult<Option<RecordBatch>> {
        let started = Instant::now();
        let tx = session_transaction(ctx);
        let Some(read) = self.0.run(tx.as_ref(), values).await? else {
            return Ok(None);
        };
        self.record(engine, label, started, read.found.num_rows(), &read);
        Ok(Some(read.found))
    }

    /// As `run`, the entity as one [`Row`] (`Some(None)`: no entity has
    /// the key).
    pub(crate) async fn run_row(
        &self,
        engine: &Engine,
        ctx: &SessionContext,
        label: &str,
        values: &ParamValues,
    ) -> DfResult<Option<Option<Row>>> {
        let started = Instant::now();
        let tx = session_transaction(ctx);
        let Some(read) = self.0.run_row(tx.as_ref(), values).await? else {
            return Ok(None);
        };
        let rows = usize::from(read.found.is_some());
        self.record(engine, label, started, rows, &read);
        Ok(Some(read.found))
    }

    fn record<T>(
        &self,
        engine: &Engine,
        label: &str,
        started: Instant,
        rows: usize,
        read: &PointAnswer<T>,
    ) {
        let bill = Transactions::of(self.0.operation(), read.requests);
        let run = Run::point(
            started.elapsed(),
            rows,
            (read.requests, read.retries, bill),
            self.0.storage_table().clone(),
        );
        engine.workload.ran(label, run);
    }
}
