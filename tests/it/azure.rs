//! The Azure backend against Azurite beyond the conformance suite: the other
//! ways to authorize (Shared Key Lite, account and table SAS), credentials
//! that never leak into errors, and the limits Azurite itself does not enforce,
//! which the client checks so that behaviour is Azure's.

use std::process::Command;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use tablesql::storage::azure::auth::{SignedParts, authorization};
use tablesql::storage::azure::config::DEV_ACCOUNT_KEY;
use tablesql::storage::azure::{AzureConfig, Credentials};
use tablesql::storage::{
    AzureStore, CmpOp, EdmValue, Entity, Filter, InvalidInput, PartitionKey, Query, RowKey,
    StorageError, TableName, TableStore, WriteOp,
};

type TestResult<T = ()> = Result<T, Box<dyn std::error::Error>>;

fn entity(p: &str, r: &str) -> TestResult<Entity> {
    Ok(Entity::new(PartitionKey::new(p)?, RowKey::new(r)?).with("V", EdmValue::Int32(1)))
}

/// Create, insert, batch, get and query: the operations a credential must allow.
async fn exercise(store: &AzureStore, table: &str) -> TestResult {
    let t = TableName::new(table)?;
    store.create_table(&t).await?;
    store
        .execute(&t, WriteOp::Insert(entity("p", "a")?))
        .await?;
    let ops = vec![
        WriteOp::Insert(entity("p", "b")?),
        WriteOp::InsertOrMerge(entity("p", "c")?),
    ];
    store.execute_batch(&t, ops).await?;
    let got = store
        .get(&t, &PartitionKey::new("p")?, &RowKey::new("a")?)
        .await?;
    assert!(got.is_some());
    assert_eq!(store.query_all(&t, &Query::all()).await?.len(), 3);
    Ok(())
}

#[tokio::test]
async fn shared_key_lite_signs_every_operation() -> TestResult {
    let mut config = crate::azurite::fresh_account()?;
    config.credentials = Credentials::SharedKey {
        key: STANDARD.decode(DEV_ACCOUNT_KEY)?,
        lite: true,
    };
    exercise(&AzureStore::new(config)?, "Lite").await
}

/// A SAS token made by the official Python SDK for an account of the test Azurite.
fn python_sas(account: &str, kind: &str) -> TestResult<String> {
    let python = std::env::var("TABLESQL_TEST_PYTHON")
        .map_err(|_| "TABLESQL_TEST_PYTHON is not set: run the tests with ./scripts/test")?;
    let script = r#"
import sys, datetime
from azure.core.credentials import AzureNamedKeyCredential
from azure.data.tables import generate_account_sas, generate_table_sas, ResourceTypes, AccountSasPermissions, TableSasPermissions
account, key, kind = sys.argv[1:4]
cred = AzureNamedKeyCredential(account, key)
expiry = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1)
if kind == "account":
    print(generate_account_sas(cred, ResourceTypes(service=True, container=True, object=True),
        AccountSasPermissions(read=True, write=True, delete=True, list=True, add=True, create=True, update=True), expiry))
else:
    print(generate_table_sas(cred, kind, permission=TableSasPermissions(read=True, add=True, update=True, delete=True), expiry=expiry))
"#;
    let out = Command::new(python)
        .args(["-c", script, account, DEV_ACCOUNT_KEY, kind])
        .output()?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into());
    }
    Ok(String::from_utf8(out.stdout)?.trim().to_owned())
}

