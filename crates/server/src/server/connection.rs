//! One connection, from its first byte: pgwire negotiates TLS, then every
//! message the client sends is checked whole (`frames`) before pgwire
//! decodes it, and pgwire's handlers answer it. A message that breaks the
//! protocol answers `08P01` and closes the connection; a panic in the
//! connection's task, should one still happen, is caught and logged in one
//! line with the connection's number, never with a backtrace.

use std::io::{self, Write};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::{FutureExt, SinkExt, StreamExt};
use pgwire::api::cancel::CancelHandler;
use pgwire::api::{ClientInfo, PgWireConnectionState, PgWireServerHandlers};
use pgwire::error::{ErrorInfo, PgWireError};
use pgwire::messages::PgWireBackendMessage;
use pgwire::messages::PgWireFrontendMessage;
use pgwire::messages::response::TransactionStatus;
use pgwire::tokio::TlsAcceptor;
use pgwire::tokio::server::{MaybeTls, negotiate_tls, process_error, process_message};
use tokio::net::TcpStream;
use tokio::runtime::Handle;
use tokio::sync::watch;
use tokio_util::codec::{Framed, FramedParts};
use tokio_util::task::AbortOnDropHandle;

use super::cancel::Canceller;
use super::cores::Seat;
use super::frames::Violation;
use super::metrics::Metrics;
use super::plan::Stmt;
use super::shutdown::{LAST_WORDS, Phase, reached, terminated};
use super::sqlstate::{CANNOT_CONNECT_NOW, TOO_MANY_CONNECTIONS};
use super::stream::Guarded;
use super::tap::Tap;
use super::timing::Timing;
use super::{Admission, Connection, Registry};

/// How long a client may take to start up and authenticate (PostgreSQL's
/// `authentication_timeout`).
const STARTUP: std::time::Duration = std::time::Duration::from_secs(60);

/// How long a connection past `max_connections` may take to send its
/// startup message: it holds one of a bounded number of places meanwhile.
const TURN_AWAY: std::time::Duration = std::time::Duration::from_secs(5);

tokio::task_local! {
    /// The number of the connection a task serves, for the panic log.
    static CONNECTION: u64;
}

/// What a connection's task knows of the server.
pub(super) struct Context {
    /// The connection's number, for the log.
    pub id: u64,
    pub peer: std::net::SocketAddr,
    pub metrics: Arc<Metrics>,
    /// The server's stopping (`shutdown`).
    pub stop: watch::Receiver<Phase>,
    /// `log_min_duration_statement`.
    pub slow: Option<Duration>,
    /// Its runtime, which it leaves to follow its client (`cores`).
    pub seat: Seat,
}

/// Serves a connection until the client leaves, breaks the protocol, the
/// connection fails or the server stops; a panic ends it like a failure.
pub(super) async fn serve(
    context: Context,
    tcp: TcpStream,
    tls: Option<TlsAcceptor>,
    admission: Admission,
) -> io::Result<()> {
    let id = context.id;
    let run = CONNECTION.scope(id, run(context, tcp, tls, admission));
    match std::panic::AssertUnwindSafe(run).catch_unwind().await {
        Ok(result) => result,
        // The panic hook (`install_panic_log`) has logged it.
        Err(_) => Ok(()),
    }
}

/// Logs a panic in a connection's task in one line, with the connection's
/// number, instead of the default message and backtrace that any client
/// could make the server print. Panics elsewhere go to the hook that was
/// there before (the process's, or the test harness's).
pub(super) fn install_panic_log() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let Ok(id) = CONNECTION.try_with(|id| *id) else {
                previous(info);
                return;
            };
            let what = info
                .payload()
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| info.payload().downcast_ref::<String>().cloned())
                .unwrap_or_default();
            let at = info
                .location()
                .map(|l| format!(" at {}:{}", l.file(), l.line()))
                .unwrap_or_default();
            // One line whatever the message holds; a log that cannot be
            // written must not panic inside the hook.
            let _ = writeln!(
                std::io::stderr(),
                "tablesql serve: connection {id}: internal error{at}: {what:?}"
            );
        }));
    });
}

type Socket = Framed<
    Guarded<pgwire::tokio::server::MaybeTls>,
    pgwire::tokio::server::PgWireMessageServerCodec<Stmt>,
>;

