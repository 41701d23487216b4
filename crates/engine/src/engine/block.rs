//! Transaction control, decided in one place for every front end: `BEGIN`,
//! `COMMIT`, `ROLLBACK`, `SAVEPOINT`, `RELEASE` and `ROLLBACK TO` on a
//! session's block (`exec::write::transaction`), and what may run in a
//! failed one.
//!
//! The block is the one authority on "failed": a session marks it when any
//! statement of the block fails (`Transaction::fail`), a failed write marks
//! it itself. From then on only its end runs; its `COMMIT` rolls back and
//! answers `ROLLBACK`, and `ROLLBACK TO` a savepoint makes it good again, as
//! in PostgreSQL. The wire server tells the client this state; it keeps none
//! of its own.

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{
    GroupByExpr, Query, Set, SetExpr, Statement, TransactionMode, Visit, Visitor,
};

use super::{EngineError, Transaction};
use crate::catalog::normalize_ident;
use crate::exec::write::commit::Order;
use crate::exec::write::locks::{Locking, Strength};
use crate::exec::write::reads::Isolation;
use crate::storage::TableStore;

/// The order a wide COMMIT writes in: global index entities around the
/// base rows (`commit::Order`). Read from the stored catalog only for a
/// block that writes more than one table, since only such a block can hold
/// index entities; if that read fails, so does the COMMIT (nothing of the
/// block is written).
async fn commit_order(tx: &Transaction, store: &dyn TableStore) -> Result<Order, EngineError> {
    if !tx.spans_tables() {
        return Ok(Order::default());
    }
    let defs = crate::catalog::persist::load(store).await?;
    Ok(Order::new(
        defs.iter()
            .flat_map(|d| d.global_indexes.iter().map(|g| &g.table)),
    ))
}

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

/// What a transaction-control statement did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockChange {
    /// `BEGIN`: a block is open (a second `BEGIN` keeps the first).
    Began,
    /// `COMMIT` or `ROLLBACK`: the block is closed.
    Ended(BlockEnd),
    /// `SAVEPOINT`: a mark in the block's buffer.
    Savepoint,
    /// `RELEASE`: a mark and the ones after it forgotten.
    Released,
    /// `ROLLBACK TO`: back to a mark, and the block good again.
    RolledBackTo,
    /// `SET TRANSACTION`: the open block's isolation level (outside a
    /// block, nothing, as PostgreSQL warns and goes on).
    Isolation,
}

impl BlockChange {
    /// The command tag PostgreSQL answers with.
    pub fn tag(self) -> &'static str {
        match self {
            BlockChange::Began => "BEGIN",
            BlockChange::Ended(end) => end.tag(),
            BlockChange::Savepoint => "SAVEPOINT",
            BlockChange::Released => "RELEASE",
            BlockChange::RolledBackTo => "ROLLBACK",
            BlockChange::Isolation => "SET",
        }
    }
}

/// Where a session stands, as the wire protocol's ReadyForQuery reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockStatus {
    /// No block is open.
    Idle,
    /// A block is open.
    InBlock,
    /// A block is open and a statement of it failed.
    Failed,
}

/// The status of `tx`.
pub fn status(tx: &Transaction) -> BlockStatus {
    match tx.open_and_failed() {
        (false, _) => BlockStatus::Idle,
        (true, false) => BlockStatus::InBlock,
        (true, true) => BlockStatus::Failed,
    }
}

/// Whether `statement` may run in `tx`'s state: in a failed block only
/// `COMMIT` and `ROLLBACK` (to a savepoint too) do.
pub fn admit(tx: &Transaction, statement: &Statement) -> Result<(), EngineError> {
    let ends = matches!(
        statement,
        Statement::Commit { .. } | Statement::Rollback { .. }
    );
    if tx.is_aborted() && !ends {
        return Err(EngineError::InFailedTransaction);
    }
    Ok(())
}

