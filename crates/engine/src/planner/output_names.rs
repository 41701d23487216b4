//! Output column names as PostgreSQL chooses them, and output columns of
//! one name, as PostgreSQL allows them.
//!
//! Clients read results by name: pandas' columns, a dict cursor's keys, a
//! BI tool's fields. DataFusion names an unaliased expression by its text
//! (`count(*)`, `Int64(1) + Int64(1)`, `upper(r.name)`), where PostgreSQL
//! says `count`, `?column?` and `upper`. So when a statement is parsed,
//! [`name_outputs`] aliases every unnamed expression of every SELECT list
//! with the name PostgreSQL's `FigureColname` gives it ([`figured`]): a
//! column's name, a function's, a cast's type, `case`, otherwise
//! `?column?`. A bare column keeps DataFusion's own name, which is its
//! name already, and its qualifier.
//!
//! DataFusion refuses a projection whose outputs share a name, which
//! PostgreSQL allows (`SELECT 1, 2`, `SELECT bib, bib`, `SELECT a.id, b.id
//! FROM a JOIN b ...`). Before a query is planned, [`alias_repeats`]
//! aliases each later item of a name already taken in its SELECT list with
//! a mark (`a` + [`MARK`] + its position); the engine takes the mark off
//! the names of the rows it hands out ([`shown`]). An Arrow schema may
//! repeat a name; only DataFusion's planning may not.

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::sync::Arc;

use datafusion::arrow::datatypes::{Field, Schema, SchemaRef};
use datafusion::sql::sqlparser::ast::{
    AccessExpr, ArrayElemTypeDef, DataType, Expr, Ident, Query, Select, SelectItem, SetExpr,
    Statement, TimezoneInfo, TrimWhereField, Value, VisitMut, VisitorMut,
};

use super::sql::Respell;
use crate::catalog::normalize_ident;

/// What follows an output name in a repeat's alias. A NUL: no name a
/// client writes holds one.
pub const MARK: char = '\u{0}';

/// PostgreSQL's name for an expression it cannot name otherwise.
pub const UNNAMED: &str = "?column?";

/// [`name_outputs`] as a rewrite of the parser's, applied first, while the
/// statement is as the user wrote it: later rewrites respell expressions
/// (`current_user`, row values) but keep their aliases.
#[derive(Debug)]
pub struct OutputNames;

impl Respell for OutputNames {
    fn rewrite(&self, mut statement: Statement) -> Statement {
        name_outputs(&mut statement);
        statement
    }
}

/// Aliases every unnamed expression of every SELECT list in `statement`
/// (subqueries, CTEs, set operations' branches, the query of a view or of
/// `CREATE TABLE AS`) with PostgreSQL's name for it.
pub fn name_outputs(statement: &mut Statement) {
    each_select(statement, name_select);
}

/// Calls `f` on every SELECT of `statement`: each query's body, through
/// its set operations' branches; nested queries are the visitor's.
fn each_select(statement: &mut Statement, f: fn(&mut Select)) {
    let _ = statement.visit(&mut Selects(f));
}

struct Selects(fn(&mut Select));

impl VisitorMut for Selects {
    type Break = ();

    fn post_visit_query(&mut self, query: &mut Query) -> ControlFlow<()> {
        body_selects(&mut query.body, self.0);
        ControlFlow::Continue(())
    }
}

fn body_selects(body: &mut SetExpr, f: fn(&mut Select)) {
    match body {
        SetExpr::Select(select) => f(select),
        SetExpr::SetOperation { left, right, .. } => {
            body_selects(left, f);
            body_selects(right, f);
        }
        _ => {}
    }
}

fn name_select(select: &mut Select) {
    for item in &mut select.projection {
        let SelectItem::UnnamedExpr(expr) = item else {
            continue;
        };
        if matches!(expr, Expr::Identifier(_) | Expr::CompoundIdentifier(_)) {
            continue;
        }
        let alias = Ident::with_quote('"', figured(expr));
        *item = match std::mem::replace(item, SelectItem::Wildcard(Default::default())) {
            SelectItem::UnnamedExpr(expr) => SelectItem::ExprWithAlias { expr, alias },
            other => other,
        };
    }
}

