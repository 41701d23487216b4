//! Microsoft Entra ID sign-in: a bearer token on every request instead of a
//! Shared Key signature or a SAS.
//!
//! Many tenants turn Shared Key off, and every Azure SDK signs in with
//! Entra ID. The tokens come from the Azure SDK's own credentials
//! (`azure_identity`): a client secret, a workload identity, a managed
//! identity, the Azure CLI's login; `MSI_ENDPOINT`, which that crate does
//! not serve, from [`msi`]. Which one is the connection string's choice
//! (`AuthScheme`), or, where it names none, the first that works in the
//! order of the SDKs' default chain ([`chain`]).
//!
//! A token lives about an hour, and a scan can outlive it. [`Bearer`] keeps
//! one and fetches the next before it expires: five minutes before, as the
//! SDKs do, or half its life before where it lives less than ten minutes,
//! so that no request goes out with a token about to lapse. A refused
//! token is dropped, and the request sent again where the credential gives
//! another (see `http::Client::attempt`).

mod chain;
mod msi;
mod transport;

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use azure_core::credentials::TokenCredential;
use azure_core::time::{Duration, OffsetDateTime};

pub use chain::{Env, credential};

/// The scope of a token for Azure Storage's Table service.
pub const STORAGE_SCOPE: &str = "https://storage.azure.com/.default";
/// The scope of a token for Cosmos DB's Table API.
pub const COSMOS_SCOPE: &str = "https://cosmos.azure.com/.default";

/// How long before its expiry a token is replaced, at most.
const REFRESH_BEFORE: Duration = Duration::minutes(5);
/// The longest wait for a token: a sign-in that hangs (an Azure CLI
/// waiting on a prompt, an endpoint that never answers) fails the requests
/// waiting on it rather than holding them.
const FETCH_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// Where tokens come from, as the connection string says. Fields it leaves
/// out are read from the SDKs' environment variables (`AZURE_TENANT_ID`,
/// `AZURE_CLIENT_ID`, `AZURE_CLIENT_SECRET`, …) when the credential is made.
#[derive(Clone, PartialEq, Eq)]
pub enum EntraSource {
    /// The SDKs' default chain: a client secret from the environment, a
    /// workload identity, a managed identity, the Azure CLI; the first
    /// that gives a token (`AuthScheme=EntraId`, or no key or SAS at all).
    Default,
    /// An application's client secret (`AuthScheme=ClientSecret`).
    ClientSecret {
        /// The directory (tenant) id (`TenantId`).
        tenant: Option<String>,
        /// The application's client id (`ClientId`).
        client_id: Option<String>,
        /// The application's secret (`ClientSecret`).
        secret: Option<String>,
    },
    /// The managed identity of the machine or app (`AuthScheme=ManagedIdentity`):
    /// `IDENTITY_ENDPOINT`, `MSI_ENDPOINT` or the instance metadata service;
    /// `client_id` picks a user-assigned identity.
    ManagedIdentity {
        /// A user-assigned identity's client id (`ClientId`).
        client_id: Option<String>,
    },
    /// A federated token file (`AZURE_FEDERATED_TOKEN_FILE`), as Kubernetes
    /// workload identity mounts it (`AuthScheme=WorkloadIdentity`).
    WorkloadIdentity {
        /// The directory (tenant) id (`TenantId`).
        tenant: Option<String>,
        /// The application's client id (`ClientId`).
        client_id: Option<String>,
    },
    /// The Azure CLI's login (`az login`; `AuthScheme=AzureCli`).
    AzureCli {
        /// The tenant to sign in to (`TenantId`), else the CLI's own.
        tenant: Option<String>,
    },
}

impl EntraSource {
    /// The scheme's name, as `AuthScheme` gives it and errors show it.
    pub fn name(&self) -> &'static str {
        match self {
            EntraSource::Default => "EntraId",
            EntraSource::ClientSecret { .. } => "ClientSecret",
            EntraSource::ManagedIdentity { .. } => "ManagedIdentity",
            EntraSource::WorkloadIdentity { .. } => "WorkloadIdentity",
            EntraSource::AzureCli { .. } => "AzureCli",
        }
    }

    /// The source with the connection string's `TenantId`, `ClientId` and
    /// `ClientSecret` in the fields it has (a managed identity's client id
    /// picks a user-assigned identity; the CLI signs in to the tenant).
    pub fn with_ids(
        self,
        tenant: Option<String>,
        client_id: Option<String>,
        secret: Option<String>,
    ) -> Self {
        match self {
            EntraSource::Default => EntraSource::Default,
            EntraSource::ClientSecret { .. } => EntraSource::ClientSecret {
                tenant,
                client_id,
                secret,
            },
            EntraSource::ManagedIdentity { .. } => EntraSource::ManagedIdentity { client_id },
            EntraSource::WorkloadIdentity { .. } => {
                EntraSource::WorkloadIdentity { tenant, client_id }
            }
            EntraSource::AzureCli { .. } => EntraSource::AzureCli { tenant },
        }
    }
}