async fn run(
    context: Context,
    tcp: TcpStream,
    tls: Option<TlsAcceptor>,
    admission: Admission,
) -> io::Result<()> {
    let deadline = tokio::time::sleep(match admission {
        Admission::Admitted(_) => STARTUP,
        Admission::Full(_) | Admission::ShuttingDown(_) => TURN_AWAY,
    });
    tokio::pin!(deadline);
    // Until its client's first bytes come, a connection the server ends is
    // told why at once: an admitted one when the server starts to stop
    // (57P01), a refused one when it stops waiting for it (57P03). A
    // client reads it in answer to its startup (or its TLS request) as it
    // would after it; closed unread, it would see the socket close unsaid.
    let (ends_at, why) = match admission {
        Admission::Admitted(_) => (Phase::Draining, terminated()),
        Admission::Full(_) => (Phase::Draining, Refusal::ShuttingDown.error()),
        Admission::ShuttingDown(_) => (Phase::Terminating, Refusal::ShuttingDown.error()),
    };
    let mut ending = context.stop.clone();
    tokio::select! {
        // An admitted client silent past the startup bound is closed, as
        // PostgreSQL's authentication_timeout closes it; a refused one is
        // told its refusal, which it came to hear.
        _ = &mut deadline => return match admission {
            Admission::Admitted(_) => Ok(()),
            Admission::Full(_) => say_unread(tcp, Refusal::Full.error(), &context).await,
            Admission::ShuttingDown(_) => say_unread(tcp, why, &context).await,
        },
        ready = tcp.readable() => ready?,
        () = reached(&mut ending, ends_at) => return say_unread(tcp, why, &context).await,
    }
    let mut hard_stop = context.stop.clone();
    let negotiated = tokio::select! {
        _ = &mut deadline => return Ok(()),
        () = reached(&mut hard_stop, Phase::Terminating) => return Ok(()),
        socket = negotiate_tls::<Stmt>(tcp, tls) => socket?,
    };
    // A client that asked for TLS directly from a server without it.
    let Some(socket) = negotiated else {
        return Ok(());
    };
    // Bytes read during the negotiation go through the checks too; but
    // bytes sent in plaintext before a TLS handshake are not the client's
    // over TLS (CVE-2021-23214).
    let parts = socket.into_parts();
    let early =
        matches!(parts.io, pgwire::tokio::server::MaybeTls::Tls(_)) && !parts.read_buf.is_empty();
    let violation =
        early.then(|| Violation("received unencrypted data after the TLS request".into()));
    let guarded = Guarded::new(parts.io, parts.read_buf, violation)
        .with_tap(Tap::new(context.metrics.clone()));
    let mut new_parts = FramedParts::new(guarded, parts.codec);
    new_parts.write_buf = parts.write_buf;
    let mut socket: Socket = Framed::from_parts(new_parts);
    socket.set_state(PgWireConnectionState::AwaitingStartup);
    let handlers = match admission {
        Admission::Admitted(handlers) => handlers,
        // Refused as full, and the server starts to stop: it is told so
        // now, not kept until its startup comes (the drain waits for it).
        Admission::Full(registry) => {
            let mut draining = context.stop.clone();
            let served = tokio::select! {
                r = turn_away(&mut socket, deadline, registry, Refusal::Full, &context.metrics) => r,
                () = reached(&mut draining, Phase::Draining) => say(&mut socket, Refusal::ShuttingDown.error()).await,
            };
            return close(socket, &context, served).await;
        }
        Admission::ShuttingDown(registry) => {
            let refusal = Refusal::ShuttingDown;
            let served = tokio::select! {
                r = turn_away(&mut socket, deadline, registry, refusal, &context.metrics) => r,
                () = reached(&mut hard_stop, Phase::Terminating) => say(&mut socket, refusal.error()).await,
            };
            return close(socket, &context, served).await;
        }
    };
    // This task stays where it was spawned (the server's shutdown waits
    // for it); a connection that moves answers in a task on the runtime it
    // moved to, which gives it back here when it moves again or ends.
    let id = context.id;
    let mut step = converse(socket, deadline, handlers, context).await;
    loop {
        let moving = match step {
            Step::Ended(served) => return served,
            Step::Moving(moving) => moving,
        };
        let resumed = moving.to.clone().spawn(CONNECTION.scope(
            id,
            std::panic::AssertUnwindSafe(moving.resume()).catch_unwind(),
        ));
        step = match AbortOnDropHandle::new(resumed).await {
            Ok(Ok(step)) => step,
            // The panic hook (`install_panic_log`) has logged it.
            Ok(Err(_)) => return Ok(()),
            Err(e) => return Err(io::Error::other(e)),
        };
    }
}

/// Where a connection's answering stopped: it ended, or it moves.
enum Step {
    Ended(io::Result<()>),
    Moving(Box<Moving>),
}

