//! Subqueries DataFusion cannot turn into joins (a scalar subquery
//! correlated by `<`, an `EXISTS` under `OR`, a subquery in a CASE): its
//! physical planner cannot run them. This rewrite moves each one out of its
//! Projection or Filter into an [`ApplyNode`] below it, which adds the
//! subquery's value as a column (evaluated per distinct outer values by
//! `SubqueryApplyExec`), and leaves a reference to that column in its place.
//!
//! It runs as an optimizer rule around DataFusion's decorrelation rules
//! ([`ExtractSubqueries`]), before projection pruning, so that the outer
//! columns a subquery reads are expressions of the node and stay in its
//! input. The physical planner applies the same rewrite to whatever is left
//! ([`plan_subqueries`]) and refuses, with 0A000, a subquery it cannot place.

use std::sync::Arc;

use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{Column, DFSchema};
use datafusion::error::{DataFusionError, Result};
use datafusion::logical_expr::expr::{Exists, InSubquery};
use datafusion::logical_expr::expr_rewriter::NamePreserver;
use datafusion::logical_expr::{
    Aggregate, Expr, Extension, Filter, LogicalPlan, Projection, Subquery,
};
use datafusion::optimizer::{ApplyOrder, OptimizerConfig, OptimizerRule};

pub use super::apply_node::{ApplyNode, LogicalApply};
use crate::exec::ops::apply::ApplyKind;

/// The optimizer rule, on every node of the plan and of its subqueries.
/// `Deep` runs before DataFusion's decorrelation rules and takes only the
/// subqueries whose own subqueries read the outer query (`t` in
/// `EXISTS (SELECT .. x WHERE .. EXISTS (SELECT .. WHERE y.b < t.b))`),
/// which those rules fail on ("No field named t.b"): evaluated per outer
/// value, the inner one then reads a literal. `Rest` runs after them and
/// takes what they left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExtractSubqueries {
    /// Before decorrelation: the subqueries that read past their scope.
    Deep,
    /// After decorrelation: the rest.
    Rest,
}

impl OptimizerRule for ExtractSubqueries {
    fn name(&self) -> &str {
        match self {
            ExtractSubqueries::Deep => "extract_deep_subqueries",
            ExtractSubqueries::Rest => "extract_subqueries",
        }
    }

    fn apply_order(&self) -> Option<ApplyOrder> {
        Some(ApplyOrder::BottomUp)
    }

    fn supports_rewrite(&self) -> bool {
        true
    }

    fn rewrite(
        &self,
        plan: LogicalPlan,
        config: &dyn OptimizerConfig,
    ) -> Result<Transformed<LogicalPlan>> {
        let generator = config.alias_generator().clone();
        let mut names = || generator.next("__subquery");
        let mode = match self {
            ExtractSubqueries::Deep => Mode::Deep,
            ExtractSubqueries::Rest => Mode::Optimizer,
        };
        rewrite_node(
            plan,
            &mut Extractor {
                names: &mut names,
                mode,
            },
        )
    }
}

/// Whether a subquery holds a subquery that reads past it, into the query
/// around it: a column its own scope at that place does not have.
fn reaches_past(subquery: &Subquery) -> bool {
    let mut found = false;
    let _ = subquery.subquery.apply(|node| {
        let scope = merge_inputs(node);
        node.apply_expressions(|e| {
            e.apply(|e| {
                if let Some(nested) = subquery_of(e) {
                    let mut columns = Vec::new();
                    let _ = nested.subquery.apply_with_subqueries(|n| {
                        n.apply_expressions(|e| {
                            e.apply(|e| {
                                if let Expr::OuterReferenceColumn(_, c) = e {
                                    columns.push(c.clone());
                                }
                                Ok(TreeNodeRecursion::Continue)
                            })
                        })
                    });
                    found |= columns.iter().any(|c| !scope.has_column(c));
                }
                Ok(TreeNodeRecursion::Continue)
            })
        })
    });
    found
}

fn subquery_of(e: &Expr) -> Option<&Subquery> {
    match e {
        Expr::ScalarSubquery(s) => Some(s),
        Expr::Exists(Exists { subquery, .. }) | Expr::InSubquery(InSubquery { subquery, .. }) => {
            Some(subquery)
        }
        Expr::SetComparison(s) => Some(&s.subquery),
        _ => None,
    }
}

