//! Integration tests: one binary, one module per scenario.

mod azurite;
mod cli;
mod conformance;
mod embedded;
mod model;
