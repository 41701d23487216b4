//! tablesql: SQL over partitioned table storage, the PartitionKey/RowKey model of
//! Azure Table Storage.
//!
//! A table definition maps SQL columns onto the keys through key templates
//! ([`catalog`], [`keys`]); the planner turns predicates into point queries
//! and key range scans, run in parallel page by page, over any
//! [`storage::TableStore`]: the embedded store (redb, the default), the Azure
//! Table service (`storage::AzureStore`, feature `azure`) or memory.
//! An [`Engine`] is what every session over a store shares, and lists and
//! describes the tables it maps; [`Engine::session`] gives a [`Session`],
//! the one door: it runs, prepares and pages SQL under its own settings
//! and transaction block. The wire server (`server`, feature `server`) and
//! the shell (`shell`, feature `shell`) go through it too.
//!
//! # Features
//!
//! All on by default, so that `cargo build` builds the `tablesql` tool.
//! An embedder who wants the engine alone over the embedded store writes
//! `tablesql = { version = "0.1", default-features = false }`, which leaves
//! out pgwire, rustyline, reqwest, clap and DataFusion's parquet and
//! compression codecs (docs/embedding.md, "The engine alone", gives both builds' times).
//!
//! | Feature | What it adds |
//! |---|---|
//! | `azure` | The Azure Table REST backend and `azure:` store locations |
//! | `server` | The Postgres wire server, `pg_catalog` and psql's SQL dialect |
//! | `shell` | The interactive shell |
//! | `cli` | The `tablesql` binary; turns on the three above |
//!
//! # Query
//!
//! Map a table, then read it with SQL. Rows may come from any application
//! that writes entities under the template's keys.
//!
//! ```
//! use std::sync::Arc;
//! use tablesql::storage::*;
//! use tablesql::{Engine, EngineOptions};
//! use tablesql::datafusion::arrow::util::pretty::pretty_format_batches;
//!
//! # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let store: Arc<dyn TableStore> = Arc::new(EmbeddedStore::in_memory()?);
//! let engine = Engine::with_store(store.clone(), EngineOptions::default()).await?;
//! // What every session shares is the engine's; statements run in a session.
//! let session = engine.session();
//! session.collect(
//!     "CREATE TABLE runners (race TEXT NOT NULL, bib INT NOT NULL, name TEXT, age INT) \
//!      WITH (storage_table = 'Runners', partition_key = '{race}', row_key = 'BIB:{bib:05}')",
//! ).await?;
//!
//! // Entities written by any application, under the template's keys.
//! let races = TableName::new("Runners")?;
//! for (bib, name, age) in [(1234, "John", 55), (7, "Mary", 31)] {
//!     let runner = Entity::new(PartitionKey::new("Boston")?, RowKey::new(format!("BIB:{bib:05}"))?)
//!         .with("name", EdmValue::String(name.into()))
//!         .with("age", EdmValue::Int32(age));
//!     store.execute(&races, WriteOp::Insert(runner)).await?;
//! }
//!
//! // Both keys fixed: a point read of one entity.
//! let sql = "SELECT name, age FROM runners WHERE race = 'Boston' AND bib = 1234";
//! let plan = pretty_format_batches(&session.collect(&format!("EXPLAIN {sql}")).await?)?.to_string();
//! assert!(plan.contains("access=point"));
//! let rows = pretty_format_batches(&session.collect(sql).await?)?.to_string();
//! assert!(rows.contains("| John | 55  |"));
//! # Ok(())
//! # }
//! ```
//!
//! # Write
//!
//! `INSERT`, `UPDATE`, `DELETE` and `INSERT ... ON CONFLICT` write base rows
//! and their index rows together, one entity group transaction per
//! partition; a write answers with its row count.
//!
//! ```
//! # use std::sync::Arc;
//! # use tablesql::storage::{EmbeddedStore, TableStore};
//! # use tablesql::{Engine, EngineOptions};
//! use tablesql::datafusion::arrow::array::AsArray;
//! use tablesql::datafusion::arrow::datatypes::UInt64Type;
//! # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let store: Arc<dyn TableStore> = Arc::new(EmbeddedStore::in_memory()?);
//! # let session = Engine::with_store(store, EngineOptions::default()).await?.session();
//! # session.collect(
//! #     "CREATE TABLE runners (race TEXT NOT NULL, bib INT NOT NULL, name TEXT, age INT) \
//! #      WITH (storage_table = 'Runners', partition_key = '{race}', row_key = 'BIB:{bib:05}')",
//! # ).await?;
//! let written = session
//!     .collect("INSERT INTO runners VALUES ('Boston', 1, 'Ann', 34), ('Boston', 2, 'Bo', 51)")
//!     .await?;
//! assert_eq!(written[0].column(0).as_primitive::<UInt64Type>().value(0), 2);
//! let updated = session
//!     .collect("UPDATE runners SET age = 35 WHERE race = 'Boston' AND bib = 1")
//!     .await?;
//! assert_eq!(updated[0].column(0).as_primitive::<UInt64Type>().value(0), 1);
//! # Ok(())
//! # }
//! ```
//!
//! # Prepare
//!
//! A [`PreparedStatement`] is planned once and run with `$1`, `$2`, ...
//! bound to values; one that fixes both keys runs as a point read without
//! planning. It is planned again after the catalog changes.
//!
//! ```
//! # use std::sync::Arc;
//! # use tablesql::storage::{EmbeddedStore, TableStore};
//! # use tablesql::{Engine, EngineOptions};
//! use tablesql::datafusion::scalar::ScalarValue;
//! # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let store: Arc<dyn TableStore> = Arc::new(EmbeddedStore::in_memory()?);
//! # let session = Engine::with_store(store, EngineOptions::default()).await?.session();
//! # session.collect(
//! #     "CREATE TABLE runners (race TEXT NOT NULL, bib INT NOT NULL, name TEXT, age INT) \
//! #      WITH (storage_table = 'Runners', partition_key = '{race}', row_key = 'BIB:{bib:05}')",
//! # ).await?;
//! # session.collect("INSERT INTO runners VALUES ('Boston', 1, 'Ann', 34), ('Boston', 2, 'Bo', 51)").await?;
//! let by_bib = session
//!     .prepare("SELECT name FROM runners WHERE race = $1 AND bib = $2")
//!     .await?;
//! assert!(by_bib.is_point_read());
//! for bib in [1, 2] {
//!     let rows = by_bib
//!         .query(vec![ScalarValue::from("Boston"), ScalarValue::Int32(Some(bib))])
//!         .await?;
//!     assert_eq!(rows[0].num_rows(), 1);
//! }
//! # Ok(())
//! # }
//! ```
//!
//! # Page with a token
//!
//! [`Session::query_page`] reads at most a page of rows in key order and
//! hands back a signed token of the next page; any engine over the same
//! store resumes from it, so a stateless service can give it to its client.
//!
//! ```
//! # use std::sync::Arc;
//! # use tablesql::storage::{EmbeddedStore, TableStore};
//! # use tablesql::{Engine, EngineOptions};
//! # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let store: Arc<dyn TableStore> = Arc::new(EmbeddedStore::in_memory()?);
//! # let session = Engine::with_store(store, EngineOptions::default()).await?.session();
//! # session.collect(
//! #     "CREATE TABLE runners (race TEXT NOT NULL, bib INT NOT NULL, name TEXT, age INT) \
//! #      WITH (storage_table = 'Runners', partition_key = '{race}', row_key = 'BIB:{bib:05}')",
//! # ).await?;
//! # session.collect("INSERT INTO runners VALUES ('Boston', 1, 'Ann', 34), ('Boston', 2, 'Bo', 51), ('Boston', 3, 'Cy', 27)").await?;
//! let sql = "SELECT name FROM runners WHERE race = 'Boston'";
//! let first = session.query_page(sql, 2, None).await?;
//! assert_eq!(first.batches.iter().map(|b| b.num_rows()).sum::<usize>(), 2);
//! let token = first.next.expect("a second page");
//! // Later, perhaps in another process over the same store:
//! let second = session.query_page(sql, 2, Some(&token)).await?;
//! assert_eq!(second.batches.iter().map(|b| b.num_rows()).sum::<usize>(), 1);
//! assert!(second.next.is_none());
//! # Ok(())
//! # }
//! ```

