//! Correlated subqueries that DataFusion cannot turn into joins
//! (`(SELECT count(*) FROM t AS x WHERE x.b < t.b)`, an `EXISTS` under `OR`),
//! evaluated the way SQL defines them: once per outer row. `SubqueryApplyExec`
//! passes its input's rows through and appends one column per subquery. For
//! each distinct tuple of outer values it binds them into the subquery's
//! plan as literals, plans that (the scan's pushdown sees the literals, so a
//! correlation on a key column becomes a point read) and runs it. Results
//! are cached by outer values, and the number of distinct evaluations is
//! bounded: past it the statement fails rather than run for hours.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};

use datafusion::arrow::array::{ArrayRef, RecordBatch, new_empty_array};
use datafusion::arrow::datatypes::{DataType, FieldRef, SchemaRef};
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{Column, ScalarValue};
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::session_state::SessionState;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::expr::{Exists, InSubquery, SetComparison};
use datafusion::logical_expr::expr_rewriter::NamePreserver;
use datafusion::logical_expr::utils::merge_schema;
use datafusion::logical_expr::{Expr, LogicalPlan, LogicalPlanBuilder, Subquery};
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::metrics::{ExecutionPlanMetricsSet, MetricsSet};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties, collect,
};
use futures::{StreamExt, TryStreamExt};

use crate::exec::ExecError;
use crate::exec::read::metrics::{BillCount, bill};

/// Each subquery's results by the outer values it was run with.
type Memo = Vec<HashMap<Vec<ScalarValue>, ScalarValue>>;

/// Distinct outer values one apply evaluates a subquery for, at most, in
/// each of its output partitions.
pub const MAX_EVALUATIONS: usize = 10_000;

/// Subquery evaluations run at once (each is a plan and a scan).
const CONCURRENT_EVALUATIONS: usize = 4;

/// What a subquery's rows become for its outer row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd)]
pub enum ApplyKind {
    /// `(SELECT ...)`: its one value, NULL for no row, an error for more.
    Scalar,
    /// `EXISTS (SELECT ...)`: whether it has a row.
    Exists,
    /// `v IN (SELECT ...)`: true if a row equals `v`; else NULL if `v` is
    /// NULL or a row is NULL (and there are rows); else false.
    In,
}

impl fmt::Display for ApplyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ApplyKind::Scalar => "scalar",
            ApplyKind::Exists => "exists",
            ApplyKind::In => "in",
        })
    }
}

/// One correlated subquery of an apply.
#[derive(Debug, Clone)]
pub struct Correlated {
    /// What its rows become.
    pub kind: ApplyKind,
    /// The subquery's plan, its outer references unbound.
    pub plan: Arc<LogicalPlan>,
    /// The outer columns it reads, each with the expression (over the
    /// input) that gives its value.
    pub outer: Vec<(Column, Arc<dyn PhysicalExpr>)>,
    /// For `IN`: the value compared with the subquery's rows.
    pub probe: Option<Arc<dyn PhysicalExpr>>,
    /// The column this subquery adds.
    pub field: FieldRef,
}

impl Correlated {
    fn keys(&self) -> impl Iterator<Item = &Arc<dyn PhysicalExpr>> {
        self.outer.iter().map(|(_, e)| e).chain(self.probe.iter())
    }
}

/// The input's rows with one more column per correlated subquery.
#[derive(Debug)]
pub struct SubqueryApplyExec {
    input: Arc<dyn ExecutionPlan>,
    subqueries: Vec<Correlated>,
    /// Plans and runs the bound subqueries (the session they came from).
    session: Arc<SessionState>,
    max_evaluations: usize,
    properties: Arc<PlanProperties>,
    metrics: ExecutionPlanMetricsSet,
    /// What the subqueries' runs were billed, summed.
    bill: BillCount,
}

