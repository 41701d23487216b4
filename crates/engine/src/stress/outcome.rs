//! A stress test's figures and its verdict, from what the clients measured
//! and what the workload statistics counted in the tested partition. Pure.

use std::fmt;
use std::time::Duration;

use super::{ClientRun, StressOptions};
use crate::engine::EngineError;
use crate::engine::PartitionTraffic;
use crate::storage::ServiceCounters;

/// Statements that failed, by why.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Failures {
    /// The service stayed busy or timed out through every retry.
    pub unavailable: u64,
    /// Refused for an entity's state (409 exists or missing, 412 changed).
    pub conflicts: u64,
    /// Anything else.
    pub other: u64,
    /// Still running a minute past the end of the test.
    pub stuck: u64,
    /// The first message of each kind, to show.
    pub examples: std::collections::BTreeMap<&'static str, String>,
}

impl Failures {
    pub(crate) fn add(&mut self, e: &EngineError) {
        let (kind, count) = match e.storage_cause() {
            Some(s) if s.is_retryable() => ("unavailable", &mut self.unavailable),
            Some(s) if s.is_conflict() => ("conflict", &mut self.conflicts),
            _ => ("other", &mut self.other),
        };
        *count += 1;
        self.examples.entry(kind).or_insert_with(|| e.to_string());
    }

    fn merge(&mut self, other: Failures) {
        self.unavailable += other.unavailable;
        self.conflicts += other.conflicts;
        self.other += other.other;
        self.stuck += other.stuck;
        for (kind, e) in other.examples {
            self.examples.entry(kind).or_insert(e);
        }
    }

    /// Every failed statement.
    pub fn total(&self) -> u64 {
        self.unavailable + self.conflicts + self.other + self.stuck
    }
}

/// Latency of one run of the script, in milliseconds.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct Latency {
    /// The mean.
    pub mean: f64,
    /// The median.
    pub p50: f64,
    /// The 90th percentile.
    pub p90: f64,
    /// The 99th percentile.
    pub p99: f64,
    /// The slowest run.
    pub max: f64,
}

impl Latency {
    fn of(mut micros: Vec<u64>) -> Latency {
        if micros.is_empty() {
            return Latency::default();
        }
        micros.sort_unstable();
        let ms = |us: u64| us as f64 / 1000.0;
        // The nearest-rank percentile.
        let at = |p: f64| {
            ms(micros[((p * micros.len() as f64).ceil() as usize).clamp(1, micros.len()) - 1])
        };
        Latency {
            mean: ms(micros.iter().sum::<u64>()) / micros.len() as f64,
            p50: at(0.5),
            p90: at(0.9),
            p99: at(0.99),
            max: ms(micros[micros.len() - 1]),
        }
    }
}

/// How the partition stood against its target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Verdict {
    /// It served the target or more.
    Meets,
    /// The service refused work as busy: the partition's limit was reached.
    Throttled,
    /// It served less, and nothing refused: the clients set the pace.
    Below,
}

/// What a stress test measured.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct StressReport {
    /// The tested table and partition.
    pub table: String,
    /// The tested PartitionKey.
    pub partition: String,
    /// Rows copied into the test table.
    pub loaded: u64,
    /// Clients that ran the script at once.
    pub clients: usize,
    /// From the first client's start to the last one's end.
    pub elapsed: Duration,
    /// Whole runs of the script that succeeded, and statements that did.
    pub runs: u64,
    /// Statements that succeeded.
    pub statements: u64,
    /// Entities read (GET) and written (PUT) in the partition, and requests to it.
    pub read: u64,
    /// Entities written (PUT) in the partition.
    pub written: u64,
    /// Requests to the partition.
    pub requests: u64,
    /// Writes to it refused for a conflict.
    pub conflicts: u64,
    /// Latency of a run of the script.
    pub latency: Latency,
    /// Statements that failed, by why.
    pub failures: Failures,
    /// The service's answers, for a remote store.
    pub service: Option<ServiceCounters>,
    /// Entities/s the partition is judged against.
    pub target_per_s: u64,
    /// How the partition stood against that target.
    pub verdict: Verdict,
}

