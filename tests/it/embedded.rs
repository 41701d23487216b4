//! The embedded store as a file: what survives closing and reopening, the format
//! marker, and exclusive use by one process.

use tablesql::storage::embedded::FILE_NAME;
use tablesql::storage::*;

type TestResult = Result<(), Box<dyn std::error::Error>>;

async fn fill(store: &EmbeddedStore, table: &TableName, n: usize) -> TestResult {
    let pk = PartitionKey::new("p")?;
    for chunk in (0..n).collect::<Vec<_>>().chunks(100) {
        let ops = chunk
            .iter()
            .map(|i| {
                let e = Entity::new(pk.clone(), RowKey::new(format!("{i:05}")).expect("key"))
                    .with("i", EdmValue::Int64(*i as i64));
                WriteOp::Insert(e)
            })
            .collect();
        store.execute_batch(table, ops).await?;
    }
    Ok(())
}

#[tokio::test]
async fn a_token_resumes_in_a_new_store_handle() -> TestResult {
    let dir = tempfile::tempdir()?;
    let table = TableName::new("Paged")?;
    let token_text = {
        let store = EmbeddedStore::open(dir.path())?;
        store.create_table(&table).await?;
        fill(&store, &table, 2500).await?;
        let page = store.query(&table, &Query::all(), None).await?;
        assert_eq!(page.entities.len(), 1000);
        page.continuation.ok_or("no token")?.to_string()
    };
    // The first handle is closed; a new one (as a new process would) resumes.
    let store = EmbeddedStore::open(dir.path())?;
    let token: ContinuationToken = token_text.parse()?;
    let page = store.query(&table, &Query::all(), Some(&token)).await?;
    assert_eq!(
        page.entities.first().map(|e| e.row_key().as_str()),
        Some("01000")
    );
    assert_eq!(page.entities.len(), 1000);
    Ok(())
}

#[tokio::test]
async fn writes_survive_reopening_with_etags_and_timestamps() -> TestResult {
    let dir = tempfile::tempdir()?;
    let table = TableName::new("Kept")?;
    let (etag, written_at) = {
        let store = EmbeddedStore::open(dir.path())?;
        store.create_table(&table).await?;
        let e =
            Entity::new(PartitionKey::new("p")?, RowKey::new("r")?).with("v", EdmValue::Int32(1));
        let etag = store
            .execute(&table, WriteOp::Insert(e))
            .await?
            .etag
            .ok_or("no etag")?;
        let got = store
            .get(&table, &PartitionKey::new("p")?, &RowKey::new("r")?)
            .await?;
        (etag, got.ok_or("missing")?.timestamp)
    };
    let store = EmbeddedStore::open(dir.path())?;
    let got = store
        .get(&table, &PartitionKey::new("p")?, &RowKey::new("r")?)
        .await?
        .ok_or("missing")?;
    assert_eq!(
        (got.etag.clone(), got.timestamp),
        (etag.clone(), written_at)
    );
    // The write clock resumes after the last write: the next ETag is new.
    let e = Entity::new(PartitionKey::new("p")?, RowKey::new("r")?);
    let next = store
        .execute(&table, WriteOp::Update(e, IfMatch::ETag(etag.clone())))
        .await?;
    assert_ne!(next.etag, Some(etag));
    Ok(())
}

#[tokio::test]
async fn a_second_open_of_one_store_is_refused_clearly() -> TestResult {
    let dir = tempfile::tempdir()?;
    let _first = EmbeddedStore::open(dir.path())?;
    match EmbeddedStore::open(dir.path()) {
        Err(StorageError::InUse(path)) => assert!(path.ends_with(FILE_NAME)),
        other => panic!("expected InUse, got {other:?}"),
    }
    Ok(())
}

#[tokio::test]
async fn a_store_of_another_format_version_is_refused() -> TestResult {
    let dir = tempfile::tempdir()?;
    drop(EmbeddedStore::open(dir.path())?);
    {
        let db = redb::Database::open(dir.path().join(FILE_NAME))?;
        let txn = db.begin_write()?;
        {
            let meta: redb::TableDefinition<&str, &[u8]> =
                redb::TableDefinition::new("tablesql_meta");
            txn.open_table(meta)?
                .insert("format_version", 99u32.to_le_bytes().as_slice())?;
        }
        txn.commit()?;
    }
    match EmbeddedStore::open(dir.path()) {
        Err(StorageError::FormatVersion {
            found: 99,
            expected: 1,
        }) => Ok(()),
        other => panic!("expected FormatVersion, got {other:?}"),
    }
}

#[tokio::test]
async fn readers_run_while_a_writer_commits() -> TestResult {
    let dir = tempfile::tempdir()?;
    let store = EmbeddedStore::open(dir.path())?;
    let table = TableName::new("Busy")?;
    store.create_table(&table).await?;
    fill(&store, &table, 1000).await?;
    let writer = {
        let (store, table) = (store.clone(), table.clone());
        tokio::spawn(async move {
            for i in 0..20 {
                let e = Entity::new(
                    PartitionKey::new("q").expect("key"),
                    RowKey::new(format!("{i}")).expect("key"),
                );
                store.execute(&table, WriteOp::Insert(e)).await?;
            }
            Ok::<_, StorageError>(())
        })
    };
    // Every read sees a whole snapshot: the 1,000 rows of "p" are always there.
    for _ in 0..20 {
        let n = store
            .query_all(&table, &Query::partition(PartitionKey::new("p")?))
            .await?
            .len();
        assert_eq!(n, 1000);
    }
    writer.await??;
    assert_eq!(store.count(&table).await?, 1020);
    Ok(())
}

/// Transactions that share a group commit keep their own outcomes: the ones
/// that conflict write nothing, the others are whole.
#[tokio::test]
async fn concurrent_transactions_sharing_commits_stay_all_or_nothing() -> TestResult {
    let dir = tempfile::tempdir()?;
    let store = EmbeddedStore::open(dir.path())?;
    let table = TableName::new("Grouped")?;
    store.create_table(&table).await?;
    let taken = Entity::new(PartitionKey::new("p3")?, RowKey::new("r05")?);
    store.execute(&table, WriteOp::Insert(taken)).await?;
    let mut tasks = Vec::new();
    for b in 0..8 {
        let (store, table) = (store.clone(), table.clone());
        tasks.push(tokio::spawn(async move {
            let ops = (0..10)
                .map(|r| {
                    let pk = PartitionKey::new(format!("p{b}")).expect("key");
                    WriteOp::Insert(Entity::new(
                        pk,
                        RowKey::new(format!("r{r:02}")).expect("key"),
                    ))
                })
                .collect();
            store.execute_batch(&table, ops).await
        }));
    }
    for (b, task) in tasks.into_iter().enumerate() {
        let result = task.await?;
        let present = store
            .query_all(
                &table,
                &Query::partition(PartitionKey::new(format!("p{b}"))?),
            )
            .await?;
        if b == 3 {
            assert!(
                matches!(result, Err(StorageError::Batch { index: 5, .. })),
                "{result:?}"
            );
            assert_eq!(present.len(), 1, "the refused transaction wrote something");
        } else {
            assert_eq!(result?.len(), 10);
            assert_eq!(present.len(), 10);
        }
    }
    Ok(())
}
