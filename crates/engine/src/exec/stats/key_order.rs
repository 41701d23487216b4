//! Whether a table's writes go where its keys end: the append-only (or
//! prepend-only) pattern the storage guidance warns of, where a date or a
//! counter as PartitionKey sends every insert to the last (or first) range
//! partition, so that one server takes all of them.
//!
//! Counted per statement, from the first and last PartitionKey it wrote
//! (`exec::write::dml::WrittenSpan`), against the range the statements recorded
//! before it wrote: within one statement the writes leave in key order
//! (`exec::write::dml` flushes its partitions sorted), so comparing write by
//! write would make every bulk statement look appended. The first
//! statement sets the range and counts for nothing.

use std::cmp::Ordering;

use crate::storage::key::cmp_utf16;

/// One table's written statements against the key range written before.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyOrder {
    /// The range of PartitionKeys written so far, `(first, last)`.
    range: Option<(String, String)>,
    /// Entities written by statements with a range before them.
    pub compared: u64,
    /// Of those, by statements that wrote only at or past the last
    /// PartitionKey written before.
    pub at_last: u64,
    /// Of those, by statements that wrote only at or before the first.
    pub at_first: u64,
    /// Statements that wrote past the last key (a new last partition).
    pub new_last: u64,
    /// Statements that wrote before the first key.
    pub new_first: u64,
}

/// Widens `range` to take in `first..=last` (PartitionKeys, in the
/// storage's order).
pub fn widen(range: &mut Option<(String, String)>, first: &str, last: &str) {
    match range {
        None => *range = Some((first.to_owned(), last.to_owned())),
        Some((lo, hi)) => {
            if cmp_utf16(first, lo) == Ordering::Less {
                first.clone_into(lo);
            }
            if cmp_utf16(last, hi) == Ordering::Greater {
                last.clone_into(hi);
            }
        }
    }
}

impl KeyOrder {
    /// A statement that wrote `n` entities to PartitionKeys from `first` to
    /// `last`.
    pub fn statement(&mut self, first: &str, last: &str, n: u64) {
        if let Some((lo, hi)) = &self.range {
            self.compared += n;
            let past_last = cmp_utf16(first, hi) != Ordering::Less;
            let before_first = cmp_utf16(last, lo) != Ordering::Greater;
            if past_last {
                self.at_last += n;
                self.new_last += u64::from(cmp_utf16(last, hi) == Ordering::Greater);
            }
            if before_first {
                self.at_first += n;
                self.new_first += u64::from(cmp_utf16(first, lo) == Ordering::Less);
            }
        }
        widen(&mut self.range, first, last);
    }

    /// The last PartitionKey written, if any.
    pub fn last(&self) -> Option<&str> {
        self.range.as_ref().map(|(_, l)| l.as_str())
    }

    /// The first PartitionKey written, if any.
    pub fn first(&self) -> Option<&str> {
        self.range.as_ref().map(|(f, _)| f.as_str())
    }

    /// Takes in another process's counts of the same table: the ranges'
    /// union, the counts summed (each process compared its statements
    /// against the range it had seen, so the sums are a lower bound of
    /// what one process seeing every statement would count).
    pub fn merge(&mut self, other: &KeyOrder) {
        if let Some((first, last)) = &other.range {
            widen(&mut self.range, first, last);
        }
        self.compared += other.compared;
        self.at_last += other.at_last;
        self.at_first += other.at_first;
        self.new_last += other.new_last;
        self.new_first += other.new_first;
    }

    /// The range written, as stored (`exec::stats::snapshot`).
    pub fn range(&self) -> Option<(&str, &str)> {
        self.range.as_ref().map(|(f, l)| (f.as_str(), l.as_str()))
    }

    /// Counts read back from storage.
    pub fn restored(range: Option<(String, String)>, counts: [u64; 5]) -> Self {
        let [compared, at_last, at_first, new_last, new_first] = counts;
        Self {
            range,
            compared,
            at_last,
            at_first,
            new_last,
            new_first,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(statements: &[(&str, &str)]) -> KeyOrder {
        let mut o = KeyOrder::default();
        for (first, last) in statements {
            o.statement(first, last, 1);
        }
        o
    }

    #[test]
    fn ascending_statements_append_and_descending_ones_prepend() {
        let up = run(&[("a", "a"), ("b", "b"), ("c", "d"), ("d", "d")]);
        assert_eq!((up.compared, up.at_last, up.new_last), (3, 3, 2));
        assert_eq!((up.at_first, up.new_first), (0, 0));
        let down = run(&[("d", "d"), ("c", "c"), ("b", "b")]);
        assert_eq!((down.at_first, down.new_first, down.at_last), (2, 2, 0));
    }

    #[test]
    fn statements_spread_over_the_range_are_neither() {
        let spread = run(&[("a", "z"), ("b", "y"), ("m", "n"), ("a", "zz")]);
        assert_eq!(
            (spread.compared, spread.at_last, spread.at_first),
            (3, 0, 0)
        );
        assert_eq!(spread.last(), Some("zz"));
    }
}
