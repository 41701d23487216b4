//! SQL text to statements, as PostgreSQL reads them. Every front end (the
//! wire server, the CLI, the shell, embedders through `Engine`) parses here,
//! so a statement means the same thing whichever way it arrives.
//!
//! A user's statement reaches DataFusion as written: the only rewrites it gets
//! are spellings DataFusion lacks for the same meaning (`pg_catalog.f()` is
//! `f()`, `current_user`, `OPERATOR(pg_catalog.~)`, `'t'::regclass`, a row
//! value that starts with an expression, `(-3, 'p')`, as `struct(-3, 'p')`).
//! datafusion-pg-catalog's compatibility parser goes further for BI tools'
//! catalog queries: it substitutes whole queries and fragments, replaces
//! correlated subqueries in a SELECT list with `NULL`, and renames columns.
//! Those changes are acceptable for a tool's introspection and wrong for
//! anything else (a `count(*)` that comes back NULL), so they apply only to
//! statements that read `pg_catalog` or `information_schema`.
//!
//! Those PostgreSQL client spellings come with `pg_catalog`, which the wire
//! server installs (datafusion-pg-catalog speaks pgwire's types), so the
//! server hands them to the engine as a [`Dialect`]; the engine itself
//! depends on neither.

use std::fmt::Debug;
use std::ops::ControlFlow;
use std::sync::Arc;

use datafusion::sql::sqlparser::ast::{
    Expr, Function, FunctionArg, FunctionArgExpr, FunctionArgumentList, FunctionArguments, Ident,
    ObjectName, ObjectNamePart, Statement, visit_expressions_mut, visit_relations,
};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::parser::{Parser, ParserError};
use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};

use super::output_names::OutputNames;
use super::pg_spelling::{
    ExpandArray, FieldSelection, GenerateSubscripts, LikeEscape, PgCatalogQualified,
    RegprocLiterals, SequenceNames,
};

/// A rewrite of a statement into a spelling DataFusion plans, with the same
/// meaning.
pub trait Respell: Debug + Send + Sync {
    /// The statement, respelled.
    fn rewrite(&self, statement: Statement) -> Statement;
}

/// What a front end adds to the reading of SQL: the wire server's
/// `pg_catalog` brings the PostgreSQL client dialect over it. Without one
/// (the library alone, the shell) there is no `pg_catalog`, and so neither
/// its compatibility parser nor the spellings over it.
pub trait Dialect: Debug + Send + Sync {
    /// Rewrites for every statement before the engine reads sequence names
    /// in it (`pg_catalog.f()` as `f()`, `OPERATOR(pg_catalog.~)`).
    fn early(&self) -> Vec<Arc<dyn Respell>>;
    /// Rewrites for every statement after that (`'t'::regclass`, which would
    /// make `'s'::regclass` a subquery before sequence names were read).
    fn late(&self) -> Vec<Arc<dyn Respell>>;
    /// The statements of `text`, which reads the system catalogs, as the
    /// dialect's compatibility parser reads them.
    fn parse_catalog_query(&self, text: &str) -> Result<Vec<Statement>, ParserError>;
    /// Rewrites for a statement [`Dialect::parse_catalog_query`] read, after
    /// its output names are taken from the expressions as written.
    fn catalog(&self) -> Vec<Arc<dyn Respell>> {
        Vec::new()
    }
    /// Whether an unqualified `table` is one of the catalog's (PostgreSQL's
    /// search path finds `pg_class` without its schema).
    fn is_catalog_table(&self, table: &str) -> bool;
}

/// How deep an expression may nest: sqlparser's default (50) refused a
/// WHERE clause that PostgreSQL answers. Deeper input is parsed and planned
/// on a stack that grows as it needs (DataFusion's `recursive_protection`).
pub const RECURSION_LIMIT: usize = 1000;

/// Statements in PostgreSQL's dialect, nested up to `RECURSION_LIMIT`.
fn parse_postgres(sql: &str) -> Result<Vec<Statement>, ParserError> {
    Parser::new(&PostgreSqlDialect {})
        .with_recursion_limit(RECURSION_LIMIT)
        .try_with_sql(sql)?
        .parse_statements()
}

