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
//!
//! A connection is placed before its client's thread has settled, though:
//! two pgbench threads that connect while on one CPU, or one that connects
//! its first connections before the other has begun, get their
//! connections split over both runtimes, and the run keeps them split.
//! Under `pgbench -c 16 -j 2` that was a run of 47,000-55,000 tps instead
//! of 67,000-77,000 (`strace` of both sides: 8 and 8 in the fast runs,
//! 4/4 and 6/2 in the slow). So a connection follows its client
//! ([`Seat::follow`]): between round trips it looks again at the CPU its
//! packets come in on, and when two looks in a row name another runtime
//! that is not already twice as loaded, it moves there at rest.
//!
//! And a runtime runs on its CPU only, when there is one runtime for each
//! CPU the process may use: the i-th runtime's thread is pinned to the
//! i-th such CPU, so the runtime a connection follows its client to is the
//! one on the client's CPU, and a message wakes no thread elsewhere.
//! Unpinned, the scheduler paired each client thread with the other
//! CPU's runtime in some runs: under `pgbench -c 4 -j 2` 57,000-101,000 tps
//! unpinned, 104,000-110,000 pinned. The runtimes' blocking pools are not
//! pinned (their threads take every allowed CPU back), so a long scan's
//! pages and the store's commits still use every core.

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
    runtimes: Arc<Runtimes>,
    threads: Vec<Core>,
}

/// The runtimes' handles and loads, shared with the connections on them,
/// which may move.
struct Runtimes {
    handles: Vec<Handle>,
    /// The connections open on each runtime.
    open: Vec<Arc<AtomicUsize>>,
    next: AtomicUsize,
    /// The CPU each runtime is pinned to, if they are.
    pinned: Vec<usize>,
}

impl Runtimes {
    /// The runtime of packets that came in on `cpu`: the one pinned there,
    /// or, unpinned, the CPU's number (the callers wrap it).
    fn of_cpu(&self, cpu: Option<usize>) -> Option<usize> {
        let cpu = cpu?;
        if self.pinned.is_empty() {
            return Some(cpu);
        }
        self.pinned.iter().position(|&c| c == cpu)
    }

    fn loads(&self) -> Vec<usize> {
        self.open
            .iter()
            .map(|n| n.load(Ordering::Relaxed))
            .collect()
    }

    fn seat(self: &Arc<Self>, index: usize) -> Seat {
        Seat {
            runtimes: self.clone(),
            index,
            place: self.place_on(index),
            follow: Follow::default(),
        }
    }

    /// A place on runtime `index`, counted until dropped.
    fn place_on(&self, index: usize) -> Place {
        self.open[index].fetch_add(1, Ordering::Relaxed);
        Place(self.open[index].clone())
    }
}

/// A connection's runtime: which it is, its place there, and what it has
/// seen of its client's CPU.
pub(super) struct Seat {
    runtimes: Arc<Runtimes>,
    index: usize,
    place: Place,
    follow: Follow,
}

