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

/// The connections' runtimes. Dropping it stops them: each thread leaves
/// its runtime, which ends the tasks still on it.
pub(super) struct Cores {
    handles: Vec<Handle>,
    next: AtomicUsize,
    /// Each runtime's thread waits for its sender to drop.
    _stop: Vec<oneshot::Sender<()>>,
}

impl Cores {
    /// One runtime per core this process may run on (at least one), each
    /// thread with `stack` bytes of stack.
    pub(super) fn start(stack: usize) -> io::Result<Self> {
        let n = std::thread::available_parallelism().map_or(1, |n| n.get());
        let (mut handles, mut stops) = (Vec::with_capacity(n), Vec::with_capacity(n));
        for i in 0..n {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .thread_stack_size(stack)
                .thread_name(format!("tablesql-core-{i}"))
                .build()?;
            handles.push(runtime.handle().clone());
            let (stop, stopped) = oneshot::channel::<()>();
            stops.push(stop);
            std::thread::Builder::new()
                .name(format!("tablesql-core-{i}"))
                .stack_size(stack)
                .spawn(move || {
                    // Dropped here, off any async context, as a runtime
                    // must be.
                    runtime.block_on(async {
                        let _ = stopped.await;
                    });
                })?;
        }
        Ok(Self {
            handles,
            next: AtomicUsize::new(0),
            _stop: stops,
        })
    }

    /// The runtime the next connection goes to: each in turn, so that
    /// connections opened together spread over the cores.
    pub(super) fn next(&self) -> &Handle {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.handles.len();
        &self.handles[i]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn connections_are_placed_on_each_core_in_turn_and_stay_there() {
        let cores = Cores::start(2 * 1024 * 1024).expect("runtimes");
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
    }
}
