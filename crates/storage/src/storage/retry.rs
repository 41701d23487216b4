//! When and how long to wait before retrying a request: exponential backoff with
//! ±20% jitter, as the storage model gives it. The loops are the callers'
//! (backon's in the Azure client, the sequences' own for their conflicts).

use std::time::Duration;

use rand::Rng as _;

/// Retry settings: z, zmin, zmax of the backoff formula and the number of retries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct RetryPolicy {
    /// Retries after the first attempt; 0 disables retrying.
    pub max_retries: u32,
    /// z, the default backoff.
    pub delay: Duration,
    /// zmin, added to every wait.
    pub min_delay: Duration,
    /// zmax, the longest wait.
    pub max_delay: Duration,
    /// How long a request refused as busy (503 ServerBusy, 429) is retried,
    /// counted from its first attempt; busy answers do not count against
    /// `max_retries` (0 still retries nothing). `None`, the default: for as
    /// long as it takes, so that a throttled statement slows down and ends
    /// only by its own `statement_timeout` or a cancel, never for
    /// throttling.
    pub busy_timeout: Option<Duration>,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_retries: 5,
            delay: Duration::from_millis(500),
            min_delay: Duration::from_millis(100),
            max_delay: Duration::from_secs(30),
            busy_timeout: None,
        }
    }
}

impl RetryPolicy {
    /// With at most `n` retries after the first attempt.
    pub fn with_max_retries(mut self, n: u32) -> Self {
        self.max_retries = n;
        self
    }

    /// With z (`delay`), zmin (`min_delay`) and zmax (`max_delay`) of the
    /// backoff formula.
    pub fn with_delays(
        mut self,
        delay: Duration,
        min_delay: Duration,
        max_delay: Duration,
    ) -> Self {
        self.delay = delay;
        self.min_delay = min_delay;
        self.max_delay = max_delay;
        self
    }

    /// The wait before retry number `x` (1 for the first retry), given a
    /// uniform sample `jitter` in [0, 1):
    /// `y = Rand(0.8·z, 1.2·z) · (2^x − 1)`, then `y = min(zmin + y, zmax)`.
    pub fn wait(&self, x: u32, jitter: f64) -> Duration {
        let z = self.delay.as_secs_f64();
        let rand = z * (0.8 + 0.4 * jitter.clamp(0.0, 1.0));
        let growth = 2f64.powi(x.min(62) as i32) - 1.0;
        let y = self.min_delay.as_secs_f64() + rand * growth;
        Duration::from_secs_f64(y.min(self.max_delay.as_secs_f64()))
    }

    /// Waits without end, for a caller that decides itself when to stop
    /// (the Azure client, which counts busy answers apart).
    pub fn backoff_forever(&self) -> Backoff {
        Backoff {
            policy: RetryPolicy {
                max_retries: u32::MAX,
                ..*self
            },
            retry: 0,
        }
    }

    /// The successive waits of one request: a backon `Backoff`.
    pub fn backoff(&self) -> Backoff {
        Backoff {
            policy: *self,
            retry: 0,
        }
    }
}

/// The waits of one request's retries, in order; ends after `max_retries`.
#[derive(Debug)]
pub struct Backoff {
    policy: RetryPolicy,
    retry: u32,
}

impl Iterator for Backoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        if self.retry >= self.policy.max_retries {
            return None;
        }
        self.retry += 1;
        let jitter = rand::rng().random::<f64>();
        Some(self.policy.wait(self.retry, jitter))
    }
}

/// Whether an HTTP status is worth retrying: timeouts and a busy or failing
/// server. 400, 401, 403, 404, 409, 412, 501 and 505 would get the same answer.
#[cfg(feature = "azure")]
pub(crate) fn is_retryable_status(status: u16) -> bool {
    matches!(status, 408 | 429 | 500 | 502 | 503 | 504)
}

/// Parses `Retry-After` in its delta-seconds form (the service's form).
#[cfg(feature = "azure")]
pub(crate) fn parse_retry_after(value: &str) -> Option<Duration> {
    value.trim().parse::<u64>().ok().map(Duration::from_secs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> RetryPolicy {
        RetryPolicy {
            max_retries: 4,
            delay: Duration::from_millis(100),
            min_delay: Duration::from_millis(10),
            max_delay: Duration::from_millis(500),
            busy_timeout: Some(Duration::from_secs(1)),
        }
    }

    #[test]
    fn waits_follow_the_formula() {
        let p = policy();
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        // x = 1: zmin + [0.8z, 1.2z) * 1
        assert!((ms(p.wait(1, 0.0)) - 90.0).abs() < 1e-6);
        assert!((ms(p.wait(1, 0.5)) - 110.0).abs() < 1e-6);
        // x = 2: zmin + 1.2z * 3 at the top of the jitter
        assert!((ms(p.wait(2, 1.0)) - 370.0).abs() < 1e-6);
        // x = 3: zmin + 0.8z * 7 = 570, capped at zmax
        assert_eq!(p.wait(3, 0.0), Duration::from_millis(500));
        assert_eq!(p.wait(1000, 0.5), Duration::from_millis(500));
    }

    #[test]
    fn backoff_ends_after_max_retries_and_stays_in_bounds() {
        let waits: Vec<_> = policy().backoff().collect();
        assert_eq!(waits.len(), 4);
        for (i, w) in waits.iter().enumerate() {
            let x = i as u32 + 1;
            assert!(*w >= policy().wait(x, 0.0) && *w <= policy().wait(x, 1.0));
        }
    }

    #[cfg(feature = "azure")]
    #[test]
    fn which_statuses_retry() {
        for s in [408, 429, 500, 502, 503, 504] {
            assert!(is_retryable_status(s), "{s}");
        }
        for s in [200, 204, 400, 401, 403, 404, 409, 412, 501, 505] {
            assert!(!is_retryable_status(s), "{s}");
        }
        assert_eq!(parse_retry_after(" 3 "), Some(Duration::from_secs(3)));
        assert_eq!(parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"), None);
    }
}
