//! How much memory statements may take: a limit for the whole process and
//! one for each session.
//!
//! Without a limit, one user's cross join or huge GROUP BY grows the
//! process until the kernel kills it, and every other connection with it.
//! DataFusion's operators reserve what they hold from the runtime's memory
//! pool; sorts, aggregates and sort-merge joins spill to disk when refused,
//! and an operator that cannot spill (a hash join's build side) fails its
//! statement with `ResourcesExhausted` (SQLSTATE 53200). So the engine's
//! runtime gets a `FairSpillPool` of the total, and each session a
//! `SessionPool` over it that refuses past the session's own limit. A
//! session runs one statement at a time, so its limit is its statement's
//! (a cursor left open holds its share until it closes).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use datafusion::common::DataFusionError;
use datafusion::execution::memory_pool::{
    FairSpillPool, MemoryConsumer, MemoryLimit, MemoryPool, MemoryReservation, UnboundedMemoryPool,
};
use datafusion::execution::runtime_env::{RuntimeEnv, RuntimeEnvBuilder};
use datafusion::execution::session_state::{SessionState, SessionStateBuilder};

/// The memory limits of an engine's statements, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryLimits {
    /// What all statements together may hold (`None`: no limit).
    pub total: Option<usize>,
    /// What one session's statement may hold (`None`: up to the total).
    pub statement: Option<usize>,
}

impl Default for MemoryLimits {
    /// Half the machine's memory in all, a quarter for one statement: room
    /// for the process's own data and caches, and for two big statements
    /// side by side. Unlimited where the machine does not say.
    fn default() -> Self {
        let machine = machine_memory();
        Self {
            total: machine.map(|m| m / 2),
            statement: machine.map(|m| m / 4),
        }
    }
}

impl MemoryLimits {
    /// No limit at all.
    pub fn unlimited() -> Self {
        Self {
            total: None,
            statement: None,
        }
    }
}

/// The machine's memory, from `/proc/meminfo` (Linux); `None` elsewhere.
fn machine_memory() -> Option<usize> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib: usize = info
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    kib.checked_mul(1024)
}

/// The engine's runtime: its memory pool holds `limits.total`, and the
/// engine's own session (what `Engine::sql` runs) takes a share of it as
/// every session does.
pub(super) fn runtime(limits: MemoryLimits) -> datafusion::common::Result<Arc<RuntimeEnv>> {
    let mut builder = RuntimeEnvBuilder::new();
    if let Some(total) = limits.total {
        let pool: Arc<dyn MemoryPool> = Arc::new(FairSpillPool::new(total));
        builder = builder.with_memory_pool(match limits.statement {
            Some(limit) => Arc::new(SessionPool::over(&pool, limit)),
            None => pool,
        });
    } else if let Some(limit) = limits.statement {
        let pool: Arc<dyn MemoryPool> = Arc::new(UnboundedMemoryPool::default());
        builder = builder.with_memory_pool(Arc::new(SessionPool::over(&pool, limit)));
    }
    builder.build_arc()
}

/// `state` with a share of its engine's memory of its own, where
/// `limits` gives a session one; as it was where the runtime cannot be
/// rebuilt (it then shares the engine session's share).
pub(super) fn share(state: SessionState, limits: MemoryLimits) -> SessionState {
    let Some(limit) = limits.statement else {
        return state;
    };
    let runtime = state.runtime_env();
    let pool: Arc<dyn MemoryPool> = Arc::new(SessionPool::over(&runtime.memory_pool, limit));
    match RuntimeEnvBuilder::from_runtime_env(runtime)
        .with_memory_pool(pool)
        .build_arc()
    {
        Ok(runtime) => SessionStateBuilder::new_from_existing(state)
            .with_runtime_env(runtime)
            .build(),
        Err(e) => {
            tracing::warn!(error = %e, "a session shares the engine's memory share");
            state
        }
    }
}

/// One session's share of the engine's pool: it counts what the session's
/// operators hold, refuses past its limit, and passes everything on to the
/// engine's pool, which keeps the total.
#[derive(Debug)]
pub struct SessionPool {
    inner: Arc<dyn MemoryPool>,
    limit: usize,
    used: AtomicUsize,
}

