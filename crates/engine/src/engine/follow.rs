//! A live catalog: an engine follows the changes other engines (other
//! processes, other servers over the same Azure account) make to the stored
//! catalog. Each change of a definition rewrites the catalog's version
//! entity in the same entity group transaction (`persist`); an engine reads
//! that one entity's ETag at most once per `EngineOptions::catalog_check`
//! (1 s by default), as a statement starts, and reloads the tables only
//! when the ETag moved. So a definition created, changed or dropped
//! elsewhere is planned with from the first statement that starts at least
//! `catalog_check` after the change, unless another statement's check is
//! under way then (the next one sees it) or the check fails (a notice; the
//! next check tries again). An engine's own changes move the version too,
//! so its next check reloads once more.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::{Engine, EngineError, Notice, NoticeKind};
use crate::catalog::persist;
use crate::storage::ETag;

/// How often an engine reads the catalog's version by default.
pub const DEFAULT_CATALOG_CHECK: Duration = Duration::from_secs(1);

/// When the engine next reads the catalog's version, and the version its
/// tables reflect.
#[derive(Debug)]
pub(super) struct CatalogWatch {
    epoch: Instant,
    /// Milliseconds after `epoch` before which no read is due: the one
    /// atomic load a statement pays when none is.
    due_ms: AtomicU64,
    /// The version registered; held while the tables are reloaded, so one
    /// reload runs at a time.
    seen: tokio::sync::Mutex<Option<ETag>>,
}

impl Default for CatalogWatch {
    fn default() -> Self {
        Self {
            epoch: Instant::now(),
            due_ms: AtomicU64::new(0),
            seen: tokio::sync::Mutex::new(None),
        }
    }
}

impl CatalogWatch {
    /// Held by whoever changes the tables registered.
    pub(super) async fn lock(&self) -> tokio::sync::MutexGuard<'_, Option<ETag>> {
        self.seen.lock().await
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }
}

impl Engine {
    /// Catches up with catalog changes made by other engines, if a check
    /// is due (see the module doc). A statement that finds another one
    /// checking goes on with the tables registered. A check that fails (the
    /// store unavailable, a definition that no longer plans) fails no
    /// statement: the tables stay as they were, the notice returned is
    /// for the session whose statement checked, and the next check tries
    /// again.
    pub async fn follow_catalog(&self) -> Option<Notice> {
        let watch = &self.watch;
        let now = watch.now_ms();
        if now < watch.due_ms.load(Ordering::Relaxed) {
            return None;
        }
        let Ok(seen) = watch.seen.try_lock() else {
            return None;
        };
        let every = u64::try_from(self.options.catalog_check.as_millis()).unwrap_or(u64::MAX);
        watch
            .due_ms
            .store(now.saturating_add(every), Ordering::Relaxed);
        // Boxed: a reload's future is large, and every statement's future
        // (a point read's too) would carry it.
        let checked = Box::pin(self.check_catalog(seen)).await;
        checked.err().map(|e| Notice::new(
            NoticeKind::CatalogChanged,
            format!(
                "the catalog could not be read again, so changes made elsewhere are not seen yet: {e}"
            ),
        ))
    }

    /// Makes the next statement's check read the catalog's version, however
    /// recent the last one.
    pub(super) fn recheck_catalog(&self) {
        self.watch.due_ms.store(0, Ordering::Relaxed);
    }

    /// Reads the catalog's version and reloads the tables if it moved.
    async fn check_catalog(
        &self,
        mut seen: tokio::sync::MutexGuard<'_, Option<ETag>>,
    ) -> Result<(), EngineError> {
        let version = persist::version(self.store.as_ref()).await?;
        if version != *seen {
            self.reload().await?;
            *seen = version;
        }
        Ok(())
    }

    /// Reads the stored catalog again and registers its tables (see
    /// `Engine::reload`), now.
    pub async fn refresh(&self) -> Result<(), EngineError> {
        let mut seen = self.watch.lock().await;
        // Read before the tables: a change that lands while they load
        // moves the version past this one, and the next check reloads.
        let version = persist::version(self.store.as_ref()).await?;
        self.reload().await?;
        *seen = version;
        Ok(())
    }
}
