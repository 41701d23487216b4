//! `EngineOptions`: what an engine is opened with.

use super::*;

/// Options of an engine: [`EngineOptions::default`], then the `with_`
/// methods for what differs.
///
/// ```
/// use std::time::Duration;
/// use tablesql_engine::{EngineOptions, ScanPolicy};
///
/// let options = EngineOptions::default()
///     .with_scan_policy(ScanPolicy::Allow)
///     .with_catalog_check(Duration::from_secs(5));
/// assert!(options.statistics);
/// ```
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct EngineOptions {
    /// Scan tuning (requests in flight).
    pub scan: ScanOptions,
    /// Whether filters are pushed into the store's requests (on by
    /// default). Off, every table is read whole and filtered in DataFusion:
    /// the reference the pushdown is tested and measured against.
    pub pushdown: bool,
    /// What a statement reading every partition of a table gets, until a
    /// session's `SET tablesql.scan_policy` says otherwise.
    pub scan_policy: ScanPolicy,
    /// How often a statement reads whether the stored catalog changed
    /// elsewhere (one point read; see `Engine::follow_catalog`).
    pub catalog_check: std::time::Duration,
    /// Whether the engine keeps workload statistics
    /// (`tablesql_stat_statements`, `tablesql_stat_partitions`, the
    /// advisor); on by default. Off, the engine counts nothing of its
    /// own: the views are empty, or show what other processes stored
    /// (with `workload_flush`).
    pub statistics: bool,
    /// Whether, and how often, the workload statistics are stored in the
    /// store (`exec::stats::persist`): read from it when the engine opens,
    /// merged with every other process's, written every this often (taken
    /// between 50 ms and an hour) when they changed, and by
    /// [`Engine::close`]. `None` (the default): they
    /// live in this process's memory only. The `tablesql` binary stores
    /// them every 10 s.
    pub workload_flush: Option<std::time::Duration>,
    /// What statements may hold in memory, all together and one
    /// session's (`engine::memory`); past it sorts and aggregates spill to
    /// disk, and what cannot spill fails with 53200.
    pub memory: MemoryLimits,
}

impl Default for EngineOptions {
    fn default() -> Self {
        Self {
            scan: ScanOptions::default(),
            pushdown: true,
            scan_policy: ScanPolicy::default(),
            catalog_check: DEFAULT_CATALOG_CHECK,
            statistics: true,
            workload_flush: None,
            memory: MemoryLimits::default(),
        }
    }
}

impl EngineOptions {
    /// The shortest `workload_flush` taken: a shorter one would only load
    /// the store.
    pub const WORKLOAD_FLUSH_SHORTEST: std::time::Duration = std::time::Duration::from_millis(50);
    /// The longest: statistics an hour old are stale for an advisor.
    pub const WORKLOAD_FLUSH_LONGEST: std::time::Duration = std::time::Duration::from_secs(3600);

    /// With these memory limits.
    pub fn with_memory(mut self, memory: MemoryLimits) -> Self {
        self.memory = memory;
        self
    }

    /// With these scan settings.
    pub fn with_scan(mut self, scan: ScanOptions) -> Self {
        self.scan = scan;
        self
    }

    /// With the pushdown off (`false`): every table is read whole.
    pub fn with_pushdown(mut self, pushdown: bool) -> Self {
        self.pushdown = pushdown;
        self
    }

    /// With this default for statements that read every partition.
    pub fn with_scan_policy(mut self, policy: ScanPolicy) -> Self {
        self.scan_policy = policy;
        self
    }

    /// Reading whether the stored catalog changed at most this often.
    pub fn with_catalog_check(mut self, every: std::time::Duration) -> Self {
        self.catalog_check = every;
        self
    }

    /// With or without workload statistics.
    pub fn with_statistics(mut self, on: bool) -> Self {
        self.statistics = on;
        self
    }

    /// With the workload statistics stored every `every` (`None`: kept in
    /// memory only). See [`EngineOptions::workload_flush`].
    pub fn with_workload_flush(mut self, every: Option<std::time::Duration>) -> Self {
        self.workload_flush = every;
        self
    }
}