impl SessionPool {
    /// A share of `pool` of at most `limit` bytes. Over another session's
    /// share it takes that share's engine pool, not the share.
    pub fn over(pool: &Arc<dyn MemoryPool>, limit: usize) -> Self {
        let inner = match pool.downcast_ref::<SessionPool>() {
            Some(share) => share.inner.clone(),
            None => pool.clone(),
        };
        Self {
            inner,
            limit,
            used: AtomicUsize::new(0),
        }
    }
}

impl std::fmt::Display for SessionPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "session share of {} bytes of {}", self.limit, self.inner)
    }
}

impl MemoryPool for SessionPool {
    fn name(&self) -> &str {
        "SessionPool"
    }

    fn register(&self, consumer: &MemoryConsumer) {
        self.inner.register(consumer);
    }

    fn unregister(&self, consumer: &MemoryConsumer) {
        self.inner.unregister(consumer);
    }

    fn grow(&self, reservation: &MemoryReservation, additional: usize) {
        self.used.fetch_add(additional, Ordering::Relaxed);
        self.inner.grow(reservation, additional);
    }

    fn shrink(&self, reservation: &MemoryReservation, shrink: usize) {
        self.used.fetch_sub(shrink, Ordering::Relaxed);
        self.inner.shrink(reservation, shrink);
    }

    fn try_grow(
        &self,
        reservation: &MemoryReservation,
        additional: usize,
    ) -> datafusion::common::Result<()> {
        let within = self
            .used
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| {
                used.checked_add(additional).filter(|&n| n <= self.limit)
            });
        if within.is_err() {
            return Err(DataFusionError::ResourcesExhausted(format!(
                "the statement's memory limit of {} bytes is reached: {} holds {} bytes and asks for {} more \
                 (raise --statement-memory-limit, or let the statement read less)",
                self.limit,
                reservation.consumer().name(),
                reservation.size(),
                additional
            )));
        }
        if let Err(e) = self.inner.try_grow(reservation, additional) {
            self.used.fetch_sub(additional, Ordering::Relaxed);
            return Err(e);
        }
        Ok(())
    }

    fn reserved(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    fn memory_limit(&self) -> MemoryLimit {
        MemoryLimit::Finite(self.limit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::execution::memory_pool::GreedyMemoryPool;

    #[test]
    fn a_share_refuses_past_its_limit_and_the_engine_pool_past_the_total() {
        let engine: Arc<dyn MemoryPool> = Arc::new(GreedyMemoryPool::new(1_000));
        let a: Arc<dyn MemoryPool> = Arc::new(SessionPool::over(&engine, 600));
        let b: Arc<dyn MemoryPool> = Arc::new(SessionPool::over(&engine, 600));
        let ra = MemoryConsumer::new("sort a").register(&a);
        let rb = MemoryConsumer::new("sort b").register(&b);
        ra.try_grow(500).expect("within both limits");
        let past_share = ra.try_grow(200).expect_err("past a's share");
        assert!(matches!(past_share, DataFusionError::ResourcesExhausted(_)));
        assert!(past_share.to_string().contains("sort a"), "{past_share}");
        // b's share has room, the engine's total has not.
        assert!(rb.try_grow(600).is_err());
        assert_eq!(
            (a.reserved(), b.reserved(), engine.reserved()),
            (500, 0, 500)
        );
        rb.try_grow(500).expect("the total has 500 left");
        drop(ra);
        assert_eq!((a.reserved(), engine.reserved()), (0, 500));
    }

    #[test]
    fn a_share_made_over_a_share_takes_the_engine_pool() {
        let engine: Arc<dyn MemoryPool> = Arc::new(FairSpillPool::new(1_000));
        let first: Arc<dyn MemoryPool> = Arc::new(SessionPool::over(&engine, 100));
        let second = SessionPool::over(&first, 400);
        assert!(Arc::ptr_eq(&second.inner, &engine));
    }

    #[test]
    fn the_default_limits_leave_room_beside_the_statements() {
        let limits = MemoryLimits::default();
        if let (Some(total), Some(one)) = (limits.total, limits.statement) {
            assert!(one < total);
        }
    }
}
