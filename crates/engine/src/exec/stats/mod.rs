//! Statistics and the partition advisor's findings.
//!
//! What the engine learns about its tables as it runs: `ANALYZE`'s counts
//! of each partition, the workload statistics of each normalized statement
//! and each partition (as `pg_stat_statements` keeps them), and from both
//! the advisor's findings, each with its evidence and its remedy. Kept
//! apart from reading and writing because none of it changes what a
//! statement answers: it is gathered beside the statements (a store
//! wrapper, a wrapper of a plan's stream, `ANALYZE`'s own read) and read
//! back as views and table functions, and by the scan only to split its
//! requests. Rendering the findings as a page is presentation, outside
//! the execution layer (`crate::report`).
//!
//! - `analyze`: `ANALYZE`, a storage table read once, as ranges of pages.
//! - `sample`: a sampled `ANALYZE`, runs of pages placed by the last statistics.
//! - `workload`: the statement and partition statistics.
//! - `observed`: the store that records each request per partition.
//! - `pending`: what each thread recorded of the workload, not yet folded in.
//! - `recorded`: statements normalized, and their runs recorded as they stream.
//! - `key_order`: whether writes go where the keys end (append-only keys).
//! - `snapshot`: one process's workload statistics as text.
//! - `persist`: the workload statistics kept in the store, merged across
//!   processes.
//! - `advise`: the advisor's findings; pure.

pub mod advise;
pub mod analyze;
pub mod key_order;
pub mod observed;
mod pending;
pub mod persist;
pub mod recorded;
pub mod sample;
pub mod snapshot;
pub mod workload;
