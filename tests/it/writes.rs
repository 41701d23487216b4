//! SQL writes against every backend (memory, embedded, Azurite): INSERT,
//! UPDATE and DELETE keep each base row and its index row in step, read
//! straight from the store after every statement; UPDATE keeps properties the
//! mapping does not declare, and writes back the columns it did not change as
//! stored (EDM type, 100-ns ticks); transactions of more than 100 operations are
//! split without splitting a row from its index row; index rows damaged by
//! raw writes (missing, orphaned, stale) never block a write of their base
//! row, which leaves them right.

use std::collections::BTreeMap;
use std::sync::Arc;

use tablesql::datafusion::arrow::array::{AsArray, RecordBatch};
use tablesql::datafusion::arrow::datatypes::{TimestampMicrosecondType, UInt64Type};
use tablesql::demo;
use tablesql::storage::{
    EdmValue, EmbeddedStore, Entity, IfMatch, MemoryStore, PartitionKey, Query, RowKey, TableName,
    TableStore, WriteOp,
};
use tablesql::{Engine, EngineOptions};

type TestResult = Result<(), Box<dyn std::error::Error>>;

const EVENT: &str = "Writes Test";

fn count(batches: &[RecordBatch]) -> u64 {
    batches
        .iter()
        .filter_map(|b| b.column(0).as_primitive_opt::<UInt64Type>())
        .flat_map(|a| a.iter().flatten())
        .sum()
}

/// Reads the table raw and checks that every base row (`BIB:`) has exactly
/// its index row (`AGE:{age:03}__{bib}__{name}__{gender}`) with the same
/// properties, and no index row is left without its base row. Returns the
/// number of base rows of the test's event.
async fn consistent(store: &dyn TableStore) -> Result<usize, Box<dyn std::error::Error>> {
    let table = TableName::new("Registrations")?;
    let all = store.query_all(&table, &Query::all()).await?;
    let mut base = BTreeMap::new();
    let mut index = BTreeMap::new();
    for e in all {
        let key = (
            e.partition_key().as_str().to_owned(),
            e.row_key().as_str().to_owned(),
        );
        if key.1.starts_with("BIB:") {
            base.insert(key, e.entity.properties);
        } else if key.1.starts_with("AGE:") {
            index.insert(key, e.entity.properties);
        }
    }
    let int = |p: &BTreeMap<String, EdmValue>, k: &str| match p.get(k) {
        Some(EdmValue::Int32(i)) => Ok(*i),
        other => Err(format!("{k} is {other:?}")),
    };
    let text = |p: &BTreeMap<String, EdmValue>, k: &str| match p.get(k) {
        Some(EdmValue::String(s)) => Ok(s.clone()),
        other => Err(format!("{k} is {other:?}")),
    };
    let mut ours = 0;
    for ((pk, rk), props) in &base {
        let expected = format!(
            "AGE:{:03}__{}__{}__{}",
            int(props, "age")?,
            int(props, "bib")?,
            text(props, "name")?,
            text(props, "gender")?
        );
        let found = index.get(&(pk.clone(), expected.clone()));
        assert_eq!(found, Some(props), "index row {pk}/{expected} of {rk}");
        if pk.starts_with(EVENT) {
            ours += 1;
        }
    }
    assert_eq!(index.len(), base.len(), "index rows without a base row");
    Ok(ours)
}

