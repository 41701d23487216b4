//! Subqueries DataFusion leaves in a plan after its decorrelation rules
//! (a scalar subquery correlated by `<`, an `EXISTS` under `OR`, a subquery
//! in a CASE), which its physical planner cannot run. This pure rewrite moves
//! each one out of its Projection or Filter into an [`ApplyNode`] below it,
//! which adds the subquery's value as a column (evaluated per distinct outer
//! values by `SubqueryApplyExec`), and leaves a reference to that column in
//! its place. Uncorrelated scalar subqueries stay DataFusion's (it runs them
//! once); their own plans are rewritten the same way.

use std::cmp::Ordering;
use std::fmt;
use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Field};
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{Column, DFSchema, DFSchemaRef};
use datafusion::error::{DataFusionError, Result};
use datafusion::logical_expr::expr::{Exists, InSubquery};
use datafusion::logical_expr::{
    Expr, Extension, Filter, LogicalPlan, Projection, Subquery, UserDefinedLogicalNodeCore,
};

use crate::exec::apply::ApplyKind;

/// One subquery an [`ApplyNode`] evaluates.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LogicalApply {
    pub kind: ApplyKind,
    pub subquery: Subquery,
    /// For `IN`: the compared value, over the node's input.
    pub probe: Option<Expr>,
    /// The name of the column it adds.
    pub name: String,
}

impl LogicalApply {
    /// The input columns the subquery reads (its outer references, nested
    /// subqueries' included), each once.
    pub fn outer_columns(&self, input: &DFSchema) -> Vec<Column> {
        let mut found: Vec<Column> = Vec::new();
        let _ = self.subquery.subquery.apply_with_subqueries(|node| {
            node.apply_expressions(|e| {
                e.apply(|e| {
                    if let Expr::OuterReferenceColumn(_, c) = e {
                        if input.has_column(c) && !found.contains(c) {
                            found.push(c.clone());
                        }
                    }
                    Ok(TreeNodeRecursion::Continue)
                })
            })
        });
        found
    }

    /// The type of the column it adds.
    pub fn data_type(&self) -> DataType {
        match self.kind {
            ApplyKind::Scalar => self
                .subquery
                .subquery
                .schema()
                .fields()
                .first()
                .map_or(DataType::Null, |f| f.data_type().clone()),
            ApplyKind::Exists | ApplyKind::In => DataType::Boolean,
        }
    }
}

/// Its input's rows, with one column more per subquery.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ApplyNode {
    pub input: Arc<LogicalPlan>,
    pub subqueries: Vec<LogicalApply>,
    schema: DFSchemaRef,
}

impl ApplyNode {
    fn try_new(input: Arc<LogicalPlan>, subqueries: Vec<LogicalApply>) -> Result<Self> {
        let added: Vec<Field> = subqueries
            .iter()
            .map(|s| Field::new(&s.name, s.data_type(), true))
            .collect();
        let added = DFSchema::from_unqualified_fields(added.into(), Default::default())?;
        let mut schema = input.schema().as_ref().clone();
        schema.merge(&added);
        Ok(Self {
            input,
            subqueries,
            schema: Arc::new(schema),
        })
    }
}

impl PartialOrd for ApplyNode {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        // Plans are ordered for DataFusion's bookkeeping only; by input is enough.
        self.input.partial_cmp(&other.input)
    }
}

impl UserDefinedLogicalNodeCore for ApplyNode {
    fn name(&self) -> &str {
        "SubqueryApply"
    }

    fn inputs(&self) -> Vec<&LogicalPlan> {
        vec![&self.input]
    }

    fn schema(&self) -> &DFSchemaRef {
        &self.schema
    }

    fn expressions(&self) -> Vec<Expr> {
        let mut exprs = Vec::new();
        for s in &self.subqueries {
            exprs.extend(
                s.outer_columns(self.input.schema())
                    .into_iter()
                    .map(Expr::Column),
            );
            exprs.extend(s.probe.clone());
        }
        exprs
    }

    fn fmt_for_explain(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "SubqueryApply:")?;
        for s in &self.subqueries {
            write!(f, " {}={}", s.name, s.kind)?;
        }
        Ok(())
    }

    fn with_exprs_and_inputs(
        &self,
        _exprs: Vec<Expr>,
        mut inputs: Vec<LogicalPlan>,
    ) -> Result<Self> {
        // The expressions are derived from the subqueries, which stay.
        match (inputs.pop(), inputs.is_empty()) {
            (Some(input), true) => Self::try_new(Arc::new(input), self.subqueries.clone()),
            _ => Err(DataFusionError::Internal(
                "SubqueryApply has one input".into(),
            )),
        }
    }
}

