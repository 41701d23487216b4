//! Cancel requests and `statement_timeout`. A cancel reaches a statement
//! wherever it is, planning, waiting for the store or streaming rows to the
//! client, because every result stream races its next batch against the
//! connection's cancel signal and the statement's deadline.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::Duration;

use async_trait::async_trait;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::execution::SendableRecordBatchStream;
use futures::{Stream, StreamExt};
use pgwire::api::cancel::CancelHandler;
use pgwire::error::PgWireError;
use pgwire::messages::cancel::CancelRequest;
use pgwire::messages::startup::SecretKey;
use tokio::sync::watch;
use tokio::time::{Instant, Sleep};

use super::sqlstate::{CONNECTION_FAILURE, QUERY_CANCELED, datafusion_error, error};

/// The cancel signal of one connection. Statements are numbered as they
/// start; a cancel names the statement running when it arrived. A cursor's
/// stream outlives the FETCH that started it, so its guard fires only for a
/// cancel aimed at the statement running now (a later FETCH), never for one
/// sent while the connection ran something else or sat idle.
#[derive(Debug)]
pub struct Signal {
    tx: watch::Sender<u64>,
    current: Arc<AtomicU64>,
}

impl Signal {
    fn new() -> Self {
        Self {
            tx: watch::channel(0).0,
            current: Arc::new(AtomicU64::new(0)),
        }
    }

    fn cancel(&self) {
        let target = self.current.load(Ordering::SeqCst);
        self.tx.send_modify(|n| *n = target);
    }

    /// Starts a statement that takes no guard of its own: an Execute that
    /// resumes a suspended portal. Cancels sent before it are not for it.
    pub fn next_statement(&self) {
        self.current.fetch_add(1, Ordering::SeqCst);
    }

    /// A guard for a new statement: cancels sent before it started do not count.
    pub fn guard(&self, timeout: Option<Duration>, probe: Option<Probe>) -> Guard {
        self.current.fetch_add(1, Ordering::SeqCst);
        let mut rx = self.tx.subscribe();
        rx.mark_unchanged();
        let timer = probe.as_ref().and_then(Probe::take_timer);
        Guard {
            rx,
            current: self.current.clone(),
            deadline: timeout.map(|t| Instant::now() + t),
            probe,
            timer,
        }
    }
}

/// What ends a statement early.
pub struct Guard {
    rx: watch::Receiver<u64>,
    /// The number of the connection's running statement.
    current: Arc<AtomicU64>,
    deadline: Option<Instant>,
    probe: Option<Probe>,
    /// The probe's timer, lent by the connection for this statement.
    timer: Option<Pin<Box<Sleep>>>,
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let (Some(probe), Some(timer)) = (&self.probe, self.timer.take()) {
            probe.give_back(timer);
        }
    }
}

/// Watches a connection's socket for the client going away. While a
/// statement computes, nothing reads the socket (as in PostgreSQL); without
/// this, a query whose client has gone would run to its end. PostgreSQL's
/// `client_connection_check_interval` does the same.
///
/// One timer serves all of a connection's statements, lent to each in
/// turn. A timer made per statement cost the connection's thread a
/// wake-up of its own when it was registered (tokio's time driver wakes
/// the I/O driver for a deadline earlier than any it holds, and a thread
/// at rest holds none): an eventfd write and an extra `epoll_wait` per
/// point query (`strace -c`). A timer kept armed is registered once per
/// interval instead.
#[derive(Debug, Clone)]
pub struct Probe {
    socket: Arc<std::net::TcpStream>,
    timer: Arc<Mutex<Option<Pin<Box<Sleep>>>>>,
}

/// How often a running statement checks that its client is still there.
const PROBE_INTERVAL: Duration = Duration::from_millis(250);

impl Probe {
    /// A second handle on the connection's socket, or `None` if the system
    /// will not give one (the statement then runs without the check).
    pub fn of(socket: &tokio::net::TcpStream) -> Option<Self> {
        use std::os::fd::AsFd;
        let fd = socket.as_fd().try_clone_to_owned().ok()?;
        Some(Self {
            socket: Arc::new(std::net::TcpStream::from(fd)),
            timer: Arc::default(),
        })
    }

