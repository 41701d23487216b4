//! tablesql: SQL over partitioned table storage, the PartitionKey/RowKey model of
//! Azure Table Storage.
//!
//! This release holds the storage foundation: the entity model, the async
//! [`storage::TableStore`] trait with Table Storage semantics, and three
//! backends: the embedded persistent store (redb, the default), the Azure Table
//! service over REST ([`storage::AzureStore`]) and an in-memory reference. The
//! [`keys`] module maps typed column values onto keys through key templates.
//!
//! ```
//! use tablesql::storage::*;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let store = EmbeddedStore::in_memory()?;
//! let races = TableName::new("Races")?;
//! store.create_table(&races).await?;
//! let pk = PartitionKey::new("2011 New York City Marathon__Full")?;
//! let runner = Entity::new(pk.clone(), RowKey::new("BIB:01234__John__M__55")?)
//!     .with("age", EdmValue::Int32(55));
//! store.execute(&races, WriteOp::Insert(runner)).await?;
//!
//! // A RowKey prefix scan: the BIB: rows of one partition.
//! let bibs = Query::partition(pk).rows(KeyRange {
//!     start: std::ops::Bound::Included(RowKey::new("BIB:")?),
//!     end: std::ops::Bound::Excluded(RowKey::new("BIB;")?),
//! });
//! let found = store.query_all(&races, &bibs).await?;
//! assert_eq!(found.len(), 1);
//! assert_eq!(found[0].get("age"), Some(&EdmValue::Int32(55)));
//! # Ok(())
//! # }
//! ```

pub mod catalog;
pub mod demo;
pub mod engine;
pub mod exec;
pub mod keys;
pub mod planner;
pub mod storage;

pub use engine::{Engine, EngineError, EngineOptions};
/// The DataFusion release tablesql is built on, for embedders.
pub use datafusion;
