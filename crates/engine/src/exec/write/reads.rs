//! The rows a transaction block read, validated at its COMMIT.
//!
//! A block that reads a row, decides, and writes must not commit over a
//! change another client made in between (the lost update): PostgreSQL
//! prevents it with row locks, CockroachDB and FoundationDB by checking
//! the versions a transaction read when it commits. The store has no
//! locks, so a block does the latter. The rows it must keep are those it
//! read `FOR UPDATE` or `FOR SHARE` (any level), or read at all under
//! REPEATABLE READ or SERIALIZABLE. Each is kept with the version (ETag,
//! or none for a row that was not there) the block first read:
//!
//! - a later read of that row that finds another version fails the
//!   statement at once (40001), so a block never acts on two versions of
//!   one row;
//! - a write of it is conditioned on that version, not on a fresh read;
//! - at COMMIT every such row the block did not write is read again, and
//!   any that changed fails the COMMIT (40001) before anything is written;
//! - in a block that writes, a row read `FOR UPDATE`, or any row a
//!   SERIALIZABLE block read, is also written back unchanged, If-Match
//!   that version, in the COMMIT's own writes (an empty Merge: it keeps
//!   every property and gives a new ETag). The check then holds at the
//!   instant the block's writes land, in the same entity group transaction
//!   when the block stays in one partition, where reading again before
//!   the writes leaves a moment between the two; and a concurrent block
//!   that read the row fails instead. This is how PostgreSQL's `FOR
//!   UPDATE` writes its lock into the row it locks, and how snapshot
//!   isolation is made serializable by turning a read into a write
//!   (Fekete et al., "Making snapshot isolation serializable"). A block
//!   that writes nothing needs no such write: its reads were all current
//!   at one instant, between its last read and its first check.

use std::collections::HashMap;

use datafusion::sql::sqlparser::ast::TransactionIsolationLevel;

use super::commit::Change;
use crate::storage::{
    ETag, Entity, IfMatch, PartitionKey, Result, RowKey, StorageError, StoredEntity, TableName,
    TableStore, TransactionScope, WriteOp,
};

/// A block's isolation level, by PostgreSQL's names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Isolation {
    /// Rows are read as committed at each read; only rows read `FOR
    /// UPDATE`/`FOR SHARE` are kept. `READ UNCOMMITTED` is this, as in
    /// PostgreSQL.
    #[default]
    ReadCommitted,
    /// Every row read is kept: one the block read and another client
    /// changed fails the block (40001).
    RepeatableRead,
    /// As REPEATABLE READ, and every row read is written back at COMMIT
    /// (see the module doc); a read of a range is refused.
    Serializable,
}

impl Isolation {
    /// The level PostgreSQL's name gives (`SNAPSHOT` is SQL Server's: read as
    /// REPEATABLE READ, the nearest).
    pub fn of(level: &TransactionIsolationLevel) -> Self {
        match level {
            TransactionIsolationLevel::ReadUncommitted
            | TransactionIsolationLevel::ReadCommitted => Isolation::ReadCommitted,
            TransactionIsolationLevel::RepeatableRead | TransactionIsolationLevel::Snapshot => {
                Isolation::RepeatableRead
            }
            TransactionIsolationLevel::Serializable => Isolation::Serializable,
        }
    }

    /// The level from `transaction_isolation`'s text (`read committed`).
    pub fn named(name: &str) -> Option<Self> {
        match name.trim().to_ascii_lowercase().as_str() {
            "read uncommitted" | "read committed" => Some(Isolation::ReadCommitted),
            "repeatable read" | "snapshot" => Some(Isolation::RepeatableRead),
            "serializable" => Some(Isolation::Serializable),
            _ => None,
        }
    }

    /// Its name as `SHOW transaction_isolation` gives it.
    pub fn name(self) -> &'static str {
        match self {
            Isolation::ReadCommitted => "read committed",
            Isolation::RepeatableRead => "repeatable read",
            Isolation::Serializable => "serializable",
        }
    }
}

/// A row as the block first read it.
#[derive(Debug, Clone)]
struct Read {
    /// Its version then; `None`: it was not there.
    etag: Option<ETag>,
    /// Written back at COMMIT, If-Match that version.
    touch: bool,
}

type Key = (TableName, PartitionKey, RowKey);

/// The rows a block keeps (see the module doc).
#[derive(Debug, Clone, Default)]
pub struct ReadSet {
    rows: HashMap<Key, Read>,
}

fn changed(table: &TableName, pk: &PartitionKey, rk: &RowKey) -> StorageError {
    StorageError::Transaction(TransactionScope::ReadChanged {
        table: table.to_string(),
        partition_key: pk.as_str().to_owned(),
        row_key: rk.as_str().to_owned(),
    })
}

impl ReadSet {
    /// Whether the block keeps no row.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Keeps a row as read with `etag` (`None`: absent); a row kept with
    /// another version is a conflict. `touch` marks it to be written back.
    pub fn record(
        &mut self,
        table: &TableName,
        pk: &PartitionKey,
        rk: &RowKey,
        etag: Option<&ETag>,
        touch: bool,
    ) -> Result<()> {
        let key = (table.clone(), pk.clone(), rk.clone());
        match self.rows.get_mut(&key) {
            Some(read) if read.etag.as_ref() != etag => Err(changed(table, pk, rk)),
            Some(read) => {
                read.touch |= touch;
                Ok(())
            }
            None => {
                self.rows.insert(
                    key,
                    Read {
                        etag: etag.cloned(),
                        touch,
                    },
                );
                Ok(())
            }
        }
    }