impl Seat {
    /// Called between round trips, at rest: the runtime this connection
    /// should now move to, if its client sends from another CPU's (module
    /// doc). The seat is then already that runtime's; the caller moves.
    /// One `getsockopt` every [`LOOK_EVERY`] calls.
    pub(super) fn follow(&mut self, socket: &impl std::os::fd::AsFd) -> Option<Handle> {
        let Self {
            runtimes,
            index,
            follow,
            ..
        } = self;
        let to = follow.round_trip(|| {
            let incoming = runtimes.of_cpu(incoming_cpu(socket));
            follow_to(*index, incoming, &runtimes.loads())
        })?;
        self.place = self.runtimes.place_on(to);
        self.index = to;
        Some(self.runtimes.handles[to].clone())
    }
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
        let allowed = allowed_cpus();
        // A CPU quota that allows fewer runtimes than CPUs pins none.
        let pinned = if allowed.len() == n {
            allowed.clone()
        } else {
            Vec::new()
        };
        let mut handles = Vec::with_capacity(n);
        let mut threads = Vec::with_capacity(n);
        for i in 0..n {
            let (stop, stopped) = oneshot::channel::<()>();
            let (built, handle) = oneshot::channel::<io::Result<Handle>>();
            let (finished, done) = oneshot::channel::<()>();
            let on = pinned.get(i).copied();
            let whole = allowed.clone();
            std::thread::Builder::new()
                .name(format!("tablesql-core-{i}"))
                .stack_size(stack)
                .spawn(move || {
                    if let Some(&cpu) = on.as_ref() {
                        pin(&[cpu]);
                    }
                    let runtime = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .thread_stack_size(stack)
                        // A thread inherits its maker's CPUs: the blocking
                        // pool's take every allowed one back.
                        .on_thread_start(move || {
                            if on.is_some() {
                                pin(&whole);
                            }
                        })
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
            handles.push(handle);
            threads.push(Core { stop, done });
        }
        let runtimes = Arc::new(Runtimes {
            open: handles.iter().map(|_| Arc::default()).collect(),
            handles,
            next: AtomicUsize::new(0),
            pinned,
        });
        Ok(Self { runtimes, threads })
    }

    /// The runtime a connection on `socket` goes to (see the module doc),
    /// and its place there, held while the connection is open.
    pub(super) fn place(&self, socket: &impl std::os::fd::AsFd) -> (&Handle, Seat) {
        let runtimes = &self.runtimes;
        let turn = runtimes.next.fetch_add(1, Ordering::Relaxed);
        let incoming = runtimes.of_cpu(incoming_cpu(socket));
        let i = choose(incoming, &runtimes.loads(), turn);
        (&runtimes.handles[i], runtimes.seat(i))
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

/// The CPUs this process may run on, in order (none if the kernel will
/// not say).
fn allowed_cpus() -> Vec<usize> {
    match rustix::thread::sched_getaffinity(None) {
        Ok(set) => (0..rustix::thread::CpuSet::MAX_CPU)
            .filter(|&cpu| set.is_set(cpu))
            .collect(),
        Err(_) => Vec::new(),
    }
}

/// Runs the calling thread on `cpus` only. A refusal leaves it where it
/// was: slower, not wrong.
fn pin(cpus: &[usize]) {
    let mut set = rustix::thread::CpuSet::new();
    for &cpu in cpus {
        set.set(cpu);
    }
    if let Err(e) = rustix::thread::sched_setaffinity(None, &set) {
        tracing::debug!(error = %e, ?cpus, "cannot pin a thread");
    }
}

/// The CPU that `socket`'s last packet came in on, if the kernel says.
fn incoming_cpu(socket: &impl std::os::fd::AsFd) -> Option<usize> {
    rustix::net::sockopt::socket_incoming_cpu(socket)
        .ok()
        .and_then(|cpu| usize::try_from(cpu).ok())
}

/// Round trips between two looks at the CPU a connection's packets come in
/// on: the look is a system call, and a client thread that the scheduler
/// moves for a moment should not move its connections.
const LOOK_EVERY: u32 = 64;

/// What a connection has seen of its client's CPU: a move waits for two
/// looks in a row that name the same other runtime.
#[derive(Debug, Default)]
struct Follow {
    round_trips: u32,
    wanted: Option<usize>,
}

impl Follow {
    /// Counts a round trip; at every [`LOOK_EVERY`]th, `look`s for the
    /// runtime to move to, and says move when it named it the time before.
    fn round_trip(&mut self, look: impl FnOnce() -> Option<usize>) -> Option<usize> {
        self.round_trips += 1;
        if self.round_trips < LOOK_EVERY {
            return None;
        }
        self.round_trips = 0;
        let wanted = look();
        let agreed = wanted.is_some() && wanted == self.wanted;
        self.wanted = if agreed { None } else { wanted };
        wanted.filter(|_| agreed)
    }
}

/// The runtime a connection on runtime `current` should move to, with its
/// packets now coming in on CPU `incoming` and `open` connections on each
/// runtime (this one counted on its own): the incoming CPU's, if another
/// one, unless that would hold twice as many as the least loaded (plus
/// one) without it, as [`choose`] places.
fn follow_to(current: usize, incoming: Option<usize>, open: &[usize]) -> Option<usize> {
    let n = open.len();
    let target = incoming? % n.max(1);
    if target == current {
        return None;
    }
    let load = |i: usize| {
        let here = open.get(i).copied().unwrap_or(0);
        if i == current {
            here.saturating_sub(1)
        } else {
            here
        }
    };
    let fewest = (0..n).map(load).min()?;
    (load(target) < 2 * (fewest + 1)).then_some(target)
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
        let n = cores.runtimes.handles.len();
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
        assert!(cores.runtimes.loads().iter().all(|&o| o == 2));
        drop(places);
        assert!(cores.runtimes.loads().iter().all(|&o| o == 0));
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

    #[test]
    fn a_connection_follows_its_client_to_another_runtime_unless_that_holds_twice_the_least() {
        // Its client now sends from the other CPU.
        assert_eq!(follow_to(0, Some(1), &[8, 8]), Some(1));
        assert_eq!(follow_to(1, Some(0), &[3, 13]), Some(0));
        // It is where its client is, or no one says.
        assert_eq!(follow_to(1, Some(1), &[8, 8]), None);
        assert_eq!(follow_to(1, Some(3), &[8, 8]), None);
        assert_eq!(follow_to(0, None, &[8, 8]), None);
        // Both client threads on one CPU: the other runtime keeps a share.
        assert_eq!(follow_to(1, Some(0), &[10, 6]), Some(0));
        assert_eq!(follow_to(1, Some(0), &[12, 4]), None);
        // Counted without itself: one connection does not bounce.
        assert_eq!(follow_to(0, Some(1), &[1, 0]), Some(1));
        assert_eq!(follow_to(0, Some(1), &[1, 1]), Some(1));
        assert_eq!(follow_to(0, Some(1), &[1, 2]), None);
    }

    #[test]
    fn a_move_waits_for_two_looks_a_round_of_round_trips_apart_that_agree() {
        let mut follow = Follow::default();
        let mut looks = 0;
        let mut moves = Vec::new();
        let seen = [
            Some(1),
            Some(1),
            None,
            Some(1),
            Some(0),
            Some(1),
            Some(1),
            Some(1),
        ];
        for _ in 0..seen.len() as u32 * LOOK_EVERY {
            if let Some(to) = follow.round_trip(|| {
                looks += 1;
                seen[looks - 1]
            }) {
                moves.push((looks, to));
            }
        }
        assert_eq!(looks, seen.len());
        // The second look of 1 moves; a run of three moves once, then
        // waits for another two.
        assert_eq!(moves, vec![(2, 1), (7, 1)]);
    }

    #[tokio::test]
    async fn a_seat_follows_a_client_thread_that_sends_from_another_cpu() {
        let cores = Cores::start(2 * 1024 * 1024).await.expect("runtimes");
        let n = cores.runtimes.handles.len();
        // One CPU: there is nowhere to move, and nothing to show.
        let Some(last) = n.checked_sub(1).filter(|&l| l > 0) else {
            cores.stop().await;
            return;
        };
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("listener");
        let address = listener.local_addr().expect("address");
        let cpu = allowed_cpus().last().copied().unwrap_or(last);
        let Some(to) = cores
            .runtimes
            .of_cpu(Some(cpu))
            .map(|r| r % n)
            .filter(|&r| r > 0)
        else {
            cores.stop().await;
            return;
        };
        // A client thread on that CPU: on loopback its packets come in
        // there.
        let client = std::thread::spawn(move || {
            let mut on = rustix::thread::CpuSet::new();
            on.set(cpu);
            rustix::thread::sched_setaffinity(None, &on).expect("affinity");
            let mut stream = std::net::TcpStream::connect(address).expect("connect");
            std::io::Write::write_all(&mut stream, b"x").expect("write");
            stream
        });
        let (mut accepted, _) = listener.accept().expect("accept");
        std::io::Read::read_exact(&mut accepted, &mut [0u8]).expect("read");
        let _client = client.join().expect("client thread");
        let mut seat = cores.runtimes.seat(0);
        let mut moved = Vec::new();
        for round_trip in 1..=2 * LOOK_EVERY {
            if seat.follow(&accepted).is_some() {
                moved.push(round_trip);
            }
        }
        assert_eq!(moved, vec![2 * LOOK_EVERY]);
        assert_eq!(seat.index, to);
        let loads = cores.runtimes.loads();
        assert_eq!((loads[0], loads[to]), (0, 1));
        drop(seat);
        assert!(cores.runtimes.loads().iter().all(|&o| o == 0));
        cores.stop().await;
    }

    #[tokio::test]
    async fn each_runtime_runs_on_its_own_cpu_and_its_blocking_pool_on_all() {
        let cores = Cores::start(2 * 1024 * 1024).await.expect("runtimes");
        let allowed = allowed_cpus();
        let count = || rustix::thread::sched_getaffinity(None).map(|s| s.count() as usize);
        for (i, handle) in cores.runtimes.handles.iter().enumerate() {
            let on = handle.spawn(async move { count() }).await.expect("task");
            let blocking = handle.spawn_blocking(count).await.expect("blocking");
            match cores.runtimes.pinned.get(i) {
                Some(_) => assert_eq!(on.expect("affinity"), 1),
                None => assert_eq!(on.expect("affinity"), allowed.len()),
            }
            assert_eq!(blocking.expect("affinity"), allowed.len());
        }
        assert!(cores.runtimes.pinned.is_empty() || cores.runtimes.pinned == allowed);
        cores.stop().await;
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
