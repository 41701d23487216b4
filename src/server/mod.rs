//! The Postgres wire server: `tablesql serve`. psql, drivers and BI tools
//! talk to the engine as they would to PostgreSQL.
//!
//! Built on pgwire (the protocol), arrow-pg (Arrow rows to Postgres values)
//! and datafusion-pg-catalog (`pg_catalog` and the SQL that psql and BI tools
//! send), the parts datafusion-postgres is made of. The handlers are our own:
//! authentication, TLS policy, command tags, transactions, cursors, cancel
//! and timeouts are where that crate's defaults do not fit a store.

pub(crate) mod auth;
pub(crate) mod cancel;
pub(crate) mod command;
mod connection;
mod copy;
mod copying;
mod frames;
mod params;
mod pg_catalog;
pub(crate) mod plan;
pub(crate) mod session;
pub(crate) mod sqlstate;

/// The SQLSTATE the server answers an engine error with: what the shell
/// prints under `VERBOSITY verbose`, and what an embedder that answers
/// PostgreSQL clients of its own reports.
pub fn sqlstate(e: &crate::engine::EngineError) -> &'static str {
    sqlstate::engine_code(e)
}
mod stream;
pub(crate) mod tls;
mod vectors;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use pgwire::api::auth::StartupHandler;
use pgwire::api::cancel::CancelHandler;
use pgwire::api::query::{ExtendedQueryHandler, SimpleQueryHandler};
use pgwire::api::{PgWireServerHandlers, RandomPidSecretKeyGenerator};
use pgwire::tokio::TlsAcceptor;
use tokio::net::TcpListener;

pub use auth::{AuthMode, Users};
use cancel::Registry;
use plan::Runner;
use session::Session;
pub use sqlstate::engine_code;

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
}

impl ServerConfig {
    /// Listening on `listen`, letting in whom `auth` says, without TLS.
    pub fn new(listen: SocketAddr, auth: AuthMode) -> Self {
        Self {
            listen,
            auth,
            tls: None,
        }
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
}

struct Shared {
    engine: Engine,
    auth: AuthMode,
    tls: Option<TlsAcceptor>,
    registry: Arc<Registry>,
    pids: Arc<RandomPidSecretKeyGenerator>,
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
        Ok(Self {
            listener,
            shared: Arc::new(Shared {
                engine,
                auth: config.auth,
                tls,
                registry: Arc::new(Registry::default()),
                pids: Arc::new(RandomPidSecretKeyGenerator::default()),
            }),
        })
    }

    /// The address actually bound (port 0 picks a free port).
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Accepts connections until the task is dropped. Each connection runs
    /// on its own task with its own session; a client that disconnects
    /// drops its session, and with it any running statement's streams.
    pub async fn run(self) -> std::io::Result<()> {
        connection::install_panic_log();
        let mut next_id: u64 = 0;
        loop {
            let (socket, peer) = match self.listener.accept().await {
                Ok(s) => s,
                // Out of descriptors and the like: keep serving the others.
                Err(e) => {
                    eprintln!("tablesql serve: accept failed: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            };
            let probe = cancel::Probe::of(&socket);
            let handlers = Connection::new(&self.shared, probe);
            let tls = self.shared.tls.clone();
            next_id += 1;
            let id = next_id;
            tokio::spawn(async move {
                if let Err(e) = connection::serve(id, socket, tls, handlers).await {
                    eprintln!("tablesql serve: connection {id} from {peer}: {e}");
                }
            });
        }
    }
}

/// The handlers of one connection.
struct Connection {
    session: Arc<Session>,
    startup: Arc<auth::Startup>,
    registry: Arc<Registry>,
}

impl Connection {
    fn new(shared: &Shared, probe: Option<cancel::Probe>) -> Self {
        let runner = Runner::new(shared.engine.session());
        Self {
            session: Arc::new(Session::new(runner, shared.registry.clone(), probe)),
            startup: Arc::new(auth::Startup::new(
                &shared.auth,
                shared.tls.is_some(),
                shared.pids.clone(),
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
