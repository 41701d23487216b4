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
    /// The state to plan one statement under: the snapshot's, started now,
    /// so that `now()` is this statement's start, not the snapshot's, and
    /// the names planning makes up (`__subquery_1`) are this statement's
    /// own. A copy (about 17 µs, beside planning's 150 or more); a
    /// prepared statement's run does not plan, and takes none.
    pub fn for_statement(&self) -> SessionState {
        let mut state = self.state.as_ref().clone();
        state.mark_start_execution();
        state
    }

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
    // The scan answers every filter itself, so it reads only the columns
    // shown: a prepared statement's plan still holds the Filter its
    // placeholders kept inexact, and the columns that Filter read (a key
    // range's every key column, decoded at every row for nothing).
    let Some((read, columns)) = shown_columns(shape.scan.projection.as_deref(), &shape.columns)
    else {
        return Ok(None);
    };
    let Some(exec) = shape.table.exact_scan(
        session.state.as_ref(),
        Some(&read),
        &filters,
        shape.scan.fetch,
    )?
    else {
        return Ok(None);
    };
    let stream = exec.clone().execute(0, session.task.clone())?;
    if columns.iter().copied().eq(0..read.len()) {
        return Ok(Some((stream, exec)));
    }
    let schema = Arc::new(stream.schema().project(&columns)?);
    let projected = stream.map(move |batch| batch.and_then(|b| Ok(b.project(&columns)?)));
    let stream: SendableRecordBatchStream =
        Box::pin(RecordBatchStreamAdapter::new(schema, projected));
    Ok(Some((stream, exec)))
}

/// The table's columns to read for output `columns` (positions in the
/// scan's `projection`, all the table's for `None`), each once, and the
/// output's positions among them; `None` for a column past the projection.
fn shown_columns(
    projection: Option<&[usize]>,
    columns: &[usize],
) -> Option<(Vec<usize>, Vec<usize>)> {
    let mut read: Vec<usize> = Vec::new();
    let positions = columns
        .iter()
        .map(|&c| {
            let column = match projection {
                Some(p) => *p.get(c)?,
                None => c,
            };
            Some(match read.iter().position(|&r| r == column) {
                Some(at) => at,
                None => {
                    read.push(column);
                    read.len() - 1
                }
            })
        })
        .collect::<Option<_>>()?;
    Some((read, positions))
}

#[cfg(test)]
mod tests {
    use super::shown_columns;

    #[test]
    fn an_exact_scan_reads_each_shown_column_once_and_no_other() {
        // `SELECT name FROM t WHERE e = $1 AND bib > $2`: the scan had read
        // e, bib and name for the Filter above it.
        assert_eq!(
            shown_columns(Some(&[0, 1, 3]), &[2]),
            Some((vec![3], vec![0]))
        );
        // Repeated and reordered.
        assert_eq!(
            shown_columns(Some(&[0, 1, 3]), &[2, 0, 2]),
            Some((vec![3, 0], vec![0, 1, 0]))
        );
        // No projection: positions are the table's.
        assert_eq!(shown_columns(None, &[1, 0]), Some((vec![1, 0], vec![0, 1])));
        assert_eq!(shown_columns(None, &[]), Some((vec![], vec![])));
        assert_eq!(shown_columns(Some(&[0]), &[1]), None);
    }
}
