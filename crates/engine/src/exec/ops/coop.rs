//! A physical optimizer rule that makes joins yield to the runtime.
//!
//! DataFusion makes leaf scans cooperative (they spend tokio's task budget),
//! but a join can produce millions of rows from one input batch without
//! polling a leaf, so an aggregate above it runs for seconds inside one poll.
//! Nothing can then interrupt it: not a cancel request, not
//! `statement_timeout`, not a client that has gone. Wrapping every node with
//! two or more inputs in `CooperativeExec` makes it spend budget per batch, so
//! the statement yields every 128 batches and a drop takes effect there.

use std::sync::Arc;

use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::error::Result;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::coop::CooperativeExec;

/// Wraps joins in [`CooperativeExec`].
#[derive(Debug, Default)]
pub struct YieldingJoins;

impl PhysicalOptimizerRule for YieldingJoins {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        plan.transform_up(|node| {
            if node.children().len() >= 2 {
                let wrapped: Arc<dyn ExecutionPlan> = Arc::new(CooperativeExec::new(node));
                Ok(Transformed::yes(wrapped))
            } else {
                Ok(Transformed::no(node))
            }
        })
        .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "YieldingJoins"
    }

    fn schema_check(&self) -> bool {
        true
    }
}