impl fmt::Debug for EntraSource {
    /// The scheme only: ids are not secret, but a client secret is.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Entra({})", self.name())
    }
}

/// The token a client sends, kept until shortly before it expires.
pub struct Bearer {
    credential: Arc<dyn TokenCredential>,
    scope: &'static str,
    /// One fetch at a time: requests that find the token stale wait for
    /// the one fetch rather than each asking the identity endpoint.
    held: tokio::sync::Mutex<Option<Held>>,
    fetched: AtomicU64,
}

struct Held {
    /// `Bearer <token>`.
    header: String,
    refresh_at: OffsetDateTime,
    expires: OffsetDateTime,
}

impl fmt::Debug for Bearer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Bearer")
            .field("scope", &self.scope)
            .field("fetched", &self.fetched())
            .finish_non_exhaustive()
    }
}

impl Bearer {
    /// Tokens of `credential` for `scope`, none fetched yet.
    pub fn new(credential: Arc<dyn TokenCredential>, scope: &'static str) -> Self {
        Self {
            credential,
            scope,
            held: tokio::sync::Mutex::new(None),
            fetched: AtomicU64::new(0),
        }
    }

    /// The `Authorization` header's value, from a token that is not about
    /// to expire. A refresh that fails while the held token is still valid
    /// leaves it in use (the next request tries again).
    pub async fn header(&self) -> Result<String, String> {
        let mut held = self.held.lock().await;
        let now = OffsetDateTime::now_utc();
        if let Some(h) = held.as_ref()
            && now < h.refresh_at
        {
            return Ok(h.header.clone());
        }
        let fetched = tokio::time::timeout(
            FETCH_TIMEOUT,
            self.credential.get_token(&[self.scope], None),
        )
        .await;
        let token = match fetched {
            Ok(Ok(token)) => token,
            failed => {
                let why = match failed {
                    Ok(Err(e)) => describe(&e),
                    _ => format!("no token within {} s", FETCH_TIMEOUT.as_secs()),
                };
                if let Some(h) = held.as_ref()
                    && OffsetDateTime::now_utc() < h.expires
                {
                    tracing::warn!(error = %why, "azure: Entra ID token refresh failed; the current token is still valid");
                    return Ok(h.header.clone());
                }
                return Err(format!("Entra ID sign-in failed: {why}"));
            }
        };
        self.fetched.fetch_add(1, Ordering::Relaxed);
        let h = Held {
            header: format!("Bearer {}", token.token.secret()),
            refresh_at: refresh_at(now, token.expires_on),
            expires: token.expires_on,
        };
        let header = h.header.clone();
        *held = Some(h);
        Ok(header)
    }

    /// Drops `header`'s token, which the service refused, unless a newer
    /// one has replaced it already.
    pub async fn forget(&self, header: &str) {
        let mut held = self.held.lock().await;
        if held.as_ref().is_some_and(|h| h.header == header) {
            *held = None;
        }
    }

    /// Tokens the credential gave so far (its own cache may give the same
    /// token twice: after a 401, say).
    pub fn fetched(&self) -> u64 {
        self.fetched.load(Ordering::Relaxed)
    }
}

/// When a token fetched at `now` and expiring at `expires` is replaced:
/// [`REFRESH_BEFORE`] ahead of its expiry, or half its life ahead where it
/// lives less than twice that.
fn refresh_at(now: OffsetDateTime, expires: OffsetDateTime) -> OffsetDateTime {
    let life = expires - now;
    expires - REFRESH_BEFORE.min(life / 2)
}

/// An error with its causes, as one line.
fn describe(e: &azure_core::Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        let next = s.to_string();
        if !text.contains(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_is_replaced_five_minutes_early_or_at_half_its_life() {
        let now = OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap();
        let hour = now + Duration::hours(1);
        assert_eq!(refresh_at(now, hour), hour - Duration::minutes(5));
        let short = now + Duration::seconds(4);
        assert_eq!(refresh_at(now, short), now + Duration::seconds(2));
        // One already expired is replaced at once.
        assert!(refresh_at(now, now - Duration::seconds(1)) <= now);
    }
}
