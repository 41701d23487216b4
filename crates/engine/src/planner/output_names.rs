//! Output columns of one name, as PostgreSQL allows them (`SELECT 1 AS a,
//! 2 AS a`, `SELECT bib, bib`, `SELECT a.id, b.id FROM a JOIN b ...`).
//! DataFusion refuses a projection whose outputs share a name, so before it
//! plans a query, each later item of a name already taken in the top-level
//! SELECT list is aliased with a mark (`a` + [`MARK`] + its position); the
//! engine takes the mark off the names of the rows it hands out
//! ([`shown`]), so clients see PostgreSQL's names. An Arrow schema may
//! repeat a name; only DataFusion's planning may not.

use std::collections::HashSet;
use std::sync::Arc;

use datafusion::arrow::datatypes::{Field, Schema, SchemaRef};
use datafusion::sql::sqlparser::ast::{Expr, Ident, SelectItem, SetExpr, Statement};

use crate::catalog::normalize_ident;

/// What follows an output name in a repeat's alias. A NUL: no name a
/// client writes holds one.
pub const MARK: char = '\u{0}';

/// Aliases the repeated output names of a query's top-level SELECT list
/// (see the module doc); any other statement is left alone.
pub fn alias_repeats(statement: &mut Statement) {
    let Statement::Query(query) = statement else {
        return;
    };
    let SetExpr::Select(select) = query.body.as_mut() else {
        return;
    };
    let mut taken = HashSet::new();
    for (position, item) in select.projection.iter_mut().enumerate() {
        let name = match item {
            SelectItem::ExprWithAlias { alias, .. } => normalize_ident(alias),
            SelectItem::UnnamedExpr(Expr::Identifier(i)) => normalize_ident(i),
            SelectItem::UnnamedExpr(Expr::CompoundIdentifier(parts)) => match parts.last() {
                Some(last) => normalize_ident(last),
                None => continue,
            },
            // Expressions are named by their text in DataFusion: a repeat
            // of one is a repeat of its text.
            SelectItem::UnnamedExpr(e) => e.to_string(),
            _ => continue,
        };
        if taken.insert(name.clone()) {
            continue;
        }
        // A repeated expression is shown by PostgreSQL's name for it.
        let shown = match item {
            SelectItem::UnnamedExpr(Expr::Function(f)) => f
                .name
                .0
                .last()
                .and_then(|p| p.as_ident())
                .map_or_else(|| "?column?".to_owned(), normalize_ident),
            SelectItem::UnnamedExpr(Expr::Identifier(_) | Expr::CompoundIdentifier(_))
            | SelectItem::ExprWithAlias { .. } => name,
            _ => "?column?".to_owned(),
        };
        let marked = Ident::with_quote('"', format!("{shown}{MARK}{position}"));
        *item = match std::mem::replace(item, SelectItem::Wildcard(Default::default())) {
            SelectItem::ExprWithAlias { expr, .. } | SelectItem::UnnamedExpr(expr) => {
                SelectItem::ExprWithAlias {
                    expr,
                    alias: marked,
                }
            }
            other => other,
        };
    }
}

/// `schema` with the marks taken off its names; the same schema when none
/// is marked.
pub fn shown(schema: &SchemaRef) -> SchemaRef {
    if !schema.fields().iter().any(|f| f.name().contains(MARK)) {
        return schema.clone();
    }
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .map(|f| match f.name().split_once(MARK) {
            Some((name, _)) => f.as_ref().clone().with_name(name),
            None => f.as_ref().clone(),
        })
        .collect();
    Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion::sql::sqlparser::parser::Parser;

    fn aliased(sql: &str) -> String {
        let mut s = Parser::parse_sql(&PostgreSqlDialect {}, sql)
            .expect("parses")
            .remove(0);
        alias_repeats(&mut s);
        s.to_string().replace(MARK, "~")
    }

    #[test]
    fn only_a_repeated_name_is_aliased_and_shown_without_its_mark() {
        assert_eq!(
            aliased("SELECT 1 AS a, 2 AS a"),
            "SELECT 1 AS a, 2 AS \"a~1\""
        );
        assert_eq!(
            aliased("SELECT t.bib, bib, age FROM t"),
            "SELECT t.bib, bib AS \"bib~1\", age FROM t"
        );
        assert_eq!(
            aliased("SELECT 1 + 1, 1 + 1"),
            "SELECT 1 + 1, 1 + 1 AS \"?column?~1\""
        );
        assert_eq!(aliased("SELECT a, b FROM t"), "SELECT a, b FROM t");
        let schema: SchemaRef = Arc::new(Schema::new(vec![
            Field::new("a", datafusion::arrow::datatypes::DataType::Int64, false),
            Field::new(
                format!("a{MARK}1"),
                datafusion::arrow::datatypes::DataType::Int64,
                false,
            ),
        ]));
        let names: Vec<String> = shown(&schema)
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect();
        assert_eq!(names, ["a", "a"]);
    }
}