#[tokio::test]
async fn account_and_table_sas() -> TestResult {
    let base = crate::azurite::fresh_account()?;
    let sas = python_sas(&base.account, "account")?;
    let conn = format!(
        "TableEndpoint={};SharedAccessSignature={sas}",
        base.endpoint
    );
    let config = AzureConfig::parse(&conn)?;
    assert!(matches!(config.credentials, Credentials::Sas(_)));
    assert!(!format!("{config:?} {config}").contains(&sas));
    exercise(&AzureStore::new(config)?, "AccountSas").await?;

    // A table SAS reaches its table's entities, and nothing else.
    let table_sas = python_sas(&base.account, "AccountSas")?;
    let conn = format!(
        "TableEndpoint={};SharedAccessSignature={table_sas}",
        base.endpoint
    );
    let store = AzureStore::new(AzureConfig::parse(&conn)?)?;
    let t = TableName::new("AccountSas")?;
    store
        .execute(&t, WriteOp::Insert(entity("p", "d")?))
        .await?;
    assert_eq!(store.query_all(&t, &Query::all()).await?.len(), 4);
    let err = store.create_table(&TableName::new("Other")?).await;
    assert!(
        matches!(err, Err(StorageError::Unauthorized { .. })),
        "{err:?}"
    );

    // A SAS store that cannot connect says so without its signature.
    let conn = format!(
        "TableEndpoint=http://127.0.0.1:1/{};SharedAccessSignature={sas};MaxRetries=1;RetryDelayMs=1",
        base.account
    );
    let err = AzureStore::new(AzureConfig::parse(&conn)?)?
        .list_tables()
        .await
        .err()
        .ok_or("nothing listens on port 1")?;
    let shown = format!("{err} {err:?}");
    assert!(matches!(err, StorageError::Unavailable { .. }), "{shown}");
    assert!(!shown.contains("sig=") && !shown.contains(&sas), "{shown}");
    Ok(())
}

#[tokio::test]
async fn a_wrong_key_is_refused_without_showing_it() -> TestResult {
    let mut config = crate::azurite::fresh_account()?;
    let key = b"not the account key at all".to_vec();
    config.credentials = Credentials::SharedKey {
        key: key.clone(),
        lite: false,
    };
    let err = AzureStore::new(config)?
        .list_tables()
        .await
        .err()
        .ok_or("a wrong key is refused")?;
    assert!(matches!(err, StorageError::Unauthorized { .. }), "{err:?}");
    let shown = format!("{err} {err:?}");
    assert!(
        !shown.contains(&STANDARD.encode(&key)) && !shown.contains("SharedKey "),
        "{shown}"
    );
    Ok(())
}

/// Sends a raw, signed request to Azurite, bypassing every client-side
/// check; returns the HTTP status. `path` is below the account, e.g. `/T()`;
/// `query` is already encoded.
pub async fn raw_request(
    config: &AzureConfig,
    method: &str,
    path: &str,
    query: &str,
    body: Option<serde_json::Value>,
) -> TestResult<u16> {
    let Credentials::SharedKey { key, .. } = &config.credentials else {
        return Err("Shared Key expected".into());
    };
    let date = chrono::Utc::now()
        .format("%a, %d %b %Y %H:%M:%S GMT")
        .to_string();
    let signed_path = format!("{}{path}", config.base_path());
    let content_type = if body.is_some() {
        "application/json"
    } else {
        ""
    };
    let parts = SignedParts {
        method,
        content_md5: "",
        content_type,
        date: &date,
        path: &signed_path,
        comp: None,
    };
    let mut req = reqwest::Client::new()
        .request(method.parse()?, format!("{}{path}{query}", config.endpoint))
        .header("x-ms-date", &date)
        .header("x-ms-version", "2019-02-02")
        .header("Accept", "application/json;odata=minimalmetadata")
        .header("Prefer", "return-no-content")
        .header(
            "Authorization",
            authorization(&config.account, key, &parts, false),
        );
    if let Some(body) = body {
        req = req
            .header("Content-Type", content_type)
            .body(body.to_string());
    }
    Ok(req.send().await?.status().as_u16())
}

async fn raw_insert(config: &AzureConfig, table: &str, body: serde_json::Value) -> TestResult<u16> {
    raw_request(config, "POST", &format!("/{table}"), "", Some(body)).await
}

