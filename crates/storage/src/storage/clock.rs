//! The write clock: Timestamps that strictly increase, so that every write gets a
//! new ETag even when two land in the same 100-ns tick or the system clock steps back.

use std::sync::Mutex;

use chrono::{DateTime, Utc};

use super::value::{Ticks, from_ticks, to_ticks};

/// Hands out strictly increasing write Timestamps.
#[derive(Debug, Default)]
pub struct Clock {
    last: Mutex<Ticks>,
}

impl Clock {
    /// A clock that will not go back past `last` (ticks of the latest write).
    pub fn starting_after(last: Ticks) -> Self {
        Self {
            last: Mutex::new(last),
        }
    }

    /// The Timestamp for the next write: now, or one tick after the last one.
    pub fn next(&self) -> DateTime<Utc> {
        let now = to_ticks(&Utc::now());
        // A poisoned lock still holds a valid last value: keep going with it.
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        *last = now.max(last.saturating_add(1));
        from_ticks(*last)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strictly_increasing_even_from_the_future() {
        let future = to_ticks(&Utc::now()) + 10_000_000_000;
        let clock = Clock::starting_after(future);
        let a = clock.next();
        let b = clock.next();
        assert_eq!(to_ticks(&a), future + 1);
        assert!(b > a);
    }
}
