//! The PostgreSQL client dialect over this `pg_catalog`: datafusion-pg-catalog's
//! rewrites of the spellings clients send (`pg_catalog.f()`, `current_user`,
//! `OPERATOR(pg_catalog.~)`, `'t'::regclass` over `pg_class`) and its
//! compatibility parser for BI tools' catalog queries. The engine's parser
//! applies them (`planner::sql`); they live here because the crate that
//! brings them speaks pgwire's types.

use std::sync::Arc;

use datafusion::sql::sqlparser::ast::Statement;
use datafusion::sql::sqlparser::parser::ParserError;
use datafusion_pg_catalog::pg_catalog::PG_CATALOG_TABLES;
use datafusion_pg_catalog::sql::PostgresCompatibilityParser;
use datafusion_pg_catalog::sql::rules::{
    CurrentUserVariableToSessionUserFunctionCall, FixVersionColumnName, RewritePgCatalogOperator,
    RewriteRegCastToSubquery, SqlStatementRewriteRule, StripCallableQualifier,
};

use crate::engine::{Dialect, Respell};

/// The dialect the wire server gives its engine.
#[derive(Debug, Default)]
pub struct PgDialect {
    catalog: PostgresCompatibilityParser,
}

impl PgDialect {
    /// The dialect, its compatibility parser built once.
    pub fn new() -> Self {
        Self {
            catalog: PostgresCompatibilityParser::new(),
        }
    }
}

/// One of datafusion-pg-catalog's rewrites.
#[derive(Debug)]
struct Pg<R>(R);

impl<R: SqlStatementRewriteRule> Respell for Pg<R> {
    fn rewrite(&self, statement: Statement) -> Statement {
        self.0.rewrite(statement)
    }
}

/// The views this `pg_catalog` adds (`keys.rs`), which
/// datafusion-pg-catalog's list of its tables does not name.
const OWN_VIEWS: [&str; 1] = ["pg_indexes"];

/// An unqualified name of one of [`OWN_VIEWS`] is `pg_catalog`'s, which
/// PostgreSQL searches first.
#[derive(Debug)]
struct OwnViews;

impl Respell for OwnViews {
    fn rewrite(&self, mut statement: Statement) -> Statement {
        use datafusion::sql::sqlparser::ast::{Ident, ObjectNamePart, visit_relations_mut};
        let _ = visit_relations_mut(&mut statement, |name| {
            if let [ObjectNamePart::Identifier(table)] = name.0.as_slice()
                && table.quote_style.is_none()
                && OWN_VIEWS
                    .iter()
                    .any(|v| v.eq_ignore_ascii_case(&table.value))
            {
                name.0
                    .insert(0, ObjectNamePart::Identifier(Ident::new("pg_catalog")));
            }
            std::ops::ControlFlow::<()>::Continue(())
        });
        statement
    }
}

impl Dialect for PgDialect {
    fn early(&self) -> Vec<Arc<dyn Respell>> {
        vec![
            Arc::new(Pg(StripCallableQualifier)),
            Arc::new(Pg(CurrentUserVariableToSessionUserFunctionCall)),
            Arc::new(Pg(RewritePgCatalogOperator)),
            Arc::new(super::regtype::RegtypeText),
        ]
    }

    fn late(&self) -> Vec<Arc<dyn Respell>> {
        vec![
            Arc::new(Pg(RewriteRegCastToSubquery::new())),
            Arc::new(Pg(FixVersionColumnName)),
        ]
    }

    fn parse_catalog_query(&self, text: &str) -> Result<Vec<Statement>, ParserError> {
        // A statement naming one of them reads the catalogs: parsed here.
        let statements = self.catalog.parse(text)?;
        Ok(statements
            .into_iter()
            .map(|s| OwnViews.rewrite(s))
            .collect())
    }

    fn catalog(&self) -> Vec<Arc<dyn Respell>> {
        vec![Arc::new(super::regtype::RegtypeText)]
    }

    fn is_catalog_table(&self, table: &str) -> bool {
        // With the views this `pg_catalog` adds (`keys.rs`).
        PG_CATALOG_TABLES
            .iter()
            .chain(&OWN_VIEWS)
            .any(|t| t.eq_ignore_ascii_case(table))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::SqlParser;

    fn parser() -> SqlParser {
        SqlParser::with_dialect(Arc::new(PgDialect::new()))
    }

    fn one(sql: &str) -> String {
        let statements = parser().parse(sql).unwrap();
        assert_eq!(statements.len(), 1, "{sql}");
        statements[0].to_string()
    }

    #[test]
    fn user_subqueries_are_kept() {
        let sql = "SELECT b, (SELECT count(*) FROM t1 AS x WHERE x.b < t1.b) FROM t1";
        assert_eq!(
            one(sql),
            "SELECT b, (SELECT count(*) AS \"count\" FROM t1 AS x WHERE x.b < t1.b) AS \"count\" FROM t1"
        );
        // The compatibility parser alone replaces it with NULL: the reason
        // it reads only the catalogs' statements.
        let rewritten = PostgresCompatibilityParser::new().parse(sql).unwrap();
        assert!(rewritten[0].to_string().contains("NULL"));
    }

    #[test]
    fn spellings_are_normalised_everywhere() {
        assert_eq!(
            one("SELECT pg_catalog.upper(a) FROM t"),
            "SELECT upper(a) AS \"upper\" FROM t"
        );
    }

    #[test]
    fn catalog_queries_get_the_compatibility_rewrites() {
        let sql = "SELECT c.relname, (SELECT n.nspname FROM pg_namespace n WHERE n.oid = c.relnamespace) FROM pg_catalog.pg_class c";
        assert!(one(sql).contains("NULL"));
        let parser = parser();
        let first = |sql| parser.parse(sql).unwrap().remove(0);
        assert!(parser.reads_system_catalog(&first("SELECT * FROM information_schema.tables")));
        // A catalog table by its bare name, as the search path finds it.
        assert!(parser.reads_system_catalog(&first("SELECT relname FROM pg_class")));
        assert!(!parser.reads_system_catalog(&first("SELECT * FROM pg_compat_test")));
    }

    #[test]
    fn abort_is_rollback() {
        // sqlparser alone does not read it; the compatibility parser does.
        assert_eq!(one("ABORT"), "ROLLBACK");
    }
}
