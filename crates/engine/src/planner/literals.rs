//! Integer literals typed as PostgreSQL types them: `integer` where the
//! value fits 32 bits, then `bigint`. DataFusion types every integer
//! literal BIGINT, so `SELECT 81 / SUM(55)` sums a BIGINT (a NUMERIC, as
//! PostgreSQL sums BIGINTs) and divides as decimals (1.473), where
//! PostgreSQL sums an integer to a bigint and divides as integers (1). An
//! analyzer rule that runs before type coercion retypes the literals, so
//! that coercion then widens them as PostgreSQL would. `count(*)`'s
//! argument (DataFusion's `COUNT_STAR_EXPANSION`, a BIGINT 1) and a
//! LIMIT's bounds keep their type: rules and the planner look for them so.
//! So do a VALUES list's (it keeps its planned schema) and a recursive
//! CTE's (its work table does).

use datafusion::common::ScalarValue;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::error::Result;
use datafusion::logical_expr::{Expr, LogicalPlan};
use datafusion::optimizer::AnalyzerRule;

/// The rule (see the module doc).
#[derive(Debug, Default)]
pub struct IntegerLiterals;

/// A BIGINT literal that fits an integer.
fn narrow(e: &Expr) -> bool {
    matches!(e, Expr::Literal(ScalarValue::Int64(Some(v)), None) if i32::try_from(*v).is_ok())
}

/// Whether `e` holds a literal to retype, outside `count(...)`.
fn holds(e: &Expr) -> bool {
    e.exists(|e| Ok(narrow_outside_count(e))).unwrap_or(false)
}

fn narrow_outside_count(e: &Expr) -> bool {
    match e {
        Expr::AggregateFunction(a) if a.func.name() == "count" => false,
        e => narrow(e),
    }
}

/// Whether some expression of `node` (at any depth) is one `f` accepts,
/// without cloning the node's expressions (`LogicalPlan::expressions` does,
/// on every node of every plan).
fn any_expression(node: &LogicalPlan, f: impl Fn(&Expr) -> bool) -> bool {
    let mut found = false;
    let _ = node.apply_expressions(|e| {
        found = e.exists(|e| Ok(f(e))).unwrap_or(true);
        Ok(if found {
            TreeNodeRecursion::Stop
        } else {
            TreeNodeRecursion::Continue
        })
    });
    found
}

fn retype(e: Expr) -> Result<Transformed<Expr>> {
    e.transform_down(|e| match e {
        // Not below a count: `count(1)` is `count(*)` to the rules.
        Expr::AggregateFunction(ref a) if a.func.name() == "count" => Ok(Transformed::new(
            e,
            false,
            datafusion::common::tree_node::TreeNodeRecursion::Jump,
        )),
        Expr::Literal(ScalarValue::Int64(Some(v)), None) => match i32::try_from(v) {
            Ok(i) => Ok(Transformed::yes(Expr::Literal(
                ScalarValue::Int32(Some(i)),
                None,
            ))),
            Err(_) => Ok(Transformed::no(Expr::Literal(
                ScalarValue::Int64(Some(v)),
                None,
            ))),
        },
        e => Ok(Transformed::no(e)),
    })
}

impl AnalyzerRule for IntegerLiterals {
    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        // A recursive CTE's work table has the types its terms were
        // planned with: retyping one term would not retype it. So do a
        // correlated subquery's outer references. Such plans are left as
        // DataFusion types them.
        let mut keep = false;
        plan.apply_with_subqueries(|n| {
            keep = matches!(n, LogicalPlan::RecursiveQuery(_))
                || any_expression(n, |e| matches!(e, Expr::OuterReferenceColumn(..)));
            Ok(if keep {
                TreeNodeRecursion::Stop
            } else {
                TreeNodeRecursion::Continue
            })
        })?;
        if keep {
            return Ok(plan);
        }
        // Once a type changed, every node after it in the walk (its
        // ancestors) computes its schema again; type coercion, which runs
        // next, then widens where types meet (a UNION, a comparison).
        let mut changed = false;
        plan.transform_up_with_subqueries(|node| {
            // A VALUES list keeps its declared schema; a LIMIT's bounds are
            // read as BIGINTs.
            let skip = matches!(node, LogicalPlan::Limit(_) | LogicalPlan::Values(_));
            if skip || !any_expression(&node, narrow_outside_count) {
                return if changed {
                    node.recompute_schema().map(Transformed::yes)
                } else {
                    Ok(Transformed::no(node))
                };
            }
            // Names stay as they were planned (`Int64(55)`): the nodes above
            // know the expressions by them.
            let names = datafusion::logical_expr::expr_rewriter::NamePreserver::new(&node);
            let node = node.map_expressions(|e| {
                if !holds(&e) {
                    return Ok(Transformed::no(e));
                }
                let name = names.save(&e);
                Ok(retype(e)?.update_data(|e| name.restore(e)))
            })?;
            changed |= node.transformed;
            if changed {
                node.map_data(LogicalPlan::recompute_schema)
            } else {
                Ok(node)
            }
        })
        .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "integer_literals"
    }
}
