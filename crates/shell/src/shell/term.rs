//! The terminal under the shell: its size, and one key read without echo
//! (the pager's "more" prompt), through termios.

use std::io::Write;
use std::os::fd::AsFd;

use rustix::termios::{OptionalActions, tcgetattr, tcgetwinsize, tcsetattr};

/// Columns and rows of the terminal on stdout, if it is one.
pub fn size() -> Option<(u16, u16)> {
    let w = tcgetwinsize(std::io::stdout().as_fd()).ok()?;
    (w.ws_col > 0 && w.ws_row > 0).then_some((w.ws_col, w.ws_row))
}

/// What the reader of a paged result wants next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum More {
    /// The next page.
    Page,
    /// Nothing more: stop the statement.
    Quit,
}

/// Shows `prompt` and waits for one key on stdin in raw mode: Enter or Space
/// for the next page; `q`, Escape, Ctrl-C or the end of input to stop. Other
/// keys are ignored. Raw mode is on before the prompt shows, so a Ctrl-C is a
/// key here, never a signal; bytes are read from the descriptor itself, so
/// nothing typed after the key is held back from the line editor.
pub fn more(prompt: &str) -> std::io::Result<More> {
    let stdin = std::io::stdin();
    let fd = stdin.as_fd();
    let saved = tcgetattr(fd)?;
    let mut raw = saved.clone();
    raw.make_raw();
    tcsetattr(fd, OptionalActions::Now, &raw)?;
    let answer = (|| {
        let mut out = std::io::stdout();
        out.write_all(prompt.as_bytes())?;
        out.flush()?;
        let mut byte = [0u8; 1];
        loop {
            if rustix::io::read(fd, &mut byte)? == 0 {
                return Ok(More::Quit);
            }
            match byte[0] {
                b'\r' | b'\n' | b' ' => return Ok(More::Page),
                b'q' | b'Q' | 0x1b | 0x03 | 0x04 => return Ok(More::Quit),
                _ => {}
            }
        }
    })();
    // The terminal goes back to how it was whatever the read did.
    tcsetattr(fd, OptionalActions::Now, &saved)?;
    answer
}
