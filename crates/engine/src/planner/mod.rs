//! Planning: the DataFusion table provider of store tables, the pushdown of
//! filters onto the PartitionKey/RowKey index into the access paths
//! (`exec::read::access`) that scans run and EXPLAIN shows.

pub mod apply_node;
pub mod checked;
pub mod column_listing;
pub mod dml_query;
pub mod dml_shape;
pub mod identity;
pub mod index_functions;
pub mod insert_defaults;
pub mod insert_source;
pub mod literals;
pub mod lookup;
pub mod output_names;
pub mod page;
pub mod parameters;
pub mod pg_functions;
pub mod pg_spelling;
pub mod physical;
pub mod point;
pub mod policy;
pub mod provider;
pub mod pushdown;
pub mod returning;
pub mod rewrite;
pub mod sequence_functions;
pub mod settings;
pub(crate) mod simple_scan;
pub mod sql;
pub mod subquery;
pub mod subquery_rules;
pub mod upsert;
pub mod wildcard;
pub mod workload_views;

pub use physical::TablesqlQueryPlanner;
pub use provider::StoreTable;
pub use sql::SqlParser;
