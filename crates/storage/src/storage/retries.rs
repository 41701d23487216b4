//! The retries a store makes for one request, told to whoever sent it.
//!
//! A remote store retries transient failures inside one call (`get`,
//! `query`, `execute_batch` ...), so the caller sees one answer and not the
//! attempts behind it. A caller that wants them, such as a scan counting its
//! statement's retries, runs the call inside [`counted`] ([`counted_by`]
//! skips it for a store that never retries); a store reports each retry it
//! makes with [`note`]. The count rides a task-local value, so
//! the trait's signatures stay as they are and concurrent requests on other
//! tasks never mix their counts. A call that spawns its retries onto another
//! task would escape the count; the Azure client retries in the caller's
//! own future.

use std::cell::Cell;
use std::future::Future;
use std::time::Duration;

use futures::FutureExt as _;
use futures::future::Either;

use super::TableStore;

tokio::task_local! {
    static RETRIES: Cell<Tally>;
}

/// The retries of the requests one count covered.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Tally {
    /// Retries made.
    pub retries: u64,
    /// Of them, retries of an answer that refused the work as busy (503
    /// ServerBusy, 429): the service throttling the client.
    pub busy: u64,
    /// Time spent waiting before retries.
    pub waited: Duration,
}

/// Runs `call` and returns its output with the retries stores made for it.
/// Where counts nest, the innermost takes a retry and the ones around it do
/// not see it, so that each retry is counted once (a scan's own requests
/// inside the write that reads from it, say). A plain function, not an
/// `async fn`, so that the future holds `call` once.
pub fn counted<F: Future>(call: F) -> impl Future<Output = (F::Output, Tally)> {
    RETRIES.scope(Cell::new(Tally::default()), async move {
        let output = call.await;
        (output, RETRIES.with(Cell::get))
    })
}

/// As [`counted`] where `store` retries requests; where it does not (a
/// store in this process), `call` runs uncounted, at no cost: the
/// point-query path goes through here.
pub fn counted_by<F: Future>(
    store: &dyn TableStore,
    call: F,
) -> impl Future<Output = (F::Output, Tally)> {
    if store.retries_requests() {
        Either::Left(counted(call))
    } else {
        Either::Right(call.map(|output| (output, Tally::default())))
    }
}

/// Tells the innermost [`counted`] around this task's current call that a
/// store retried once (`busy`: after a busy answer), having waited `wait`;
/// outside one, nobody asked and it is dropped.
pub fn note(busy: bool, wait: Duration) {
    let _ = RETRIES.try_with(|c| {
        let t = c.get();
        c.set(Tally {
            retries: t.retries + 1,
            busy: t.busy + u64::from(busy),
            waited: t.waited + wait,
        })
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn each_retry_reaches_the_innermost_count_once() {
        note(false, Duration::ZERO); // outside any count: dropped, no panic
        let ((inner, n), outer) = counted(async {
            note(false, Duration::ZERO);
            let inner = counted(async {
                note(true, Duration::from_millis(2));
                note(false, Duration::from_millis(1));
                7
            })
            .await;
            note(false, Duration::ZERO);
            inner
        })
        .await;
        assert_eq!(inner, 7);
        assert_eq!(
            (n.retries, n.busy, n.waited),
            (2, 1, Duration::from_millis(3))
        );
        assert_eq!((outer.retries, outer.busy), (2, 0));
        // Another task's retries are its own.
        let (_, mine) = counted(async {
            let other =
                tokio::spawn(async { counted(async { note(false, Duration::ZERO) }).await.1 });
            other.await.unwrap_or_default()
        })
        .await;
        assert_eq!(mine, Tally::default());
    }
}
