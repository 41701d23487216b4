//! `INSERT/UPDATE/DELETE ... RETURNING`: the rows a write wrote (or, for a
//! DELETE, removed), which DataFusion's SQL planner refuses. An ORM inserts
//! with `RETURNING id` to learn a SERIAL key, so without it no ORM can add a
//! row.
//!
//! The clause is taken off the statement before DataFusion plans it; the
//! write is planned as without it, and a [`ReturningNode`] above it turns its
//! `DmlExec` into one that yields its rows instead of their count
//! (`exec::write::dml`), in the table's columns, which a projection of the
//! RETURNING list then reads. The rows are the ones as stored: an `ON
//! CONFLICT DO UPDATE` returns the updated row, an `ON CONFLICT DO NOTHING`
//! leaves out the rows it skipped, as in PostgreSQL.

use std::cmp::Ordering;
use std::fmt;
use std::sync::Arc;

use datafusion::common::{DFSchema, DFSchemaRef, TableReference};
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::session_state::SessionState;
use datafusion::logical_expr::{
    Expr, Extension, LogicalPlan, LogicalPlanBuilder, UserDefinedLogicalNodeCore,
};
use datafusion::sql::sqlparser::ast::{
    Expr as SqlExpr, FromTable, Ident, SelectItem, SelectItemQualifiedWildcardKind, Statement,
    TableFactor, TableWithJoins,
};

use super::StoreTable;

/// A write whose rows are its answer: its output is the written rows in the
/// table's columns (system columns included), qualified by the name the
/// statement gave the table.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ReturningNode {
    /// The write (a `Dml`, or an upsert's extension node).
    pub write: Arc<LogicalPlan>,
    schema: DFSchemaRef,
}

impl PartialOrd for ReturningNode {
    fn partial_cmp(&self, _other: &Self) -> Option<Ordering> {
        None
    }
}

impl UserDefinedLogicalNodeCore for ReturningNode {
    fn name(&self) -> &str {
        "Returning"
    }

    fn inputs(&self) -> Vec<&LogicalPlan> {
        vec![self.write.as_ref()]
    }

    fn schema(&self) -> &DFSchemaRef {
        &self.schema
    }

    fn expressions(&self) -> Vec<Expr> {
        Vec::new()
    }

    fn fmt_for_explain(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "Returning")
    }

    fn with_exprs_and_inputs(
        &self,
        _exprs: Vec<Expr>,
        mut inputs: Vec<LogicalPlan>,
    ) -> Result<Self> {
        let write = inputs
            .pop()
            .ok_or_else(|| DataFusionError::Internal("Returning has one input".into()))?;
        Ok(Self {
            write: Arc::new(write),
            schema: self.schema.clone(),
        })
    }

    // The rows are the write's own: no column of them can be pruned below it.
    fn necessary_children_exprs(&self, _output_columns: &[usize]) -> Option<Vec<Vec<usize>>> {
        None
    }
}

/// A write's RETURNING list and the name its columns are qualified by.
pub struct Returning {
    items: Vec<SelectItem>,
    /// The table's alias where the statement gives one (then only it names
    /// the table, as in PostgreSQL).
    alias: Option<Ident>,
}

/// Takes the RETURNING clause off an INSERT, UPDATE or DELETE.
pub fn take(statement: &mut Statement) -> Option<Returning> {
    let (items, alias) = match statement {
        // DataFusion plans no INSERT alias; RETURNING is what reads it.
        Statement::Insert(i) => {
            let items = i.returning.take()?;
            (items, i.table_alias.take().map(|a| a.alias))
        }
        Statement::Update(u) => (u.returning.take()?, alias_of(&u.table)),
        Statement::Delete(d) => {
            let from = match &d.from {
                FromTable::WithFromKeyword(t) | FromTable::WithoutKeyword(t) => t,
            };
            (d.returning.take()?, from.first().and_then(alias_of))
        }
        _ => return None,
    };
    Some(Returning { items, alias })
}

/// Whether a statement is a write with a RETURNING clause (its answer is
/// rows, as a query's).
pub fn returns_rows(statement: &Statement) -> bool {
    match statement {
        Statement::Insert(i) => i.returning.is_some(),
        Statement::Update(u) => u.returning.is_some(),
        Statement::Delete(d) => d.returning.is_some(),
        _ => false,
    }
}

fn alias_of(table: &TableWithJoins) -> Option<Ident> {
    match &table.relation {
        TableFactor::Table { alias, .. } => alias.as_ref().map(|a| a.name.clone()),
        _ => None,
    }
}

