//! Azure Storage connection strings: where the Table service is and how to sign
//! requests to it. Secrets never reach `Debug`, `Display` or an error message.

use std::fmt;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

use super::entra::EntraSource;
use crate::storage::retry::RetryPolicy;

/// The published account of the storage emulators (Azurite).
pub const DEV_ACCOUNT: &str = "devstoreaccount1";
/// The published key of the development account; it is no secret.
pub const DEV_ACCOUNT_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";
/// Azurite's Table endpoint for `UseDevelopmentStorage=true`.
pub const DEV_TABLE_ENDPOINT: &str = "http://127.0.0.1:10002/devstoreaccount1";

/// Requests in flight on one store unless `MaxConnections` says otherwise.
pub const DEFAULT_MAX_CONNECTIONS: usize = 32;

/// How requests are authorized.
#[derive(Clone)]
pub enum Credentials {
    /// Shared Key: an HMAC-SHA256 of the request with the account key.
    SharedKey {
        /// The account key, decoded from base64.
        key: Vec<u8>,
        /// Shared Key Lite (`AuthScheme=SharedKeyLite`) rather than Shared Key.
        lite: bool,
    },
    /// A shared access signature (account or table SAS), appended to every URL.
    Sas(String),
    /// A Microsoft Entra ID bearer token (`AuthScheme=EntraId`,
    /// `ClientSecret`, `ManagedIdentity`, `WorkloadIdentity`, `AzureCli`; or
    /// no key nor SAS at all, which is the SDKs' default chain).
    Entra(EntraSource),
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Credentials::SharedKey { lite: false, .. } => f.write_str("SharedKey(<redacted>)"),
            Credentials::SharedKey { lite: true, .. } => f.write_str("SharedKeyLite(<redacted>)"),
            Credentials::Sas(_) => f.write_str("Sas(<redacted>)"),
            Credentials::Entra(source) => write!(f, "{source:?}"),
        }
    }
}

/// Everything the Azure backend needs to reach one storage account.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct AzureConfig {
    /// The storage account.
    pub account: String,
    /// The Table endpoint without a trailing slash: `https://acct.table.core.windows.net`
    /// (host style) or `http://127.0.0.1:10002/devstoreaccount1` (path style).
    pub endpoint: String,
    /// Request authorization.
    pub credentials: Credentials,
    /// Entra ID's sign-in host for a client secret or a workload identity
    /// (`AuthorityHost`, else `AZURE_AUTHORITY_HOST`, else the public
    /// cloud's); HTTPS only.
    pub authority_host: Option<String>,
    /// PEM certificates trusted beside the public roots (`CaFile`), for the
    /// Table endpoint and the sign-in host alike: a private cloud's, or a
    /// test's.
    pub ca_file: Option<std::path::PathBuf>,
    /// Retries of transient failures.
    pub retry: RetryPolicy,
    /// Most requests in flight at once (and so most open connections).
    pub max_connections: usize,
    /// Longest wait for one HTTP answer before it counts as lost.
    pub request_timeout: Duration,
    /// The endpoint is an emulator (Azurite on a loopback address), whose
    /// deviations from Azure the client works around: it sends JSON bodies as
    /// ASCII (Azurite miscounts long strings whose UTF-8 spans its read
    /// chunks) and resolves table names ignoring case, as Azure does.
    pub emulator: bool,
    /// The service is Cosmos DB's Table API (an endpoint on
    /// `table.cosmos.azure.com`, or `Cosmos=true`): its pages come in no key
    /// order, its tokens are opaque, a `Timestamp` condition matches
    /// nothing there, batches stop at 2 MB and RowKeys at 255 bytes.
    pub cosmos: bool,
    /// A Replace or Merge conditional on an ETag carries a random id in one
    /// more property, `TablesqlWriteId`, so that one whose answer is lost
    /// settles exactly (`WriteIds=false` turns it off: such a write is then
    /// ambiguous, 58000, whenever its answer is lost).
    pub write_ids: bool,
}

