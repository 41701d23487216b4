//! `tablesql table-service`: the local Table service with Azure's limits
//! (`tablesql::tableservice`), on an embedded store of its own.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use tablesql::storage::EmbeddedStore;
use tablesql::storage::azure::config::{DEV_ACCOUNT, DEV_ACCOUNT_KEY};
use tablesql::tableservice::{Account, Identity, IdentityOptions, Limits, Profile, Service};

/// The flags of `table-service`.
#[derive(clap::Args)]
pub struct TableServiceArgs {
    /// Address to listen on (port 0 picks a free port; the connection
    /// string printed names the bound one).
    #[arg(long, default_value = "127.0.0.1:10102")]
    listen: SocketAddr,
    /// The directory of the service's own embedded store (created if missing).
    #[arg(long, value_name = "DIR")]
    data: PathBuf,
    /// `storage` (Azure Storage's Table service) or `cosmos` (Cosmos DB's
    /// Table API): the defaults of every limit.
    #[arg(long, default_value = "storage")]
    profile: String,
    /// A limit or fault, NAME=VALUE (repeatable): partition_rate and
    /// account_rate (entities scanned per second: 2000 and 20000),
    /// partitions_per_server (100), busy_backlog_ms (1000),
    /// query_budget_ms (5000), busy, retry_hint, timeouts, empty_pages,
    /// lost_answers (shares of requests, 0 to 1), latency_ms and
    /// latency_sigma (a log-normal's median and spread), delete_grace_ms
    /// (40000), max_batch_bytes, max_row_key_bytes, seed.
    #[arg(long = "set", value_name = "NAME=VALUE")]
    set: Vec<String>,
    /// The account name requests are signed for.
    #[arg(long, default_value = DEV_ACCOUNT)]
    account: String,
    /// The account's key, base64 (default: the emulators' published key).
    #[arg(long, default_value = DEV_ACCOUNT_KEY, hide_default_value = true)]
    account_key: String,
    /// Accept Microsoft Entra ID bearer tokens too: a managed identity's
    /// endpoint at /msi/token on --listen, and, with --authority-listen,
    /// Entra ID's token endpoint for a client secret.
    #[arg(long)]
    entra: bool,
    /// With --entra: where Entra ID's token endpoint listens (TLS with
    /// --tls-cert and --tls-key: the Azure SDK signs in only over HTTPS).
    #[arg(long, value_name = "ADDR", requires_all = ["entra", "tls_cert", "tls_key"])]
    authority_listen: Option<SocketAddr>,
    /// PEM certificate chain of --authority-listen.
    #[arg(long, value_name = "FILE", requires = "authority_listen")]
    tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(long, value_name = "FILE", requires = "authority_listen")]
    tls_key: Option<PathBuf>,
    /// With --entra: the tenant, client id and secret of the one
    /// application that may sign in with a secret, as TENANT:CLIENT_ID:SECRET.
    #[arg(
        long,
        value_name = "TENANT:CLIENT_ID:SECRET",
        default_value = "tablesql:tablesql:tablesql",
        hide_default_value = true,
        requires = "entra"
    )]
    entra_app: String,
    /// With --entra: the value a managed identity's request must carry
    /// (the host's IDENTITY_HEADER or MSI_SECRET).
    #[arg(long, default_value = "tablesql", requires = "entra")]
    identity_header: String,
    /// With --entra: how long a token lives, in seconds.
    #[arg(long, value_name = "SECS", default_value_t = 3600, requires = "entra")]
    token_lifetime: u64,
    /// With --entra: refuse Shared Key signatures, as an account with
    /// Shared Key access turned off does (KeyBasedAuthenticationNotPermitted).
    #[arg(long, requires = "entra")]
    no_shared_key: bool,
}

pub async fn run(args: &TableServiceArgs) -> anyhow::Result<u8> {
    let profile: Profile = args.profile.parse().map_err(anyhow::Error::msg)?;
    let mut limits = Limits::new(profile);
    for s in &args.set {
        limits
            .set(s)
            .map_err(|e| anyhow::anyhow!("--set {s}: {e}"))?;
    }
    let account = Account::new(&args.account, &args.account_key)
        .map_err(|e| anyhow::anyhow!("--account-key: {e}"))?;
    let identity = args.entra.then(|| identity(args)).transpose()?;
    let account = match &identity {
        Some(identity) => account.with_identity(identity.clone()),
        None => account,
    };
    std::fs::create_dir_all(&args.data)?;
    let dir = args.data.clone();
    let store = tokio::task::spawn_blocking(move || EmbeddedStore::open(dir)).await??;
    let service = Arc::new(Service::new(Arc::new(store), limits));
    let listener = tokio::net::TcpListener::bind(args.listen).await?;
    let running = tablesql::tableservice::serve(listener, service, account)?;
    println!(
        "tablesql table-service ({}) listening on {}",
        args.profile, running.addr
    );
    println!("connection string: {}", running.connection_string());
    println!("counters: http://{}/_tablesql/counters", running.addr);
    // Kept alive as long as the service.
    let mut _authority = None;
    if let Some(identity) = &identity {
        println!(
            "entra connection string: AccountName={0};TableEndpoint=http://{1}/{0};Emulator=false",
            args.account, running.addr
        );
        println!(
            "managed identity: IDENTITY_ENDPOINT=http://{}/msi/token IDENTITY_HEADER={}",
            running.addr, args.identity_header
        );
        if let (Some(listen), Some(cert), Some(key)) =
            (args.authority_listen, &args.tls_cert, &args.tls_key)
        {
            let listener = tokio::net::TcpListener::bind(listen).await?;
            let authority =
                tablesql::tableservice::serve_authority(listener, cert, key, identity.clone())?;
            println!("client secret: AuthorityHost={}", authority.host());
            _authority = Some(authority);
        }
    }
    running.wait().await;
    Ok(0)
}

/// The Entra ID side of `--entra`.
fn identity(args: &TableServiceArgs) -> anyhow::Result<Arc<Identity>> {
    let mut app = args.entra_app.splitn(3, ':');
    let (Some(tenant), Some(client_id), Some(secret)) = (app.next(), app.next(), app.next()) else {
        anyhow::bail!("--entra-app: expected TENANT:CLIENT_ID:SECRET");
    };
    Ok(Arc::new(Identity::new(IdentityOptions {
        tenant: tenant.to_owned(),
        client_id: client_id.to_owned(),
        client_secret: secret.to_owned(),
        identity_header: args.identity_header.clone(),
        lifetime: std::time::Duration::from_secs(args.token_lifetime),
        shared_key: !args.no_shared_key,
    })))
}
