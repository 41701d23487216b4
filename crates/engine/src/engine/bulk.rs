//! What a bulk loader (`load::Loader`: the wire server's COPY and `tablesql
//! load`) needs of the planner and the executor, behind the engine's door:
//! the loader builds an INSERT of its rows and runs it, and for that it asks
//! three questions whose answers live in layers it must not import (DESIGN.md:
//! front ends and what they share go through the engine).

use std::sync::Arc;

use datafusion::arrow::array::{AsArray, RecordBatch};
use datafusion::arrow::datatypes::UInt64Type;
use datafusion::catalog::TableProvider;
use datafusion::error::DataFusionError;
use datafusion::execution::SessionState;
use datafusion::logical_expr::LogicalPlan;
use datafusion::sql::sqlparser::ast::OnConflict;

use crate::catalog::TableDef;

/// The qualifier of the proposed row in `ON CONFLICT ... DO UPDATE SET`.
pub use crate::planner::upsert::EXCLUDED;

/// The mapping behind a table of the `public` schema; `None` for a table
/// that is not a mapped store table (a raw storage table, an embedder's).
pub fn mapping(provider: &dyn TableProvider) -> Option<Arc<TableDef>> {
    let any: &dyn std::any::Any = provider;
    any.downcast_ref::<crate::planner::StoreTable>()
        .and_then(|t| t.layout().def.clone())
}

/// Rows a failed write committed before it failed (the partitions whose
/// entity group transactions went through); `None` if it wrote none or the
/// error is not a write's.
pub fn written_before_failure(e: &DataFusionError) -> Option<u64> {
    match e {
        DataFusionError::External(inner) => match inner.downcast_ref::<crate::exec::ExecError>() {
            Some(crate::exec::ExecError::PartlyWritten { rows, .. }) => Some(*rows),
            Some(crate::exec::ExecError::AnswersLost { written, .. }) => Some(*written),
            _ => None,
        },
        _ => None,
    }
}

/// The count a write's plan answers with (one `UInt64` row per batch),
/// summed: the rows it wrote.
pub fn rows_counted(batches: &[RecordBatch]) -> Result<u64, DataFusionError> {
    let mut rows = 0;
    for batch in batches {
        let counts = batch
            .columns()
            .first()
            .and_then(|c| c.as_primitive_opt::<UInt64Type>())
            .ok_or_else(|| DataFusionError::Internal("a write answered without a count".into()))?;
        rows += counts.iter().flatten().sum::<u64>();
    }
    Ok(rows)
}

/// The INSERT `plan` as an upsert doing what `on_conflict` says, on the
/// engine's write path (`INSERT ... ON CONFLICT`).
pub fn upsert_plan(
    state: &SessionState,
    plan: LogicalPlan,
    on_conflict: OnConflict,
) -> Result<LogicalPlan, DataFusionError> {
    crate::planner::upsert::upsert_plan(state, plan, on_conflict)
}
