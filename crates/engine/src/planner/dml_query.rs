//! DELETE and UPDATE whose rows a query chooses: `WHERE id IN (SELECT ...)`,
//! `EXISTS (...)`, `UPDATE ... FROM`, `DELETE ... USING`, a subquery in a
//! SET. DataFusion hands a table provider's `delete_from` and `update` only
//! the filters on the table's own columns, so such a choice would be lost
//! (`dml_shape.rs` refuses it on that path). Here the statement becomes the
//! query it implies, planned by DataFusion like any SELECT (subqueries,
//! joins and all):
//!
//! - `DELETE FROM t AS a [USING u] WHERE c` reads
//!   `SELECT a.<every column of t, system columns too> FROM t AS a [, u] WHERE c`;
//! - `UPDATE t AS a SET x = e [FROM f] WHERE c` reads the same columns and
//!   `e AS <a column of its own>` per assignment.
//!
//! A [`DmlQueryNode`] over that query becomes a `DmlExec` that deletes or
//! rewrites each row the query yields, If-Match the ETag it read, as a
//! plain DELETE or UPDATE does. It reads the query to the end before the
//! first write (a subquery may read the table being written), and a row the
//! query yields twice (a join that matches it twice) is written once, with
//! the first values, as PostgreSQL leaves the choice open.

use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::ControlFlow;
use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::common::{DFSchema, DFSchemaRef, TableReference};
use datafusion::datasource::provider_as_source;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::session_state::SessionState;
use datafusion::logical_expr::{
    Expr, Extension, LogicalPlan, TableSource, UserDefinedLogicalNodeCore,
};
use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::sqlparser::ast::{
    Delete, Expr as SqlExpr, FromTable, ObjectName, Query, Statement, TableFactor, TableWithJoins,
    Update, UpdateTableFromKind, Visit, Visitor,
};

use super::StoreTable;

/// What a [`DmlQueryNode`] does with each row its query yields.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum QueryWrite {
    Delete,
    /// Sets these columns, each to the value the query yields after the
    /// table's columns (the first to the first of those, and so on).
    Update {
        columns: Vec<String>,
    },
}

/// A DELETE or UPDATE of `table` whose rows `input` chooses (module doc).
#[derive(Clone)]
pub struct DmlQueryNode {
    pub table_name: TableReference,
    pub target: Arc<dyn TableSource>,
    pub op: QueryWrite,
    pub input: Arc<LogicalPlan>,
    schema: DFSchemaRef,
}

impl fmt::Debug for DmlQueryNode {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.debug_struct("DmlQueryNode")
            .field("table_name", &self.table_name)
            .field("op", &self.op)
            .finish()
    }
}

impl PartialEq for DmlQueryNode {
    fn eq(&self, other: &Self) -> bool {
        self.table_name == other.table_name && self.op == other.op && self.input == other.input
    }
}

impl Eq for DmlQueryNode {}

impl Hash for DmlQueryNode {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.table_name.hash(state);
        self.op.hash(state);
        self.input.hash(state);
    }
}

impl PartialOrd for DmlQueryNode {
    fn partial_cmp(&self, _other: &Self) -> Option<Ordering> {
        None
    }
}

impl UserDefinedLogicalNodeCore for DmlQueryNode {
    fn name(&self) -> &str {
        "DmlQuery"
    }

    fn inputs(&self) -> Vec<&LogicalPlan> {
        vec![self.input.as_ref()]
    }

    fn schema(&self) -> &DFSchemaRef {
        &self.schema
    }

    fn expressions(&self) -> Vec<Expr> {
        Vec::new()
    }

    fn fmt_for_explain(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match &self.op {
            QueryWrite::Delete => write!(f, "DmlQuery: delete {}", self.table_name),
            QueryWrite::Update { columns } => write!(
                f,
                "DmlQuery: update {} set=[{}]",
                self.table_name,
                columns.join(", ")
            ),
        }
    }

    fn with_exprs_and_inputs(
        &self,
        _exprs: Vec<Expr>,
        mut inputs: Vec<LogicalPlan>,
    ) -> Result<Self> {
        let input = inputs
            .pop()
            .ok_or_else(|| DataFusionError::Internal("DmlQuery has one input".into()))?;
        Ok(Self {
            input: Arc::new(input),
            ..self.clone()
        })
    }

    // Every column the query yields is the write's: none can be pruned.
    fn necessary_children_exprs(&self, _output_columns: &[usize]) -> Option<Vec<Vec<usize>>> {
        None
    }
}

/// Whether a statement is a DELETE or UPDATE whose rows a query chooses.
pub fn chosen_by_query(statement: &Statement) -> bool {
    match statement {
        Statement::Delete(d) => d.using.is_some() || d.selection.as_ref().is_some_and(has_query),
        Statement::Update(u) => {
            u.from.is_some()
                || u.selection.as_ref().is_some_and(has_query)
                || u.assignments.iter().any(|a| has_query(&a.value))
        }
        _ => false,
    }
}