/// A connection string this backend cannot use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A `;`-separated part without `=` (its text is not shown: it may be a
    /// secret pasted without its key).
    #[error("connection string part {0} (counting from 1) is not KEY=VALUE")]
    NotKeyValue(usize),
    /// A key this backend does not know, named when it looks like a key name.
    #[error("unknown connection string key {0}")]
    UnknownKey(String),
    /// A required key is missing.
    #[error("connection string lacks {0}")]
    Missing(&'static str),
    /// A value that does not parse (the value itself is not shown: it may be secret).
    #[error("connection string value of {0} is invalid: {1}")]
    BadValue(String, &'static str),
}

impl AzureConfig {
    /// Parses an Azure Storage connection string, plus tablesql's own keys:
    /// `AuthScheme=SharedKeyLite`, `MaxRetries`, `RetryDelayMs` (z), `RetryMinMs`,
    /// `RetryMaxMs`, `BusyTimeoutMs`, `MaxConnections`, `RequestTimeoutMs`, `Emulator` (true or
    /// false; by default, whether the endpoint is on a loopback address),
    /// `Cosmos` (true or false; by default, whether the endpoint is Cosmos DB's),
    /// `WriteIds` (true or false; true by default); and for Entra ID sign-in
    /// `AuthScheme=EntraId|ClientSecret|ManagedIdentity|WorkloadIdentity|AzureCli`
    /// (CData's `AzureAD`, `AzureServicePrincipal` and `AzureMSI` too),
    /// `TenantId`, `ClientId`, `ClientSecret`, `AuthorityHost`, `CaFile`.
    /// With no key, SAS or scheme, requests sign in with the SDKs' default
    /// chain; with `ClientSecret` alone, with that secret.
    pub fn parse(conn: &str) -> Result<Self, ConfigError> {
        let mut protocol = "https".to_owned();
        let mut account = None;
        let mut key = None;
        let mut sas = None;
        let mut endpoint = None;
        let mut suffix = "core.windows.net".to_owned();
        let mut dev = false;
        let mut lite = false;
        let mut shared_key_said = false;
        let mut entra: Option<EntraSource> = None;
        let (mut tenant, mut client_id, mut client_secret) = (None, None, None);
        let mut authority_host = None;
        let mut ca_file = None;
        let mut retry = RetryPolicy::default();
        let mut max_connections = DEFAULT_MAX_CONNECTIONS;
        let mut request_timeout = Duration::from_secs(30);
        let mut emulator_said = None;
        let mut cosmos_said = None;
        let mut write_ids = true;
        let parts = conn.split(';').map(str::trim).filter(|p| !p.is_empty());
        for (n, part) in parts.enumerate() {
            let (k, v) = part
                .split_once('=')
                .ok_or(ConfigError::NotKeyValue(n + 1))?;
            let bad = |why| ConfigError::BadValue(k.to_owned(), why);
            let millis = |v: &str| {
                v.parse::<u64>()
                    .map(Duration::from_millis)
                    .map_err(|_| bad("expected milliseconds"))
            };
            // Keys compare ignoring case, as the Azure SDKs compare them.
            let flag = |v: &str| match v.to_ascii_lowercase().as_str() {
                "true" => Ok(true),
                "false" => Ok(false),
                _ => Err(bad("expected true or false")),
            };
            match k.to_ascii_lowercase().as_str() {
                "usedevelopmentstorage" => dev = v.eq_ignore_ascii_case("true"),
                "defaultendpointsprotocol" => match v {
                    "http" | "https" => protocol = v.to_owned(),
                    _ => return Err(bad("expected http or https")),
                },
                "accountname" => account = Some(v.to_owned()),
                "accountkey" => {
                    key = Some(STANDARD.decode(v).map_err(|_| bad("not base64"))?);
                }
                "sharedaccesssignature" => sas = Some(v.trim_start_matches('?').to_owned()),
                "tableendpoint" => endpoint = Some(v.trim_end_matches('/').to_owned()),
                "endpointsuffix" => suffix = v.to_owned(),
                // Endpoints of the other services are valid but not ours to use.
                "blobendpoint" | "queueendpoint" | "fileendpoint" => {}
                "authscheme" => match v.to_ascii_lowercase().as_str() {
                    "sharedkey" => (lite, shared_key_said) = (false, true),
                    "sharedkeylite" => (lite, shared_key_said) = (true, true),
                    scheme => {
                        entra = Some(entra_scheme(scheme).ok_or_else(|| {
                            bad("expected SharedKey, SharedKeyLite, EntraId, ClientSecret, ManagedIdentity, WorkloadIdentity or AzureCli")
                        })?)
                    }
                },
                "tenantid" => tenant = Some(v.to_owned()),
                "clientid" => client_id = Some(v.to_owned()),
                "clientsecret" => client_secret = Some(v.to_owned()),
                "authorityhost" => {
                    if !v.starts_with("https://") {
                        return Err(bad("expected an https:// URL"));
                    }
                    authority_host = Some(v.trim_end_matches('/').to_owned());
                }
                "cafile" => ca_file = Some(std::path::PathBuf::from(v)),
                "maxretries" => {
                    retry.max_retries = v.parse().map_err(|_| bad("expected a count"))?
                }
                "retrydelayms" => retry.delay = millis(v)?,
                "retryminms" => retry.min_delay = millis(v)?,
                "retrymaxms" => retry.max_delay = millis(v)?,
                "busytimeoutms" => retry.busy_timeout = Some(millis(v)?),
                "maxconnections" => {
                    max_connections = v
                        .parse()
                        .ok()
                        .filter(|n| *n > 0)
                        .ok_or_else(|| bad("expected a positive count"))?;
                }
                "requesttimeoutms" => request_timeout = millis(v)?,
                "cosmos" => cosmos_said = Some(flag(v)?),
                // A service on a loopback address that is not Azurite (the
                // local Table service, `tablesql table-service`) says so.
                "emulator" => emulator_said = Some(flag(v)?),
                "writeids" => write_ids = flag(v)?,
                _ => return Err(ConfigError::UnknownKey(key_name_or_position(k, n))),
            }
        }
        if dev {
            account.get_or_insert_with(|| DEV_ACCOUNT.to_owned());
            if sas.is_none() && entra.is_none() {
                key.get_or_insert_with(|| STANDARD.decode(DEV_ACCOUNT_KEY).unwrap_or_default());
            }
            endpoint.get_or_insert_with(|| DEV_TABLE_ENDPOINT.to_owned());
        }
        if shared_key_said && key.is_none() {
            return Err(ConfigError::Missing("AccountKey"));
        }
        let credentials = match (entra, sas, key) {
            (Some(_), Some(_), _) => {
                return Err(ConfigError::BadValue(
                    "SharedAccessSignature".into(),
                    "given beside an Entra ID AuthScheme: name one or the other",
                ));
            }
            (Some(source), _, _) => Credentials::Entra(source),
            (None, Some(sas), _) => Credentials::Sas(sas),
            (None, None, Some(key)) => Credentials::SharedKey { key, lite },
            // A secret with no scheme named is an application's secret, as
            // the SDKs' environment credential reads AZURE_CLIENT_SECRET;
            // nothing at all is the SDKs' default chain.
            (None, None, None) if client_secret.is_some() => {
                Credentials::Entra(EntraSource::ClientSecret {
                    tenant: None,
                    client_id: None,
                    secret: None,
                })
            }
            (None, None, None) => Credentials::Entra(EntraSource::Default),
        };
        let credentials = match credentials {
            // The default chain reads its ids from the environment only, as
            // the SDKs' does: ids here would be silently unused.
            Credentials::Entra(EntraSource::Default)
                if tenant.is_some() || client_id.is_some() || client_secret.is_some() =>
            {
                return Err(ConfigError::BadValue(
                    "AuthScheme".into(),
                    "TenantId, ClientId and ClientSecret need the scheme they are for (ClientSecret, ManagedIdentity, WorkloadIdentity, AzureCli)",
                ));
            }
            Credentials::Entra(source) => {
                Credentials::Entra(source.with_ids(tenant, client_id, client_secret))
            }
            other => other,
        };
        let endpoint = match (endpoint, &account) {
            (Some(e), _) => e,
            (None, Some(a)) => format!("{protocol}://{a}.table.{suffix}"),
            (None, None) => return Err(ConfigError::Missing("AccountName or TableEndpoint")),
        };
        if !(endpoint.starts_with("http://") || endpoint.starts_with("https://")) {
            return Err(ConfigError::BadValue(
                "TableEndpoint".into(),
                "expected an http:// or https:// URL",
            ));
        }
        // A bearer token lets anyone who sees it in; the SDKs send one only
        // over TLS (a loopback emulator aside).
        if matches!(credentials, Credentials::Entra(_))
            && endpoint.starts_with("http://")
            && !is_loopback(&endpoint)
        {
            return Err(ConfigError::BadValue(
                "TableEndpoint".into(),
                "Entra ID tokens are sent only over https:// (or to a loopback address)",
            ));
        }
        let account = match account {
            Some(a) => a,
            None => account_from_endpoint(&endpoint).ok_or(ConfigError::Missing("AccountName"))?,
        };
        let emulator = emulator_said.unwrap_or(dev || is_loopback(&endpoint));
        let cosmos = cosmos_said.unwrap_or_else(|| endpoint.contains(".table.cosmos."));
        Ok(Self {
            account,
            endpoint,
            credentials,
            authority_host,
            ca_file,
            retry,
            max_connections,
            request_timeout,
            emulator,
            cosmos,
            write_ids,
        })
    }

    /// Where Entra ID tokens come from, if requests carry them.
    pub fn credentials_source(&self) -> Option<&EntraSource> {
        match &self.credentials {
            Credentials::Entra(source) => Some(source),
            _ => None,
        }
    }

    /// The development account on Azurite at `endpoint` (path style).
    pub fn development(endpoint: &str) -> Result<Self, ConfigError> {
        Self::parse(&format!(
            "UseDevelopmentStorage=true;TableEndpoint={endpoint}"
        ))
    }

    /// The URL path of the endpoint (`/devstoreaccount1` in path style, empty
    /// in host style): every request path starts with it.
    pub fn base_path(&self) -> &str {
        let rest = self
            .endpoint
            .split_once("://")
            .map_or(self.endpoint.as_str(), |(_, r)| r);
        rest.find('/').map_or("", |i| &rest[i..])
    }
}

/// The Entra ID source an `AuthScheme` value (lower case) names, with CData's
/// names beside ours.
fn entra_scheme(scheme: &str) -> Option<EntraSource> {
    Some(match scheme {
        "entraid" | "azuread" => EntraSource::Default,
        "clientsecret" | "azureserviceprincipal" => EntraSource::ClientSecret {
            tenant: None,
            client_id: None,
            secret: None,
        },
        "managedidentity" | "azuremsi" => EntraSource::ManagedIdentity { client_id: None },
        "workloadidentity" => EntraSource::WorkloadIdentity {
            tenant: None,
            client_id: None,
        },
        "azurecli" => EntraSource::AzureCli { tenant: None },
        _ => return None,
    })
}

/// `acct` from `https://acct.table.core.windows.net` (host style) or from
/// `http://127.0.0.1:10002/acct` (path style).
fn account_from_endpoint(endpoint: &str) -> Option<String> {
    let rest = endpoint.split_once("://")?.1;
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    let host = authority.split(':').next()?;
    if let Some((first, domain)) = host.split_once('.')
        && domain.starts_with("table.")
    {
        return Some(first.to_owned());
    }
    path.split('/')
        .next()
        .filter(|a| !a.is_empty())
        .map(str::to_owned)
}

/// Whether an endpoint's host is a loopback address, where emulators run.
fn is_loopback(endpoint: &str) -> bool {
    let Some((_, rest)) = endpoint.split_once("://") else {
        return false;
    };
    let authority = rest.split('/').next().unwrap_or("");
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => authority.split(':').next().unwrap_or(""),
    };
    host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// An unknown key as shown in an error: its name if it looks like one (a
/// word of letters), else only its position, since a secret pasted without
/// its key would otherwise be echoed.
fn key_name_or_position(key: &str, n: usize) -> String {
    if (1..=40).contains(&key.len()) && key.bytes().all(|b| b.is_ascii_alphabetic()) {
        format!("{key:?}")
    } else {
        format!("in part {} (counting from 1)", n + 1)
    }
}

impl fmt::Display for AzureConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "azure:{} (account {})", self.endpoint, self.account)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn development_storage() {
        let c = AzureConfig::parse("UseDevelopmentStorage=true").unwrap();
        assert_eq!(c.account, DEV_ACCOUNT);
        assert_eq!(c.endpoint, DEV_TABLE_ENDPOINT);
        assert_eq!(c.base_path(), "/devstoreaccount1");
        assert!(matches!(
            c.credentials,
            Credentials::SharedKey { lite: false, .. }
        ));
        assert!(c.emulator);
        assert!(is_loopback("http://[::1]:10002/a") && is_loopback("http://localhost/a"));
        assert!(!is_loopback("https://acme.table.core.windows.net"));
        // A loopback service that is not Azurite says so.
        let c = AzureConfig::parse(
            "AccountName=a;AccountKey=a2V5;TableEndpoint=http://127.0.0.1:9/a;Emulator=false",
        )
        .unwrap();
        assert!(!c.emulator && !c.cosmos);
        let c = AzureConfig::parse(
            "AccountName=a;AccountKey=a2V5;TableEndpoint=https://a.table.cosmos.azure.com:443/",
        )
        .unwrap();
        assert!(c.cosmos && !c.emulator && c.write_ids);
        let c = AzureConfig::parse(
            "AccountName=a;AccountKey=a2V5;TableEndpoint=http://127.0.0.1:9/a;WriteIds=false",
        )
        .unwrap();
        assert!(!c.write_ids);
    }

    #[test]
    fn account_and_suffix_make_a_host_style_endpoint() {
        let c = AzureConfig::parse(
            "DefaultEndpointsProtocol=https;AccountName=acme;AccountKey=a2V5;EndpointSuffix=core.chinacloudapi.cn",
        )
        .unwrap();
        assert_eq!(c.endpoint, "https://acme.table.core.chinacloudapi.cn");
        assert_eq!(c.base_path(), "");
    }

    #[test]
    fn sas_and_explicit_endpoint() {
        let c = AzureConfig::parse(
            "TableEndpoint=https://acme.table.core.windows.net/;SharedAccessSignature=?sv=2019&sig=abc",
        )
        .unwrap();
        assert_eq!(c.account, "acme");
        assert!(matches!(&c.credentials, Credentials::Sas(s) if s == "sv=2019&sig=abc"));
        let c = AzureConfig::parse(
            "TableEndpoint=http://127.0.0.1:10002/emu1;SharedAccessSignature=sig=abc",
        )
        .unwrap();
        assert_eq!((c.account.as_str(), c.base_path()), ("emu1", "/emu1"));
    }

    #[test]
    fn errors_name_the_key_not_the_secret() {
        let e = AzureConfig::parse("AccountName=a;AccountKey=not*base64!").unwrap_err();
        assert_eq!(
            e.to_string(),
            "connection string value of AccountKey is invalid: not base64"
        );
        let e = AzureConfig::parse("AccountName=a;Colour=blue;AccountKey=a2V5").unwrap_err();
        assert_eq!(e.to_string(), "unknown connection string key \"Colour\"");
        // A key pasted without `AccountKey=`: its `=` padding makes it look
        // like KEY=VALUE, and neither side may be shown.
        let pasted = format!("AccountName=a;{}", DEV_ACCOUNT_KEY);
        let e = AzureConfig::parse(&pasted).unwrap_err().to_string();
        assert_eq!(
            e,
            "unknown connection string key in part 2 (counting from 1)"
        );
        let e = AzureConfig::parse("AccountName=a;c2VjcmV0")
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "connection string part 2 (counting from 1) is not KEY=VALUE"
        );
        let c = AzureConfig::parse("accountname=a;ACCOUNTKEY=a2V5").unwrap();
        assert_eq!(c.account, "a");
        // No key and no SAS: Entra ID, by the SDKs' default chain.
        let c = AzureConfig::parse("AccountName=a").unwrap();
        assert!(matches!(
            c.credentials,
            Credentials::Entra(EntraSource::Default)
        ));
        let c = AzureConfig::parse("AccountName=a;AccountKey=c2VjcmV0a2V5").unwrap();
        let shown = format!("{c:?} {c}");
        assert!(
            !shown.contains("c2VjcmV0a2V5") && !shown.contains("secretkey"),
            "{shown}"
        );
    }

    #[test]
    fn entra_id_schemes_take_their_ids_and_hide_the_secret() {
        let c = AzureConfig::parse(
            "AccountName=a;AuthScheme=ClientSecret;TenantId=t;ClientId=c;ClientSecret=hush;AuthorityHost=https://login.example/;CaFile=/etc/ca.pem",
        )
        .unwrap();
        assert_eq!(
            c.credentials_source(),
            Some(&EntraSource::ClientSecret {
                tenant: Some("t".into()),
                client_id: Some("c".into()),
                secret: Some("hush".into()),
            })
        );
        assert_eq!(c.authority_host.as_deref(), Some("https://login.example"));
        assert!(!format!("{c:?}").contains("hush"));
        // A secret alone is an application's; CData's scheme names are ours.
        let c = AzureConfig::parse("AccountName=a;ClientSecret=s;TenantId=t;ClientId=c").unwrap();
        assert!(matches!(
            c.credentials_source(),
            Some(EntraSource::ClientSecret { .. })
        ));
        let c = AzureConfig::parse("AccountName=a;AuthScheme=AzureMSI;ClientId=u").unwrap();
        assert_eq!(
            c.credentials_source(),
            Some(&EntraSource::ManagedIdentity {
                client_id: Some("u".into())
            })
        );
        // A scheme wins over the development account's key.
        let c = AzureConfig::parse("UseDevelopmentStorage=true;AuthScheme=AzureCli").unwrap();
        assert_eq!(
            c.credentials_source(),
            Some(&EntraSource::AzureCli { tenant: None })
        );
        // What would go unused, or unsafe, is refused.
        for (conn, says) in [
            ("AccountName=a;AuthScheme=SharedKey", "AccountKey"),
            (
                "AccountName=a;AuthScheme=AzureCli;SharedAccessSignature=sig=x",
                "Entra",
            ),
            (
                "AccountName=a;AuthScheme=EntraId;ClientId=c",
                "scheme they are for",
            ),
            ("AccountName=a;TableEndpoint=http://10.0.0.1/a", "https://"),
        ] {
            let e = AzureConfig::parse(conn).unwrap_err().to_string();
            assert!(e.contains(says), "{conn}: {e}");
        }
        let e = AzureConfig::parse("AccountName=a;AuthScheme=Kerberos").unwrap_err();
        assert!(e.to_string().contains("AuthScheme"), "{e}");
        let e = AzureConfig::parse("AccountName=a;AuthorityHost=http://login.example").unwrap_err();
        assert!(e.to_string().contains("https://"), "{e}");
    }

    #[test]
    fn tablesql_keys() {
        let c = AzureConfig::parse(
            "UseDevelopmentStorage=true;AuthScheme=SharedKeyLite;MaxRetries=2;RetryDelayMs=10;RetryMinMs=1;RetryMaxMs=50;MaxConnections=4",
        )
        .unwrap();
        assert!(matches!(
            c.credentials,
            Credentials::SharedKey { lite: true, .. }
        ));
        assert_eq!(c.retry.max_retries, 2);
        assert_eq!(c.retry.delay, Duration::from_millis(10));
        assert_eq!(c.max_connections, 4);
    }
}
