//! Planning: the DataFusion table provider of store tables, the pushdown of
//! filters onto the PartitionKey/RowKey index, and the access paths EXPLAIN shows.

pub mod access;
pub mod apply_node;
pub mod checked;
pub mod dml_shape;
pub mod physical;
pub mod provider;
pub mod pushdown;
pub mod rewrite;
pub mod sql;
pub mod subquery;
pub mod subquery_rules;

pub use access::{AccessKind, AccessPath, KeyRequest};
pub use physical::TablesqlQueryPlanner;
pub use provider::StoreTable;
pub use pushdown::{Pushdown, push_down};
pub use sql::SqlParser;
