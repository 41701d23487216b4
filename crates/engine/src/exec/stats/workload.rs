//! The engine's workload statistics, as `pg_stat_statements` keeps them.
//!
//! - Per normalized statement (its literals as `$n`): calls, time, rows,
//!   the entities its scans examined and returned (their ratio is the
//!   query's density), its requests, its billable transactions by kind,
//!   and its access path. Recorded when a
//!   statement's rows are done (`observe`, `ran`); read as
//!   `tablesql_stat_statements`.
//! - Per table and partition: entities read and written, requests, write
//!   conflicts, and the peak rates over one-second windows. The storage's
//!   guidance sizes a partition at about 2,000 entities/s, so the peak of
//!   a second, not an average, says whether a partition runs hot. Recorded
//!   by `ObservedStore` once per request (a get, a page, a batch), never
//!   per entity; read as `tablesql_stat_partitions`.
//!
//! Each thread records into a slot of its own, folded in at the next
//! second and before any read (`pending`), so that threads recording at
//! once do not take one lock.
//!
//! What this process counted is its own; what other processes over the
//! store counted (and this one before a restart) is read from the store
//! (`persist`) and merged in when the statistics are read: counts are
//! summed, peaks are the highest any one process saw, a statement's last
//! access path is the most recently stored one's, key ranges are joined.

use std::borrow::Cow;
use std::sync::Arc;

use foldhash::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};

use super::key_order::KeyOrder;
use super::pending::{Pending, fold_all};
use crate::storage::bill::Transactions;
use crate::striped::Striped;

/// One partition's traffic since the last reset.
#[derive(Debug, Clone, Default, Eq)]
pub struct PartitionTraffic {
    /// Entities the store returned from it.
    pub read: u64,
    /// Entities written to it (inserted, replaced, merged or deleted).
    pub written: u64,
    /// Requests that touched it: gets, pages, batches.
    pub requests: u64,
    /// Batches refused for a conflict (an entity that exists, is missing,
    /// or changed under its ETag).
    pub conflicts: u64,
    /// The most entities read within one second.
    pub peak_read_per_s: u64,
    /// The most entities written within one second.
    pub peak_written_per_s: u64,
    /// Writes that succeeded (batches, or single operations).
    pub writes: u64,
    /// The most writes within one second.
    pub peak_writes_per_s: u64,
    /// The second the `_in_window` counts count (this process's own).
    window: u64,
    read_in_window: u64,
    written_in_window: u64,
    writes_in_window: u64,
}

impl PartitionTraffic {
    /// Moves the window to `second`, its counts starting again.
    fn at(&mut self, second: u64) -> &mut Self {
        if self.window != second {
            self.window = second;
            self.read_in_window = 0;
            self.written_in_window = 0;
            self.writes_in_window = 0;
        }
        self
    }

    pub(super) fn add_read(&mut self, second: u64, n: u64) {
        let t = self.at(second);
        t.read += n;
        t.read_in_window += n;
        t.peak_read_per_s = t.peak_read_per_s.max(t.read_in_window);
    }

    pub(super) fn add_written(&mut self, second: u64, n: u64) {
        let t = self.at(second);
        t.written += n;
        t.written_in_window += n;
        t.peak_written_per_s = t.peak_written_per_s.max(t.written_in_window);
        t.writes += 1;
        t.writes_in_window += 1;
        t.peak_writes_per_s = t.peak_writes_per_s.max(t.writes_in_window);
    }

    /// Takes in `d`, what one thread counted in `second` (`pending`): its
    /// counts added to that second's as well as to the totals.
    pub(super) fn fold(&mut self, second: u64, d: &PartitionTraffic) {
        let t = self.at(second);
        t.requests += d.requests;
        t.conflicts += d.conflicts;
        t.read += d.read;
        t.read_in_window += d.read;
        t.peak_read_per_s = t.peak_read_per_s.max(t.read_in_window);
        t.written += d.written;
        t.written_in_window += d.written;
        t.peak_written_per_s = t.peak_written_per_s.max(t.written_in_window);
        t.writes += d.writes;
        t.writes_in_window += d.writes;
        t.peak_writes_per_s = t.peak_writes_per_s.max(t.writes_in_window);
    }
}

