//! The one way a test waits: for something it can observe (a row, a
//! metric, a log line, a process's exit), looked at again and again until
//! a deadline, never for a fixed time. Past the deadline the error names
//! what never happened and what was seen instead, so that a failure on a
//! busy machine says which condition it waited on.

use std::fmt::Display;
use std::time::{Duration, Instant};

/// The first pause between looks; each pause doubles, up to [`LONGEST`].
const FIRST: Duration = Duration::from_millis(10);
const LONGEST: Duration = Duration::from_millis(200);

/// A wait for one condition, with its deadline.
#[derive(Debug)]
pub struct Deadline {
    what: String,
    within: Duration,
    until: Instant,
    pause: Duration,
    looks: u32,
}

impl Deadline {
    /// A wait of at most `within` for `what` ("the server to stop", say).
    pub fn new(within: Duration, what: impl Into<String>) -> Self {
        Self {
            what: what.into(),
            within,
            until: Instant::now() + within,
            pause: FIRST,
            looks: 0,
        }
    }

    /// The condition did not hold; `seen` is what was seen instead. Past
    /// the deadline, the error; otherwise a pause before the next look.
    pub fn again(&mut self, seen: impl Display) -> Result<(), String> {
        let pause = self.next(&seen)?;
        std::thread::sleep(pause);
        Ok(())
    }

    /// As [`Deadline::again`], pausing on the runtime instead of the thread.
    pub async fn again_async(&mut self, seen: impl Display) -> Result<(), String> {
        let pause = self.next(&seen)?;
        tokio::time::sleep(pause).await;
        Ok(())
    }

    fn next(&mut self, seen: &dyn Display) -> Result<Duration, String> {
        self.looks += 1;
        let now = Instant::now();
        if now >= self.until {
            return Err(format!(
                "waited {:?} for {}, in vain ({} looks); last seen: {seen}",
                self.within, self.what, self.looks
            ));
        }
        let pause = self.pause.min(self.until - now);
        self.pause = (self.pause * 2).min(LONGEST);
        Ok(pause)
    }
}

/// Looks with `look` until it finds what it looks for (`Ok(Some(_))`),
/// for at most `within`; `Ok(None)` is not yet, and an error ends the
/// wait at once. Past the deadline the error names `what`.
pub fn until<T>(
    within: Duration,
    what: &str,
    mut look: impl FnMut() -> Result<Option<T>, String>,
) -> Result<T, String> {
    let mut deadline = Deadline::new(within, what);
    loop {
        if let Some(found) = look()? {
            return Ok(found);
        }
        deadline.again("not yet")?;
    }
}

/// A child process's exit status, waited for at most `within`.
pub fn exit_of(
    child: &mut std::process::Child,
    within: Duration,
    what: &str,
) -> Result<std::process::ExitStatus, String> {
    let mut deadline = Deadline::new(within, what);
    loop {
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            return Ok(status);
        }
        deadline.again(format!("process {} still running", child.id()))?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_ends_when_seen_and_past_its_deadline_names_what_never_happened() {
        let mut n = 0;
        let found = until(Duration::from_secs(5), "the third look", || {
            n += 1;
            Ok((n == 3).then_some(n))
        });
        assert_eq!(found, Ok(3));
        let mut never = Deadline::new(Duration::from_millis(30), "the moon to turn blue");
        let e = loop {
            if let Err(e) = never.again("grey") {
                break e;
            }
        };
        assert!(e.contains("the moon to turn blue"), "{e}");
        assert!(e.contains("last seen: grey"), "{e}");
    }
}
