//! Entra ID sign-in against the local Table service, whose account accepts
//! bearer tokens and, as many tenants set it, refuses Shared Key: a client
//! secret at an HTTPS token endpoint on loopback, with tokens that expire
//! within a scan; and a managed identity's endpoints (`IDENTITY_ENDPOINT`,
//! `MSI_ENDPOINT`), read by a `tablesql` process from its environment.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tablesql::storage::azure::AzureConfig;
use tablesql::storage::{
    AzureStore, EdmValue, Entity, PartitionKey, Query, RowKey, StorageError, TableName, TableStore,
    WriteOp,
};
use tablesql::tableservice::{Identity, IdentityOptions, Profile, serve_authority};

use crate::local_service::Local;

type TestResult<T = ()> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

fn identity(lifetime: Duration) -> Arc<Identity> {
    Arc::new(Identity::new(IdentityOptions {
        tenant: "contoso".into(),
        client_id: "reporting-app".into(),
        client_secret: "s3cret+/=".into(),
        identity_header: "from-the-host".into(),
        lifetime,
        shared_key: false,
    }))
}

/// A CA and a certificate it signs for 127.0.0.1, made with `openssl`:
/// (certificate, key, CA) in `dir`.
fn certificates(dir: &Path) -> TestResult<(PathBuf, PathBuf, PathBuf)> {
    let at = |name: &str| dir.join(name);
    let run = |args: &[&str]| -> TestResult {
        let out = Command::new("openssl")
            .current_dir(dir)
            .args(args)
            .output()?;
        if !out.status.success() {
            return Err(
                format!("openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr)).into(),
            );
        }
        Ok(())
    };
    let rsa = ["-newkey", "rsa:2048", "-nodes"];
    run(&[
        &["req", "-x509"][..],
        &rsa,
        &[
            "-days",
            "2",
            "-subj",
            "/CN=tablesql test CA",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
        ],
    ]
    .concat())?;
    run(&[
        &["req"][..],
        &rsa,
        &[
            "-subj",
            "/CN=127.0.0.1",
            "-keyout",
            "leaf.key",
            "-out",
            "leaf.csr",
        ],
    ]
    .concat())?;
    std::fs::write(
        at("leaf.ext"),
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
    )?;
    run(&[
        "x509",
        "-req",
        "-in",
        "leaf.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        "leaf.ext",
        "-out",
        "leaf.pem",
    ])?;
    Ok((at("leaf.pem"), at("leaf.key"), at("ca.pem")))
}

/// The account's endpoint, with no key: how a client that signs in names it.
fn endpoint(local: &Local) -> String {
    format!(
        "AccountName=devstoreaccount1;TableEndpoint=http://{}/devstoreaccount1;Emulator=false",
        local.running.addr
    )
}

async fn fill(store: &dyn TableStore, t: &TableName, rows: usize) -> TestResult {
    let ops: Vec<WriteOp> = (0..rows)
        .map(|n| {
            Ok(WriteOp::Insert(
                Entity::new(PartitionKey::new("p")?, RowKey::new(format!("{n:06}"))?)
                    .with("n", EdmValue::Int32(n as i32)),
            ))
        })
        .collect::<TestResult<_>>()?;
    for chunk in ops.chunks(100) {
        store.execute_batch(t, chunk.to_vec()).await?;
    }
    Ok(())
}

/// A client secret signs in at the HTTPS token endpoint where Shared Key is
/// refused; a scan that outlives two tokens' lives fetches the next token
/// before each expires (the service refuses none), and a wrong secret is
/// refused with Entra ID's own code.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_secret_signs_in_and_its_token_is_renewed_within_a_long_scan() -> TestResult {
    let identity = identity(Duration::from_secs(6));
    let local = Local::start_with(Profile::Storage, &[], Some(identity.clone()))?;
    let dir = tempfile::tempdir()?;
    let (cert, key, ca) = certificates(dir.path())?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let authority = serve_authority(listener, &cert, &key, identity.clone())?;
    let t = TableName::new("Signed")?;

    // Shared Key is off on this account.
    let keyed = local.store()?;
    match keyed.create_table(&t).await {
        Err(StorageError::Unauthorized { code, .. }) => {
            assert_eq!(code, "KeyBasedAuthenticationNotPermitted")
        }
        other => panic!("Shared Key was not refused: {other:?}"),
    }

    let conn = format!(
        "{};AuthScheme=ClientSecret;TenantId=contoso;ClientId=reporting-app;ClientSecret=s3cret+/=;AuthorityHost={};CaFile={}",
        endpoint(&local),
        authority.host(),
        ca.display()
    );
    let store = AzureStore::new(AzureConfig::parse(&conn)?)?;
    store.create_table(&t).await?;
    fill(&store, &t, 9000).await?;

    // 9,000 entities at 1,000 a second: nine pages over at least eight
    // seconds, with tokens that live six, each replaced three seconds
    // before it expires.
    local.service().set_limits(|l| l.partition_rate = 1000.0);
    let before = identity.issued();
    let started = Instant::now();
    let rows = store
        .query_all(&t, &Query::partition(PartitionKey::new("p")?))
        .await?;
    let took = started.elapsed();
    assert_eq!(rows.len(), 9000);
    assert!(took >= Duration::from_secs(8), "the scan took {took:?}");
    let renewed = identity.issued() - before;
    assert!(renewed >= 2, "{renewed} tokens in a scan of {took:?}");
    assert_eq!(
        identity.refused(),
        0,
        "a request went out with an expired token"
    );
    assert_eq!(store.stats().tokens, identity.issued());

    let wrong = conn.replace("ClientSecret=s3cret+/=", "ClientSecret=guess");
    let store = AzureStore::new(AzureConfig::parse(&wrong)?)?;
    match store
        .query_all(&t, &Query::partition(PartitionKey::new("p")?))
        .await
    {
        Err(StorageError::Unauthorized { code, message }) => {
            assert_eq!(code, "SignInFailed");
            assert!(message.contains("AADSTS7000215"), "{message}");
            assert!(!message.contains("guess"), "the secret is shown: {message}");
        }
        other => panic!("a wrong secret signed in: {other:?}"),
    }
    Ok(())
}

