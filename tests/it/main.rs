//! Integration tests: one binary, one module per scenario.

mod model;
mod cli;
mod embedded;
mod conformance;
