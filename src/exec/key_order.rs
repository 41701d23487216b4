//! Whether a table's writes go where its keys end: the append-only (or
//! prepend-only) pattern the storage guidance warns of, where a date or a
//! counter as PartitionKey sends every insert to the last (or first) range
//! partition, so that one server takes all of them.
//!
//! A write counts against the keys written by *earlier statements*: a
//! statement's own writes leave in key order (`exec::dml` flushes its
//! partitions sorted), so within one statement every write would look like
//! an append. The statement boundary is an epoch the workload bumps at each
//! statement's end; the first epoch's writes set the range and count for
//! nothing.

use std::cmp::Ordering;

use crate::storage::key::cmp_utf16;

/// One table's writes against the key range written before.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyOrder {
    /// The range of PartitionKeys written by statements before `epoch`.
    before: Option<(String, String)>,
    /// The range including `epoch`'s writes.
    now: Option<(String, String)>,
    /// The statement epoch `now` has last seen.
    epoch: u64,
    /// Whether this epoch has gone past the last key, and before the first.
    went_last: bool,
    went_first: bool,
    /// Entities written with a range before them to compare with.
    pub compared: u64,
    /// Of those, written at or past the last PartitionKey written before.
    pub at_last: u64,
    /// Of those, written at or before the first.
    pub at_first: u64,
    /// Statements that wrote past the last key (a new last partition).
    pub new_last: u64,
    /// Statements that wrote before the first key.
    pub new_first: u64,
}

impl KeyOrder {
    /// `n` entities written to `pk` during statement epoch `epoch`.
    pub fn wrote(&mut self, epoch: u64, pk: &str, n: u64) {
        if epoch != self.epoch {
            self.epoch = epoch;
            self.before.clone_from(&self.now);
            self.went_last = false;
            self.went_first = false;
        }
        if let Some((first, last)) = &self.before {
            self.compared += n;
            let past_last = cmp_utf16(pk, last);
            if past_last != Ordering::Less {
                self.at_last += n;
            }
            if past_last == Ordering::Greater && !self.went_last {
                self.went_last = true;
                self.new_last += 1;
            }
            let before_first = cmp_utf16(pk, first);
            if before_first != Ordering::Greater {
                self.at_first += n;
            }
            if before_first == Ordering::Less && !self.went_first {
                self.went_first = true;
                self.new_first += 1;
            }
        }
        match &mut self.now {
            None => self.now = Some((pk.to_owned(), pk.to_owned())),
            Some((first, last)) => {
                if cmp_utf16(pk, first) == Ordering::Less {
                    pk.clone_into(first);
                }
                if cmp_utf16(pk, last) == Ordering::Greater {
                    pk.clone_into(last);
                }
            }
        }
    }

    /// The last PartitionKey written, if any.
    pub fn last(&self) -> Option<&str> {
        self.now.as_ref().map(|(_, l)| l.as_str())
    }

    /// The first PartitionKey written, if any.
    pub fn first(&self) -> Option<&str> {
        self.now.as_ref().map(|(f, _)| f.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(keys: &[&[&str]]) -> KeyOrder {
        let mut o = KeyOrder::default();
        for (epoch, statement) in keys.iter().enumerate() {
            for k in *statement {
                o.wrote(epoch as u64, k, 1);
            }
        }
        o
    }

    #[test]
    fn ascending_statements_append_and_descending_ones_prepend() {
        let up = run(&[&["a"], &["b"], &["c", "d"], &["d"]]);
        assert_eq!((up.compared, up.at_last, up.new_last), (4, 4, 2));
        assert_eq!((up.at_first, up.new_first), (0, 0));
        let down = run(&[&["d"], &["c"], &["b"]]);
        assert_eq!((down.at_first, down.new_first, down.at_last), (2, 2, 0));
    }

    #[test]
    fn one_statement_in_key_order_is_no_evidence() {
        let load = run(&[&["a", "b", "c", "d", "e"]]);
        assert_eq!(load.compared, 0);
        let spread = run(&[&["a", "m", "z"], &["b", "n", "y"]]);
        assert_eq!(
            (spread.compared, spread.at_last, spread.at_first),
            (3, 0, 0)
        );
    }
}
