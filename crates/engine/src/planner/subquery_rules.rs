//! Analyzer rules that keep DataFusion 55's subquery rewrites from
//! changing an answer. They run before the optimizer and rewrite the plan
//! into an equivalent one those rules handle correctly; the last refuses,
//! as not implemented, a subquery still left where DataFusion cannot run
//! it ([`RefuseUnrunnableSubqueries`]).

use std::sync::Arc;

use datafusion::common::ExprSchema;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::error::{DataFusionError, Result};
use datafusion::logical_expr::AggregateUDF;
use datafusion::logical_expr::expr::{Exists, InSubquery, SetComparison};
use datafusion::logical_expr::{
    BinaryExpr, Expr, Filter, LogicalPlan, LogicalPlanBuilder, Operator, Projection, Subquery,
    check_subquery_expr, col,
};
use datafusion::optimizer::AnalyzerRule;

use super::rewrite::{has_subquery, is_subquery, rewrite_named};
use crate::exec::ops::single_value::SingleValue;

/// Refuses, as not implemented (0A000), a plan with a subquery that
/// DataFusion cannot run where it stands after the rules before this one
/// (a correlated scalar subquery in an ORDER BY, a window or a join
/// condition). DataFusion's analyzer would refuse the same plan next, with
/// its own check ([`check_subquery_expr`]), as a `Plan` error that only
/// its text tells from a mistake in the SQL (42601); asked here, last of
/// the analyzer rules and on the same plan, the check's verdict is told by
/// where it came from. The statement is valid SQL that PostgreSQL runs.
#[derive(Debug, Default)]
pub struct RefuseUnrunnableSubqueries;

impl AnalyzerRule for RefuseUnrunnableSubqueries {
    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        if !has_subquery(&plan) {
            return Ok(plan);
        }
        plan.apply_with_subqueries(|node| {
            node.apply_expressions(|expr| {
                expr.apply(|e| {
                    if let Expr::Exists(Exists { subquery, .. })
                    | Expr::InSubquery(InSubquery { subquery, .. })
                    | Expr::SetComparison(SetComparison { subquery, .. })
                    | Expr::ScalarSubquery(subquery) = e
                    {
                        check_subquery_expr(node, &subquery.subquery, e).map_err(
                            |err| match err {
                                DataFusionError::Plan(why) => DataFusionError::NotImplemented(why),
                                other => other,
                            },
                        )?;
                    }
                    Ok(TreeNodeRecursion::Continue)
                })
            })
        })?;
        Ok(plan)
    }

    fn name(&self) -> &str {
        "refuse_unrunnable_subqueries"
    }
}

/// Names every SELECT-list expression that holds a quantified comparison
/// (`v = ANY (SELECT ...)`) by its own name, before the optimizer runs.
/// DataFusion's `rewrite_set_comparison` turns such an expression into a
/// CASE over EXISTS and so renames an unnamed column, which a later rule's
/// schema check rejects as an internal error; under an alias the name stays.
#[derive(Debug, Default)]
pub struct NameSetComparisons;

impl AnalyzerRule for NameSetComparisons {
    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        if !has_subquery(&plan) {
            return Ok(plan);
        }
        plan.transform_up_with_subqueries(|node| match node {
            LogicalPlan::Projection(p) if p.expr.iter().any(holds_set_comparison) => {
                let exprs = p
                    .expr
                    .iter()
                    .enumerate()
                    .map(|(i, e)| match e {
                        Expr::Alias(_) => e.clone(),
                        _ if holds_set_comparison(e) => {
                            let (qualifier, field) = p.schema.qualified_field(i);
                            e.clone().alias_qualified(qualifier.cloned(), field.name())
                        }
                        _ => e.clone(),
                    })
                    .collect();
                Ok(Transformed::yes(LogicalPlan::Projection(
                    Projection::try_new_with_schema(exprs, p.input, p.schema)?,
                )))
            }
            other => Ok(Transformed::no(other)),
        })
        .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "name_set_comparisons"
    }
}

fn holds_set_comparison(e: &Expr) -> bool {
    e.exists(|e| Ok(matches!(e, Expr::SetComparison(_))))
        .unwrap_or(false)
}

