//! Integration tests: one binary, one module per scenario.

// Tests and benchmarks may unwrap: a failure names its line.
#![allow(clippy::unwrap_used, clippy::expect_used)]
// `exclusive()` is held for the whole of a test on purpose, across its
// awaits: no other task of its runtime takes it.
#![allow(clippy::await_holding_lock)]

mod analyze;
mod azure;
mod azurite;
mod bill;
mod cli;
mod clients;
mod closing;
mod conformance;
mod copy;
mod copy_binary;
mod differential;
mod embedded;
mod entra;
mod fanout;
mod faults;
mod global;
mod history;
mod hostile;
mod indexes;
mod interop;
mod isolation;
mod local_service;
mod lookup_join;
mod model;
mod paging;
mod parity;
mod pushdown;
mod report;
mod sequences;
mod server;
mod shell;
mod slt;
mod sql;
mod terminal;
mod tools;
mod wait;
mod workload;
mod workload_store;
mod writes;

/// Held by the tests that count timing-sensitive events (the fault injection
/// counts one retry per fault, which a CPU-starved Azurite breaks) and by the
/// tests that load the CPU most (64 clients, 100,000-row reads), so the two
/// kinds never overlap.
pub fn exclusive() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}
