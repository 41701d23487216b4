//! `SAVEPOINT`, `RELEASE [SAVEPOINT]` and `ROLLBACK TO [SAVEPOINT]` inside a
//! transaction block, as drivers send them (psycopg 3's SQLAlchemy dialect
//! opens one on connect; ORMs nest transactions with them). Here a
//! savepoint is a name on a stack, checked as PostgreSQL checks it; the
//! session mirrors each accepted one as a mark in the transaction's write
//! buffer (`exec::transaction`), which `ROLLBACK TO` returns to.
//!
//! `ROLLBACK TO` also clears an error in the transaction, as in PostgreSQL
//! (drivers recover so from a failed statement). pgwire keeps a failed
//! transaction failed whatever the answer, since it reads the status before
//! a message and writes it after: the connection's loop
//! (`connection.rs`) lifts the failed state around such a statement and
//! sets it back to in-transaction after it, and the session answers it as
//! failed ([`Savepoints::take_failed`], [`Savepoints::take_recovered`]).

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use datafusion::sql::sqlparser::ast::Statement;
use pgwire::api::results::{Response, Tag};
use pgwire::error::PgWireResult;
use pgwire::messages::response::TransactionStatus;

use super::sqlstate::{INVALID_SAVEPOINT, NO_ACTIVE_TRANSACTION, error};

/// The savepoints of one connection's transaction, oldest first.
#[derive(Debug, Default)]
pub struct Savepoints {
    names: Mutex<Vec<String>>,
    /// The client's status was lifted from failed for the next simple query.
    failed: AtomicBool,
    /// A `ROLLBACK TO` cleared the transaction's error.
    recovered: AtomicBool,
}

impl Savepoints {
    /// Forgets them all: the transaction began or ended.
    pub fn clear(&self) {
        if let Ok(mut names) = self.names.lock() {
            names.clear();
        }
    }

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

    /// Answers a savepoint statement; `None` for any other statement.
    pub fn apply(
        &self,
        statement: &Statement,
        status: TransactionStatus,
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
        let Ok(mut names) = self.names.lock() else {
            return Some(Err(error(
                INVALID_SAVEPOINT,
                "the savepoints are unreadable",
            )));
        };
        if let Statement::Savepoint { .. } = statement {
            names.push(name);
            return Some(Ok(Response::Execution(Tag::new("SAVEPOINT"))));
        }
        // The newest of that name, as PostgreSQL picks.
        let Some(at) = names.iter().rposition(|n| *n == name) else {
            return Some(Err(error(
                INVALID_SAVEPOINT,
                format!("savepoint \"{name}\" does not exist"),
            )));
        };
        Some(Ok(match statement {
            Statement::ReleaseSavepoint { .. } => {
                names.truncate(at);
                Response::Execution(Tag::new("RELEASE"))
            }
            // Back to the savepoint, which stays (the session returns the
            // write buffer to its mark), and the transaction is good again.
            _ => {
                names.truncate(at + 1);
                if matches!(status, TransactionStatus::Error) {
                    self.recovered.store(true, Ordering::Relaxed);
                }
                Response::Execution(Tag::new("ROLLBACK"))
            }
        }))
    }
}
