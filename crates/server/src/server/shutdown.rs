//! Stopping the server: on SIGTERM, SIGINT or SIGHUP (the binary's) connections
//! made from then on are told 57P03, connections at rest are told 57P01
//! and closed at once, running statements get a bound to finish in, and
//! past it they are cancelled with 57P01 too; each last word is read by
//! its client before its socket closes (`stream::Guarded::finish`). Then,
//! every connection ended, the engine is closed ([`close_engine`]).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use pgwire::error::ErrorInfo;
use tokio::sync::watch;
use tokio::task::JoinSet;

use super::Acceptor;
use super::sqlstate::ADMIN_SHUTDOWN;
use crate::engine::Engine;

/// Where the server is in its stopping.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Phase {
    Serving,
    /// No new connection; each ends once at rest (between statements).
    Draining,
    /// Past the bound: each ends now, its statement cancelled.
    Terminating,
}

/// The server's phase, told to each connection on a channel of its own.
///
/// A connection waits for the phase at every message (between round trips
/// it may be ended, and a statement past the bound is cut short), and a
/// waiting tokio `watch` receiver locks its channel's list of waiters at
/// each poll: with one channel for the server, every connection's every
/// wake-up took the same lock, 3.8% of a prepared point query's server
/// time (`perf`). Each connection's own channel keeps that lock on its
/// own lines; the server sends the rare change to all of them.
#[derive(Debug)]
pub(super) struct Phases {
    /// The phase, and one sender per connection still listening.
    told: Mutex<(Phase, Vec<watch::Sender<Phase>>)>,
}

impl Default for Phases {
    fn default() -> Self {
        Self {
            told: Mutex::new((Phase::Serving, Vec::new())),
        }
    }
}

impl Phases {
    /// A new connection's channel, starting at the current phase. The
    /// channels of connections that ended are dropped here, so the list
    /// holds about the connections open.
    pub(super) fn subscribe(&self) -> watch::Receiver<Phase> {
        let mut told = self.lock();
        told.1.retain(|tx| !tx.is_closed());
        let (tx, rx) = watch::channel(told.0);
        told.1.push(tx);
        rx
    }

    /// The phase now.
    pub(super) fn now(&self) -> Phase {
        self.lock().0
    }