/// Equal counts and peaks: the current second's window is bookkeeping.
impl PartialEq for PartitionTraffic {
    fn eq(&self, o: &Self) -> bool {
        let counts = |t: &Self| {
            [
                t.read,
                t.written,
                t.requests,
                t.conflicts,
                t.peak_read_per_s,
                t.peak_written_per_s,
                t.writes,
                t.peak_writes_per_s,
            ]
        };
        counts(self) == counts(o)
    }
}

impl PartitionTraffic {
    /// Takes in another process's traffic of the same partition: counts
    /// summed, peaks the higher (a lower bound of the store's own peak
    /// second: two processes' busiest seconds need not be the same one).
    pub fn merge(&mut self, o: &PartitionTraffic) {
        self.read += o.read;
        self.written += o.written;
        self.requests += o.requests;
        self.conflicts += o.conflicts;
        self.writes += o.writes;
        self.peak_read_per_s = self.peak_read_per_s.max(o.peak_read_per_s);
        self.peak_written_per_s = self.peak_written_per_s.max(o.peak_written_per_s);
        self.peak_writes_per_s = self.peak_writes_per_s.max(o.peak_writes_per_s);
    }
}

/// One row of `tablesql_stat_partitions`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionRow {
    /// The storage table.
    pub table: String,
    /// The PartitionKey.
    pub partition: String,
    /// Its traffic.
    pub traffic: PartitionTraffic,
}

/// What one run of a statement did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Run {
    /// From the start of its execution to its last row.
    pub elapsed: Duration,
    /// Rows it answered (a write: rows written).
    pub rows: u64,
    /// Entities its scans examined.
    pub scanned: u64,
    /// Entities its scans returned.
    pub returned: u64,
    /// Requests its scans sent.
    pub requests: u64,
    /// Its billable transactions, by kind: reads and writes
    /// (`exec::bill`).
    pub bill: Transactions,
    /// Retries the store made for its requests, reads and writes.
    pub retries: u64,
    /// Its access path (`point`, `row_range`, `full_scan`, ... joined by
    /// `+`; `none` where it read no table).
    pub path: Cow<'static, str>,
    /// The storage table it read whole entities of, without a filter or a
    /// projection, if it did.
    pub whole: Option<String>,
    /// The storage table it wrote, or else the first it read.
    pub table: Option<Arc<str>>,
    /// The first and last PartitionKey it wrote, and the entities, if it
    /// wrote any.
    pub span: Option<(String, String, u64)>,
}

impl Run {
    /// A point read of `rows` entities of `table` by `requests` that took
    /// `retries` and were billed `bill` (`planner::point`).
    pub fn point(
        elapsed: Duration,
        rows: usize,
        (requests, retries, bill): (u64, u64, Transactions),
        table: Arc<str>,
    ) -> Self {
        let rows = rows as u64;
        Self {
            elapsed,
            rows,
            scanned: rows,
            returned: rows,
            requests,
            bill,
            retries,
            path: Cow::Borrowed("point"),
            whole: None,
            table: Some(table),
            span: None,
        }
    }
}

/// A normalized statement's runs since the last reset.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StatementStats {
    /// Runs.
    pub calls: u64,
    /// Time of all runs.
    pub total: Duration,
    /// The fastest run.
    pub min: Duration,
    /// The slowest run.
    pub max: Duration,
    /// Rows of all runs.
    pub rows: u64,
    /// Entities examined, all runs.
    pub scanned: u64,
    /// Entities returned, all runs.
    pub returned: u64,
    /// Requests, all runs.
    pub requests: u64,
    /// Billable transactions by kind, all runs.
    pub bill: Transactions,
    /// Retries the store made, all runs.
    pub retries: u64,
    /// Runs that failed because the store refused a write for a conflict
    /// (409, 412); not counted in `calls`.
    pub conflicts: u64,
    /// The access path of the last run (of runs on several threads within
    /// one second, one of theirs).
    pub path: Cow<'static, str>,
    /// The storage table the last run read whole entities of, if it did.
    pub whole: Option<String>,
    /// The storage table the last run wrote, or else the first it read.
    pub table: Option<Arc<str>>,
}