/// The row locks a statement's reads take (`SELECT ... FOR UPDATE`), if
/// any; refused as PostgreSQL refuses them where its rows are not the
/// table's (0A000). `EXPLAIN` checks the clause of the query it shows and
/// takes no lock, since it reads no row; `EXPLAIN ANALYZE` runs the query,
/// and takes its locks as PostgreSQL's does.
pub fn locking(statement: &Statement) -> Result<Option<Locking>, EngineError> {
    let (statement, reads) = match statement {
        Statement::Explain {
            statement, analyze, ..
        } => (statement.as_ref(), *analyze),
        other => (other, true),
    };
    if nested_locking(statement) {
        return Err(EngineError::NotSupported(
            "FOR UPDATE and FOR SHARE are supported on a statement's own SELECT, not in a subquery, a CTE or a write's query".into(),
        ));
    }
    let Statement::Query(query) = statement else {
        return Ok(None);
    };
    let Some(locking) = Locking::of(query) else {
        return Ok(None);
    };
    let clause = match locking.strength {
        Strength::Share => "FOR SHARE",
        Strength::Update => "FOR UPDATE",
    };
    let with = match query.body.as_ref() {
        SetExpr::SetOperation { .. } => Some("UNION/INTERSECT/EXCEPT"),
        SetExpr::Select(select) if select.distinct.is_some() => Some("DISTINCT clause"),
        SetExpr::Select(select) if !matches!(&select.group_by, GroupByExpr::Expressions(e, _) if e.is_empty()) => {
            Some("GROUP BY clause")
        }
        SetExpr::Select(select) if select.having.is_some() => Some("HAVING clause"),
        _ => None,
    };
    match with {
        Some(with) => Err(EngineError::NotSupported(format!(
            "{clause} is not allowed with {with}"
        ))),
        None => Ok(reads.then_some(locking)),
    }
}

/// Whether a locking clause stands anywhere but on the statement's own
/// query: DataFusion plans every query without its clauses, so such a lock
/// would be dropped without a word.
fn nested_locking(statement: &Statement) -> bool {
    struct Count(usize);
    impl Visitor for Count {
        type Break = ();
        fn pre_visit_query(&mut self, query: &Query) -> ControlFlow<()> {
            if !query.locks.is_empty() {
                self.0 += 1;
            }
            ControlFlow::Continue(())
        }
    }
    let mut count = Count(0);
    let _ = statement.visit(&mut count);
    let own = matches!(statement, Statement::Query(q) if !q.locks.is_empty());
    count.0 > usize::from(own)
}

/// The isolation level `modes` name, if they name one.
fn isolation_of(modes: &[TransactionMode]) -> Option<Isolation> {
    modes.iter().find_map(|m| match m {
        TransactionMode::IsolationLevel(level) => Some(Isolation::of(level)),
        TransactionMode::AccessMode(_) => None,
    })
}