/// The plan of a DELETE or UPDATE whose rows a query chooses; `None` for
/// any other statement (a DELETE or UPDATE whose WHERE is on the table's
/// own columns takes DataFusion's path, where the pushdown reads it).
pub async fn plan(state: &SessionState, statement: &Statement) -> Result<Option<LogicalPlan>> {
    if !chosen_by_query(statement) {
        return Ok(None);
    }
    let (relation, others, selection, op, sets) = match statement {
        Statement::Delete(Delete {
            from,
            using,
            selection,
            tables,
            limit,
            order_by,
            ..
        }) => {
            let from = match from {
                FromTable::WithFromKeyword(t) | FromTable::WithoutKeyword(t) => t,
            };
            if !tables.is_empty() || limit.is_some() || !order_by.is_empty() || from.len() != 1 {
                return Err(DataFusionError::NotImplemented(
                    "DELETE of several tables, or with ORDER BY or LIMIT, is not supported".into(),
                ));
            }
            let others: Vec<&TableWithJoins> = using.iter().flatten().collect();
            (
                &from[0],
                others,
                selection.as_ref(),
                QueryWrite::Delete,
                Vec::new(),
            )
        }
        Statement::Update(Update {
            table,
            assignments,
            from,
            selection,
            limit,
            order_by,
            ..
        }) => {
            if limit.is_some() || !order_by.is_empty() {
                return Err(DataFusionError::NotImplemented(
                    "UPDATE with ORDER BY or LIMIT is not supported".into(),
                ));
            }
            let others: Vec<&TableWithJoins> = match from {
                Some(UpdateTableFromKind::AfterSet(t) | UpdateTableFromKind::BeforeSet(t)) => {
                    t.iter().collect()
                }
                None => Vec::new(),
            };
            let mut columns = Vec::new();
            let mut values = Vec::new();
            for a in assignments {
                columns.push(super::upsert::assignment_column(&a.target)?);
                values.push(a.value.to_string());
            }
            (
                table,
                others,
                selection.as_ref(),
                QueryWrite::Update { columns },
                values,
            )
        }
        _ => return Ok(None),
    };
    let (name, alias) = match &relation.relation {
        TableFactor::Table { name, alias, .. } if relation.joins.is_empty() => {
            (name, alias.as_ref().map(|a| &a.name))
        }
        _ => {
            return Err(DataFusionError::NotImplemented(format!(
                "{} of {relation} is not supported: name one table",
                if op == QueryWrite::Delete {
                    "DELETE"
                } else {
                    "UPDATE"
                }
            )));
        }
    };
    let table_name = reference(name)?;
    let provider = state
        .schema_for_ref(table_name.clone())?
        .table(table_name.table())
        .await?
        .ok_or_else(|| DataFusionError::Plan(format!("table {name} does not exist")))?;
    let Some(store_table) = StoreTable::of(provider.as_ref()) else {
        return Err(DataFusionError::Plan(format!(
            "{name} is not a mapped table: only mapped tables are written"
        )));
    };
    if let QueryWrite::Update { columns } = &op {
        for c in columns {
            if store_table
                .layout()
                .def
                .as_ref()
                .and_then(|d| d.column(c))
                .is_none()
            {
                return Err(DataFusionError::Plan(format!(
                    "column \"{c}\" of relation \"{name}\" does not exist"
                )));
            }
        }
    }
    // The query: the target's every column, by the name the statement gives
    // it, then each assignment's value.
    let qualifier = match alias {
        Some(a) => a.to_string(),
        None => name.to_string(),
    };
    let mut items: Vec<String> = store_table
        .layout()
        .schema
        .fields()
        .iter()
        .map(|f| format!("{qualifier}.\"{}\"", f.name().replace('"', "\"\"")))
        .collect();
    items.extend(
        sets.iter()
            .enumerate()
            .map(|(i, v)| format!("{v} AS \"__tablesql_set_{i}\"")),
    );
    let mut from = vec![relation.to_string()];
    from.extend(others.iter().map(ToString::to_string));
    let mut sql = format!("SELECT {} FROM {}", items.join(", "), from.join(", "));
    if let Some(s) = selection {
        sql.push_str(&format!(" WHERE {s}"));
    }
    let query = super::sql::parse_query(&sql)
        .map_err(|e| DataFusionError::Plan(format!("the rows of the statement: {e}")))?;
    let input = state
        .statement_to_plan(DfStatement::Statement(Box::new(Statement::Query(
            Box::new(query),
        ))))
        .await?;
    let count = Schema::new(vec![Field::new("count", DataType::UInt64, false)]);
    Ok(Some(LogicalPlan::Extension(Extension {
        node: Arc::new(DmlQueryNode {
            table_name,
            target: provider_as_source(provider),
            op,
            input: Arc::new(input),
            schema: Arc::new(DFSchema::try_from(count)?),
        }),
    })))
}

fn reference(name: &ObjectName) -> Result<TableReference> {
    let parts: Vec<String> = name
        .0
        .iter()
        .map(|p| p.as_ident().map(crate::catalog::normalize_ident))
        .collect::<Option<_>>()
        .ok_or_else(|| DataFusionError::Plan(format!("invalid table name {name}")))?;
    Ok(match parts.as_slice() {
        [t] => TableReference::bare(t.as_str()),
        [s, t] => TableReference::partial(s.as_str(), t.as_str()),
        [c, s, t] => TableReference::full(c.as_str(), s.as_str(), t.as_str()),
        _ => return Err(DataFusionError::Plan(format!("invalid table name {name}"))),
    })
}

/// Whether an expression holds a subquery.
fn has_query(e: &SqlExpr) -> bool {
    struct Finds(bool);
    impl Visitor for Finds {
        type Break = ();
        fn pre_visit_query(&mut self, _q: &Query) -> ControlFlow<()> {
            self.0 = true;
            ControlFlow::Break(())
        }
    }
    let mut finds = Finds(false);
    let _ = e.visit(&mut finds);
    finds.0
}
