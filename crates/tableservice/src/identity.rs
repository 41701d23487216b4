//! Entra ID, as far as a Table service client meets it: the endpoints that
//! hand out tokens, and the service's check of the token a request carries.
//!
//! A client signs in with a client secret at Entra ID's token endpoint
//! (`POST /{tenant}/oauth2/v2.0/token`, HTTPS only: the Azure SDK refuses
//! any other authority) or with a managed identity at its host's endpoint
//! (`GET /msi/token`: `IDENTITY_ENDPOINT` with `X-IDENTITY-HEADER`, or the
//! older `MSI_ENDPOINT` with `secret`), and sends the token as
//! `Authorization: Bearer`. Here the tokens are JWTs signed with HS256 by a
//! key of this service's (Entra ID signs with RS256 and publishes its keys;
//! what the service checks is the same: the signature, the audience, the
//! lifetime). A token lives `lifetime`, so that a test sees one expire
//! within a scan. Shared Key can be turned off, as many tenants do, and is
//! then refused with Azure's `KeyBasedAuthenticationNotPermitted`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::hmac;
use serde_json::{Value, json};

use crate::limits::Profile;
use crate::service::Refusal;

/// What the identity endpoints accept, and how long tokens live.
#[derive(Clone)]
pub struct IdentityOptions {
    /// The directory whose token endpoint this is.
    pub tenant: String,
    /// The one application that may sign in with a secret.
    pub client_id: String,
    /// Its secret.
    pub client_secret: String,
    /// The value a managed identity's request carries (`IDENTITY_HEADER`,
    /// `MSI_SECRET`).
    pub identity_header: String,
    /// How long a token lives.
    pub lifetime: Duration,
    /// Whether Shared Key signatures are still accepted beside tokens.
    pub shared_key: bool,
}

impl std::fmt::Debug for IdentityOptions {
    /// Without the secret and the identity header.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdentityOptions")
            .field("tenant", &self.tenant)
            .field("client_id", &self.client_id)
            .field("lifetime", &self.lifetime)
            .field("shared_key", &self.shared_key)
            .finish_non_exhaustive()
    }
}

/// The token issuer and checker of one service.
#[derive(Debug)]
pub struct Identity {
    options: IdentityOptions,
    key: hmac::Key,
    issued: AtomicU64,
    refused: AtomicU64,
}

/// A token request's answer: a JSON body, or an error status and body.
pub type Answered = Result<Value, (u16, Value)>;

impl Identity {
    /// An issuer with a fresh random signing key.
    pub fn new(options: IdentityOptions) -> Self {
        let secret: [u8; 32] = rand::random();
        Self {
            options,
            key: hmac::Key::new(hmac::HMAC_SHA256, &secret),
            issued: AtomicU64::new(0),
            refused: AtomicU64::new(0),
        }
    }

    /// Tokens issued so far.
    pub fn issued(&self) -> u64 {
        self.issued.load(Ordering::Relaxed)
    }

    /// Requests refused for their token (a bad signature, audience, or an
    /// expired token).
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// Whether Shared Key is still accepted.
    pub fn shared_key(&self) -> bool {
        self.options.shared_key
    }

    /// `POST /{tenant}/oauth2/v2.0/token` with a client secret: Entra ID's
    /// answer, or its error with the AADSTS code the SDKs show.
    pub fn client_credentials(&self, tenant: &str, form: &[(String, String)]) -> Answered {
        let field = |name: &str| crate::http::param(form, name).unwrap_or("");
        let refuse = |status: u16, error: &str, code: u32, description: &str| {
            let body = json!({
                "error": error,
                "error_description": format!("AADSTS{code}: {description}"),
                "error_codes": [code],
            });
            Err((status, body))
        };
        if tenant != self.options.tenant {
            return refuse(400, "invalid_request", 90002, "Tenant not found.");
        }
        if field("grant_type") != "client_credentials" {
            return refuse(
                400,
                "unsupported_grant_type",
                70003,
                "The grant type is not served here.",
            );
        }
        if field("client_id") != self.options.client_id {
            return refuse(
                400,
                "unauthorized_client",
                700016,
                "Application not found in the directory.",
            );
        }
        if field("client_secret") != self.options.client_secret {
            return refuse(
                401,
                "invalid_client",
                7000215,
                "Invalid client secret provided.",
            );
        }
        let Some(audience) = field("scope").strip_suffix("/.default") else {
            return refuse(
                400,
                "invalid_scope",
                1002012,
                "The scope must end in /.default.",
            );
        };
        let seconds = self.options.lifetime.as_secs();
        Ok(json!({
            "token_type": "Bearer",
            "expires_in": seconds,
            "ext_expires_in": seconds,
            "access_token": self.issue(audience, field("client_id")),
        }))
    }

