//! `INSERT ... ON CONFLICT`: PostgreSQL's upsert, which DataFusion's SQL
//! planner refuses. The statement is planned as the INSERT it starts with,
//! and the INSERT becomes an [`UpsertNode`] carrying what to do with a row
//! whose primary key exists: nothing, or the `DO UPDATE SET` assignments
//! (over the stored row's columns and `EXCLUDED`'s) and their WHERE. The
//! physical planner (`physical.rs`) makes it a `DmlExec` (`exec::write::dml`).
//!
//! The conflict target must be the primary key (its columns, or the
//! constraint `<table>_pkey`), the only unique key a mapped table has; with
//! no target only `DO NOTHING` is allowed, as in PostgreSQL.

use std::cmp::Ordering;
use std::fmt;
use std::sync::Arc;

use datafusion::arrow::datatypes::DataType;
use datafusion::common::ParamValues;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{DFSchema, DFSchemaRef, TableReference};
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::session_state::SessionState;
use datafusion::logical_expr::{
    DmlStatement, Expr, LogicalPlan, UserDefinedLogicalNodeCore, WriteOp, dml::InsertOp,
};
use datafusion::optimizer::analyzer::type_coercion::TypeCoercionRewriter;
use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::sqlparser::ast::{
    AssignmentTarget, ConflictTarget, Expr as SqlExpr, Ident, Insert, OnConflict, OnConflictAction,
    OnInsert, Statement, visit_expressions_mut,
};
use std::ops::ControlFlow;

use super::StoreTable;
use crate::catalog::TableDef;
pub use crate::exec::write::dml::Arbiter;

/// The qualifier of the proposed row in `DO UPDATE SET`.
pub const EXCLUDED: &str = "excluded";

/// What an upsert does with a row whose key exists.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd)]
pub enum OnExisting {
    /// Leaves it (the proposed row is not written, nor counted); the
    /// arbiter says which conflicts are skipped.
    Nothing(Arbiter),
    /// Sets these columns of it, where `filter` holds; the expressions
    /// read the stored row's columns and `excluded.*`, over
    /// [`UpsertNode::row_schema`].
    Update {
        assignments: Vec<(String, Expr)>,
        filter: Option<Expr>,
    },
}

/// An INSERT with an ON CONFLICT clause.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct UpsertNode {
    /// The INSERT as DataFusion planned it.
    pub insert: DmlStatement,
    pub on_existing: OnExisting,
    /// The table's columns qualified by its name, then the proposed row's
    /// as `excluded`: what the assignments are evaluated over.
    pub row_schema: DFSchemaRef,
}

impl PartialOrd for UpsertNode {
    fn partial_cmp(&self, _other: &Self) -> Option<Ordering> {
        None
    }
}

impl UserDefinedLogicalNodeCore for UpsertNode {
    fn name(&self) -> &str {
        "Upsert"
    }

    fn inputs(&self) -> Vec<&LogicalPlan> {
        vec![self.insert.input.as_ref()]
    }

    fn schema(&self) -> &DFSchemaRef {
        &self.insert.output_schema
    }

    // The assignments are over `row_schema`, not the input's: they are kept
    // out of the optimizer's reach, coerced here once.
    fn expressions(&self) -> Vec<Expr> {
        Vec::new()
    }

    fn fmt_for_explain(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match &self.on_existing {
            OnExisting::Nothing(a) => write!(
                f,
                "Upsert: {} on_conflict=do_nothing arbiter={}",
                self.insert.table_name,
                match a {
                    Arbiter::Any => "any".to_owned(),
                    Arbiter::PrimaryKey => "primary_key".to_owned(),
                    Arbiter::Unique(name) => name.clone(),
                }
            ),
            OnExisting::Update { assignments, .. } => {
                let names: Vec<&str> = assignments.iter().map(|(n, _)| n.as_str()).collect();
                write!(
                    f,
                    "Upsert: {} on_conflict=do_update set=[{}]",
                    self.insert.table_name,
                    names.join(", ")
                )
            }
        }
    }

    fn with_exprs_and_inputs(
        &self,
        _exprs: Vec<Expr>,
        mut inputs: Vec<LogicalPlan>,
    ) -> Result<Self> {
        let input = inputs
            .pop()
            .ok_or_else(|| DataFusionError::Internal("Upsert has one input".into()))?;
        let mut insert = self.insert.clone();
        insert.input = Arc::new(input);
        Ok(Self {
            insert,
            on_existing: self.on_existing.clone(),
            row_schema: self.row_schema.clone(),
        })
    }
}

