//! tablesql: SQL over partitioned table storage, the PartitionKey/RowKey model of
//! Azure Table Storage.
//!
//! A table definition maps SQL columns onto the keys through key templates
//! ([`catalog`], [`keys`]); the planner turns predicates into point queries
//! and key range scans ([`planner`]), run in parallel page by page
//! ([`exec`]), over any [`storage::TableStore`]: the embedded store (redb,
//! the default), the Azure Table service ([`storage::AzureStore`]) or memory.
//! [`Engine`] ties them to a DataFusion `SessionContext`.
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
//! engine.collect(
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
//! let plan = pretty_format_batches(&engine.collect(&format!("EXPLAIN {sql}")).await?)?.to_string();
//! assert!(plan.contains("access=point"));
//! let rows = pretty_format_batches(&engine.collect(sql).await?)?.to_string();
//! assert!(rows.contains("| John | 55  |"));
//! # Ok(())
//! # }
//! ```

pub mod catalog;
pub mod demo;
pub mod engine;
pub mod exec;
pub mod keys;
pub mod load;
pub mod planner;
pub mod server;
pub mod shell;
pub mod storage;
pub mod stress;

/// The DataFusion release tablesql is built on, for embedders.
pub use datafusion;
pub use engine::{Engine, EngineError, EngineOptions, PreparedStatement};
