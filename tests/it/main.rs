//! Integration tests: one binary, one module per scenario.

mod azure;
mod azurite;
mod cli;
mod conformance;
mod embedded;
mod faults;
mod interop;
mod model;
mod pushdown;
mod server;
mod slt;
mod sql;