impl UpsertNode {
    /// The placeholders of its `DO UPDATE` (DataFusion sees only the
    /// INSERT's): one that is an assignment's whole value takes its
    /// column's type.
    pub fn placeholder_types(&self) -> Vec<(String, Option<DataType>)> {
        let OnExisting::Update {
            assignments,
            filter,
        } = &self.on_existing
        else {
            return Vec::new();
        };
        let target = self.insert.target.schema();
        let mut found = Vec::new();
        for (column, e) in assignments {
            if let Expr::Placeholder(p) = e {
                let t = target
                    .field_with_name(column)
                    .ok()
                    .map(|f| f.data_type().clone());
                found.push((p.id.clone(), t));
                continue;
            }
            collect_placeholders(e, &mut found);
        }
        if let Some(f) = filter {
            collect_placeholders(f, &mut found);
        }
        found
    }

    /// With the statement's values in place of its `DO UPDATE`'s placeholders.
    fn with_values(&self, values: &ParamValues) -> Result<Self> {
        let bind = |e: &Expr| -> Result<Expr> {
            let bound = e.clone().transform(|e| match e {
                Expr::Placeholder(p) => {
                    let value = values.get_placeholders_with_values(&p.id)?;
                    let (value, metadata) = value.into_inner();
                    Ok(Transformed::yes(Expr::Literal(value, metadata)))
                }
                other => Ok(Transformed::no(other)),
            })?;
            Ok(bound
                .data
                .rewrite(&mut TypeCoercionRewriter::new(&self.row_schema))?
                .data)
        };
        let on_existing = match &self.on_existing {
            OnExisting::Nothing(a) => OnExisting::Nothing(a.clone()),
            OnExisting::Update {
                assignments,
                filter,
            } => OnExisting::Update {
                assignments: assignments
                    .iter()
                    .map(|(c, e)| Ok((c.clone(), bind(e)?)))
                    .collect::<Result<_>>()?,
                filter: filter.as_ref().map(bind).transpose()?,
            },
        };
        Ok(Self {
            on_existing,
            ..self.clone()
        })
    }
}

impl UpsertNode {
    /// Whether its `DO UPDATE` writes the proposed row as it is, so that the
    /// write needs no read (`exec::write::dml::upsert`): no index rows, a
    /// primary key that is the whole RowKey, and every other declared column set
    /// to its `EXCLUDED` value, with no WHERE.
    pub fn is_blind(&self, layout: &crate::exec::Layout) -> bool {
        let OnExisting::Update {
            assignments,
            filter: None,
        } = &self.on_existing
        else {
            return false;
        };
        let Some(def) = layout.def.as_ref() else {
            return false;
        };
        let in_row_key = def
            .primary_key
            .len()
            .saturating_sub(def.partition_key.columns().count());
        if !def.indexes.is_empty()
            || !def.global_indexes.is_empty()
            || in_row_key < def.row_key.columns().count()
        {
            return false;
        }
        let from_excluded = |column: &str| {
            assignments.iter().any(|(c, e)| {
                c == column
                    && matches!(e, Expr::Column(col)
                        if col.name == column
                            && col.relation.as_ref().is_some_and(|r| r.table() == EXCLUDED))
            })
        };
        assignments.len()
            == def
                .columns
                .iter()
                .filter(|c| !def.is_key_column(&c.name))
                .count()
            && def
                .columns
                .iter()
                .filter(|c| !def.is_key_column(&c.name))
                .all(|c| from_excluded(&c.name))
    }
}

fn collect_placeholders(e: &Expr, found: &mut Vec<(String, Option<DataType>)>) {
    let _ = e.apply(|e| {
        if let Expr::Placeholder(p) = e {
            found.push((
                p.id.clone(),
                p.field.as_ref().map(|f| f.data_type().clone()),
            ));
        }
        Ok(TreeNodeRecursion::Continue)
    });
}

/// The placeholders of every upsert in `plan` (see
/// [`UpsertNode::placeholder_types`]).
pub fn placeholder_types(plan: &LogicalPlan) -> Vec<(String, Option<DataType>)> {
    match upsert_of(plan) {
        Some(node) => node.placeholder_types(),
        None => Vec::new(),
    }
}

/// `plan` with `values` bound into its upsert's `DO UPDATE` as well (what
/// `LogicalPlan::replace_params_with_values` does not reach).
pub fn bind_values(plan: LogicalPlan, values: &ParamValues) -> Result<LogicalPlan> {
    let Some(node) = upsert_of(&plan) else {
        return Ok(plan);
    };
    let node = node.with_values(values)?;
    Ok(LogicalPlan::Extension(
        datafusion::logical_expr::Extension {
            node: Arc::new(node),
        },
    ))
}

/// Whether `plan` is an upsert.
pub fn is_upsert_plan(plan: &LogicalPlan) -> bool {
    upsert_of(plan).is_some()
}

