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

use futures::FutureExt as _;
use futures::future::Either;

use super::TableStore;

tokio::task_local! {
    static RETRIES: Cell<u64>;
}

/// Runs `call` and returns its output with the retries stores made for it.
/// Where counts nest, the innermost takes a retry and the ones around it do
/// not see it, so that each retry is counted once (a scan's own requests
/// inside the write that reads from it, say). A plain function, not an
/// `async fn`, so that the future holds `call` once.
pub fn counted<F: Future>(call: F) -> impl Future<Output = (F::Output, u64)> {
    RETRIES.scope(Cell::new(0), async move {
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
) -> impl Future<Output = (F::Output, u64)> {
    if store.retries_requests() {
        Either::Left(counted(call))
    } else {
        Either::Right(call.map(|output| (output, 0)))
    }
}

/// Tells the innermost [`counted`] around this task's current call that a
/// store retried once; outside one, nobody asked and it is dropped.
pub fn note() {
    let _ = RETRIES.try_with(|c| c.set(c.get() + 1));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn each_retry_reaches_the_innermost_count_once() {
        note(); // outside any count: dropped, no panic
        let ((inner, n), outer) = counted(async {
            note();
            let inner = counted(async {
                note();
                note();
                7
            })
            .await;
            note();
            inner
        })
        .await;
        assert_eq!((inner, n, outer), (7, 2, 2));
        // Another task's retries are its own.
        let (_, mine) = counted(async {
            let other = tokio::spawn(async { counted(async { note() }).await.1 });
            other.await.unwrap_or(0)
        })
        .await;
        assert_eq!(mine, 0);
    }
}
