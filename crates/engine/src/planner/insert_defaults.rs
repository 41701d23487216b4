//! An `INSERT` into a mapped table, made what PostgreSQL reads before
//! DataFusion plans it. Without a column list, its values are for the
//! table's own columns in order, the leading ones when a row has fewer
//! (DataFusion would count the system columns `PartitionKey`, `RowKey`,
//! `Timestamp` and `_etag` too). And a `DEFAULT` cell of its `VALUES`, which
//! DataFusion reads as a column named "default", becomes the column's
//! `DEFAULT` expression (or NULL).

use datafusion::common::TableReference;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::session_state::SessionState;
use datafusion::sql::sqlparser::ast::{
    Expr, Ident, Insert, ObjectName, Query, SelectItem, SetExpr, Statement, TableObject, Value,
    ValueWithSpan,
};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;

use super::StoreTable;
use crate::catalog::normalize_ident;

fn is_default(e: &Expr) -> bool {
    matches!(e, Expr::Identifier(i) if i.quote_style.is_none() && i.value.eq_ignore_ascii_case("default"))
}

/// The values in each row of an INSERT's source, where its text says: the
/// first `VALUES` row's, or a plain `SELECT`'s items when none is a wildcard.
fn source_width(source: &Query) -> Option<usize> {
    match source.body.as_ref() {
        SetExpr::Values(v) => v.rows.first().map(|r| r.content.len()),
        SetExpr::Select(s)
            if !s.projection.iter().any(|i| {
                matches!(
                    i,
                    SelectItem::Wildcard(_) | SelectItem::QualifiedWildcard(..)
                )
            }) =>
        {
            Some(s.projection.len())
        }
        _ => None,
    }
}

/// Names the columns of an `INSERT` (or `EXPLAIN` of one) into a mapped
/// table that gives none, and replaces its `DEFAULT` cells (see the module
/// doc). Any other statement is left alone.
pub async fn fill(state: &SessionState, statement: &mut Statement) -> Result<()> {
    if let Statement::Explain { statement, .. } = statement {
        return Box::pin(fill(state, statement.as_mut())).await;
    }
    let Statement::Insert(Insert {
        table: TableObject::TableName(name),
        columns,
        source: Some(source),
        ..
    }) = statement
    else {
        return Ok(());
    };
    let defaults = matches!(source.body.as_ref(), SetExpr::Values(v)
        if v.rows.iter().flat_map(|r| r.content.iter()).any(is_default));
    if !columns.is_empty() && !defaults {
        return Ok(());
    }
    let reference = TableReference::from(name.to_string().as_str());
    let provider = state
        .schema_for_ref(reference.clone())?
        .table(reference.table())
        .await?;
    let Some(table) = provider.as_ref().and_then(|p| StoreTable::of(p.as_ref())) else {
        return Ok(());
    };
    let Some(def) = table.layout().def.as_deref() else {
        return Ok(());
    };
    if columns.is_empty() {
        // A wider row gets every column, and DataFusion's count mismatch.
        // A hidden row key (`HIDDEN_ROWID`) is generated, never given.
        let visible: Vec<&crate::catalog::ColumnDef> = def.visible_columns().collect();
        let width = source_width(source)
            .unwrap_or(visible.len())
            .min(visible.len());
        *columns = visible[..width]
            .iter()
            .map(|c| ObjectName::from(vec![Ident::with_quote('"', c.name.clone())]))
            .collect();
    }
    let SetExpr::Values(values) = source.body.as_mut() else {
        return Ok(());
    };
    if !defaults {
        return Ok(());
    }
    // The columns the cells are for, in order.
    let targets: Vec<String> = columns
        .iter()
        .map(|c| {
            c.0.last()
                .and_then(|p| p.as_ident())
                .map(normalize_ident)
                .unwrap_or_default()
        })
        .collect();
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