/// One query in PostgreSQL's dialect, nested up to `RECURSION_LIMIT`: for
/// the planner's rewrites, which parse text they built from a statement
/// as deep as the statement.
pub fn parse_query(sql: &str) -> Result<datafusion::sql::sqlparser::ast::Query, ParserError> {
    Ok(*Parser::new(&PostgreSqlDialect {})
        .with_recursion_limit(RECURSION_LIMIT)
        .try_with_sql(sql)?
        .parse_query()?)
}

/// The parser of every front end.
#[derive(Debug)]
pub struct SqlParser {
    /// The client dialect, whose compatibility parser reads statements
    /// over the system catalogs.
    dialect: Option<Arc<dyn Dialect>>,
    /// Rewrites that keep a statement's meaning: applied to every statement.
    spelling: Vec<Arc<dyn Respell>>,
    /// Rewrites for the system catalogs' contents, after `catalog`'s own.
    catalog_spelling: Vec<Arc<dyn Respell>>,
}

impl Default for SqlParser {
    fn default() -> Self {
        Self::new()
    }
}

impl SqlParser {
    /// The parser without a client dialect.
    pub fn new() -> Self {
        Self::build(None)
    }

    /// The parser with `dialect`'s rewrites and catalog parser.
    pub fn with_dialect(dialect: Arc<dyn Dialect>) -> Self {
        Self::build(Some(dialect))
    }

    /// The rule sets, built once.
    fn build(dialect: Option<Arc<dyn Dialect>>) -> Self {
        // Output names first, from the expressions as written.
        let mut spelling: Vec<Arc<dyn Respell>> = vec![Arc::new(OutputNames)];
        if let Some(d) = &dialect {
            spelling.extend(d.early());
        }
        spelling.push(Arc::new(PgCatalogQualified));
        spelling.push(Arc::new(SequenceNames));
        if let Some(d) = &dialect {
            spelling.extend(d.late());
        }
        spelling.extend([
            Arc::new(TuplesAsStructs) as Arc<dyn Respell>,
            Arc::new(LikeEscape),
            Arc::new(GenerateSubscripts),
            Arc::new(FieldSelection),
        ]);
        let mut catalog_spelling: Vec<Arc<dyn Respell>> = vec![Arc::new(OutputNames)];
        if let Some(d) = &dialect {
            catalog_spelling.extend(d.catalog());
        }
        catalog_spelling.extend([
            Arc::new(LikeEscape) as Arc<dyn Respell>,
            Arc::new(GenerateSubscripts),
            Arc::new(ExpandArray),
            Arc::new(FieldSelection),
        ]);
        Self {
            dialect,
            spelling,
            catalog_spelling,
        }
    }

    /// The statements of `sql`, in order.
    pub fn parse(&self, sql: &str) -> Result<Vec<Statement>, ParserError> {
        // The common case: plain SQL over user tables, parsed once.
        match parse_postgres(sql) {
            Ok(statements) if !statements.iter().any(|s| self.reads_system_catalog(s)) => {
                return Ok(statements.into_iter().map(|s| self.respell(s)).collect());
            }
            Err(e) => {
                if let Some(respelled) =
                    weaker_locks_respelled(sql).or_else(|| view_rename_respelled(sql))
                {
                    return self.parse(&respelled).map_err(|_| e);
                }
            }
            Ok(_) => {}
        }
        // Statement by statement: each gets the treatment its own text calls for.
        let mut out = Vec::new();
        for text in statement_texts(sql)? {
            out.extend(self.parse_one(&text)?);
        }
        Ok(out)
    }

    fn parse_one(&self, text: &str) -> Result<Vec<Statement>, ParserError> {
        match parse_postgres(text) {
            Ok(statements) if !statements.iter().any(|s| self.reads_system_catalog(s)) => {
                Ok(statements.into_iter().map(|s| self.respell(s)).collect())
            }
            Ok(statements) => match regprocs_named(statements) {
                Some(named) => self.catalog_parse(&named),
                None => self.catalog_parse(text),
            },
            // The compatibility parser also reads what sqlparser does not
            // (`ABORT`, fragments it substitutes); otherwise the error is
            // sqlparser's, which names the place.
            Err(plain) => self.catalog_parse(text).map_err(|_| plain),
        }
    }

