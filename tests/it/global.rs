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
use tablesql::{Engine, EngineOptions, Session};

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// A store that, once armed, follows the next write to `base` with
/// `then`: the writes of another statement that ran in between.
#[derive(Debug)]
struct Between {
    inner: MemoryStore,
    base: TableName,
    armed: AtomicBool,
    then: std::sync::Mutex<Vec<(TableName, WriteOp)>>,
    /// The next write to `base` fails instead, without landing, as the
    /// process had stopped before it.
    stop: AtomicBool,
}

impl Between {
    fn over(base: &TableName) -> Arc<Self> {
        Arc::new(Self {
            inner: MemoryStore::new(),
            base: base.clone(),
            armed: AtomicBool::new(false),
            then: Default::default(),
            stop: AtomicBool::new(false),
        })
    }
}

#[async_trait::async_trait]
impl layer::StoreLayer for Between {
    const DERIVED: layer::Derived = layer::Derived::Here;

    fn below(&self) -> &dyn TableStore {
        &self.inner
    }

    async fn execute_batch(&self, t: &TableName, ops: Vec<WriteOp>) -> Result<Vec<WriteOutcome>> {
        if t == &self.base && self.stop.swap(false, Ordering::SeqCst) {
            return Err(StorageError::Task("the process stopped".into()));
        }
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

async fn shown(engine: &Session, sql: &str) -> Result<String, Box<dyn std::error::Error>> {
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
    let store = Between::over(&base);
    let engine = Engine::with_store(store.clone(), EngineOptions::default())
        .await?
        .session();
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

/// A LIMIT met early stops a global index read: of 200 entities for one
/// value, the lookups made are those of the first batch, plus the few read
/// ahead, not all 200. (One partition: a repartition above the read would
/// pull ahead as far as its buffers let it.)
#[tokio::test]
async fn a_limit_stops_the_lookups_early() -> TestResult {
    let engine = Engine::with_store(Arc::new(MemoryStore::new()), EngineOptions::default())
        .await?
        .session();
    engine
        .collect("SET datafusion.execution.target_partitions = 1")
        .await?;
    engine
        .collect("CREATE TABLE tags (id INT PRIMARY KEY, tag TEXT)")
        .await?;
    let values: Vec<String> = (0..200).map(|i| format!("({i}, 'x')")).collect();
    engine
        .collect(&format!("INSERT INTO tags VALUES {}", values.join(", ")))
        .await?;
    engine
        .collect("CREATE INDEX tags_tag ON tags (tag) WITH (global = true)")
        .await?;
    let analyzed = shown(
        &engine,
        "EXPLAIN ANALYZE SELECT id FROM tags WHERE tag = 'x' LIMIT 3",
    )
    .await?;
    let lookups: u64 = analyzed
        .split("base_lookups=")
        .nth(1)
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| format!("no base_lookups in {analyzed}"))?;
    assert!(
        analyzed.contains("GlobalIndexExec") && (3..=100).contains(&lookups),
        "{lookups} lookups: {analyzed}"
    );
    let rows = engine
        .collect("SELECT count(*) FROM (SELECT id FROM tags WHERE tag = 'x' LIMIT 3) AS t")
        .await?;
    assert_eq!(rows[0].num_rows(), 1);
    Ok(())
}

/// `DROP INDEX` without CASCADE deletes a global index's table: it is the
/// index's own.
#[tokio::test]
async fn drop_index_deletes_a_global_index_s_table() -> TestResult {
    let store = Arc::new(MemoryStore::new());
    let engine = Engine::with_store(store.clone(), EngineOptions::default())
        .await?
        .session();
    for sql in [
        "CREATE TABLE tags (id INT PRIMARY KEY, tag TEXT)",
        "CREATE INDEX tags_tag ON tags (tag) WITH (global = true)",
    ] {
        engine.collect(sql).await?;
    }
    let index_tables = || async {
        let tables = store.list_tables().await?;
        Ok::<_, StorageError>(
            tables
                .into_iter()
                .filter(|t| t.as_str().starts_with("tagsx"))
                .count(),
        )
    };
    assert_eq!(index_tables().await?, 1);
    engine.collect("DROP INDEX tags_tag").await?;
    assert_eq!(index_tables().await?, 0);
    Ok(())
}

/// A row whose primary key changes while its unique value stays hands the
/// value's one entity over to its new keys. Stopped after the entity is
/// put and before the base row's transaction, the row keeps its old keys,
/// and the entity, naming both, still finds it; a repair makes it plain.
#[tokio::test]
async fn a_unique_value_handed_over_and_stopped_midway_still_finds_its_row() -> TestResult {
    let base = TableName::new("accounts")?;
    let store = Between::over(&base);
    let engine = Engine::with_store(store.clone(), EngineOptions::default())
        .await?
        .session();
    for sql in [
        "CREATE TABLE accounts (shard TEXT NOT NULL, id TEXT NOT NULL, email TEXT, PRIMARY KEY (shard, id)) \
         WITH (storage_table = 'accounts', partition_key = '{shard}', row_key = '{id}')",
        "INSERT INTO accounts VALUES ('s', '1', 'a@x.org')",
        "CREATE UNIQUE INDEX accounts_email ON accounts (email)",
    ] {
        engine.collect(sql).await?;
    }
    store.stop.store(true, Ordering::SeqCst);
    let stopped = engine
        .collect("UPDATE accounts SET id = '9' WHERE id = '1'")
        .await;
    assert!(stopped.is_err(), "the base write failed");
    let lookup = "SELECT id, email FROM accounts WHERE email = 'a@x.org'";
    let found = shown(&engine, lookup).await?;
    assert!(found.contains("| 1  | a@x.org |"), "{found}");
    // Another row cannot take the value the row still holds.
    assert!(
        engine
            .collect("INSERT INTO accounts VALUES ('t', '2', 'a@x.org')")
            .await
            .is_err()
    );
    // The entity names the row's new keys too: young, it may be a write
    // in flight, which the check and repair leave alone; the move, run
    // again, goes through.
    let health = "SELECT index, stale, orphaned, missing FROM tablesql_check_index('accounts')";
    engine
        .collect("SELECT * FROM tablesql_repair_index('accounts')")
        .await?;
    assert!(
        shown(&engine, health)
            .await?
            .contains("| accounts_email | 0     | 0        | 0       |")
    );
    engine
        .collect("UPDATE accounts SET id = '9' WHERE id = '1'")
        .await?;
    let found = shown(&engine, lookup).await?;
    assert!(found.contains("| 9  | a@x.org |"), "{found}");
    Ok(())
}

/// A declared global index reads the entities an application writes its
/// own way: here with no property but its own, the base row's key held in
/// the entity's RowKey alone.
#[tokio::test]
async fn a_declared_index_reads_an_application_s_entities_by_their_keys() -> TestResult {
    let store = Arc::new(MemoryStore::new());
    let engine = Engine::with_store(store.clone(), EngineOptions::default())
        .await?
        .session();
    for sql in [
        "CREATE TABLE users (id INT PRIMARY KEY, email TEXT NOT NULL, name TEXT)",
        "INSERT INTO users VALUES (1, 'a@x.org', 'Ann'), (2, 'b@x.org', 'Bob')",
        "CREATE INDEX users_email ON users (email) WITH (global = true, table = 'EmailIndex', \
         partition_key = '{email}', row_key = 'U:{id:06}')",
    ] {
        engine.collect(sql).await?;
    }
    // The application replaces Bob's entity with one of its own.
    let index = TableName::new("EmailIndex")?;
    let mut own = Entity::new(PartitionKey::new("b@x.org")?, RowKey::new("U:000002")?);
    own.properties
        .insert("Source".into(), EdmValue::String("the app".into()));
    store
        .execute_batch(&index, vec![WriteOp::InsertOrReplace(own)])
        .await?;
    let found = shown(
        &engine,
        "SELECT id, name FROM users WHERE email = 'b@x.org'",
    )
    .await?;
    assert!(found.contains("| 2  | Bob  |"), "{found}");
    let plan = shown(
        &engine,
        "EXPLAIN SELECT id, name FROM users WHERE email = 'b@x.org'",
    )
    .await?;
    assert!(plan.contains("global_index_point(users_email)"), "{plan}");
    // An entity the application wrote before the row: the row's insert
    // merges the index's columns in and keeps the application's.
    let mut early = Entity::new(PartitionKey::new("c@x.org")?, RowKey::new("U:000003")?);
    early
        .properties
        .insert("Source".into(), EdmValue::String("the app".into()));
    store
        .execute_batch(&index, vec![WriteOp::InsertOrReplace(early)])
        .await?;
    engine
        .collect("INSERT INTO users VALUES (3, 'c@x.org', 'Cy')")
        .await?;
    let kept = store
        .get(
            &index,
            &PartitionKey::new("c@x.org")?,
            &RowKey::new("U:000003")?,
        )
        .await?
        .ok_or("the entity")?;
    assert_eq!(
        kept.entity.properties.get("Source"),
        Some(&EdmValue::String("the app".into()))
    );
    assert_eq!(
        kept.entity.properties.get("email"),
        Some(&EdmValue::String("c@x.org".into()))
    );
    Ok(())
}