impl StatementStats {
    pub(super) fn add(&mut self, run: Run) {
        self.min = if self.calls == 0 {
            run.elapsed
        } else {
            self.min.min(run.elapsed)
        };
        self.max = self.max.max(run.elapsed);
        self.calls += 1;
        self.total += run.elapsed;
        self.rows += run.rows;
        self.scanned += run.scanned;
        self.returned += run.returned;
        self.requests += run.requests;
        self.bill += run.bill;
        self.retries += run.retries;
        self.path = run.path;
        self.whole = run.whole;
        self.table = run.table;
    }
}

impl StatementStats {
    /// Takes in runs of the same statement by `newer`, counted later (or
    /// by this process, over what is stored): counts and times summed, the
    /// fastest and slowest run across both, the last access path `newer`'s.
    pub fn merge(&mut self, newer: &StatementStats) {
        if newer.calls > 0 {
            self.min = if self.calls == 0 {
                newer.min
            } else {
                self.min.min(newer.min)
            };
            self.max = self.max.max(newer.max);
            self.path = newer.path.clone();
            self.whole = newer.whole.clone();
            self.table = newer.table.clone();
        }
        self.calls += newer.calls;
        self.total += newer.total;
        self.rows += newer.rows;
        self.scanned += newer.scanned;
        self.returned += newer.returned;
        self.requests += newer.requests;
        self.bill += newer.bill;
        self.retries += newer.retries;
        self.conflicts += newer.conflicts;
    }
}

/// The most statements kept (`pg_stat_statements.max`): a new one past it
/// takes the place of the least called.
pub const MAX_STATEMENTS: usize = 5000;
/// The most partitions kept per table: past it, a table's other partitions
/// are counted together under [`OTHER_PARTITIONS`].
pub const MAX_PARTITIONS: usize = 100_000;
/// The PartitionKey the partitions past `MAX_PARTITIONS` are counted under.
pub const OTHER_PARTITIONS: &str = "(other partitions)";

/// The statistics of one engine (see the module doc).
pub struct Workload {
    /// Where the one-second windows count from.
    origin: Instant,
    /// This process's own (with what it took over from stopped ones),
    /// but for what `pending` holds.
    inner: Mutex<Kept>,
    /// What each thread counted and `inner` does not have yet.
    pending: Striped<Mutex<Pending>>,
    /// Other processes', as last read from the store, merged.
    others: Mutex<Kept>,
    /// When `tablesql_stat_reset()` last ran here and was not yet stored.
    reset_at: Mutex<Option<DateTime<Utc>>>,
    /// `false`: nothing is kept (`EngineOptions::statistics`).
    enabled: bool,
    /// The second a test sets, instead of the clock's.
    #[cfg(test)]
    fixed_second: Option<std::sync::atomic::AtomicU64>,
}

/// Statistics of one process, or several merged.
#[derive(Debug, Clone)]
pub struct Kept {
    pub(super) since: DateTime<Utc>,
    /// By storage table.
    pub(super) tables: HashMap<String, TableTraffic>,
    /// By normalized text.
    pub(super) statements: HashMap<String, StatementStats>,
    /// Raised by every record: unchanged since a flush, nothing is written.
    pub(super) changes: u64,
}

impl Kept {
    /// None, counted from `since`.
    pub fn empty(since: DateTime<Utc>) -> Self {
        Self {
            since,
            tables: HashMap::default(),
            statements: HashMap::default(),
            changes: 0,
        }
    }

