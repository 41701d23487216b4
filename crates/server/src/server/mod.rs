//! The Postgres wire server: `tablesql serve`. psql, drivers and BI tools
//! talk to the engine as they would to PostgreSQL.
//!
//! Built on pgwire (the protocol), arrow-pg (Arrow rows to Postgres values)
//! and datafusion-pg-catalog (`pg_catalog` and the SQL that psql and BI tools
//! send), the parts datafusion-postgres is made of. The handlers are our own:
//! authentication, TLS policy, command tags, transactions, cursors, cancel
//! and timeouts are where that crate's defaults do not fit a store.
//!
//! - `connection`: one connection's loop, from its first byte; the panic log.
//! - `cores`: a single-threaded runtime per core; each connection is placed on
//!   one at accept, by the CPU its packets came in on, and follows its client
//!   to another between round trips.
//! - `frames`: the protocol's message layouts: every message checked whole
//!   before pgwire decodes it.
//! - `stream`: the checked byte stream, its output held to one send per round
//!   trip.
//! - `tls`: TLS from a PEM certificate chain and key, never a fallback to
//!   plaintext.
//! - `auth`: SCRAM-SHA-256, and `trust` on loopback only.
//! - `session`: the pgwire handlers of one connection: pgwire messages to
//!   `engine::Session` calls, outcomes to tags, rows, notices and SQLSTATEs;
//!   the client is told the session's transaction status and the parameters a
//!   SET changed.
//! - `plan`: `Runner`: binds a portal's values and starts the engine session's
//!   query or write under the statement's guard, then encodes rows.
//! - `row`: a prepared point read's row straight into a DataRow, and a prepared
//!   query's row descriptions, made once per plan.
//! - `batch`: a batch's rows as DataRows: text, integer and boolean columns
//!   written straight from their arrays, any other batch through arrow-pg.
//! - `params`: parameter types a driver must be told (`oid[]`).
//! - `vectors`: `int2vector` and `oidvector`: lists in a query, PostgreSQL's
//!   text on the wire.
//! - `command`: cursors, SHOW's row description, refusals.
//! - `copy`: `COPY ... TO STDOUT` and `COPY ... FROM STDIN` as CopyData
//!   messages, over `load::copy`.
//! - `copying`: the session's side of COPY: starting one, pgwire's copy-in
//!   messages.
//! - `cancel`: cancel requests, `statement_timeout`, the client-gone probe.
//! - `sqlstate`: ErrorResponses built from the engine's errors, each of which
//!   names its own SQLSTATE (codes in `crates/storage/src/sqlstate.rs`); only
//!   the wire's own codes are the server's.
//! - `pg_catalog`: what tools' catalog queries need beside
//!   datafusion-pg-catalog (keys and indexes, `pg_settings`, oid-reading
//!   functions), and the PostgreSQL client dialect the engine's parser applies
//!   (`pg_catalog::dialect`).
//! - `shutdown`: stopping the server: 57P03 to new connections, 57P01 to the
//!   others, then the engine closed.
//! - `metrics`: the server's metrics, in Prometheus' text format.
//! - `metrics_http`: `GET /metrics` over HTTP/1.1.
//! - `tap`: each CommandComplete and ErrorResponse counted as it is written.
//! - `timing`: each statement's time, into the metrics and the log
//!   (`log_min_duration_statement`).

pub(crate) mod auth;
mod batch;
#[doc(hidden)]
pub mod cancel;
pub(crate) mod command;
mod connection;
mod copy;
mod copying;
mod cores;
mod frames;
pub mod metrics;
mod metrics_http;
mod params;
mod pg_catalog;
#[doc(hidden)]
pub mod plan;
mod row;
pub(crate) mod session;
mod shutdown;
pub(crate) mod sqlstate;
mod tap;
mod timing;

mod stream;
pub(crate) mod tls;
mod vectors;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use pgwire::api::auth::StartupHandler;
use pgwire::api::cancel::CancelHandler;
use pgwire::api::query::{ExtendedQueryHandler, SimpleQueryHandler};
use pgwire::api::{PgWireServerHandlers, RandomPidSecretKeyGenerator};
use pgwire::tokio::TlsAcceptor;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

pub use auth::{AuthMode, Users};
use cancel::Registry;
use cores::Cores;
pub use metrics::Metrics;
use metrics::Refusal;
pub use metrics_http::serve_metrics;
use plan::Runner;
use session::Session;
use shutdown::Phase;

use crate::engine::Engine;

