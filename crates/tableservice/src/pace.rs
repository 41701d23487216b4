//! A server's capacity as a virtual clock: each piece of work takes its size
//! over the rate, queued behind the work before it. Work that would wait in
//! the queue longer than the backlog allows is refused (the busy answer);
//! the rest is paced, so a server held at its rate answers slower, not wrong.
//! Pure over the instants it is given, so it is tested without sleeping.

use std::time::{Duration, Instant};

/// One server's (or the account's) queue of work.
#[derive(Debug, Default, Clone)]
pub struct Pace {
    /// When the work queued so far is done.
    free_at: Option<Instant>,
}

impl Pace {
    /// How long work arriving `now` would wait before it starts.
    pub fn backlog(&self, now: Instant) -> Duration {
        self.free_at
            .map_or(Duration::ZERO, |t| t.saturating_duration_since(now))
    }

    /// Queues `n` units at `rate` per second; the instant they are done.
    pub fn take(&mut self, now: Instant, n: f64, rate: f64) -> Instant {
        let start = self.free_at.map_or(now, |t| t.max(now));
        // A rate is at least 1 a second (`Limits`); past a day is a day.
        let took = Duration::try_from_secs_f64(n.max(0.0) / rate.max(1.0))
            .unwrap_or(Duration::MAX)
            .min(Duration::from_secs(86_400));
        let done = start + took;
        self.free_at = Some(done);
        done
    }

    /// Whole units that can be done by `deadline` at `rate`, after the work
    /// queued so far: none where the queue runs past it.
    pub fn room(&self, now: Instant, rate: f64, deadline: Instant) -> usize {
        let start = self.free_at.map_or(now, |t| t.max(now));
        (deadline.saturating_duration_since(start).as_secs_f64() * rate).floor() as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn work_queues_at_the_rate_and_the_backlog_grows_with_it() {
        let t0 = Instant::now();
        let mut p = Pace::default();
        assert_eq!(p.backlog(t0), Duration::ZERO);
        // 1,000 units at 2,000/s take half a second; the next 1,000 queue
        // behind them.
        assert_eq!(p.take(t0, 1000.0, 2000.0), t0 + Duration::from_millis(500));
        assert_eq!(p.take(t0, 1000.0, 2000.0), t0 + Duration::from_millis(1000));
        assert_eq!(p.backlog(t0), Duration::from_millis(1000));
        // Idle time is not saved up: work after the queue drained starts now.
        let later = t0 + Duration::from_secs(5);
        assert_eq!(
            p.take(later, 200.0, 2000.0),
            later + Duration::from_millis(100)
        );
    }

    #[test]
    fn a_deadline_has_room_for_what_fits_before_it() {
        let t0 = Instant::now();
        let mut p = Pace::default();
        p.take(t0, 1000.0, 1000.0); // busy until t0 + 1 s
        assert_eq!(p.room(t0, 1000.0, t0 + Duration::from_millis(1500)), 500);
        assert_eq!(p.room(t0, 1000.0, t0 + Duration::from_millis(900)), 0);
    }
}