/// Answers a logged-in connection on this runtime until it ends, or until
/// its client sends from another runtime's CPU (`Seat::follow`).
async fn converse(
    mut socket: Socket,
    deadline: Pin<&mut tokio::time::Sleep>,
    handlers: Connection,
    mut context: Context,
) -> Step {
    // Past the shutdown's bound the statement is dropped where it is: a
    // write's entity group transaction is one request, sent whole or not
    // at all, and the embedded store commits on a thread of its own.
    let mut hard_stop = context.stop.clone();
    let answered = tokio::select! {
        r = answer(&mut socket, deadline, &handlers, &mut context) => r,
        () = reached(&mut hard_stop, Phase::Terminating) => say_terminated(&mut socket).await.map(|()| None),
    };
    match answered {
        Ok(Some(to)) => {
            context.metrics.connection_moved();
            match Moving::take(socket, handlers, context, to) {
                Ok(moving) => Step::Moving(Box::new(moving)),
                Err(e) => Step::Ended(Err(e)),
            }
        }
        served => Step::Ended(close(socket, &context, served.map(drop)).await),
    }
}

/// A connection between two runtimes: its socket out of the reactor of
/// the one it leaves, with the bytes read and written that it holds.
struct Moving {
    io: Guarded<std::net::TcpStream>,
    codec: pgwire::tokio::server::PgWireMessageServerCodec<Stmt>,
    read_buf: bytes::BytesMut,
    write_buf: bytes::BytesMut,
    handlers: Connection,
    context: Context,
    to: Handle,
}

impl Moving {
    /// Takes a plain TCP connection out of this runtime's reactor (the only
    /// kind `answer` moves).
    fn take(
        socket: Socket,
        handlers: Connection,
        context: Context,
        to: Handle,
    ) -> io::Result<Self> {
        let parts = socket.into_parts();
        let io = parts.io.try_map(|stream| match stream {
            MaybeTls::Plain(tcp) => tcp.into_std(),
            _ => Err(io::Error::other("only a plain TCP connection moves")),
        })?;
        Ok(Self {
            io,
            codec: parts.codec,
            read_buf: parts.read_buf,
            write_buf: parts.write_buf,
            handlers,
            context,
            to,
        })
    }

    /// On the runtime it moved to: the socket in this runtime's reactor,
    /// and on answering.
    async fn resume(self) -> Step {
        let io = match self
            .io
            .try_map(|std| TcpStream::from_std(std).map(MaybeTls::Plain))
        {
            Ok(io) => io,
            Err(e) => return Step::Ended(Err(e)),
        };
        let mut parts = FramedParts::new(io, self.codec);
        parts.read_buf = self.read_buf;
        parts.write_buf = self.write_buf;
        // Logged in long ago: the startup's deadline is not armed.
        let deadline = tokio::time::sleep(STARTUP);
        tokio::pin!(deadline);
        converse(
            Framed::from_parts(parts),
            deadline,
            self.handlers,
            self.context,
        )
        .await
    }
}

/// Sends what the last message answered (a FATAL error) so that the
/// client reads it before the end (`Guarded::finish`), and logs the end;
/// the client may be gone, or not reading.
async fn close(mut socket: Socket, context: &Context, served: io::Result<()>) -> io::Result<()> {
    socket.get_mut().release(true);
    let finish = async {
        socket.flush().await?;
        socket.get_mut().finish().await
    };
    let _ = tokio::time::timeout(LAST_WORDS, finish).await;
    let user = socket.metadata().get("user").cloned().unwrap_or_default();
    tracing::debug!(connection = context.id, peer = %context.peer, user, "connection closed");
    served
}

/// Tells the client the server ends its connection (57P01); the caller
/// closes it (`close`, which sees that the client reads it).
async fn say_terminated(socket: &mut Socket) -> io::Result<()> {
    say(socket, terminated()).await
}

/// Sends `error`, a FATAL one; the caller closes the connection.
async fn say(socket: &mut Socket, error: ErrorInfo) -> io::Result<()> {
    socket.get_mut().release(true);
    let send = socket.send(PgWireBackendMessage::ErrorResponse(error.into()));
    let _ = tokio::time::timeout(LAST_WORDS, send).await;
    Ok(())
}

