//! What the service did, per partition, per range server and for the
//! account: the figures a test or a benchmark reads to say what a query cost.

use std::collections::BTreeMap;
use std::sync::Mutex;

use serde_json::{Value, json};

/// Requests, busy answers and entities of one partition, server or account.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    /// Requests that reached it (a query counts once for each partition and
    /// server its page read; a page that read none, an empty one, once
    /// where it started: the partition it names, `""` for the table's start).
    pub requests: u64,
    /// Requests refused as busy (503 ServerBusy, 429) or timed out (500).
    pub throttled: u64,
    /// Entities read, whether the filter kept them or not.
    pub scanned: u64,
    /// Entities answered.
    pub returned: u64,
}

impl Counts {
    fn add(&mut self, other: &Counts) {
        self.requests += other.requests;
        self.throttled += other.throttled;
        self.scanned += other.scanned;
        self.returned += other.returned;
    }

    fn json(&self) -> Value {
        json!({
            "requests": self.requests,
            "throttled": self.throttled,
            "scanned": self.scanned,
            "returned": self.returned,
        })
    }
}

/// Counts so far.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Snapshot {
    pub account: Counts,
    /// By table and PartitionKey.
    pub partitions: BTreeMap<(String, String), Counts>,
    /// By table and range server number.
    pub servers: BTreeMap<(String, usize), Counts>,
}

impl Snapshot {
    /// The counts as JSON (`GET /_tablesql/counters`).
    pub fn json(&self) -> Value {
        let partitions: Vec<Value> = self
            .partitions
            .iter()
            .map(|((t, p), c)| json!({"table": t, "partition": p, "counts": c.json()}))
            .collect();
        let servers: Vec<Value> = self
            .servers
            .iter()
            .map(|((t, s), c)| json!({"table": t, "server": s, "counts": c.json()}))
            .collect();
        json!({"account": self.account.json(), "partitions": partitions, "servers": servers})
    }

    /// One table's counts summed over its servers.
    pub fn table(&self, table: &str) -> Counts {
        let mut sum = Counts::default();
        for ((t, _), c) in &self.servers {
            if t.eq_ignore_ascii_case(table) {
                sum.add(c);
            }
        }
        sum
    }
}

/// Where one piece of work landed.
#[derive(Debug, Clone, Copy)]
pub struct Place<'a> {
    pub table: &'a str,
    pub partition: &'a str,
    pub server: usize,
}

/// The counters, behind one lock: they change once per chunk of a page, not
/// per entity.
#[derive(Debug, Default)]
pub struct Counters {
    inner: Mutex<Snapshot>,
}

impl Counters {
    /// Adds `counts` to a partition and its server, and the entities to the
    /// account, which counts its requests once each in [`Counters::request`].
    pub fn add(&self, at: Place<'_>, counts: Counts) {
        let mut s = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        s.partitions
            .entry((at.table.to_owned(), at.partition.to_owned()))
            .or_default()
            .add(&counts);
        s.servers
            .entry((at.table.to_owned(), at.server))
            .or_default()
            .add(&counts);
        s.account.scanned += counts.scanned;
        s.account.returned += counts.returned;
    }

    /// Counts one request (and whether it was refused) for the account.
    pub fn request(&self, throttled: bool) {
        let mut s = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        s.account.requests += 1;
        s.account.throttled += u64::from(throttled);
    }

    pub fn snapshot(&self) -> Snapshot {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}
