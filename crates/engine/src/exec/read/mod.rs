//! Reading rows: from an access path to Arrow record batches.
//!
//! The planner says what to read as an [`access::AccessPath`]; the scan
//! ([`scan::PartitionScanExec`]) turns it into requests to the store, one
//! per partition where the path spans several, runs them side by side page
//! by page and decodes each page into a batch. This is the path every
//! SELECT takes, and the reads of UPDATE, DELETE, point reads and index
//! upkeep reuse its pieces; it is kept apart from the write side and the
//! statistics so that the scan's contract (what EXPLAIN shows, what one
//! request costs) reads in one place. Its input description lives here,
//! not in the planner, so that exec never imports the planner.
//!
//! - `access`: access paths, the requests they make and their EXPLAIN names.
//! - `scan`: `PartitionScanExec`, the parallel, paged, bounded scan.
//! - `fanout`: one request per listed or analyzed partition (or chunk).
//! - `decode`: a table's layout, and a page of entities into one batch.
//! - `lookup`: from an index row to its base row.
//! - `lookup_join`: `LookupJoinExec`, a join that reads its inner table by
//!   the outer rows' keys.
//! - `global`: `GlobalIndexExec`, a read through a global index, checked
//!   against the base rows.
//! - `order`: the key order a path's rows arrive in.
//! - `rescan`: a scan's table read again under more conditions (lookup
//!   joins, dynamic filters).
//! - `dynamic`: a hash join's dynamic filter as key conditions.
//! - `metrics`: the exact EXPLAIN ANALYZE counters.
//! - `token`: signed page tokens, where a page of rows ended.
//! - `units`: point reads batched by partition where the store reads
//!   several keys in one request.

pub mod access;
mod cells;
pub mod decode;
pub mod dynamic;
pub mod fanout;
pub mod global;
pub mod lookup;
pub mod lookup_join;
pub mod metrics;
pub mod order;
pub mod rescan;
pub mod row;
pub mod scan;
pub mod token;
mod units;
