//! From an [`EntraSource`] to a credential, and the SDKs' default chain.
//!
//! The Azure SDK for Rust dropped `DefaultAzureCredential`; the other SDKs
//! keep it, and users expect its order: a client secret from the
//! environment, a workload identity, a managed identity, then the developer's
//! own Azure CLI login. Credentials whose environment is missing are left
//! out when the chain is made; the others are tried in order, and the first
//! that gives a token is kept for the client's life, as the Python and .NET
//! SDKs keep it.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration as StdDuration;

use azure_core::cloud::{CloudConfiguration, CustomConfiguration};
use azure_core::credentials::{AccessToken, Secret, TokenCredential, TokenRequestOptions};
use azure_core::error::{Error, ErrorKind};
use azure_core::http::{ClientOptions, Transport as SdkTransport};
use azure_identity::{
    AzureCliCredential, AzureCliCredentialOptions, ClientAssertionCredentialOptions,
    ClientSecretCredential, ClientSecretCredentialOptions, ManagedIdentityCredential,
    ManagedIdentityCredentialOptions, UserAssignedId, WorkloadIdentityCredential,
    WorkloadIdentityCredentialOptions,
};

use super::EntraSource;
use super::msi::MsiEndpoint;
use super::transport::Transport;

/// The environment variables the SDKs read, as a function, so that a test
/// gives its own. The Azure SDK's credentials read some themselves
/// (`IDENTITY_ENDPOINT`, `AZURE_FEDERATED_TOKEN_FILE`), so in a running
/// client this is the process's environment.
pub type Env<'a> = &'a dyn Fn(&str) -> Option<String>;

/// The instance metadata service of an Azure VM.
const IMDS: &str = "169.254.169.254:80";

/// A credential for `source`; `authority_host` replaces Entra ID's public
/// sign-in host (it must be HTTPS, as the SDK requires), `roots` are trusted
/// beside the public ones.
pub fn credential(
    source: &EntraSource,
    authority_host: Option<&str>,
    roots: &[reqwest::Certificate],
    env: Env<'_>,
) -> Result<Arc<dyn TokenCredential>, String> {
    let made = Made::new(authority_host, roots, env)?;
    match source {
        EntraSource::Default => made.chain(),
        EntraSource::ClientSecret {
            tenant,
            client_id,
            secret,
        } => made.client_secret(tenant.clone(), client_id.clone(), secret.clone()),
        EntraSource::ManagedIdentity { client_id } => made.managed_identity(client_id.clone()),
        EntraSource::WorkloadIdentity { tenant, client_id } => {
            made.workload_identity(tenant.clone(), client_id.clone())
        }
        EntraSource::AzureCli { tenant } => made.azure_cli(tenant.clone()),
    }
}

/// What every credential is made with.
struct Made<'a> {
    env: Env<'a>,
    transport: Arc<Transport>,
    cloud: Option<Arc<CloudConfiguration>>,
}

impl<'a> Made<'a> {
    fn new(
        authority_host: Option<&str>,
        roots: &[reqwest::Certificate],
        env: Env<'a>,
    ) -> Result<Self, String> {
        let transport = Arc::new(Transport::new(roots, StdDuration::from_secs(10))?);
        let authority = authority_host
            .map(str::to_owned)
            .or_else(|| env("AZURE_AUTHORITY_HOST"));
        let cloud = authority.map(|host| {
            let mut custom = CustomConfiguration::default();
            custom.authority_host = host;
            Arc::new(CloudConfiguration::from(custom))
        });
        Ok(Self {
            env,
            transport,
            cloud,
        })
    }

    fn options(&self) -> ClientOptions {
        ClientOptions {
            transport: Some(SdkTransport::new(self.transport.clone())),
            cloud: self.cloud.clone(),
            ..Default::default()
        }
    }

    /// `given`, else the environment variable `var`.
    fn or_env(&self, given: Option<String>, var: &str) -> Option<String> {
        given.or_else(|| (self.env)(var)).filter(|v| !v.is_empty())
    }

