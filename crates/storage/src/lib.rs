//! tablesql's storage layer: the [`storage::TableStore`] trait over
//! partitioned table storage (PartitionKey, RowKey, 1,000-entity pages),
//! its backends and layers, and the key templates that encode a row's
//! columns into its keys ([`keys`]). The lowest crate of the workspace: it
//! knows nothing of SQL (no DataFusion, no sqlparser), and every crate
//! above reaches storage through it. Most users want the `tablesql` crate,
//! which re-exports these modules at the same paths.

#![deny(missing_docs)]

pub mod keys;
#[doc(hidden)]
pub mod sqlstate;
pub mod storage;
#[doc(hidden)]
pub mod striped;
