//! The session's query planner: DataFusion's physical planner, after the
//! subqueries it cannot run have moved into `ApplyNode`s (`subquery.rs`),
//! with the extension planner that turns those into `SubqueryApplyExec`.
//! Every path to a physical plan goes through it: the CLI, the wire server,
//! EXPLAIN, and the subqueries an apply plans per outer value.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::datatypes::Field;
use datafusion::catalog::Session;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::context::QueryPlanner;
use datafusion::execution::session_state::SessionState;
use datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext;
use datafusion::logical_expr::{
    Expr, LogicalPlan, UserDefinedLogicalNode, UserDefinedLogicalNodeCore,
};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_planner::{DefaultPhysicalPlanner, ExtensionPlanner, PhysicalPlanner};

use super::StoreTable;
use super::dml_query::DmlQueryNode;
use super::returning::ReturningNode;
use super::subquery::{ApplyNode, needs_apply, plan_subqueries};
use super::upsert::{self, UpsertNode};
use crate::exec::ops::apply::{Correlated, SubqueryApplyExec};
use crate::exec::write::dml::{DmlExec, OnExisting};

/// DataFusion's planner, with correlated subqueries evaluated per outer row.
#[derive(Debug, Default)]
pub struct TablesqlQueryPlanner;

#[async_trait]
impl QueryPlanner for TablesqlQueryPlanner {
    async fn create_physical_plan(
        &self,
        plan: &LogicalPlan,
        session: &dyn Session,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let planner = DefaultPhysicalPlanner::with_extension_planners(vec![
            Arc::new(ApplyPlanner),
            Arc::new(UpsertPlanner),
            Arc::new(ReturningPlanner),
            Arc::new(DmlQueryPlanner),
        ]);
        if needs_apply(plan) {
            let plan = plan_subqueries(plan.clone())?;
            planner.create_physical_plan(&plan, session).await
        } else {
            planner.create_physical_plan(plan, session).await
        }
    }
}

/// Plans [`ApplyNode`]s.
#[derive(Debug)]
struct ApplyPlanner;

#[async_trait]
impl ExtensionPlanner for ApplyPlanner {
    async fn plan_extension(
        &self,
        planner: &dyn PhysicalPlanner,
        node: &dyn UserDefinedLogicalNode,
        logical_inputs: &[&LogicalPlan],
        physical_inputs: &[Arc<dyn ExecutionPlan>],
        session: &dyn Session,
        planning_ctx: &PhysicalPlanningContext,
    ) -> Result<Option<Arc<dyn ExecutionPlan>>> {
        let Some(node) = node.as_any().downcast_ref::<ApplyNode>() else {
            return Ok(None);
        };
        let (Some(input), Some(physical)) = (logical_inputs.first(), physical_inputs.first())
        else {
            return Err(DataFusionError::Internal(
                "SubqueryApply without input".into(),
            ));
        };
        let state = session
            .as_any()
            .downcast_ref::<SessionState>()
            .ok_or_else(|| DataFusionError::Internal("subqueries need a SessionState".into()))?;
        let schema = input.schema();
        let physical_expr =
            |e: &Expr| planner.create_physical_expr(e, schema, session, planning_ctx);
        let mut subqueries = Vec::with_capacity(node.subqueries.len());
        for s in &node.subqueries {
            let outer = s
                .outer
                .iter()
                .map(|(named, held)| Ok((named.clone(), physical_expr(held)?)))
                .collect::<Result<Vec<_>>>()?;
            let probe = s.probe.as_ref().map(physical_expr).transpose()?;
            let field = Arc::new(Field::new(&s.name, s.data_type(), true));
            subqueries.push(Correlated {
                kind: s.kind,
                plan: s.subquery.subquery.clone(),
                outer,
                probe,
                field,
            });
        }
        Ok(Some(Arc::new(SubqueryApplyExec::new(
            physical.clone(),
            subqueries,
            Arc::new(state.clone()),
            Arc::new(UserDefinedLogicalNodeCore::schema(node).as_arrow().clone()),
        ))))
    }
}

/// Plans [`UpsertNode`]s: the INSERT's input into a `DmlExec` that upserts.
#[derive(Debug)]
struct UpsertPlanner;

