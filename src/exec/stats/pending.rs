//! What one thread counted of the workload and not yet folded into the
//! process's statistics.
//!
//! Every point read records twice (the store's request, the statement's
//! run). Under one lock, each record took the lock's line and the maps'
//! lines from the core that recorded last: 4% of a prepared point query's
//! server time. So each thread records into a slot of its own
//! (`crate::striped`), and the slots are folded into the statistics at
//! the first record of a new second and before any read.
//!
//! The peaks are of seconds: a partition's busiest second is what every
//! thread read of it in that second, summed. So a slot holds one second's
//! counts, and a fold holds every slot's lock at once and applies them in
//! order of second. That makes it exact: a slot takes the second after
//! taking its lock, so what a fold finds was counted no later than the
//! fold's second, and what is counted after it no earlier; the statistics'
//! window never has to go back to a second it has left.

use foldhash::HashMap;

use super::workload::{Kept, MAX_STATEMENTS, Run, StatementStats, TableTraffic, traffic};

/// The most partitions and statements one slot holds before it is folded,
/// whatever the second: a bound on its memory, and far below
/// `MAX_PARTITIONS`, so a slot never counts a partition as one of the
/// table's others when the statistics have room for it.
const MOST: usize = 1024;

/// One slot's counts, all of one second.
#[derive(Debug, Default)]
pub(super) struct Pending {
    second: u64,
    /// Partitions, tables and statements held.
    entries: usize,
    tables: HashMap<String, TableTraffic>,
    statements: HashMap<String, StatementStats>,
}

impl Pending {
    /// Whether a record of `second` can go here: nothing is held, or what
    /// is held is of the same second and leaves room.
    pub(super) fn takes(&self, second: u64) -> bool {
        self.entries == 0 || (self.second == second && self.entries < MOST)
    }

    /// The second of what is held.
    pub(super) fn second(&self) -> u64 {
        self.second
    }

    /// One request to `table` that read `counts` entities per partition.
    pub(super) fn read<'a>(
        &mut self,
        second: u64,
        table: &str,
        counts: impl IntoIterator<Item = (&'a str, u64)>,
    ) {
        self.second = second;
        let tables = self.tables.len();
        let t = match self.tables.get_mut(table) {
            Some(t) => t,
            None => self.tables.entry(table.to_owned()).or_default(),
        };
        let partitions = t.partitions.len();
        let mut all = 0;
        for (pk, n) in counts {
            if let Some(p) = traffic(&mut t.partitions, pk) {
                p.requests += 1;
                p.add_read(second, n);
                all += n;
            }
        }
        t.totals.requests += 1;
        t.totals.add_read(second, all);
        let made = t.partitions.len() - partitions;
        self.entries += made + (self.tables.len() - tables);
    }

    /// One batch of `n` writes to `partition` of `table`, or its conflict.
    pub(super) fn wrote(
        &mut self,
        second: u64,
        table: &str,
        partition: &str,
        n: u64,
        conflict: bool,
    ) {
        self.second = second;
        let tables = self.tables.len();
        let t = match self.tables.get_mut(table) {
            Some(t) => t,
            None => self.tables.entry(table.to_owned()).or_default(),
        };
        let partitions = t.partitions.len();
        if let Some(p) = traffic(&mut t.partitions, partition) {
            p.requests += 1;
            t.totals.requests += 1;
            if conflict {
                p.conflicts += 1;
                t.totals.conflicts += 1;
            } else {
                p.add_written(second, n);
                t.totals.add_written(second, n);
            }
        }
        let made = t.partitions.len() - partitions;
        self.entries += made + (self.tables.len() - tables);
    }

    /// One run of `statement`.
    pub(super) fn ran(&mut self, second: u64, statement: &str, run: Run) {
        self.statement(second, statement, |s| s.add(run));
    }

    /// A run of `statement` refused for a conflict.
    pub(super) fn refused(&mut self, second: u64, statement: &str) {
        self.statement(second, statement, |s| s.conflicts += 1);
    }

    fn statement(
        &mut self,
        second: u64,
        statement: &str,
        record: impl FnOnce(&mut StatementStats),
    ) {
        self.second = second;
        match self.statements.get_mut(statement) {
            Some(s) => record(s),
            None => {
                self.entries += 1;
                record(self.statements.entry(statement.to_owned()).or_default());
            }
        }
    }

    /// Moves everything held into `kept`, leaving nothing.
    pub(super) fn fold_into(&mut self, kept: &mut Kept) {
        if self.entries == 0 {
            return;
        }
        kept.changes += 1;
        let second = self.second;
        for (name, mut held) in self.tables.drain() {
            let t = kept.tables.entry(name).or_default();
            for (pk, d) in held.partitions.drain() {
                if let Some(p) = traffic(&mut t.partitions, &pk) {
                    p.fold(second, &d);
                }
            }
            t.totals.fold(second, &held.totals);
        }
        for (q, s) in self.statements.drain() {
            fold_statement(kept, q, &s);
        }
        self.entries = 0;
    }
}

/// Takes in one slot's runs of `q`. A statement not kept takes the place
/// of the least called when the statistics are full, as a run recorded
/// directly did; one that only had conflicts does not.
fn fold_statement(kept: &mut Kept, q: String, s: &StatementStats) {
    if let Some(mine) = kept.statements.get_mut(&q) {
        mine.merge(s);
        return;
    }
    if kept.statements.len() >= MAX_STATEMENTS {
        if s.calls == 0 {
            return;
        }
        let least = kept
            .statements
            .iter()
            .min_by_key(|(_, s)| s.calls)
            .map(|(k, _)| k.clone());
        if let Some(least) = least {
            kept.statements.remove(&least);
        }
    }
    kept.statements.insert(q, s.clone());
}
