//! tablesql's engine: the catalog of mapped tables, DataFusion planning
//! and execution over a [`storage::TableStore`], the [`Engine`] that
//! sessions share and the [`Session`] of one connection, loading and the
//! stress test. It depends on the storage crate and on nothing above it:
//! the wire server and the shell are front ends over it. Most users want
//! the `tablesql` crate, which re-exports what is named here.

#![deny(missing_docs)]

pub use tablesql_storage::{keys, storage};
#[doc(hidden)]
pub use tablesql_storage::{sqlstate, striped};

pub mod catalog;
pub mod demo;
#[doc(hidden)]
pub mod engine;
#[doc(hidden)]
pub mod exec;
pub mod load;
#[doc(hidden)]
pub mod planner;
mod report;
pub mod stress;

pub use engine::{
    Applied, BlockChange, BlockEnd, BlockStatus, ColumnInfo, DEFAULT_CATALOG_CHECK,
    DEFAULT_DATABASE, DdlOutcome, Engine, EngineError, EngineOptions, IndexHealth, IndexInfo,
    IndexTemplate, MappingInfo, MemoryLimits, Outcome, PG_VERSION, PG_VERSION_NUM,
    PreparedStatement, RAW_SCHEMA, Reading, ResultPage, Session, StatementKind, StoredAs,
    THREAD_STACK, TableDescription, TableInfo, Write,
};
pub use engine::{Dialect, Respell};
pub use exec::read::access::WholeTable;
pub use exec::read::row::{Cell, Row};
pub use exec::read::token::TokenError;
pub use exec::{ExecError, ScanOptions};
pub use planner::parameters::ParameterError;
pub use planner::policy::ScanPolicy;