/// Ends a connection whose client has sent nothing yet with `error`, sent
/// as it would answer the client's startup, and read before the end.
async fn say_unread(tcp: TcpStream, error: ErrorInfo, context: &Context) -> io::Result<()> {
    use tokio::io::AsyncWriteExt;
    let mut bytes = bytes::BytesMut::new();
    PgWireBackendMessage::ErrorResponse(error.into())
        .encode(&mut bytes)
        .map_err(io::Error::other)?;
    let mut stream = Guarded::new(tcp, bytes::BytesMut::new(), None);
    let last_words = async {
        stream.write_all(&bytes).await?;
        stream.finish().await
    };
    let _ = tokio::time::timeout(LAST_WORDS, last_words).await;
    tracing::debug!(connection = context.id, peer = %context.peer, "connection closed before its startup");
    Ok(())
}

/// Why a connection is refused at startup.
#[derive(Debug, Clone, Copy)]
enum Refusal {
    /// Past `max_connections`.
    Full,
    /// Accepted while the server stops.
    ShuttingDown,
}

impl Refusal {
    /// PostgreSQL's words, which clients and poolers know.
    fn error(self) -> ErrorInfo {
        let (code, message) = match self {
            Refusal::Full => (TOO_MANY_CONNECTIONS, "sorry, too many clients already"),
            Refusal::ShuttingDown => (CANNOT_CONNECT_NOW, "the database system is shutting down"),
        };
        ErrorInfo::new("FATAL".to_owned(), code.to_owned(), message.to_owned())
    }
}

/// A connection refused at startup: its startup message is answered with
/// the refusal (53300 when full, 57P03 while the server stops), and a
/// cancel request is served (a client may cancel its statement while the
/// server waits for it to finish); nothing else is read.
async fn turn_away(
    socket: &mut Socket,
    deadline: Pin<&mut tokio::time::Sleep>,
    registry: Arc<Registry>,
    refusal: Refusal,
    metrics: &Metrics,
) -> io::Result<()> {
    let next = tokio::select! {
        _ = deadline => return Ok(()),
        m = socket.next() => m,
    };
    match next {
        Some(Ok(PgWireFrontendMessage::CancelRequest(cancel))) => {
            registry.on_cancel_request(cancel).await;
            metrics.cancel_served();
        }
        Some(Ok(PgWireFrontendMessage::Startup(_))) => say(socket, refusal.error()).await?,
        _ => {}
    }
    Ok(())
}

