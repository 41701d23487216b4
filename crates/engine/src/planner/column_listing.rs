//! `information_schema.columns` as PostgreSQL lists a table's columns: a
//! mapped table's system columns (`PartitionKey`, `RowKey`, `Timestamp`,
//! `_etag`) and a hidden row key stay selectable by name but are not its
//! columns to a tool that lists them, as `ctid` and `xmin` are not in
//! PostgreSQL's (`pg_attribute` does the same: `server::pg_catalog`).
//! DataFusion builds the view from each table's schema, inside its session
//! state, where nothing can filter it; so before DataFusion plans a
//! statement that reads it, each reference becomes the same view with
//! those rows left out, under the name the statement gave it. Raw storage
//! tables keep their keys: they are the only way to tell their rows apart.

use std::ops::ControlFlow;

use datafusion::catalog::SchemaProvider;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::session_state::SessionState;
use datafusion::sql::sqlparser::ast::{
    Ident, Statement, TableAlias, TableFactor, Visit, VisitMut, Visitor, VisitorMut,
};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;

use super::StoreTable;
use crate::catalog::normalize_ident;

/// Rewrites every reference to `information_schema.columns` in
/// `statement` (see the module doc); statements without one are left
/// alone unread.
pub async fn hide_system_columns(state: &SessionState, statement: &mut Statement) -> Result<()> {
    let mut finds = Finds(false);
    let _ = Visit::visit(&*statement, &mut finds);
    if !finds.0 {
        return Ok(());
    }
    let Some(condition) = hidden_condition(state).await? else {
        return Ok(());
    };
    let sql = format!("SELECT * FROM information_schema.columns WHERE NOT ({condition})");
    let listing = Parser::new(&PostgreSqlDialect {})
        .try_with_sql(&sql)
        .and_then(|mut p| p.parse_query())
        .map_err(|e| DataFusionError::Plan(format!("the column listing: {e}")))?;
    let _ = VisitMut::visit(statement, &mut Rewrite { listing: *listing });
    Ok(())
}

/// Whether a relation's name is `information_schema.columns`, with or
/// without its catalog.
fn is_columns(name: &datafusion::sql::sqlparser::ast::ObjectName) -> bool {
    let parts: Vec<String> = name
        .0
        .iter()
        .filter_map(|p| p.as_ident().map(normalize_ident))
        .collect();
    matches!(
        parts
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>()
            .as_slice(),
        [.., "information_schema", "columns"]
    )
}

struct Finds(bool);

impl Visitor for Finds {
    type Break = ();

    fn pre_visit_relation(
        &mut self,
        relation: &datafusion::sql::sqlparser::ast::ObjectName,
    ) -> ControlFlow<()> {
        if is_columns(relation) {
            self.0 = true;
            return ControlFlow::Break(());
        }
        ControlFlow::Continue(())
    }
}

/// The rows of the listing that are not a table's own columns: per mapped
/// table of `public`, its hidden columns. `None` when there is none.
async fn hidden_condition(state: &SessionState) -> Result<Option<String>> {
    let public = state.schema_for_ref("public.x")?;
    let quote = |s: &str| format!("'{}'", s.replace('\'', "''"));
    let mut terms = Vec::new();
    for name in public.table_names() {
        let Some(table) = SchemaProvider::table(public.as_ref(), &name).await? else {
            continue;
        };
        let Some(def) = StoreTable::of(table.as_ref()).and_then(|t| t.layout().def.clone()) else {
            continue;
        };
        let hidden: Vec<String> = def.hidden_columns().into_iter().map(quote).collect();
        terms.push(format!(
            "(table_name = {} AND column_name IN ({}))",
            quote(&name),
            hidden.join(", ")
        ));
    }
    if terms.is_empty() {
        return Ok(None);
    }
    Ok(Some(format!(
        "table_schema = 'public' AND ({})",
        terms.join(" OR ")
    )))
}

struct Rewrite {
    listing: datafusion::sql::sqlparser::ast::Query,
}

impl VisitorMut for Rewrite {
    type Break = ();

    fn post_visit_table_factor(&mut self, factor: &mut TableFactor) -> ControlFlow<()> {
        let TableFactor::Table { name, alias, .. } = factor else {
            return ControlFlow::Continue(());
        };
        if !is_columns(name) {
            return ControlFlow::Continue(());
        }
        let alias = alias.take().unwrap_or_else(|| TableAlias {
            explicit: true,
            name: Ident::new("columns"),
            columns: Vec::new(),
            at: None,
        });
        *factor = TableFactor::Derived {
            lateral: false,
            subquery: Box::new(self.listing.clone()),
            alias: Some(alias),
            sample: None,
        };
        ControlFlow::Continue(())
    }
}