/// Runs `statement` on `tx` if it is transaction control; `None` if it is
/// not. A block is closed by its `COMMIT` or `ROLLBACK` whatever the
/// outcome, as a failed `COMMIT` closes it in PostgreSQL. A `BEGIN` that
/// names no isolation level opens the block at `default` (the session's
/// `default_transaction_isolation`).
pub async fn control(
    tx: &Transaction,
    store: &dyn TableStore,
    statement: &Statement,
    default: Isolation,
) -> Option<Result<BlockChange, EngineError>> {
    let mark = |what: &'static str, name| {
        if !tx.is_open() {
            return Err(EngineError::NoTransactionBlock(what));
        }
        Ok(normalize_ident(name))
    };
    let no_savepoint = |name: String| Err(EngineError::NoSavepoint(name));
    Some(match statement {
        Statement::StartTransaction { modes, .. } => {
            tx.begin(isolation_of(modes).unwrap_or(default));
            Ok(BlockChange::Began)
        }
        // `SET TRANSACTION`, not `SET SESSION CHARACTERISTICS AS
        // TRANSACTION` (the session's default: `planner::parameters`).
        Statement::Set(Set::SetTransaction {
            modes,
            session: false,
            ..
        }) => match isolation_of(modes) {
            Some(level) if !tx.set_isolation(level) => Err(EngineError::IsolationAfterQuery),
            _ => Ok(BlockChange::Isolation),
        },
        Statement::Commit { chain: true, .. } | Statement::Rollback { chain: true, .. } => Err(
            EngineError::NotSupported("AND CHAIN is not supported".into()),
        ),
        Statement::Commit { .. } => {
            if tx.is_aborted() {
                tx.rollback();
                Ok(BlockChange::Ended(BlockEnd::RolledBack))
            } else {
                match commit_order(tx, store).await {
                    Ok(order) => match tx.commit(store, &order).await {
                        Ok(_) => Ok(BlockChange::Ended(BlockEnd::Committed)),
                        Err(e) => Err(e.into()),
                    },
                    Err(e) => {
                        tx.rollback();
                        Err(e)
                    }
                }
            }
        }
        Statement::Rollback {
            savepoint: None, ..
        } => {
            tx.rollback();
            Ok(BlockChange::Ended(BlockEnd::RolledBack))
        }
        Statement::Rollback {
            savepoint: Some(name),
            ..
        } => match mark("ROLLBACK TO SAVEPOINT", name) {
            Ok(name) if tx.rollback_to(&name) => Ok(BlockChange::RolledBackTo),
            Ok(name) => no_savepoint(name),
            Err(e) => Err(e),
        },
        Statement::Savepoint { name } => match mark("SAVEPOINT", name) {
            Ok(name) if tx.savepoint(&name) => Ok(BlockChange::Savepoint),
            Ok(name) => no_savepoint(name),
            Err(e) => Err(e),
        },
        Statement::ReleaseSavepoint { name } => match mark("RELEASE SAVEPOINT", name) {
            Ok(name) if tx.release(&name) => Ok(BlockChange::Released),
            Ok(name) => no_savepoint(name),
            Err(e) => Err(e),
        },
        _ => return None,
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

    async fn run(tx: &Transaction, sql: &str) -> Option<Result<&'static str, String>> {
        let store = MemoryStore::new();
        let s = statement(sql);
        if let Err(e) = admit(tx, &s) {
            return Some(Err(e.to_string()));
        }
        control(tx, &store, &s, Isolation::default())
            .await
            .map(|r| r.map(BlockChange::tag).map_err(|e| e.to_string()))
    }

    #[tokio::test]
    async fn a_block_answers_as_postgresql_and_a_failure_is_its_own() {
        let tx = Transaction::default();
        assert_eq!(status(&tx), BlockStatus::Idle);
        assert_eq!(run(&tx, "SELECT 1").await, None);
        assert!(run(&tx, "SAVEPOINT s").await.is_some_and(|r| r.is_err()));
        assert_eq!(run(&tx, "BEGIN").await, Some(Ok("BEGIN")));
        assert_eq!(run(&tx, "SAVEPOINT s").await, Some(Ok("SAVEPOINT")));
        assert_eq!(status(&tx), BlockStatus::InBlock);
        // A failed statement: only the block's end runs.
        tx.fail();
        assert_eq!(status(&tx), BlockStatus::Failed);
        let refused = run(&tx, "SELECT 1").await;
        assert!(refused.is_some_and(|r| r.is_err_and(|e| e.contains("is aborted"))));
        assert_eq!(run(&tx, "ROLLBACK TO s").await, Some(Ok("ROLLBACK")));
        assert_eq!(status(&tx), BlockStatus::InBlock);
        assert_eq!(run(&tx, "RELEASE s").await, Some(Ok("RELEASE")));
        let gone = run(&tx, "RELEASE s").await;
        assert!(gone.is_some_and(|r| r.is_err_and(|e| e.contains("\"s\" does not exist"))));
        // COMMIT of a failed block rolls it back, without an error.
        tx.fail();
        assert_eq!(run(&tx, "COMMIT").await, Some(Ok("ROLLBACK")));
        assert_eq!(status(&tx), BlockStatus::Idle);
        assert_eq!(run(&tx, "BEGIN").await, Some(Ok("BEGIN")));
        assert_eq!(run(&tx, "END").await, Some(Ok("COMMIT")));
        // Outside a block a failure is nothing.
        tx.fail();
        assert_eq!(status(&tx), BlockStatus::Idle);
    }
}
