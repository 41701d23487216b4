//! The timer that stores an engine's workload statistics every
//! `EngineOptions::workload_flush` (`exec::stats::persist`): a task that
//! holds the statistics weakly, so that it ends when the engine is
//! dropped, or when the engine closes.

use std::sync::Arc;
use std::time::Duration;

use crate::exec::stats::persist::PersistedWorkload;

use super::EngineOptions;

const SHORTEST: Duration = EngineOptions::WORKLOAD_FLUSH_SHORTEST;
const LONGEST: Duration = EngineOptions::WORKLOAD_FLUSH_LONGEST;

/// Starts the timer of `p`, if a tokio runtime runs this (an engine opened
/// under another executor stores its statistics at `Engine::close` only).
pub(super) fn start(p: &Arc<PersistedWorkload>) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let weak = Arc::downgrade(p);
    let every = p.every().clamp(SHORTEST, LONGEST);
    runtime.spawn(async move {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // The first tick is at once: the engine just read the store.
        tick.tick().await;
        loop {
            tick.tick().await;
            let Some(p) = weak.upgrade() else {
                break;
            };
            // `close` may still run between this and the flush: the flush
            // checks again under its lock, so the head stays closed.
            if p.stopped() {
                break;
            }
            // A failed flush is tried again at the next tick: the counts
            // stay in memory until one succeeds.
            let _ = p.flush(false).await;
        }
    });
}

/// Stops the timer of `p` (it ends at its next tick).
pub(super) fn stop(p: &PersistedWorkload) {
    p.stop();
}
