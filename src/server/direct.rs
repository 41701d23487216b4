//! Plans that skip DataFusion's physical planner: a projection of columns
//! over one mapped table whose every filter the scan answers exactly (a point
//! query by primary key, a key range). Such a plan is one `PartitionScanExec`
//! and a column selection; building it directly costs a pushdown, while the
//! physical planner and its optimizer rules cost more than the lookup itself
//! (BENCHMARKS.md, "Wire server"). Anything else returns `None` and goes
//! through DataFusion.

use std::sync::Arc;

use datafusion::catalog::TableProvider;
use datafusion::catalog::default_table_source::source_as_provider;
use datafusion::common::Column;
use datafusion::error::Result;
use datafusion::execution::SendableRecordBatchStream;
use datafusion::execution::TaskContext;
use datafusion::execution::session_state::SessionState;
use datafusion::logical_expr::utils::split_conjunction;
use datafusion::logical_expr::{Expr, LogicalPlan, TableScan};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::prelude::SessionContext;
use futures::StreamExt;

use crate::planner::StoreTable;

/// A session's state and task context, taken once: each is a copy of the
/// session's function registries, and copying them per statement cost more
/// than the point read (`perf`: `HashMap::clone` and malloc on top).
#[derive(Clone)]
pub struct Snapshot {
    pub state: Arc<SessionState>,
    pub task: Arc<TaskContext>,
}

impl Snapshot {
    pub fn of(ctx: &SessionContext) -> Self {
        Self {
            state: Arc::new(ctx.state()),
            task: ctx.task_ctx(),
        }
    }
}

/// What the direct path needs of a plan.
struct Shape<'a> {
    scan: &'a TableScan,
    provider: Arc<dyn TableProvider>,
    filters: Vec<Expr>,
    /// Output columns as positions in the scan's output.
    columns: Vec<usize>,
}

fn shape(plan: &LogicalPlan) -> Option<Shape<'_>> {
    let (columns, below): (Option<Vec<&Column>>, &LogicalPlan) = match plan {
        LogicalPlan::Projection(p) => {
            let columns = p
                .expr
                .iter()
                .map(|e| match e {
                    Expr::Column(c) => Some(c),
                    _ => None,
                })
                .collect::<Option<Vec<_>>>()?;
            (Some(columns), p.input.as_ref())
        }
        other => (None, other),
    };
    let (predicate, below) = match below {
        LogicalPlan::Filter(f) => (Some(&f.predicate), f.input.as_ref()),
        other => (None, other),
    };
    let LogicalPlan::TableScan(scan) = below else {
        return None;
    };
    let provider = source_as_provider(&scan.source).ok()?;
    let mut filters: Vec<Expr> = scan.filters.clone();
    if let Some(p) = predicate {
        filters.extend(split_conjunction(p).into_iter().cloned());
    }
    let columns = match columns {
        Some(cols) => cols
            .iter()
            .map(|c| scan.projected_schema.index_of_column(c).ok())
            .collect::<Option<Vec<_>>>()?,
        None => (0..scan.projected_schema.fields().len()).collect(),
    };
    Some(Shape {
        scan,
        provider,
        filters,
        columns,
    })
}

/// Starts `plan` without the physical planner when its shape allows, with
/// every placeholder already bound.
pub async fn start(
    session: &Snapshot,
    plan: &LogicalPlan,
) -> Result<Option<SendableRecordBatchStream>> {
    let Some(shape) = shape(plan) else {
        return Ok(None);
    };
    let any: &dyn std::any::Any = shape.provider.as_ref();
    let Some(table) = any.downcast_ref::<StoreTable>() else {
        return Ok(None);
    };
    let Some(exec) = table.exact_scan(
        session.state.as_ref(),
        shape.scan.projection.as_ref(),
        &shape.filters,
        shape.scan.fetch,
    )?
    else {
        return Ok(None);
    };
    let stream = exec.execute(0, session.task.clone())?;
    let schema = Arc::new(stream.schema().project(&shape.columns)?);
    let columns = shape.columns;
    let projected = stream.map(move |batch| batch.and_then(|b| Ok(b.project(&columns)?)));
    Ok(Some(Box::pin(RecordBatchStreamAdapter::new(
        schema, projected,
    ))))
}
