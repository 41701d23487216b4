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
//! `SessionPool` over it with a `FairSpillPool` of the session's own limit,
//! asked first: within a session, as across sessions, each spilling
//! operator gets its fair part rather than the first one taking it all. A
//! session runs one statement at a time, but a cursor or portal it keeps
//! open holds its reservations too, so the limit is the session's.

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
    /// What one session may hold: its running statement, and the cursors
    /// and portals it keeps open (`None`: up to the total). Taken as the
    /// total where it is more.
    pub statement: Option<usize>,
}

impl Default for MemoryLimits {
    /// Half the machine's memory in all (the container's, where a cgroup
    /// limits it), half of that for one session: room for the process's
    /// own data and caches, and for two big statements side by side.
    /// Unlimited where the machine does not say.
    fn default() -> Self {
        Self::with_total(machine_memory().map(|m| m / 2))
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

    /// `total` for all statements, and half of it for one session.
    pub fn with_total(total: Option<usize>) -> Self {
        Self {
            total,
            statement: total.map(|t| t / 2),
        }
    }

    /// These limits with `statement` for one session (`None`: up to the
    /// total).
    pub fn with_statement(self, statement: Option<usize>) -> Self {
        Self { statement, ..self }
    }

    /// A session's limit as it holds: never more than the total.
    fn session(&self) -> Option<usize> {
        match (self.statement, self.total) {
            (Some(one), Some(total)) => Some(one.min(total)),
            (one, _) => one,
        }
    }
}

/// The machine's memory: the lower of `/proc/meminfo`'s total and the
/// cgroup's limit, which is what a container may use (`None` off Linux).
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
    let total = kib.checked_mul(1024)?;
    Some(cgroup_limit().map_or(total, |limit| limit.min(total)))
}

/// The lowest memory limit of the process's cgroup and the cgroups above
/// it: v2's `memory.max` along the path `/proc/self/cgroup` names (a
/// systemd unit's `MemoryMax=`, a container's limit), else v1's
/// `memory.limit_in_bytes`; `None` where there is none ("max", or v1's
/// huge number, which the minimum with the machine's total absorbs).
fn cgroup_limit() -> Option<usize> {
    let read = |path: &std::path::Path| -> Option<usize> {
        std::fs::read_to_string(path).ok()?.trim().parse().ok()
    };
    let root = std::path::Path::new("/sys/fs/cgroup");
    let own = std::fs::read_to_string("/proc/self/cgroup")
        .ok()
        .and_then(|text| {
            text.lines()
                .find_map(|l| l.strip_prefix("0::"))
                .map(|p| p.trim().trim_start_matches('/').to_owned())
        });
    let lowest = own.and_then(|own| {
        root.join(own)
            .ancestors()
            .take_while(|dir| dir.starts_with(root))
            .filter_map(|dir| read(&dir.join("memory.max")))
            .min()
    });
    lowest.or_else(|| read(&root.join("memory/memory.limit_in_bytes")))
}

/// The engine's runtime: its memory pool holds `limits.total`, and the
/// engine's context takes a share of it as every session's does (each
/// session's share is made afresh over the same pool: `share`).
pub(super) fn runtime(limits: MemoryLimits) -> datafusion::common::Result<Arc<RuntimeEnv>> {
    let pool: Arc<dyn MemoryPool> = match limits.total {
        Some(total) => Arc::new(FairSpillPool::new(total)),
        None => Arc::new(UnboundedMemoryPool::default()),
    };
    let pool: Arc<dyn MemoryPool> = match limits.session() {
        Some(limit) => Arc::new(SessionPool::over(&pool, limit)),
        None => pool,
    };
    RuntimeEnvBuilder::new().with_memory_pool(pool).build_arc()
}