    /// Whether nothing is counted.
    pub fn is_empty(&self) -> bool {
        self.tables.is_empty() && self.statements.is_empty()
    }

    /// Takes in `newer`'s counts (see the module doc for what each field's
    /// merge means); the earlier start is kept. No limit on statements:
    /// [`Kept::limit`] after.
    pub fn merge(&mut self, newer: &Kept) {
        self.since = self.since.min(newer.since);
        for (name, t) in &newer.tables {
            let mine = match self.tables.get_mut(name) {
                Some(m) => m,
                None => self.tables.entry(name.clone()).or_default(),
            };
            mine.merge(t);
        }
        for (q, s) in &newer.statements {
            match self.statements.get_mut(q) {
                Some(m) => m.merge(s),
                None => {
                    self.statements.insert(q.clone(), s.clone());
                }
            }
        }
    }

    /// Drops the least called statements past [`MAX_STATEMENTS`].
    pub fn limit(&mut self) {
        let over = self.statements.len().saturating_sub(MAX_STATEMENTS);
        if over == 0 {
            return;
        }
        let mut by_calls: Vec<(u64, String)> = self
            .statements
            .iter()
            .map(|(q, s)| (s.calls, q.clone()))
            .collect();
        by_calls.sort();
        for (_, q) in by_calls.into_iter().take(over) {
            self.statements.remove(&q);
        }
    }
}

/// One storage table's traffic.
#[derive(Debug, Default, Clone)]
pub(super) struct TableTraffic {
    /// By PartitionKey.
    pub(super) partitions: HashMap<String, PartitionTraffic>,
    /// All its partitions together: the table's peak seconds.
    pub(super) totals: PartitionTraffic,
    /// Its writes against the keys written before.
    pub(super) order: KeyOrder,
    /// Its billable transactions, by kind.
    pub(super) bill: Transactions,
}

impl TableTraffic {
    fn merge(&mut self, o: &TableTraffic) {
        self.bill += o.bill;
        for (pk, t) in &o.partitions {
            if let Some(p) = traffic(&mut self.partitions, pk) {
                p.merge(t);
            }
        }
        self.totals.merge(&o.totals);
        self.order.merge(&o.order);
    }
}

/// One storage table's traffic, as the advisor reads it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TableRow {
    /// The storage table.
    pub table: String,
    /// All its partitions together.
    pub totals: PartitionTraffic,
    /// Partitions read or written.
    pub partitions: usize,
    /// Its writes against the keys written before.
    pub order: KeyOrder,
    /// Its billable transactions, by kind.
    pub bill: Transactions,
}

impl std::fmt::Debug for Workload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kept = self.lock();
        f.debug_struct("Workload")
            .field("statements", &kept.statements.len())
            .field("tables", &kept.tables.len())
            .finish()
    }
}

impl Default for Workload {
    fn default() -> Self {
        let now = Utc::now();
        Self {
            origin: Instant::now(),
            enabled: true,
            inner: Mutex::new(Kept::empty(now)),
            others: Mutex::new(Kept::empty(now)),
            reset_at: Mutex::new(None),
            pending: Striped::default(),
            #[cfg(test)]
            fixed_second: None,
        }
    }
}

impl Workload {
    /// Statistics that keep nothing: an engine whose embedder turned them
    /// off (`EngineOptions::statistics`), and the benchmark of their cost.
    pub fn off() -> Self {
        Self {
            enabled: false,
            ..Self::default()
        }
    }
}

impl Workload {
    /// One read of `table`, billed `bill`, that read `counts` entities
    /// per partition (a partition with 0 still counts the request).
    pub fn read<'a>(
        &self,
        table: &str,
        counts: impl IntoIterator<Item = (&'a str, u64)>,
        bill: Transactions,
    ) {
        self.record(|p, second| p.read(second, table, counts, bill));
    }

    /// One batch of `n` writes to a partition of `table`, billed `bill`;
    /// `conflict` when the store refused it for one.
    pub fn wrote(&self, table: &str, written: (&str, u64), conflict: bool, bill: Transactions) {
        self.record(|p, second| p.wrote(second, table, written, conflict, bill));
    }

