//! The service's answers as the model's errors: `odata.error` codes mapped onto
//! `StorageError`, retries that ran out, and writes whose outcome a lost answer
//! left unknown.

use super::super::error::{InvalidInput, StorageError};
use super::super::key::{PartitionKey, RowKey};
use super::super::table_name::TableName;
use super::http::{Failure, SendError};
use crate::storage::retry;

/// What a request was about, to turn the service's error codes into ours.
#[derive(Debug, Clone, Copy)]
pub struct Ctx<'a> {
    pub table: &'a str,
    pub keys: Option<(&'a PartitionKey, &'a RowKey)>,
}

impl<'a> Ctx<'a> {
    /// A request about a table as a whole.
    pub fn table(table: &'a TableName) -> Self {
        Self {
            table: table.as_str(),
            keys: None,
        }
    }

    /// A request about one entity.
    pub fn entity(table: &'a TableName, pk: &'a PartitionKey, rk: &'a RowKey) -> Self {
        Self {
            table: table.as_str(),
            keys: Some((pk, rk)),
        }
    }
}

/// The error of a request that failed after its retries.
pub fn map_error(err: SendError, ctx: &Ctx<'_>) -> StorageError {
    let (status, code, message) = match &err.failure {
        Failure::Transport(detail) => {
            return StorageError::Unavailable {
                attempts: err.attempts,
                detail: detail.clone(),
                may_have_applied: err.answer_lost,
            };
        }
        Failure::Local(detail) => return InvalidInput::Unsendable(detail.clone()).into(),
        Failure::SignIn(detail) => {
            return StorageError::Unauthorized {
                code: "SignInFailed".into(),
                message: detail.clone(),
            };
        }
        Failure::Status {
            status,
            code,
            message,
            ..
        } => (*status, code.as_str(), message.as_str()),
    };
    if retry::is_retryable_status(status) || matches!(code, "ServerBusy" | "OperationTimedOut") {
        return StorageError::Unavailable {
            attempts: err.attempts,
            detail: format!("{status} {code}: {}", first_line(message)),
            may_have_applied: err.answer_lost,
        };
    }
    ambiguous_if_lost(
        map_status(status, code, message, ctx),
        err.answer_lost,
        err.attempts,
    )
}

/// `err`, or `AmbiguousRetry` around it where a retry after a lost answer met
/// what the first attempt would have caused (409, 412, 404).
pub fn ambiguous_if_lost(err: StorageError, answer_lost: bool, attempts: u32) -> StorageError {
    let conflict = matches!(
        err.root(),
        StorageError::EntityAlreadyExists { .. }
            | StorageError::PreconditionFailed { .. }
            | StorageError::EntityNotFound { .. }
            | StorageError::TableAlreadyExists(_)
            | StorageError::TableNotFound(_)
    );
    if answer_lost && conflict {
        StorageError::AmbiguousRetry {
            attempts,
            source: Box::new(err),
        }
    } else {
        err
    }
}

/// The service's error codes as the model's errors. Refusals of input the
/// client-side checks let through keep the service's code in `Rejected`.
pub fn map_status(status: u16, code: &str, message: &str, ctx: &Ctx<'_>) -> StorageError {
    let table = ctx.table.to_owned();
    let (partition_key, row_key) = ctx.keys.map_or((String::new(), String::new()), |(p, r)| {
        (p.as_str().to_owned(), r.as_str().to_owned())
    });
    let message = first_line(message).to_owned();
    match code {
        "TableNotFound" => StorageError::TableNotFound(table),
        "ResourceNotFound" | "EntityNotFound" if ctx.keys.is_some() => {
            StorageError::EntityNotFound {
                partition_key,
                row_key,
            }
        }
        "ResourceNotFound" => StorageError::TableNotFound(table),
        "TableAlreadyExists" => StorageError::TableAlreadyExists(table),
        "EntityAlreadyExists" => StorageError::EntityAlreadyExists {
            partition_key,
            row_key,
        },
        "TableBeingDeleted" => StorageError::TableBeingDeleted(table),
        _ if status == 412 => StorageError::PreconditionFailed {
            partition_key,
            row_key,
        },
        _ if status == 401 || status == 403 => StorageError::Unauthorized {
            code: code.to_owned(),
            message,
        },
        _ if status == 400 || status == 413 => InvalidInput::Rejected {
            code: code.to_owned(),
            message,
        }
        .into(),
        _ => StorageError::Service {
            status,
            code: code.to_owned(),
            message,
        },
    }
}

/// The service's messages end with request ids and times; the first line says it.
fn first_line(message: &str) -> &str {
    message.lines().next().unwrap_or("")
}