/// A failure to start the server.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerError {
    /// `trust` asked for on an address other machines can reach.
    #[error(
        "trust authentication is only allowed on a loopback address, not {0}: give users (--users-file or --user)"
    )]
    TrustNotLoopback(SocketAddr),
    /// The users list is malformed.
    #[error("users: {0}")]
    Users(String),
    /// The TLS certificate or key is unusable.
    #[error("TLS: {0}")]
    Tls(String),
    /// Only one of `--tls-cert` and `--tls-key` was given.
    #[error("TLS needs both a certificate and a key")]
    TlsIncomplete,
    /// pg_catalog could not be installed.
    #[error("pg_catalog: {0}")]
    Catalog(#[source] datafusion::error::DataFusionError),
    /// The listening socket.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// Why binding it failed.
        source: std::io::Error,
    },
    /// The connections' runtimes could not be started.
    #[error("cannot start the connections' threads: {0}")]
    Runtimes(#[source] std::io::Error),
}

/// How the server listens and whom it lets in.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ServerConfig {
    /// The address to listen on.
    pub listen: SocketAddr,
    /// How clients are authenticated.
    pub auth: AuthMode,
    /// PEM certificate chain and private key. With TLS configured, plaintext
    /// connections are refused.
    pub tls: Option<(PathBuf, PathBuf)>,
    /// Statements that take at least this long are logged with their
    /// normalized text (PostgreSQL's `log_min_duration_statement`).
    pub log_min_duration_statement: Option<Duration>,
    /// The store's request counters, for the metrics (the store the
    /// engine runs over, wrapped in `storage::metered::MeteredStore`).
    pub store_counters: Option<Arc<crate::storage::metered::StoreCounters>>,
    /// Connections served at once (PostgreSQL's `max_connections`); one
    /// more is told 53300 at startup and closed.
    pub max_connections: usize,
    /// The names a client may connect to: the store is one database,
    /// reached by each (`current_database()` answers the one connected
    /// to). Empty, the default, lets in every name, since psql without
    /// `-d` names the user's; otherwise another is refused at startup with
    /// 3D000.
    pub databases: Vec<String>,
}

/// PostgreSQL's default `max_connections`.
pub const DEFAULT_MAX_CONNECTIONS: usize = 100;

impl ServerConfig {
    /// Listening on `listen`, letting in whom `auth` says, without TLS.
    pub fn new(listen: SocketAddr, auth: AuthMode) -> Self {
        Self {
            listen,
            auth,
            tls: None,
            log_min_duration_statement: None,
            store_counters: None,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            databases: Vec::new(),
        }
    }

    /// Answering to `names` only as its databases (none: every name).
    pub fn with_databases(mut self, names: Vec<String>) -> Self {
        self.databases = names;
        self
    }

    /// Serving at most `n` connections at once (at least 1).
    pub fn with_max_connections(mut self, n: usize) -> Self {
        self.max_connections = n.max(1);
        self
    }

    /// Logging statements that take at least `at_least`.
    pub fn with_log_min_duration_statement(mut self, at_least: Option<Duration>) -> Self {
        self.log_min_duration_statement = at_least;
        self
    }

    /// Counting the store's requests by operation in the metrics.
    pub fn with_store_counters(
        mut self,
        counters: Arc<crate::storage::metered::StoreCounters>,
    ) -> Self {
        self.store_counters = Some(counters);
        self
    }

    /// With TLS from a PEM certificate chain and its private key.
    pub fn with_tls(mut self, cert: PathBuf, key: PathBuf) -> Self {
        self.tls = Some((cert, key));
        self
    }
}

/// A bound server, ready to accept.
pub struct Server {
    listener: TcpListener,
    shared: Arc<Shared>,
    cores: Cores,
}

struct Shared {
    engine: Engine,
    auth: AuthMode,
    tls: Option<TlsAcceptor>,
    registry: Arc<Registry>,
    pids: Arc<RandomPidSecretKeyGenerator>,
    metrics: Arc<Metrics>,
    slow: Option<Duration>,
    phase: shutdown::Phases,
    max_connections: usize,
    databases: Arc<[String]>,
    /// Connections admitted and not yet ended.
    open: Arc<AtomicUsize>,
    /// Connections past the cap still being told so (at most
    /// `max_connections` of them: past that a connection is closed unread).
    refusing: Arc<AtomicUsize>,
}

/// A place counted in one of `Shared`'s counters, given back when its
/// connection's task ends however it ends.
struct Place(Arc<AtomicUsize>);