    /// `GET /msi/token`: the App Service form (API 2019-08-01,
    /// `X-IDENTITY-HEADER`, `expires_on` in Unix seconds) or the older one
    /// (2017-09-01, `secret`).
    pub fn managed_identity(&self, header: Option<&str>, query: &[(String, String)]) -> Answered {
        let param = |name: &str| crate::http::param(query, name);
        if header != Some(self.options.identity_header.as_str()) {
            let body =
                json!({"statusCode": 401, "message": "The identity header is missing or wrong."});
            return Err((401, body));
        }
        let Some(resource) = param("resource") else {
            let body = json!({"statusCode": 400, "message": "No resource was named."});
            return Err((400, body));
        };
        let client = param("client_id").or(param("clientid")).unwrap_or("system");
        let expires_on = now_seconds() + self.options.lifetime.as_secs_f64();
        Ok(json!({
            "access_token": self.issue(resource, client),
            "expires_on": (expires_on.floor() as u64).to_string(),
            "resource": resource,
            "token_type": "Bearer",
        }))
    }

    /// A JWT for `audience`, expiring `lifetime` from now, to the
    /// millisecond (a NumericDate may have a fraction). The expiry the
    /// answers give is rounded down to a second, so that no client thinks
    /// a token lives longer than it does.
    fn issue(&self, audience: &str, subject: &str) -> String {
        let now = now_seconds();
        let claims = json!({
            "aud": audience.trim_end_matches('/'),
            "iss": format!("https://sts.windows.net/{}/", self.options.tenant),
            "iat": now.floor() as u64,
            "nbf": now.floor() as u64,
            "exp": ((now + self.options.lifetime.as_secs_f64()) * 1000.0).floor() / 1000.0,
            "appid": subject,
            "tid": self.options.tenant,
        });
        let head = URL_SAFE_NO_PAD.encode(br#"{"alg":"HS256","typ":"JWT"}"#);
        let body = URL_SAFE_NO_PAD.encode(claims.to_string());
        let signed = format!("{head}.{body}");
        let tag = hmac::sign(&self.key, signed.as_bytes());
        self.issued.fetch_add(1, Ordering::Relaxed);
        format!("{signed}.{}", URL_SAFE_NO_PAD.encode(tag.as_ref()))
    }

    /// Checks a request's bearer token: this service's signature, the
    /// Table service's audience, within its lifetime. A refusal is Azure's
    /// 401 `InvalidAuthenticationInfo`.
    pub fn check(&self, token: &str, profile: Profile) -> Result<(), Refusal> {
        let refused = |why: &str| {
            self.refused.fetch_add(1, Ordering::Relaxed);
            Refusal::Bad {
                status: 401,
                code: "InvalidAuthenticationInfo",
                message: format!("Server failed to authenticate the request. {why}"),
            }
        };
        let mut parts = token.rsplitn(2, '.');
        let (Some(tag), Some(signed)) = (parts.next(), parts.next()) else {
            return Err(refused("The token is not a JWT."));
        };
        let tag = URL_SAFE_NO_PAD
            .decode(tag)
            .map_err(|_| refused("The token's signature is not base64url."))?;
        hmac::verify(&self.key, signed.as_bytes(), &tag)
            .map_err(|_| refused("The token's signature is invalid."))?;
        let claims: Value = signed
            .split('.')
            .nth(1)
            .and_then(|b| URL_SAFE_NO_PAD.decode(b).ok())
            .and_then(|b| serde_json::from_slice(&b).ok())
            .ok_or_else(|| refused("The token's claims are unreadable."))?;
        let audience = match profile {
            Profile::Storage => "https://storage.azure.com",
            Profile::Cosmos => "https://cosmos.azure.com",
        };
        if claims["aud"].as_str() != Some(audience) {
            return Err(refused("Audience validation failed."));
        }
        let expires = claims["exp"].as_f64().unwrap_or(0.0);
        if now_seconds() >= expires {
            return Err(refused("Lifetime validation failed. The token is expired."));
        }
        Ok(())
    }
}

/// The TLS acceptor of the token endpoint, from a PEM certificate chain
/// and key.
pub(crate) fn acceptor(
    cert: &std::path::Path,
    key: &std::path::Path,
) -> std::io::Result<tokio_rustls::TlsAcceptor> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    use tokio_rustls::rustls::ServerConfig;
    use tokio_rustls::rustls::crypto::ring;
    let invalid = |what: String| std::io::Error::new(std::io::ErrorKind::InvalidInput, what);
    let certs = CertificateDer::pem_file_iter(cert)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| invalid(format!("certificate {}: {e}", cert.display())))?;
    let key = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| invalid(format!("private key {}: {e}", key.display())))?;
    let config = ServerConfig::builder_with_provider(std::sync::Arc::new(ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| invalid(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| invalid(format!("certificate and key: {e}")))?;
    Ok(tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config)))
}

