//! The service's limits and faults: one knob each, with the documented
//! targets of the profile as defaults, settable by name (`--set NAME=VALUE`).

use std::time::Duration;

/// Which service the local one behaves as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Profile {
    /// Azure Storage's Table service: key order, 503 ServerBusy, 4 MiB
    /// batches, 1 KiB keys, table names ignoring case.
    Storage,
    /// Cosmos DB's Table API: results not in key order, 429 with or without
    /// `x-ms-retry-after-ms`, 2 MB batches, 255-byte RowKeys, case-sensitive
    /// table names, a `Timestamp` condition that matches nothing.
    Cosmos,
}

impl std::str::FromStr for Profile {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "storage" => Ok(Profile::Storage),
            "cosmos" => Ok(Profile::Cosmos),
            other => Err(format!(
                "unknown profile {other:?}: expected storage or cosmos"
            )),
        }
    }
}

/// Every knob. Rates count entities scanned (a write scans the entities it
/// writes, a request that scans nothing still costs one), as Azure's
/// scalability targets do for 1 KiB entities.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Limits {
    pub profile: Profile,
    /// Entities per second one range server scans (`partition_rate`): 2,000.
    pub partition_rate: f64,
    /// Entities per second the account scans (`account_rate`): 20,000.
    pub account_rate: f64,
    /// Neighbouring partitions (in key order) served by one range server
    /// (`partitions_per_server`).
    pub partitions_per_server: usize,
    /// Work a range server or the account queues before it refuses more as
    /// busy (`busy_backlog_ms`).
    pub busy_backlog: Duration,
    /// How long one query page may run before it answers with what it has
    /// and a continuation (`query_budget_ms`): 5 s.
    pub query_budget: Duration,
    /// Share of requests refused as busy regardless of load (`busy`).
    pub busy: f64,
    /// Share of busy answers that carry a retry hint (`retry_hint`): a
    /// `Retry-After` in seconds on `storage`, `x-ms-retry-after-ms` on `cosmos`.
    pub retry_hint: f64,
    /// Share of requests answered 500 OperationTimedOut (`timeouts`).
    pub timeouts: f64,
    /// Share of query pages answered empty, with a continuation that does not
    /// advance (`empty_pages`).
    pub empty_pages: f64,
    /// Share of writes applied whose answer is lost: the connection closes
    /// without one (`lost_answers`).
    pub lost_answers: f64,
    /// Median added latency of an answer (`latency_ms`).
    pub latency: Duration,
    /// The spread of the latency, a log-normal's sigma (`latency_sigma`):
    /// 1.0 puts one answer in a hundred past ten times the median.
    pub latency_sigma: f64,
    /// How long a deleted table's name answers 409 TableBeingDeleted
    /// (`delete_grace_ms`): Azure says at least 40 s.
    pub delete_grace: Duration,
    /// Largest entity group transaction body (`max_batch_bytes`).
    pub max_batch_bytes: usize,
    /// Longest RowKey, in UTF-8 bytes (`max_row_key_bytes`).
    pub max_row_key_bytes: usize,
    /// The seed of the faults' and the order's randomness (`seed`).
    pub seed: u64,
}

impl Limits {
    /// The documented targets of a profile, with no faults.
    pub fn new(profile: Profile) -> Self {
        let cosmos = profile == Profile::Cosmos;
        Self {
            profile,
            partition_rate: 2000.0,
            account_rate: 20_000.0,
            partitions_per_server: 100,
            busy_backlog: Duration::from_millis(1000),
            query_budget: Duration::from_secs(5),
            busy: 0.0,
            retry_hint: if cosmos { 0.5 } else { 0.0 },
            timeouts: 0.0,
            empty_pages: 0.0,
            lost_answers: 0.0,
            latency: Duration::ZERO,
            latency_sigma: 0.0,
            delete_grace: Duration::from_secs(40),
            max_batch_bytes: if cosmos { 2_000_000 } else { 4 * 1024 * 1024 },
            max_row_key_bytes: if cosmos { 255 } else { 1024 },
            seed: 0,
        }
    }

