//! The walk the analyzer rules share: every expression of every node, the
//! subqueries' plans included, rewritten bottom up, each keeping the name
//! the nodes above know it by.

use datafusion::common::DFSchema;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::error::Result;
use datafusion::logical_expr::expr_rewriter::NamePreserver;
use datafusion::logical_expr::utils::merge_schema;
use datafusion::logical_expr::{Expr, LogicalPlan};

/// `plan` with `f` applied to every expression (bottom up) that `touches`
/// says it may change, given the schema of the node's inputs. Others are
/// left alone without computing their names, which costs string building
/// on every query. A changed node's schema is computed anew (an expression
/// may change type, not name).
pub fn rewrite_named(
    plan: LogicalPlan,
    touches: impl Fn(&Expr) -> bool,
    mut f: impl FnMut(Expr, &DFSchema) -> Result<Transformed<Expr>>,
) -> Result<LogicalPlan> {
    plan.transform_up_with_subqueries(|node| {
        if !node
            .expressions()
            .iter()
            .any(|e| e.exists(|e| Ok(touches(e))).unwrap_or(true))
        {
            return Ok(Transformed::no(node));
        }
        let schema = merge_schema(&node.inputs());
        let names = NamePreserver::new(&node);
        let node = node.map_expressions(|e| {
            if !e.exists(|e| Ok(touches(e))).unwrap_or(true) {
                return Ok(Transformed::no(e));
            }
            let name = names.save(&e);
            let rewritten = e.transform_up(|e| f(e, &schema))?;
            Ok(rewritten.update_data(|e| name.restore(e)))
        })?;
        if node.transformed {
            node.map_data(LogicalPlan::recompute_schema)
        } else {
            Ok(node)
        }
    })
    .map(|t| t.data)
}

/// Whether an expression is a subquery.
pub fn is_subquery(e: &Expr) -> bool {
    matches!(
        e,
        Expr::ScalarSubquery(_) | Expr::Exists(_) | Expr::InSubquery(_) | Expr::SetComparison(_)
    )
}

/// Whether a plan holds a subquery anywhere: the subquery rules have
/// nothing to do otherwise, and skip the walk.
pub fn has_subquery(plan: &LogicalPlan) -> bool {
    let mut found = false;
    let _ = plan.apply(|node| {
        node.apply_expressions(|e| {
            e.apply(|e| {
                found |= is_subquery(e);
                Ok(if found {
                    TreeNodeRecursion::Stop
                } else {
                    TreeNodeRecursion::Continue
                })
            })
        })
    });
    found
}