    /// The compatibility parser over `text`, then the rewrites for the
    /// catalogs' contents.
    fn catalog_parse(&self, text: &str) -> Result<Vec<Statement>, ParserError> {
        let statements = match &self.dialect {
            Some(d) => d.parse_catalog_query(text)?,
            None => parse_postgres(text)?,
        };
        Ok(statements
            .into_iter()
            .map(|mut s| {
                for rule in &self.catalog_spelling {
                    s = rule.rewrite(s);
                }
                s
            })
            .collect())
    }

    /// Whether a statement reads a relation of `pg_catalog` or
    /// `information_schema` (qualified, or one of the dialect's catalog
    /// tables by its bare name).
    pub fn reads_system_catalog(&self, statement: &Statement) -> bool {
        let found = visit_relations(statement, |name: &ObjectName| {
            if self.is_system_relation(name) {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        });
        found.is_break()
    }

    fn is_system_relation(&self, name: &ObjectName) -> bool {
        let parts: Vec<&str> = name
            .0
            .iter()
            .filter_map(ObjectNamePart::as_ident)
            .map(|i| i.value.as_str())
            .collect();
        let schema = match parts.as_slice() {
            [table] => {
                return self
                    .dialect
                    .as_ref()
                    .is_some_and(|d| d.is_catalog_table(table));
            }
            [.., schema, _] => schema,
            [] => return false,
        };
        schema.eq_ignore_ascii_case("pg_catalog")
            || schema.eq_ignore_ascii_case("information_schema")
    }

    fn respell(&self, mut statement: Statement) -> Statement {
        for rule in &self.spelling {
            statement = rule.rewrite(statement);
        }
        statement
    }
}

/// The text of `statements` with each `'f'::regproc` literal as its name,
/// if there is one: the compatibility parser would make it an oid subquery,
/// while the catalogs hold function names where clients compare them.
fn regprocs_named(statements: Vec<Statement>) -> Option<String> {
    let before: Vec<String> = statements.iter().map(ToString::to_string).collect();
    let after: Vec<String> = statements
        .into_iter()
        .map(|s| RegprocLiterals.rewrite(s).to_string())
        .collect();
    (before != after).then(|| after.join(";\n"))
}

/// Row values whose first element is not a column or a literal, which
/// DataFusion's planner refuses (`(c, d) > (-3, 'p')`: `-3` is an
/// expression), as the `struct(...)` it plans every row value as.
#[derive(Debug)]
struct TuplesAsStructs;

impl Respell for TuplesAsStructs {
    fn rewrite(&self, mut s: Statement) -> Statement {
        let _ = visit_expressions_mut(&mut s, |e: &mut Expr| {
            if let Expr::Tuple(values) = e
                && !matches!(
                    values.first(),
                    None | Some(Expr::Identifier(_) | Expr::CompoundIdentifier(_) | Expr::Value(_))
                )
            {
                let args = std::mem::take(values)
                    .into_iter()
                    .map(|v| FunctionArg::Unnamed(FunctionArgExpr::Expr(v)))
                    .collect();
                *e = Expr::Function(Function {
                    name: ObjectName::from(vec![Ident::new("struct")]),
                    uses_odbc_syntax: false,
                    parameters: FunctionArguments::None,
                    args: FunctionArguments::List(FunctionArgumentList {
                        duplicate_treatment: None,
                        args,
                        clauses: Vec::new(),
                    }),
                    filter: None,
                    null_treatment: None,
                    over: None,
                    within_group: Vec::new(),
                });
            }
            ControlFlow::<()>::Continue(())
        });
        s
    }
}

/// `sql` with PostgreSQL's `FOR NO KEY UPDATE` as `FOR UPDATE` and `FOR
/// KEY SHARE` as `FOR SHARE`, which sqlparser does not read; `None` where
/// it has neither. The stronger lock is held instead (`exec::write::locks`):
/// it excludes all the weaker one does, and only adds waits.
fn weaker_locks_respelled(sql: &str) -> Option<String> {
    // Escapes kept as written: the text is rebuilt from the tokens, and
    // an unescaped `'O''Brien'` would print as `'O'Brien'`.
    let tokens = Tokenizer::new(&PostgreSqlDialect {}, sql)
        .with_unescape(false)
        .tokenize()
        .ok()?;
    let word = |t: &Token, k: Keyword| matches!(t, Token::Word(w) if w.keyword == k);
    // Positions of the tokens that are not whitespace.
    let solid: Vec<(usize, &Token)> = tokens
        .iter()
        .enumerate()
        .filter(|(_, t)| !matches!(t, Token::Whitespace(_)))
        .collect();
    let mut dropped = std::collections::BTreeSet::new();
    for (n, (_, token)) in solid.iter().enumerate() {
        if !word(token, Keyword::FOR) {
            continue;
        }
        let next = |k: usize| solid.get(n + k).copied();
        let weaker = match (next(1), next(2), next(3)) {
            (Some((a, t1)), Some((b, t2)), Some((_, t3)))
                if word(t1, Keyword::NO) && word(t2, Keyword::KEY) && word(t3, Keyword::UPDATE) =>
            {
                vec![a, b]
            }
            (Some((a, t1)), Some((_, t2)), _)
                if word(t1, Keyword::KEY) && word(t2, Keyword::SHARE) =>
            {
                vec![a]
            }
            _ => continue,
        };
        for j in weaker {
            // The word and the space after it.
            dropped.insert(j);
            if matches!(tokens.get(j + 1), Some(Token::Whitespace(_))) {
                dropped.insert(j + 1);
            }
        }
    }
    if dropped.is_empty() {
        return None;
    }
    Some(
        tokens
            .iter()
            .enumerate()
            .filter(|(i, _)| !dropped.contains(i))
            .map(|(_, t)| t.to_string())
            .collect(),
    )
}

/// `sql` with `ALTER VIEW v RENAME TO w` spelled `ALTER TABLE v RENAME TO
/// w`, which PostgreSQL takes of a view too and sqlparser reads (it reads
/// `ALTER VIEW` only with `AS`); `None` where there is none.
fn view_rename_respelled(sql: &str) -> Option<String> {
    // Escapes kept as written, as in `weaker_locks_respelled`.
    let mut tokens = Tokenizer::new(&PostgreSqlDialect {}, sql)
        .with_unescape(false)
        .tokenize()
        .ok()?;
    let word = |t: &Token, k: Keyword| matches!(t, Token::Word(w) if w.keyword == k);
    let solid: Vec<usize> = (0..tokens.len())
        .filter(|&i| !matches!(tokens[i], Token::Whitespace(_)))
        .collect();
    let mut views = Vec::new();
    for (n, pair) in solid.windows(2).enumerate() {
        if !(word(&tokens[pair[0]], Keyword::ALTER) && word(&tokens[pair[1]], Keyword::VIEW)) {
            continue;
        }
        let renames = solid[n + 2..]
            .iter()
            .take_while(|&&i| tokens[i] != Token::SemiColon)
            .any(|&i| word(&tokens[i], Keyword::RENAME));
        if renames {
            views.push(pair[1]);
        }
    }
    if views.is_empty() {
        return None;
    }
    for i in views {
        tokens[i] = Token::make_keyword("TABLE");
    }
    Some(tokens.iter().map(ToString::to_string).collect())
}

/// The text of each statement in `sql`: split at `;` outside quotes, comments
/// and dollar quotes (the tokenizer knows them), each rebuilt from its tokens.
fn statement_texts(sql: &str) -> Result<Vec<String>, ParserError> {
    // Escapes kept as written, as in `weaker_locks_respelled`.
    let tokens = Tokenizer::new(&PostgreSqlDialect {}, sql)
        .with_unescape(false)
        .tokenize()
        .map_err(|e| ParserError::TokenizerError(e.to_string()))?;
    let mut texts = Vec::new();
    let mut current = String::new();
    let mut content = false;
    for token in tokens {
        match token {
            Token::SemiColon => {
                if content {
                    texts.push(std::mem::take(&mut current));
                }
                current.clear();
                content = false;
            }
            Token::Whitespace(_) | Token::EOF => current.push_str(&token.to_string()),
            other => {
                content = true;
                current.push_str(&other.to_string());
            }
        }
    }
    if content {
        texts.push(current);
    }
    Ok(texts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alter_view_rename_reads_as_alter_table_rename() {
        let respelled =
            view_rename_respelled("ALTER VIEW \"v\" RENAME TO w; ALTER VIEW x AS SELECT 1");
        assert_eq!(
            respelled.as_deref(),
            Some("ALTER TABLE \"v\" RENAME TO w; ALTER VIEW x AS SELECT 1")
        );
        assert_eq!(view_rename_respelled("ALTER VIEW x AS SELECT 1"), None);
    }

    fn one(sql: &str) -> String {
        let statements = SqlParser::new().parse(sql).unwrap();
        assert_eq!(statements.len(), 1, "{sql}");
        statements[0].to_string()
    }

    #[test]
    fn the_weaker_row_locks_read_as_the_stronger() {
        assert_eq!(
            one("SELECT * FROM t WHERE a = 'for no key update' FOR NO KEY UPDATE OF t NOWAIT"),
            "SELECT * FROM t WHERE a = 'for no key update' FOR UPDATE OF t NOWAIT"
        );
        assert_eq!(
            one("select * from t for key share skip locked"),
            "SELECT * FROM t FOR SHARE SKIP LOCKED"
        );
        assert!(
            SqlParser::new()
                .parse("SELECT * FROM t FOR NO KEY SHARE")
                .is_err()
        );
        // A quote escaped in a literal stays one: the text is not re-quoted.
        assert_eq!(
            one("SELECT * FROM t WHERE a = 'O''Brien'' OR ''1''=''1' FOR KEY SHARE"),
            "SELECT * FROM t WHERE a = 'O''Brien'' OR ''1''=''1' FOR SHARE"
        );
    }

    #[test]
    fn user_columns_keep_their_names() {
        // AliasDuplicatedProjectionRewrite would name this `__alias_a`.
        assert_eq!(one("SELECT t.*, t.a FROM t"), "SELECT t.*, t.a FROM t");
        // RewriteArrayAnyAllOperation would turn a quantified comparison into array_contains.
        let sql = "SELECT a FROM t WHERE a = ANY(SELECT b FROM u)";
        assert_eq!(one(sql), sql);
    }

    #[test]
    fn statements_are_judged_one_by_one() {
        let sql = "SELECT count(*) FROM pg_catalog.pg_class c WHERE c.relname = 'x;y'; \
                   SELECT (SELECT count(*) FROM t x WHERE x.b < t.b) FROM t";
        let statements = SqlParser::new().parse(sql).unwrap();
        assert_eq!(statements.len(), 2);
        assert!(statements[0].to_string().contains("'x;y'"));
        assert!(!statements[1].to_string().contains("NULL"));
    }

    #[test]
    fn row_values_starting_with_an_expression_are_structs() {
        assert_eq!(
            one("SELECT * FROM t WHERE (c, d) > (-3, 'p')"),
            "SELECT * FROM t WHERE (c, d) > struct(-3, 'p')"
        );
    }

    #[test]
    fn pg_catalog_functions_and_operators_are_read_without_a_dialect() {
        assert_eq!(
            one("SELECT pg_catalog.set_config('search_path', '', false)"),
            "SELECT set_config('search_path', '', false) AS \"set_config\""
        );
        assert_eq!(
            one("SELECT a FROM t WHERE a OPERATOR(pg_catalog.~) '^x'"),
            "SELECT a FROM t WHERE a ~ '^x'"
        );
        // Another schema's function is not PostgreSQL's own: kept.
        assert_eq!(one("SELECT s.f(a) FROM t"), "SELECT s.f(a) AS \"f\" FROM t");
    }

    #[test]
    fn errors_are_sqlparsers() {
        let e = SqlParser::new().parse("SELEC 1").unwrap_err();
        assert!(e.to_string().contains("SELEC"), "{e}");
    }

    #[test]
    fn without_a_dialect_only_qualified_relations_are_the_catalogs() {
        let parser = SqlParser::new();
        let first = |sql| parser.parse(sql).unwrap().remove(0);
        assert!(parser.reads_system_catalog(&first("SELECT * FROM information_schema.tables")));
        assert!(parser.reads_system_catalog(&first("SELECT * FROM pg_catalog.pg_class")));
        assert!(!parser.reads_system_catalog(&first("SELECT * FROM pg_class")));
    }
}
