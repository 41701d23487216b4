//! `tablesql serve`: its flags (each also from the environment), the
//! metrics endpoint, and stopping on SIGTERM, SIGINT or SIGHUP.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tablesql::server::{AuthMode, Server, ServerConfig, Users};
use tablesql::storage::TableStore;
use tablesql::storage::metered::MeteredStore;

/// The flags of `serve`.
#[derive(clap::Args)]
pub struct ServeArgs {
    /// Address to listen on (port 0 picks a free port; the bound address is printed).
    #[arg(long, env = "TABLESQL_LISTEN", default_value = "127.0.0.1:5433")]
    listen: SocketAddr,
    /// Users allowed in with SCRAM-SHA-256: a file of `NAME:PASSWORD` lines.
    /// Without users, only `trust` on a loopback address is allowed.
    #[arg(long, env = "TABLESQL_USERS_FILE")]
    users_file: Option<PathBuf>,
    /// A user as `NAME:PASSWORD` (repeatable). Prefer --users-file: a command line
    /// is visible to other local users.
    #[arg(long = "user", env = "TABLESQL_USER", hide_env_values = true)]
    users: Vec<String>,
    /// PEM certificate chain; with --tls-key, only TLS connections are accepted.
    #[arg(long, env = "TABLESQL_TLS_CERT", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(long, env = "TABLESQL_TLS_KEY", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Serve Prometheus metrics at http://ADDR/metrics (port 0 picks a
    /// free port; the bound address is printed after the listen line).
    #[arg(long, env = "TABLESQL_METRICS_LISTEN", value_name = "ADDR")]
    metrics_listen: Option<SocketAddr>,
    /// Log each statement that takes at least this many milliseconds,
    /// with its normalized text (PostgreSQL's log_min_duration_statement;
    /// 0 logs every statement). Off by default.
    #[arg(long, env = "TABLESQL_LOG_MIN_DURATION_STATEMENT", value_name = "MS")]
    log_min_duration_statement: Option<u64>,
    /// Connections served at once (PostgreSQL's max_connections); past it a
    /// client is refused at startup with 53300, "sorry, too many clients
    /// already", and the others keep their connections (past twice it, a
    /// connection is closed unread).
    #[arg(
        long,
        env = "TABLESQL_MAX_CONNECTIONS",
        value_name = "N",
        default_value_t = tablesql::server::DEFAULT_MAX_CONNECTIONS as u32,
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    max_connections: u32,
    /// The database names clients may connect to (repeat the flag, or
    /// separate them with commas); a client naming another is refused at
    /// startup with 3D000, "database ... does not exist". Without it every
    /// name is let in (psql without -d names the user's). The store is one
    /// database under each name: current_database() answers the one a
    /// client named, and three-part names may give it.
    #[arg(
        long = "database",
        env = "TABLESQL_DATABASES",
        value_name = "NAME",
        value_delimiter = ','
    )]
    databases: Vec<String>,
    /// On SIGTERM, SIGINT or SIGHUP, how long running statements get to
    /// finish before they are cancelled (clients are told 57P01). The
    /// default ends within `docker stop`'s 10 s, but for a statement inside
    /// a computation that does not yield (a join's hash table, built in one
    /// go), which is waited for so that its client hears why; a second
    /// signal cancels them at once, a third exits.
    #[arg(
        long,
        env = "TABLESQL_SHUTDOWN_TIMEOUT",
        value_name = "SECS",
        default_value_t = 8.0
    )]
    shutdown_timeout: f64,
}