#[tokio::test]
async fn limits_azurite_lets_through_are_checked_by_the_client() -> TestResult {
    let config = crate::azurite::fresh_account()?;
    let store = AzureStore::new(config.clone())?;
    let t = TableName::new("Limits")?;
    store.create_table(&t).await?;

    // 300 properties: Azurite stores it; Azure allows 252. The client refuses
    // before sending anything.
    let mut body = serde_json::json!({ "PartitionKey": "p", "RowKey": "wide" });
    let mut wide = Entity::new(PartitionKey::new("p")?, RowKey::new("wide2")?);
    for i in 0..300 {
        body[format!("P{i}")] = serde_json::json!(i);
        wide = wide.with(format!("P{i}"), EdmValue::Int32(i));
    }
    assert_eq!(
        raw_insert(&config, "Limits", body).await?,
        204,
        "Azurite accepts 300 properties"
    );
    let before = store.stats().requests;
    let err = store.execute(&t, WriteOp::Insert(wide)).await;
    assert!(matches!(
        err,
        Err(StorageError::Invalid(InvalidInput::TooManyProperties {
            count: 300
        }))
    ));

    // Over 1 MiB by the service's size formula: Azurite stores it too.
    let big = "x".repeat(30_000);
    let mut body = serde_json::json!({ "PartitionKey": "p", "RowKey": "big" });
    let mut large = Entity::new(PartitionKey::new("p")?, RowKey::new("big2")?);
    for i in 0..20 {
        body[format!("S{i}")] = serde_json::json!(big);
        large = large.with(format!("S{i}"), EdmValue::String(big.clone()));
    }
    assert_eq!(
        raw_insert(&config, "Limits", body).await?,
        204,
        "Azurite accepts 1.2 MB"
    );
    let err = store.execute(&t, WriteOp::Insert(large)).await;
    assert!(matches!(
        err,
        Err(StorageError::Invalid(InvalidInput::EntityTooLarge { .. }))
    ));

    // Cross-partition and 101-operation batches never leave the client.
    let cross = vec![
        WriteOp::Insert(entity("a", "1")?),
        WriteOp::Insert(entity("b", "1")?),
    ];
    let err = store.execute_batch(&t, cross).await;
    assert!(
        matches!(err, Err(StorageError::Batch { index: 1, .. })),
        "{err:?}"
    );
    let many = (0..101)
        .map(|i| entity("a", &i.to_string()).map(WriteOp::Insert))
        .collect::<TestResult<Vec<_>>>()?;
    let err = store.execute_batch(&t, many).await;
    assert!(matches!(
        err,
        Err(StorageError::Invalid(InvalidInput::TooManyOperations {
            count: 101
        }))
    ));
    assert_eq!(store.stats().requests, before, "nothing was sent");

    // 20 comparisons: Azure refuses more than 15 in one $filter; the client
    // sends 15 and applies the rest itself, so the answer is still exact.
    let seeded: Vec<WriteOp> = (0..40)
        .map(|i| {
            Entity::new(
                PartitionKey::new("q").unwrap(),
                RowKey::new(format!("{i:02}")).unwrap(),
            )
            .with("N", EdmValue::Int32(i))
        })
        .map(WriteOp::Insert)
        .collect();
    store.execute_batch(&t, seeded).await?;
    let filter = (1..20).fold(
        Filter::property("N", CmpOp::Ne, EdmValue::Int32(0)),
        |f, i| f.and(Filter::property("N", CmpOp::Ne, EdmValue::Int32(i))),
    );
    let q = Query::partition(PartitionKey::new("q")?).filter(filter);
    // Azurite itself answers a $filter of 20 comparisons, which Azure refuses;
    // `faults::filters_sent_hold_at_most_fifteen_comparisons` shows what the
    // client sends instead.
    let twenty: Vec<String> = (0..20).map(|i| format!("N%20ne%20{i}")).collect();
    let query = format!("?$filter={}", twenty.join("%20and%20"));
    assert_eq!(
        raw_request(&config, "GET", "/Limits()", &query, None).await?,
        200
    );
    let got = store.query_all(&t, &q).await?;
    let keys: Vec<&str> = got.iter().map(|e| e.row_key().as_str()).collect();
    let want: Vec<String> = (20..40).map(|i| format!("{i:02}")).collect();
    assert_eq!(keys, want);
    Ok(())
}