/// `tablesql` on the local service's account with `scheme`, in a process
/// whose environment holds `env` and no other identity variable.
fn hosted(local: &Local, scheme: &str, home: &Path, env: &[(&str, &str)]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tablesql"));
    cmd.env_remove("TABLESQL_STORE")
        .env("HOME", home)
        .arg("--store")
        .arg(format!("azure:{}{scheme}", endpoint(local)));
    for var in [
        "IDENTITY_ENDPOINT",
        "IDENTITY_HEADER",
        "MSI_ENDPOINT",
        "MSI_SECRET",
        "AZURE_CLIENT_ID",
        "AZURE_CLIENT_SECRET",
        "AZURE_TENANT_ID",
        "AZURE_FEDERATED_TOKEN_FILE",
    ] {
        cmd.env_remove(var);
    }
    cmd.envs(env.iter().copied());
    cmd
}

/// A managed identity: `tablesql query` in a process whose environment
/// names the host's endpoint, as App Service sets `IDENTITY_ENDPOINT` and
/// `IDENTITY_HEADER` (and older hosts `MSI_ENDPOINT` and `MSI_SECRET`);
/// with no scheme in the connection string the default chain finds it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_managed_identity_signs_in_from_its_hosts_endpoint() -> TestResult {
    let identity = identity(Duration::from_secs(3600));
    let local = Local::start_with(Profile::Storage, &[], Some(identity.clone()))?;
    let dir = tempfile::tempdir()?;
    let msi = format!("http://{}/msi/token", local.running.addr);
    let cases: [(&str, [(&str, &str); 2]); 3] = [
        (
            ";AuthScheme=ManagedIdentity",
            [
                ("IDENTITY_ENDPOINT", &msi),
                ("IDENTITY_HEADER", "from-the-host"),
            ],
        ),
        (
            ";AuthScheme=ManagedIdentity",
            [("MSI_ENDPOINT", &msi), ("MSI_SECRET", "from-the-host")],
        ),
        (
            "",
            [
                ("IDENTITY_ENDPOINT", &msi),
                ("IDENTITY_HEADER", "from-the-host"),
            ],
        ),
    ];
    let home = dir.path().join("home");
    std::fs::create_dir(&home)?;
    for (n, (scheme, env)) in cases.iter().enumerate() {
        let before = identity.issued();
        let mut cmd = hosted(&local, scheme, &home, env);
        cmd.args([
            "query",
            "--format",
            "csv",
            &format!("CREATE TABLE hosted{n} (k TEXT PRIMARY KEY, v INT)"),
        ]);
        let out = tokio::task::spawn_blocking(move || cmd.output()).await??;
        assert!(
            out.status.success(),
            "case {n}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(identity.issued() > before, "case {n} fetched no token");
    }
    // The header is checked: a wrong one gets no token, and the error says
    // which sign-in failed.
    let wrong = [
        ("IDENTITY_ENDPOINT", msi.as_str()),
        ("IDENTITY_HEADER", "a-guess"),
    ];
    let mut cmd = hosted(&local, ";AuthScheme=ManagedIdentity", &home, &wrong);
    cmd.args(["query", "SELECT 1"]);
    let out = tokio::task::spawn_blocking(move || cmd.output()).await??;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("Entra ID sign-in failed"), "{stderr}");
    assert!(!stderr.contains("a-guess"), "{stderr}");
    Ok(())
}
