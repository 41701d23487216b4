//! A terminal for tests of programs that need one (the shell's line
//! editor, pgcli): a tmux server of the test's own, read by its screen.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// A tmux server of the test's own (its own socket), killed when dropped.
pub(crate) struct Terminal {
    tmux: String,
    socket: String,
}

impl Terminal {
    pub(crate) fn start(
        command: &[&str],
        width: u16,
        height: u16,
    ) -> Result<Self, Box<dyn std::error::Error>> {
        let tmux = std::env::var("TABLESQL_TEST_TMUX").map_err(|_| {
            "TABLESQL_TEST_TMUX is not set: run the tests with ./scripts/test, which installs tmux if \
             it is missing (scripts/tmux), or set it to the path of tmux"
        })?;
        // A socket per terminal: tests run at once in one process.
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let socket = format!("tablesql-test-{}-{n}", std::process::id());
        let t = Self { tmux, socket };
        let status = t
            .cmd()
            .args(["new-session", "-d", "-s", "shell"])
            .args(["-x", &width.to_string(), "-y", &height.to_string()])
            .args(command)
            .status()?;
        if !status.success() {
            return Err("tmux new-session failed".into());
        }
        Ok(t)
    }

    pub(crate) fn cmd(&self) -> Command {
        let mut c = Command::new(&self.tmux);
        c.args(["-L", &self.socket]);
        c
    }

    /// Types text literally. (A `;` ending a tmux argument would end the
    /// tmux command, so semicolons go as keys of their own.)
    pub(crate) fn type_text(&self, text: &str) -> TestResult {
        for (i, part) in text.split(';').enumerate() {
            if i > 0 {
                self.keys(&["-H", "3b"])?;
            }
            if !part.is_empty() {
                self.keys(&["-l", part])?;
            }
        }
        Ok(())
    }

    pub(crate) fn keys(&self, keys: &[&str]) -> TestResult {
        let status = self
            .cmd()
            .args(["send-keys", "-t", "shell"])
            .args(keys)
            .status()?;
        if !status.success() {
            return Err(format!("send-keys {keys:?} failed").into());
        }
        Ok(())
    }

    pub(crate) fn screen(&self) -> Result<String, Box<dyn std::error::Error>> {
        let out = self
            .cmd()
            .args(["capture-pane", "-p", "-t", "shell"])
            .output()?;
        Ok(String::from_utf8(out.stdout)?)
    }

    /// Waits until the screen shows `text`, for at most `limit`.
    pub(crate) fn wait_for(
        &self,
        text: &str,
        limit: Duration,
    ) -> Result<String, Box<dyn std::error::Error>> {
        self.wait_screen(limit, &format!("the screen to show {text:?}"), |s| {
            s.contains(text)
        })
    }

    /// Waits until `shows` holds of the screen, for at most `limit`; the
    /// screen then.
    pub(crate) fn wait_screen(
        &self,
        limit: Duration,
        what: &str,
        shows: impl Fn(&str) -> bool,
    ) -> Result<String, Box<dyn std::error::Error>> {
        let mut deadline = crate::wait::Deadline::new(limit, what);
        loop {
            let screen = self.screen()?;
            if shows(&screen) {
                return Ok(screen);
            }
            deadline.again(format!("\n{screen}"))?;
        }
    }

    /// Clears the screen (Ctrl-L at the prompt), so later checks see only
    /// what comes next.
    ///
    /// Ctrl-L is sent again each second until the screen clears: a key that
    /// arrives while the line editor starts its prompt is read as the
    /// terminal's answer to the editor's cursor query and dropped
    /// (rustyline's `move_cursor_at_leftmost`). The wider that window on a
    /// loaded machine, the likelier: a CI run failed so with one Ctrl-L.
    pub(crate) fn clear(&self) -> TestResult {
        self.keys_until(&["C-l"], "the screen to clear", |screen| {
            screen.lines().filter(|l| !l.trim().is_empty()).count() <= 1
        })?;
        Ok(())
    }

    /// Sends `keys`, and again each second, until `shows` holds of the
    /// screen (for at most 30 s): for keys that may be lost, or may come
    /// before the shell is ready for them, and do no harm sent twice.
    pub(crate) fn keys_until(
        &self,
        keys: &[&str],
        what: &str,
        shows: impl Fn(&str) -> bool,
    ) -> Result<String, Box<dyn std::error::Error>> {
        let mut deadline = crate::wait::Deadline::new(Duration::from_secs(30), what);
        let mut sent: Option<Instant> = None;
        loop {
            if sent.is_none_or(|at| at.elapsed() > Duration::from_secs(1)) {
                self.keys(keys)?;
                sent = Some(Instant::now());
            }
            let screen = self.screen()?;
            if shows(&screen) {
                return Ok(screen);
            }
            deadline.again(format!("\n{screen}"))?;
        }
    }

    pub(crate) fn alive(&self) -> bool {
        self.cmd()
            .args(["has-session", "-t", "shell"])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        let _ = self.cmd().arg("kill-server").stderr(Stdio::null()).status();
    }
}