/// Rewrites a correlated `x NOT IN (SELECT y FROM s WHERE c)` reached from
/// the root of a WHERE or HAVING through AND and OR alone into
/// `NOT EXISTS (SELECT 1 FROM s WHERE c AND (y = x OR y IS NULL OR x IS NULL))`.
/// The two keep the same rows (NOT IN is true exactly when no row of the
/// correlated set equals `x` or is NULL, and `x` is not NULL or the set is
/// empty): where only AND and OR lie above it, NULL and false decide the
/// same. DataFusion plans the first as a null-aware anti join (or a mark
/// join under OR) that counts a NULL `y` even when its row fails `c`, and so
/// drops rows PostgreSQL keeps.
#[derive(Debug, Default)]
pub struct CorrelatedNotIn;

impl AnalyzerRule for CorrelatedNotIn {
    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        if !has_subquery(&plan) {
            return Ok(plan);
        }
        plan.transform_up_with_subqueries(|node| match node {
            LogicalPlan::Filter(f) => {
                let predicate = rewrite_not_in(f.predicate, f.input.schema())?;
                Ok(Transformed::new_transformed(
                    LogicalPlan::Filter(Filter::try_new(predicate.data, f.input)?),
                    predicate.transformed,
                ))
            }
            other => Ok(Transformed::no(other)),
        })
        .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "correlated_not_in"
    }
}

fn rewrite_not_in(e: Expr, outer: &datafusion::common::DFSchemaRef) -> Result<Transformed<Expr>> {
    match e {
        Expr::BinaryExpr(BinaryExpr { left, op, right })
            if matches!(op, Operator::And | Operator::Or) =>
        {
            let l = rewrite_not_in(*left, outer)?;
            let r = rewrite_not_in(*right, outer)?;
            let changed = l.transformed || r.transformed;
            Ok(Transformed::new_transformed(
                Expr::BinaryExpr(BinaryExpr::new(Box::new(l.data), op, Box::new(r.data))),
                changed,
            ))
        }
        Expr::InSubquery(InSubquery {
            expr,
            subquery,
            negated: true,
        }) if !subquery.outer_ref_columns.is_empty() => {
            Ok(Transformed::yes(not_exists(*expr, subquery, outer)?))
        }
        other => Ok(Transformed::no(other)),
    }
}

fn not_exists(
    probe: Expr,
    subquery: Subquery,
    outer: &datafusion::common::DFSchemaRef,
) -> Result<Expr> {
    // The probe moves into the subquery, where its columns are outer references.
    let probe = probe
        .transform_up(|e| match e {
            Expr::Column(c) => {
                let field = outer.field_from_column(&c)?;
                Ok(Transformed::yes(Expr::OuterReferenceColumn(
                    field.clone(),
                    c,
                )))
            }
            other => Ok(Transformed::no(other)),
        })?
        .data;
    let plan = subquery.subquery.as_ref().clone();
    let y = match plan.schema().columns().first() {
        Some(c) => col(c.clone()),
        None => {
            return Ok(Expr::InSubquery(InSubquery::new(
                Box::new(probe),
                subquery,
                true,
            )));
        }
    };
    let matches = y
        .clone()
        .eq(probe.clone())
        .or(y.is_null())
        .or(probe.clone().is_null());
    let plan = LogicalPlanBuilder::from(plan).filter(matches)?.build()?;
    let mut outer_ref_columns = subquery.outer_ref_columns;
    probe.apply(|e| {
        if matches!(e, Expr::OuterReferenceColumn(..)) && !outer_ref_columns.contains(e) {
            outer_ref_columns.push(e.clone());
        }
        Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
    })?;
    Ok(Expr::Exists(Exists::new(
        Subquery {
            subquery: Arc::new(plan),
            outer_ref_columns,
            spans: subquery.spans,
        },
        true,
    )))
}

/// Puts `single_value` over every scalar subquery that is not an aggregate
/// without GROUP BY (`(SELECT x.b FROM t x WHERE x.k = t.k)`). SQL takes
/// such a subquery and fails only when an outer row meets two rows, with
/// NULL for none. DataFusion refuses to plan a correlated one ("must be
/// aggregated"), and answers an uncorrelated one that finds no row with an
/// error (its column keeps the inner column's NOT NULL). Under
/// `single_value` it plans (as a join where the correlation is by equality,
/// per outer row otherwise) and keeps SQL's meaning.
#[derive(Debug)]
pub struct AggregateScalarSubqueries {
    single_value: Arc<AggregateUDF>,
}