/// Takes off the aliases [`name_outputs`] gave: an alias in double quotes
/// that is PostgreSQL's name for its expression (one a user wrote so is
/// taken off too, and means the same).
pub fn unname(statement: &mut Statement) {
    each_select(statement, |select| {
        for item in &mut select.projection {
            let SelectItem::ExprWithAlias { expr, alias } = item else {
                continue;
            };
            if alias.quote_style != Some('"') || alias.value != figured(expr) {
                continue;
            }
            let expr = std::mem::replace(expr, Expr::Value(Value::Null.into()));
            *item = SelectItem::UnnamedExpr(expr);
        }
    });
}

/// The name PostgreSQL gives `expr` as an output column (its
/// `FigureColname`).
pub fn figured(expr: &Expr) -> String {
    match figure(expr) {
        Some((name, _)) => name,
        None => UNNAMED.to_owned(),
    }
}

/// How sure a name is, as PostgreSQL ranks them: a type's name or `case`
/// gives way to a name found inside (`CAST(a AS text)` is `a`, `CASE ...
/// ELSE b END` is `b`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Strength {
    Weak,
    Strong,
}

fn strong(name: impl Into<String>) -> Option<(String, Strength)> {
    Some((name.into(), Strength::Strong))
}

/// `FigureColnameInternal`: a name and its strength, or none.
fn figure(expr: &Expr) -> Option<(String, Strength)> {
    match expr {
        Expr::Identifier(i) => strong(normalize_ident(i)),
        Expr::CompoundIdentifier(parts) => strong(normalize_ident(parts.last()?)),
        // `a[1]` is `a`; `(a).b` is `b`.
        Expr::CompoundFieldAccess { root, access_chain } => {
            let field = access_chain.iter().rev().find_map(|a| match a {
                AccessExpr::Dot(Expr::Identifier(i)) => Some(normalize_ident(i)),
                _ => None,
            });
            match field {
                Some(f) => strong(f),
                None => figure(root),
            }
        }
        Expr::Nested(inner) | Expr::Collate { expr: inner, .. } => figure(inner),
        Expr::Function(f) => strong(normalize_ident(f.name.0.last()?.as_ident()?)),
        Expr::Cast {
            expr, data_type, ..
        } => match figure(expr) {
            Some(named @ (_, Strength::Strong)) => Some(named),
            _ => Some((type_name(data_type), Strength::Weak)),
        },
        Expr::TypedString(t) => Some((type_name(&t.data_type), Strength::Weak)),
        Expr::Interval(_) => Some(("interval".to_owned(), Strength::Weak)),
        Expr::Case { else_result, .. } => match else_result.as_deref().and_then(figure) {
            Some(named @ (_, Strength::Strong)) => Some(named),
            _ => Some(("case".to_owned(), Strength::Weak)),
        },
        // A scalar subquery is named by its first output, `?column?` or not.
        Expr::Subquery(query) => strong(first_output(query)),
        Expr::Exists { negated: false, .. } => strong("exists"),
        Expr::Array(_) => strong("array"),
        Expr::Tuple(_) => strong("row"),
        // Functions in the SQL standard's syntax, named by the function
        // PostgreSQL's grammar makes of them.
        Expr::Extract { .. } => strong("extract"),
        Expr::Ceil { .. } => strong("ceil"),
        Expr::Floor { .. } => strong("floor"),
        Expr::Position { .. } => strong("position"),
        Expr::Substring { shorthand, .. } => {
            strong(if *shorthand { "substr" } else { "substring" })
        }
        Expr::Overlay { .. } => strong("overlay"),
        Expr::AtTimeZone { .. } => strong("timezone"),
        Expr::Trim { trim_where, .. } => strong(match trim_where {
            Some(TrimWhereField::Leading) => "ltrim",
            Some(TrimWhereField::Trailing) => "rtrim",
            Some(TrimWhereField::Both) | None => "btrim",
        }),
        _ => None,
    }
}

