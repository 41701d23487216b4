//! A table or function a statement names that does not exist, found by
//! asking the catalog, not by reading DataFusion's message.
//!
//! DataFusion 55 reports a relation or a function it cannot find as `Plan`
//! text ("table 'x' not found", "Invalid function 'f'"), and clients need
//! them as distinct SQLSTATEs: a migration tool creates a table when its
//! probe fails with 42P01, and a driver tells a missing function (42883)
//! from a typo in the SQL (42601). Codes read off the text would follow
//! wording that changes between DataFusion releases. So when planning fails
//! with DataFusion's own `Plan` error, the statement's relations are looked
//! up in the session's catalog and then its function calls in its registry,
//! the order PostgreSQL resolves them in; the first one missing becomes an
//! [`Undefined`], which carries DataFusion's message and knows its code.
//! Only a statement that failed pays for the lookups.

use std::ops::ControlFlow;

use datafusion::error::DataFusionError;
use datafusion::execution::session_state::SessionState;
use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::sqlparser::ast::{
    Expr, FunctionArguments, ObjectNamePart, Statement, visit_expressions,
};

use crate::sqlstate;

/// Function names DataFusion's SQL planner answers itself, before its
/// registry (`datafusion-sql`'s `sql_function_to_expr`).
const PLANNED_BY_NAME: [&str; 4] = ["make_map", "map", "unnest", "unnest_outer"];

/// What a statement named that the session does not have.
#[derive(Debug, thiserror::Error)]
pub enum Undefined {
    /// A relation that is neither a table, a view nor a table function.
    #[error("{message}")]
    Table {
        /// The name as the statement resolved it.
        name: String,
        /// DataFusion's message.
        message: String,
    },
    /// A function that no registry of the session holds.
    #[error("{message}")]
    Function {
        /// The name as DataFusion looks it up.
        name: String,
        /// DataFusion's message.
        message: String,
    },
}

impl Undefined {
    /// 42P01 or 42883, as PostgreSQL answers.
    pub fn sqlstate(&self) -> &'static str {
        match self {
            Undefined::Table { .. } => sqlstate::UNDEFINED_TABLE,
            Undefined::Function { .. } => sqlstate::UNDEFINED_FUNCTION,
        }
    }
}

/// `error`, from planning `statement` under `state`: as an [`Undefined`]
/// (wrapped as DataFusion carries ours) when it is DataFusion's own `Plan`
/// error and the statement names a relation or function the session lacks;
/// else unchanged.
pub fn classify(
    state: &SessionState,
    statement: &Statement,
    error: DataFusionError,
) -> DataFusionError {
    let Some(message) = plan_message(&error) else {
        return error;
    };
    let message = message.to_owned();
    let undefined = missing_relation(state, statement)
        .map(|name| Undefined::Table {
            name,
            message: message.clone(),
        })
        .or_else(|| {
            missing_function(state, statement).map(|name| Undefined::Function { name, message })
        });
    match undefined {
        Some(u) => DataFusionError::External(Box::new(u)),
        None => error,
    }
}

/// The message of DataFusion's own `Plan` error, under the diagnostics and
/// context it wraps it in; `None` for any other error (ours among them).
fn plan_message(error: &DataFusionError) -> Option<&str> {
    match error {
        DataFusionError::Plan(m) => Some(m),
        DataFusionError::Diagnostic(_, inner) | DataFusionError::Context(_, inner) => {
            plan_message(inner)
        }
        _ => None,
    }
}

/// The first relation of `statement` (CTEs aside) that no schema of the
/// session holds and that is no table function.
fn missing_relation(state: &SessionState, statement: &Statement) -> Option<String> {
    let references = state
        .resolve_table_references(&DfStatement::Statement(Box::new(statement.clone())))
        .ok()?;
    references.into_iter().find_map(|reference| {
        let table = reference.table().to_owned();
        let found = state
            .schema_for_ref(reference.clone())
            .is_ok_and(|schema| schema.table_exist(&table));
        let function = reference.schema().is_none() && state.table_functions().contains_key(&table);
        (!found && !function).then(|| reference.to_string())
    })
}