#![deny(missing_docs)]

pub use tablesql_engine::{catalog, demo, keys, load, storage, stress};
#[cfg(feature = "server")]
pub use tablesql_server::server;
#[cfg(feature = "shell")]
pub use tablesql_shell::shell;
#[cfg(feature = "tableservice")]
pub use tablesql_tableservice as tableservice;

/// The DataFusion release tablesql is built on, for embedders.
pub use datafusion;
pub use tablesql_engine::{
    Applied, BlockChange, BlockEnd, BlockStatus, Cell, ColumnInfo, DEFAULT_CATALOG_CHECK,
    DdlOutcome, Dialect, Engine, EngineError, EngineOptions, ExecError, IndexHealth, IndexInfo,
    IndexTemplate, MappingInfo, MemoryLimits, Outcome, PG_VERSION, PG_VERSION_NUM, ParameterError,
    PreparedStatement, RAW_SCHEMA, Reading, Respell, ResultPage, Row, ScanOptions, ScanPolicy,
    Session, StatementKind, StoredAs, THREAD_STACK, TableDescription, TableInfo, TokenError,
    WholeTable, Write,
};

/// Internals the project's own benchmarks drive directly. Not API: no
/// promise holds for them between releases.
#[doc(hidden)]
#[cfg(feature = "server")]
pub mod __bench {
    pub use tablesql_server::server::cancel::Guard;
    pub use tablesql_server::server::plan::Runner;
}
