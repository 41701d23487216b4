//! What `TableStore`'s default methods do, as functions of any store: the
//! trait's defaults call them, and so does a [`super::layer::StoreLayer`] that
//! runs them over its own primitives ([`super::layer::Derived::Here`]), which a
//! default method of another trait cannot reach otherwise.

use std::sync::{Arc, Mutex};

use super::{
    ContinuationToken, KeyRange, PageEnd, PartitionKey, PartitionPage, Query, Result, RowKey,
    RowSink, StorageError, StoredEntity, TableName, TableStore, WriteOp, WriteOutcome,
};

/// [`TableStore::get_many`] as one `get` per key.
pub async fn get_many<S: TableStore + ?Sized>(
    store: &S,
    table: &TableName,
    partition_key: &PartitionKey,
    row_keys: &[RowKey],
) -> Result<Vec<StoredEntity>> {
    let mut found = Vec::with_capacity(row_keys.len());
    for rk in row_keys {
        if let Some(e) = store.get(table, partition_key, rk).await? {
            found.push(e);
        }
    }
    Ok(found)
}

/// [`TableStore::execute`] as a batch of one.
pub async fn execute<S: TableStore + ?Sized>(
    store: &S,
    table: &TableName,
    op: WriteOp,
) -> Result<WriteOutcome> {
    match store.execute_batch(table, vec![op]).await {
        Ok(mut outcomes) => outcomes
            .pop()
            .ok_or_else(|| StorageError::Task("no outcome".into())),
        Err(StorageError::Batch { source, .. }) => Err(*source),
        Err(e) => Err(e),
    }
}

/// [`TableStore::query_into`] as a `query` whose entities are lent to the
/// sink one by one.
pub async fn query_into<S: TableStore + ?Sized>(
    store: &S,
    table: &TableName,
    query: &Query,
    continuation: Option<&ContinuationToken>,
    sink: Arc<Mutex<dyn RowSink>>,
) -> Result<PageEnd> {
    let page = store.query(table, query, continuation).await?;
    let mut sink = sink
        .lock()
        .map_err(|_| StorageError::Task("a row sink panicked".into()))?;
    let mut end = PageEnd {
        continuation: page.continuation,
        scanned: page.scanned,
        ..PageEnd::default()
    };
    for e in &page.entities {
        end.count(e.partition_key().as_str());
        if sink.push(e).is_break() {
            end.continuation = None;
            break;
        }
    }
    Ok(end)
}

/// [`TableStore::partitions`] as one keys-only `query` with `$top=1` per
/// partition; on a store whose pages come in no key order, where the first
/// entity past a key is not the next partition's, as one keys-only scan of
/// the whole range, its partitions sorted into one page.
pub async fn partitions<S: TableStore + ?Sized>(
    store: &S,
    table: &TableName,
    range: &KeyRange<PartitionKey>,
    after: Option<&PartitionKey>,
) -> Result<PartitionPage> {
    if !store.key_ordered() {
        return partitions_by_scan(store, table, range.after(after)).await;
    }
    let mut query = Query::all().select(Vec::<String>::new()).top(1);
    query.partitions = range.after(after);
    let mut page = PartitionPage::default();
    let mut token = None;
    loop {
        let found = store.query(table, &query, token.as_ref()).await?;
        page.requests += 1;
        if let Some(e) = found.entities.first() {
            page.after = Some(e.partition_key().clone());
            page.partitions.push(e.partition_key().clone());
            return Ok(page);
        }
        match found.continuation {
            Some(t) => token = Some(t),
            None => return Ok(page),
        }
    }
}

async fn partitions_by_scan<S: TableStore + ?Sized>(
    store: &S,
    table: &TableName,
    range: KeyRange<PartitionKey>,
) -> Result<PartitionPage> {
    let mut query = Query::all().select(Vec::<String>::new());
    query.partitions = range;
    let mut seen = std::collections::BTreeSet::new();
    let mut requests = 0;
    let mut token = None;
    loop {
        let found = store.query(table, &query, token.as_ref()).await?;
        requests += 1;
        seen.extend(found.entities.iter().map(|e| e.partition_key().clone()));
        match found.continuation {
            Some(t) => token = Some(t),
            None => break,
        }
    }
    Ok(PartitionPage {
        partitions: seen.into_iter().collect(),
        after: None,
        requests,
    })
}

/// [`TableStore::count`] as a keys-only scan of every page.
pub async fn count<S: TableStore + ?Sized>(store: &S, table: &TableName) -> Result<u64> {
    let query = Query::all().select(Vec::<String>::new());
    let mut n = 0;
    let mut token = None;
    loop {
        let page = store.query(table, &query, token.as_ref()).await?;
        n += page.entities.len() as u64;
        match page.continuation {
            Some(t) => token = Some(t),
            None => return Ok(n),
        }
    }
}
