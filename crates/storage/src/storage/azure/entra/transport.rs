//! The identity requests' HTTP client: the Azure SDK's credentials send
//! through an `HttpClient` of azure_core's. Its own (reqwest 0.13, with
//! aws-lc for TLS) is not built; this one is the store's reqwest, with the
//! same trusted roots (`CaFile`), so that a token endpoint is reached as
//! the Table endpoint is.

use std::collections::HashMap;
use std::time::Duration;

use azure_core::error::{Error, ErrorKind};
use azure_core::http::headers::{HeaderName, HeaderValue, Headers};
use azure_core::http::{AsyncRawResponse, Body, HttpClient, Request, StatusCode};

/// Sends the credentials' requests with reqwest.
#[derive(Debug)]
pub struct Transport(reqwest::Client);

impl Transport {
    /// A client trusting the public roots and `roots`; a connection that
    /// is not made within `connect` fails (an IMDS probe off Azure stops
    /// there).
    pub fn new(roots: &[reqwest::Certificate], connect: Duration) -> Result<Self, String> {
        let mut builder = reqwest::Client::builder()
            .connect_timeout(connect)
            .timeout(Duration::from_secs(30))
            // A token endpoint answers; it never sends a client elsewhere.
            .redirect(reqwest::redirect::Policy::none());
        for root in roots {
            builder = builder.add_root_certificate(root.clone());
        }
        let client = builder.build().map_err(|e| e.without_url().to_string())?;
        Ok(Self(client))
    }

    /// Its client, for requests made outside the SDK (`msi`).
    pub fn client(&self) -> &reqwest::Client {
        &self.0
    }
}

#[async_trait::async_trait]
impl HttpClient for Transport {
    async fn execute_request(&self, request: &Request) -> azure_core::Result<AsyncRawResponse> {
        let method = reqwest::Method::from_bytes(request.method().as_str().as_bytes())
            .map_err(|e| Error::with_error(ErrorKind::Other, e, "an unknown HTTP method"))?;
        let mut builder = self.0.request(method, request.url().clone());
        for (name, value) in request.headers().iter() {
            builder = builder.header(name.as_str(), value.as_str());
        }
        builder = match request.body() {
            Body::Bytes(bytes) => builder.body(bytes.clone()),
            // Token requests are forms of a few hundred bytes.
            Body::SeekableStream(_) => {
                return Err(Error::with_message(
                    ErrorKind::Other,
                    "identity requests send no streamed body",
                ));
            }
        };
        let failed = |e: reqwest::Error| {
            let kind = if e.is_connect() {
                ErrorKind::Connection
            } else {
                ErrorKind::Io
            };
            // Without the URL: a managed identity's query names its client.
            Error::with_error(kind, e.without_url(), "the identity request got no answer")
        };
        let response = builder.send().await.map_err(failed)?;
        let status = StatusCode::from(response.status().as_u16());
        let headers: HashMap<HeaderName, HeaderValue> = response
            .headers()
            .iter()
            .filter_map(|(name, value)| {
                let value = value.to_str().ok()?.to_owned();
                Some((HeaderName::from(name.as_str().to_owned()), value.into()))
            })
            .collect();
        let body = response.bytes().await.map_err(failed)?;
        Ok(AsyncRawResponse::from_bytes(
            status,
            Headers::from(headers),
            body,
        ))
    }
}