impl Place {
    /// One more in `count`, unless it holds `cap` already.
    fn take(count: &Arc<AtomicUsize>, cap: usize) -> Option<Self> {
        count
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < cap).then_some(n + 1)
            })
            .ok()
            .map(|_| Place(count.clone()))
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// How an accepted connection is served.
enum Admission {
    /// Under `max_connections`: with a session of its own.
    Admitted(Connection),
    /// Past it: its startup message is answered 53300 (and a cancel
    /// request served, as PostgreSQL serves them when full); no session is
    /// made for it.
    Full(Arc<Registry>),
    /// Accepted while the server stops: answered 57P03 (a cancel request
    /// served), with no session.
    ShuttingDown(Arc<Registry>),
}

impl Shared {
    /// How to serve one more connection, with the place it holds; `None`
    /// when even the refusals are at their bound, so that a flood of
    /// connections costs the server no more than twice the cap's tasks.
    fn admit(&self, probe: Option<cancel::Probe>) -> Option<(Admission, Place)> {
        if self.phase.now() >= Phase::Draining {
            let place = Place::take(&self.refusing, self.max_connections.max(1))?;
            return Some((Admission::ShuttingDown(self.registry.clone()), place));
        }
        if let Some(place) = Place::take(&self.open, self.max_connections) {
            return Some((Admission::Admitted(Connection::new(self, probe)), place));
        }
        let place = Place::take(&self.refusing, self.max_connections.max(1))?;
        Some((Admission::Full(self.registry.clone()), place))
    }
}

impl Server {
    /// Checks the configuration, installs pg_catalog and binds. Every
    /// misconfiguration stops here, before a client can connect.
    pub async fn bind(engine: Engine, config: ServerConfig) -> Result<Self, ServerError> {
        config.auth.check(&config.listen)?;
        let tls = match &config.tls {
            Some((cert, key)) => Some(tls::acceptor(cert, key)?),
            None => None,
        };
        let engine = engine.with_dialect(Arc::new(pg_catalog::PgDialect::new()));
        pg_catalog::install(engine.context())
            .await
            .map_err(ServerError::Catalog)?;
        let listener =
            TcpListener::bind(config.listen)
                .await
                .map_err(|source| ServerError::Bind {
                    addr: config.listen,
                    source,
                })?;
        let metrics = Arc::new(Metrics::new(engine.store().clone(), config.store_counters));
        let cores = Cores::start(crate::engine::THREAD_STACK)
            .await
            .map_err(ServerError::Runtimes)?;
        Ok(Self {
            listener,
            cores,
            shared: Arc::new(Shared {
                engine,
                auth: config.auth,
                tls,
                registry: Arc::new(Registry::default()),
                pids: Arc::new(RandomPidSecretKeyGenerator::default()),
                metrics,
                slow: config.log_min_duration_statement,
                phase: shutdown::Phases::default(),
                max_connections: config.max_connections,
                databases: config.databases.into(),
                open: Arc::default(),
                refusing: Arc::default(),
            }),
        })
    }

    /// The server's metrics (see `serve_metrics`).
    pub fn metrics(&self) -> Arc<Metrics> {
        self.shared.metrics.clone()
    }

    /// The address actually bound (port 0 picks a free port).
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Accepts connections until the task is dropped. Each connection runs
    /// on its own task with its own session; a client that disconnects
    /// drops its session, and with it any running statement's streams.
    pub async fn run(self) -> std::io::Result<()> {
        self.run_until(std::future::pending(), Duration::MAX).await
    }

    /// Accepts connections until `shutdown` resolves, then stops: a
    /// connection at rest (between statements) is told 57P01 and closed at
    /// once, a running statement gets `grace` to finish (its connection
    /// then closes the same way) and past it is cancelled with 57P01; a
    /// connection made meanwhile is told 57P03 at its startup. Returns once
    /// every connection has ended and the engine is closed
    /// (`shutdown::close_engine`).
    pub async fn run_until(
        self,
        shutdown: impl std::future::Future<Output = ()>,
        grace: Duration,
    ) -> std::io::Result<()> {
        self.run_until_hurried(shutdown, std::future::pending(), grace)
            .await
    }

    /// As [`Server::run_until`]; and `hurry` (a second SIGTERM, say),
    /// should it resolve while running statements have their grace, ends
    /// the grace there: they are cancelled with 57P01 at once.
    pub async fn run_until_hurried(
        self,
        shutdown: impl std::future::Future<Output = ()>,
        hurry: impl std::future::Future<Output = ()>,
        grace: Duration,
    ) -> std::io::Result<()> {
        connection::install_panic_log();
        let Server {
            listener,
            shared,
            cores,
        } = self;
        let mut acceptor = Acceptor {
            listener,
            shared,
            cores,
            next_id: 0,
        };
        let mut tasks = JoinSet::new();
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                () = &mut shutdown => break,
                // Reaps the connections that ended.
                Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
                accepted = acceptor.listener.accept() => acceptor.serve(accepted, &mut tasks).await,
            }
        }
        let refused = shutdown::drain(&mut acceptor, &mut tasks, grace, hurry).await;
        shutdown::end(acceptor, refused).await;
        Ok(())
    }
}

