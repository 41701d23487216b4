//! Interoperability with the official Azure SDK for Python (azure-data-tables,
//! pinned by `scripts/python-env`), on the real Azurite: what tablesql writes
//! the SDK reads with the same EDM types and values, and what the SDK writes
//! tablesql reads back exactly. `tests/interop/sdk_check.py` is the SDK side.
//!
//! Both sides name the account as users do, `UseDevelopmentStorage=true`, so
//! this runs on Azurite's devstoreaccount1. No other test uses that account,
//! and everything here is one `#[test]`, so nothing else sees its tables or
//! races on them.

use std::cmp::Ordering;
use std::ffi::OsStr;
use std::path::Path;
use std::process::Command;

use chrono::{DateTime, Utc};
use serde_json::Value;
use tablesql::demo::{Plan, TABLE};
use tablesql::storage::azure::AzureConfig;
use tablesql::storage::odata::{entity_from_json, value_from_json};
use tablesql::storage::{
    AzureStore, EdmValue, Entity, PartitionKey, Query, RowKey, StorageError, TableName, TableStore,
    WriteOp,
};

type TestResult<T = ()> = Result<T, Box<dyn std::error::Error>>;

/// The connection string both tablesql and the SDK are given.
const DEV_STORAGE: &str = "UseDevelopmentStorage=true";
/// The SDK side of the test.
const SDK_CHECK: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/interop/sdk_check.py");
/// Registrations `tablesql demo` loads (two entities each).
const DEMO_ROWS: u64 = 2000;
/// The table `sdk_check.py write` fills. Each run recreates the tables it
/// writes and leaves them behind to look at.
const SDK_TABLE: &str = "SdkWritten";
/// The table `AzureStore` fills with every EDM type for the SDK to read.
const TABLESQL_TABLE: &str = "TablesqlWritten";
/// The partition of every entity `sdk_check.py write` writes.
const SDK_PARTITION: &str = "sdk";

#[test]
fn tablesql_and_the_python_sdk_read_each_others_entities() -> TestResult {
    dev_storage_is_the_test_azurite()?;
    let python = python()?;
    let dir = tempfile::tempdir()?;
    demo_tables_and_scan_in_separate_processes()?;
    sdk_reads_what_tablesql_wrote(&python, dir.path())?;
    sdk_reads_every_type_tablesql_writes(&python, dir.path())?;
    tablesql_reads_what_the_sdk_wrote(&python, dir.path())?;
    an_update_keeps_what_the_sdk_wrote(&python, dir.path())
}

/// `demo`, `tables` and `scan` as a user runs them, each its own process, so
/// everything between them crosses through Azurite.
fn demo_tables_and_scan_in_separate_processes() -> TestResult {
    tablesql(&["demo", "--rows", &DEMO_ROWS.to_string()])?;

    let tables = tablesql(&["tables"])?;
    let count = (2 * DEMO_ROWS).to_string();
    assert!(
        tables.lines().any(|line| {
            let words: Vec<&str> = line.split_whitespace().collect();
            words.contains(&TABLE) && words.contains(&count.as_str())
        }),
        "`tables` does not list {TABLE} with {count} entities:\n{tables}"
    );

    let first_five = &demo_entities(DEMO_ROWS)?[..5];
    let table = tablesql(&["scan", TABLE, "--limit", "5"])?;
    let rows: Vec<&str> = table
        .lines()
        .filter(|line| line.contains(first_five[0].partition_key.as_str()))
        .collect();
    assert_eq!(rows.len(), 5, "`scan --limit 5` printed:\n{table}");
    for (row, want) in rows.iter().zip(first_five) {
        assert!(
            row.contains(want.row_key.as_str()),
            "expected {want:?} in {row}"
        );
    }
    assert!(table.contains("(5 entities)"), "{table}");

    let json = tablesql(&["scan", TABLE, "--limit", "5", "--format", "json"])?;
    assert_same_entities(
        "scan --limit 5 --format json",
        &parse_scan_json(&json)?,
        first_five,
    );
    Ok(())
}