/// Whether a plan holds a subquery DataFusion's physical planner cannot
/// run: anything but an uncorrelated scalar subquery, at any depth.
pub fn needs_apply(plan: &LogicalPlan) -> bool {
    let mut found = false;
    let _ = plan.apply_with_subqueries(|node| {
        node.apply_expressions(|e| {
            e.apply(|e| {
                found |= match e {
                    Expr::ScalarSubquery(s) => !s.outer_ref_columns.is_empty(),
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

/// The rewrite: every subquery the physical planner cannot run moves into
/// an [`ApplyNode`] under the Projection or Filter that held it.
pub fn plan_subqueries(plan: LogicalPlan) -> Result<LogicalPlan> {
    let mut next = 0;
    plan.transform_up(|node| rewrite_node(node, &mut next))
        .map(|t| t.data)
}

fn rewrite_node(node: LogicalPlan, next: &mut usize) -> Result<Transformed<LogicalPlan>> {
    match node {
        LogicalPlan::Projection(p) => {
            let mut applies = Vec::new();
            let mut exprs = Vec::with_capacity(p.expr.len());
            let mut changed = false;
            for (i, e) in p.expr.iter().enumerate() {
                let new = take_subqueries(e.clone(), &mut applies, next)?;
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
            if applies.is_empty() {
                return Ok(Transformed::new_transformed(
                    LogicalPlan::Projection(Projection::try_new_with_schema(
                        exprs, p.input, p.schema,
                    )?),
                    changed,
                ));
            }
            let input = apply(p.input, applies)?;
            Ok(Transformed::yes(LogicalPlan::Projection(
                Projection::try_new(exprs, input)?,
            )))
        }
        LogicalPlan::Filter(f) => {
            let mut applies = Vec::new();
            let predicate = take_subqueries(f.predicate.clone(), &mut applies, next)?;
            if applies.is_empty() {
                let changed = predicate.transformed;
                let filter = Filter::try_new(predicate.data, f.input)?;
                return Ok(Transformed::new_transformed(
                    LogicalPlan::Filter(filter),
                    changed,
                ));
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
        other => {
            let mut what = None;
            let other = other.map_expressions(|e| {
                let mut applies = Vec::new();
                let new = take_subqueries(e, &mut applies, next)?;
                if !applies.is_empty() {
                    what = Some(applies[0].kind);
                }
                Ok(new)
            })?;
            match what {
                Some(kind) => Err(DataFusionError::NotImplemented(format!(
                    "a correlated {kind} subquery in {} (tablesql evaluates them in SELECT lists, WHERE and HAVING)",
                    other.data.display()
                ))),
                None => Ok(other),
            }
        }
    }
}

fn apply(input: Arc<LogicalPlan>, applies: Vec<LogicalApply>) -> Result<Arc<LogicalPlan>> {
    let node = ApplyNode::try_new(input, applies)?;
    Ok(Arc::new(LogicalPlan::Extension(Extension {
        node: Arc::new(node),
    })))
}

/// `e` with each subquery to apply replaced by a reference to the column
/// that will hold its value; the subqueries are pushed onto `applies`.
fn take_subqueries(
    e: Expr,
    applies: &mut Vec<LogicalApply>,
    next: &mut usize,
) -> Result<Transformed<Expr>> {
    e.transform_down(|e| {
        let mut take = |kind, subquery, probe| {
            *next += 1;
            let name = format!("__subquery_{next}");
            applies.push(LogicalApply {
                kind,
                subquery,
                probe,
                name: name.clone(),
            });
            Expr::Column(Column::from_name(name))
        };
        Ok(match e {
            Expr::ScalarSubquery(s) if s.outer_ref_columns.is_empty() => {
                // DataFusion runs it once; subqueries inside it are its own.
                let plan = plan_subqueries(s.subquery.as_ref().clone())?;
                Transformed::new(
                    Expr::ScalarSubquery(Subquery {
                        subquery: Arc::new(plan),
                        ..s
                    }),
                    true,
                    TreeNodeRecursion::Jump,
                )
            }
            Expr::ScalarSubquery(s) => Transformed::yes(take(ApplyKind::Scalar, s, None)),
            Expr::Exists(Exists { subquery, negated }) => {
                let column = take(ApplyKind::Exists, subquery, None);
                Transformed::yes(if negated {
                    Expr::Not(Box::new(column))
                } else {
                    column
                })
            }
            Expr::InSubquery(InSubquery {
                expr,
                subquery,
                negated,
            }) => {
                let column = take(ApplyKind::In, subquery, Some(*expr));
                Transformed::yes(if negated {
                    Expr::Not(Box::new(column))
                } else {
                    column
                })
            }
            Expr::SetComparison(_) => {
                return Err(DataFusionError::NotImplemented(format!(
                    "the quantified comparison {e} was not rewritten"
                )));
            }
            other => Transformed::no(other),
        })
    })
}