/// Whether a plan holds a subquery DataFusion's physical planner cannot
/// run outside an [`ApplyNode`]: anything but an uncorrelated scalar
/// subquery, at any depth.
pub fn needs_apply(plan: &LogicalPlan) -> bool {
    let mut found = false;
    let _ = plan.apply(|node| {
        if matches!(node, LogicalPlan::Extension(_)) {
            // An ApplyNode carries its subqueries; the apply plans them.
            return Ok(TreeNodeRecursion::Continue);
        }
        node.apply_expressions(|e| {
            e.apply(|e| {
                found |= match e {
                    Expr::ScalarSubquery(s) => {
                        !s.outer_ref_columns.is_empty() || needs_apply(&s.subquery)
                    }
                    Expr::Exists(_) | Expr::InSubquery(_) | Expr::SetComparison(_) => true,
                    _ => false,
                };
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

/// The physical planner's pass over what the optimizer left: the same
/// rewrite, into uncorrelated subqueries too, and an error for a subquery
/// in a node other than a Projection or a Filter.
pub fn plan_subqueries(plan: LogicalPlan) -> Result<LogicalPlan> {
    let mut next = 0;
    let mut names = || {
        next += 1;
        format!("__apply_{next}")
    };
    let mut extractor = Extractor {
        names: &mut names,
        mode: Mode::Physical,
    };
    plan.transform_up(|node| rewrite_node(node, &mut extractor))
        .map(|t| t.data)
}

/// Which pass a rewrite is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Before decorrelation: subqueries that [`reaches_past`] only.
    Deep,
    /// After decorrelation: every subquery left but uncorrelated scalar ones.
    Optimizer,
    /// The physical planner's: also inside uncorrelated scalar subqueries
    /// (the optimizer reaches those itself), and an error for a subquery it
    /// cannot place.
    Physical,
}

/// A rewrite in progress: how it names the columns it adds, and its pass.
struct Extractor<'a> {
    names: &'a mut dyn FnMut() -> String,
    mode: Mode,
}

/// One node.
fn rewrite_node(node: LogicalPlan, x: &mut Extractor) -> Result<Transformed<LogicalPlan>> {
    match node {
        LogicalPlan::Projection(p) => rewrite_projection(p, x),
        LogicalPlan::Filter(f) => rewrite_filter(f, x),
        LogicalPlan::Aggregate(a) => rewrite_aggregate(a, x),
        LogicalPlan::Extension(_) => Ok(Transformed::no(node)),
        other if x.mode == Mode::Physical => {
            let schema = merge_inputs(&other);
            let mut applies = Vec::new();
            let other = other.map_expressions(|e| take_subqueries(e, &schema, &mut applies, x))?;
            match applies.first() {
                Some(s) => Err(DataFusionError::NotImplemented(format!(
                    "a correlated {} subquery in {} (tablesql evaluates them in SELECT lists, WHERE and HAVING)",
                    s.kind,
                    other.data.display()
                ))),
                None => Ok(other),
            }
        }
        other => Ok(Transformed::no(other)),
    }
}

fn merge_inputs(node: &LogicalPlan) -> DFSchema {
    datafusion::logical_expr::utils::merge_schema(&node.inputs())
}

fn rewrite_projection(p: Projection, x: &mut Extractor) -> Result<Transformed<LogicalPlan>> {
    let mut applies = Vec::new();
    let mut exprs = Vec::with_capacity(p.expr.len());
    let mut changed = false;
    for (i, e) in p.expr.iter().enumerate() {
        let new = take_subqueries(e.clone(), p.input.schema(), &mut applies, x)?;
        changed |= new.transformed;
        exprs.push(if new.transformed {
            // The column keeps the name the subquery gave it.
            let (qualifier, field) = p.schema.qualified_field(i);
            new.data
                .unalias()
                .alias_qualified(qualifier.cloned(), field.name())
        } else {
            new.data
        });
    }
    if !changed {
        return Ok(Transformed::no(LogicalPlan::Projection(p)));
    }
    if applies.is_empty() {
        let projection = Projection::try_new_with_schema(exprs, p.input, p.schema)?;
        return Ok(Transformed::yes(LogicalPlan::Projection(projection)));
    }
    let input = apply(p.input, applies)?;
    Ok(Transformed::yes(LogicalPlan::Projection(
        Projection::try_new(exprs, input)?,
    )))
}

/// An aggregate whose arguments hold subqueries (`max(x.a + (SELECT ..))`):
/// they are evaluated per input row, so the apply goes below it.
fn rewrite_aggregate(a: Aggregate, x: &mut Extractor) -> Result<Transformed<LogicalPlan>> {
    let names = NamePreserver::new_for_projection();
    let mut applies = Vec::new();
    let mut take = |exprs: &[Expr], applies: &mut Vec<LogicalApply>| {
        exprs
            .iter()
            .map(|e| {
                let name = names.save(e);
                let new = take_subqueries(e.clone(), a.input.schema(), applies, x)?;
                Ok(new.update_data(|e| name.restore(e)))
            })
            .collect::<Result<Vec<_>>>()
    };
    let group = take(&a.group_expr, &mut applies)?;
    let aggr = take(&a.aggr_expr, &mut applies)?;
    if applies.is_empty() {
        return Ok(Transformed::no(LogicalPlan::Aggregate(a)));
    }
    let input = apply(a.input, applies)?;
    let group = group.into_iter().map(|t| t.data).collect();
    let aggr = aggr.into_iter().map(|t| t.data).collect();
    Ok(Transformed::yes(LogicalPlan::Aggregate(
        Aggregate::try_new(input, group, aggr)?,
    )))
}

fn rewrite_filter(f: Filter, x: &mut Extractor) -> Result<Transformed<LogicalPlan>> {
    let mut applies = Vec::new();
    let predicate = take_subqueries(f.predicate.clone(), f.input.schema(), &mut applies, x)?;
    if !predicate.transformed {
        return Ok(Transformed::no(LogicalPlan::Filter(f)));
    }
    if applies.is_empty() {
        let filter = Filter::try_new(predicate.data, f.input)?;
        return Ok(Transformed::yes(LogicalPlan::Filter(filter)));
    }
    let columns: Vec<Expr> = f
        .input
        .schema()
        .columns()
        .into_iter()
        .map(Expr::Column)
        .collect();
    let input = apply(f.input, applies)?;
    let filter = LogicalPlan::Filter(Filter::try_new(predicate.data, input)?);
    // The added columns end here: the Filter's output is its input's.
    Ok(Transformed::yes(LogicalPlan::Projection(
        Projection::try_new(columns, Arc::new(filter))?,
    )))
}

fn apply(input: Arc<LogicalPlan>, applies: Vec<LogicalApply>) -> Result<Arc<LogicalPlan>> {
    let node = ApplyNode::try_new(input, applies)?;
    Ok(Arc::new(LogicalPlan::Extension(Extension {
        node: Arc::new(node),
    })))
}

/// `e` (over `input`) with each subquery to apply replaced by a reference
/// to the column that will hold its value; the subqueries are pushed onto
/// `applies`. An uncorrelated scalar subquery stays: DataFusion runs it once.
fn take_subqueries(
    e: Expr,
    input: &DFSchema,
    applies: &mut Vec<LogicalApply>,
    x: &mut Extractor,
) -> Result<Transformed<Expr>> {
    let mode = x.mode;
    e.transform_down(|e| {
        if mode == Mode::Deep && !subquery_of(&e).is_some_and(reaches_past) {
            return Ok(Transformed::no(e));
        }
        let mut take = |kind, subquery, probe| {
            let name = (x.names)();
            applies.push(LogicalApply::new(
                kind,
                subquery,
                probe,
                input,
                name.clone(),
            ));
            Expr::Column(Column::from_name(name))
        };
        let negate = |negated: bool, e: Expr| if negated { Expr::Not(Box::new(e)) } else { e };
        Ok(match e {
            Expr::ScalarSubquery(s) if s.outer_ref_columns.is_empty() && mode != Mode::Deep => {
                let physical = mode == Mode::Physical;
                let s = if physical {
                    let plan = plan_subqueries(s.subquery.as_ref().clone())?;
                    Subquery {
                        subquery: Arc::new(plan),
                        ..s
                    }
                } else {
                    s
                };
                Transformed::new(Expr::ScalarSubquery(s), physical, TreeNodeRecursion::Jump)
            }
            Expr::ScalarSubquery(s) => Transformed::yes(take(ApplyKind::Scalar, s, None)),
            Expr::Exists(Exists { subquery, negated }) => {
                Transformed::yes(negate(negated, take(ApplyKind::Exists, subquery, None)))
            }
            Expr::InSubquery(InSubquery {
                expr,
                subquery,
                negated,
            }) => Transformed::yes(negate(negated, take(ApplyKind::In, subquery, Some(*expr)))),
            Expr::SetComparison(_) => {
                return Err(DataFusionError::NotImplemented(format!(
                    "the quantified comparison {e} was not rewritten"
                )));
            }
            other => Transformed::no(other),
        })
    })
}
