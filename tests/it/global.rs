//! Global index writes meeting other writers between their steps. A global
//! index's entity and its base row are written by separate requests (the
//! entity first, the old entity's delete last), so another statement can
//! act in between; these tests make it act there, through a store that runs
//! the other statement's writes right after this one's base row lands, and
//! check that the index still answers as the base rows do.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tablesql::datafusion::arrow::util::pretty::pretty_format_batches;
use tablesql::storage::*;
use tablesql::{Engine, EngineOptions};

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// A store that, once armed, follows the next write to `base` with
/// `then`: the writes of another statement that ran in between.
#[derive(Debug)]
struct Between {
    inner: MemoryStore,
    base: TableName,
    armed: AtomicBool,
    then: std::sync::Mutex<Vec<(TableName, WriteOp)>>,
}

#[async_trait::async_trait]
impl TableStore for Between {
    async fn create_table(&self, t: &TableName) -> Result<()> {
        self.inner.create_table(t).await
    }
    async fn delete_table(&self, t: &TableName) -> Result<()> {
        self.inner.delete_table(t).await
    }
    async fn list_tables(&self) -> Result<Vec<TableName>> {
        self.inner.list_tables().await
    }
    async fn get(
        &self,
        t: &TableName,
        pk: &PartitionKey,
        rk: &RowKey,
    ) -> Result<Option<StoredEntity>> {
        self.inner.get(t, pk, rk).await
    }
    async fn query(&self, t: &TableName, q: &Query, c: Option<&ContinuationToken>) -> Result<Page> {
        self.inner.query(t, q, c).await
    }
    async fn execute_batch(&self, t: &TableName, ops: Vec<WriteOp>) -> Result<Vec<WriteOutcome>> {
        let out = self.inner.execute_batch(t, ops).await?;
        if t == &self.base && self.armed.swap(false, Ordering::SeqCst) {
            let then = std::mem::take(&mut *self.then.lock().expect("not poisoned"));
            for (table, op) in then {
                self.inner.execute_batch(&table, vec![op]).await?;
            }
        }
        Ok(out)
    }
}

async fn shown(engine: &Engine, sql: &str) -> Result<String, Box<dyn std::error::Error>> {
    Ok(pretty_format_batches(&engine.collect(sql).await?)?.to_string())
}

async fn all(store: &dyn TableStore, table: &TableName) -> Result<Vec<StoredEntity>> {
    Ok(store.query(table, &Query::all(), None).await?.entities)
}

/// Statement A moves a row's email from `a` to `b`; statement B moves it
/// back to `a` after A's base write and before A deletes the `a` entity.
/// B's put of the `a` entity must survive A's delete, or the row (whose
/// email is `a` again) is missing from every lookup by email.
#[tokio::test]
async fn a_row_moved_back_between_an_update_s_steps_keeps_its_entity() -> TestResult {
    let base = TableName::new("members")?;
    let store = Arc::new(Between {
        inner: MemoryStore::new(),
        base: base.clone(),
        armed: AtomicBool::new(false),
        then: Default::default(),
    });
    let engine = Engine::with_store(store.clone(), EngineOptions::default()).await?;
    for sql in [
        "CREATE TABLE members (id INT PRIMARY KEY, email TEXT)",
        "INSERT INTO members VALUES (1, 'a@x.org'), (2, 'c@x.org')",
        "CREATE INDEX members_email ON members (email) WITH (global = true)",
    ] {
        engine.collect(sql).await?;
    }
    let index = store
        .list_tables()
        .await?
        .into_iter()
        .find(|t| t.as_str().starts_with("membersx"))
        .ok_or("no index table")?;
    // B's writes: the entity of `a` put again, then the row as it was.
    let row = all(store.as_ref(), &base).await?;
    let entity = all(store.as_ref(), &index).await?;
    // Base row and entity alike carry the email as a property.
    let with_a = |rows: &[StoredEntity]| {
        rows.iter()
            .find(|e| e.entity.properties.get("email") == Some(&EdmValue::String("a@x.org".into())))
            .map(|e| e.entity.clone())
            .ok_or("no entity with a@x.org")
    };
    *store.then.lock().expect("not poisoned") = vec![
        (index.clone(), WriteOp::InsertOrReplace(with_a(&entity)?)),
        (base.clone(), WriteOp::InsertOrReplace(with_a(&row)?)),
    ];
    store.armed.store(true, Ordering::SeqCst);
    engine
        .collect("UPDATE members SET email = 'b@x.org' WHERE id = 1")
        .await?;
    assert!(!store.armed.load(Ordering::SeqCst), "B ran");
    let through_index = shown(
        &engine,
        "SELECT id, email FROM members WHERE email = 'a@x.org'",
    )
    .await?;
    engine.collect("SET tablesql.use_indexes = off").await?;
    let through_rows = shown(
        &engine,
        "SELECT id, email FROM members WHERE email = 'a@x.org'",
    )
    .await?;
    assert_eq!(through_index, through_rows);
    assert!(through_rows.contains("a@x.org"), "{through_rows}");
    engine.collect("SET tablesql.use_indexes = on").await?;
    let health = shown(
        &engine,
        "SELECT index, missing, stale FROM tablesql_check_index('members')",
    )
    .await?;
    assert!(
        health.contains("| members_email | 0       | 0     |"),
        "{health}"
    );
    Ok(())
}
