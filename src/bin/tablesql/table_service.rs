//! `tablesql table-service`: the local Table service with Azure's limits
//! (`tablesql::tableservice`), on an embedded store of its own.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use tablesql::storage::EmbeddedStore;
use tablesql::storage::azure::config::{DEV_ACCOUNT, DEV_ACCOUNT_KEY};
use tablesql::tableservice::{Account, Limits, Profile, Service};

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
    running.wait().await;
    Ok(0)
}