    /// `true` once the peer has closed its end, even with bytes of it still
    /// unread (clients send Terminate before they close). A zero-timeout
    /// poll for POLLRDHUP takes nothing from the connection's reader.
    fn closed(&self) -> bool {
        use rustix::event::{PollFd, PollFlags, Timespec, poll};
        let mut fds = [PollFd::new(
            self.socket.as_ref(),
            PollFlags::RDHUP | PollFlags::HUP,
        )];
        let now = Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        match poll(&mut fds, Some(&now)) {
            Ok(0) => false,
            Ok(_) => fds[0]
                .revents()
                .intersects(PollFlags::RDHUP | PollFlags::HUP | PollFlags::ERR),
            Err(_) => false,
        }
    }

    /// Resolves once the client has gone, checked each `PROBE_INTERVAL`
    /// on `timer` (made here the first time).
    async fn gone(&self, timer: &mut Option<Pin<Box<Sleep>>>) {
        let timer = timer.get_or_insert_with(|| Box::pin(tokio::time::sleep(PROBE_INTERVAL)));
        loop {
            timer.as_mut().await;
            if self.closed() {
                return;
            }
            timer.as_mut().reset(Instant::now() + PROBE_INTERVAL);
        }
    }

    /// The connection's timer, unless a statement still holds it (a
    /// cursor's stream outlives its FETCH): that statement's guard then
    /// makes its own.
    ///
    /// A timer past its deadline (the connection rested longer than an
    /// interval) is re-armed, or it would fire at once and cost the
    /// statement a check it does not need yet.
    fn take_timer(&self) -> Option<Pin<Box<Sleep>>> {
        let mut timer = self.timer.lock().ok()?.take()?;
        let now = Instant::now();
        if timer.deadline() <= now {
            timer.as_mut().reset(now + PROBE_INTERVAL);
        }
        Some(timer)
    }

    fn give_back(&self, timer: Pin<Box<Sleep>>) {
        if let Ok(mut slot) = self.timer.lock()
            && slot.is_none()
        {
            *slot = Some(timer);
        }
    }
}

impl Guard {
    /// A guard nothing cancels (embedders and benchmarks).
    pub fn unbounded() -> Self {
        let (tx, rx) = watch::channel(0);
        // The sender goes, so `changed` fails, which reads as "never".
        drop(tx);
        Self {
            rx,
            current: Arc::new(AtomicU64::new(0)),
            deadline: None,
            probe: None,
            timer: None,
        }
    }

    /// Resolves with the error to report once the statement is cancelled or
    /// past its deadline; pends forever otherwise.
    pub async fn interrupted(&mut self) -> PgWireError {
        let timeout = async {
            match self.deadline {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending::<()>().await,
            }
        };
        let (probe, timer) = (&self.probe, &mut self.timer);
        let gone = async {
            match probe {
                Some(p) => p.gone(timer).await,
                None => std::future::pending::<()>().await,
            }
        };
        let (rx, current) = (&mut self.rx, &self.current);
        let cancelled = async move {
            loop {
                if rx.changed().await.is_err() {
                    // The server is going away; nothing can cancel any more.
                    return std::future::pending::<()>().await;
                }
                if *rx.borrow_and_update() == current.load(Ordering::SeqCst) {
                    return;
                }
            }
        };
        tokio::select! {
            () = gone => error(CONNECTION_FAILURE, "the client closed the connection"),
            () = cancelled => error(QUERY_CANCELED, "canceling statement due to user request"),
            () = timeout => error(QUERY_CANCELED, "canceling statement due to statement timeout"),
        }
    }

    /// Runs a future unless the statement is interrupted first.
    ///
    /// A plain function, not an `async fn`: an async fn keeps both its
    /// argument and the copy it awaits, so every wrapper of this kind
    /// doubled the statement's future, and async_trait moves the whole of
    /// it into a box at each Execute (a point read's had grown to 60 KB).
    pub fn run<'a, T, F>(
        &'a mut self,
        fut: F,
    ) -> Interruptible<F, impl Future<Output = PgWireError> + 'a>
    where
        F: Future<Output = Result<T, PgWireError>> + 'a,
    {
        Interruptible {
            fut,
            interrupted: self.interrupted(),
        }
    }
}

pin_project_lite::pin_project! {
    /// A statement's future raced against its interruption (`Guard::run`).
    /// The statement is polled first: an answer that is ready wins over a
    /// cancel that came with it.
    pub struct Interruptible<F, I> {
        #[pin]
        fut: F,
        #[pin]
        interrupted: I,
    }
}

impl<T, F, I> Future for Interruptible<F, I>
where
    F: Future<Output = Result<T, PgWireError>>,
    I: Future<Output = PgWireError>,
{
    type Output = Result<T, PgWireError>;

    fn poll(self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        if let Poll::Ready(done) = this.fut.poll(cx) {
            return Poll::Ready(done);
        }
        this.interrupted.poll(cx).map(Err)
    }
}