    /// Whether the block read this row and found none: its write must then
    /// be an insert, which fails if another client put one there since.
    pub fn read_absent(&self, table: &TableName, pk: &PartitionKey, rk: &RowKey) -> bool {
        let key = (table.clone(), pk.clone(), rk.clone());
        self.rows.get(&key).is_some_and(|read| read.etag.is_none())
    }

    /// Whether a write may take `stored` as the version of a row: a conflict
    /// where the block read that row at another version.
    pub fn check(
        &self,
        table: &TableName,
        pk: &PartitionKey,
        rk: &RowKey,
        stored: Option<&StoredEntity>,
    ) -> Result<()> {
        let key = (table.clone(), pk.clone(), rk.clone());
        match self.rows.get(&key) {
            Some(read) if read.etag.as_ref() != stored.map(|s| &s.etag) => {
                Err(changed(table, pk, rk))
            }
            _ => Ok(()),
        }
    }

    /// Reads again each kept row that `written` says the block does not
    /// write (those are conditioned on the version read already): a
    /// conflict where one changed; else the writes back of the rows to be
    /// touched, with each as it is stored (what putting back restores).
    pub async fn validate(
        &self,
        store: &dyn TableStore,
        written: impl Fn(&TableName, &PartitionKey, &RowKey) -> bool,
    ) -> Result<Vec<Change>> {
        let mut touches = Vec::new();
        let mut keys: Vec<(&Key, &Read)> = self
            .rows
            .iter()
            .filter(|((t, p, r), _)| !written(t, p, r))
            .collect();
        // In key order, so that two blocks touch shared rows in one order.
        keys.sort_by(|((ta, pa, ra), _), ((tb, pb, rb), _)| {
            (ta.as_str(), pa, ra).cmp(&(tb.as_str(), pb, rb))
        });
        for ((table, pk, rk), read) in keys {
            let now = store.get(table, pk, rk).await?;
            if now.as_ref().map(|s| &s.etag) != read.etag.as_ref() {
                return Err(changed(table, pk, rk));
            }
            if let (true, Some(now)) = (read.touch, now) {
                touches.push(Change {
                    table: table.clone(),
                    op: WriteOp::Merge(
                        Entity::new(pk.clone(), rk.clone()),
                        IfMatch::ETag(now.etag.clone()),
                    ),
                    before: Some(now),
                    first: false,
                });
            }
        }
        Ok(touches)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::memory::MemoryStore;
    use crate::storage::{EdmValue, Properties};

    fn keys(rk: &str) -> (TableName, PartitionKey, RowKey) {
        (
            TableName::new("accounts").expect("a name"),
            PartitionKey::new("p").expect("a key"),
            RowKey::new(rk).expect("a key"),
        )
    }

    async fn put(store: &MemoryStore, rk: &str, balance: i64) -> StoredEntity {
        let (t, p, r) = keys(rk);
        let mut e = Entity::new(p.clone(), r.clone());
        e.properties = Properties::from([("balance".to_owned(), EdmValue::Int64(balance))]);
        store
            .execute_batch(&t, vec![WriteOp::InsertOrReplace(e)])
            .await
            .expect("written");
        store.get(&t, &p, &r).await.expect("read").expect("there")
    }

    #[test]
    fn a_row_read_twice_at_two_versions_is_a_conflict() {
        let (t, p, r) = keys("a");
        let mut reads = ReadSet::default();
        let (v1, v2) = (ETag::from_wire("W/\"1\""), ETag::from_wire("W/\"2\""));
        assert!(reads.record(&t, &p, &r, Some(&v1), false).is_ok());
        assert!(reads.record(&t, &p, &r, Some(&v1), true).is_ok());
        let e = reads.record(&t, &p, &r, Some(&v2), false).err();
        assert_eq!(e.map(|e| e.sqlstate()), Some("40001"));
        let absent = reads.record(&t, &p, &r, None, false).err();
        assert_eq!(absent.map(|e| e.sqlstate()), Some("40001"));
    }

    #[tokio::test]
    async fn commit_reads_again_and_touches_only_what_it_must() {
        let store = MemoryStore::new();
        let (t, ..) = keys("a");
        store.create_table(&t).await.expect("created");
        let a = put(&store, "a", 100).await;
        let b = put(&store, "b", 5).await;
        let mut reads = ReadSet::default();
        reads
            .record(&t, a.partition_key(), a.row_key(), Some(&a.etag), true)
            .expect("kept");
        reads
            .record(&t, b.partition_key(), b.row_key(), Some(&b.etag), false)
            .expect("kept");
        let (_, p, c) = keys("c");
        reads.record(&t, &p, &c, None, false).expect("kept");
        let touches = reads
            .validate(&store, |_, _, _| false)
            .await
            .expect("valid");
        assert_eq!(
            touches.len(),
            1,
            "only the row read FOR UPDATE is written back"
        );
        assert!(
            matches!(&touches[0].op, WriteOp::Merge(e, IfMatch::ETag(v)) if e.properties.is_empty() && *v == a.etag)
        );
        // Another client changes b: COMMIT fails, unless the block writes b.
        put(&store, "b", 6).await;
        let e = reads.validate(&store, |_, _, _| false).await.err();
        assert_eq!(e.map(|e| e.sqlstate()), Some("40001"));
        assert!(
            reads
                .validate(&store, |_, _, r| r.as_str() == "b")
                .await
                .is_ok()
        );
        // Another client adds c, which the block read as absent.
        put(&store, "c", 1).await;
        let e = reads
            .validate(&store, |_, _, r| r.as_str() == "b")
            .await
            .err();
        assert_eq!(e.map(|e| e.sqlstate()), Some("40001"));
    }
}
