//! Planning: the DataFusion table provider of store tables, the pushdown of
//! filters onto the PartitionKey/RowKey index, and the access paths EXPLAIN shows.

pub mod access;
pub mod dml_shape;
pub mod provider;
pub mod pushdown;

pub use access::{AccessKind, AccessPath, KeyRequest};
pub use provider::StoreTable;
pub use pushdown::{Pushdown, push_down};
