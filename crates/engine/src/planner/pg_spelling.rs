//! PostgreSQL spellings DataFusion lacks, rewritten to ones it plans with
//! the same meaning. [`LikeEscape`], [`GenerateSubscripts`] and
//! [`FieldSelection`] apply to every statement; [`ExpandArray`] and
//! [`RegprocLiterals`] only to statements over the system catalogs, where
//! the catalog tables store what they compare (`typinput` holds a
//! function's name, not its oid).

use std::ops::ControlFlow;

use super::sql::Respell;
use datafusion::sql::sqlparser::ast::{
    AccessExpr, BinaryOperator, DataType, Expr, Function, FunctionArg, FunctionArgExpr,
    FunctionArgumentList, FunctionArguments, Ident, ObjectName, ObjectNamePart, Statement, Value,
    ValueWithSpan, visit_expressions_mut,
};

/// The function that turns a pattern with another escape character into
/// one with backslash, PostgreSQL's own `like_escape(pattern, escape)`.
pub const LIKE_ESCAPE: &str = "like_escape";

/// The list form of `_pg_expandarray`: `(x, n)` pairs of an array's
/// elements and their positions, which `unnest` turns into rows.
pub const EXPANDARRAY_ITEMS: &str = "tablesql_expandarray_items";

/// The list of an array's subscripts in one dimension, from 1.
pub const SUBSCRIPTS: &str = "tablesql_subscripts";

/// `pg_catalog.f(...)` as `f(...)`, and `OPERATOR(pg_catalog.~)` (and
/// `~*`, `!~`, `!~*`) as the operator itself: the same function and the
/// same operator in PostgreSQL, which a dump (`pg_catalog.set_config`)
/// and psql's own queries spell out. Every engine reads them, with or
/// without the wire server's dialect, whose rules go further over its
/// `pg_catalog`.
#[derive(Debug)]
pub struct PgCatalogQualified;

impl Respell for PgCatalogQualified {
    fn rewrite(&self, mut s: Statement) -> Statement {
        let _ = visit_expressions_mut(&mut s, |e: &mut Expr| {
            match e {
                Expr::Function(f) => {
                    if let [ObjectNamePart::Identifier(schema), _] = f.name.0.as_slice()
                        && schema.value.eq_ignore_ascii_case("pg_catalog")
                    {
                        f.name.0.remove(0);
                    }
                }
                Expr::BinaryOp { op, .. } => {
                    if let BinaryOperator::PGCustomBinaryOperator(parts) = op
                        && let [schema, name] = parts.as_slice()
                        && schema.eq_ignore_ascii_case("pg_catalog")
                    {
                        let builtin = match name.as_str() {
                            "~" => Some(BinaryOperator::PGRegexMatch),
                            "~*" => Some(BinaryOperator::PGRegexIMatch),
                            "!~" => Some(BinaryOperator::PGRegexNotMatch),
                            "!~*" => Some(BinaryOperator::PGRegexNotIMatch),
                            _ => None,
                        };
                        if let Some(b) = builtin {
                            *op = b;
                        }
                    }
                }
                _ => {}
            }
            ControlFlow::<()>::Continue(())
        });
        s
    }
}

/// `a LIKE p ESCAPE 'c'` (SQLAlchemy's `startswith`, `NOT LIKE 'pg/_%'
/// ESCAPE '/'`): DataFusion reads only a backslash as the escape, so any
/// other escape character becomes `a LIKE like_escape(p, 'c')`.
#[derive(Debug)]
pub struct LikeEscape;

impl Respell for LikeEscape {
    fn rewrite(&self, mut s: Statement) -> Statement {
        let _ = visit_expressions_mut(&mut s, |e: &mut Expr| {
            if let Expr::Like {
                pattern,
                escape_char,
                ..
            }
            | Expr::ILike {
                pattern,
                escape_char,
                ..
            } = e
                && let Some(escape) = escape_char.take_if(|c| !is_backslash(&c.value))
            {
                let p = std::mem::replace(pattern.as_mut(), Expr::value(Value::Null));
                **pattern = call(LIKE_ESCAPE, vec![p, Expr::Value(escape)]);
            }
            ControlFlow::<()>::Continue(())
        });
        s
    }
}

