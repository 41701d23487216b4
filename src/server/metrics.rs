//! The server's metrics, in Prometheus' text format (`serve
//! --metrics-listen`): connections, statements by kind, errors by
//! SQLSTATE, statement durations, and the store's requests, retries and
//! busy answers. Every label takes its values from a fixed set (an error's
//! SQLSTATE up to [`MAX_SQLSTATES`] distinct codes, then `other`): never a
//! table's name or a statement's text, so that a scrape stays the same
//! size however many tables and statements the server sees.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::storage::TableStore;
use crate::storage::metered::StoreCounters;

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
    statements: Family<Label, Counter>,
    /// The family's counter of each kind, as first used: a statement's
    /// count is one atomic add, not the family's lock and a label made.
    by_kind: [std::sync::OnceLock<Counter>; KINDS.len()],
    errors: Family<Label, Counter>,
    sqlstates: Mutex<HashSet<String>>,
    duration: Histogram,
}

impl Metrics {
    /// Metrics of a server over `store`; with `counters`, its requests by
    /// operation (a store wrapped by [`crate::storage::metered::MeteredStore`]).
    pub fn new(store: Arc<dyn TableStore>, counters: Option<Arc<StoreCounters>>) -> Self {
        let mut registry = Registry::default();
        let connections = Counter::default();
        let active = Gauge::default();
        let moved = Counter::default();
        let statements = Family::<Label, Counter>::default();
        let errors = Family::<Label, Counter>::default();
        // 1 ms to about 65 s.
        let duration = Histogram::new(exponential_buckets(0.001, 4.0, 9));
        registry.register(
            "tablesql_connections",
            "Client connections accepted",
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
            "tablesql_statements",
            "Statements completed, by kind (select, insert, update, delete, ddl, copy, transaction, other)",
            statements.clone(),
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
            statements,
            by_kind: Default::default(),
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

    pub(super) fn connection_opened(&self) {
        self.connections.inc();
        self.active.inc();
    }

    pub(super) fn connection_closed(&self) {
        self.active.dec();
    }

    pub(super) fn connection_moved(&self) {
        self.moved.inc();
    }

    /// A statement completed, as its command tag names it.
    pub(super) fn completed(&self, tag: &str) {
        let kind = kind_of_tag(tag);
        let i = KINDS
            .iter()
            .position(|k| *k == kind)
            .unwrap_or(KINDS.len() - 1);
        self.by_kind[i]
            .get_or_init(|| {
                self.statements
                    .get_or_create(&[("kind", kind.to_owned())])
                    .clone()
            })
            .inc();
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
        self.duration.observe(took.as_secs_f64());
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
                prometheus_client::metrics::MetricType::Counter,
            )?;
            for (operation, n) in counters.by_operation() {
                let labels = [("operation", operation)];
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