/// The name of a query's first output column, from the first SELECT of
/// its body.
fn first_output(query: &Query) -> String {
    let mut body = query.body.as_ref();
    loop {
        match body {
            SetExpr::SetOperation { left, .. } => body = left,
            SetExpr::Query(q) => body = q.body.as_ref(),
            SetExpr::Select(select) => {
                return match select.projection.first() {
                    Some(SelectItem::ExprWithAlias { alias, .. }) => normalize_ident(alias),
                    Some(SelectItem::UnnamedExpr(e)) => figured(e),
                    _ => UNNAMED.to_owned(),
                };
            }
            _ => return UNNAMED.to_owned(),
        }
    }
}

/// PostgreSQL's name of a type as written in a cast: its catalog name
/// (`integer` is `int4`), an array's element type's.
fn type_name(data_type: &DataType) -> String {
    let name = match data_type {
        DataType::Int(_) | DataType::Integer(_) | DataType::Int4(_) => "int4",
        DataType::BigInt(_) | DataType::Int8(_) => "int8",
        DataType::SmallInt(_) | DataType::Int2(_) => "int2",
        DataType::Real | DataType::Float4 => "float4",
        DataType::Float(info) => match info {
            datafusion::sql::sqlparser::ast::ExactNumberInfo::Precision(p)
            | datafusion::sql::sqlparser::ast::ExactNumberInfo::PrecisionAndScale(p, _)
                if *p <= 24 =>
            {
                "float4"
            }
            _ => "float8",
        },
        DataType::DoublePrecision | DataType::Double(_) | DataType::Float8 => "float8",
        DataType::Numeric(_) | DataType::Decimal(_) | DataType::Dec(_) => "numeric",
        DataType::Text => "text",
        DataType::Varchar(_) | DataType::CharacterVarying(_) | DataType::CharVarying(_) => {
            "varchar"
        }
        DataType::Char(_) | DataType::Character(_) => "bpchar",
        DataType::Bool | DataType::Boolean => "bool",
        DataType::Date => "date",
        DataType::Timestamp(_, TimezoneInfo::WithTimeZone | TimezoneInfo::Tz) => "timestamptz",
        DataType::Timestamp(..) => "timestamp",
        DataType::Time(_, TimezoneInfo::WithTimeZone | TimezoneInfo::Tz) => "timetz",
        DataType::Time(..) => "time",
        DataType::Interval { .. } => "interval",
        DataType::Bytea => "bytea",
        DataType::Uuid => "uuid",
        DataType::JSON => "json",
        DataType::JSONB => "jsonb",
        DataType::Regclass => "regclass",
        DataType::Array(
            ArrayElemTypeDef::SquareBracket(inner, _)
            | ArrayElemTypeDef::AngleBracket(inner)
            | ArrayElemTypeDef::Parenthesis(inner),
        ) => return type_name(inner),
        DataType::Custom(name, _) => {
            return name
                .0
                .last()
                .and_then(|p| p.as_ident())
                .map_or_else(|| UNNAMED.to_owned(), normalize_ident);
        }
        // Written as its own name (`name`, `oid`): PostgreSQL's too.
        other => return other.to_string().to_lowercase(),
    };
    name.to_owned()
}

/// Aliases the repeated output names of every SELECT list in `statement`
/// (see the module doc).
pub fn alias_repeats(statement: &mut Statement) {
    each_select(statement, mark_repeats);
}