async fn scenario(store: Arc<dyn TableStore>) -> TestResult {
    demo::load(store.as_ref(), 30, |_, _| {}).await?;
    let engine = Engine::with_store(store.clone(), EngineOptions::default())
        .await?
        .session();
    let table = TableName::new("Registrations")?;

    // An application's own property on a demo row and its index row,
    // unknown to the mapping.
    let first = demo::registration(0);
    let [base, index] = first.entities()?;
    let note = |e: &Entity| {
        let noted = Entity::new(e.partition_key.clone(), e.row_key.clone())
            .with("note", EdmValue::String("keep me".into()));
        WriteOp::Merge(noted, IfMatch::Any)
    };
    store
        .execute_batch(&table, vec![note(&base), note(&index)])
        .await?;

    // 120 rows in one partition: 240 operations, so three transactions.
    let values: Vec<String> = (1..=120)
        .map(|b| {
            format!(
                "('{EVENT}', '5K', {b}, 'N{b}', '{}', {}, {})",
                if b % 2 == 0 { "F" } else { "M" },
                20 + b % 50,
                1000 + b
            )
        })
        .collect();
    let inserted = engine
        .collect(&format!(
            "INSERT INTO registrations (event, distance, bib, name, gender, age, finish) VALUES {}",
            values.join(", ")
        ))
        .await?;
    assert_eq!(count(&inserted), 120);
    assert_eq!(consistent(store.as_ref()).await?, 120);

    // New RowKeys for half of them (name), new index keys for all (age).
    let renamed = engine
        .collect(&format!(
            "UPDATE registrations SET name = 'R' || name WHERE event = '{EVENT}' AND distance = '5K' AND bib <= 60"
        ))
        .await?;
    assert_eq!(count(&renamed), 60);
    let aged = engine
        .collect(&format!(
            "UPDATE registrations SET age = age + 1, club = 'C' WHERE event = '{EVENT}' AND distance = '5K'"
        ))
        .await?;
    assert_eq!(count(&aged), 120);
    assert_eq!(consistent(store.as_ref()).await?, 120);
    let check = engine
        .collect(&format!(
            "SELECT count(*) FROM registrations WHERE event = '{EVENT}' AND name LIKE 'RN%' AND club = 'C'"
        ))
        .await?;
    assert_eq!(
        check[0]
            .column(0)
            .as_primitive::<tablesql::datafusion::arrow::datatypes::Int64Type>()
            .value(0),
        60
    );

    // UPDATE keeps what the mapping does not declare.
    engine
        .collect(&format!(
            "UPDATE registrations SET club = 'Kept' WHERE event = '{}' AND distance = '{}' AND bib = {}",
            first.event, first.distance, first.bib
        ))
        .await?;
    let stored = store
        .get(&table, &base.partition_key, &base.row_key)
        .await?
        .ok_or("the demo row is gone")?;
    assert_eq!(
        stored.get("note"),
        Some(&EdmValue::String("keep me".into()))
    );
    assert_eq!(stored.get("club"), Some(&EdmValue::String("Kept".into())));

    let deleted = engine
        .collect(&format!(
            "DELETE FROM registrations WHERE event = '{EVENT}' AND distance = '5K' AND bib > 100"
        ))
        .await?;
    assert_eq!(count(&deleted), 20);
    assert_eq!(consistent(store.as_ref()).await?, 100);
    Ok(())
}