/// Reads and answers messages until the connection ends, or, between
/// round trips at rest, until its client sends from another runtime's CPU:
/// then the runtime it moves to (its seat is already there). Answers are
/// held back while more messages are already read (`stream`).
async fn answer(
    socket: &mut Socket,
    mut deadline: Pin<&mut tokio::time::Sleep>,
    handlers: &Connection,
    context: &mut Context,
) -> io::Result<Option<Handle>> {
    // The handlers' own types: pgwire's trait hides the statement type
    // that its message loop needs to name.
    let startup = handlers.startup.clone();
    let simple = handlers.session.clone();
    let extended = handlers.session.clone();
    let copy = handlers.copy_handler();
    let cancel = Arc::new(Canceller(handlers.registry.clone()));
    let mut timing = Timing::default();
    // Between round trips, with nothing begun: where a stopping server
    // may end the connection without cutting a statement short.
    let mut at_rest = true;
    let mut in_exchange = false;
    // The statement running, timed, and the count of running statements
    // it holds (given back should the connection be dropped mid-statement).
    let mut statement = None;
    let mut running = context.metrics.running_statements();
    // Made once: each one made anew registers with the server's shared
    // watch, a lock and a waiter list that every connection's every
    // message would contend for.
    let draining = reached(&mut context.stop, Phase::Draining);
    tokio::pin!(draining);
    loop {
        let starting = matches!(
            socket.state(),
            PgWireConnectionState::AwaitingStartup
                | PgWireConnectionState::AuthenticationInProgress
        );
        let nothing_read = !socket.get_ref().has_message() && socket.read_buffer().is_empty();
        if nothing_read {
            send_held(socket).await?;
            if at_rest
                && !starting
                && let MaybeTls::Plain(tcp) = socket.get_ref().inner()
                && let Some(to) = context.seat.follow(tcp)
            {
                return Ok(Some(to));
            }
        }
        let idle = nothing_read && (starting || at_rest);
        let next = tokio::select! {
            _ = &mut deadline, if starting => None,
            () = &mut draining, if idle => {
                return say_terminated(socket).await.map(|()| None);
            }
            m = socket.next() => m,
        };
        let message = match next {
            Some(Ok(m)) => m,
            Some(Err(_)) if socket.get_ref().violation.is_some() => {
                let violation = socket.get_ref().violation.clone().unwrap_or_default();
                return refuse(socket, &violation).await.map(|()| None);
            }
            Some(Err(e)) => return Err(io::Error::other(e.to_string())),
            None => return Ok(None),
        };
        // The client leaves: close, as PostgreSQL does.
        if matches!(message, PgWireFrontendMessage::Terminate(_)) {
            return Ok(None);
        }
        let cancel_request = matches!(message, PgWireFrontendMessage::CancelRequest(_));
        // Where PostgreSQL flushes: the end of a round trip is sent even
        // while more pipelined messages wait.
        let round_trip = matches!(
            message,
            PgWireFrontendMessage::Sync(_)
                | PgWireFrontendMessage::Query(_)
                | PgWireFrontendMessage::Flush(_)
                | PgWireFrontendMessage::CopyDone(_)
                | PgWireFrontendMessage::CopyFail(_)
        );
        let extended_query = match socket.state() {
            PgWireConnectionState::CopyInProgress(extended) => extended,
            _ => message.is_extended_query(),
        };
        if let Some(timed) = timing.message(&message) {
            statement = Some(timed);
            running.start();
        }
        // An extended-protocol exchange lasts until its Sync.
        match message {
            PgWireFrontendMessage::Sync(_) => in_exchange = false,
            PgWireFrontendMessage::Parse(_)
            | PgWireFrontendMessage::Bind(_)
            | PgWireFrontendMessage::Describe(_)
            | PgWireFrontendMessage::Execute(_)
            | PgWireFrontendMessage::Close(_)
            | PgWireFrontendMessage::Flush(_) => in_exchange = true,
            _ => {}
        }
        if let Err(e) = process_message(
            message,
            socket,
            startup.clone(),
            simple.clone(),
            extended.clone(),
            copy.clone(),
            cancel.clone(),
        )
        .await
        {
            // After a FATAL error (a failed login, TLS required) nothing the
            // client sends is read: pgwire's own loop went on reading.
            // Any error fails the session's open block, and the status the
            // client is told is the session's.
            simple.statement_failed();
            socket.set_transaction_status(simple.wire_status());
            let info = ErrorInfo::from(e);
            let fatal = info.is_fatal();
            process_error(
                socket,
                PgWireError::UserError(Box::new(info)),
                extended_query,
            )
            .await?;
            if fatal {
                return Ok(None);
            }
        }
        if round_trip {
            send_held(socket).await?;
        }
        // A COPY FROM STDIN runs until its data ends.
        let copying = matches!(socket.state(), PgWireConnectionState::CopyInProgress(_));
        if !copying && let Some(timed) = statement.take() {
            running.end();
            let took = timed.done(context.id, context.slow, simple.runner());
            context.metrics.statement_took(took);
        }
        // A session inside a transaction block is not at rest: its COMMIT
        // may be on the way, and gets the shutdown's grace like a statement.
        at_rest = !in_exchange
            && matches!(socket.state(), PgWireConnectionState::ReadyForQuery)
            && matches!(simple.wire_status(), TransactionStatus::Idle);
        // The extended protocol's Sync, and a COPY's end, report this
        // status (pgwire's own would keep a block failed after `ROLLBACK TO`).
        socket.set_transaction_status(simple.wire_status());
        // A cancel request is all its connection carries.
        if cancel_request {
            context.metrics.cancel_served();
            return Ok(None);
        }
        // Logged in: messages may now be long.
        if matches!(socket.state(), PgWireConnectionState::ReadyForQuery)
            && !socket.get_ref().logged_in
        {
            socket.get_mut().logged_in = true;
            let user = socket.metadata().get("user").map(String::as_str);
            tracing::debug!(connection = context.id, peer = %context.peer, user, "logged in");
        }
    }
}

/// Sends what the stream holds, then holds again.
async fn send_held(socket: &mut Socket) -> io::Result<()> {
    socket.get_mut().release(true);
    socket.flush().await?;
    socket.get_mut().release(false);
    Ok(())
}

/// Answers a protocol violation with a FATAL `08P01`, and ends the connection.
async fn refuse(socket: &mut Socket, violation: &Violation) -> io::Result<()> {
    let error = ErrorInfo::new(
        "FATAL".to_owned(),
        super::sqlstate::PROTOCOL_VIOLATION.to_owned(),
        format!("protocol violation: {violation}"),
    );
    // The client may be gone, or not reading; the connection ends either way.
    socket.get_mut().release(true);
    let send = socket.send(PgWireBackendMessage::ErrorResponse(error.into()));
    let _ = tokio::time::timeout(LAST_WORDS, send).await;
    Ok(())
}
