//! How a transaction block ends, decided in one place for every front end.
//!
//! `COMMIT` writes the block's buffer as one entity group transaction and
//! `ROLLBACK` drops it; what the client is told is a command tag. A front end
//! that knows a statement of the block failed (the wire server does, from
//! the protocol's transaction status) asks for the end PostgreSQL gives such
//! a block: its `COMMIT` rolls back and answers `ROLLBACK`. Otherwise a
//! `COMMIT` of a block whose write failed rolls it back and says so as an
//! error (`TransactionScope::Aborted`).

use datafusion::sql::sqlparser::ast::Statement;

use super::{EngineError, Transaction};
use crate::storage::TableStore;

/// How a block ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockEnd {
    /// Its writes are in the store.
    Committed,
    /// Nothing of it was written.
    RolledBack,
}

impl BlockEnd {
    /// The command tag PostgreSQL answers with.
    pub fn tag(self) -> &'static str {
        match self {
            BlockEnd::Committed => "COMMIT",
            BlockEnd::RolledBack => "ROLLBACK",
        }
    }
}

/// Ends `tx`'s block as `statement` asks: `COMMIT`, or `ROLLBACK` without a
/// savepoint; `None` for any other statement. `failed`: the front end saw a
/// statement of the block fail (see the module doc). The block is closed
/// whatever the outcome, as a failed `COMMIT` closes it in PostgreSQL.
pub async fn end_block(
    tx: &Transaction,
    store: &dyn TableStore,
    statement: &Statement,
    failed: bool,
) -> Option<Result<BlockEnd, EngineError>> {
    let commit = match statement {
        Statement::Commit { .. } => true,
        Statement::Rollback {
            savepoint: None, ..
        } => false,
        _ => return None,
    };
    Some(if commit && !failed {
        tx.commit(store)
            .await
            .map(|_| BlockEnd::Committed)
            .map_err(EngineError::from)
    } else {
        tx.rollback();
        Ok(BlockEnd::RolledBack)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::planner::SqlParser;
    use crate::storage::memory::MemoryStore;

    fn statement(sql: &str) -> Statement {
        SqlParser::new().parse(sql).expect("parses").remove(0)
    }

    #[tokio::test]
    async fn a_block_ends_as_its_statement_and_its_failure_say() {
        let store = MemoryStore::new();
        let tx = Transaction::default();
        let cases = [
            ("COMMIT", false, Some(BlockEnd::Committed)),
            ("END", false, Some(BlockEnd::Committed)),
            ("ROLLBACK", false, Some(BlockEnd::RolledBack)),
            // PostgreSQL's answer to COMMIT of a failed block.
            ("COMMIT", true, Some(BlockEnd::RolledBack)),
            ("ROLLBACK TO s", false, None),
            ("SELECT 1", false, None),
        ];
        for (sql, failed, expected) in cases {
            tx.begin();
            let end = end_block(&tx, &store, &statement(sql), failed).await;
            let end = end.map(|r| r.map_err(|e| e.to_string()));
            assert_eq!(end, expected.map(Ok), "{sql}, failed: {failed}");
            // An end closes the block; anything else leaves it open.
            assert_eq!(tx.is_open(), expected.is_none(), "{sql}");
            tx.rollback();
        }
        assert_eq!(BlockEnd::Committed.tag(), "COMMIT");
        assert_eq!(BlockEnd::RolledBack.tag(), "ROLLBACK");
    }
}