/// The whole table as tablesql reads it is the demo data exactly, and the SDK
/// reads every one of those entities with the same types and values (and the
/// same Timestamp and ETag).
fn sdk_reads_what_tablesql_wrote(python: &str, dir: &Path) -> TestResult {
    sdk_verifies_scan(python, dir, TABLE, &demo_entities(DEMO_ROWS)?)
}

/// The demo data has four EDM types only: here `AzureStore` writes all eight,
/// edge values included, and the SDK reads them with the same types and values.
fn sdk_reads_every_type_tablesql_writes(python: &str, dir: &Path) -> TestResult {
    use EdmValue as V;
    let mut entities = expected_sdk_entities()?;
    // tablesql sends non-ASCII as \u escapes to the emulator (see
    // `AzureConfig::emulator`); a long string checks that on the way back.
    // The service's first and last DateTime; the SDK keeps only 6 digits in
    // its datetime but the service's text beside it. No -0.0: Azurite
    // returns it as 0.0 however it is sent.
    entities.push(sdk_entity(
        "tablesql only",
        [
            ("long_unicode", V::String("é".repeat(30_000))),
            ("earliest", datetime("1601-01-01T00:00:00Z")?),
            ("latest", datetime("9999-12-31T23:59:59.9999999Z")?),
        ],
    )?);
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async {
        let store = dev_store()?;
        let table = TableName::new(TABLESQL_TABLE)?;
        match store.delete_table(&table).await {
            Ok(()) | Err(StorageError::TableNotFound(_)) => {}
            Err(e) => return Err(e.into()),
        }
        store.create_table(&table).await?;
        let inserts = entities.iter().cloned().map(WriteOp::Insert).collect();
        store.execute_batch(&table, inserts).await?;
        TestResult::Ok(())
    })?;
    entities.sort_by(key_order);
    sdk_verifies_scan(python, dir, TABLESQL_TABLE, &entities)
}

/// `scan TABLE --format json` prints `expected`, and `sdk_check.py verify`
/// reads the same from the table with the SDK.
fn sdk_verifies_scan(python: &str, dir: &Path, table: &str, expected: &[Entity]) -> TestResult {
    let json = tablesql(&["scan", table, "--format", "json"])?;
    assert_same_entities(
        &format!("scan {table} --format json"),
        &parse_scan_json(&json)?,
        expected,
    );
    let dump = dir.join(format!("{table}.json"));
    std::fs::write(&dump, json)?;
    let summary = sdk_check(
        python,
        [OsStr::new("verify"), OsStr::new(table), dump.as_os_str()],
    )?;
    let count = format!("{table}: {} entities", expected.len());
    assert!(
        summary.contains(&count),
        "sdk_check.py verify printed: {summary}"
    );
    Ok(())
}

/// Entities the SDK wrote, with every EDM type, read through `AzureStore` by
/// point read and by query are exactly `expected_sdk_entities`.
fn tablesql_reads_what_the_sdk_wrote(python: &str, dir: &Path) -> TestResult {
    let report = dir.join("sdk-written.json");
    sdk_check(
        python,
        [
            OsStr::new("write"),
            OsStr::new(SDK_TABLE),
            report.as_os_str(),
        ],
    )?;
    let mut expected = expected_sdk_entities()?;
    // The two lists of expectations, Python's and Rust's, must not drift apart.
    let written = parse_report(&std::fs::read_to_string(&report)?)?;
    assert_same_entities(
        "sdk_check.py's report vs expected_sdk_entities",
        &written,
        &expected,
    );

    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async {
        let store = dev_store()?;
        let table = TableName::new(SDK_TABLE)?;
        for want in &expected {
            let got = store
                .get(&table, &want.partition_key, &want.row_key)
                .await?
                .ok_or_else(|| format!("get found no entity {:?}", want.row_key))?;
            assert_entity_eq("get", &got.entity, want);
        }
        let all = store.query_all(&table, &Query::all()).await?;
        let all: Vec<Entity> = all.into_iter().map(|e| e.entity).collect();
        expected.sort_by(key_order);
        assert_same_entities("query_all", &all, &expected);
        Ok(())
    })
}

