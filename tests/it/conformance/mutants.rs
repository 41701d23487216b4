//! TEMPORARY: deliberately broken stores, to see the suite catch them.
use async_trait::async_trait;
use tablesql::storage::*;
use std::sync::Arc;
use super::{Fixture, TestResult};

#[derive(Debug)]
pub struct Mutant { inner: MemoryStore, kind: u8 }

#[async_trait]
impl TableStore for Mutant {
    async fn create_table(&self, t: &TableName) -> Result<()> { self.inner.create_table(t).await }
    async fn delete_table(&self, t: &TableName) -> Result<()> {
        if self.kind == 4 { return Ok(()); }
        self.inner.delete_table(t).await }
    async fn list_tables(&self) -> Result<Vec<TableName>> { self.inner.list_tables().await }
    async fn get(&self, t: &TableName, p: &PartitionKey, r: &RowKey) -> Result<Option<StoredEntity>> { self.inner.get(t, p, r).await }
    async fn query(&self, t: &TableName, q: &Query, c: Option<&ContinuationToken>) -> Result<Page> {
        let mut page = self.inner.query(t, q, c).await?;
        if self.kind == 1 && page.entities.len() > 2 { page.entities.swap(0, 1); }
        Ok(page)
    }
    async fn execute_batch(&self, t: &TableName, ops: Vec<WriteOp>) -> Result<Vec<WriteOutcome>> {
        if self.kind == 2 {
            let mut out = vec![];
            for (index, op) in ops.into_iter().enumerate() {
                out.push(self.inner.execute(t, op).await.map_err(|e| StorageError::Batch { index, source: Box::new(e) })?);
            }
            return Ok(out);
        }
        let ops = if self.kind == 3 {
            ops.into_iter().map(|op| match op {
                WriteOp::Update(e, _) => WriteOp::Update(e, IfMatch::Any),
                WriteOp::Merge(e, _) => WriteOp::Merge(e, IfMatch::Any),
                WriteOp::Delete { partition_key, row_key, .. } => WriteOp::Delete { partition_key, row_key, if_match: IfMatch::Any },
                o => o,
            }).collect()
        } else if self.kind == 5 {
            ops.into_iter().map(|op| match op {
                WriteOp::Merge(e, m) => WriteOp::Update(e, m),
                o => o,
            }).collect()
        } else { ops };
        self.inner.execute_batch(t, ops).await
    }
}

fn make(kind: u8, budget: usize) -> TestResult<Fixture> {
    Ok(Fixture::new(Arc::new(Mutant { inner: MemoryStore::new().with_scan_budget(budget), kind }), None, match kind { 1 => m1, 2 => m2, 3 => m3, 4 => m4, _ => m5 }))
}
pub fn m1(b: usize) -> TestResult<Fixture> { make(1, b) }
pub fn m2(b: usize) -> TestResult<Fixture> { make(2, b) }
pub fn m3(b: usize) -> TestResult<Fixture> { make(3, b) }
pub fn m4(b: usize) -> TestResult<Fixture> { make(4, b) }
pub fn m5(b: usize) -> TestResult<Fixture> { make(5, b) }