    /// One run of the statement whose normalized text is `statement`.
    pub fn ran(&self, statement: &str, run: Run) {
        if !self.enabled {
            return;
        }
        if let (Some(table), Some((first, last, n))) = (&run.table, &run.span) {
            // A write is classed against the key range written before it,
            // which slots counted apart would each see only part of: it
            // goes straight into the one range.
            let mut kept = lock(&self.inner);
            kept.changes += 1;
            let t = match kept.tables.get_mut(table.as_ref()) {
                Some(t) => t,
                None => kept.tables.entry(table.to_string()).or_default(),
            };
            t.order.statement(first, last, *n);
        }
        self.record(|p, second| p.ran(second, statement, run));
    }

    /// A run of `statement` that the store refused for a conflict.
    pub fn refused(&self, statement: &str) {
        if !self.enabled {
            return;
        }
        self.record(|p, second| p.refused(second, statement));
    }

    /// Every statement's runs, by normalized text.
    pub fn statements(&self) -> Vec<(String, StatementStats)> {
        self.merged(|kept| {
            let mut rows: Vec<_> = kept
                .statements
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            rows.sort_by(|a, b| a.0.cmp(&b.0));
            rows
        })
    }

    /// Every partition's traffic, by table and PartitionKey.
    pub fn partitions(&self) -> Vec<PartitionRow> {
        self.merged(|kept| {
            let mut rows: Vec<PartitionRow> = kept
                .tables
                .iter()
                .flat_map(|(table, parts)| {
                    parts.partitions.iter().map(|(pk, t)| PartitionRow {
                        table: table.clone(),
                        partition: pk.clone(),
                        traffic: t.clone(),
                    })
                })
                .collect();
            rows.sort_by(|a, b| (&a.table, &a.partition).cmp(&(&b.table, &b.partition)));
            rows
        })
    }

    /// When the statistics started (the earliest start of the processes
    /// merged, or the last reset).
    pub fn since(&self) -> DateTime<Utc> {
        self.merged(|k| k.since)
    }

    /// Forgets everything kept, this process's and the others' read from
    /// the store; the store's are forgotten at the next flush
    /// (`persist`), which [`Workload::take_reset`] tells of.
    pub fn reset(&self) {
        let now = Utc::now();
        self.reset_to(now);
        *lock(&self.others) = Kept::empty(now);
        *lock(&self.reset_at) = Some(now);
    }

    /// Forgets this process's own counts, as of `at` (a reset another
    /// process stored).
    pub fn reset_to(&self, at: DateTime<Utc>) {
        let mut kept = self.lock();
        let changes = kept.changes + 1;
        *kept = Kept::empty(at);
        kept.changes = changes;
    }

    /// The reset not yet stored, if there was one.
    pub fn take_reset(&self) -> Option<DateTime<Utc>> {
        lock(&self.reset_at).take()
    }

    /// Puts back a reset whose storing failed.
    pub fn put_back_reset(&self, at: DateTime<Utc>) {
        lock(&self.reset_at).get_or_insert(at);
    }

    /// Whether this engine counts anything of its own.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// When this process's own counts start.
    pub fn own_since(&self) -> DateTime<Utc> {
        self.lock().since
    }

    /// This process's own counts, to store.
    pub fn own(&self) -> Kept {
        self.lock().clone()
    }

    /// Sets what other processes stored, merged.
    pub fn set_others(&self, others: Kept) {
        *lock(&self.others) = others;
    }

    /// Takes a stopped process's counts in as this process's own, to be
    /// stored as its own from now on.
    pub fn absorb(&self, stopped: &Kept) {
        let mut kept = self.lock();
        let since = kept.since;
        kept.merge(stopped);
        kept.since = since.min(stopped.since);
        kept.limit();
        kept.changes += 1;
    }

