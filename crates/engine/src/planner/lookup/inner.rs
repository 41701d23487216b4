//! The inner side of a would-be lookup join: a scan of a store table under
//! projections, filters and aggregates grouped by the join's keys only
//! (what one batch of keys may be read through again), and the scan's
//! columns the join's keys name. Anything else between the join and the
//! scan (a LIMIT, another join, an aggregate over other groups) makes the
//! rows read by key differ from the rows the join saw, so the join stays a
//! hash join.

use std::sync::Arc;

use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::aggregates::AggregateExec;
use datafusion::physical_plan::coop::CooperativeExec;
use datafusion::physical_plan::execution_plan::{ChildrenPropertiesMode, ReplaceChildrenOptions};
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::repartition::RepartitionExec;

use crate::exec::PartitionScanExec;
use crate::exec::read::access::AccessPath;
use crate::exec::read::global::GlobalIndexExec;
use crate::exec::read::rescan::Rescan;

/// The scan under an inner side, and what the join's keys are of it.
#[derive(Debug, Clone)]
pub struct InnerScan {
    /// The planner's handle to read the scan's table again.
    pub rescan: Arc<dyn Rescan>,
    /// The scan's columns the join keys are, in key order.
    pub columns: Vec<String>,
    /// The storage table, for EXPLAIN.
    pub table: String,
    /// The path the scan takes as planned (for its estimate).
    pub path: AccessPath,
}

/// The scan under `plan` whose columns `keys` (expressions over `plan`'s
/// output) are, if `plan` is such a chain and every key a plain column.
pub fn trace(plan: &Arc<dyn ExecutionPlan>, keys: &[Arc<dyn PhysicalExpr>]) -> Option<InnerScan> {
    let mut at: Vec<usize> = keys
        .iter()
        .map(|k| k.downcast_ref::<Column>().map(Column::index))
        .collect::<Option<_>>()?;
    let mut node = plan.clone();
    loop {
        if let Some(p) = node.downcast_ref::<ProjectionExec>() {
            let exprs = p.expr();
            for i in at.iter_mut() {
                let e = exprs.get(*i)?;
                *i = e.expr.downcast_ref::<Column>()?.index();
            }
            node = p.input().clone();
        } else if let Some(f) = node.downcast_ref::<FilterExec>() {
            if let Some(projection) = f.projection() {
                for i in at.iter_mut() {
                    *i = *projection.get(*i)?;
                }
            }
            node = f.input().clone();
        } else if let Some(a) = node.downcast_ref::<AggregateExec>() {
            // Groups keyed by the join columns (a correlated scalar
            // subquery's): the rows of a batch's keys make exactly the
            // groups of those keys.
            let group = a.group_expr();
            if !group.is_single() {
                return None;
            }
            for i in at.iter_mut() {
                let (e, _) = group.expr().get(*i)?;
                *i = e.downcast_ref::<Column>()?.index();
            }
            node = a.input().clone();
        } else if node.is::<RepartitionExec>() || node.is::<CooperativeExec>() {
            node = node.children().first().map(|c| (*c).clone())?;
        } else if let Some(scan) = node.downcast_ref::<PartitionScanExec>() {
            if scan.limit().is_some() {
                return None;
            }
            return found(
                &node,
                scan.rescan()?,
                &at,
                scan.table().as_str(),
                scan.path(),
            );
        } else if let Some(read) = node.downcast_ref::<GlobalIndexExec>() {
            if read.limit().is_some() {
                return None;
            }
            return found(
                &node,
                read.rescan()?,
                &at,
                read.table().as_str(),
                read.path(),
            );
        } else {
            return None;
        }
    }
}

fn found(
    scan: &Arc<dyn ExecutionPlan>,
    rescan: &Arc<dyn Rescan>,
    at: &[usize],
    table: &str,
    path: &AccessPath,
) -> Option<InnerScan> {
    let schema = scan.schema();
    let columns = at
        .iter()
        .map(|i| (*i < schema.fields().len()).then(|| schema.field(*i).name().clone()))
        .collect::<Option<Vec<_>>>()?;
    Some(InnerScan {
        rescan: rescan.clone(),
        columns,
        table: table.to_owned(),
        path: path.clone(),
    })
}

/// `plan` with the scan at its bottom replaced by `scan` (the chain
/// `trace` accepted: one input per node).
pub fn with_scan(
    plan: &Arc<dyn ExecutionPlan>,
    scan: Arc<dyn ExecutionPlan>,
) -> datafusion::error::Result<Arc<dyn ExecutionPlan>> {
    match plan.children().first() {
        None => Ok(scan),
        Some(child) => {
            let below = with_scan(child, scan)?;
            plan.clone().replace_children(
                vec![below],
                ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute),
            )
        }
    }
}
