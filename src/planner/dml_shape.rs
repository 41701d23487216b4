//! `DmlShape`: an analyzer rule that keeps DELETE and UPDATE to what a table
//! provider can answer. DataFusion hands `delete_from` and `update` only the
//! filters that sit on the target table; a row choice made by a subquery or a
//! join (`WHERE bib IN (SELECT ...)`, `UPDATE ... FROM`) would be dropped and
//! the statement would touch every row. Such statements are refused instead.

use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::error::{DataFusionError, Result};
use datafusion::logical_expr::{DmlStatement, Expr, LogicalPlan, WriteOp};
use datafusion::optimizer::AnalyzerRule;

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
                let op = if matches!(op, WriteOp::Delete) { "DELETE" } else { "UPDATE" };
                bad = refusal(input.as_ref()).map(|what| format!("{op} with {what}"));
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

/// What in a DML input the provider could not honour, if anything.
fn refusal(input: &LogicalPlan) -> Option<&'static str> {
    let mut found = None;
    let _ = input.apply(|node| {
        found = match node {
            LogicalPlan::Projection(_)
            | LogicalPlan::Filter(_)
            | LogicalPlan::TableScan(_)
            | LogicalPlan::SubqueryAlias(_) => {
                let subquery = node.expressions().iter().any(|e| {
                    e.exists(|x| {
                        Ok(matches!(
                            x,
                            Expr::ScalarSubquery(_) | Expr::InSubquery(_) | Expr::Exists(_)
                        ))
                    })
                    .unwrap_or(true)
                });
                subquery.then_some("a subquery")
            }
            _ => Some("a join or another table (FROM, USING)"),
        };
        Ok(if found.is_some() {
            TreeNodeRecursion::Stop
        } else {
            TreeNodeRecursion::Continue
        })
    });
    found
}