#[async_trait]
impl ExtensionPlanner for UpsertPlanner {
    async fn plan_extension(
        &self,
        planner: &dyn PhysicalPlanner,
        node: &dyn UserDefinedLogicalNode,
        _logical_inputs: &[&LogicalPlan],
        physical_inputs: &[Arc<dyn ExecutionPlan>],
        session: &dyn Session,
        planning_ctx: &PhysicalPlanningContext,
    ) -> Result<Option<Arc<dyn ExecutionPlan>>> {
        let Some(node) = node.as_any().downcast_ref::<UpsertNode>() else {
            return Ok(None);
        };
        let Some(input) = physical_inputs.first() else {
            return Err(DataFusionError::Internal("Upsert without input".into()));
        };
        let table = datafusion::datasource::source_as_provider(&node.insert.target)?;
        let Some(store_table) = StoreTable::of(table.as_ref()) else {
            return Err(DataFusionError::Plan(format!(
                "ON CONFLICT needs a mapped table; {} is not one",
                node.insert.table_name
            )));
        };
        let row_schema = &node.row_schema;
        let on_existing = match &node.on_existing {
            upsert::OnExisting::Nothing(a) => OnExisting::Nothing(a.clone()),
            upsert::OnExisting::Update {
                assignments,
                filter,
            } => {
                let layout = store_table.layout();
                let physical =
                    |e: &Expr| planner.create_physical_expr(e, row_schema, session, planning_ctx);
                let assignments = assignments
                    .iter()
                    .map(|(name, e)| Ok((layout.schema.index_of(name)?, physical(e)?)))
                    .collect::<Result<Vec<_>>>()?;
                OnExisting::Update {
                    blind: node.is_blind(layout) && filter.is_none(),
                    assignments,
                    filter: filter.as_ref().map(physical).transpose()?,
                    row_schema: Arc::new(row_schema.as_arrow().clone()),
                }
            }
        };
        Ok(Some(store_table.upsert_exec(
            session,
            input.clone(),
            on_existing,
        )?))
    }
}

/// Plans [`ReturningNode`]s: the write below, made to yield its rows.
#[derive(Debug)]
struct ReturningPlanner;

#[async_trait]
impl ExtensionPlanner for ReturningPlanner {
    async fn plan_extension(
        &self,
        _planner: &dyn PhysicalPlanner,
        node: &dyn UserDefinedLogicalNode,
        _logical_inputs: &[&LogicalPlan],
        physical_inputs: &[Arc<dyn ExecutionPlan>],
        _session: &dyn Session,
        _planning_ctx: &PhysicalPlanningContext,
    ) -> Result<Option<Arc<dyn ExecutionPlan>>> {
        if node.as_any().downcast_ref::<ReturningNode>().is_none() {
            return Ok(None);
        }
        let write = physical_inputs
            .first()
            .and_then(|p| p.downcast_ref::<DmlExec>())
            .ok_or_else(|| {
                DataFusionError::NotImplemented(
                    "RETURNING is supported on writes of mapped tables".into(),
                )
            })?;
        Ok(Some(Arc::new(write.returning()?)))
    }
}

/// Plans [`DmlQueryNode`]s: a `DmlExec` over the query that chooses the rows.
#[derive(Debug)]
struct DmlQueryPlanner;

#[async_trait]
impl ExtensionPlanner for DmlQueryPlanner {
    async fn plan_extension(
        &self,
        _planner: &dyn PhysicalPlanner,
        node: &dyn UserDefinedLogicalNode,
        _logical_inputs: &[&LogicalPlan],
        physical_inputs: &[Arc<dyn ExecutionPlan>],
        session: &dyn Session,
        _planning_ctx: &PhysicalPlanningContext,
    ) -> Result<Option<Arc<dyn ExecutionPlan>>> {
        let Some(node) = node.as_any().downcast_ref::<DmlQueryNode>() else {
            return Ok(None);
        };
        let Some(input) = physical_inputs.first() else {
            return Err(DataFusionError::Internal("DmlQuery without input".into()));
        };
        let table = datafusion::datasource::source_as_provider(&node.target)?;
        let Some(store_table) = StoreTable::of(table.as_ref()) else {
            return Err(DataFusionError::Plan(format!(
                "{} is not a mapped table",
                node.table_name
            )));
        };
        Ok(Some(store_table.query_write_exec(
            session,
            &node.op,
            input.clone(),
        )?))
    }
}