/// What accepts connections, and serves them on the connections' runtimes.
struct Acceptor {
    listener: TcpListener,
    shared: Arc<Shared>,
    cores: Cores,
    /// The last connection's number, for the log.
    next_id: u64,
}

impl Acceptor {
    /// Serves an accepted connection on a task of `tasks`.
    async fn serve(
        &mut self,
        accepted: std::io::Result<(TcpStream, SocketAddr)>,
        tasks: &mut JoinSet<()>,
    ) {
        self.next_id += 1;
        accept(accepted, self.next_id, &self.shared, &self.cores, tasks).await;
    }
}

/// Serves an accepted connection on a task of `tasks`, on the runtime of
/// its client's CPU (`cores`): admitted, refused (full, or the server
/// stopping), or, past the refusals' bound, closed unread.
async fn accept(
    accepted: std::io::Result<(TcpStream, SocketAddr)>,
    id: u64,
    shared: &Arc<Shared>,
    cores: &Cores,
    tasks: &mut JoinSet<()>,
) {
    let (socket, peer) = match accepted {
        Ok(s) => s,
        // Out of descriptors and the like: keep serving the others.
        Err(e) => {
            tracing::warn!(error = %e, "accept failed");
            tokio::time::sleep(Duration::from_millis(50)).await;
            return;
        }
    };
    let probe = cancel::Probe::of(&socket);
    let Some((admission, place)) = shared.admit(probe) else {
        shared.metrics.connection_refused(Refusal::Flood);
        tracing::debug!(connection = id, %peer, "closed unread: too many refused already");
        return;
    };
    let tls = shared.tls.clone();
    let metrics = shared.metrics.clone();
    let stop = shared.phase.subscribe();
    let slow = shared.slow;
    let (core, seat) = cores.place(&socket);
    // Its core's reactor must own the socket.
    let socket = match socket.into_std() {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(connection = id, %peer, error = %e, "cannot hand the connection over");
            return;
        }
    };
    tasks.spawn_on(
        async move {
            let _place = place;
            let socket = match TcpStream::from_std(socket) {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(connection = id, %peer, error = %e, "cannot serve the connection");
                    return;
                }
            };
            // A refused connection is no client's session: it counts
            // apart, and leaves the open connections' gauge alone.
            let admitted = matches!(admission, Admission::Admitted(_));
            let _open = match &admission {
                Admission::Admitted(_) => metrics.connection_opened(),
                Admission::Full(_) => {
                    metrics.connection_refused(Refusal::Full);
                    metrics.refusing()
                }
                Admission::ShuttingDown(_) => {
                    metrics.connection_refused(Refusal::ShuttingDown);
                    metrics.refusing()
                }
            };
            tracing::debug!(connection = id, %peer, admitted, "connection opened");
            let context = connection::Context {
                id,
                peer,
                metrics: metrics.clone(),
                stop,
                slow,
                seat,
            };
            if let Err(e) = connection::serve(context, socket, tls, admission).await {
                tracing::info!(connection = id, %peer, error = %e, "connection failed");
            }
        },
        core,
    );
}

/// The handlers of one connection.
struct Connection {
    session: Arc<Session>,
    startup: Arc<auth::Startup>,
    registry: Arc<Registry>,
}

impl Connection {
    fn new(shared: &Shared, probe: Option<cancel::Probe>) -> Self {
        let session = shared.engine.session();
        let runner = Runner::new(session.clone());
        Self {
            session: Arc::new(Session::new(runner, shared.registry.clone(), probe)),
            startup: Arc::new(auth::Startup::new(
                &shared.auth,
                shared.tls.is_some(),
                shared.pids.clone(),
                shared.databases.clone(),
                session,
            )),
            registry: shared.registry.clone(),
        }
    }
}

impl PgWireServerHandlers for Connection {
    fn simple_query_handler(&self) -> Arc<impl SimpleQueryHandler> {
        self.session.clone()
    }

    fn extended_query_handler(&self) -> Arc<impl ExtendedQueryHandler> {
        self.session.clone()
    }

    fn startup_handler(&self) -> Arc<impl StartupHandler> {
        self.startup.clone()
    }

    fn cancel_handler(&self) -> Arc<impl CancelHandler> {
        self.registry.clone()
    }

    fn copy_handler(&self) -> Arc<impl pgwire::api::copy::CopyHandler> {
        self.session.clone()
    }
}
