//! A runtime per core for the connections.
//!
//! On tokio's shared runtime a connection's task is woken by whichever
//! worker polls the sockets and is often run by another, which must be
//! woken too. Every message of a prepared point query then crossed threads:
//! 1.4 futex calls and 1.05 eventfd writes a transaction under pgbench
//! (`strace -c`), and a third of the server's samples were the kernel
//! switching and waking threads (`perf`). PostgreSQL, a process per
//! connection, makes none of those calls.
//!
//! So each connection is placed at accept on one of several
//! single-threaded runtimes, one per core, in turn, and stays there. Its
//! socket, its statements and the point reads they make (the store reads
//! one entity on the calling thread) all run on that thread. A scan's
//! pages are still read on the blocking pool, so a long scan still uses
//! every core.

use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::runtime::Handle;
use tokio::sync::oneshot;

/// The connections' runtimes. Dropping it lets them go: each thread then
/// drops its runtime, which ends the tasks still on it; `stop` also waits
/// for that.
pub(super) struct Cores {
    handles: Vec<Handle>,
    next: AtomicUsize,
    threads: Vec<Core>,
}

/// One runtime's thread: it runs until `stop` is dropped and tells `done`
/// once its runtime is gone.
struct Core {
    stop: oneshot::Sender<()>,
    done: oneshot::Receiver<()>,
}

impl Cores {
    /// One runtime per core this process may run on (at least one), each
    /// thread with `stack` bytes of stack. Each runtime is built on its own
    /// thread, which also drops it: a runtime may not be dropped in an
    /// async context, and this is called from one.
    pub(super) async fn start(stack: usize) -> io::Result<Self> {
        let n = std::thread::available_parallelism().map_or(1, |n| n.get());
        let mut cores = Self {
            handles: Vec::with_capacity(n),
            next: AtomicUsize::new(0),
            threads: Vec::with_capacity(n),
        };
        for i in 0..n {
            let (stop, stopped) = oneshot::channel::<()>();
            let (built, handle) = oneshot::channel::<io::Result<Handle>>();
            let (finished, done) = oneshot::channel::<()>();
            std::thread::Builder::new()
                .name(format!("tablesql-core-{i}"))
                .stack_size(stack)
                .spawn(move || {
                    let runtime = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .thread_stack_size(stack)
                        .thread_name(format!("tablesql-core-{i}-blocking"))
                        .build();
                    let runtime = match runtime {
                        Ok(r) => r,
                        Err(e) => {
                            let _ = built.send(Err(e));
                            return;
                        }
                    };
                    if built.send(Ok(runtime.handle().clone())).is_err() {
                        return;
                    }
                    runtime.block_on(async {
                        let _ = stopped.await;
                    });
                    // Waits for the runtime's blocking pool, where the
                    // store's commits run.
                    drop(runtime);
                    let _ = finished.send(());
                })?;
            let handle = handle
                .await
                .map_err(|_| io::Error::other("a core's thread ended before its runtime ran"))??;
            cores.handles.push(handle);
            cores.threads.push(Core { stop, done });
        }
        Ok(cores)
    }

    /// The runtime the next connection goes to: each in turn, so that
    /// connections opened together spread over the cores.
    pub(super) fn next(&self) -> &Handle {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.handles.len();
        &self.handles[i]
    }

    /// Stops every runtime and waits until each is gone, with the work on
    /// its blocking pool (a store commit of a statement cancelled at
    /// shutdown still finishes before the store closes).
    pub(super) async fn stop(self) {
        let mut waiting = Vec::with_capacity(self.threads.len());
        for Core { stop, done } in self.threads {
            drop(stop);
            waiting.push(done);
        }
        for done in waiting {
            let _ = done.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn connections_are_placed_on_each_core_in_turn_and_stay_there() {
        let cores = Cores::start(2 * 1024 * 1024).await.expect("runtimes");
        let n = cores.handles.len();
        let mut threads = Vec::new();
        for _ in 0..2 * n {
            let task = cores.next().spawn(async {
                let before = std::thread::current().id();
                tokio::task::yield_now().await;
                tokio::time::sleep(std::time::Duration::from_millis(1)).await;
                (before, std::thread::current().id())
            });
            let (before, after) = task.await.expect("task");
            assert_eq!(before, after, "a task moved between threads");
            assert_ne!(before, std::thread::current().id());
            threads.push(before);
        }
        let distinct: std::collections::HashSet<_> = threads.iter().collect();
        assert_eq!(distinct.len(), n);
        assert_eq!(threads[..n], threads[n..]);
        cores.stop().await;
    }

    #[tokio::test]
    async fn stopping_waits_for_work_on_the_cores_blocking_pools() {
        let cores = Cores::start(2 * 1024 * 1024).await.expect("runtimes");
        let finished = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = finished.clone();
        let (started, running) = oneshot::channel();
        cores.next().spawn_blocking(move || {
            let _ = started.send(());
            std::thread::sleep(std::time::Duration::from_millis(200));
            flag.store(true, Ordering::SeqCst);
        });
        running.await.expect("blocking work started");
        cores.stop().await;
        assert!(finished.load(Ordering::SeqCst));
    }
}
