//! Values bound into a prepared plan whose placeholders are all in its
//! table scans' filters and its filters' predicates, as a key read's are
//! (`WHERE pk = $1 AND rk BETWEEN $2 AND $3`).
//!
//! DataFusion's `replace_params_with_values` rebuilds every node of the
//! plan: it infers placeholder types against each node's schema, keeps
//! each expression's name by printing it, and recomputes each schema. On
//! a prepared 1,000-row range read that was 4% of the server's CPU time
//! (perf, BENCHMARKS.md), for a plan whose one scan's filters are all that
//! change. Filters carry no names and no schema depends on them, so here
//! only they are rewritten, each placeholder into the literal DataFusion
//! would put there. A plan with a placeholder anywhere
//! else (a projection, a limit, an extension node) is DataFusion's.

use datafusion::common::ParamValues;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::error::Result as DfResult;
use datafusion::logical_expr::{Expr, LogicalPlan};

/// `plan` with `values` in its scans' filters and its filters'
/// predicates, or `None` where it holds a placeholder elsewhere (or an extension node, which may keep its own).
pub fn filters(plan: &LogicalPlan, values: &ParamValues) -> DfResult<Option<LogicalPlan>> {
    let mut elsewhere = false;
    plan.apply_with_subqueries(|node| {
        elsewhere = match node {
            LogicalPlan::TableScan(_) | LogicalPlan::Filter(_) => false,
            LogicalPlan::Extension(_) => true,
            other => {
                let mut found = false;
                other.apply_expressions(|e| {
                    found = has_placeholder(e);
                    Ok(stop_if(found))
                })?;
                found
            }
        };
        Ok(stop_if(elsewhere))
    })?;
    if elsewhere {
        return Ok(None);
    }
    let bound = plan
        .clone()
        .transform_up_with_subqueries(|node| match node {
            LogicalPlan::TableScan(mut scan) if scan.filters.iter().any(has_placeholder) => {
                scan.filters = scan
                    .filters
                    .into_iter()
                    .map(|f| literal_values(f, values))
                    .collect::<DfResult<_>>()?;
                Ok(Transformed::yes(LogicalPlan::TableScan(scan)))
            }
            LogicalPlan::Filter(mut filter) if has_placeholder(&filter.predicate) => {
                filter.predicate = literal_values(filter.predicate, values)?;
                Ok(Transformed::yes(LogicalPlan::Filter(filter)))
            }
            other => Ok(Transformed::no(other)),
        })?;
    Ok(Some(bound.data))
}

fn stop_if(stop: bool) -> TreeNodeRecursion {
    match stop {
        true => TreeNodeRecursion::Stop,
        false => TreeNodeRecursion::Continue,
    }
}

fn has_placeholder(e: &Expr) -> bool {
    e.exists(|e| Ok(matches!(e, Expr::Placeholder(_))))
        .unwrap_or(true)
}

/// Each placeholder of `e` as the literal of its value, with the value's
/// metadata, as `replace_params_with_values` writes it.
fn literal_values(e: Expr, values: &ParamValues) -> DfResult<Expr> {
    e.transform_up(|e| match e {
        Expr::Placeholder(p) => {
            let (value, metadata) = values.get_placeholders_with_values(&p.id)?.into_inner();
            Ok(Transformed::yes(Expr::Literal(value, metadata)))
        }
        other => Ok(Transformed::no(other)),
    })
    .map(|t| t.data)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::common::ParamValues;
    use datafusion::scalar::ScalarValue;

    use super::filters;
    use crate::storage::MemoryStore;
    use crate::{Engine, EngineOptions};

    /// Bound here or by DataFusion, a plan is the same plan; where a
    /// placeholder is outside a scan's filters, DataFusion binds it.
    #[tokio::test]
    async fn a_scans_filters_bind_as_datafusion_binds_them_and_other_placeholders_are_its() {
        let engine = Engine::with_store(Arc::new(MemoryStore::new()), EngineOptions::default())
            .await
            .expect("engine");
        let session = engine.session();
        session
            .collect(
                "CREATE TABLE runs (e TEXT, bib INT, name TEXT, PRIMARY KEY (e, bib)) \
                 WITH (partition_key = '{e}', row_key = '{bib:05}')",
            )
            .await
            .expect("create");
        let values = ParamValues::from(vec![
            ScalarValue::from("Berlin"),
            ScalarValue::Int32(Some(10)),
            ScalarValue::Int32(Some(20)),
        ]);
        for (sql, here) in [
            (
                "SELECT name FROM runs WHERE e = $1 AND bib BETWEEN $2 AND $3",
                true,
            ),
            (
                "SELECT name, bib + 1 FROM runs WHERE e = $1 AND (bib = $2 OR name = 'x') AND bib < $3",
                true,
            ),
            (
                "SELECT name, bib + $2 FROM runs WHERE e = $1 AND bib < $3",
                false,
            ),
            (
                "SELECT name FROM runs WHERE e = $1 AND bib > $2 LIMIT 1 OFFSET 0",
                true,
            ),
        ] {
            let statement = session.parse(sql).expect("parse").remove(0);
            let prepared = session.prepare_statement(statement).await.expect("prepare");
            let planned = prepared.planned().await.expect("planned");
            let theirs = planned
                .plan
                .clone()
                .replace_params_with_values(&values)
                .expect("DataFusion's");
            match filters(&planned.plan, &values).expect("bound") {
                Some(ours) => {
                    assert!(here, "{sql}: bound here");
                    assert_eq!(ours, theirs, "{sql}");
                    assert_eq!(format!("{ours}"), format!("{theirs}"), "{sql}");
                }
                None => assert!(!here, "{sql}: left to DataFusion\n{}", planned.plan),
            }
        }
    }
}