    /// `read` over this process's counts merged with the others'.
    fn merged<T>(&self, read: impl FnOnce(&Kept) -> T) -> T {
        let others = lock(&self.others);
        if others.is_empty() {
            drop(others);
            return read(&self.lock());
        }
        let mut all = others.clone();
        drop(others);
        all.merge(&self.lock());
        read(&all)
    }

    fn second(&self) -> u64 {
        #[cfg(test)]
        if let Some(s) = &self.fixed_second {
            return s.load(std::sync::atomic::Ordering::Relaxed);
        }
        self.origin.elapsed().as_secs()
    }

    /// Records into the calling thread's slot, after folding every slot
    /// when it holds another second's counts (or is full).
    fn record(&self, record: impl FnOnce(&mut Pending, u64)) {
        let slot = self.pending.local();
        loop {
            let mut pending = lock(slot);
            // Read under the slot's lock: see `pending`.
            let second = self.second();
            if pending.takes(second) {
                return record(&mut pending, second);
            }
            drop(pending);
            self.fold();
        }
    }

    /// Empties every slot into this process's counts. Another thread that
    /// shares the caller's slot may fill it again first, with a later
    /// second: `record` loops.
    fn fold(&self) {
        drop(self.lock());
    }

    /// This process's own counts, every slot folded in.
    fn lock(&self) -> std::sync::MutexGuard<'_, Kept> {
        let mut kept = lock(&self.inner);
        // Every slot's lock at once (a recorder holds only its own, and
        // never waits for `inner` while it does).
        let mut slots: Vec<_> = self.pending.all().map(lock).collect();
        fold_all(&mut kept, &mut slots);
        drop(slots);
        kept
    }

    /// Each storage table's traffic, by name.
    pub fn tables(&self) -> Vec<TableRow> {
        self.merged(|kept| {
            let mut rows: Vec<_> = kept
                .tables
                .iter()
                .map(|(t, traffic)| TableRow {
                    table: t.clone(),
                    totals: traffic.totals.clone(),
                    partitions: traffic.partitions.len(),
                    order: traffic.order.clone(),
                    bill: traffic.bill,
                })
                .collect();
            rows.sort_by(|a, b| a.table.cmp(&b.table));
            rows
        })
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic while recording leaves statistics, not data, suspect:
    // keep recording.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The entry of `pk`, made on first use (no allocation when it exists;
/// always `Some`), or the table's other partitions' past `MAX_PARTITIONS`.
pub(super) fn traffic<'a>(
    t: &'a mut HashMap<String, PartitionTraffic>,
    pk: &str,
) -> Option<&'a mut PartitionTraffic> {
    // Two lookups where it exists (every read of a partition counts), not
    // three.
    if !t.contains_key(pk) {
        let pk = if t.len() < MAX_PARTITIONS {
            pk
        } else {
            OTHER_PARTITIONS
        };
        if !t.contains_key(pk) {
            t.insert(pk.to_owned(), PartitionTraffic::default());
        }
        return t.get_mut(pk);
    }
    t.get_mut(pk)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peaks_are_per_second_and_totals_add_up() {
        let mut t = PartitionTraffic::default();
        t.add_read(0, 3);
        t.add_read(0, 4);
        t.add_read(1, 5);
        t.add_written(1, 2);
        t.add_written(3, 9);
        assert_eq!((t.read, t.peak_read_per_s), (12, 7));
        assert_eq!((t.written, t.peak_written_per_s), (11, 9));
    }

    #[test]
    fn reads_writes_and_conflicts_land_on_their_partition() {
        let w = Workload::default();
        w.read("T", [("a", 2), ("b", 0)], Transactions::default());
        w.wrote("T", ("a", 3), false, Transactions::default());
        w.wrote("T", ("a", 1), true, Transactions::default());
        let rows = w.partitions();
        assert_eq!(rows.len(), 2);
        let a = &rows[0].traffic;
        assert_eq!((a.read, a.written, a.requests, a.conflicts), (2, 3, 3, 1));
        assert_eq!(rows[1].traffic.requests, 1);
        w.reset();
        assert!(w.partitions().is_empty());
    }

    /// Statistics whose clock the test sets, at `second` to start.
    fn at_second(second: u64) -> Workload {
        Workload {
            fixed_second: Some(std::sync::atomic::AtomicU64::new(second)),
            ..Workload::default()
        }
    }

    fn set_second(w: &Workload, second: u64) {
        if let Some(s) = &w.fixed_second {
            s.store(second, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Reads of partition `a` of table `T`, `n` entities each, on a thread
    /// of its own (so in a slot of its own, mostly).
    fn read_on_a_thread(w: &Workload, reads: u64, n: u64) {
        std::thread::scope(|s| {
            s.spawn(|| {
                for _ in 0..reads {
                    w.read("T", [("a", n)], Transactions::default());
                }
            });
        });
    }

    #[test]
    fn a_seconds_peak_sums_what_every_thread_read_in_it() {
        let w = at_second(0);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..100 {
                        w.read("T", [("a", 1)], Transactions::default());
                    }
                });
            }
        });
        set_second(&w, 1);
        read_on_a_thread(&w, 50, 1);
        set_second(&w, 2);
        std::thread::scope(|s| {
            for _ in 0..3 {
                s.spawn(|| w.read("T", [("a", 10)], Transactions::default()));
            }
        });
        let a = &w.partitions()[0].traffic;
        assert_eq!((a.read, a.requests, a.peak_read_per_s), (480, 453, 400));
        let totals = &w.tables()[0].totals;
        assert_eq!((totals.read, totals.peak_read_per_s), (480, 400));
    }

    #[test]
    fn a_slot_of_an_earlier_second_folds_before_a_later_one() {
        let w = at_second(0);
        std::thread::scope(|s| {
            // This thread takes its slot before the thread that reads in
            // the earlier second, and reads in the later one: its slot
            // comes first and holds the later second.
            let (read, reads) = std::sync::mpsc::channel::<u64>();
            let (answer, answered) = std::sync::mpsc::channel::<()>();
            let w = &w;
            s.spawn(move || {
                for n in reads {
                    w.read("T", [("a", n)], Transactions::default());
                    let _ = answer.send(());
                }
            });
            let on_first = |n| {
                let _ = read.send(n);
                let _ = answered.recv();
            };
            on_first(0);
            assert_eq!(w.partitions()[0].traffic.requests, 1);
            read_on_a_thread(w, 1, 3);
            set_second(w, 1);
            on_first(5);
            assert_eq!(w.partitions()[0].traffic.peak_read_per_s, 5);
        });
        read_on_a_thread(&w, 1, 7);
        let a = &w.partitions()[0].traffic;
        assert_eq!((a.read, a.peak_read_per_s), (15, 12));
    }

    #[test]
    fn writes_and_reads_of_one_second_share_its_window() {
        let w = at_second(4);
        w.wrote("T", ("a", 5), false, Transactions::default());
        read_on_a_thread(&w, 2, 1);
        w.wrote("T", ("a", 1), true, Transactions::default());
        set_second(&w, 5);
        w.wrote("T", ("a", 2), false, Transactions::default());
        let a = &w.partitions()[0].traffic;
        assert_eq!((a.written, a.writes, a.conflicts, a.requests), (7, 2, 1, 5));
        assert_eq!((a.peak_written_per_s, a.peak_writes_per_s), (5, 1));
        assert_eq!((a.read, a.peak_read_per_s), (2, 2));
    }

    #[test]
    fn the_least_called_statement_makes_room() {
        let w = Workload::default();
        w.ran("kept", Run::default());
        w.ran("kept", Run::default());
        for i in 0..MAX_STATEMENTS {
            w.ran(&format!("s{i}"), Run::default());
        }
        let kept = w.statements();
        assert_eq!(kept.len(), MAX_STATEMENTS);
        assert!(kept.iter().any(|(q, s)| q == "kept" && s.calls == 2));
    }
}