fn now_seconds() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn identity(lifetime: Duration) -> Identity {
        Identity::new(IdentityOptions {
            tenant: "t".into(),
            client_id: "c".into(),
            client_secret: "s".into(),
            identity_header: "h".into(),
            lifetime,
            shared_key: false,
        })
    }

    fn form(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn a_token_is_checked_for_its_signature_audience_and_lifetime() {
        let id = identity(Duration::from_secs(60));
        let good = form(&[
            ("grant_type", "client_credentials"),
            ("client_id", "c"),
            ("client_secret", "s"),
            ("scope", "https://storage.azure.com/.default"),
        ]);
        let answer = id.client_credentials("t", &good).unwrap();
        let token = answer["access_token"].as_str().unwrap();
        assert!(id.check(token, Profile::Storage).is_ok());
        // Another profile's audience, another issuer's signature.
        assert!(id.check(token, Profile::Cosmos).is_err());
        let other = identity(Duration::from_secs(60));
        assert!(other.check(token, Profile::Storage).is_err());
        let tampered = format!("{}x", token);
        assert!(id.check(&tampered, Profile::Storage).is_err());
        assert_eq!((id.issued(), id.refused()), (1, 2));
        // A token already expired.
        let brief = identity(Duration::ZERO);
        let answer = brief.client_credentials("t", &good).unwrap();
        let token = answer["access_token"].as_str().unwrap();
        let e = brief.check(token, Profile::Storage);
        assert!(matches!(e, Err(Refusal::Bad { status: 401, .. })));
    }

    #[test]
    fn sign_in_refusals_carry_entra_ids_codes() {
        let id = identity(Duration::from_secs(60));
        let bad_secret = form(&[
            ("grant_type", "client_credentials"),
            ("client_id", "c"),
            ("client_secret", "wrong"),
            ("scope", "https://storage.azure.com/.default"),
        ]);
        let (status, body) = id.client_credentials("t", &bad_secret).unwrap_err();
        assert_eq!(
            (status, body["error_codes"][0].as_u64()),
            (401, Some(7000215))
        );
        assert!(id.client_credentials("other", &bad_secret).is_err());
        let q = form(&[("resource", "https://storage.azure.com")]);
        assert!(id.managed_identity(Some("wrong"), &q).is_err());
        let answer = id.managed_identity(Some("h"), &q).unwrap();
        let expires: u64 = answer["expires_on"].as_str().unwrap().parse().unwrap();
        assert!(expires as f64 >= now_seconds() + 58.0);
        assert!(
            id.check(answer["access_token"].as_str().unwrap(), Profile::Storage)
                .is_ok()
        );
    }
}
