//! A local Table service with Azure's limits.
//!
//! The Azure backend exists to scale past one machine, and its test
//! emulator, Azurite, has none of the service's limits: one thread, no
//! latency, no throttling, no query budget, key order always. Code that
//! meets Azure's real limits first in production meets them untested. This
//! crate serves the Table REST API over tablesql's embedded store with those
//! limits, so that the real client (`storage::azure`: signing, paging,
//! retries, batches) is what the tests drive, and so that a user can try a
//! mapping's cost and behaviour before deploying (`tablesql table-service`).
//!
//! - `limits`: the knobs, with the documented targets as defaults; two
//!   profiles, `storage` (Azure Storage) and `cosmos` (Cosmos DB's Table API).
//! - `pace`: a server's capacity as a queue of work at a rate.
//! - `ranges`: range servers, runs of neighbouring partitions.
//! - `service`: tables and writes, paced and refused as the limits say.
//! - `scan`: query pages: chunks paced per range server and account, ended
//!   by `$top`, a range boundary or the query budget; Cosmos DB's order.
//! - `token`: continuation tokens.
//! - `odata_filter`: `$filter` text.
//! - `http`, `batch`: the REST API and entity group transactions.
//! - `identity`: Entra ID's token endpoints, and the check of a bearer
//!   token.
//! - `counters`: requests, throttled answers, entities scanned and returned
//!   per partition, range server and account.

mod batch;
pub mod counters;
mod http;
pub mod identity;
pub mod limits;
pub mod odata_filter;
mod pace;
mod ranges;
pub mod scan;
pub mod service;
mod token;

pub use counters::{Counts, Snapshot};
pub use http::{Account, Authority, Running, serve, serve_authority};
pub use identity::{Identity, IdentityOptions};
pub use limits::{KNOBS, Limits, Profile};
pub use service::Service;