/// A mapping over the SDK's entities, and an UPDATE of one column through
/// it, each a `tablesql query` process: the SDK reads back every other
/// property as it wrote it: an Int32 under a BIGINT column stays Int32, a
/// DateTime under a TIMESTAMP column keeps its seventh fractional digit
/// (tablesql reads microseconds), undeclared properties stay.
fn an_update_keeps_what_the_sdk_wrote(python: &str, dir: &Path) -> TestResult {
    tablesql(&[
        "query",
        &format!(
            // The catalog outlives a run; the SDK's table is written anew.
            "CREATE TABLE IF NOT EXISTS sdk_kept (part TEXT NOT NULL, name TEXT NOT NULL, int32 BIGINT, \
             int64_small BIGINT, micros TIMESTAMP, ticks TIMESTAMP, note TEXT, \
             PRIMARY KEY (part, name)) WITH (storage_table = '{SDK_TABLE}', \
             partition_key = '{{part}}', row_key = '{{name}}')"
        ),
    ])?;
    let seen = tablesql(&[
        "query",
        "SELECT ticks FROM sdk_kept WHERE part = 'sdk' AND name = 'other types, é'''",
    ])?;
    assert!(
        seen.contains("12:34:56.123456") && !seen.contains("1234567"),
        "SELECT shows microseconds: {seen}"
    );
    tablesql(&[
        "query",
        &format!("UPDATE sdk_kept SET note = 'updated' WHERE part = '{SDK_PARTITION}'"),
    ])?;
    // What the SDK wrote, the new column on every entity, and the id the
    // conditional write carried (docs/azure.md): any string.
    let written = dir.join("sdk-written.json");
    let mut expected: Value = serde_json::from_str(&std::fs::read_to_string(&written)?)?;
    for entity in expected
        .as_array_mut()
        .ok_or("the report is no JSON array")?
    {
        entity["properties"]["note"] = serde_json::json!(["Edm.String", "updated"]);
        entity["properties"]["TablesqlWriteId"] = serde_json::json!(["Edm.String", null]);
    }
    let path = dir.join("sdk-updated.json");
    std::fs::write(&path, serde_json::to_string(&expected)?)?;
    let summary = sdk_check(
        python,
        [
            OsStr::new("expect"),
            OsStr::new(SDK_TABLE),
            path.as_os_str(),
        ],
    )?;
    assert!(
        summary.contains("4 entities as expected"),
        "sdk_check.py expect printed: {summary}"
    );
    Ok(())
}

/// What `sdk_check.py write` stores (its `sdk_entities`), value for value as
/// tablesql must read it back; keep the two lists in step. Python writes 2.0
/// as a float, so it must come back a Double, not an Int32.
fn expected_sdk_entities() -> TestResult<Vec<Entity>> {
    use EdmValue as V;
    Ok(vec![
        sdk_entity(
            "strings",
            [
                ("plain", V::String("hello".into())),
                ("quotes", V::String("it's \"quoted\"".into())),
                (
                    "unicode",
                    V::String("Zoë Ørsted, 日本語, 🏃 (outside the BMP)".into()),
                ),
                ("empty", V::String(String::new())),
                ("explicit", V::String("typed".into())),
            ],
        )?,
        sdk_entity(
            "integers",
            [
                ("int32", V::Int32(42)),
                ("int32_min", V::Int32(i32::MIN)),
                ("int32_max", V::Int32(i32::MAX)),
                ("int32_explicit", V::Int32(-7)),
                ("int64_small", V::Int64(5)),
                ("int64_2p53p1", V::Int64((1 << 53) + 1)),
                ("int64_min", V::Int64(i64::MIN)),
                ("int64_max", V::Int64(i64::MAX)),
            ],
        )?,
        sdk_entity(
            "doubles",
            [
                ("two", V::Double(2.0)),
                ("tenth", V::Double(0.1)),
                ("huge_negative", V::Double(-1.5e300)),
                ("subnormal", V::Double(f64::from_bits(1))), // 5e-324
                ("nan", V::Double(f64::NAN)),
                ("infinity", V::Double(f64::INFINITY)),
                ("negative_infinity", V::Double(f64::NEG_INFINITY)),
                ("explicit", V::Double(3.0)),
            ],
        )?,
        sdk_entity(
            "other types, é'",
            [
                ("yes", V::Boolean(true)),
                ("no", V::Boolean(false)),
                ("explicit_bool", V::Boolean(true)),
                ("micros", datetime("2024-02-29T12:34:56.123456Z")?),
                ("ticks", datetime("2024-02-29T12:34:56.1234567Z")?),
                (
                    "guid",
                    V::Guid(uuid::Uuid::parse_str(
                        "c9da6455-213d-42c9-9a79-3e9149a57833",
                    )?),
                ),
                ("bytes", V::Binary((0..=255).collect())),
            ],
        )?,
    ])
}