    fn client_secret(
        &self,
        tenant: Option<String>,
        client_id: Option<String>,
        secret: Option<String>,
    ) -> Result<Arc<dyn TokenCredential>, String> {
        let need = |v: Option<String>, key: &str, var: &str| {
            v.ok_or_else(|| format!("ClientSecret sign-in needs {key} (or {var})"))
        };
        let tenant = need(
            self.or_env(tenant, "AZURE_TENANT_ID"),
            "TenantId",
            "AZURE_TENANT_ID",
        )?;
        let client_id = need(
            self.or_env(client_id, "AZURE_CLIENT_ID"),
            "ClientId",
            "AZURE_CLIENT_ID",
        )?;
        let secret = need(
            self.or_env(secret, "AZURE_CLIENT_SECRET"),
            "ClientSecret",
            "AZURE_CLIENT_SECRET",
        )?;
        let options = ClientSecretCredentialOptions {
            client_options: self.options(),
        };
        let made =
            ClientSecretCredential::new(&tenant, client_id, Secret::new(secret), Some(options))
                .map_err(|e| format!("ClientSecret: {e}"))?;
        Ok(made)
    }

    fn workload_identity(
        &self,
        tenant: Option<String>,
        client_id: Option<String>,
    ) -> Result<Arc<dyn TokenCredential>, String> {
        let mut options = WorkloadIdentityCredentialOptions::default();
        options.credential_options = ClientAssertionCredentialOptions {
            client_options: self.options(),
        };
        options.tenant_id = self.or_env(tenant, "AZURE_TENANT_ID");
        options.client_id = self.or_env(client_id, "AZURE_CLIENT_ID");
        options.token_file_path = (self.env)("AZURE_FEDERATED_TOKEN_FILE").map(Into::into);
        let made = WorkloadIdentityCredential::new(Some(options))
            .map_err(|e| format!("WorkloadIdentity: {e}"))?;
        Ok(made)
    }

    /// `IDENTITY_ENDPOINT` (App Service, Functions, Container Apps) through
    /// the SDK; `MSI_ENDPOINT` (App Service's first API, Cloud Shell, Azure
    /// ML) through [`MsiEndpoint`]; else the VM's metadata service.
    fn managed_identity(
        &self,
        client_id: Option<String>,
    ) -> Result<Arc<dyn TokenCredential>, String> {
        let client_id = self.or_env(client_id, "AZURE_CLIENT_ID");
        if (self.env)("IDENTITY_ENDPOINT").is_none()
            && let Some(endpoint) = (self.env)("MSI_ENDPOINT")
        {
            return Ok(Arc::new(MsiEndpoint::new(
                self.transport.client().clone(),
                endpoint,
                (self.env)("MSI_SECRET"),
                client_id,
            )));
        }
        let mut options = ManagedIdentityCredentialOptions::default();
        options.user_assigned_id = client_id.map(UserAssignedId::ClientId);
        options.client_options = self.options();
        let made = ManagedIdentityCredential::new(Some(options))
            .map_err(|e| format!("ManagedIdentity: {e}"))?;
        Ok(made)
    }

    fn azure_cli(&self, tenant: Option<String>) -> Result<Arc<dyn TokenCredential>, String> {
        let options = AzureCliCredentialOptions {
            tenant_id: tenant,
            ..Default::default()
        };
        let made = AzureCliCredential::new(Some(options)).map_err(|e| format!("AzureCli: {e}"))?;
        Ok(made)
    }

