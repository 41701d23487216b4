//! `SAVEPOINT`, `RELEASE [SAVEPOINT]` and `ROLLBACK TO [SAVEPOINT]` inside a
//! transaction block, as drivers send them (psycopg 3's SQLAlchemy dialect
//! opens one on connect; ORMs nest transactions with them). A savepoint is
//! a mark in the transaction's write buffer (`exec::transaction`), which
//! `ROLLBACK TO` returns to; names are checked as PostgreSQL checks them.
//!
//! `ROLLBACK TO` also clears an error in the transaction, as in PostgreSQL
//! (drivers recover so from a failed statement). pgwire keeps a failed
//! transaction failed whatever the answer, since it reads the status before
//! a message and writes it after: the connection's loop
//! (`connection.rs`) lifts the failed state around such a statement and
//! sets it back to in-transaction after it, and the session answers it as
//! failed ([`Savepoints::take_failed`], [`Savepoints::take_recovered`]).

use std::sync::atomic::{AtomicBool, Ordering};

use datafusion::sql::sqlparser::ast::Statement;
use pgwire::api::results::{Response, Tag};
use pgwire::error::PgWireResult;
use pgwire::messages::response::TransactionStatus;

use super::sqlstate::{INVALID_SAVEPOINT, NO_ACTIVE_TRANSACTION, error};
use crate::engine::Transaction;

/// The failed-state bookkeeping of one connection's savepoints (the marks
/// themselves are the transaction's).
#[derive(Debug, Default)]
pub struct Savepoints {
    /// The client's status was lifted from failed for the next simple query.
    failed: AtomicBool,
    /// A `ROLLBACK TO` cleared the transaction's error.
    recovered: AtomicBool,
}

impl Savepoints {
    /// The connection lifted the failed state for the next query.
    pub fn mark_failed(&self) {
        self.failed.store(true, Ordering::Relaxed);
    }

    /// Whether the transaction is failed though the client's status says
    /// otherwise (see [`Self::mark_failed`]); asked once per query.
    pub fn take_failed(&self) -> bool {
        self.failed.swap(false, Ordering::Relaxed)
    }

    /// Whether a `ROLLBACK TO` cleared an error since the last call.
    pub fn take_recovered(&self) -> bool {
        self.recovered.swap(false, Ordering::Relaxed)
    }

    /// Answers a savepoint statement on `tx`; `None` for any other
    /// statement.
    pub fn apply(
        &self,
        statement: &Statement,
        status: TransactionStatus,
        tx: &Transaction,
    ) -> Option<PgWireResult<Response>> {
        let (name, what) = match statement {
            Statement::Savepoint { name } => (name, "SAVEPOINT"),
            Statement::ReleaseSavepoint { name } => (name, "RELEASE SAVEPOINT"),
            Statement::Rollback {
                savepoint: Some(name),
                ..
            } => (name, "ROLLBACK TO SAVEPOINT"),
            _ => return None,
        };
        if matches!(status, TransactionStatus::Idle) {
            return Some(Err(error(
                NO_ACTIVE_TRANSACTION,
                format!("{what} can only be used in transaction blocks"),
            )));
        }
        let name = crate::catalog::normalize_ident(name);
        let answer = match statement {
            Statement::Savepoint { .. } => tx.savepoint(&name).then_some("SAVEPOINT"),
            Statement::ReleaseSavepoint { .. } => tx.release(&name).then_some("RELEASE"),
            // Back to the mark, which stays, and the transaction is good
            // again.
            _ => tx.rollback_to(&name).then(|| {
                if matches!(status, TransactionStatus::Error) {
                    self.recovered.store(true, Ordering::Relaxed);
                }
                "ROLLBACK"
            }),
        };
        Some(match answer {
            Some(tag) => Ok(Response::Execution(Tag::new(tag))),
            // The newest of that name is the one PostgreSQL picks; there
            // is none.
            None => Err(error(
                INVALID_SAVEPOINT,
                format!("savepoint \"{name}\" does not exist"),
            )),
        })
    }
}
