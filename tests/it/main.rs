//! Integration tests: one binary, one module per scenario.

mod cli;
mod conformance;
mod embedded;
mod model;
