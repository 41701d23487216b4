//! Plans that skip DataFusion's physical planner: a projection of columns
//! over one mapped table whose every filter the scan answers exactly (a key
//! range; a point query by primary key is a `PointQuery`, planned when the
//! statement is prepared). Such a plan is one `PartitionScanExec` and a column
//! selection; building it directly costs a pushdown, while the
//! physical planner and its optimizer rules cost more than the lookup itself
//! (BENCHMARKS.md, "Wire server"). Anything else returns `None` and goes
//! through DataFusion.

use std::sync::Arc;

use datafusion::error::Result;
use datafusion::execution::SendableRecordBatchStream;
use datafusion::execution::TaskContext;
use datafusion::execution::session_state::SessionState;
use datafusion::logical_expr::{Expr, LogicalPlan};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::prelude::SessionContext;
use futures::StreamExt;

use crate::planner::simple_scan::simple_scan;

/// A session's state and task context, taken once per configuration
/// ([`ConfigGeneration`]): each is a copy of the session's function
/// registries, and copying them per statement cost more than the point
/// read (`perf`: `HashMap::clone` and malloc on top).
#[derive(Clone)]
pub struct Snapshot {
    pub state: Arc<SessionState>,
    pub task: Arc<TaskContext>,
    /// The session's configuration generation it was taken at.
    pub generation: u64,
}

/// A session's configuration generation: raised by every change of its
/// configuration (a `SET`, a function registered), so that a snapshot
/// taken before it is taken again.
#[derive(Debug, Default)]
pub struct ConfigGeneration(std::sync::atomic::AtomicU64);

impl ConfigGeneration {
    /// The generation of session `ctx`.
    pub fn of(ctx: &SessionContext) -> u64 {
        ctx.state_ref()
            .read()
            .config()
            .get_extension::<Self>()
            .map_or(0, |g| g.0.load(std::sync::atomic::Ordering::Acquire))
    }

    /// Session `ctx`'s configuration changed.
    pub fn raise(ctx: &SessionContext) {
        if let Some(g) = ctx.state_ref().read().config().get_extension::<Self>() {
            g.0.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        }
    }
}

impl std::fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Snapshot")
            .field("session", &self.state.session_id())
            .finish()
    }
}

impl Snapshot {
    pub fn of(ctx: &SessionContext) -> Self {
        // Read first: a change after it makes this snapshot stale.
        let generation = ConfigGeneration::of(ctx);
        Self {
            state: Arc::new(ctx.state()),
            task: ctx.task_ctx(),
            generation,
        }
    }
}

/// Starts `plan` without the physical planner when its shape allows, with
/// every placeholder already bound; with the scan it runs (for its counts).
pub async fn start(
    session: &Snapshot,
    plan: &LogicalPlan,
) -> Result<Option<(SendableRecordBatchStream, Arc<dyn ExecutionPlan>)>> {
    let Some(shape) = simple_scan(plan) else {
        return Ok(None);
    };
    let filters: Vec<Expr> = shape.filters.into_iter().cloned().collect();
    let Some(exec) = shape.table.exact_scan(
        session.state.as_ref(),
        shape.scan.projection.as_ref(),
        &filters,
        shape.scan.fetch,
    )?
    else {
        return Ok(None);
    };
    let stream = exec.clone().execute(0, session.task.clone())?;
    let schema = Arc::new(stream.schema().project(&shape.columns)?);
    let columns = shape.columns;
    let projected = stream.map(move |batch| batch.and_then(|b| Ok(b.project(&columns)?)));
    let stream: SendableRecordBatchStream =
        Box::pin(RecordBatchStreamAdapter::new(schema, projected));
    Ok(Some((stream, exec)))
}