    /// Moves every connection to `phase`.
    pub(super) fn send(&self, phase: Phase) {
        let mut told = self.lock();
        told.0 = phase;
        for tx in &told.1 {
            tx.send_replace(phase);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (Phase, Vec<watch::Sender<Phase>>)> {
        // Nothing can be left half-done under this lock.
        self.told
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Resolves once the server has reached `phase`; never, if the server is
/// gone without reaching it.
pub(super) async fn reached(rx: &mut watch::Receiver<Phase>, phase: Phase) {
    if rx.wait_for(|p| *p >= phase).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// What a connection ended by the server is told (PostgreSQL's own words).
pub(super) fn terminated() -> ErrorInfo {
    ErrorInfo::new(
        "FATAL".to_owned(),
        ADMIN_SHUTDOWN.to_owned(),
        "terminating connection due to administrator command".to_owned(),
    )
}

/// How long a connection gets to say goodbye (send its 57P01, and see it
/// read) once its statement is cancelled; also how long refused
/// connections get.
pub(super) const LAST_WORDS: Duration = Duration::from_secs(5);

/// How much longer a cancelled connection is waited for while its runtime
/// is inside a computation that does not yield, before it is dropped
/// unsaid: only a computation of more than a minute is cut.
pub(super) const UNSAID: Duration = Duration::from_secs(60);

/// Stops the server's connections, once told to: connections made from
/// now on are refused (57P03, on tasks of the returned set); the others
/// get `grace` to come to rest, or until `hurry`; past it their statements
/// are cancelled, and each is waited for until it has said so (57P01).
pub(super) async fn drain(
    acceptor: &mut Acceptor,
    tasks: &mut JoinSet<()>,
    grace: Duration,
    hurry: impl std::future::Future<Output = ()>,
) -> JoinSet<()> {
    tracing::info!(
        connections = tasks.len(),
        grace_s = grace.as_secs_f64(),
        "shutting down: no new connections"
    );
    acceptor.shared.phase.send(Phase::Draining);
    let mut refused = JoinSet::new();
    let deadline = tokio::time::Instant::now().checked_add(grace);
    let bound = async {
        match deadline {
            Some(at) => tokio::time::sleep_until(at).await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(bound);
    tokio::pin!(hurry);
    let rested = loop {
        tokio::select! {
            joined = tasks.join_next() => if joined.is_none() { break true },
            () = &mut bound => break false,
            () = &mut hurry => break false,
            accepted = acceptor.listener.accept() => acceptor.serve(accepted, &mut refused).await,
            // Reaped as they end: a client retrying through a long drain
            // would otherwise leave a finished task per attempt.
            Some(_) = refused.join_next() => {}
        }
    };
    if !rested {
        tracing::warn!(
            connections = tasks.len(),
            "shutdown timeout reached: cancelling the statements still running"
        );
        acceptor.shared.phase.send(Phase::Terminating);
        last_words(acceptor, tasks, &mut refused).await;
    }
    refused
}

/// Waits for cancelled connections to end, refusing new ones meanwhile. A
/// statement is cancelled where it next yields; a connection whose runtime
/// is inside a computation that does not yield (a join's hash table, built
/// in one go) says its 57P01 once that ends. It is waited for, not cut: a
/// task aborted there would only be dropped unsaid when the computation
/// ended. Past [`UNSAID`] more, it is.
async fn last_words(acceptor: &mut Acceptor, tasks: &mut JoinSet<()>, refused: &mut JoinSet<()>) {
    let now = tokio::time::Instant::now();
    let (warn_at, cut_at) = (now + LAST_WORDS, now + LAST_WORDS + UNSAID);
    let mut warned = false;
    loop {
        tokio::select! {
            joined = tasks.join_next() => if joined.is_none() { return },
            () = tokio::time::sleep_until(warn_at), if !warned => {
                warned = true;
                tracing::warn!(
                    connections = tasks.len(),
                    "connections inside a computation that does not yield: waiting for them to say 57P01"
                );
            }
            () = tokio::time::sleep_until(cut_at) => break,
            accepted = acceptor.listener.accept() => acceptor.serve(accepted, refused).await,
            Some(_) = refused.join_next() => {}
        }
    }
    tracing::warn!(
        connections = tasks.len(),
        "connections still busy: closing them unsaid"
    );
    tasks.abort_all();
    // An aborted task still ends only where it yields.
    if !ended(tasks, LAST_WORDS).await {
        tracing::warn!(
            connections = tasks.len(),
            "connections still inside their computation: left to the process's exit"
        );
    }
}

/// Every connection ended: the refused ones are told (57P03) now if they
/// have not been, the connections' runtimes stop, and the engine closes.
pub(super) async fn end(acceptor: Acceptor, mut refused: JoinSet<()>) {
    let Acceptor {
        listener,
        shared,
        cores,
        ..
    } = acceptor;
    drop(listener);
    shared.phase.send(Phase::Terminating);
    if !ended(&mut refused, LAST_WORDS).await {
        refused.abort_all();
        while refused.join_next().await.is_some() {}
    }
    // A runtime still inside a computation ends only when it yields.
    if tokio::time::timeout(UNSAID, cores.stop()).await.is_err() {
        tracing::warn!("a connections' runtime is still busy: its statement may hold the store");
    }
    match Arc::try_unwrap(shared) {
        Ok(shared) => close_engine(shared.engine).await,
        // Nothing else holds it once the connections are gone.
        Err(_) => tracing::warn!("the engine is still shared at shutdown"),
    }
    tracing::info!("server stopped");
}

/// Waits up to `bound` for every task to end; whether they all did.
async fn ended(tasks: &mut JoinSet<()>, bound: Duration) -> bool {
    let all = async { while tasks.join_next().await.is_some() {} };
    match tokio::time::Instant::now().checked_add(bound) {
        Some(deadline) => tokio::time::timeout_at(deadline, all).await.is_ok(),
        None => {
            all.await;
            true
        }
    }
}

/// The one place the engine is closed, after every connection has ended
/// and no statement runs: what must outlive the sessions (the store's last
/// writes) is settled here. Dropping the last engine drops the store: the
/// embedded store's redb database closes (every commit was durable when
/// it was acknowledged), the Azure client's connections close.
async fn close_engine(engine: Engine) {
    // The workload statistics, stored a last time for every process over
    // the store; bounded, since a throttled or unreachable service would
    // otherwise hold the process past what a supervisor waits before
    // SIGKILL. A failure loses only this process's latest counts.
    match tokio::time::timeout(LAST_WORDS, engine.close()).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "the workload statistics could not be stored at shutdown");
        }
        Err(_) => tracing::warn!("storing the workload statistics at shutdown timed out"),
    }
    let store = engine.store().clone();
    drop(engine);
    // A scan's tasks may still hold the store for a moment after their
    // statement's stream was dropped; the database closes with the last.
    let deadline = tokio::time::Instant::now() + LAST_WORDS;
    while Arc::strong_count(&store) > 1 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let held = Arc::strong_count(&store) - 1;
    drop(store);
    if held > 0 {
        tracing::warn!(held, "the store is still held at shutdown");
    } else {
        tracing::debug!("store closed");
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::{Phase, Phases};
    use crate::server::{AuthMode, Server, ServerConfig};
    use crate::storage::{MemoryStore, TableStore};
    use tablesql_engine::{Engine, EngineOptions};

    #[test]
    fn each_connection_hears_the_phase_and_ended_ones_are_let_go() {
        let phases = Phases::default();
        let open = phases.subscribe();
        drop(phases.subscribe());
        phases.send(Phase::Draining);
        assert_eq!(*open.borrow(), Phase::Draining);
        // One that comes after the change starts at it.
        let late = phases.subscribe();
        assert_eq!(*late.borrow(), Phase::Draining);
        assert_eq!(
            phases.lock().1.len(),
            2,
            "the ended one's channel is dropped"
        );
        phases.send(Phase::Terminating);
        assert_eq!(
            (*open.borrow(), *late.borrow()),
            (Phase::Terminating, Phase::Terminating)
        );
    }

    /// Nothing the server installed keeps the engine's tables, and with
    /// them its store, alive once it has stopped: `pg_catalog`'s providers
    /// hold the catalogs that hold them weakly.
    #[tokio::test]
    async fn a_stopped_server_lets_its_store_go() -> Result<(), Box<dyn std::error::Error>> {
        let store: Arc<dyn TableStore> = Arc::new(MemoryStore::new());
        let weak = Arc::downgrade(&store);
        let engine = Engine::with_store(store, EngineOptions::default()).await?;
        engine
            .session()
            .collect("CREATE TABLE kept (k TEXT PRIMARY KEY, v INT)")
            .await?;
        let listen = "127.0.0.1:0".parse()?;
        let server = Server::bind(engine, ServerConfig::new(listen, AuthMode::Trust)).await?;
        server
            .run_until(std::future::ready(()), std::time::Duration::ZERO)
            .await?;
        assert!(weak.upgrade().is_none(), "the store outlived the server");
        Ok(())
    }
}