impl SubqueryApplyExec {
    /// An apply over `input` whose output schema is `schema` (the input's
    /// columns, then one per subquery, in order).
    pub fn new(
        input: Arc<dyn ExecutionPlan>,
        subqueries: Vec<Correlated>,
        session: Arc<SessionState>,
        schema: SchemaRef,
    ) -> Self {
        // Rows pass through in order: the input's orderings hold (the added
        // columns come last, so the input's column indices stay valid).
        let orderings = input.properties().output_ordering().cloned();
        let properties = Arc::new(PlanProperties::new(
            EquivalenceProperties::new_with_orderings(schema, orderings),
            input.properties().output_partitioning().clone(),
            EmissionType::Incremental,
            Boundedness::Bounded,
        ));
        let metrics = ExecutionPlanMetricsSet::new();
        Self {
            input,
            subqueries,
            session,
            max_evaluations: MAX_EVALUATIONS,
            properties,
            bill: BillCount::register(&metrics),
            metrics,
        }
    }
}

impl DisplayAs for SubqueryApplyExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "SubqueryApplyExec:")?;
        for s in &self.subqueries {
            let outer: Vec<String> = s.outer.iter().map(|(c, _)| c.flat_name()).collect();
            write!(
                f,
                " {}={}(outer=[{}])",
                s.field.name(),
                s.kind,
                outer.join(", ")
            )?;
        }
        write!(
            f,
            " per distinct outer values, at most {}",
            self.max_evaluations
        )
    }
}

impl ExecutionPlan for SubqueryApplyExec {
    fn name(&self) -> &str {
        "SubqueryApplyExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn maintains_input_order(&self) -> Vec<bool> {
        vec![true]
    }

    fn apply_expressions(
        &self,
        f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        for s in &self.subqueries {
            for e in s.keys() {
                if f(e)? == TreeNodeRecursion::Stop {
                    return Ok(TreeNodeRecursion::Stop);
                }
            }
        }
        Ok(TreeNodeRecursion::Continue)
    }

    fn with_new_children(
        self: Arc<Self>,
        mut children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        match (children.pop(), children.is_empty()) {
            (Some(input), true) => Ok(Arc::new(SubqueryApplyExec::new(
                input,
                self.subqueries.clone(),
                self.session.clone(),
                self.properties.eq_properties.schema().clone(),
            ))),
            _ => Err(DataFusionError::Internal(
                "SubqueryApplyExec has one child".into(),
            )),
        }
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let input = self.input.execute(partition, context.clone())?;
        let schema = self.properties.eq_properties.schema().clone();
        let evaluator = Arc::new(Evaluator {
            subqueries: self.subqueries.clone(),
            session: self.session.clone(),
            task: context,
            schema: schema.clone(),
            max_evaluations: self.max_evaluations,
            cache: Mutex::new(vec![HashMap::new(); self.subqueries.len()]),
            bill: self.bill.clone(),
        });
        let rows = input.and_then(move |batch| {
            let evaluator = evaluator.clone();
            async move { evaluator.apply(batch).await }
        });
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, rows)))
    }
}

/// One execution's state: the results so far, per subquery and outer values.
struct Evaluator {
    subqueries: Vec<Correlated>,
    session: Arc<SessionState>,
    task: Arc<TaskContext>,
    schema: SchemaRef,
    max_evaluations: usize,
    cache: Mutex<Vec<HashMap<Vec<ScalarValue>, ScalarValue>>>,
    bill: BillCount,
}

impl Evaluator {
    async fn apply(&self, batch: RecordBatch) -> Result<RecordBatch> {
        let mut columns = batch.columns().to_vec();
        for (i, s) in self.subqueries.iter().enumerate() {
            columns.push(self.column(i, s, &batch).await?);
        }
        Ok(RecordBatch::try_new(self.schema.clone(), columns)?)
    }

