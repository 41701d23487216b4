//! `pg_tables` and `pg_views`, from `pg_class`'s relation kinds.
//! datafusion-pg-catalog lists every relation in `pg_tables`, views among
//! them, and has `pg_views` empty; dbt reads both to learn what each
//! relation is, and then drops a view with `DROP TABLE` (PostgreSQL, and
//! tablesql, refuse that) and renames it as a table.

use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::catalog::CatalogProvider;
use datafusion::error::Result;
use datafusion::scalar::ScalarValue;
use datafusion::sql::sqlparser::ast::Statement;

use super::relations::{Relations, rows_batch};

/// Who owns every relation here.
const OWNER: &str = "postgres";

pub fn pg_tables_schema() -> SchemaRef {
    let text = |name: &str, nullable| Field::new(name, DataType::Utf8, nullable);
    let flag = |name: &str| Field::new(name, DataType::Boolean, false);
    Arc::new(Schema::new(vec![
        text("schemaname", false),
        text("tablename", false),
        text("tableowner", false),
        text("tablespace", true),
        flag("hasindexes"),
        flag("hasrules"),
        flag("hastriggers"),
        flag("rowsecurity"),
    ]))
}

pub fn pg_views_schema() -> SchemaRef {
    Arc::new(Schema::new(
        ["schemaname", "viewname", "viewowner", "definition"]
            .map(|name| Field::new(name, DataType::Utf8, true))
            .to_vec(),
    ))
}

/// The tables (`relkind` `r` and `p`), in name order.
pub fn pg_tables(relations: &Relations) -> Result<RecordBatch> {
    let mut tables: Vec<_> = relations
        .tables
        .iter()
        .filter(|(_, r)| r.kind == "r" || r.kind == "p")
        .collect();
    tables.sort_by(|a, b| (&a.1.schema, &a.1.name).cmp(&(&b.1.schema, &b.1.name)));
    let rows: Vec<_> = tables
        .into_iter()
        .map(|(oid, r)| {
            let indexed = relations.indexes.iter().any(|ix| ix.table == *oid);
            vec![
                ("schemaname", ScalarValue::from(r.schema.as_str())),
                ("tablename", ScalarValue::from(r.name.as_str())),
                ("tableowner", ScalarValue::from(OWNER)),
                ("tablespace", ScalarValue::Utf8(None)),
                ("hasindexes", ScalarValue::from(indexed)),
            ]
        })
        .collect();
    rows_batch(&pg_tables_schema(), &rows)
}

/// The views, each with its query as `catalog` has it, in name order.
pub async fn pg_views(
    relations: &Relations,
    catalog: Option<Arc<dyn CatalogProvider>>,
) -> Result<RecordBatch> {
    let mut views: Vec<_> = relations
        .tables
        .values()
        .filter(|r| r.kind == "v")
        .collect();
    views.sort_by(|a, b| (&a.schema, &a.name).cmp(&(&b.schema, &b.name)));
    let mut rows = Vec::new();
    for r in views {
        let provider = match catalog.as_ref().and_then(|c| c.schema(&r.schema)) {
            Some(schema) => schema.table(&r.name).await?,
            None => None,
        };
        let definition = provider
            .as_ref()
            .and_then(|p| p.get_table_definition())
            .and_then(query_of);
        rows.push(vec![
            ("schemaname", ScalarValue::from(r.schema.as_str())),
            ("viewname", ScalarValue::from(r.name.as_str())),
            ("viewowner", ScalarValue::from(OWNER)),
            ("definition", ScalarValue::Utf8(definition)),
        ]);
    }
    rows_batch(&pg_views_schema(), &rows)
}

/// The query of a `CREATE VIEW` statement, as PostgreSQL shows a view's
/// definition (without the `CREATE VIEW ... AS`).
fn query_of(create: &str) -> Option<String> {
    let parsed = datafusion::sql::sqlparser::parser::Parser::parse_sql(
        &datafusion::sql::sqlparser::dialect::PostgreSqlDialect {},
        create,
    )
    .ok()?;
    match parsed.as_slice() {
        [Statement::CreateView(view)] => Some(format!(" {};", view.query)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_views_definition_is_its_query() {
        assert_eq!(
            query_of("CREATE VIEW v AS SELECT a FROM t WHERE b > 1").as_deref(),
            Some(" SELECT a FROM t WHERE b > 1;")
        );
        assert_eq!(query_of("SELECT 1"), None);
    }
}