/// `nextval('s'::regclass)` (how PostgreSQL prints a serial column's
/// default, and how ORMs write it): the sequence functions take the name as
/// text, so the cast goes, before the regclass rewrite would make it an
/// oid subquery.
#[derive(Debug)]
pub struct SequenceNames;

impl Respell for SequenceNames {
    fn rewrite(&self, mut s: Statement) -> Statement {
        let _ = visit_expressions_mut(&mut s, |e: &mut Expr| {
            if let Expr::Function(f) = e
                && last_name(&f.name).is_some_and(|n| {
                    ["nextval", "currval", "setval"]
                        .iter()
                        .any(|f| n.eq_ignore_ascii_case(f))
                })
                && let FunctionArguments::List(list) = &mut f.args
                && let Some(FunctionArg::Unnamed(FunctionArgExpr::Expr(first))) =
                    list.args.first_mut()
                && let Expr::Cast {
                    expr, data_type, ..
                } = first
                && data_type.to_string().eq_ignore_ascii_case("regclass")
            {
                *first = std::mem::replace(expr.as_mut(), Expr::value(Value::Null));
            }
            ControlFlow::<()>::Continue(())
        });
        s
    }
}

fn is_backslash(v: &Value) -> bool {
    matches!(v, Value::SingleQuotedString(s) if s == "\\")
}

/// `_pg_expandarray(a)`, information_schema's set-returning function of
/// `(x, n)` records that pgJDBC selects (`(_pg_expandarray(i.indkey)).n`),
/// as `unnest` of a list of such structs, which DataFusion plans in a
/// SELECT list.
#[derive(Debug)]
pub struct ExpandArray;

impl Respell for ExpandArray {
    fn rewrite(&self, mut s: Statement) -> Statement {
        let _ = visit_expressions_mut(&mut s, |e: &mut Expr| {
            if let Expr::Function(f) = e
                && last_name(&f.name).is_some_and(|n| n.eq_ignore_ascii_case("_pg_expandarray"))
                && let FunctionArguments::List(list) = &mut f.args
            {
                let args = std::mem::take(&mut list.args)
                    .into_iter()
                    .filter_map(|a| match a {
                        FunctionArg::Unnamed(FunctionArgExpr::Expr(x)) => Some(x),
                        _ => None,
                    })
                    .collect();
                *e = call("unnest", vec![call(EXPANDARRAY_ITEMS, args)]);
            }
            ControlFlow::<()>::Continue(())
        });
        s
    }
}

/// `generate_subscripts(a, 1)` (SQLAlchemy's reading of index columns, beside
/// `unnest(a)`) as `unnest` of the list of `a`'s subscripts: set-returning
/// calls in one SELECT list advance together, in PostgreSQL and in
/// DataFusion alike.
#[derive(Debug)]
pub struct GenerateSubscripts;

impl Respell for GenerateSubscripts {
    fn rewrite(&self, mut s: Statement) -> Statement {
        let _ = visit_expressions_mut(&mut s, |e: &mut Expr| {
            if let Expr::Function(f) = e
                && last_name(&f.name).is_some_and(|n| n.eq_ignore_ascii_case("generate_subscripts"))
                && let FunctionArguments::List(list) = &mut f.args
                && let [
                    FunctionArg::Unnamed(FunctionArgExpr::Expr(array)),
                    FunctionArg::Unnamed(FunctionArgExpr::Expr(dim)),
                ] = list.args.as_mut_slice()
            {
                let array = std::mem::replace(array, Expr::value(Value::Null));
                let dim = std::mem::replace(dim, Expr::value(Value::Null));
                *e = call("unnest", vec![call(SUBSCRIPTS, vec![array, dim])]);
            }
            ControlFlow::<()>::Continue(())
        });
        s
    }
}