    /// Sets one knob from `NAME=VALUE`.
    pub fn set(&mut self, assignment: &str) -> Result<(), String> {
        let (name, value) = assignment
            .split_once('=')
            .ok_or_else(|| format!("{assignment:?} is not NAME=VALUE"))?;
        let (name, value) = (name.trim(), value.trim());
        let number = || {
            value
                .parse::<f64>()
                .ok()
                .filter(|v| v.is_finite() && *v >= 0.0)
                .ok_or_else(|| format!("{name}: {value:?} is not a non-negative number"))
        };
        let share = || {
            number().and_then(|v| {
                (v <= 1.0)
                    .then_some(v)
                    .ok_or_else(|| format!("{name}: {value} is not a share between 0 and 1"))
            })
        };
        // At most a day: a knob, not a way to stall the service forever.
        let millis = || {
            number().and_then(|v| {
                (v <= 86_400_000.0)
                    .then(|| Duration::from_secs_f64(v / 1000.0))
                    .ok_or_else(|| format!("{name}: {value} ms is over a day"))
            })
        };
        let count = || {
            value
                .parse::<usize>()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| format!("{name}: {value:?} is not a positive count"))
        };
        match name {
            "profile" => {
                let seed = self.seed;
                *self = Limits::new(value.parse()?);
                self.seed = seed;
            }
            "partition_rate" => self.partition_rate = positive(name, number()?)?,
            "account_rate" => self.account_rate = positive(name, number()?)?,
            "partitions_per_server" => self.partitions_per_server = count()?,
            "busy_backlog_ms" => self.busy_backlog = millis()?,
            "query_budget_ms" => self.query_budget = millis()?,
            "busy" => self.busy = share()?,
            "retry_hint" => self.retry_hint = share()?,
            "timeouts" => self.timeouts = share()?,
            "empty_pages" => self.empty_pages = share()?,
            "lost_answers" => self.lost_answers = share()?,
            "latency_ms" => self.latency = millis()?,
            "latency_sigma" => {
                self.latency_sigma = number().and_then(|v| {
                    (v <= 5.0)
                        .then_some(v)
                        .ok_or_else(|| format!("{name}: {v} is over 5"))
                })?
            }
            "delete_grace_ms" => self.delete_grace = millis()?,
            "max_batch_bytes" => self.max_batch_bytes = count()?,
            "max_row_key_bytes" => self.max_row_key_bytes = count()?,
            "seed" => {
                self.seed = value
                    .parse()
                    .map_err(|_| format!("seed: {value:?} is not a number"))?
            }
            other => {
                return Err(format!(
                    "unknown knob {other:?}; the knobs: {}",
                    KNOBS.join(", ")
                ));
            }
        }
        Ok(())
    }
}

/// The knobs' names, for help and errors.
pub const KNOBS: &[&str] = &[
    "profile",
    "partition_rate",
    "account_rate",
    "partitions_per_server",
    "busy_backlog_ms",
    "query_budget_ms",
    "busy",
    "retry_hint",
    "timeouts",
    "empty_pages",
    "lost_answers",
    "latency_ms",
    "latency_sigma",
    "delete_grace_ms",
    "max_batch_bytes",
    "max_row_key_bytes",
    "seed",
];

/// A rate: at least one entity a second.
fn positive(name: &str, v: f64) -> Result<f64, String> {
    (v >= 1.0)
        .then_some(v)
        .ok_or_else(|| format!("{name} must be at least 1 entity a second"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn knobs_set_by_name_and_refuse_nonsense() {
        let mut l = Limits::new(Profile::Storage);
        l.set("partition_rate=500").unwrap();
        l.set("busy = 0.25").unwrap();
        l.set("query_budget_ms=250").unwrap();
        assert_eq!(l.partition_rate, 500.0);
        assert_eq!(l.busy, 0.25);
        assert_eq!(l.query_budget, Duration::from_millis(250));
        assert!(l.set("busy=2").unwrap_err().contains("share"));
        assert!(l.set("partition_rate=0").is_err());
        assert!(l.set("nope=1").unwrap_err().contains("unknown knob"));
        l.set("seed=7").unwrap();
        l.set("profile=cosmos").unwrap();
        assert_eq!(
            (l.profile, l.max_row_key_bytes, l.seed),
            (Profile::Cosmos, 255, 7)
        );
    }
}