/// A record batch stream that ends with 57014 when interrupted. Dropping it
/// drops the plan's stream, which stops the scan's tasks.
///
/// The deadline holds until the first batch: the time a statement computes
/// before it answers. After that the client sets the pace (a cursor may be
/// read for an hour), and only a cancel ends the stream.
pub fn guarded(
    stream: SendableRecordBatchStream,
    guard: Guard,
) -> impl Stream<Item = Result<RecordBatch, PgWireError>> + Send + 'static {
    futures::stream::unfold(Some((stream, guard)), |state| async move {
        let (mut stream, mut guard) = state?;
        let next = tokio::select! {
            b = stream.next() => b.map(|r| r.map_err(|e| datafusion_error(&e))),
            e = guard.interrupted() => Some(Err(e)),
        };
        match next {
            None => None,
            Some(Ok(batch)) => {
                guard.deadline = None;
                Some((Ok(batch), Some((stream, guard))))
            }
            Some(Err(e)) => Some((Err(e), None)),
        }
    })
}

/// The live connections' cancel signals, by backend pid. A cancel request
/// must name the pid and the secret key the connection was given.
#[derive(Debug, Default)]
pub struct Registry {
    live: Mutex<HashMap<i32, (SecretKey, Arc<Signal>)>>,
}

impl Registry {
    /// Registers a connection; the returned handle unregisters it when dropped.
    pub fn register(self: &Arc<Self>, pid: i32, key: SecretKey) -> Registration {
        let signal = Arc::new(Signal::new());
        if let Ok(mut live) = self.live.lock() {
            live.insert(pid, (key, signal.clone()));
        }
        Registration {
            registry: self.clone(),
            pid,
            signal,
        }
    }
}

/// The registry as one connection hands it to pgwire's `process_message`,
/// which takes its handlers' `Arc`s by value: the connection's loop clones
/// this one for every message, a count on the connection's own core.
/// Cloning the registry itself, which every connection shares, moved its
/// cache line between the cores at every message.
#[derive(Debug)]
pub(super) struct Canceller(pub(super) Arc<Registry>);

#[async_trait]
impl CancelHandler for Canceller {
    async fn on_cancel_request(&self, request: CancelRequest) {
        self.0.on_cancel_request(request).await;
    }
}

#[async_trait]
impl CancelHandler for Registry {
    async fn on_cancel_request(&self, request: CancelRequest) {
        let signal = match self.live.lock() {
            Ok(live) => live
                .get(&request.pid)
                .filter(|(key, _)| key.eq_value(&request.secret_key))
                .map(|(_, s)| s.clone()),
            Err(_) => None,
        };
        if let Some(signal) = signal {
            signal.cancel();
        }
    }
}

/// A connection's place in the registry.
#[derive(Debug)]
pub struct Registration {
    registry: Arc<Registry>,
    pid: i32,
    pub signal: Arc<Signal>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        if let Ok(mut live) = self.registry.live.lock() {
            live.remove(&self.pid);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn past_its_deadline() -> Guard {
        let mut guard = Guard::unbounded();
        guard.deadline = Some(Instant::now());
        guard
    }

    #[tokio::test]
    async fn a_ready_answer_wins_over_an_interrupt_that_came_with_it() {
        let mut guard = past_its_deadline();
        let answer = guard.run(async { Ok::<_, PgWireError>(7) }).await;
        assert!(matches!(answer, Ok(7)));
    }

    #[tokio::test]
    async fn a_statement_still_running_at_its_deadline_ends_with_57014() {
        let mut guard = past_its_deadline();
        let answer = guard
            .run(std::future::pending::<Result<(), PgWireError>>())
            .await;
        match answer {
            Err(PgWireError::UserError(info)) => assert_eq!(info.code, QUERY_CANCELED),
            other => panic!("expected 57014, got {other:?}"),
        }
    }

    #[test]
    fn a_guarded_future_is_not_held_twice() {
        // `run` used to be an async fn, which kept its argument and the
        // copy it awaited: twice the statement's future.
        let mut guard = Guard::unbounded();
        let big = async {
            let buffer = [0u8; 4096];
            std::future::ready(()).await;
            Ok::<_, PgWireError>(buffer[0])
        };
        let inner = std::mem::size_of_val(&big);
        let raced = guard.run(big);
        assert!(std::mem::size_of_val(&raced) < inner + 2048);
    }
}