/// An entity in the `sdk` partition.
fn sdk_entity<const N: usize>(
    row_key: &str,
    properties: [(&str, EdmValue); N],
) -> TestResult<Entity> {
    let entity = Entity::new(PartitionKey::new(SDK_PARTITION)?, RowKey::new(row_key)?);
    Ok(properties
        .into_iter()
        .fold(entity, |e, (name, value)| e.with(name, value)))
}

/// An Edm.DateTime from the service's text.
fn datetime(text: &str) -> TestResult<EdmValue> {
    Ok(EdmValue::DateTime(
        DateTime::parse_from_rfc3339(text)?.with_timezone(&Utc),
    ))
}

/// Every entity `demo --rows n` writes, in the service's key order.
fn demo_entities(rows: u64) -> TestResult<Vec<Entity>> {
    let plan = Plan::new(rows);
    let mut all = Vec::new();
    for b in 0..plan.len() {
        for registration in plan.registrations(b) {
            all.extend(registration.entities()?);
        }
    }
    all.sort_by(key_order);
    Ok(all)
}

/// The order in which the service returns entities.
fn key_order(a: &Entity, b: &Entity) -> Ordering {
    (&a.partition_key, &a.row_key).cmp(&(&b.partition_key, &b.row_key))
}

/// Entities from `scan --format json`, decoded as the service's JSON.
fn parse_scan_json(json: &str) -> TestResult<Vec<Entity>> {
    let parsed: Value = serde_json::from_str(json)?;
    let items = parsed
        .as_array()
        .ok_or("scan --format json printed no JSON array")?;
    items
        .iter()
        .map(|item| {
            let obj = item
                .as_object()
                .ok_or("scan --format json printed a non-object")?;
            Ok(entity_from_json(obj, None)?.entity)
        })
        .collect()
}

/// Entities from the report of `sdk_check.py write`: per entity its keys and
/// per property `[EDM type, value in the service's JSON form]`.
fn parse_report(json: &str) -> TestResult<Vec<Entity>> {
    let parsed: Value = serde_json::from_str(json)?;
    let items = parsed.as_array().ok_or("the report is no JSON array")?;
    let text = |item: &Value, key: &str| -> TestResult<String> {
        Ok(item[key]
            .as_str()
            .ok_or(format!("report entity without {key}"))?
            .to_owned())
    };
    let mut entities = Vec::new();
    for item in items {
        let mut entity = Entity::new(
            PartitionKey::new(text(item, "PartitionKey")?)?,
            RowKey::new(text(item, "RowKey")?)?,
        );
        let properties = item["properties"]
            .as_object()
            .ok_or("report entity without properties")?;
        for (name, typed) in properties {
            let edm_type = typed[0].as_str().ok_or("a property without its EDM type")?;
            let value = value_from_json(&typed[1], Some(edm_type))
                .map_err(|why| format!("report property {name:?}: {why}"))?;
            entity.properties.insert(name.clone(), value);
        }
        entities.push(entity);
    }
    Ok(entities)
}

