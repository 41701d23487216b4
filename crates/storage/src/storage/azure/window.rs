//! How many requests a client keeps in flight, learned from the service's
//! answers: the service throttles a client that sends more than its
//! account or a range server takes (503 ServerBusy, 429), and a fixed
//! bound is either too low for an idle account or too high for a busy one.
//! So the bound is a window, as TCP's congestion window is: each clean
//! answer widens it by one over its width (one more request per round of
//! answers), a busy answer for the account halves it, at most once per
//! `COOL_DOWN` so that one burst of refusals counts once (a range server's
//! refusal slows only the requests to it, which wait and retry). It stays between 1 and the
//! configured most (`MaxConnections`).

use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio::sync::Notify;

/// The least time between two halvings.
const COOL_DOWN: Duration = Duration::from_millis(200);

#[derive(Debug)]
struct State {
    width: f64,
    in_flight: usize,
    last_cut: Option<Instant>,
}

/// The window of one client.
#[derive(Debug)]
pub struct Window {
    most: usize,
    state: Mutex<State>,
    freed: Notify,
}

/// A request's place in the window, given back when it is dropped; its
/// answer is told first with [`Slot::answered`].
#[derive(Debug)]
pub struct Slot<'a> {
    window: &'a Window,
    busy: Option<bool>,
}

impl Window {
    /// A window of at most `most` requests, starting at half of it.
    pub fn new(most: usize) -> Self {
        let most = most.max(1);
        Self {
            most,
            state: Mutex::new(State {
                width: (most as f64 / 2.0).max(1.0),
                in_flight: 0,
                last_cut: None,
            }),
            freed: Notify::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The window's width now.
    pub fn width(&self) -> f64 {
        self.lock().width
    }

    /// Waits for room in the window.
    pub async fn enter(&self) -> Slot<'_> {
        loop {
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            {
                let mut s = self.lock();
                if (s.in_flight as f64) < s.width.floor().max(1.0) {
                    s.in_flight += 1;
                    return Slot {
                        window: self,
                        busy: None,
                    };
                }
            }
            freed.await;
        }
    }

    fn leave(&self, busy: Option<bool>) {
        let mut s = self.lock();
        s.in_flight = s.in_flight.saturating_sub(1);
        match busy {
            Some(false) => s.width = (s.width + 1.0 / s.width).min(self.most as f64),
            Some(true) => {
                let now = Instant::now();
                if s.last_cut
                    .is_none_or(|t| now.duration_since(t) >= COOL_DOWN)
                {
                    s.width = (s.width / 2.0).max(1.0);
                    s.last_cut = Some(now);
                }
            }
            // No answer (refused, reset, timed out): the window stays.
            None => {}
        }
        drop(s);
        self.freed.notify_waiters();
    }
}

impl Slot<'_> {
    /// The service answered: busy (503, 429) or not.
    pub fn answered(&mut self, busy: bool) {
        self.busy = Some(busy);
    }
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.window.leave(self.busy);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn clean_answers_widen_and_busy_ones_halve_once_per_burst() {
        let w = Window::new(32);
        assert_eq!(w.width(), 16.0);
        for _ in 0..160 {
            w.enter().await.answered(false);
        }
        assert!(w.width() > 23.0, "{}", w.width());
        let before = w.width();
        // A burst of refusals halves it once (twice, if the machine stalls
        // past the cool-down within the burst).
        for _ in 0..5 {
            w.enter().await.answered(true);
        }
        let after = w.width();
        assert!(
            after <= before / 2.0 + 1e-9 && after >= before / 4.0 - 1e-9,
            "{after}"
        );
        // Never past the most, never under one.
        for _ in 0..10_000 {
            w.enter().await.answered(false);
        }
        assert_eq!(w.width(), 32.0);
        let tiny = Window::new(1);
        tiny.enter().await.answered(true);
        assert_eq!(tiny.width(), 1.0);
    }

    #[tokio::test]
    async fn a_full_window_waits_for_a_slot_to_free() {
        let w = std::sync::Arc::new(Window::new(2));
        let first = w.enter().await;
        let w2 = w.clone();
        let waiter = tokio::spawn(async move {
            let _slot = w2.enter().await;
        });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        drop(first);
        waiter.await.unwrap();
    }
}