/// The first function `statement` calls that no registry of the session
/// holds, its name normalized as DataFusion looks it up.
fn missing_function(state: &SessionState, statement: &Statement) -> Option<String> {
    let normalize = state.config_options().sql_parser.enable_ident_normalization;
    let found = visit_expressions(statement, |expr| {
        let Expr::Function(f) = expr else {
            return ControlFlow::Continue(());
        };
        // Without parentheses it may be a column (`current_user`).
        if matches!(f.args, FunctionArguments::None) {
            return ControlFlow::Continue(());
        }
        let name = match f.name.0.as_slice() {
            [ObjectNamePart::Identifier(ident)] if normalize && ident.quote_style.is_none() => {
                ident.value.to_lowercase()
            }
            [ObjectNamePart::Identifier(ident)] => ident.value.clone(),
            _ => f.name.to_string(),
        };
        if known(state, &name) {
            ControlFlow::Continue(())
        } else {
            ControlFlow::Break(name)
        }
    });
    match found {
        ControlFlow::Break(name) => Some(name),
        ControlFlow::Continue(()) => None,
    }
}

/// Whether DataFusion's SQL planner can plan a call of `name`.
fn known(state: &SessionState, name: &str) -> bool {
    PLANNED_BY_NAME.contains(&name)
        || state.scalar_functions().contains_key(name)
        || state.aggregate_functions().contains_key(name)
        || state.window_functions().contains_key(name)
        || state.higher_order_functions().contains_key(name)
}

#[cfg(test)]
mod tests {
    use datafusion::prelude::SessionContext;
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion::sql::sqlparser::parser::Parser;

    use super::*;

    async fn planned(ctx: &SessionContext, sql: &str) -> DataFusionError {
        let statement = Parser::parse_sql(&PostgreSqlDialect {}, sql)
            .expect("parses")
            .remove(0);
        let state = ctx.state();
        let error = state
            .statement_to_plan(DfStatement::Statement(Box::new(statement.clone())))
            .await
            .expect_err("fails to plan");
        classify(&state, &statement, error)
    }

    fn code(e: &DataFusionError) -> Option<&'static str> {
        match e {
            DataFusionError::External(x) => x.downcast_ref::<Undefined>().map(Undefined::sqlstate),
            _ => None,
        }
    }

    #[tokio::test]
    async fn a_missing_table_or_function_is_found_in_the_catalog_not_the_message() {
        let ctx = SessionContext::new();
        ctx.sql("CREATE TABLE t (a INT)").await.expect("table");
        let no_table = planned(&ctx, "SELECT a FROM nowhere").await;
        assert_eq!(code(&no_table), Some(sqlstate::UNDEFINED_TABLE));
        assert!(no_table.to_string().contains("nowhere"));
        // Relations first, as PostgreSQL resolves them.
        let both = planned(&ctx, "SELECT no_such_fn(a) FROM nowhere").await;
        assert_eq!(code(&both), Some(sqlstate::UNDEFINED_TABLE));
        let no_function = planned(&ctx, "SELECT no_such_fn(a) FROM t").await;
        assert_eq!(code(&no_function), Some(sqlstate::UNDEFINED_FUNCTION));
        // A CTE, a table function and known functions are there.
        let there = Parser::parse_sql(
            &PostgreSqlDialect {},
            "WITH w AS (SELECT 1 AS x) SELECT abs(x), count(*) OVER () FROM w, generate_series(1, 2)",
        )
        .expect("parses")
        .remove(0);
        let state = ctx.state();
        assert_eq!(missing_relation(&state, &there), None);
        assert_eq!(missing_function(&state, &there), None);
        // Another failure of planning stays as it was.
        let other = planned(&ctx, "SELECT b FROM t").await;
        assert_eq!(code(&other), None, "{other}");
    }
}
