//! The server's metrics, in Prometheus' text format (`serve
//! --metrics-listen`): connections, statements by kind, errors by
//! SQLSTATE, statement durations, and the store's requests, retries and
//! busy answers. Every label takes its values from a fixed set (an error's
//! SQLSTATE up to [`MAX_SQLSTATES`] distinct codes, then `other`): never a
//! table's name or a statement's text, so that a scrape stays the same
//! size however many tables and statements the server sees.

use std::collections::HashSet;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::storage::TableStore;
use crate::storage::metered::StoreCounters;
use crate::striped::Striped;

/// Distinct SQLSTATEs counted under their own label; the rest count as
/// `other`.
pub const MAX_SQLSTATES: usize = 64;

type Label = [(&'static str, String); 1];

/// See the module doc. Counts are kept whether or not anything scrapes them.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    connections: Counter,
    active: Gauge,
    moved: Counter,
    /// `tablesql_connections_refused{reason="full"}` and `{reason="flood"}`,
    /// made at start so that both series exist before the first refusal.
    refused_full: Counter,
    refused_flood: Counter,
    refused_shutting_down: Counter,
    refusing: Gauge,
    cancels: Counter,
    statements: Statements,
    running: Running,
    errors: Family<Label, Counter>,
    sqlstates: Mutex<HashSet<String>>,
    duration: Durations,
}

impl Metrics {
    /// Metrics of a server over `store`; with `counters`, its requests by
    /// operation (a store wrapped by [`crate::storage::metered::MeteredStore`]).
    pub fn new(store: Arc<dyn TableStore>, counters: Option<Arc<StoreCounters>>) -> Self {
        let mut registry = Registry::default();
        let connections = Counter::default();
        let active = Gauge::default();
        let moved = Counter::default();
        let refused = Family::<Label, Counter>::default();
        let refused_full = refused
            .get_or_create(&[("reason", "full".to_owned())])
            .clone();
        let refused_flood = refused
            .get_or_create(&[("reason", "flood".to_owned())])
            .clone();
        let refused_shutting_down = refused
            .get_or_create(&[("reason", "shutting_down".to_owned())])
            .clone();
        let refusing = Gauge::default();
        let cancels = Counter::default();
        let statements = Statements::default();
        let running = Running::default();
        let errors = Family::<Label, Counter>::default();
        let duration = Durations::default();
        registry.register(
            "tablesql_connections",
            "Client connections admitted (under max_connections)",
            connections.clone(),
        );
        registry.register(
            "tablesql_connections_active",
            "Client connections open now",
            active.clone(),
        );
        registry.register(
            "tablesql_connections_moved",
            "Connections moved to the runtime of the CPU their client sends from",
            moved.clone(),
        );
        registry.register(
            "tablesql_connections_refused",
            "Client connections refused, by reason: full (past max_connections: given 5 s to be told \
             53300, or to have a cancel request served), flood (past max_connections while as many \
             refusals are pending: closed unread), shutting_down (while the server stops: told 57P03)",
            refused,
        );
        registry.register(
            "tablesql_connections_refusing",
            "Refused connections still being told so (each holds a place: at most max_connections)",
            refusing.clone(),
        );
        registry.register(
            "tablesql_cancel_requests",
            "Cancel requests served (each reaches the statement its key names, if one runs)",
            cancels.clone(),
        );
        registry.register(
            "tablesql_statements",
            "Statements completed, by kind (select, insert, update, delete, ddl, copy, transaction, other)",
            statements.clone(),
        );
        registry.register(
            "tablesql_statements_running",
            "Statements between their Query or Execute message and their answer's end",
            running.clone(),
        );
        registry.register(
            "tablesql_errors",
            "Errors sent to clients, by SQLSTATE",
            errors.clone(),
        );
        registry.register(
            "tablesql_statement_duration_seconds",
            "Time from a Query or Execute message to its answer's end",
            duration.clone(),
        );
        registry.register_collector(Box::new(StorageCollector {
            store: Arc::downgrade(&store),
            counters,
        }));
        Self {
            registry,
            connections,
            active,
            moved,
            refused_full,
            refused_flood,
            refused_shutting_down,
            refusing,
            cancels,
            statements,
            running,
            errors,
            sqlstates: Mutex::new(HashSet::new()),
            duration,
        }
    }

    /// The text exposition of every metric.
    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)?;
        Ok(out)
    }

    /// An admitted connection opened: counted open until the guard is
    /// dropped, also when its task panics.
    pub(super) fn connection_opened(&self) -> Open {
        self.connections.inc();
        self.active.inc();
        Open(self.active.clone())
    }

    pub(super) fn connection_moved(&self) {
        self.moved.inc();
    }

    /// A connection was refused; it counts in no other connection metric.
    pub(super) fn connection_refused(&self, why: Refusal) {
        let counter = match why {
            Refusal::Full => &self.refused_full,
            Refusal::Flood => &self.refused_flood,
            Refusal::ShuttingDown => &self.refused_shutting_down,
        };
        counter.inc();
    }

    /// A statement completed, as its command tag names it.
    pub(super) fn completed(&self, tag: &str) {
        let kind = kind_of_tag(tag);
        let i = KINDS
            .iter()
            .position(|k| *k == kind)
            .unwrap_or(KINDS.len() - 1);
        if let Some(n) = self.statements.0.local().get(i) {
            n.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A refused connection is being told so, until the guard is dropped.
    pub(super) fn refusing(&self) -> Open {
        self.refusing.inc();
        Open(self.refusing.clone())
    }

    /// A cancel request was served.
    pub(super) fn cancel_served(&self) {
        self.cancels.inc();
    }

    /// A connection's count of running statements, made once per
    /// connection (not per statement: a shared count's clone is a shared
    /// cache line).
    pub(super) fn running_statements(&self) -> RunningStatements {
        RunningStatements {
            running: self.running.clone(),
            now: false,
        }
    }

    /// An error sent to a client.
    pub(super) fn error(&self, sqlstate: &str) {
        let valid = sqlstate.len() == 5 && sqlstate.bytes().all(|b| b.is_ascii_alphanumeric());
        let label = match self.sqlstates.lock() {
            Ok(mut seen) if valid && (seen.contains(sqlstate) || seen.len() < MAX_SQLSTATES) => {
                seen.insert(sqlstate.to_owned());
                sqlstate.to_owned()
            }
            _ => "other".to_owned(),
        };
        self.errors.get_or_create(&[("sqlstate", label)]).inc();
    }

    pub(super) fn statement_took(&self, took: Duration) {
        let local = self.duration.0.local();
        let secs = took.as_secs_f64();
        let bucket = BOUNDS
            .iter()
            .position(|b| secs <= *b)
            .unwrap_or(BOUNDS.len());
        if let Some(n) = local.buckets.get(bucket) {
            n.fetch_add(1, Ordering::Relaxed);
        }
        let nanos = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        local.nanos.fetch_add(nanos, Ordering::Relaxed);
    }
}

/// A connection counted in a gauge (`tablesql_connections_active`, or
/// `_refusing`) while it is open.
pub(super) struct Open(Gauge);

impl Drop for Open {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// One connection's part of `tablesql_statements_running`: its statement,
/// while one runs; given back when dropped.
pub(super) struct RunningStatements {
    running: Running,
    now: bool,
}

impl RunningStatements {
    /// A statement started.
    pub(super) fn start(&mut self) {
        if !self.now {
            self.now = true;
            self.running.0.local().fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The statement ended.
    pub(super) fn end(&mut self) {
        if self.now {
            self.now = false;
            // On this thread's copy, whichever took the one: the sum is right.
            self.running.0.local().fetch_sub(1, Ordering::Relaxed);
        }
    }
}

impl Drop for RunningStatements {
    fn drop(&mut self) {
        self.end();
    }
}

/// Statements running, counted by thread (`crate::striped`), as
/// `tablesql_statements_total` is: each statement of every connection
/// changes it twice.
#[derive(Debug, Clone, Default)]
struct Running(Arc<Striped<AtomicI64>>);

impl EncodeMetric for Running {
    fn encode(&self, encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let n: i64 = self.0.all().map(|c| c.load(Ordering::Relaxed)).sum();
        ConstGauge::new(n).encode(encoder)
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Gauge
    }
}

/// Why a connection was refused (`tablesql_connections_refused`),
/// counted when it is accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Refusal {
    /// Past `max_connections`: given 5 s to send its startup message, which
    /// is answered 53300 (a cancel request is served, as PostgreSQL does
    /// when full; under the cap one counts as an admitted connection).
    Full,
    /// Past `max_connections` while as many refusals are pending: closed
    /// before anything is read.
    Flood,
    /// Made while the server stops: its startup message is answered 57P03.
    ShuttingDown,
}

/// Statements completed, by kind (`KINDS`), counted by thread
/// (`crate::striped`): each connection's every statement adds one. A
/// kind shows once counted, as a family's label does once used.
#[derive(Debug, Clone, Default)]
struct Statements(Arc<Striped<[AtomicU64; KINDS.len()]>>);

impl EncodeMetric for Statements {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let mut counts = [0u64; KINDS.len()];
        for local in self.0.all() {
            for (n, c) in counts.iter_mut().zip(local) {
                *n += c.load(Ordering::Relaxed);
            }
        }
        for (kind, n) in KINDS.iter().zip(counts) {
            if n > 0 {
                let labels = [("kind", *kind)];
                ConstCounter::new(n).encode(encoder.encode_family(&labels)?)?;
            }
        }
        Ok(())
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Counter
    }
}

/// The upper bounds of the statement durations' buckets, in seconds:
/// 1 ms to about 65 s, by fours; past the last, `+Inf`.
const BOUNDS: [f64; 9] = [
    0.001, 0.004, 0.016, 0.064, 0.256, 1.024, 4.096, 16.384, 65.536,
];

/// Statement durations as a histogram, counted by thread
/// (`crate::striped`).
#[derive(Debug, Clone, Default)]
struct Durations(Arc<Striped<DurationCounts>>);

#[derive(Debug, Default)]
struct DurationCounts {
    /// By bucket (`BOUNDS`, then `+Inf`), not cumulative.
    buckets: [AtomicU64; BOUNDS.len() + 1],
    /// Their sum, in nanoseconds.
    nanos: AtomicU64,
}

impl EncodeMetric for Durations {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let mut buckets: Vec<(f64, u64)> = BOUNDS
            .iter()
            .copied()
            .chain([f64::MAX])
            .map(|b| (b, 0))
            .collect();
        let mut nanos = 0u64;
        for local in self.0.all() {
            for ((_, n), c) in buckets.iter_mut().zip(&local.buckets) {
                *n += c.load(Ordering::Relaxed);
            }
            // Wraps after 584 years of statements, as each copy does.
            nanos = nanos.wrapping_add(local.nanos.load(Ordering::Relaxed));
        }
        let count = buckets.iter().map(|(_, n)| n).sum();
        encoder.encode_histogram::<NoLabelSet>(nanos as f64 / 1e9, count, &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

/// The statements' kinds, `other` last.
const KINDS: [&str; 9] = [
    "select",
    "insert",
    "update",
    "delete",
    "merge",
    "copy",
    "ddl",
    "transaction",
    "other",
];

/// A command tag's kind: its first word, mapped to a fixed set (`KINDS`).
fn kind_of_tag(tag: &str) -> &'static str {
    match tag.split(' ').next().unwrap_or("") {
        "SELECT" | "FETCH" | "MOVE" => "select",
        "INSERT" => "insert",
        "UPDATE" => "update",
        "DELETE" => "delete",
        "MERGE" => "merge",
        "COPY" => "copy",
        "CREATE" | "DROP" | "ALTER" | "TRUNCATE" | "COMMENT" | "ANALYZE" => "ddl",
        "BEGIN" | "START" | "COMMIT" | "ROLLBACK" | "SAVEPOINT" | "RELEASE" | "PREPARE" => {
            "transaction"
        }
        _ => "other",
    }
}

/// The store's counts, read at each scrape.
#[derive(Debug)]
struct StorageCollector {
    // Weak: a scrape must not keep the store open past the engine's close
    // (shutdown waits for the last holder before the database closes).
    store: std::sync::Weak<dyn TableStore>,
    counters: Option<Arc<StoreCounters>>,
}

impl Collector for StorageCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        if let Some(counters) = &self.counters {
            let mut family = encoder.encode_descriptor(
                "tablesql_storage_requests",
                "Requests made of the store, by operation",
                None,
                MetricType::Counter,
            )?;
            for (operation, n) in counters.by_operation() {
                let labels = [("operation", operation)];
                ConstCounter::new(n).encode(family.encode_family(&labels)?)?;
            }
            let mut family = encoder.encode_descriptor(
                "tablesql_storage_transactions",
                "Billable transactions (on Azure, each request is one), by kind",
                None,
                MetricType::Counter,
            )?;
            for (kind, n) in counters.transactions().by_kind() {
                let labels = [("kind", kind)];
                ConstCounter::new(n).encode(family.encode_family(&labels)?)?;
            }
        }
        // A store in this process answers no service: its counts are 0.
        let service = self
            .store
            .upgrade()
            .and_then(|store| store.service_counters())
            .unwrap_or_default();
        for (name, help, n) in [
            (
                "tablesql_storage_http_requests",
                "HTTP requests sent to the Table service, retries included",
                service.requests,
            ),
            (
                "tablesql_storage_retries",
                "Requests retried after a transient failure",
                service.retries,
            ),
            (
                "tablesql_storage_busy",
                "Attempts the service refused as busy (503 ServerBusy, 429)",
                service.busy,
            ),
            (
                "tablesql_storage_timeouts",
                "Attempts that timed out",
                service.timeouts,
            ),
        ] {
            let counter = ConstCounter::new(n);
            let metric = encoder.encode_descriptor(name, help, None, counter.metric_type())?;
            counter.encode(metric)?;
        }
        let waited = ConstCounter::new(service.waited.as_secs_f64());
        let metric = encoder.encode_descriptor(
            "tablesql_storage_retry_wait_seconds",
            "Time the store waited before its retries (throttled answers' hints included)",
            None,
            waited.metric_type(),
        )?;
        waited.encode(metric)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::MemoryStore;

    #[test]
    fn sqlstates_past_the_cap_count_as_other() {
        let m = Metrics::new(Arc::new(MemoryStore::new()), None);
        for i in 0..(MAX_SQLSTATES + 10) {
            m.error(&format!("X{i:04}"));
        }
        m.error("not a code");
        let text = m.encode().expect("encode");
        let lines = text
            .lines()
            .filter(|l| l.starts_with("tablesql_errors_total{"))
            .count();
        assert_eq!(lines, MAX_SQLSTATES + 1, "{text}");
        assert!(
            text.contains("tablesql_errors_total{sqlstate=\"other\"} 11"),
            "{text}"
        );
        m.completed("INSERT 0 3");
        m.completed("CREATE TABLE");
        assert!(text.contains("tablesql_storage_busy_total 0"), "{text}");
        let text = m.encode().expect("encode");
        assert!(
            text.contains("tablesql_statements_total{kind=\"insert\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("tablesql_statements_total{kind=\"ddl\"} 1"),
            "{text}"
        );
        // A kind counts where the family shows it, also after its first.
        m.completed("SELECT 1");
        m.completed("SELECT 0");
        m.completed("SHOW");
        let text = m.encode().expect("encode");
        for (kind, n) in [("select", 2), ("insert", 1), ("other", 1)] {
            assert!(
                text.contains(&format!("tablesql_statements_total{{kind=\"{kind}\"}} {n}")),
                "{text}"
            );
        }
    }

    #[test]
    fn durations_show_as_prometheus_clients_histogram_shows_them() {
        let took = [0.0005, 0.001, 0.003, 0.05, 2.0, 70.0, 100.0].map(Duration::from_secs_f64);
        let m = Metrics::new(Arc::new(MemoryStore::new()), None);
        let reference = prometheus_client::metrics::histogram::Histogram::new(
            prometheus_client::metrics::histogram::exponential_buckets(0.001, 4.0, 9),
        );
        for t in took {
            m.statement_took(t);
            reference.observe(t.as_secs_f64());
        }
        let mut registry = Registry::default();
        registry.register(
            "tablesql_statement_duration_seconds",
            "Time from a Query or Execute message to its answer's end",
            reference,
        );
        let mut expected = String::new();
        prometheus_client::encoding::text::encode(&mut expected, &registry).expect("encode");
        let series = |text: &str| -> Vec<String> {
            text.lines()
                .filter(|l| l.starts_with("tablesql_statement_duration_seconds"))
                .map(str::to_owned)
                .collect()
        };
        let (shown, expected) = (series(&m.encode().expect("encode")), series(&expected));
        assert_eq!(shown.len(), 12, "sum, count, 10 buckets: {shown:?}");
        // The sum is of whole nanoseconds here, of f64 seconds there: the
        // same to the last few digits.
        let sum = |lines: &[String]| -> f64 {
            lines[0]
                .rsplit_once(' ')
                .and_then(|(_, v)| v.parse().ok())
                .unwrap_or(f64::NAN)
        };
        assert!((sum(&shown) - sum(&expected)).abs() < 1e-9, "{shown:?}");
        assert_eq!(shown[1..], expected[1..]);
    }

    #[test]
    fn every_tag_kind_is_one_of_the_kinds_kept() {
        for tag in [
            "SELECT 1",
            "FETCH 2",
            "MOVE 1",
            "INSERT 0 1",
            "UPDATE 2",
            "DELETE 0",
            "MERGE 1",
            "COPY 5",
            "CREATE TABLE",
            "DROP VIEW",
            "ALTER TABLE",
            "TRUNCATE TABLE",
            "COMMENT",
            "ANALYZE",
            "BEGIN",
            "START TRANSACTION",
            "COMMIT",
            "ROLLBACK",
            "SAVEPOINT",
            "RELEASE",
            "PREPARE TRANSACTION",
            "SET",
            "",
        ] {
            assert!(KINDS.contains(&kind_of_tag(tag)), "{tag}");
        }
    }
}
