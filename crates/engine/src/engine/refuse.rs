//! Statements that would create something only this process remembers.
//!
//! DataFusion answers `CREATE SCHEMA` and `CREATE EXTERNAL TABLE` (and
//! would answer `CREATE TABLE t AS SELECT`, which the engine makes a table of
//! the store instead) by registering an object in the
//! session's memory. In tablesql everything a user creates lives in the store,
//! where every process and every later start finds it; an object in memory
//! would answer queries until the process ends and then be gone with its rows,
//! and another front end would never see it. So the engine refuses these
//! statements, for every front end alike, until the store has a home for them.
//! A table an embedder registers through the DataFusion API stays its own
//! business: this is about SQL.

use datafusion::sql::sqlparser::ast::Statement;

/// Why the engine refuses `statement` (see the module doc); `None` if it
/// does not.
pub fn in_memory_only(statement: &Statement) -> Option<String> {
    let why = match statement {
        Statement::CreateSchema { .. } | Statement::CreateDatabase { .. } => {
            "CREATE SCHEMA and CREATE DATABASE are not supported: tablesql has one schema of mapped tables (public) and one of raw storage tables (raw)"
        }
        _ => return None,
    };
    Some(why.to_owned())
}

/// Why the engine refuses a statement that writes rows in a way a table
/// cannot (`MERGE`); `None` for the rest.
pub fn unsupported_write(statement: &Statement) -> Option<String> {
    match statement {
        Statement::Merge { .. } => Some(
            "tablesql writes rows with INSERT, UPDATE, DELETE, TRUNCATE and COPY; MERGE is not supported".to_owned(),
        ),
        _ => None,
    }
}

/// Why the engine refuses DataFusion's own `CREATE EXTERNAL TABLE`.
pub const EXTERNAL_TABLE: &str =
    "CREATE EXTERNAL TABLE is not supported: tablesql tables live in the store";

/// Why the engine itself refuses `COPY`: its data moves through a client.
pub const COPY: &str = "COPY ... FROM STDIN and TO STDOUT move their data through a client: over the wire (psql's \\copy), or \\copy in tablesql shell";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::planner::SqlParser;

    fn refused(sql: &str) -> bool {
        let statements = SqlParser::new().parse(sql).expect("parses");
        in_memory_only(&statements[0]).is_some()
    }

    #[test]
    fn only_what_would_live_in_memory_is_refused() {
        assert!(!refused("CREATE TABLE t (x INT PRIMARY KEY)"));
        assert!(!refused("CREATE TABLE t AS SELECT 1 AS x"));
        assert!(!refused("CREATE VIEW v AS SELECT 1"));
        assert!(refused("CREATE SCHEMA s"));
        assert!(!refused(
            "CREATE TABLE t (k TEXT NOT NULL) WITH (partition_key = '{k}', row_key = 'x')"
        ));
        assert!(!refused("SELECT 1"));
        assert!(!refused("DROP VIEW v"));
        assert!(!refused("CREATE INDEX i ON t (x)"));
    }
}