    /// The default chain, of the credentials the environment makes.
    fn chain(&self) -> Result<Arc<dyn TokenCredential>, String> {
        let env = |var: &str| (self.env)(var).filter(|v| !v.is_empty());
        let mut links: Vec<(&'static str, Arc<dyn TokenCredential>)> = Vec::new();
        let mut skipped = Vec::new();
        if env("AZURE_CLIENT_SECRET").is_some() {
            match self.client_secret(None, None, None) {
                Ok(c) => links.push(("EnvironmentCredential", c)),
                Err(e) => skipped.push(e),
            }
        }
        if env("AZURE_FEDERATED_TOKEN_FILE").is_some() {
            match self.workload_identity(None, None) {
                Ok(c) => links.push(("WorkloadIdentityCredential", c)),
                Err(e) => skipped.push(e),
            }
        }
        let on_app = env("IDENTITY_ENDPOINT").is_some() || env("MSI_ENDPOINT").is_some();
        match self.managed_identity(None) {
            Ok(c) if on_app => links.push(("ManagedIdentityCredential", c)),
            // Off Azure the metadata service does not answer, and the
            // SDK's credential retries it for up to 72 s: it is probed once.
            Ok(c) => links.push(("ManagedIdentityCredential", Arc::new(Probed(c)))),
            Err(e) => skipped.push(e),
        }
        match self.azure_cli(None) {
            Ok(c) => links.push(("AzureCliCredential", c)),
            Err(e) => skipped.push(e),
        }
        Ok(Arc::new(Chain {
            links,
            skipped,
            chosen: AtomicUsize::new(usize::MAX),
        }))
    }
}

/// Credentials tried in order until one gives a token.
#[derive(Debug)]
struct Chain {
    links: Vec<(&'static str, Arc<dyn TokenCredential>)>,
    /// Why credentials were left out, for the error when none works.
    skipped: Vec<String>,
    /// The link that gave a token first, used from then on.
    chosen: AtomicUsize,
}

#[async_trait::async_trait]
impl TokenCredential for Chain {
    async fn get_token(
        &self,
        scopes: &[&str],
        options: Option<TokenRequestOptions<'_>>,
    ) -> azure_core::Result<AccessToken> {
        if let Some((_, c)) = self.links.get(self.chosen.load(Ordering::Relaxed)) {
            return c.get_token(scopes, options).await;
        }
        let mut failures = self.skipped.clone();
        for (i, (name, c)) in self.links.iter().enumerate() {
            match c.get_token(scopes, options.clone()).await {
                Ok(token) => {
                    tracing::info!(credential = name, "azure: signed in with Entra ID");
                    self.chosen.store(i, Ordering::Relaxed);
                    return Ok(token);
                }
                Err(e) => failures.push(format!("{name}: {}", super::describe(&e))),
            }
        }
        Err(Error::with_message(
            ErrorKind::Credential,
            format!(
                "no credential of the default chain gave a token ({})",
                failures.join("; ")
            ),
        ))
    }
}

/// The VM metadata service's credential, tried only where its address
/// takes a connection within a second.
#[derive(Debug)]
struct Probed(Arc<dyn TokenCredential>);

#[async_trait::async_trait]
impl TokenCredential for Probed {
    async fn get_token(
        &self,
        scopes: &[&str],
        options: Option<TokenRequestOptions<'_>>,
    ) -> azure_core::Result<AccessToken> {
        let connect = tokio::net::TcpStream::connect(IMDS);
        match tokio::time::timeout(StdDuration::from_secs(1), connect).await {
            Ok(Ok(_)) => self.0.get_token(scopes, options).await,
            _ => Err(Error::with_message(
                ErrorKind::Credential,
                "no instance metadata service answered (not an Azure VM)",
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |var| {
            pairs
                .iter()
                .find(|(k, _)| *k == var)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    #[test]
    fn a_client_secret_names_what_it_lacks() {
        let env = env_of(&[("AZURE_TENANT_ID", "t")]);
        let source = EntraSource::ClientSecret {
            tenant: None,
            client_id: Some("c".into()),
            secret: None,
        };
        let e = credential(&source, None, &[], &env).unwrap_err();
        assert_eq!(
            e,
            "ClientSecret sign-in needs ClientSecret (or AZURE_CLIENT_SECRET)"
        );
        let env = env_of(&[("AZURE_CLIENT_SECRET", "s")]);
        assert!(credential(&source, None, &[], &env).is_err());
        // The SDK refuses a sign-in host that is not HTTPS.
        let source = EntraSource::ClientSecret {
            tenant: Some("t".into()),
            client_id: Some("c".into()),
            secret: Some("s".into()),
        };
        let e = credential(&source, Some("http://127.0.0.1:9"), &[], &env).unwrap_err();
        assert!(e.contains("HTTPS"), "{e}");
        assert!(credential(&source, Some("https://127.0.0.1:9"), &[], &env).is_ok());
    }

    #[test]
    fn the_default_chain_has_what_the_environment_makes() {
        let env = env_of(&[
            ("AZURE_TENANT_ID", "t"),
            ("AZURE_CLIENT_ID", "c"),
            ("AZURE_CLIENT_SECRET", "s"),
            ("MSI_ENDPOINT", "http://127.0.0.1:9/msi"),
            ("MSI_SECRET", "msi-hush"),
        ]);
        let made = Made::new(None, &[], &env).unwrap();
        let chain = made.chain().unwrap();
        let shown = format!("{chain:?}");
        for name in [
            "EnvironmentCredential",
            "ManagedIdentityCredential",
            "AzureCliCredential",
        ] {
            assert!(shown.contains(name), "{shown}");
        }
        assert!(!shown.contains("WorkloadIdentityCredential"), "{shown}");
        assert!(!shown.contains("\"s\""), "the secret is shown: {shown}");
        assert!(!shown.contains("msi-hush"), "MSI_SECRET is shown: {shown}");
    }
}
