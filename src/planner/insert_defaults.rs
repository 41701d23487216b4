//! `INSERT ... VALUES (DEFAULT, ...)`: DataFusion fills the defaults of
//! columns an INSERT leaves out, but reads a `DEFAULT` cell as a column
//! named "default". Before planning, each such cell of a mapped table
//! becomes the column's `DEFAULT` expression (or NULL), as PostgreSQL
//! does.

use datafusion::common::TableReference;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::session_state::SessionState;
use datafusion::sql::sqlparser::ast::{
    Expr, Ident, Insert, ObjectName, SetExpr, Statement, TableObject, Value, ValueWithSpan,
};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;

use super::StoreTable;
use crate::catalog::normalize_ident;

fn is_default(e: &Expr) -> bool {
    matches!(e, Expr::Identifier(i) if i.quote_style.is_none() && i.value.eq_ignore_ascii_case("default"))
}

/// Before planning an `INSERT` into a mapped table: without a column list,
/// the values are for the table's own columns in order, the leading ones
/// when there are fewer, as in PostgreSQL (DataFusion would count the
/// system columns `PartitionKey`, `RowKey`, `Timestamp` and `_etag` too);
/// and each `DEFAULT` cell of its `VALUES` is replaced. Any other statement
/// is left alone.
pub async fn fill(state: &SessionState, statement: &mut Statement) -> Result<()> {
    let Statement::Insert(Insert {
        table: TableObject::TableName(name),
        columns,
        source: Some(source),
        ..
    }) = statement
    else {
        return Ok(());
    };
    let reference = TableReference::from(name.to_string().as_str());
    let provider = state
        .schema_for_ref(reference.clone())?
        .table(reference.table())
        .await?;
    let Some(table) = provider
        .as_ref()
        .and_then(|p| (p.as_ref() as &dyn std::any::Any).downcast_ref::<StoreTable>())
    else {
        return Ok(());
    };
    let Some(def) = table.layout().def.as_deref() else {
        return Ok(());
    };
    let values = match source.body.as_mut() {
        SetExpr::Values(values) => Some(values),
        _ => None,
    };
    if columns.is_empty() {
        // A wider row is DataFusion's error to report, against every column.
        let width = values
            .as_ref()
            .and_then(|v| v.rows.first())
            .map_or(def.columns.len(), |r| r.content.len());
        if width <= def.columns.len() {
            *columns = def.columns[..width]
                .iter()
                .map(|c| ObjectName::from(vec![Ident::with_quote('"', c.name.clone())]))
                .collect();
        }
    }
    let Some(values) = values else {
        return Ok(());
    };
    if !values
        .rows
        .iter()
        .flat_map(|r| r.content.iter())
        .any(is_default)
    {
        return Ok(());
    }
    // The columns the cells are for: the list given, or the table's order.
    let targets: Vec<String> = if columns.is_empty() {
        table
            .layout()
            .schema
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect()
    } else {
        columns
            .iter()
            .map(|c| {
                c.0.last()
                    .and_then(|p| p.as_ident())
                    .map(normalize_ident)
                    .unwrap_or_default()
            })
            .collect()
    };
    for row in values.rows.iter_mut() {
        for (cell, target) in row.content.iter_mut().zip(&targets) {
            if !is_default(cell) {
                continue;
            }
            let default = def
                .columns
                .iter()
                .find(|c| c.name == *target)
                .and_then(|c| c.default.as_deref());
            *cell = match default {
                Some(text) => Parser::new(&PostgreSqlDialect {})
                    .try_with_sql(text)
                    .and_then(|mut p| p.parse_expr())
                    .map_err(|e| DataFusionError::Plan(format!("DEFAULT of {target}: {e}")))?,
                None => Expr::Value(ValueWithSpan::from(Value::Null)),
            };
        }
    }
    Ok(())
}