fn mark_repeats(select: &mut Select) {
    // Per name, the qualifier of each column taken under it (`None`: an
    // expression, or a column without one).
    let mut taken: HashMap<String, Vec<Option<String>>> = HashMap::new();
    for (position, item) in select.projection.iter_mut().enumerate() {
        let (name, qualifier) = match item {
            SelectItem::ExprWithAlias { alias, .. } => (normalize_ident(alias), None),
            SelectItem::UnnamedExpr(Expr::CompoundIdentifier(parts)) if parts.len() > 1 => {
                let qualifier = parts[..parts.len() - 1]
                    .iter()
                    .map(normalize_ident)
                    .collect::<Vec<_>>()
                    .join(".");
                (normalize_ident(&parts[parts.len() - 1]), Some(qualifier))
            }
            SelectItem::UnnamedExpr(e) => (figured(e), None),
            _ => continue,
        };
        let earlier = taken.entry(name.clone()).or_default();
        // DataFusion tells `a.id` from `b.id` itself; a bare `id` beside
        // `a.id` may be the same column, so it is marked.
        let repeat = earlier
            .iter()
            .any(|q| q.is_none() || qualifier.is_none() || *q == qualifier);
        earlier.push(qualifier);
        if !repeat {
            continue;
        }
        let marked = Ident::with_quote('"', format!("{name}{MARK}{position}"));
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
        // Two tables' columns of one name DataFusion tells apart itself.
        assert_eq!(
            aliased("SELECT a.id, b.id, id FROM a JOIN b ON a.id = b.id"),
            "SELECT a.id, b.id, id AS \"id~2\" FROM a JOIN b ON a.id = b.id"
        );
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

    fn names(sql: &str) -> Vec<String> {
        let mut s = Parser::parse_sql(&PostgreSqlDialect {}, sql)
            .expect("parses")
            .remove(0);
        name_outputs(&mut s);
        let Statement::Query(q) = s else {
            panic!("a query")
        };
        let SetExpr::Select(select) = *q.body else {
            panic!("a select")
        };
        select
            .projection
            .iter()
            .map(|item| match item {
                SelectItem::ExprWithAlias { alias, .. } => alias.value.clone(),
                SelectItem::UnnamedExpr(e) => format!("({e})"),
                other => other.to_string(),
            })
            .collect()
    }

    #[test]
    fn an_expression_is_named_as_postgresql_names_it() {
        assert_eq!(
            names("SELECT count(*), 1 + 1, upper(r.name), pg_catalog.lower(x), true, NULL, 'a'"),
            [
                "count", "?column?", "upper", "lower", "?column?", "?column?", "?column?"
            ]
        );
        assert_eq!(
            names(
                "SELECT a::text, CAST(a AS bigint), 1::int, '1'::numeric(10,2), 'x'::varchar(3), 'a'::char(2), 1.5::float, 1.5::real, '{1}'::int[], 'x'::name, 1::oid, 't'::regclass"
            ),
            [
                "a", "a", "int4", "numeric", "varchar", "bpchar", "float8", "float4", "int4",
                "name", "oid", "regclass"
            ]
        );
        assert_eq!(
            names(
                "SELECT date '2020-01-01', interval '1 day', timestamp '2020-01-01', timestamptz '2020-01-01', (a), -a, t.x[1], (SELECT max(a) FROM t), (SELECT 1), EXISTS (SELECT 1), NOT EXISTS (SELECT 1)"
            ),
            [
                "date",
                "interval",
                "timestamp",
                "timestamptz",
                "a",
                "?column?",
                "x",
                "max",
                "?column?",
                "exists",
                "?column?"
            ]
        );
        assert_eq!(
            names(
                "SELECT CASE WHEN a = 1 THEN 'a' END, CASE WHEN true THEN 1 ELSE b END, coalesce(c, 'z'), ARRAY[1], (1, 2), ROW(1, 2), a IS NULL, current_date, current_user, trim(c), trim(leading 'x' from c), substring(c from 1 for 2), position('a' in c), extract(year from t), t AT TIME ZONE 'UTC', ceil(1.5), overlay(c placing 'x' from 1), c COLLATE \"C\""
            ),
            [
                "case",
                "b",
                "coalesce",
                "array",
                "row",
                "row",
                "?column?",
                "current_date",
                "current_user",
                "btrim",
                "ltrim",
                "substring",
                "position",
                "extract",
                "timezone",
                "ceil",
                "overlay",
                "c"
            ]
        );
    }

    #[test]
    fn a_bare_column_keeps_its_own_name_and_a_nested_select_is_named_too() {
        assert_eq!(
            names("SELECT a, t.b, \"C\" FROM t"),
            ["(a)", "(t.b)", "(\"C\")"]
        );
        let mut s = Parser::parse_sql(
            &PostgreSqlDialect {},
            "SELECT * FROM (SELECT count(*) FROM t) s UNION SELECT sum(a) FROM u",
        )
        .expect("parses")
        .remove(0);
        name_outputs(&mut s);
        assert_eq!(
            s.to_string(),
            "SELECT * FROM (SELECT count(*) AS \"count\" FROM t) s UNION SELECT sum(a) AS \"sum\" FROM u"
        );
    }
}