/// `(expr).field`, PostgreSQL's selection of a composite's field, where
/// `expr` is not a plain column name: DataFusion reads the field name only
/// as a string there (`(expr)['field']`), so it becomes one, folded to
/// lower case unless quoted as PostgreSQL folds it.
#[derive(Debug)]
pub struct FieldSelection;

impl Respell for FieldSelection {
    fn rewrite(&self, mut s: Statement) -> Statement {
        let _ = visit_expressions_mut(&mut s, |e: &mut Expr| {
            if let Expr::CompoundFieldAccess { root, access_chain } = e
                && !matches!(root.as_ref(), Expr::Identifier(_))
            {
                for access in access_chain.iter_mut() {
                    if let AccessExpr::Dot(Expr::Identifier(ident)) = access {
                        let name = if ident.quote_style.is_some() {
                            ident.value.clone()
                        } else {
                            ident.value.to_lowercase()
                        };
                        *access = AccessExpr::Dot(Expr::value(Value::SingleQuotedString(name)));
                    }
                }
            }
            ControlFlow::<()>::Continue(())
        });
        s
    }
}

/// `typinput = 'pg_catalog.array_in'::regproc` (pgJDBC's type cache):
/// datafusion-pg-catalog's `pg_type` holds function names in its regproc
/// columns, so a regproc literal compared with one of them stands for its
/// unqualified name. Elsewhere (`p.oid = 'now'::regproc`) it is left to
/// become an oid.
#[derive(Debug)]
pub struct RegprocLiterals;

/// `pg_type`'s columns that name a function.
const REGPROC_COLUMNS: [&str; 7] = [
    "typinput",
    "typoutput",
    "typreceive",
    "typsend",
    "typmodin",
    "typmodout",
    "typanalyze",
];

impl Respell for RegprocLiterals {
    fn rewrite(&self, mut s: Statement) -> Statement {
        let _ = visit_expressions_mut(&mut s, |e: &mut Expr| {
            if let Expr::BinaryOp { left, right, .. } = e {
                if names_function(left)
                    && let Some(name) = regproc_literal(right)
                {
                    **right = Expr::value(Value::SingleQuotedString(name));
                } else if names_function(right)
                    && let Some(name) = regproc_literal(left)
                {
                    **left = Expr::value(Value::SingleQuotedString(name));
                }
            }
            ControlFlow::<()>::Continue(())
        });
        s
    }
}

fn names_function(e: &Expr) -> bool {
    let ident = match e {
        Expr::Identifier(i) => i,
        Expr::CompoundIdentifier(parts) => match parts.last() {
            Some(i) => i,
            None => return false,
        },
        _ => return false,
    };
    REGPROC_COLUMNS
        .iter()
        .any(|c| ident.value.eq_ignore_ascii_case(c))
}

/// The function name of `'schema.f(args)'::regproc` (or `regprocedure`).
fn regproc_literal(e: &Expr) -> Option<String> {
    let Expr::Cast {
        expr,
        data_type: DataType::Custom(type_name, _),
        ..
    } = e
    else {
        return None;
    };
    let is_regproc = last_name(type_name).is_some_and(|n| {
        n.eq_ignore_ascii_case("regproc") || n.eq_ignore_ascii_case("regprocedure")
    });
    let Expr::Value(ValueWithSpan {
        value: Value::SingleQuotedString(text),
        ..
    }) = expr.as_ref()
    else {
        return None;
    };
    if !is_regproc {
        return None;
    }
    let without_args = text.split('(').next().unwrap_or(text);
    let bare = without_args.rsplit('.').next().unwrap_or(without_args);
    Some(bare.trim().trim_matches('"').to_owned())
}

