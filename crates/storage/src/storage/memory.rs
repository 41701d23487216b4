//! The memory backend: a `BTreeMap` per table, kept deliberately plain. It is the
//! reference oracle the other backends are compared with.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use async_trait::async_trait;

use super::write::{Effect, apply, validate_batch};
use super::{
    Clock, ContinuationToken, DEFAULT_SCAN_BUDGET, KeyRange, Page, PartitionKey, PartitionPage,
    Query, Result, RowKey, StorageError, StoredEntity, TableName, TableStore, WriteOp,
    WriteOutcome,
};
use crate::storage::query::MAX_PARTITION_PAGE;

type Rows = BTreeMap<(PartitionKey, RowKey), StoredEntity>;

/// Tables of entities in memory; gone when dropped.
#[derive(Debug)]
pub struct MemoryStore {
    // folded name -> (name as created, rows)
    tables: RwLock<BTreeMap<String, (TableName, Rows)>>,
    clock: Clock,
    scan_budget: usize,
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self {
            tables: RwLock::default(),
            clock: Clock::default(),
            scan_budget: DEFAULT_SCAN_BUDGET,
        }
    }

    /// Sets how many entities one page may examine before it stops with a token.
    pub fn with_scan_budget(mut self, budget: usize) -> Self {
        self.scan_budget = budget.max(1);
        self
    }

    fn read(&self) -> RwLockReadGuard<'_, BTreeMap<String, (TableName, Rows)>> {
        // Writers validate before they touch the map, so a poisoned lock holds whole data.
        self.tables.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, BTreeMap<String, (TableName, Rows)>> {
        self.tables.write().unwrap_or_else(|p| p.into_inner())
    }
}

fn not_found(table: &TableName) -> StorageError {
    StorageError::TableNotFound(table.as_str().to_owned())
}

#[async_trait]
impl TableStore for MemoryStore {
    async fn create_table(&self, table: &TableName) -> Result<()> {
        let mut tables = self.write();
        if let Some((existing, _)) = tables.get(&table.folded()) {
            return Err(StorageError::TableAlreadyExists(
                existing.as_str().to_owned(),
            ));
        }
        tables.insert(table.folded(), (table.clone(), Rows::new()));
        Ok(())
    }

    async fn delete_table(&self, table: &TableName) -> Result<()> {
        self.write()
            .remove(&table.folded())
            .map(|_| ())
            .ok_or_else(|| not_found(table))
    }

    async fn list_tables(&self) -> Result<Vec<TableName>> {
        Ok(self.read().values().map(|(name, _)| name.clone()).collect())
    }

    async fn get(
        &self,
        table: &TableName,
        pk: &PartitionKey,
        rk: &RowKey,
    ) -> Result<Option<StoredEntity>> {
        let tables = self.read();
        let (_, rows) = tables
            .get(&table.folded())
            .ok_or_else(|| not_found(table))?;
        Ok(rows.get(&(pk.clone(), rk.clone())).cloned())
    }

    async fn query(
        &self,
        table: &TableName,
        query: &Query,
        continuation: Option<&ContinuationToken>,
    ) -> Result<Page> {
        let limit = query.page_size()?;
        let tables = self.read();
        let (_, rows) = tables
            .get(&table.folded())
            .ok_or_else(|| not_found(table))?;
        let mut page = Page::default();
        let mut scanned = 0;
        let mut full = false;
        let entries = match continuation {
            Some(t) => rows.range((t.next_partition_key.clone(), t.next_row_key.clone())..),
            None => rows.range(..),
        };
        for ((pk, rk), stored) in entries {
            if query.partitions.is_before(pk) {
                continue;
            }
            if query.partitions.is_after(pk) {
                break;
            }
            // As the embedded store: a full page's token names the next
            // entity, unless the range cannot hold another (a row past the
            // RowKey range of the last partition in range); the page looks
            // no further for one in range.
            if full {
                let last = matches!(&query.partitions.end, Bound::Included(end) if end == pk);
                if !(last && query.rows.is_after(rk)) {
                    page.continuation = Some(ContinuationToken::at(pk.clone(), rk.clone()));
                }
                break;
            }
            if !query.rows.contains(rk) {
                continue;
            }
            scanned += 1;
            if query.passes(stored) {
                let mut e = stored.clone();
                query.project(&mut e.entity.properties);
                page.entities.push(e);
            }
            full = page.entities.len() == limit || scanned == self.scan_budget;
        }
        page.scanned = scanned;
        Ok(page)
    }

    async fn partitions(
        &self,
        table: &TableName,
        range: &KeyRange<PartitionKey>,
        after: Option<&PartitionKey>,
    ) -> Result<PartitionPage> {
        let tables = self.read();
        let (_, rows) = tables
            .get(&table.folded())
            .ok_or_else(|| not_found(table))?;
        let range = range.after(after);
        let mut page = PartitionPage {
            requests: 1,
            ..PartitionPage::default()
        };
        for (pk, _) in rows.keys() {
            if !range.contains(pk) || page.partitions.last() == Some(pk) {
                continue;
            }
            if page.partitions.len() == MAX_PARTITION_PAGE {
                page.after = page.partitions.last().cloned();
                break;
            }
            page.partitions.push(pk.clone());
        }
        Ok(page)
    }

    async fn execute_batch(
        &self,
        table: &TableName,
        mut ops: Vec<WriteOp>,
    ) -> Result<Vec<WriteOutcome>> {
        validate_batch(&mut ops)?;
        let mut tables = self.write();
        let (_, rows) = tables
            .get_mut(&table.folded())
            .ok_or_else(|| not_found(table))?;
        let timestamp = self.clock.next();
        // Work out every effect first; change nothing unless all succeed.
        let mut effects = Vec::with_capacity(ops.len());
        for (index, op) in ops.into_iter().enumerate() {
            let (pk, rk) = op.keys();
            let key = (pk.clone(), rk.clone());
            let effect = apply(rows.get(&key), op, timestamp).map_err(|e| StorageError::Batch {
                index,
                source: Box::new(e),
            })?;
            effects.push((key, effect));
        }
        let mut outcomes = Vec::with_capacity(effects.len());
        for (key, effect) in effects {
            match effect {
                Effect::Put(e) => {
                    outcomes.push(WriteOutcome {
                        etag: Some(e.etag.clone()),
                    });
                    rows.insert(key, e);
                }
                Effect::Delete => {
                    outcomes.push(WriteOutcome { etag: None });
                    rows.remove(&key);
                }
            }
        }
        Ok(outcomes)
    }
}
