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
//! single-threaded runtimes, one per core, and stays there. Its socket,
//! its statements and the reads they make of one partition's first page
//! (the embedded store reads those on the calling thread) all run on that
//! thread. A scan's later pages and its reads of many partitions are still
//! read on the blocking pool, so a long scan still uses every core.
//!
//! Which runtime matters as much. A client thread that holds several
//! connections (pgbench's `-j`, a pool's worker) talks to every runtime its
//! connections are on; placed in turn, its connections were split over
//! both runtimes about half the time, and then every message woke a thread
//! on the other CPU: 9.6 µs of kernel time a transaction instead of 3.3,
//! and 58,000 tps instead of 85,000 (`-c 4 -j 2`, server CPU time per
//! transaction). So a connection goes to the runtime of the CPU its
//! packets came in on (`SO_INCOMING_CPU`: on loopback, the client thread's
//! CPU), which keeps one client thread's connections together; unless
//! that runtime already holds twice as many connections as the least
//! loaded one (a network card that delivers every packet on one CPU
//! would otherwise put every connection there), when it goes to the least
//! loaded.

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::sync::oneshot;

/// The connections' runtimes. Dropping it lets them go: each thread then
/// drops its runtime, which ends the tasks still on it; `stop` also waits
/// for that.
pub(super) struct Cores {
    handles: Vec<Handle>,
    /// The connections open on each runtime.
    open: Vec<Arc<AtomicUsize>>,
    next: AtomicUsize,
    threads: Vec<Core>,
}

/// A connection's place on a runtime, given back when dropped.
pub(super) struct Place(Arc<AtomicUsize>);

impl Drop for Place {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// How long a stopping runtime waits for the work on its blocking pool
/// (a store commit of a statement cancelled at shutdown) before it lets
/// the thread go: the engine closes after it, with its own bound.
const BLOCKING_GRACE: Duration = Duration::from_secs(5);

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
            open: (0..n).map(|_| Arc::default()).collect(),
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
                        // Linux keeps 15 bytes of a thread's name.
                        .thread_name(format!("tablesql-blk-{i}"))
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
                    // store's commits run, within a bound.
                    runtime.shutdown_timeout(BLOCKING_GRACE);
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

    /// The runtime a connection on `socket` goes to (see the module doc),
    /// and its place there, held while the connection is open.
    pub(super) fn place(&self, socket: &impl std::os::fd::AsFd) -> (&Handle, Place) {
        let incoming = rustix::net::sockopt::socket_incoming_cpu(socket)
            .ok()
            .and_then(|cpu| usize::try_from(cpu).ok());
        let open: Vec<usize> = self
            .open
            .iter()
            .map(|n| n.load(Ordering::Relaxed))
            .collect();
        let turn = self.next.fetch_add(1, Ordering::Relaxed);
        let i = choose(incoming, &open, turn);
        self.open[i].fetch_add(1, Ordering::Relaxed);
        (&self.handles[i], Place(self.open[i].clone()))
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

/// The runtime for a connection whose packets came in on CPU `incoming`
/// (if known), with `open` connections on each runtime: the incoming CPU's
/// unless it holds twice as many as the least loaded (plus one), else the
/// least loaded, ties taken in `turn`.
fn choose(incoming: Option<usize>, open: &[usize], turn: usize) -> usize {
    let n = open.len().max(1);
    let least = (0..n)
        .map(|k| (turn + k) % n)
        .min_by_key(|&i| open.get(i).copied().unwrap_or(0))
        .unwrap_or(0);
    let fewest = open.get(least).copied().unwrap_or(0);
    match incoming.map(|cpu| cpu % n) {
        Some(i) if open.get(i).copied().unwrap_or(0) < 2 * (fewest + 1) => i,
        _ => least,
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
        let mut places = Vec::new();
        for _ in 0..2 * n {
            // No socket: no incoming CPU, so the least loaded in turn.
            let (core, place) = cores.place(&std::io::stdin());
            places.push(place);
            let task = core.spawn(async {
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
        assert!(cores.open.iter().all(|o| o.load(Ordering::Relaxed) == 2));
        drop(places);
        assert!(cores.open.iter().all(|o| o.load(Ordering::Relaxed) == 0));
        cores.stop().await;
    }

    #[test]
    fn a_connection_goes_to_its_incoming_cpus_runtime_unless_that_holds_twice_the_least() {
        // A client thread's connections stay together.
        assert_eq!(choose(Some(1), &[0, 0], 0), 1);
        assert_eq!(choose(Some(1), &[1, 1], 0), 1);
        assert_eq!(choose(Some(0), &[3, 2], 1), 0);
        // CPUs past the runtimes wrap.
        assert_eq!(choose(Some(3), &[0, 0], 0), 1);
        // Every packet on one CPU: the load still spreads, at most two to
        // one.
        assert_eq!(choose(Some(0), &[2, 0], 0), 1);
        assert_eq!(choose(Some(0), &[3, 1], 0), 0);
        assert_eq!(choose(Some(0), &[4, 1], 0), 1);
        // No incoming CPU: the least loaded, ties in turn.
        assert_eq!(choose(None, &[1, 1, 1], 4), 1);
        assert_eq!(choose(None, &[1, 0, 1], 0), 1);
    }

    #[tokio::test]
    async fn stopping_waits_for_work_on_the_cores_blocking_pools() {
        let cores = Cores::start(2 * 1024 * 1024).await.expect("runtimes");
        let finished = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = finished.clone();
        let (started, running) = oneshot::channel();
        cores.place(&std::io::stdin()).0.spawn_blocking(move || {
            let _ = started.send(());
            std::thread::sleep(std::time::Duration::from_millis(200));
            flag.store(true, Ordering::SeqCst);
        });
        running.await.expect("blocking work started");
        cores.stop().await;
        assert!(finished.load(Ordering::SeqCst));
    }
}