/// `write` (as DataFusion planned the statement without its RETURNING)
/// answering with the RETURNING list over the rows it writes.
pub fn plan(state: &SessionState, write: LogicalPlan, returning: Returning) -> Result<LogicalPlan> {
    let (name, provider) = target(&write)?;
    let Some(store_table) = StoreTable::of(provider.as_ref()) else {
        return Err(DataFusionError::Plan(format!(
            "RETURNING needs a mapped table; {name} is not one"
        )));
    };
    let layout = store_table.layout();
    let def = layout.def.clone().ok_or_else(|| {
        DataFusionError::Plan(format!("RETURNING needs a mapped table; {name} is not one"))
    })?;
    let qualifier = match &returning.alias {
        Some(alias) => TableReference::bare(crate::catalog::normalize_ident(alias)),
        None => name,
    };
    let schema = Arc::new(DFSchema::try_from_qualified_schema(
        qualifier.clone(),
        &layout.schema,
    )?);
    let mut exprs = Vec::new();
    for item in returning.items {
        match item {
            SelectItem::Wildcard(_) => exprs.extend(visible(&def, &qualifier)),
            SelectItem::QualifiedWildcard(SelectItemQualifiedWildcardKind::ObjectName(n), _) => {
                let named =
                    n.0.last()
                        .and_then(|p| p.as_ident())
                        .map(crate::catalog::normalize_ident);
                if named.as_deref() != Some(qualifier.table()) {
                    return Err(DataFusionError::Plan(format!(
                        "missing FROM-clause entry for table \"{n}\" in RETURNING"
                    )));
                }
                exprs.extend(visible(&def, &qualifier));
            }
            SelectItem::UnnamedExpr(e) => {
                let expr = state.create_logical_expr(&e.to_string(), &schema)?;
                // DataFusion takes no two outputs of one name: a second
                // `?column?` keeps DataFusion's name for its expression.
                exprs.push(match output_name(&e) {
                    Some(n) if !exprs.iter().any(|x| x.schema_name().to_string() == n) => {
                        expr.alias(n)
                    }
                    _ => expr,
                });
            }
            SelectItem::ExprWithAlias { expr, alias } => {
                let e = state.create_logical_expr(&expr.to_string(), &schema)?;
                exprs.push(e.alias(crate::catalog::normalize_ident(&alias)));
            }
            other => {
                return Err(DataFusionError::NotImplemented(format!(
                    "RETURNING {other} is not supported"
                )));
            }
        }
    }
    let node = ReturningNode {
        write: Arc::new(write),
        schema,
    };
    LogicalPlanBuilder::from(LogicalPlan::Extension(Extension {
        node: Arc::new(node),
    }))
    .project(exprs)?
    .build()
}

/// The table a planned write writes, as the statement named it.
fn target(
    write: &LogicalPlan,
) -> Result<(TableReference, Arc<dyn datafusion::catalog::TableProvider>)> {
    let dml = match write {
        LogicalPlan::Dml(dml) => dml,
        LogicalPlan::Extension(e) => {
            let node = e.node.as_any();
            if let Some(chosen) = node.downcast_ref::<super::dml_query::DmlQueryNode>() {
                let provider = datafusion::datasource::source_as_provider(&chosen.target)?;
                return Ok((chosen.table_name.clone(), provider));
            }
            match node.downcast_ref::<super::upsert::UpsertNode>() {
                Some(upsert) => &upsert.insert,
                None => {
                    return Err(DataFusionError::Internal(
                        "RETURNING of an unknown write".into(),
                    ));
                }
            }
        }
        _ => {
            return Err(DataFusionError::Internal(
                "RETURNING of a plan that is no write".into(),
            ));
        }
    };
    let provider = datafusion::datasource::source_as_provider(&dml.target)?;
    Ok((dml.table_name.clone(), provider))
}

/// The table's own columns (`*` leaves out the system and hidden ones).
fn visible(def: &crate::catalog::TableDef, qualifier: &TableReference) -> Vec<Expr> {
    def.visible_columns()
        .map(|c| {
            Expr::Column(datafusion::common::Column::new(
                Some(qualifier.clone()),
                &c.name,
            ))
        })
        .collect()
}

/// The name PostgreSQL gives an unnamed RETURNING expression: a column's
/// own (`None`: DataFusion's is that), else as it names a SELECT list's.
fn output_name(e: &SqlExpr) -> Option<String> {
    match e {
        SqlExpr::Identifier(_) | SqlExpr::CompoundIdentifier(_) => None,
        e => Some(super::output_names::figured(e)),
    }
}
