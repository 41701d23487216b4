//! How the process ends: with its command's exit code, or on a signal,
//! and in both cases with its store closed.
//!
//! A store left open is repaired at the next open, in time and memory
//! that grow with the file (`storage::embedded::open`): a command that
//! called `std::process::exit` with the engine still held, or that the
//! default handler of SIGTERM killed, cost the next process 0.46 s and
//! 453 MB on a 500,000-registration store. So no command exits from where
//! it runs: it returns its code, every task ends with the runtime, and only
//! then does `main` exit, after checking that the store was let go.
//! SIGTERM, SIGHUP and SIGINT end a command the same way: its work is
//! dropped where it is (a write is one transaction, landed or not), the
//! store closes, and the exit code is the shell's `128 + signal`.

use std::cell::OnceCell;
use std::sync::Weak;

use tablesql::storage::TableStore;
use tokio::signal::unix::{Signal, SignalKind, signal};

/// An end of the process whose message, if it has one, is printed: the
/// process exits with this code.
#[derive(Debug)]
pub struct Exit(pub u8);

impl std::fmt::Display for Exit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "exit code {}", self.0)
    }
}

impl std::error::Error for Exit {}

/// The exit code of a command's end: its own, or 1 for an error, printed
/// as psql prints one of its own (one line with its causes).
pub fn code(ended: anyhow::Result<u8>) -> u8 {
    match ended {
        Ok(code) => code,
        Err(e) => match e.downcast_ref::<Exit>() {
            Some(Exit(code)) => *code,
            None => {
                eprintln!("tablesql: error: {e:#}");
                1
            }
        },
    }
}

/// Which signals end a command here rather than where it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Watch {
    /// None: the command has no store (`completions`), or stops on its
    /// own signals (`serve` drains its connections).
    Nothing,
    /// SIGTERM and SIGHUP: Ctrl-C belongs to the command (the interactive
    /// shell cancels a statement with it, `stress` removes its test table).
    TermAndHup,
    /// SIGTERM, SIGHUP and SIGINT.
    All,
}

/// A signal that ended a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stopped {
    Term,
    Hup,
    Int,
}

impl Stopped {
    /// The shell's exit code for a process a signal ended.
    pub fn code(self) -> u8 {
        128 + match self {
            Stopped::Hup => 1,
            Stopped::Int => 2,
            Stopped::Term => 15,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Stopped::Term => "SIGTERM",
            Stopped::Hup => "SIGHUP",
            Stopped::Int => "SIGINT",
        }
    }
}

/// The signals `watch` names, listened to from now on (in the runtime).
pub struct Signals {
    term: Option<Signal>,
    hup: Option<Signal>,
    int: Option<Signal>,
}

impl Signals {
    pub fn listen(watch: Watch) -> std::io::Result<Self> {
        let on = |kind| signal(kind).map(Some);
        let hup = || {
            if hangup_ignored() {
                Ok(None)
            } else {
                on(SignalKind::hangup())
            }
        };
        Ok(match watch {
            Watch::Nothing => Self {
                term: None,
                hup: None,
                int: None,
            },
            Watch::TermAndHup => Self {
                term: on(SignalKind::terminate())?,
                hup: hup()?,
                int: None,
            },
            Watch::All => Self {
                term: on(SignalKind::terminate())?,
                hup: hup()?,
                int: on(SignalKind::interrupt())?,
            },
        })
    }

    /// The first of them to come; never, when none is listened to.
    pub async fn first(&mut self) -> Stopped {
        async fn next(s: &mut Option<Signal>) {
            match s {
                Some(s) => {
                    s.recv().await;
                }
                None => std::future::pending().await,
            }
        }
        tokio::select! {
            () = next(&mut self.term) => Stopped::Term,
            () = next(&mut self.hup) => Stopped::Hup,
            () = next(&mut self.int) => Stopped::Int,
        }
    }
}

/// Whether the process was started with SIGHUP ignored (`nohup`, a
/// service manager): then it is not listened to, since listening would
/// replace the ignoring and end the command at its terminal's close, which
/// `nohup` asked not to. Read once, before the first listener replaces it,
/// from the kernel's mask of ignored signals (Linux, as the server).
pub fn hangup_ignored() -> bool {
    static IGNORED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *IGNORED.get_or_init(|| {
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix("SigIgn:"))
            .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())
            // SIGHUP is signal 1: the mask's lowest bit.
            .is_some_and(|mask| mask & 1 == 1)
    })
}

/// All of stdin, read on a thread of its own: a read that never ends (a
/// pipe left open) holds neither the runtime, which would not see a signal
/// meanwhile, nor its shutdown, which waits for the blocking pool.
pub async fn read_stdin() -> std::io::Result<String> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("tablesql-stdin".into())
        .spawn(move || {
            let _ = tx.send(std::io::read_to_string(std::io::stdin()));
        })?;
    rx.await.map_err(std::io::Error::other)?
}

/// The store a command opened, held weakly: whether it was let go.
#[derive(Default)]
pub struct Opened(OnceCell<Weak<dyn TableStore>>);

impl Opened {
    pub fn note(&self, store: &std::sync::Arc<dyn TableStore>) {
        let _ = self.0.set(std::sync::Arc::downgrade(store));
    }

    /// Says so when something still holds the store after every task
    /// ended: it is not closed, and an embedded store's next open repairs
    /// it (a remote store has nothing to repair).
    pub fn check_closed(&self) {
        if let Some(weak) = self.0.get()
            && weak.strong_count() > 0
        {
            tracing::warn!(
                held = weak.strong_count(),
                "the store is still held as the process exits: an embedded store is repaired at its next open"
            );
        }
    }
}
