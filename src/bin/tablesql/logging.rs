//! The binary's log: `tracing` events of the library (and the `log`
//! records of DataFusion, reqwest and rustls, bridged) to stderr.

use tracing_subscriber::EnvFilter;
use tracing_subscriber::util::SubscriberInitExt as _;

/// Installs the subscriber. `RUST_LOG`, when set, is the whole filter;
/// otherwise `--log-level` (or `TABLESQL_LOG_LEVEL`) for every target, and
/// by default `warn`, or `info` for `serve` (its address, its stopping).
pub fn install(level: Option<&str>, serving: bool) -> anyhow::Result<()> {
    let filter = match std::env::var("RUST_LOG") {
        Ok(spec) if !spec.trim().is_empty() => {
            EnvFilter::try_new(spec).map_err(|e| anyhow::anyhow!("RUST_LOG: {e}"))?
        }
        _ => {
            let level = level.unwrap_or(if serving { "info" } else { "warn" });
            EnvFilter::try_new(level).map_err(|e| anyhow::anyhow!("--log-level: {e}"))?
        }
    };
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .finish()
        // Also routes the `log` crate's records here (tracing-log).
        .try_init()
        .map_err(|e| anyhow::anyhow!("installing the log: {e}"))
}
