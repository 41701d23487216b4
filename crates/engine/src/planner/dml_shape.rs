//! Rules that keep DELETE and UPDATE to what a table provider can answer.
//! DataFusion hands `delete_from` and `update` only the filters that sit on
//! the target table's scan, so a choice of rows made any other way would be
//! lost and the statement would touch every row. A statement whose text
//! shows such a choice (a subquery, `UPDATE ... FROM`) is planned as the
//! query it implies instead (`dml_query.rs`); these rules guard the rest:
//! - `DmlShape` (analyzer) refuses rows chosen by a subquery or a join
//!   that still reach the provider's path;
//! - `EmptyDml` (optimizer, last) answers `count = 0` for a statement whose
//!   WHERE the optimizer found always false or NULL (`WHERE club = NULL`,
//!   `WHERE 1 = 0`): it replaces the scan with an empty relation, and no
//!   filter is left to hand over.

use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::Transformed;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::datasource::DefaultTableSource;
use datafusion::error::{DataFusionError, Result};
use datafusion::logical_expr::{DmlStatement, LogicalPlan, LogicalPlanBuilder, WriteOp, lit};
use datafusion::optimizer::{AnalyzerRule, OptimizerConfig, OptimizerRule};

use super::StoreTable;

/// Refuses DELETE and UPDATE whose rows are not chosen by filters on the
/// target table alone.
#[derive(Debug, Default)]
pub struct DmlShape;

impl AnalyzerRule for DmlShape {
    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        let mut bad: Option<String> = None;
        plan.apply(|node| {
            if let LogicalPlan::Dml(DmlStatement {
                op: op @ (WriteOp::Delete | WriteOp::Update),
                input,
                ..
            }) = node
            {
                let op = if matches!(op, WriteOp::Delete) {
                    "DELETE"
                } else {
                    "UPDATE"
                };
                bad = refusal(input.as_ref())?.map(|what| format!("{op} with {what}"));
            }
            Ok(if bad.is_some() {
                TreeNodeRecursion::Stop
            } else {
                TreeNodeRecursion::Continue
            })
        })?;
        match bad {
            Some(what) => Err(DataFusionError::NotImplemented(format!(
                "{what} is not supported: the rows of a DELETE or UPDATE are chosen by conditions on the table's own columns"
            ))),
            None => Ok(plan),
        }
    }

    fn name(&self) -> &str {
        "dml_shape"
    }
}

/// What in a DML input the provider could not honour, if anything. A walk
/// that fails is an error, never a pass: this check guards what a write
/// may touch.
fn refusal(input: &LogicalPlan) -> Result<Option<&'static str>> {
    let mut found = None;
    input.apply(|node| {
        let mut subquery = false;
        node.apply_subqueries(|_| {
            subquery = true;
            Ok(TreeNodeRecursion::Stop)
        })?;
        found = match node {
            _ if subquery => Some("a subquery"),
            LogicalPlan::Projection(_)
            | LogicalPlan::Filter(_)
            | LogicalPlan::TableScan(_)
            | LogicalPlan::SubqueryAlias(_) => None,
            LogicalPlan::Limit(_) => Some("LIMIT"),
            LogicalPlan::Sort(_) => Some("ORDER BY"),
            _ => Some("a join or another table (FROM, USING)"),
        };
        Ok(if found.is_some() {
            TreeNodeRecursion::Stop
        } else {
            TreeNodeRecursion::Continue
        })
    })?;
    Ok(found)
}

/// Replaces a DELETE or UPDATE whose input no longer scans its table (the
/// optimizer proved the WHERE never true) with its answer: no rows.
#[derive(Debug, Default)]
pub struct EmptyDml;

impl OptimizerRule for EmptyDml {
    fn name(&self) -> &str {
        "empty_dml"
    }

    fn rewrite(
        &self,
        plan: LogicalPlan,
        _config: &dyn OptimizerConfig,
    ) -> Result<Transformed<LogicalPlan>> {
        plan.transform_down(|node| {
            let LogicalPlan::Dml(DmlStatement {
                target,
                op: WriteOp::Delete | WriteOp::Update,
                input,
                ..
            }) = &node
            else {
                return Ok(Transformed::no(node));
            };
            // Only our tables, and only where the optimizer left an empty
            // relation and no scan at all (a view, say, is left alone: its
            // own DELETE refuses).
            let ours = target
                .downcast_ref::<DefaultTableSource>()
                .is_some_and(|s| s.table_provider.is::<StoreTable>());
            let (mut scans, mut empty) = (false, false);
            input.apply(|n| {
                match n {
                    LogicalPlan::TableScan(_) => scans = true,
                    LogicalPlan::EmptyRelation(e) if !e.produce_one_row => empty = true,
                    _ => {}
                }
                Ok(TreeNodeRecursion::Continue)
            })?;
            if !ours || scans || !empty {
                return Ok(Transformed::no(node));
            }
            let none = LogicalPlanBuilder::empty(true)
                .project(vec![lit(0u64).alias("count")])?
                .build()?;
            Ok(Transformed::new(none, true, TreeNodeRecursion::Jump))
        })
    }
}
