//! Row locks of `SELECT ... FOR UPDATE | FOR SHARE` among the sessions of
//! one engine.
//!
//! The store has no locks: a block's reads are made safe by validating them
//! at COMMIT (`transaction.rs`), so two clients that read a row `FOR
//! UPDATE` and both write it cannot both commit. That is correct, but it
//! is not what PostgreSQL's clients expect of `FOR UPDATE`: the second
//! one waits at its SELECT until the first ends, `NOWAIT` makes it fail at
//! once (55P03), and a job queue's `SKIP LOCKED` passes over the row to the
//! next one. Without locks, every worker of such a queue takes the same
//! job and all but one fail at COMMIT.
//!
//! So the sessions of one engine (one server) keep a table of the rows
//! they locked, as CockroachDB keeps its unreplicated locks in memory: a
//! lock orders the sessions that share it and never replaces validation.
//! Sessions of other processes do not see it, and meet at COMMIT (40001).
//! A lock is held until its block ends (or, outside a block, until its
//! statement does); a waiter that would close a cycle of waits fails with
//! 40P01, as PostgreSQL's deadlock detector makes one of them.
//!
//! The rule: [`RowLocks::lock`] is called for the rows a locking read
//! returned, before the statement sees them, and a row it had to wait for
//! is read again (its holder may have changed it: PostgreSQL's read
//! committed answers with the version the holder left);
//! [`RowLocks::release`] when the owner's block (or statement) ends, which
//! wakes every waiter to look again.

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, MutexGuard};

use datafusion::sql::sqlparser::ast::{LockType, NonBlock, Query};

use crate::storage::{PartitionKey, RowKey, StorageError, TableName, TransactionScope};

/// How strongly a read locks its rows. PostgreSQL's `FOR NO KEY UPDATE` is
/// held as `Update` and `FOR KEY SHARE` as `Share` (the parser reads them
/// so): a stronger lock never admits what the weaker one excludes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Strength {
    /// `FOR SHARE`: other sessions may read the row `FOR SHARE` too.
    Share,
    /// `FOR UPDATE`: no other session may lock the row.
    Update,
}

impl Strength {
    /// Whether a lock of this strength and one of `other`, held by two
    /// sessions, exclude each other.
    pub fn conflicts(self, other: Strength) -> bool {
        !(self == Strength::Share && other == Strength::Share)
    }
}

/// What a locking read does with a row another session holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitPolicy {
    /// Waits until its holder's block ends.
    Wait,
    /// `NOWAIT`: fails at once (55P03).
    NoWait,
    /// `SKIP LOCKED`: leaves the row out of its answer.
    SkipLocked,
}

/// The lock a statement's reads take (`FOR UPDATE NOWAIT` ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Locking {
    /// How strongly.
    pub strength: Strength,
    /// What it does with a row held by another session.
    pub wait: WaitPolicy,
}

impl Locking {
    /// The lock `query`'s locking clauses ask for, if any: the strongest of
    /// them, and the most impatient policy (`SKIP LOCKED` over `NOWAIT`
    /// over waiting). The clauses' `OF` lists are not told apart: every
    /// table the statement reads is locked, which locks more rows than
    /// PostgreSQL would, never fewer.
    pub fn of(query: &Query) -> Option<Locking> {
        let strength = query
            .locks
            .iter()
            .map(|l| match l.lock_type {
                LockType::Share => Strength::Share,
                LockType::Update => Strength::Update,
            })
            .max()?;
        let wait = if query
            .locks
            .iter()
            .any(|l| l.nonblock == Some(NonBlock::SkipLocked))
        {
            WaitPolicy::SkipLocked
        } else if query
            .locks
            .iter()
            .any(|l| l.nonblock == Some(NonBlock::Nowait))
        {
            WaitPolicy::NoWait
        } else {
            WaitPolicy::Wait
        };
        Some(Locking { strength, wait })
    }
}

/// How a row's lock went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Taken {
    /// Held, without waiting.
    Now,
    /// Held after its holder let go: the row may have changed meanwhile.
    AfterWait,
    /// Held by another, and `SKIP LOCKED` passes over it.
    Skipped,
}

/// Who holds locks: one session (its block's, or its statement's outside a
/// block).
pub type Owner = u64;

/// A row of a table.
type Row = (TableName, PartitionKey, RowKey);

#[derive(Debug, Default)]
struct Table {
    /// Each locked row's holders (several only when all hold `Share`).
    rows: HashMap<Row, Vec<(Owner, Strength)>>,
    /// The rows each owner holds, so that its release visits only them.
    held: HashMap<Owner, Vec<Row>>,
    /// Each wait under way (by its number: one owner's statement may wait
    /// in several scans at once): who waits, and for whom.
    waits: HashMap<u64, (Owner, Vec<Owner>)>,
}

