//! psql's pager: a result longer than the screen goes through
//! `$PSQL_PAGER` (or `$PAGER`) when stdout is a terminal. The output is
//! held only until it passes a screenful; then the pager starts and
//! everything after streams into it, so a long result is never held whole.
//! Quitting the pager closes its input: the next write fails, which stops
//! the statement (its stream is dropped, and its scans stop).

use std::io::Write;
use std::process::{Child, ChildStdin, Command, Stdio};

/// `\pset pager`: psql's three settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PagerMode {
    /// Page what does not fit the screen.
    #[default]
    On,
    /// Never page.
    Off,
    /// Page every result.
    Always,
}

impl PagerMode {
    /// `on`, `off` or `always` (psql's words; a bare `\pset pager` toggles).
    pub fn parse(value: Option<&str>, current: Self) -> Result<Self, String> {
        match value.map(str::to_lowercase).as_deref() {
            None => Ok(if current == Self::Off {
                Self::On
            } else {
                Self::Off
            }),
            Some("on" | "true" | "1" | "yes") => Ok(Self::On),
            Some("off" | "false" | "0" | "no") => Ok(Self::Off),
            Some("always") => Ok(Self::Always),
            Some(other) => Err(format!(
                "\\pset: unrecognized value \"{other}\" for \"pager\": on, off or always"
            )),
        }
    }

    /// What `\pset pager` answers, as psql words it.
    pub fn describe(self) -> &'static str {
        match self {
            Self::On => "Pager is used for long output.",
            Self::Off => "Pager usage is off.",
            Self::Always => "Pager is always used.",
        }
    }
}

/// The pager the environment names, as psql reads it: `PSQL_PAGER`, else
/// `PAGER`. `None`: neither is set (the shell's own "more" prompt pages);
/// `Some(None)`: set to blanks, which turns paging off.
pub fn from_env() -> Option<Option<String>> {
    let command = std::env::var("PSQL_PAGER")
        .or_else(|_| std::env::var("PAGER"))
        .ok()?;
    Some((!command.trim().is_empty()).then_some(command))
}

enum State {
    /// Not yet a screenful: held.
    Holding(Vec<u8>),
    /// Streaming into the pager.
    Piped(Child, ChildStdin),
    /// The pager could not start: straight to stdout.
    Direct,
    /// The pager has quit.
    Closed,
}

/// stdout, through the pager once the output passes `lines` lines.
pub struct Paged {
    command: String,
    lines: usize,
    seen: usize,
    state: State,
    /// The pager ended before the output did (the reader quit).
    pub quit: bool,
}

impl Paged {
    /// Output for `command` (run by `sh -c`), paged past `lines` lines
    /// (0: always).
    pub fn new(command: String, lines: usize) -> Self {
        Self {
            command,
            lines,
            seen: 0,
            state: State::Holding(Vec::new()),
            quit: false,
        }
    }

    /// Starts the pager with what was held. A pager that cannot start
    /// leaves the output to stdout, the held part first, as psql does; one
    /// that quits at once is waited for (no zombie) and ends the output.
    fn start(&mut self, held: Vec<u8>) -> std::io::Result<()> {
        let spawned = Command::new("sh")
            .arg("-c")
            .arg(&self.command)
            .stdin(Stdio::piped())
            .spawn();
        let mut child = match spawned {
            Ok(child) => child,
            Err(_) => {
                self.state = State::Direct;
                return std::io::stdout().write_all(&held);
            }
        };
        let Some(stdin) = child.stdin.take() else {
            let _ = child.wait();
            return Err(std::io::Error::other("the pager has no input"));
        };
        // Piped before the write, so that a pager that quit at once is
        // waited for by the broken pipe's handling.
        self.state = State::Piped(child, stdin);
        match &mut self.state {
            State::Piped(_, stdin) => stdin.write_all(&held),
            _ => Ok(()),
        }
    }

    /// Ends the output: what is held goes to stdout (it fitted the
    /// screen), or the pager's input closes and the pager is waited for.
    pub fn finish(mut self) -> std::io::Result<()> {
        match std::mem::replace(&mut self.state, State::Closed) {
            State::Holding(held) => {
                let mut out = std::io::stdout();
                out.write_all(&held)?;
                out.flush()
            }
            State::Piped(mut child, stdin) => {
                drop(stdin);
                child.wait().map(|_| ())
            }
            State::Direct => std::io::stdout().flush(),
            State::Closed => Ok(()),
        }
    }
}

impl Write for Paged {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        let written = match &mut self.state {
            State::Holding(held) => {
                held.extend_from_slice(data);
                self.seen += data.iter().filter(|b| **b == b'\n').count();
                if self.seen > self.lines || self.lines == 0 {
                    let held = std::mem::take(held);
                    self.start(held)
                } else {
                    Ok(())
                }
            }
            State::Piped(_, stdin) => stdin.write_all(data),
            State::Direct => std::io::stdout().write_all(data),
            State::Closed => Err(std::io::ErrorKind::BrokenPipe.into()),
        };
        match written {
            Ok(()) => Ok(data.len()),
            Err(e) => {
                if e.kind() == std::io::ErrorKind::BrokenPipe {
                    self.quit = true;
                    if let State::Piped(mut child, stdin) =
                        std::mem::replace(&mut self.state, State::Closed)
                    {
                        drop(stdin);
                        let _ = child.wait();
                    }
                }
                Err(e)
            }
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match &mut self.state {
            State::Piped(_, stdin) => stdin.flush(),
            State::Direct => std::io::stdout().flush(),
            _ => Ok(()),
        }
    }
}