/// The upsert a plan is (upserts are planned at its root).
fn upsert_of(plan: &LogicalPlan) -> Option<&UpsertNode> {
    match plan {
        LogicalPlan::Extension(e) => e.node.as_any().downcast_ref::<UpsertNode>(),
        _ => None,
    }
}

/// Plans a statement as DataFusion does, and an INSERT with ON CONFLICT as
/// an upsert. A table or function it names that does not exist fails as
/// [`super::undefined::Undefined`].
pub async fn statement_to_plan(state: &SessionState, statement: Statement) -> Result<LogicalPlan> {
    // Kept for the failure's lookups: planning takes the statement apart.
    let named = statement.clone();
    plan_statement(state, statement)
        .await
        .map_err(|e| super::undefined::classify(state, &named, e))
}

async fn plan_statement(state: &SessionState, mut statement: Statement) -> Result<LogicalPlan> {
    // EXPLAIN [ANALYZE] of an upsert or a RETURNING: as planned here.
    if let Statement::Explain {
        statement: inner,
        analyze,
        verbose,
        ..
    } = &statement
        && (is_upsert(inner)
            || super::returning::returns_rows(inner)
            || super::dml_query::chosen_by_query(inner))
    {
        let (analyze, verbose) = (*analyze, *verbose);
        let Statement::Explain {
            statement: inner, ..
        } = statement
        else {
            return Err(DataFusionError::Internal("EXPLAIN changed".into()));
        };
        let plan = Box::pin(plan_statement(state, *inner)).await?;
        return datafusion::logical_expr::LogicalPlanBuilder::from(plan)
            .explain(verbose, analyze)?
            .build();
    }
    super::wildcard::hide_system_columns(state, &mut statement).await?;
    super::output_names::alias_repeats(&mut statement);
    super::column_listing::hide_system_columns(state, &mut statement).await?;
    super::insert_defaults::fill(state, &mut statement).await?;
    super::insert_source::flatten_nested_values(&mut statement)?;
    let returning = super::returning::take(&mut statement);
    let on_conflict = match &mut statement {
        Statement::Insert(Insert { on, .. }) if matches!(on, Some(OnInsert::OnConflict(_))) => {
            match on.take() {
                Some(OnInsert::OnConflict(c)) => Some(c),
                _ => None,
            }
        }
        _ => None,
    };
    // Boxed: it holds DataFusion's planning future, which this one holds
    // too; inline, every statement's planning would carry both.
    let plan = match Box::pin(super::dml_query::plan(state, &statement)).await? {
        Some(plan) => plan,
        None => {
            state
                .statement_to_plan(DfStatement::Statement(Box::new(statement)))
                .await?
        }
    };
    let plan = match on_conflict {
        Some(on_conflict) => upsert_plan(state, plan, on_conflict)?,
        None => plan,
    };
    match returning {
        Some(returning) => super::returning::plan(state, plan, returning),
        None => Ok(plan),
    }
}

/// The INSERT `plan` as an upsert doing what `on_conflict` says.
pub fn upsert_plan(
    state: &SessionState,
    plan: LogicalPlan,
    on_conflict: OnConflict,
) -> Result<LogicalPlan> {
    let LogicalPlan::Dml(insert) = plan else {
        return Err(DataFusionError::Plan(
            "ON CONFLICT belongs to an INSERT".into(),
        ));
    };
    if insert.op != WriteOp::Insert(InsertOp::Append) {
        return Err(DataFusionError::Plan(
            "ON CONFLICT belongs to a plain INSERT".into(),
        ));
    }
    let table = datafusion::datasource::source_as_provider(&insert.target)?;
    let any: &dyn std::any::Any = table.as_ref();
    let Some(def) = any
        .downcast_ref::<StoreTable>()
        .and_then(|t| t.layout().def.clone())
    else {
        return Err(DataFusionError::Plan(format!(
            "ON CONFLICT needs a mapped table; {} is not one",
            insert.table_name
        )));
    };
    let arbiter = check_target(&on_conflict, &def)?;
    let row_schema = Arc::new(row_schema(&insert)?);
    let on_existing = match on_conflict.action {
        OnConflictAction::DoNothing => OnExisting::Nothing(arbiter),
        OnConflictAction::DoUpdate(_) if arbiter != Arbiter::PrimaryKey => {
            return Err(DataFusionError::NotImplemented(format!(
                "ON CONFLICT ... DO UPDATE over a unique index's columns: name {}'s primary key ({}) as the conflict target",
                def.name,
                def.primary_key.join(", ")
            )));
        }
        OnConflictAction::DoUpdate(update) => {
            let mut assignments = Vec::new();
            for a in update.assignments {
                let column = assignment_column(&a.target)?;
                if !def.columns.iter().any(|c| c.name == column) {
                    return Err(DataFusionError::Plan(format!(
                        "column \"{column}\" of relation \"{}\" does not exist",
                        def.name
                    )));
                }
                assignments.push((
                    column,
                    logical_expr(state, a.value, &def.name, &row_schema)?,
                ));
            }
            let filter = match update.selection {
                Some(e) => Some(logical_expr(state, e, &def.name, &row_schema)?),
                None => None,
            };
            OnExisting::Update {
                assignments,
                filter,
            }
        }
    };
    Ok(LogicalPlan::Extension(
        datafusion::logical_expr::Extension {
            node: Arc::new(UpsertNode {
                insert,
                on_existing,
                row_schema,
            }),
        },
    ))
}

