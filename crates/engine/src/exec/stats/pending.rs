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

use std::ops::DerefMut;

use foldhash::HashMap;

use super::workload::{Kept, MAX_STATEMENTS, Run, StatementStats, TableTraffic, traffic};
use crate::storage::bill::Transactions;

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

    /// One read of `table`, billed `bill`, that read `counts` entities per
    /// partition.
    pub(super) fn read<'a>(
        &mut self,
        second: u64,
        table: &str,
        counts: impl IntoIterator<Item = (&'a str, u64)>,
        bill: Transactions,
    ) {
        self.table(second, table, |t| {
            t.bill += bill;
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
        });
    }

    /// One batch of `n` writes to `partition` of `table`, billed `bill`,
    /// or its conflict.
    pub(super) fn wrote(
        &mut self,
        second: u64,
        table: &str,
        (partition, n): (&str, u64),
        conflict: bool,
        bill: Transactions,
    ) {
        self.table(second, table, |t| {
            t.bill += bill;
            let Some(p) = traffic(&mut t.partitions, partition) else {
                return;
            };
            p.requests += 1;
            t.totals.requests += 1;
            if conflict {
                p.conflicts += 1;
                t.totals.conflicts += 1;
            } else {
                p.add_written(second, n);
                t.totals.add_written(second, n);
            }
        });
    }

    /// Runs `record` on `table`'s counts of `second`, counting the table
    /// and the partitions it makes towards `MOST`.
    fn table(&mut self, second: u64, table: &str, record: impl FnOnce(&mut TableTraffic)) {
        self.second = second;
        let tables = self.tables.len();
        let t = match self.tables.get_mut(table) {
            Some(t) => t,
            None => self.tables.entry(table.to_owned()).or_default(),
        };
        let partitions = t.partitions.len();
        record(t);
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
            t.bill += held.bill;
        }
        for (q, s) in self.statements.drain() {
            fold_statement(kept, q, s);
        }
        self.entries = 0;
    }
}

/// Takes in one slot's runs of `q`. A statement not kept takes the place
/// of the least called when the statistics are full, as a run recorded
/// directly did; one that only had conflicts does not.
fn fold_statement(kept: &mut Kept, q: String, s: StatementStats) {
    if let Some(mine) = kept.statements.get_mut(&q) {
        mine.merge(&s);
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
    kept.statements.insert(q, s);
}

/// Moves every slot's counts into `kept`, the slots of earlier seconds
/// first; the caller holds all of them (see the module doc).
pub(super) fn fold_all<P: DerefMut<Target = Pending>>(kept: &mut Kept, slots: &mut [P]) {
    slots.sort_by_key(|p| p.second);
    for p in slots {
        p.fold_into(kept);
    }
}

#[cfg(test)]
mod tests {
    use chrono::Utc;

    use super::*;
    use crate::exec::stats::workload::PartitionTraffic;

    fn read(second: u64, pk: &str, n: u64) -> Pending {
        let mut p = Pending::default();
        p.read(second, "T", [(pk, n)], Transactions::default());
        p
    }

    fn partition(kept: &Kept, pk: &str) -> PartitionTraffic {
        kept.tables
            .get("T")
            .and_then(|t| t.partitions.get(pk))
            .cloned()
            .unwrap_or_default()
    }

    #[test]
    fn slots_fold_in_order_of_second_whatever_their_order() {
        let mut kept = Kept::empty(Utc::now());
        // The later second's slot first, as a slot of a lower index would be.
        fold_all(&mut kept, &mut [&mut read(1, "a", 5), &mut read(0, "a", 3)]);
        fold_all(&mut kept, &mut [&mut read(1, "a", 7)]);
        let a = partition(&kept, "a");
        assert_eq!((a.read, a.peak_read_per_s), (15, 12));
    }

    #[test]
    fn a_full_slot_folds_within_its_second_and_the_peak_stays_whole() {
        let mut kept = Kept::empty(Utc::now());
        let mut slot = Pending::default();
        let names: Vec<String> = (0..MOST + 10).map(|i| format!("p{i}")).collect();
        for name in &names {
            if !slot.takes(0) {
                fold_all(&mut kept, &mut [&mut slot]);
            }
            slot.read(0, "T", [(name.as_str(), 1)], Transactions::default());
        }
        assert!(slot.takes(0), "the slot was folded on the way");
        fold_all(&mut kept, &mut [&mut slot]);
        let totals = kept.tables.get("T").map(|t| t.totals.clone());
        let totals = totals.unwrap_or_default();
        let all = names.len() as u64;
        assert_eq!((totals.read, totals.peak_read_per_s), (all, all));
        let partitions = kept.tables.get("T").map(|t| t.partitions.len());
        assert_eq!(partitions, Some(names.len()));
    }

    #[test]
    fn a_refusal_of_a_new_statement_is_dropped_when_the_statistics_are_full() {
        let mut kept = Kept::empty(Utc::now());
        let mut slot = Pending::default();
        for i in 0..MAX_STATEMENTS {
            slot.ran(0, &format!("s{i}"), Run::default());
            if !slot.takes(0) {
                fold_all(&mut kept, &mut [&mut slot]);
            }
        }
        fold_all(&mut kept, &mut [&mut slot]);
        slot.refused(0, "refused");
        slot.ran(0, "ran", Run::default());
        fold_all(&mut kept, &mut [&mut slot]);
        assert_eq!(kept.statements.len(), MAX_STATEMENTS);
        assert!(!kept.statements.contains_key("refused"));
        assert!(kept.statements.contains_key("ran"));
    }
}