impl Table {
    /// Takes `row` for `owner`, or names the owners in the way.
    fn try_take(&mut self, owner: Owner, row: &Row, strength: Strength) -> Result<(), Vec<Owner>> {
        let holders = self.rows.entry(row.clone()).or_default();
        let blocking: Vec<Owner> = holders
            .iter()
            .filter(|(o, s)| *o != owner && s.conflicts(strength))
            .map(|(o, _)| *o)
            .collect();
        if !blocking.is_empty() {
            return Err(blocking);
        }
        match holders.iter_mut().find(|(o, _)| *o == owner) {
            Some((_, held)) => *held = (*held).max(strength),
            None => {
                holders.push((owner, strength));
                self.held.entry(owner).or_default().push(row.clone());
            }
        }
        Ok(())
    }

    /// Whether `owner` waiting for `blocking` closes a cycle of waits.
    fn closes_cycle(&self, owner: Owner, blocking: &[Owner]) -> bool {
        let mut seen = HashSet::new();
        let mut next: Vec<Owner> = blocking.to_vec();
        while let Some(o) = next.pop() {
            if o == owner {
                return true;
            }
            if seen.insert(o) {
                for (waiter, on) in self.waits.values() {
                    if *waiter == o {
                        next.extend(on.iter().copied());
                    }
                }
            }
        }
        false
    }
}

/// The row locks of one engine's sessions.
#[derive(Debug, Default)]
pub struct RowLocks {
    table: Mutex<Table>,
    /// Raised at every release: waiters look again.
    released: tokio::sync::Notify,
}

/// Takes a waiter's entry out of the waits when it stops waiting, whether
/// it got its lock, failed, or its statement was cancelled.
struct Waiting<'a> {
    locks: &'a RowLocks,
    id: u64,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.locks.table().waits.remove(&self.id);
    }
}