fn is_upsert(statement: &Statement) -> bool {
    matches!(
        statement,
        Statement::Insert(Insert {
            on: Some(OnInsert::OnConflict(_)),
            ..
        })
    )
}

/// The arbiter the conflict target names: the primary key (its columns,
/// or `<table>_pkey`), a unique index (its columns, in any order, as
/// PostgreSQL infers it), or with no target (`DO NOTHING` only) any.
fn check_target(on_conflict: &OnConflict, def: &TableDef) -> Result<Arbiter> {
    let sorted = |mut v: Vec<String>| {
        v.sort();
        v
    };
    let found = match &on_conflict.conflict_target {
        None => matches!(on_conflict.action, OnConflictAction::DoNothing).then_some(Arbiter::Any),
        Some(ConflictTarget::Columns(columns)) => {
            let named = sorted(
                columns
                    .iter()
                    .map(crate::catalog::normalize_ident)
                    .collect(),
            );
            if named == sorted(def.primary_key.clone()) {
                Some(Arbiter::PrimaryKey)
            } else {
                def.global_indexes
                    .iter()
                    .filter(|g| g.unique.is_some() && !g.building)
                    .find(|g| sorted(g.indexed_columns(&def.primary_key)) == named)
                    .map(|g| Arbiter::Unique(g.name.clone()))
            }
        }
        Some(ConflictTarget::OnConstraint(name)) => name
            .0
            .last()
            .and_then(|p| p.as_ident())
            .filter(|i| crate::catalog::normalize_ident(i) == format!("{}_pkey", def.name))
            .map(|_| Arbiter::PrimaryKey),
    };
    found.ok_or_else(|| {
        DataFusionError::Plan(format!(
            "there is no unique or exclusion constraint matching the ON CONFLICT specification: {}'s unique keys are its primary key ({}) and its unique indexes",
            def.name,
            def.primary_key.join(", ")
        ))
    })
}

/// The table's columns under its name, then the same as `excluded`, every
/// one nullable (the proposed row has no system columns).
fn row_schema(insert: &DmlStatement) -> Result<DFSchema> {
    let fields: Vec<datafusion::arrow::datatypes::Field> = insert
        .target
        .schema()
        .fields()
        .iter()
        .map(|f| f.as_ref().clone().with_nullable(true))
        .collect();
    let table = datafusion::arrow::datatypes::Schema::new(fields);
    let stored = DFSchema::try_from_qualified_schema(insert.table_name.clone(), &table)?;
    let excluded = DFSchema::try_from_qualified_schema(TableReference::bare(EXCLUDED), &table)?;
    let mut schema = stored;
    schema.merge(&excluded);
    Ok(schema)
}

/// An expression of `DO UPDATE`, planned and type-coerced over `schema`. A
/// bare column name is the stored row's, as in PostgreSQL (`excluded.age`
/// names the proposed one).
fn logical_expr(
    state: &SessionState,
    mut e: SqlExpr,
    table: &str,
    schema: &DFSchema,
) -> Result<Expr> {
    let _ = visit_expressions_mut(&mut e, |e: &mut SqlExpr| {
        if let SqlExpr::Identifier(ident) = e {
            *e = SqlExpr::CompoundIdentifier(vec![Ident::with_quote('"', table), ident.clone()]);
        }
        ControlFlow::<()>::Continue(())
    });
    let expr = state.create_logical_expr(&e.to_string(), schema)?;
    Ok(expr.rewrite(&mut TypeCoercionRewriter::new(schema))?.data)
}

/// The column an assignment sets.
pub(super) fn assignment_column(target: &AssignmentTarget) -> Result<String> {
    match target {
        AssignmentTarget::ColumnName(name) => name
            .0
            .last()
            .and_then(|p| p.as_ident())
            .map(crate::catalog::normalize_ident)
            .ok_or_else(|| DataFusionError::Plan(format!("bad assignment target {name}"))),
        AssignmentTarget::Tuple(_) => Err(DataFusionError::NotImplemented(
            "SET (a, b) = (...) in ON CONFLICT DO UPDATE: assign each column".into(),
        )),
    }
}