    /// Subquery `i`'s value for every row of `batch`.
    async fn column(&self, i: usize, s: &Correlated, batch: &RecordBatch) -> Result<ArrayRef> {
        let rows = batch.num_rows();
        if rows == 0 {
            return Ok(new_empty_array(s.field.data_type()));
        }
        let arrays = s
            .keys()
            .map(|e| e.evaluate(batch)?.into_array(rows))
            .collect::<Result<Vec<_>>>()?;
        let keys = (0..rows)
            .map(|r| {
                arrays
                    .iter()
                    .map(|a| ScalarValue::try_from_array(a, r))
                    .collect::<Result<Vec<_>>>()
            })
            .collect::<Result<Vec<_>>>()?;
        let missing = self.missing(i, &keys)?;
        let found: Vec<(Vec<ScalarValue>, ScalarValue)> = futures::stream::iter(missing)
            .map(|key| async move {
                let value = self.evaluate(s, &key).await?;
                Ok::<_, DataFusionError>((key, value))
            })
            .buffered(CONCURRENT_EVALUATIONS)
            .try_collect()
            .await?;
        let mut cache = self.lock()?;
        let known = &mut cache[i];
        known.extend(found);
        let values = keys
            .iter()
            .map(|k| {
                known
                    .get(k)
                    .cloned()
                    .ok_or_else(|| DataFusionError::Internal("subquery value missing".into()))
            })
            .collect::<Result<Vec<_>>>()?;
        drop(cache);
        ScalarValue::iter_to_array(values)
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, Memo>> {
        self.cache
            .lock()
            .map_err(|_| DataFusionError::Internal("subquery cache poisoned".into()))
    }

    /// The distinct keys of a batch not evaluated yet; an error once the
    /// bound would be passed.
    fn missing(&self, i: usize, keys: &[Vec<ScalarValue>]) -> Result<Vec<Vec<ScalarValue>>> {
        let cache = self.lock()?;
        let mut seen = std::collections::HashSet::new();
        let missing: Vec<Vec<ScalarValue>> = keys
            .iter()
            .filter(|k| !cache[i].contains_key(*k) && seen.insert(*k))
            .cloned()
            .collect();
        if cache[i].len() + missing.len() > self.max_evaluations {
            return Err(ExecError::SubqueryBound {
                limit: self.max_evaluations,
            }
            .into());
        }
        Ok(missing)
    }

    /// Runs subquery `s` for one tuple of outer values.
    async fn evaluate(&self, s: &Correlated, key: &[ScalarValue]) -> Result<ScalarValue> {
        let values: Vec<(Column, ScalarValue)> = s
            .outer
            .iter()
            .zip(key)
            .map(|((c, _), v)| (c.clone(), v.clone()))
            .collect();
        let mut plan = bind_outer(s.plan.as_ref().clone(), &values)?;
        if s.kind == ApplyKind::Exists {
            plan = LogicalPlanBuilder::from(plan).limit(0, Some(1))?.build()?;
        }
        let physical = self.session.create_physical_plan(&plan).await?;
        let batches = collect(physical.clone(), self.task.clone()).await;
        // Billed whether or not the run succeeded: its requests were made.
        self.bill.add(bill(physical.as_ref()));
        let batches = batches?;
        let rows = batches.iter().filter(|b| b.num_rows() > 0).flat_map(|b| {
            (0..b.num_rows()).map(move |r| ScalarValue::try_from_array(b.column(0), r))
        });
        match s.kind {
            ApplyKind::Exists => Ok(ScalarValue::Boolean(Some(
                batches.iter().any(|b| b.num_rows() > 0),
            ))),
            ApplyKind::Scalar => {
                let mut rows = rows;
                let value = match rows.next() {
                    None => ScalarValue::try_from(s.field.data_type())?,
                    Some(v) => v?,
                };
                if rows.next().is_some() {
                    return Err(ExecError::SubqueryRows.into());
                }
                typed(value, s.field.data_type())
            }
            ApplyKind::In => {
                let probe = key.last().cloned().unwrap_or(ScalarValue::Null);
                let rows = rows.collect::<Result<Vec<_>>>()?;
                Ok(ScalarValue::Boolean(in_result(&probe, &rows)?))
            }
        }
    }
}

/// `probe IN rows` in SQL's three-valued logic.
fn in_result(probe: &ScalarValue, rows: &[ScalarValue]) -> Result<Option<bool>> {
    if rows.is_empty() {
        return Ok(Some(false));
    }
    if probe.is_null() {
        return Ok(None);
    }
    let mut unknown = false;
    for row in rows {
        if row.is_null() {
            unknown = true;
        } else if typed(row.clone(), &probe.data_type())? == *probe {
            return Ok(Some(true));
        }
    }
    Ok(if unknown { None } else { Some(false) })
}

fn typed(value: ScalarValue, to: &DataType) -> Result<ScalarValue> {
    if value.data_type() == *to {
        Ok(value)
    } else {
        value.cast_to(to)
    }
}

/// `plan` with the outer columns in `values` replaced by their values,
/// nested subqueries included. A nested subquery's outer reference to a
/// column its own enclosing query has is that query's, and stays.
fn bind_outer(plan: LogicalPlan, values: &[(Column, ScalarValue)]) -> Result<LogicalPlan> {
    if values.is_empty() {
        return Ok(plan);
    }
    plan.transform_up(|node| {
        let inner = merge_schema(&node.inputs());
        let shadowed: Vec<(Column, ScalarValue)> = values
            .iter()
            .filter(|(c, _)| !inner.has_column(c))
            .cloned()
            .collect();
        // An expression keeps its name (`max(x.k + outer_ref(t.k))`): the
        // nodes above refer to it by that name.
        let names = NamePreserver::new(&node);
        node.map_expressions(|e| {
            let name = names.save(&e);
            let bound = e.transform_up(|e| bind_expr(e, values, &shadowed))?;
            Ok(bound.update_data(|e| name.restore(e)))
        })
    })
    .map(|t| t.data)
}

/// One expression of a node: outer references become literals, and nested
/// subqueries are bound with `nested` (the values their scope leaves).
fn bind_expr(
    e: Expr,
    values: &[(Column, ScalarValue)],
    nested: &[(Column, ScalarValue)],
) -> Result<Transformed<Expr>> {
    Ok(match e {
        Expr::OuterReferenceColumn(field, c) => match values.iter().find(|(v, _)| *v == c) {
            Some((_, v)) => {
                Transformed::yes(Expr::Literal(typed(v.clone(), field.data_type())?, None))
            }
            None => Transformed::no(Expr::OuterReferenceColumn(field, c)),
        },
        Expr::ScalarSubquery(s) => {
            Transformed::yes(Expr::ScalarSubquery(bind_subquery(s, nested)?))
        }
        Expr::Exists(Exists { subquery, negated }) => Transformed::yes(Expr::Exists(Exists {
            subquery: bind_subquery(subquery, nested)?,
            negated,
        })),
        Expr::InSubquery(InSubquery {
            expr,
            subquery,
            negated,
        }) => Transformed::yes(Expr::InSubquery(InSubquery {
            expr,
            subquery: bind_subquery(subquery, nested)?,
            negated,
        })),
        Expr::SetComparison(s) => Transformed::yes(Expr::SetComparison(SetComparison {
            subquery: bind_subquery(s.subquery, nested)?,
            ..s
        })),
        other => Transformed::no(other),
    })
}

fn bind_subquery(s: Subquery, values: &[(Column, ScalarValue)]) -> Result<Subquery> {
    let plan = bind_outer(s.subquery.as_ref().clone(), values)?;
    let outer_ref_columns = s
        .outer_ref_columns
        .into_iter()
        .filter(|e| match e {
            Expr::OuterReferenceColumn(_, c) => !values.iter().any(|(v, _)| v == c),
            _ => true,
        })
        .collect();
    Ok(Subquery {
        subquery: Arc::new(plan),
        outer_ref_columns,
        spans: s.spans,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn int(v: Option<i64>) -> ScalarValue {
        ScalarValue::Int64(v)
    }

    #[test]
    fn in_is_three_valued() {
        let rows = [int(Some(1)), int(None)];
        assert_eq!(in_result(&int(Some(1)), &rows).unwrap(), Some(true));
        assert_eq!(in_result(&int(Some(2)), &rows).unwrap(), None);
        assert_eq!(
            in_result(&int(Some(2)), &[int(Some(1))]).unwrap(),
            Some(false)
        );
        assert_eq!(in_result(&int(None), &[int(Some(1))]).unwrap(), None);
        assert_eq!(in_result(&int(None), &[]).unwrap(), Some(false));
    }
}