impl Default for AggregateScalarSubqueries {
    fn default() -> Self {
        Self {
            single_value: Arc::new(AggregateUDF::from(SingleValue::default())),
        }
    }
}

impl AnalyzerRule for AggregateScalarSubqueries {
    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        if !has_subquery(&plan) {
            return Ok(plan);
        }
        // A subquery's column in a SELECT list is named after the
        // subquery's own column; `rewrite_named` keeps that name.
        rewrite_named(plan, is_subquery, |e, _| match e {
            Expr::ScalarSubquery(s) if !one_aggregate_row(&s.subquery) => {
                Ok(Transformed::yes(Expr::ScalarSubquery(Subquery {
                    subquery: Arc::new(self.single(s.subquery.as_ref().clone())?),
                    ..s
                })))
            }
            other => Ok(Transformed::no(other)),
        })
    }

    fn name(&self) -> &str {
        "aggregate_scalar_subqueries"
    }
}

impl AggregateScalarSubqueries {
    /// `SELECT single_value(v) FROM (plan)`. The column keeps the
    /// aggregate's own name: a decorrelated subquery's columns join the
    /// outer query's, where `v` could be ambiguous.
    fn single(&self, plan: LogicalPlan) -> Result<LogicalPlan> {
        let (qualifier, field) = plan.schema().qualified_field(0);
        let value = Expr::Column(datafusion::common::Column::new(
            qualifier.cloned(),
            field.name(),
        ));
        LogicalPlanBuilder::from(plan)
            .aggregate(
                Vec::<Expr>::new(),
                vec![self.single_value.call(vec![value])],
            )?
            .build()
    }
}

/// Whether a subquery is aggregates without GROUP BY (under projections,
/// aliases and a HAVING): exactly one row, nothing to add.
fn one_aggregate_row(plan: &LogicalPlan) -> bool {
    match plan {
        LogicalPlan::Projection(p) => one_aggregate_row(&p.input),
        LogicalPlan::SubqueryAlias(a) => one_aggregate_row(&a.input),
        LogicalPlan::Filter(f) => {
            matches!(f.input.as_ref(), LogicalPlan::Aggregate(_)) && one_aggregate_row(&f.input)
        }
        LogicalPlan::Aggregate(a) => a.group_expr.is_empty() && !a.aggr_expr.is_empty(),
        _ => false,
    }
}

/// Names the column of a scalar, `IN` or `ANY`/`ALL` subquery when type
/// coercion has cast it (`SELECT CAST(x.b AS BIGINT)`): a cast keeps its
/// column's name, so when DataFusion's decorrelation adds the column itself
/// beside it (for a correlation on `x.b`) the two names collide and the
/// query fails. Under its own name the cast no longer collides.
#[derive(Debug, Default)]
pub struct NameComparedValues;

impl AnalyzerRule for NameComparedValues {
    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        if !has_subquery(&plan) {
            return Ok(plan);
        }
        rewrite_named(plan, is_subquery, |e, _| match e {
            Expr::ScalarSubquery(s) => Ok(name_cast(s)?.update_data(Expr::ScalarSubquery)),
            Expr::InSubquery(InSubquery {
                expr,
                subquery,
                negated,
            }) => Ok(name_cast(subquery)?.update_data(|subquery| {
                Expr::InSubquery(InSubquery::new(expr, subquery, negated))
            })),
            Expr::SetComparison(s) => {
                let subquery = name_cast(s.subquery.clone())?;
                Ok(subquery
                    .update_data(|subquery| Expr::SetComparison(SetComparison { subquery, ..s })))
            }
            other => Ok(Transformed::no(other)),
        })
    }

    fn name(&self) -> &str {
        "name_compared_values"
    }
}

/// The subquery with its one cast column aliased `__compared`.
fn name_cast(subquery: Subquery) -> Result<Transformed<Subquery>> {
    let LogicalPlan::Projection(p) = subquery.subquery.as_ref() else {
        return Ok(Transformed::no(subquery));
    };
    let [Expr::Cast(_) | Expr::TryCast(_)] = p.expr.as_slice() else {
        return Ok(Transformed::no(subquery));
    };
    let exprs = vec![p.expr[0].clone().alias("__compared")];
    let projection = Projection::try_new(exprs, p.input.clone())?;
    Ok(Transformed::yes(Subquery {
        subquery: Arc::new(LogicalPlan::Projection(projection)),
        ..subquery
    }))
}
