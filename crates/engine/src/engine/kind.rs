//! What a statement is, as the front ends need to know it: the command tag
//! psql prints and the wire protocol sends, whether it writes rows, whether
//! it changes the catalog. One place reads it off the parsed statement, so
//! that a leading comment or odd spacing can never change the answer.

use datafusion::sql::sqlparser::ast::{ObjectType, Statement};

/// Whether a statement is a write with RETURNING: it answers with rows, as
/// a query does, under its write's command tag (`INSERT 0 1`).
pub fn returns_rows(statement: &Statement) -> bool {
    crate::planner::returning::returns_rows(statement)
}

/// The kind of a parsed statement (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum StatementKind {
    /// `INSERT`, `INSERT ... ON CONFLICT` included.
    Insert,
    /// `UPDATE`.
    Update,
    /// `DELETE`.
    Delete,
    /// `TRUNCATE`: every row of its tables deleted.
    Truncate,
    /// `CREATE TABLE` (a mapping, or an embedder's table).
    CreateTable,
    /// `DROP TABLE`.
    DropTable,
    /// `ALTER TABLE`.
    AlterTable,
    /// `CREATE INDEX`.
    CreateIndex,
    /// `DROP INDEX`.
    DropIndex,
    /// `CREATE SEQUENCE`.
    CreateSequence,
    /// `DROP SEQUENCE`.
    DropSequence,
    /// `CREATE VIEW`.
    CreateView,
    /// `DROP VIEW`.
    DropView,
    /// `ANALYZE`.
    Analyze,
    /// `SET`.
    Set,
    /// Anything else: a query, `EXPLAIN`, `SHOW`, a transaction command.
    Other,
}

impl StatementKind {
    /// The kind of `statement`.
    pub fn of(statement: &Statement) -> Self {
        match statement {
            Statement::Insert(_) => Self::Insert,
            Statement::Update { .. } => Self::Update,
            Statement::Delete(_) => Self::Delete,
            Statement::Truncate(_) => Self::Truncate,
            Statement::CreateTable(_) => Self::CreateTable,
            Statement::AlterTable(_) => Self::AlterTable,
            Statement::CreateIndex(_) => Self::CreateIndex,
            Statement::CreateSequence { .. } => Self::CreateSequence,
            Statement::CreateView { .. } => Self::CreateView,
            Statement::Analyze(_) => Self::Analyze,
            Statement::Set(_) => Self::Set,
            Statement::Drop { object_type, .. } => match object_type {
                ObjectType::Table => Self::DropTable,
                ObjectType::Index => Self::DropIndex,
                ObjectType::Sequence => Self::DropSequence,
                ObjectType::View => Self::DropView,
                _ => Self::Other,
            },
            _ => Self::Other,
        }
    }

    /// The command tag of a statement that answers without rows (`INSERT`,
    /// `CREATE TABLE`), as PostgreSQL names it; `None` for the rest.
    pub fn tag(self) -> Option<&'static str> {
        Some(match self {
            Self::Insert => "INSERT",
            Self::Update => "UPDATE",
            Self::Delete => "DELETE",
            Self::Truncate => "TRUNCATE TABLE",
            Self::CreateTable => "CREATE TABLE",
            Self::DropTable => "DROP TABLE",
            Self::AlterTable => "ALTER TABLE",
            Self::CreateIndex => "CREATE INDEX",
            Self::DropIndex => "DROP INDEX",
            Self::CreateSequence => "CREATE SEQUENCE",
            Self::DropSequence => "DROP SEQUENCE",
            Self::CreateView => "CREATE VIEW",
            Self::DropView => "DROP VIEW",
            Self::Analyze => "ANALYZE",
            Self::Set => "SET",
            Self::Other => return None,
        })
    }

    /// Whether it writes rows (its answer is a count of them).
    pub fn writes_rows(self) -> bool {
        matches!(self, Self::Insert | Self::Update | Self::Delete)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::planner::SqlParser;

    fn kind(sql: &str) -> StatementKind {
        let mut statements = SqlParser::new().parse(sql).expect("parses");
        StatementKind::of(&statements.remove(0))
    }

    #[test]
    fn kinds_and_tags_come_from_the_statement_not_its_text() {
        assert_eq!(kind("insert into t values (1)"), StatementKind::Insert);
        assert_eq!(
            kind("-- a note\n/* x */ DELETE FROM t").tag(),
            Some("DELETE")
        );
        assert_eq!(kind("CREATE TABLE t (a INT)").tag(), Some("CREATE TABLE"));
        assert_eq!(kind("DROP INDEX i").tag(), Some("DROP INDEX"));
        assert_eq!(kind("SET x = 1").tag(), Some("SET"));
        assert_eq!(kind("SELECT 1").tag(), None);
        assert!(kind("UPDATE t SET a = 1").writes_rows());
        assert!(!kind("DROP TABLE t").writes_rows());
        assert_eq!(kind("TRUNCATE t").tag(), Some("TRUNCATE TABLE"));
    }

    #[test]
    fn a_write_with_returning_answers_with_rows_under_its_tag() {
        let parse = |sql: &str| SqlParser::new().parse(sql).expect("parses").remove(0);
        for sql in [
            "INSERT INTO t (a) VALUES (1) RETURNING a",
            "INSERT INTO t VALUES (1) ON CONFLICT DO NOTHING RETURNING *",
            "UPDATE t SET a = 2 RETURNING a + 1",
            "DELETE FROM t WHERE a = 1 RETURNING *",
        ] {
            let s = parse(sql);
            assert!(returns_rows(&s), "{sql}");
            assert!(StatementKind::of(&s).writes_rows(), "{sql}");
        }
        assert!(!returns_rows(&parse("INSERT INTO t VALUES (1)")));
        assert!(!returns_rows(&parse("SELECT 1")));
    }
}