/// Index rows damaged by raw writes (missing, orphaned, stale) never block
/// a write of their base row, and the write leaves them right.
async fn damaged_index_rows(store: Arc<dyn TableStore>) -> TestResult {
    demo::load(store.as_ref(), 30, |_, _| {}).await?;
    let engine = Engine::with_store(store.clone(), EngineOptions::default())
        .await?
        .session();
    let table = TableName::new("Registrations")?;
    engine
        .collect(&format!(
            "INSERT INTO registrations (event, distance, bib, name, gender, age) VALUES \
             ('{EVENT}', '5K', 1, 'Ann', 'F', 30), ('{EVENT}', '5K', 2, 'Bo', 'M', 40), \
             ('{EVENT}', '5K', 3, 'Cy', 'M', 50)"
        ))
        .await?;
    let pk = tablesql::storage::PartitionKey::new(format!("{EVENT}__5K"))?;
    let rk = |s: &str| tablesql::storage::RowKey::new(s);
    let delete = |row: &str| -> Result<WriteOp, Box<dyn std::error::Error>> {
        Ok(WriteOp::Delete {
            partition_key: pk.clone(),
            row_key: rk(row)?,
            if_match: IfMatch::Any,
        })
    };
    // Missing: bib 1's and bib 3's index rows. Orphan: one for bib 4, not
    // yet a row. Stale: bib 2's index row says another name.
    store.execute(&table, delete("AGE:030__1__Ann__F")?).await?;
    store.execute(&table, delete("AGE:050__3__Cy__M")?).await?;
    let orphan = Entity::new(pk.clone(), rk("AGE:060__4__Di__F")?)
        .with("name", EdmValue::String("someone else".into()));
    store.execute(&table, WriteOp::Insert(orphan)).await?;
    let stale = Entity::new(pk.clone(), rk("AGE:040__2__Bo__M")?)
        .with("name", EdmValue::String("stale".into()));
    store
        .execute(&table, WriteOp::Merge(stale, IfMatch::Any))
        .await?;

    let row = |bib: u32| format!("event = '{EVENT}' AND distance = '5K' AND bib = {bib}");
    for statement in [
        format!("DELETE FROM registrations WHERE {}", row(1)),
        format!(
            "INSERT INTO registrations (event, distance, bib, name, gender, age) \
             VALUES ('{EVENT}', '5K', 4, 'Di', 'F', 60)"
        ),
        format!("UPDATE registrations SET finish = 99 WHERE {}", row(2)),
        format!("UPDATE registrations SET age = 51 WHERE {}", row(3)),
    ] {
        engine.collect(&statement).await?;
    }
    // Bibs 2, 3 and 4 remain, each with exactly its index row.
    assert_eq!(consistent(store.as_ref()).await?, 3);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn damaged_index_rows_on_the_memory_store() -> TestResult {
    damaged_index_rows(Arc::new(MemoryStore::new())).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn damaged_index_rows_on_the_embedded_store() -> TestResult {
    damaged_index_rows(Arc::new(EmbeddedStore::in_memory()?)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn damaged_index_rows_on_azurite() -> TestResult {
    let config = super::azurite::fresh_account()?;
    damaged_index_rows(Arc::new(tablesql::storage::AzureStore::new(config)?)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_on_the_memory_store() -> TestResult {
    scenario(Arc::new(MemoryStore::new())).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_on_the_embedded_store() -> TestResult {
    scenario(Arc::new(EmbeddedStore::in_memory()?)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_on_azurite() -> TestResult {
    let config = super::azurite::fresh_account()?;
    scenario(Arc::new(tablesql::storage::AzureStore::new(config)?)).await
}

fn rows(n: std::ops::RangeInclusive<i32>, name: &str, age: i32) -> String {
    n.map(|b| format!("('{EVENT}', '10K', {b}, '{name}{b}', 'F', {age}, {b})"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `INSERT ... ON CONFLICT`: with index rows (the demo's registrations,
/// whose RowKey also holds name and age), every base row keeps exactly its
/// index row whatever the upsert changes; without (a key-value table), each
/// key is one entity.
async fn upserts(store: Arc<dyn TableStore>) -> TestResult {
    demo::load(store.as_ref(), 30, |_, _| {}).await?;
    let engine = Engine::with_store(store.clone(), EngineOptions::default())
        .await?
        .session();
    let insert =
        "INSERT INTO registrations (event, distance, bib, name, gender, age, finish) VALUES";
    let target = "ON CONFLICT (event, distance, bib)";
    assert_eq!(
        count(
            &engine
                .collect(&format!("{insert} {}", rows(1..=10, "A", 30)))
                .await?
        ),
        10
    );
    // Five exist: they are left, and not counted.
    let nothing = engine
        .collect(&format!(
            "{insert} {} {target} DO NOTHING",
            rows(6..=15, "B", 40)
        ))
        .await?;
    assert_eq!(count(&nothing), 5);
    assert_eq!(consistent(store.as_ref()).await?, 15);
    // Name and age change the RowKey and the index row's key.
    let updated = engine
        .collect(&format!(
            "{insert} {} {target} DO UPDATE SET name = EXCLUDED.name, age = EXCLUDED.age, finish = registrations.finish + EXCLUDED.finish",
            rows(11..=17, "C", 50)
        ))
        .await?;
    assert_eq!(count(&updated), 7);
    assert_eq!(consistent(store.as_ref()).await?, 17);
    let check = engine
        .collect(&format!(
            "SELECT count(*) FROM registrations WHERE event = '{EVENT}' AND name LIKE 'C%' AND age = 50 \
             AND ((bib <= 15 AND finish = 2 * bib) OR (bib > 15 AND finish = bib))"
        ))
        .await?;
    assert_eq!(
        check[0]
            .column(0)
            .as_primitive::<tablesql::datafusion::arrow::datatypes::Int64Type>()
            .value(0),
        7
    );
    // A WHERE that holds for none updates none.
    let none = engine
        .collect(&format!(
            "{insert} {} {target} DO UPDATE SET name = 'never' WHERE registrations.age > 60",
            rows(1..=3, "D", 70)
        ))
        .await?;
    assert_eq!(count(&none), 0);
    assert_eq!(consistent(store.as_ref()).await?, 17);

    // A table without index rows: one entity per key, upserted in place.
    engine
        .collect(
            "CREATE TABLE kv (k TEXT NOT NULL, id INT NOT NULL, v TEXT, PRIMARY KEY (k, id)) \
             WITH (storage_table = 'Keyvalues', partition_key = '{k}', row_key = '{id:05}')",
        )
        .await?;
    let upsert = "INSERT INTO kv (k, id, v) VALUES ('a', 1, 'x'), ('a', 2, 'y') \
                  ON CONFLICT (k, id) DO UPDATE SET v = EXCLUDED.v";
    assert_eq!(count(&engine.collect(upsert).await?), 2);
    assert_eq!(
        count(&engine.collect(&upsert.replace("'x'", "'z'")).await?),
        2
    );
    let stored = store
        .query_all(&TableName::new("Keyvalues")?, &Query::all())
        .await?;
    let values: Vec<(String, Option<&EdmValue>)> = stored
        .iter()
        .map(|e| {
            (
                e.row_key().as_str().to_owned(),
                e.entity.properties.get("v"),
            )
        })
        .collect();
    assert_eq!(
        values,
        vec![
            ("00001".to_owned(), Some(&EdmValue::String("z".into()))),
            ("00002".to_owned(), Some(&EdmValue::String("y".into()))),
        ]
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upserts_on_the_memory_store() -> TestResult {
    upserts(Arc::new(MemoryStore::new())).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upserts_on_the_embedded_store() -> TestResult {
    upserts(Arc::new(EmbeddedStore::in_memory()?)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upserts_on_azurite() -> TestResult {
    let config = super::azurite::fresh_account()?;
    upserts(Arc::new(tablesql::storage::AzureStore::new(config)?)).await
}

/// An UPDATE writes back what it did not change as stored: an
/// application's Int32 under a BIGINT column stays Int32, a DateTime keeps
/// its 100-ns ticks though SELECT reads microseconds, an undeclared
/// property stays; a changed column takes the mapping's type. An upsert's
/// `DO UPDATE` is an UPDATE.
async fn values_kept_as_written(store: Arc<dyn TableStore>) -> TestResult {
    let engine = Engine::with_store(store.clone(), EngineOptions::default())
        .await?
        .session();
    engine
        .collect(
            "CREATE TABLE kept (part TEXT NOT NULL, name TEXT NOT NULL, n BIGINT, at TIMESTAMP, \
             note TEXT, PRIMARY KEY (part, name)) \
             WITH (storage_table = 'Kept', partition_key = '{part}', row_key = '{name}')",
        )
        .await?;
    let table = TableName::new("Kept")?;
    let ticks = chrono::DateTime::parse_from_rfc3339("2026-01-02T03:04:05.1234567Z")?
        .with_timezone(&chrono::Utc);
    let (pk, rk) = (PartitionKey::new("a")?, RowKey::new("1")?);
    let written = Entity::new(pk.clone(), rk.clone())
        .with("n", EdmValue::Int32(7))
        .with("at", EdmValue::DateTime(ticks))
        .with("note", EdmValue::String("x".into()))
        .with("app", EdmValue::Int32(1));
    store.execute(&table, WriteOp::Insert(written)).await?;
    let stored = || async {
        Ok::<_, Box<dyn std::error::Error>>(
            store
                .get(&table, &pk, &rk)
                .await?
                .ok_or("the row is gone")?
                .entity
                .properties,
        )
    };

    let shown = engine
        .collect("SELECT at FROM kept WHERE part = 'a' AND name = '1'")
        .await?;
    let micros = shown[0]
        .column(0)
        .as_primitive::<TimestampMicrosecondType>()
        .value(0);
    assert_eq!(
        micros,
        ticks.timestamp_micros(),
        "SELECT reads microseconds"
    );

    engine
        .collect("UPDATE kept SET note = 'y' WHERE part = 'a' AND name = '1'")
        .await?;
    let after = stored().await?;
    assert_eq!(after["n"], EdmValue::Int32(7));
    assert_eq!(after["at"], EdmValue::DateTime(ticks));
    assert_eq!(after["note"], EdmValue::String("y".into()));
    assert_eq!(after["app"], EdmValue::Int32(1));

    engine
        .collect(
            "INSERT INTO kept (part, name, note) VALUES ('a', '1', 'z') \
             ON CONFLICT (part, name) DO UPDATE SET note = excluded.note",
        )
        .await?;
    let after = stored().await?;
    assert_eq!(after["n"], EdmValue::Int32(7));
    assert_eq!(after["at"], EdmValue::DateTime(ticks));
    assert_eq!(after["note"], EdmValue::String("z".into()));

    engine
        .collect("UPDATE kept SET n = n + 1 WHERE part = 'a' AND name = '1'")
        .await?;
    let after = stored().await?;
    assert_eq!(
        after["n"],
        EdmValue::Int64(8),
        "a changed value is the column's type"
    );
    assert_eq!(after["at"], EdmValue::DateTime(ticks));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn values_kept_as_written_on_the_memory_store() -> TestResult {
    values_kept_as_written(Arc::new(MemoryStore::new())).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn values_kept_as_written_on_the_embedded_store() -> TestResult {
    values_kept_as_written(Arc::new(EmbeddedStore::in_memory()?)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn values_kept_as_written_on_azurite() -> TestResult {
    let config = super::azurite::fresh_account()?;
    values_kept_as_written(Arc::new(tablesql::storage::AzureStore::new(config)?)).await
}
