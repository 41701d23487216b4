//! The Azurite emulator the Azure tests run against: `scripts/test` starts it
//! (through `scripts/azurite start`) and names it in `TABLESQL_TEST_AZURITE`.
//! Each test takes an account of its own from the pool that script creates,
//! so tests never see each other's tables; also not those of another test
//! process against the same Azurite (a second checkout's suite, say), which
//! claims its accounts the same way (`claim`).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tablesql::storage::azure::{AzureConfig, RetryPolicy};
use tablesql::storage::{AzureStore, TableStore};

/// Accounts `scripts/azurite start` creates: tsql000 .. tsql399.
const POOL: usize = 400;

/// The Table endpoint root of the running Azurite, e.g. `http://127.0.0.1:10002`.
pub fn endpoint() -> Result<String, String> {
    std::env::var("TABLESQL_TEST_AZURITE").map_err(|_| {
        "TABLESQL_TEST_AZURITE is not set, so there is no Azurite to test against. \
         Run the tests with ./scripts/test, which installs Azurite from npm \
         (scripts/azurite install) and starts it; or start it yourself with \
         `scripts/azurite start` and set TABLESQL_TEST_AZURITE=http://127.0.0.1:10002"
            .to_owned()
    })
}

/// A fresh, empty account on the running Azurite, with quick retries. The
/// account is emptied first, in case an earlier run against the same Azurite
/// used it.
pub fn fresh_account() -> Result<AzureConfig, String> {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let endpoint = endpoint()?;
    let account = loop {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        if n >= POOL {
            return Err(format!("the Azurite account pool ({POOL}) is used up"));
        }
        let account = format!("tsql{n:03}");
        if claim(&endpoint, &account)? {
            break account;
        }
    };
    let mut config =
        AzureConfig::development(&format!("{endpoint}/{account}")).map_err(|e| e.to_string())?;
    config.account = account;
    config.retry = RetryPolicy::default().with_max_retries(6).with_delays(
        Duration::from_millis(20),
        Duration::from_millis(5),
        Duration::from_millis(500),
    );
    wipe(&config)?;
    Ok(config)
}

/// Takes `account` of the Azurite at `endpoint` for this process, unless
/// another process has it: an advisory lock on a file named after both,
/// held until this process exits (the system lets it go then, however the
/// process ends).
fn claim(endpoint: &str, account: &str) -> Result<bool, String> {
    static HELD: std::sync::Mutex<Vec<std::fs::File>> = std::sync::Mutex::new(Vec::new());
    let name: String = format!("{endpoint}-{account}")
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    let dir = std::env::temp_dir().join("tablesql-azurite-accounts");
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let path = dir.join(name);
    let file = std::fs::File::create(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    match file.try_lock() {
        Ok(()) => {
            HELD.lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push(file);
            Ok(true)
        }
        Err(std::fs::TryLockError::WouldBlock) => Ok(false),
        Err(std::fs::TryLockError::Error(e)) => Err(format!("{}: {e}", path.display())),
    }
}

/// The `--store` argument of the command line for `account`.
pub fn store_argument(account: &AzureConfig) -> String {
    format!(
        "azure:AccountName={};AccountKey={};TableEndpoint={}",
        account.account,
        tablesql::storage::azure::config::DEV_ACCOUNT_KEY,
        account.endpoint
    )
}

/// Deletes every table of an account. Runs on a thread of its own, since the
/// fixtures that call it are synchronous functions called inside a runtime.
fn wipe(config: &AzureConfig) -> Result<(), String> {
    let config = config.clone();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        runtime.block_on(async {
            let store = AzureStore::new(config).map_err(|e| e.to_string())?;
            for t in store.list_tables().await.map_err(|e| e.to_string())? {
                store.delete_table(&t).await.map_err(|e| e.to_string())?;
            }
            Ok(())
        })
    })
    .join()
    .map_err(|_| "the wiping thread panicked".to_owned())?
}