/// Same keys, same property names, and each value of the same EDM type with
/// the same bits (`EdmValue`'s equality); panics naming the first difference.
fn assert_entity_eq(what: &str, got: &Entity, want: &Entity) {
    let at = format!("{what}: entity {:?}/{:?}", want.partition_key, want.row_key);
    assert_eq!(
        (&got.partition_key, &got.row_key),
        (&want.partition_key, &want.row_key),
        "{at}: keys"
    );
    assert_eq!(
        got.properties.keys().collect::<Vec<_>>(),
        want.properties.keys().collect::<Vec<_>>(),
        "{at}: property names"
    );
    for (name, value) in &want.properties {
        assert_eq!(
            got.properties.get(name),
            Some(value),
            "{at}, property {name:?}"
        );
    }
}

/// The same entities in the same order; panics naming the first difference.
fn assert_same_entities(what: &str, got: &[Entity], want: &[Entity]) {
    for (got, want) in got.iter().zip(want) {
        assert_entity_eq(what, got, want);
    }
    assert_eq!(got.len(), want.len(), "{what}: number of entities");
}

/// `UseDevelopmentStorage=true` means 127.0.0.1:10002 to tablesql and to the
/// SDK alike, so the test Azurite must be the one listening there.
fn dev_storage_is_the_test_azurite() -> TestResult {
    let endpoint = crate::azurite::endpoint()?;
    let dev = AzureConfig::parse(DEV_STORAGE)?;
    let test_account = format!("{}/{}", endpoint.trim_end_matches('/'), dev.account);
    if test_account != dev.endpoint {
        return Err(format!(
            "the interop test needs Azurite where {DEV_STORAGE} points ({}), \
             but TABLESQL_TEST_AZURITE is {endpoint}; run it with ./scripts/test \
             and the default AZURITE_PORT",
            dev.endpoint
        )
        .into());
    }
    Ok(())
}

/// The Python with the Azure SDK, from `scripts/python-env`.
fn python() -> Result<String, String> {
    std::env::var("TABLESQL_TEST_PYTHON").map_err(|_| {
        "TABLESQL_TEST_PYTHON is not set, so there is no Python with the Azure SDK \
         (azure-data-tables) to check interoperability with. Run the tests with \
         ./scripts/test, which creates .tools/venv with the pinned SDK \
         (scripts/python-env); or run scripts/python-env yourself and set \
         TABLESQL_TEST_PYTHON to the python path it prints"
            .to_owned()
    })
}

/// `AzureStore` on the development account, as the `azure:` store location
/// builds it.
fn dev_store() -> TestResult<AzureStore> {
    Ok(AzureStore::new(AzureConfig::parse(DEV_STORAGE)?)?)
}

/// The tablesql binary on the development account. `TABLESQL_STORE` is
/// removed so that a user's setting cannot redirect it.
fn tablesql(args: &[&str]) -> TestResult<String> {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tablesql"));
    cmd.arg("--store")
        .arg(format!("azure:{DEV_STORAGE}"))
        .args(args)
        .env_remove("TABLESQL_STORE")
        .env("RUST_BACKTRACE", "0");
    stdout_of(&mut cmd)
}

/// `sdk_check.py` with the SDK's Python.
fn sdk_check<'a>(python: &str, args: impl IntoIterator<Item = &'a OsStr>) -> TestResult<String> {
    stdout_of(Command::new(python).arg(SDK_CHECK).args(args))
}

/// A command's stdout; if it fails, an error carrying all it printed.
fn stdout_of(cmd: &mut Command) -> TestResult<String> {
    let out = cmd
        .output()
        .map_err(|e| format!("{cmd:?} did not start: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{cmd:?} failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
        .into());
    }
    Ok(String::from_utf8(out.stdout)?)
}