/// Numbers each wait apart.
static WAIT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl RowLocks {
    fn table(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Locks `row` of `table` for `owner` as `locking` asks.
    pub async fn lock(
        &self,
        owner: Owner,
        table: &TableName,
        pk: &PartitionKey,
        rk: &RowKey,
        locking: Locking,
    ) -> Result<Taken, StorageError> {
        let row = (table.clone(), pk.clone(), rk.clone());
        let id = WAIT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut waiting = None;
        loop {
            // Registered before the look, so a release between the look
            // and the wait is not missed.
            let released = self.released.notified();
            tokio::pin!(released);
            released.as_mut().enable();
            {
                let mut t = self.table();
                match t.try_take(owner, &row, locking.strength) {
                    Ok(()) if waiting.is_some() => return Ok(Taken::AfterWait),
                    Ok(()) => return Ok(Taken::Now),
                    Err(blocking) => match locking.wait {
                        WaitPolicy::SkipLocked => return Ok(Taken::Skipped),
                        WaitPolicy::NoWait => {
                            return Err(StorageError::Transaction(
                                TransactionScope::LockNotAvailable {
                                    table: table.to_string(),
                                },
                            ));
                        }
                        WaitPolicy::Wait => {
                            if t.closes_cycle(owner, &blocking) {
                                return Err(StorageError::Transaction(
                                    TransactionScope::Deadlock {
                                        table: table.to_string(),
                                    },
                                ));
                            }
                            t.waits.insert(id, (owner, blocking));
                        }
                    },
                }
            };
            waiting.get_or_insert(Waiting { locks: self, id });
            released.await;
        }
    }

    /// Releases every lock `owner` holds, and wakes the waiters.
    pub fn release(&self, owner: Owner) {
        let any = {
            let mut t = self.table();
            let rows = t.held.remove(&owner).unwrap_or_default();
            for row in &rows {
                if let Some(holders) = t.rows.get_mut(row) {
                    holders.retain(|(o, _)| *o != owner);
                    if holders.is_empty() {
                        t.rows.remove(row);
                    }
                }
            }
            !rows.is_empty()
        };
        if any {
            self.released.notify_waiters();
        }
    }

    /// How many rows `owner` holds.
    pub fn held_by(&self, owner: Owner) -> usize {
        self.table().held.get(&owner).map_or(0, Vec::len)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn row(rk: &str) -> (TableName, PartitionKey, RowKey) {
        (
            TableName::new("accounts").expect("a name"),
            PartitionKey::new("p").expect("a key"),
            RowKey::new(rk).expect("a key"),
        )
    }

    fn locking(strength: Strength, wait: WaitPolicy) -> Locking {
        Locking { strength, wait }
    }

    async fn take(locks: &RowLocks, owner: Owner, rk: &str, l: Locking) -> Result<Taken, String> {
        let (t, p, r) = row(rk);
        locks
            .lock(owner, &t, &p, &r, l)
            .await
            .map_err(|e| e.to_string())
    }

    #[test]
    fn only_two_shares_admit_each_other() {
        use Strength::*;
        assert!(!Share.conflicts(Share));
        assert!(Share.conflicts(Update));
        assert!(Update.conflicts(Share));
        assert!(Update.conflicts(Update));
    }

    #[test]
    fn the_strongest_clause_and_the_most_impatient_policy_win() {
        let query = |sql: &str| crate::planner::sql::parse_query(sql).expect("parses");
        assert_eq!(Locking::of(&query("SELECT 1")), None);
        assert_eq!(
            Locking::of(&query(
                "SELECT * FROM a, b FOR SHARE OF a FOR UPDATE OF b NOWAIT"
            )),
            Some(locking(Strength::Update, WaitPolicy::NoWait))
        );
        assert_eq!(
            Locking::of(&query("SELECT * FROM a FOR SHARE SKIP LOCKED")),
            Some(locking(Strength::Share, WaitPolicy::SkipLocked))
        );
    }

    #[tokio::test]
    async fn nowait_fails_skip_locked_passes_and_a_share_admits_a_share() {
        let locks = RowLocks::default();
        let update = |w| locking(Strength::Update, w);
        assert_eq!(
            take(&locks, 1, "a", update(WaitPolicy::Wait)).await,
            Ok(Taken::Now)
        );
        // The owner itself takes its row again.
        assert_eq!(
            take(&locks, 1, "a", update(WaitPolicy::NoWait)).await,
            Ok(Taken::Now)
        );
        let refused = take(&locks, 2, "a", update(WaitPolicy::NoWait)).await;
        assert!(refused.is_err_and(|e| e.contains("could not obtain lock")));
        assert_eq!(
            take(&locks, 2, "a", update(WaitPolicy::SkipLocked)).await,
            Ok(Taken::Skipped)
        );
        let share = locking(Strength::Share, WaitPolicy::NoWait);
        assert_eq!(take(&locks, 2, "b", share).await, Ok(Taken::Now));
        assert_eq!(take(&locks, 3, "b", share).await, Ok(Taken::Now));
        assert!(
            take(&locks, 1, "b", update(WaitPolicy::NoWait))
                .await
                .is_err()
        );
        locks.release(1);
        assert_eq!(locks.held_by(1), 0);
        assert_eq!(
            take(&locks, 2, "a", update(WaitPolicy::NoWait)).await,
            Ok(Taken::Now)
        );
    }

    #[tokio::test]
    async fn a_waiter_gets_the_row_when_its_holder_ends() {
        let locks = Arc::new(RowLocks::default());
        let update = locking(Strength::Update, WaitPolicy::Wait);
        assert_eq!(take(&locks, 1, "a", update).await, Ok(Taken::Now));
        let waiter = {
            let locks = locks.clone();
            tokio::spawn(async move { take(&locks, 2, "a", update).await })
        };
        // Observed, not timed: the waiter is in the waits before the release.
        while !locks.table().waits.values().any(|(o, _)| *o == 2) {
            tokio::task::yield_now().await;
        }
        assert!(!waiter.is_finished());
        locks.release(1);
        assert_eq!(waiter.await.expect("the waiter ran"), Ok(Taken::AfterWait));
        assert!(locks.table().waits.is_empty());
    }

    #[tokio::test]
    async fn a_wait_that_closes_a_cycle_is_a_deadlock() {
        let locks = Arc::new(RowLocks::default());
        let update = locking(Strength::Update, WaitPolicy::Wait);
        assert_eq!(take(&locks, 1, "a", update).await, Ok(Taken::Now));
        assert_eq!(take(&locks, 2, "b", update).await, Ok(Taken::Now));
        let first = {
            let locks = locks.clone();
            tokio::spawn(async move { take(&locks, 1, "b", update).await })
        };
        while !locks.table().waits.values().any(|(o, _)| *o == 1) {
            tokio::task::yield_now().await;
        }
        let second = take(&locks, 2, "a", update).await;
        assert!(second.is_err_and(|e| e.contains("deadlock detected")));
        // The one refused ends its block; the other goes on.
        locks.release(2);
        assert_eq!(first.await.expect("the waiter ran"), Ok(Taken::AfterWait));
    }
}