fn last_name(name: &ObjectName) -> Option<&str> {
    name.0
        .last()
        .and_then(ObjectNamePart::as_ident)
        .map(|i| i.value.as_str())
}

fn call(name: &str, args: Vec<Expr>) -> Expr {
    Expr::Function(Function {
        name: ObjectName::from(vec![Ident::new(name)]),
        uses_odbc_syntax: false,
        parameters: FunctionArguments::None,
        args: FunctionArguments::List(FunctionArgumentList {
            duplicate_treatment: None,
            args: args
                .into_iter()
                .map(|a| FunctionArg::Unnamed(FunctionArgExpr::Expr(a)))
                .collect(),
            clauses: Vec::new(),
        }),
        filter: None,
        null_treatment: None,
        over: None,
        within_group: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion::sql::sqlparser::parser::Parser;

    fn rewritten(rule: &dyn Respell, sql: &str) -> String {
        let mut statements = Parser::parse_sql(&PostgreSqlDialect {}, sql).unwrap_or_default();
        assert_eq!(statements.len(), 1, "{sql}");
        rule.rewrite(statements.remove(0)).to_string()
    }

    #[test]
    fn another_escape_character_becomes_like_escape() {
        assert_eq!(
            rewritten(&LikeEscape, "SELECT a NOT LIKE $1 || '%' ESCAPE '/' FROM t"),
            "SELECT a NOT LIKE like_escape($1 || '%', '/') FROM t"
        );
        assert_eq!(
            rewritten(&LikeEscape, "SELECT a ILIKE 'x!%' ESCAPE '!' FROM t"),
            "SELECT a ILIKE like_escape('x!%', '!') FROM t"
        );
        // A backslash is DataFusion's own escape: left as written.
        let same = "SELECT a LIKE 'x\\%' ESCAPE '\\' FROM t";
        assert_eq!(rewritten(&LikeEscape, same), same);
    }

    #[test]
    fn expandarray_becomes_unnest_of_its_items() {
        assert_eq!(
            rewritten(
                &ExpandArray,
                "SELECT (information_schema._pg_expandarray(i.indkey)).n FROM pg_index i"
            ),
            "SELECT (unnest(tablesql_expandarray_items(i.indkey))).n FROM pg_index i"
        );
    }

    #[test]
    fn generate_subscripts_becomes_unnest_of_subscripts() {
        assert_eq!(
            rewritten(
                &GenerateSubscripts,
                "SELECT unnest(indkey), generate_subscripts(indkey, 1) FROM pg_index"
            ),
            "SELECT unnest(indkey), unnest(tablesql_subscripts(indkey, 1)) FROM pg_index"
        );
    }

    #[test]
    fn a_field_of_an_expression_is_selected_by_its_name() {
        assert_eq!(
            rewritten(
                &FieldSelection,
                "SELECT (r.KEYS).x, (f(a)).\"N\", t.c FROM r, t"
            ),
            "SELECT (r.KEYS).'x', (f(a)).'N', t.c FROM r, t"
        );
    }

    #[test]
    fn regproc_literals_stand_for_their_names() {
        assert_eq!(
            rewritten(
                &RegprocLiterals,
                "SELECT typinput = 'pg_catalog.array_in'::regproc FROM pg_type"
            ),
            "SELECT typinput = 'array_in' FROM pg_type"
        );
        assert_eq!(
            rewritten(
                &RegprocLiterals,
                "SELECT 1 FROM pg_type t WHERE 'pg_catalog.f(pg_catalog.int4)'::regprocedure = t.typsend"
            ),
            "SELECT 1 FROM pg_type t WHERE 'f' = t.typsend"
        );
        // Compared with an oid, it stays for the oid rewrite.
        let oid = "SELECT 1 FROM pg_proc p WHERE p.oid = 'now'::regproc";
        assert_eq!(rewritten(&RegprocLiterals, oid), oid);
    }
}