impl StressReport {
    fn per_s(&self, n: u64) -> f64 {
        n as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// Entities read and written per second.
    pub fn entities_per_s(&self) -> f64 {
        self.per_s(self.read + self.written)
    }
}

pub(super) fn report(
    options: &StressOptions,
    loaded: u64,
    elapsed: Duration,
    before: &PartitionTraffic,
    after: &PartitionTraffic,
    service: Option<ServiceCounters>,
    clients: Vec<ClientRun>,
) -> StressReport {
    let mut failures = Failures::default();
    let mut latencies = Vec::new();
    let mut statements = 0;
    for c in clients {
        statements += c.statements;
        latencies.extend(c.latencies_us);
        failures.merge(c.failures);
    }
    let mut r = StressReport {
        table: options.table.clone(),
        partition: options.partition.clone(),
        loaded,
        clients: options.clients,
        elapsed,
        runs: latencies.len() as u64,
        statements,
        read: after.read.saturating_sub(before.read),
        written: after.written.saturating_sub(before.written),
        requests: after.requests.saturating_sub(before.requests),
        conflicts: after.conflicts.saturating_sub(before.conflicts),
        latency: Latency::of(latencies),
        failures,
        service,
        target_per_s: options.target_per_s,
        verdict: Verdict::Below,
    };
    // Busy answers a retry absorbed now and then are not a limit; one in a
    // hundred requests, or a statement that stayed unavailable, is.
    let busy = r
        .service
        .is_some_and(|s| s.busy > 0 && s.busy * 100 >= s.requests)
        || r.failures.unavailable > 0;
    r.verdict = if busy {
        Verdict::Throttled
    } else if r.entities_per_s() >= options.target_per_s as f64 {
        Verdict::Meets
    } else {
        Verdict::Below
    };
    r
}

impl fmt::Display for StressReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let secs = self.elapsed.as_secs_f64();
        writeln!(
            f,
            "stress test of {}, partition {:?}: {} rows loaded into a copy",
            self.table, self.partition, self.loaded
        )?;
        writeln!(
            f,
            "{} clients for {secs:.1} s: {} runs of the script, {} statements, {} failed",
            self.clients,
            self.runs,
            self.statements,
            self.failures.total()
        )?;
        writeln!(
            f,
            "GET {} entities ({:.0}/s)  PUT {} entities ({:.0}/s)  requests {} ({:.0}/s)",
            self.read,
            self.per_s(self.read),
            self.written,
            self.per_s(self.written),
            self.requests,
            self.per_s(self.requests)
        )?;
        let l = &self.latency;
        writeln!(
            f,
            "latency of a run (ms): mean {:.2}  p50 {:.2}  p90 {:.2}  p99 {:.2}  max {:.2}",
            l.mean, l.p50, l.p90, l.p99, l.max
        )?;
        match &self.service {
            Some(s) => writeln!(
                f,
                "service: {} requests, {} retries, {} busy answers, {} timeouts",
                s.requests, s.retries, s.busy, s.timeouts
            )?,
            None => writeln!(
                f,
                "service: none (the embedded store answers in this process: no busy answers, \
                 no timeouts, no retries)"
            )?,
        }
        let x = &self.failures;
        writeln!(
            f,
            "failures: {} unavailable after retries, {} conflicts ({} batches refused in the \
             partition), {} other, {} stuck",
            x.unavailable, x.conflicts, self.conflicts, x.other, x.stuck
        )?;
        for (kind, e) in &x.examples {
            writeln!(f, "  {kind}, e.g.: {e}")?;
        }
        let rate = self.entities_per_s();
        let target = self.target_per_s;
        match self.verdict {
            Verdict::Meets => write!(
                f,
                "verdict: MEETS the target: one partition served {rate:.0} entities/s, at or \
                 above {target}/s"
            ),
            Verdict::Throttled => write!(
                f,
                "verdict: THROTTLED: the service answered busy at {rate:.0} entities/s; one \
                 partition's limit is about there (the target is {target}/s): spread the keys \
                 this workload hits over more partitions"
            ),
            Verdict::Below => write!(
                f,
                "verdict: BELOW the target: {rate:.0} entities/s against {target}/s, with no \
                 busy answers: the clients' round trips set the pace ({} clients, {:.2} ms a \
                 run); run more clients (--clients) to find the partition's limit",
                self.clients, l.mean
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let l = Latency::of((1..=100).map(|i| i * 1000).collect());
        assert_eq!((l.p50, l.p90, l.p99, l.max), (50.0, 90.0, 99.0, 100.0));
        assert_eq!(l.mean, 50.5);
        assert_eq!(Latency::of(vec![]), Latency::default());
    }

    #[test]
    fn busy_answers_mean_throttled_whatever_the_rate() {
        let options = StressOptions::new(
            "t",
            "p",
            super::super::Script::parse("SELECT 1;", &[]).expect("script"),
        );
        let mut after = PartitionTraffic::default();
        after.read = 50_000;
        let mut busy = ServiceCounters::default();
        busy.busy = 2;
        busy.requests = 100;
        let second = Duration::from_secs(1);
        let base = PartitionTraffic::default();
        let verdict = |service| report(&options, 0, second, &base, &after, service, vec![]).verdict;
        assert_eq!(verdict(Some(busy)), Verdict::Throttled);
        assert_eq!(verdict(None), Verdict::Meets);
        let slow = report(&options, 0, second * 100, &base, &after, None, vec![]);
        assert_eq!(slow.verdict, Verdict::Below);
        assert!(
            slow.to_string().contains("500 entities/s against 2000/s"),
            "{slow}"
        );
    }
}