/// `state` with a share of its engine's memory of its own, where
/// `limits` gives a session one; as it was where the runtime cannot be
/// rebuilt (it then shares the engine session's share).
pub(super) fn share(state: SessionState, limits: MemoryLimits) -> SessionState {
    let Some(limit) = limits.session() else {
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

/// One session's share of the engine's pool: what the session holds is
/// counted against its limit (a hard cap, open cursors included); a
/// `FairSpillPool` of the limit, asked next, gives each of its spilling
/// operators a fair part; then the engine's pool keeps the total.
#[derive(Debug)]
pub struct SessionPool {
    used: AtomicUsize,
    fair: FairSpillPool,
    inner: Arc<dyn MemoryPool>,
    limit: usize,
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
            used: AtomicUsize::new(0),
            fair: FairSpillPool::new(limit),
            inner,
            limit,
        }
    }

    fn refused(
        &self,
        reservation: &MemoryReservation,
        additional: usize,
        why: &str,
    ) -> DataFusionError {
        DataFusionError::ResourcesExhausted(format!(
            "the session's memory limit of {} bytes is reached (raise --statement-memory-limit, \
             or let the statement read less): {} holds {} bytes and asks for {} more{why}",
            self.limit,
            reservation.consumer().name(),
            reservation.size(),
            additional,
        ))
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
        self.fair.register(consumer);
        self.inner.register(consumer);
    }

    fn unregister(&self, consumer: &MemoryConsumer) {
        self.fair.unregister(consumer);
        self.inner.unregister(consumer);
    }

    fn grow(&self, reservation: &MemoryReservation, additional: usize) {
        self.used.fetch_add(additional, Ordering::Relaxed);
        self.fair.grow(reservation, additional);
        self.inner.grow(reservation, additional);
    }

    fn shrink(&self, reservation: &MemoryReservation, shrink: usize) {
        self.used.fetch_sub(shrink, Ordering::Relaxed);
        self.fair.shrink(reservation, shrink);
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
            return Err(self.refused(reservation, additional, ""));
        }
        if self.fair.try_grow(reservation, additional).is_err() {
            self.used.fetch_sub(additional, Ordering::Relaxed);
            return Err(self.refused(
                reservation,
                additional,
                ", past its fair part beside the session's other spilling operators",
            ));
        }
        if let Err(e) = self.inner.try_grow(reservation, additional) {
            self.used.fetch_sub(additional, Ordering::Relaxed);
            self.fair.shrink(reservation, additional);
            return Err(DataFusionError::ResourcesExhausted(format!(
                "the server's memory limit is reached (raise --memory-limit, or run fewer big \
                 statements at once): {}",
                e.message()
            )));
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
        let said = past_share.to_string();
        assert!(
            said.contains("sort a") && said.contains("--statement-memory-limit"),
            "{said}"
        );
        // b's share has room, the engine's total has not, and b's share
        // keeps nothing of the refused grow.
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
    fn spilling_operators_of_one_session_each_get_a_fair_part_of_its_share() {
        let engine: Arc<dyn MemoryPool> = Arc::new(FairSpillPool::new(10_000));
        let session: Arc<dyn MemoryPool> = Arc::new(SessionPool::over(&engine, 1_000));
        let first = MemoryConsumer::new("sort 1")
            .with_can_spill(true)
            .register(&session);
        let second = MemoryConsumer::new("sort 2")
            .with_can_spill(true)
            .register(&session);
        // Not all of it to the first that asks: the second would then be
        // refused before holding anything, and fail rather than spill.
        assert!(first.try_grow(600).is_err());
        first.try_grow(500).expect("its half");
        second.try_grow(500).expect("the other half");
        assert_eq!((session.reserved(), engine.reserved()), (1_000, 1_000));
        // A third spiller's fair part is a third, but the session's limit
        // holds whatever the others keep.
        let third = MemoryConsumer::new("sort 3")
            .with_can_spill(true)
            .register(&session);
        assert!(third.try_grow(1).is_err());
        drop(first);
        third.try_grow(300).expect("room again, within its part");
    }

    #[test]
    fn a_share_made_over_a_share_takes_the_engine_pool() {
        let engine: Arc<dyn MemoryPool> = Arc::new(FairSpillPool::new(1_000));
        let first: Arc<dyn MemoryPool> = Arc::new(SessionPool::over(&engine, 100));
        let second = SessionPool::over(&first, 400);
        assert!(Arc::ptr_eq(&second.inner, &engine));
    }

    #[tokio::test]
    async fn every_session_of_an_engine_gets_its_own_share_of_one_pool() {
        let store: Arc<dyn crate::storage::TableStore> =
            Arc::new(crate::storage::MemoryStore::new());
        let limits = MemoryLimits::with_total(Some(64 << 20));
        let options = crate::engine::EngineOptions::default().with_memory(limits);
        let engine = crate::engine::Engine::with_store(store, options)
            .await
            .expect("engine");
        let pool = |s: &crate::engine::Session| s.context().runtime_env().memory_pool.clone();
        let (a, b) = (pool(&engine.session()), pool(&engine.session()));
        let share = |p: &Arc<dyn MemoryPool>| {
            let share = p.downcast_ref::<SessionPool>().expect("a session's share");
            (share.limit, share.inner.clone())
        };
        let ((a_limit, a_inner), (b_limit, b_inner)) = (share(&a), share(&b));
        assert!(!Arc::ptr_eq(&a, &b), "each session its own share");
        assert!(Arc::ptr_eq(&a_inner, &b_inner), "over one engine pool");
        assert_eq!((a_limit, b_limit), (32 << 20, 32 << 20));
        assert!(matches!(a_inner.memory_limit(), MemoryLimit::Finite(n) if n == 64 << 20));
    }

    #[test]
    fn a_session_never_gets_more_than_the_total() {
        let total = MemoryLimits::with_total(Some(1_000));
        assert_eq!(total.statement, Some(500));
        assert_eq!(total.with_statement(Some(4_000)).session(), Some(1_000));
        assert_eq!(total.with_statement(None).session(), None);
        assert_eq!(MemoryLimits::with_total(None).session(), None);
    }

    #[test]
    fn the_default_limits_leave_room_beside_the_statements() {
        let limits = MemoryLimits::default();
        if let (Some(total), Some(one)) = (limits.total, limits.statement) {
            assert!(one < total);
        }
    }
}
