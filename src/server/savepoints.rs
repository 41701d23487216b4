//! `SAVEPOINT`, `RELEASE [SAVEPOINT]` and `ROLLBACK TO [SAVEPOINT]` inside a
//! transaction block, as drivers send them (psycopg 3's SQLAlchemy dialect
//! opens one on connect; ORMs nest transactions with them). Writes are
//! refused inside a transaction block (the store cannot roll them back), so
//! a transaction holds only reads and a savepoint has nothing to undo: it
//! is a name on a stack, checked as PostgreSQL checks it. One difference:
//! in PostgreSQL `ROLLBACK TO` also clears an error in the transaction;
//! pgwire keeps a failed transaction failed whatever the answer, so here it
//! is refused there (0A000), and `ROLLBACK` ends the transaction.

use std::sync::Mutex;

use datafusion::sql::sqlparser::ast::Statement;
use pgwire::api::results::{Response, Tag};
use pgwire::error::PgWireResult;
use pgwire::messages::response::TransactionStatus;

use super::sqlstate::{FEATURE_NOT_SUPPORTED, INVALID_SAVEPOINT, NO_ACTIVE_TRANSACTION, error};

/// The savepoints of one connection's transaction, oldest first.
#[derive(Debug, Default)]
pub struct Savepoints(Mutex<Vec<String>>);

impl Savepoints {
    /// Forgets them all: the transaction began or ended.
    pub fn clear(&self) {
        if let Ok(mut names) = self.0.lock() {
            names.clear();
        }
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
        let Ok(mut names) = self.0.lock() else {
            return Some(Err(error(
                INVALID_SAVEPOINT,
                "the savepoints are unreadable",
            )));
        };
        if matches!(status, TransactionStatus::Error) {
            return Some(Err(error(
                FEATURE_NOT_SUPPORTED,
                "ROLLBACK TO SAVEPOINT cannot clear an error in the transaction here; ROLLBACK it and begin again",
            )));
        }
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
            // Back to the savepoint, which stays.
            _ => {
                names.truncate(at + 1);
                Response::Execution(Tag::new("ROLLBACK"))
            }
        }))
    }
}
