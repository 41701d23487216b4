//! The `MSI_ENDPOINT` form of a managed identity, which the Azure SDK for
//! Rust does not serve (its `ManagedIdentityCredential` refuses it), though
//! the other SDKs' default chains do: App Service's first API
//! (`MSI_ENDPOINT` and `MSI_SECRET`, API version 2017-09-01, also Azure
//! Machine Learning's) and Cloud Shell's (`MSI_ENDPOINT` alone: a POST with
//! `Metadata: true`).

use azure_core::credentials::{AccessToken, TokenCredential, TokenRequestOptions};
use azure_core::error::{Error, ErrorKind};
use azure_core::time::OffsetDateTime;

/// A token from an `MSI_ENDPOINT`.
pub struct MsiEndpoint {
    http: reqwest::Client,
    endpoint: String,
    /// `MSI_SECRET`; absent in Cloud Shell.
    secret: Option<String>,
    /// A user-assigned identity's client id.
    client_id: Option<String>,
}

impl std::fmt::Debug for MsiEndpoint {
    /// Without `MSI_SECRET`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MsiEndpoint")
            .field("endpoint", &self.endpoint)
            .field("client_id", &self.client_id)
            .finish_non_exhaustive()
    }
}

impl MsiEndpoint {
    /// `http` must not follow redirects: the request carries the secret.
    pub fn new(
        http: reqwest::Client,
        endpoint: String,
        secret: Option<String>,
        client_id: Option<String>,
    ) -> Self {
        Self {
            http,
            endpoint,
            secret,
            client_id,
        }
    }
}

#[async_trait::async_trait]
impl TokenCredential for MsiEndpoint {
    async fn get_token(
        &self,
        scopes: &[&str],
        _options: Option<TokenRequestOptions<'_>>,
    ) -> azure_core::Result<AccessToken> {
        let [scope] = scopes else {
            return Err(credential("a managed identity takes exactly one scope"));
        };
        // A managed identity names the resource, not the scope.
        let resource = scope.strip_suffix("/.default").unwrap_or(scope);
        let request = match &self.secret {
            Some(secret) => {
                let mut query = vec![("api-version", "2017-09-01"), ("resource", resource)];
                if let Some(id) = &self.client_id {
                    query.push(("clientid", id));
                }
                self.http
                    .get(&self.endpoint)
                    .query(&query)
                    .header("secret", secret)
            }
            None => {
                let mut form = vec![("resource", resource)];
                if let Some(id) = &self.client_id {
                    form.push(("client_id", id));
                }
                self.http
                    .post(&self.endpoint)
                    .header("Metadata", "true")
                    .form(&form)
            }
        };
        let response = request.send().await.map_err(|e| {
            Error::with_error(
                ErrorKind::Connection,
                e.without_url(),
                "MSI_ENDPOINT did not answer",
            )
        })?;
        let status = response.status();
        let body = response.bytes().await.map_err(|e| {
            Error::with_error(
                ErrorKind::Io,
                e.without_url(),
                "MSI_ENDPOINT's answer was lost",
            )
        })?;
        if !status.is_success() {
            let text = String::from_utf8_lossy(&body);
            return Err(credential(format!(
                "MSI_ENDPOINT refused the token request ({status}): {}",
                text.chars().take(300).collect::<String>()
            )));
        }
        parse_token(&body)
    }
}

/// `{"access_token": …, "expires_on": …}`, where `expires_on` is Unix
/// seconds (as a string or a number) or, from the 2017 API, a date such as
/// `09/14/2017 00:00:00 PM +00:00`.
fn parse_token(body: &[u8]) -> azure_core::Result<AccessToken> {
    let json: serde_json::Value = serde_json::from_slice(body)
        .map_err(|_| credential("MSI_ENDPOINT answered with no JSON"))?;
    let token = json["access_token"]
        .as_str()
        .ok_or_else(|| credential("MSI_ENDPOINT's answer has no access_token"))?;
    let expires = &json["expires_on"];
    let seconds = expires
        .as_i64()
        .or_else(|| expires.as_str().and_then(|s| s.trim().parse().ok()));
    let expires_on = match seconds {
        Some(s) => OffsetDateTime::from_unix_timestamp(s).ok(),
        None => expires.as_str().and_then(us_date),
    }
    .ok_or_else(|| credential("MSI_ENDPOINT's answer has no readable expires_on"))?;
    Ok(AccessToken::new(token.to_owned(), expires_on))
}

/// `MM/dd/yyyy hh:mm:ss AM|PM +00:00`.
fn us_date(text: &str) -> Option<OffsetDateTime> {
    let parsed = chrono::DateTime::parse_from_str(text, "%m/%d/%Y %I:%M:%S %p %:z").ok()?;
    OffsetDateTime::from_unix_timestamp(parsed.timestamp()).ok()
}

fn credential(message: impl Into<String>) -> Error {
    Error::with_message(ErrorKind::Credential, message.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expiry_is_read_in_each_form_the_endpoints_write() {
        let at = |body: &str| parse_token(body.as_bytes()).map(|t| t.expires_on.unix_timestamp());
        assert_eq!(
            at(r#"{"access_token":"t","expires_on":"1800000000"}"#).unwrap(),
            1_800_000_000
        );
        assert_eq!(
            at(r#"{"access_token":"t","expires_on":1800000000}"#).unwrap(),
            1_800_000_000
        );
        // 2017-09-14 12:00:00 UTC.
        assert_eq!(
            at(r#"{"access_token":"t","expires_on":"09/14/2017 12:00:00 PM +00:00"}"#).unwrap(),
            1_505_390_400
        );
        assert!(at(r#"{"expires_on":"1"}"#).is_err());
        assert!(at(r#"{"access_token":"t","expires_on":"soon"}"#).is_err());
    }
}
