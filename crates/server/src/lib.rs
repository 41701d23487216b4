//! tablesql's Postgres wire server: pgwire over the engine's sessions,
//! `pg_catalog` with the PostgreSQL client dialect it brings, TLS,
//! authentication, cancels, a shutdown that tells every client why, and
//! Prometheus metrics. Most users want the `tablesql` crate, which
//! re-exports [`server`].

#![deny(missing_docs)]

// The engine's modules at the paths the server's code names them by.
use tablesql_engine::{catalog, engine, load, sqlstate, storage, striped};

pub mod server;
