//! `ApplyNode`, the logical node of subqueries evaluated per outer value:
//! its input's rows with one column more per subquery. DataFusion allows
//! subqueries in few nodes, so the node does not show its subqueries as
//! expressions; it shows what they read from around it (the outer columns,
//! statement parameters, references to queries further out), so that
//! projection pruning keeps those columns and binding a prepared
//! statement's values, or an enclosing apply's outer values, reaches them.

use std::cmp::Ordering;
use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Field};
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{Column, DFSchema, DFSchemaRef};
use datafusion::error::{DataFusionError, Result};
use datafusion::logical_expr::{Expr, LogicalPlan, Subquery, UserDefinedLogicalNodeCore};

use crate::exec::ops::apply::ApplyKind;

/// One subquery an [`ApplyNode`] evaluates.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LogicalApply {
    /// What its rows become.
    pub kind: ApplyKind,
    /// The subquery, its outer references unbound.
    pub subquery: Subquery,
    /// For `IN`: the compared value, over the node's input.
    pub probe: Option<Expr>,
    /// The outer columns the subquery reads: as it names them, and the
    /// expression over the node's input that gives each.
    pub outer: Vec<(Column, Expr)>,
    /// What the subquery reads from outside the node, each once: statement
    /// parameters (`$1`) and references to queries further out.
    free: Vec<Expr>,
    /// The name of the column it adds.
    pub name: String,
}

impl LogicalApply {
    pub(crate) fn new(
        kind: ApplyKind,
        subquery: Subquery,
        probe: Option<Expr>,
        input: &DFSchema,
        name: String,
    ) -> Self {
        let outer = outer_columns(&subquery, input);
        let free = free_exprs(&subquery.subquery, input);
        Self {
            kind,
            subquery,
            probe,
            outer,
            free,
            name,
        }
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

    /// Its expressions, in the order `with_exprs` takes them back: the
    /// probe, the outer values, the free expressions. The subquery itself is
    /// not one (DataFusion allows subqueries in few nodes); its free
    /// expressions are, so that binding a prepared statement's values, or an
    /// enclosing apply's outer values, reaches them.
    fn exprs(&self) -> impl Iterator<Item = Expr> + '_ {
        self.probe
            .iter()
            .chain(self.outer.iter().map(|(_, e)| e))
            .chain(&self.free)
            .cloned()
    }

    fn with_exprs(&self, exprs: &mut impl Iterator<Item = Expr>) -> Result<Self> {
        let mut next = || {
            exprs.next().ok_or_else(|| {
                DataFusionError::Internal("SubqueryApply: expressions missing".into())
            })
        };
        let probe = match self.probe {
            Some(_) => Some(next()?),
            None => None,
        };
        let outer = self
            .outer
            .iter()
            .map(|(named, _)| Ok((named.clone(), next()?)))
            .collect::<Result<Vec<_>>>()?;
        let mut subquery = self.subquery.clone();
        let mut free = Vec::with_capacity(self.free.len());
        for old in &self.free {
            let new = next()?;
            if new != *old {
                subquery.subquery = Arc::new(bind_free(&subquery.subquery, old, &new)?);
            }
            free.push(new);
        }
        // A bound one is a value now.
        free.retain(is_free);
        Ok(Self {
            kind: self.kind,
            subquery,
            probe,
            outer,
            free,
            name: self.name.clone(),
        })
    }
}

fn is_free(e: &Expr) -> bool {
    matches!(e, Expr::Placeholder(_) | Expr::OuterReferenceColumn(..))
}

/// The free expressions of a subquery (its own subqueries' included), each
/// once: placeholders, and outer references that `input` cannot answer.
fn free_exprs(plan: &LogicalPlan, input: &DFSchema) -> Vec<Expr> {
    let mut found: Vec<Expr> = Vec::new();
    let _ = plan.apply_with_subqueries(|node| {
        node.apply_expressions(|e| {
            e.apply(|e| {
                let free = match e {
                    Expr::Placeholder(_) => true,
                    Expr::OuterReferenceColumn(_, c) => !input.has_column(c),
                    _ => false,
                };
                if free && !found.contains(e) {
                    found.push(e.clone());
                }
                Ok(TreeNodeRecursion::Continue)
            })
        })
    });
    found
}

/// `plan` with the free expression `old` replaced by `value`, subqueries
/// included.
fn bind_free(plan: &LogicalPlan, old: &Expr, value: &Expr) -> Result<LogicalPlan> {
    plan.clone()
        .transform_up_with_subqueries(|node| {
            node.map_expressions(|e| {
                e.transform_up(|e| {
                    if e == *old {
                        Ok(Transformed::yes(value.clone()))
                    } else {
                        Ok(Transformed::no(e))
                    }
                })
            })
        })
        .map(|t| t.data)
}

/// The outer columns a subquery reads (nested subqueries' included) that
/// `input` holds, each once, with the expression that gives each.
fn outer_columns(subquery: &Subquery, input: &DFSchema) -> Vec<(Column, Expr)> {
    let mut found: Vec<(Column, Expr)> = Vec::new();
    let _ = subquery.subquery.apply_with_subqueries(|node| {
        node.apply_expressions(|e| {
            e.apply(|e| {
                if let Expr::OuterReferenceColumn(_, c) = e
                    && input.has_column(c)
                    && !found.iter().any(|(named, _)| named == c)
                {
                    found.push((c.clone(), Expr::Column(c.clone())));
                }
                Ok(TreeNodeRecursion::Continue)
            })
        })
    });
    found
}

/// Its input's rows, with one column more per subquery.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ApplyNode {
    /// The outer rows.
    pub input: Arc<LogicalPlan>,
    /// One column each, in order, after the input's.
    pub subqueries: Vec<LogicalApply>,
    schema: DFSchemaRef,
}

impl ApplyNode {
    pub(crate) fn try_new(input: Arc<LogicalPlan>, subqueries: Vec<LogicalApply>) -> Result<Self> {
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
        self.subqueries
            .iter()
            .flat_map(LogicalApply::exprs)
            .collect()
    }

    /// The input columns needed: those asked for, and those the outer
    /// values and probes read. The added columns need nothing below.
    fn necessary_children_exprs(&self, output_columns: &[usize]) -> Option<Vec<Vec<usize>>> {
        let input = self.input.schema();
        let mut needed: Vec<usize> = output_columns
            .iter()
            .copied()
            .filter(|i| *i < input.fields().len())
            .collect();
        for e in self.expressions() {
            for c in e.column_refs() {
                needed.push(input.index_of_column(c).ok()?);
            }
        }
        needed.sort_unstable();
        needed.dedup();
        Some(vec![needed])
    }

    /// Filters on the input's columns may pass below; not on those it adds.
    fn prevent_predicate_push_down_columns(&self) -> HashSet<String> {
        self.subqueries.iter().map(|s| s.name.clone()).collect()
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
        exprs: Vec<Expr>,
        mut inputs: Vec<LogicalPlan>,
    ) -> Result<Self> {
        let input = match (inputs.pop(), inputs.is_empty()) {
            (Some(input), true) => input,
            _ => {
                return Err(DataFusionError::Internal(
                    "SubqueryApply has one input".into(),
                ));
            }
        };
        let mut exprs = exprs.into_iter();
        let subqueries = self
            .subqueries
            .iter()
            .map(|s| s.with_exprs(&mut exprs))
            .collect::<Result<Vec<_>>>()?;
        Self::try_new(Arc::new(input), subqueries)
    }
}
