//! The line editor's helper: completion of SQL keywords, table names, column
//! names and meta-commands, and the check that a statement has ended before
//! Enter sends it (otherwise Enter starts a new line of the same statement).

use std::sync::{Arc, RwLock};

use rustyline::completion::Completer;
use rustyline::highlight::Highlighter;
use rustyline::hint::Hinter;
use rustyline::validate::{ValidationContext, ValidationResult, Validator};
use rustyline::{Context, Helper};

use super::split::is_complete;

/// The names completion offers besides keywords; refreshed after DDL.
#[derive(Debug, Default, Clone)]
pub struct Names {
    /// Table names, as SQL spells them.
    pub tables: Vec<String>,
    /// Column names of all tables.
    pub columns: Vec<String>,
}

/// The shell's rustyline helper.
pub struct ShellHelper {
    names: Arc<RwLock<Names>>,
}

impl ShellHelper {
    /// A helper completing from `names`.
    pub fn new(names: Arc<RwLock<Names>>) -> Self {
        Self { names }
    }
}

const KEYWORDS: &[&str] = &[
    "ALL",
    "ANALYZE",
    "AND",
    "AS",
    "ASC",
    "BEGIN",
    "BETWEEN",
    "BY",
    "CASE",
    "CAST",
    "COMMIT",
    "COUNT",
    "CREATE",
    "CROSS",
    "DELETE",
    "DESC",
    "DISTINCT",
    "DROP",
    "ELSE",
    "END",
    "EXCEPT",
    "EXISTS",
    "EXPLAIN",
    "FALSE",
    "FROM",
    "FULL",
    "GROUP",
    "HAVING",
    "ILIKE",
    "IN",
    "INNER",
    "INSERT",
    "INTERSECT",
    "INTO",
    "IS",
    "JOIN",
    "LEFT",
    "LIKE",
    "LIMIT",
    "NOT",
    "NULL",
    "NULLS",
    "OFFSET",
    "ON",
    "OR",
    "ORDER",
    "OUTER",
    "OVER",
    "PARTITION",
    "PRIMARY",
    "KEY",
    "RIGHT",
    "ROLLBACK",
    "SELECT",
    "SET",
    "SHOW",
    "TABLE",
    "TABLES",
    "THEN",
    "TRUE",
    "UNION",
    "UPDATE",
    "USING",
    "VALUES",
    "WHEN",
    "WHERE",
    "WITH",
];

const META: &[&str] = &["\\?", "\\d", "\\dt", "\\i", "\\o", "\\q", "\\timing", "\\x"];

/// Candidates for the word `word`: meta-commands after a backslash; else
/// keywords (in the case the word is typed in), tables and columns.
pub fn candidates(word: &str, names: &Names) -> Vec<String> {
    if word.starts_with('\\') {
        return META
            .iter()
            .filter(|m| m.starts_with(word))
            .map(|m| (*m).to_owned())
            .collect();
    }
    let lower = word.to_lowercase();
    let upper = word.chars().next().is_some_and(char::is_uppercase);
    let mut out: Vec<String> = names
        .tables
        .iter()
        .chain(&names.columns)
        .filter(|n| n.to_lowercase().starts_with(&lower))
        .cloned()
        .collect();
    out.extend(
        KEYWORDS
            .iter()
            .filter(|k| k.to_lowercase().starts_with(&lower))
            .map(|k| {
                if upper {
                    (*k).to_owned()
                } else {
                    k.to_lowercase()
                }
            }),
    );
    out.sort();
    out.dedup();
    out
}

/// Where the word before `pos` starts.
fn word_start(line: &str, pos: usize) -> usize {
    line[..pos]
        .char_indices()
        .rev()
        .find(|(_, c)| !(c.is_alphanumeric() || *c == '_' || *c == '\\'))
        .map_or(0, |(i, c)| i + c.len_utf8())
}

impl Completer for ShellHelper {
    type Candidate = String;

    fn complete(
        &self,
        line: &str,
        pos: usize,
        _ctx: &Context<'_>,
    ) -> rustyline::Result<(usize, Vec<String>)> {
        let start = word_start(line, pos);
        let word = &line[start..pos];
        if word.is_empty() {
            return Ok((pos, Vec::new()));
        }
        let names = match self.names.read() {
            Ok(n) => n.clone(),
            Err(_) => Names::default(),
        };
        Ok((start, candidates(word, &names)))
    }
}

impl Validator for ShellHelper {
    fn validate(&self, ctx: &mut ValidationContext<'_>) -> rustyline::Result<ValidationResult> {
        Ok(if is_complete(ctx.input()) {
            ValidationResult::Valid(None)
        } else {
            ValidationResult::Incomplete
        })
    }
}

impl Hinter for ShellHelper {
    type Hint = String;
}

impl Highlighter for ShellHelper {}

impl Helper for ShellHelper {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_complete_to_tables_columns_and_keywords() {
        let names = Names {
            tables: vec!["registrations".into(), "events".into()],
            columns: vec!["registered".into(), "event".into()],
        };
        assert_eq!(candidates("regi", &names), ["registered", "registrations"]);
        assert_eq!(candidates("SEL", &names), ["SELECT"]);
        assert_eq!(candidates("sel", &names), ["select"]);
        assert_eq!(candidates("\\t", &names), ["\\timing"]);
        assert_eq!(word_start("SELECT * FROM regis", 19), 14);
        assert_eq!(word_start("\\d regis", 8), 3);
    }
}