/// Serves until SIGTERM, SIGINT or SIGHUP, then stops gracefully (see
/// `Server::run_until`); the engine is closed before this returns. The
/// exit code: 1 when a second signal cut the statements' grace short.
pub async fn serve(
    store: Arc<dyn TableStore>,
    options: tablesql::EngineOptions,
    args: ServeArgs,
    signals: Signals,
) -> anyhow::Result<u8> {
    let grace = Duration::try_from_secs_f64(args.shutdown_timeout)
        .map_err(|_| anyhow::anyhow!("--shutdown-timeout is a number of seconds"))?;
    let mut users = Users::default();
    if let Some(path) = &args.users_file {
        users.add_file(path)?;
        anyhow::ensure!(!users.is_empty(), "{} names no user", path.display());
    }
    for entry in &args.users {
        users.add_entry(entry)?;
    }
    // Only the salted secrets stay in memory.
    drop(args.users);
    let auth = if users.is_empty() {
        AuthMode::Trust
    } else {
        AuthMode::Scram(Arc::new(users))
    };
    let (store, counters) = MeteredStore::wrap(store);
    let engine = tablesql::Engine::with_store(store, options).await?;
    let mut config = ServerConfig::new(args.listen, auth.clone())
        .with_log_min_duration_statement(args.log_min_duration_statement.map(Duration::from_millis))
        .with_store_counters(counters)
        .with_max_connections(args.max_connections as usize)
        .with_databases(args.databases);
    let tls_on = args.tls_cert.is_some();
    if let Some((cert, key)) = args.tls_cert.zip(args.tls_key) {
        config = config.with_tls(cert, key);
    }
    let server = Server::bind(engine, config).await?;
    let addr = server.local_addr()?;
    let metrics = match args.metrics_listen {
        Some(at) => {
            let listener = tokio::net::TcpListener::bind(at)
                .await
                .map_err(|e| anyhow::anyhow!("cannot listen on {at} for metrics: {e}"))?;
            Some(listener)
        }
        None => None,
    };
    let how = match auth {
        AuthMode::Trust => "trust (loopback only)",
        AuthMode::Scram(_) => "SCRAM-SHA-256",
    };
    // Scripts and tests read the bound address from this first line (and
    // may close the pipe after it: later lines are written, never printed).
    let mut stdout = std::io::stdout();
    let _ = writeln!(stdout, "listening on {addr}").and_then(|_| stdout.flush());
    if let Some(listener) = metrics {
        let at = listener.local_addr()?;
        let _ = writeln!(stdout, "metrics on http://{at}/metrics").and_then(|_| stdout.flush());
        tracing::info!(%at, "serving metrics at /metrics");
        tokio::spawn(tablesql::server::serve_metrics(listener, server.metrics()));
    }
    tracing::info!(
        %addr,
        auth = how,
        tls = if tls_on { "required" } else { "off" },
        "listening"
    );
    server
        .run_until_hurried(signals.reached(1), signals.reached(2), grace)
        .await?;
    // Told twice: its statements were cut short.
    Ok(if signals.count() >= 2 { 1 } else { 0 })
}

/// SIGTERM (`docker stop`, `systemctl stop`), SIGINT (Ctrl-C) and SIGHUP
/// (its terminal closed; there is no configuration to reload; not when
/// started with it ignored, as under `nohup`), counted.
/// The first drains the server; a second, while it drains, cancels the
/// statements still running (57P01) and the store closes as ever, as an
/// operator who signals again means (every acknowledged commit is
/// already durable); a third exits at once, the store left to be repaired.
pub struct Signals(tokio::sync::watch::Receiver<u32>);

impl Signals {
    /// Counts them from now on (in the runtime).
    pub fn watch() -> anyhow::Result<Self> {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        let mut hup = if crate::ending::hangup_ignored() {
            None
        } else {
            Some(signal(SignalKind::hangup())?)
        };
        let (tx, rx) = tokio::sync::watch::channel(0);
        tokio::spawn(async move {
            loop {
                let name = tokio::select! {
                    _ = term.recv() => "SIGTERM",
                    _ = int.recv() => "SIGINT",
                    Some(_) = async { hup.as_mut()?.recv().await } => "SIGHUP",
                };
                let n = *tx.borrow() + 1;
                match n {
                    1 => tracing::info!("{name}: stopping"),
                    2 => tracing::warn!(
                        "{name}: a second signal: cancelling the statements still running"
                    ),
                    _ => {
                        tracing::warn!(
                            "{name}: a third signal: exiting at once (the store is repaired at its next open)"
                        );
                        std::process::exit(1);
                    }
                }
                tx.send_replace(n);
            }
        });
        Ok(Self(rx))
    }

    /// Resolves once `n` signals have come.
    fn reached(&self, n: u32) -> impl std::future::Future<Output = ()> + use<> {
        let mut rx = self.0.clone();
        async move {
            if rx.wait_for(|&got| got >= n).await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }

    fn count(&self) -> u32 {
        *self.0.borrow()
    }
}
