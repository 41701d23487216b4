//! One HTTP exchange with the Table service: build, sign, send, retry what is
//! worth retrying, and read the service's error answer. Requests in flight are
//! bounded by a semaphore, which bounds open connections too.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use backon::Retryable as _;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use reqwest::Method;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};

use super::auth::{SignedParts, authorization};
use super::config::{AzureConfig, Credentials};
use super::entra::{self, Bearer};
use crate::storage::retry::{is_retryable_status, parse_retry_after};

/// The REST API version this client speaks.
pub const API_VERSION: &str = "2019-02-02";
/// What every request accepts back.
pub const ACCEPT_JSON: &str = "application/json;odata=minimalmetadata";

/// Everything but RFC 3986's unreserved characters is escaped.
const COMPONENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// Percent-encodes a URL path segment or query value.
pub fn encode(s: &str) -> String {
    utf8_percent_encode(s, COMPONENT).to_string()
}

/// A request relative to the account's endpoint.
#[derive(Debug, Clone)]
pub struct Request {
    pub method: Method,
    /// Already encoded, starting with `/`: `/Tables`, `/T(PartitionKey='a',RowKey='b')`.
    pub path: String,
    /// Query parameters, not yet encoded.
    pub query: Vec<(&'static str, String)>,
    pub headers: Vec<(HeaderName, String)>,
    /// Content type and bytes.
    pub body: Option<(String, Vec<u8>)>,
}

impl Request {
    pub fn new(method: Method, path: impl Into<String>) -> Self {
        Self {
            method,
            path: path.into(),
            query: Vec::new(),
            headers: Vec::new(),
            body: None,
        }
    }

    pub fn query(mut self, name: &'static str, value: impl Into<String>) -> Self {
        self.query.push((name, value.into()));
        self
    }

    pub fn header(mut self, name: &'static str, value: impl Into<String>) -> Self {
        self.headers
            .push((HeaderName::from_static(name), value.into()));
        self
    }

    /// A JSON body; with `ascii`, every non-ASCII character as a `\\u` escape.
    pub fn json(mut self, body: &serde_json::Value, ascii: bool) -> Self {
        let mut text = body.to_string();
        if ascii {
            text = ascii_json(&text);
        }
        self.body = Some(("application/json".into(), text.into_bytes()));
        self
    }
}

/// A whole answer.
#[derive(Debug)]
pub struct Response {
    pub headers: HeaderMap,
    pub body: Vec<u8>,
    /// An earlier attempt may have been applied before its answer was lost
    /// (matters where the answer reports a conflict, as a batch's can).
    pub answer_lost: bool,
    /// Attempts made, the first included.
    pub attempts: u32,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

/// Why an attempt failed.
#[derive(Debug, Clone)]
pub enum Failure {
    /// The service answered with an error status.
    Status {
        status: u16,
        code: String,
        message: String,
        retry_after: Option<Duration>,
    },
    /// No answer: refused, reset, or timed out. The text holds no URL.
    Transport(String),
    /// The request could not be built (an invalid header value, say): never
    /// sent, never retried.
    Local(String),
    /// No Entra ID token could be had: never sent, not retried here (the
    /// credentials retry their own requests).
    SignIn(String),
}

impl Failure {
    fn is_retryable(&self) -> bool {
        match self {
            Failure::Status { status, .. } => is_retryable_status(*status),
            Failure::Transport(_) => true,
            Failure::Local(_) | Failure::SignIn(_) => false,
        }
    }

    /// Whether the service refused the work as busy, before doing any:
    /// 429, or 503 ServerBusy (a 503 of a gateway or an outage is retried
    /// as any failure).
    fn is_busy(&self) -> bool {
        match self {
            Failure::Status { status: 429, .. } => true,
            Failure::Status {
                status: 503, code, ..
            } => code == "ServerBusy",
            _ => false,
        }
    }

    /// Whether the service may have applied the request despite this answer.
    fn may_have_applied(&self) -> bool {
        match self {
            // 503 (ServerBusy) and 429 refuse work before doing it.
            Failure::Status { status, .. } => !matches!(status, 503 | 429),
            Failure::Transport(_) => true,
            Failure::Local(_) | Failure::SignIn(_) => false,
        }
    }
}

/// The failure of a request after its retries.
#[derive(Debug, Clone)]
pub struct SendError {
    pub failure: Failure,
    /// Attempts made, the first included.
    pub attempts: u32,
    /// Whether an earlier attempt may have been applied before its answer was lost.
    pub answer_lost: bool,
}

/// Counters of one client, for tests and benchmarks.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct ClientStats {
    /// HTTP requests sent, retries included.
    pub requests: u64,
    /// Retries made.
    pub retries: u64,
    /// Attempts refused as busy (503, 429).
    pub busy: u64,
    /// Attempts that timed out (408, 504, 500 `OperationTimedOut`, or no
    /// whole answer in time).
    pub timeouts: u64,
    /// Time spent waiting before retries.
    pub waited: Duration,
    /// Requests the client keeps in flight now (`window`).
    pub window: f64,
    /// Entra ID tokens fetched (none with a key or a SAS).
    pub tokens: u64,
}

/// The HTTP client of one store.
#[derive(Debug)]
pub struct Client {
    http: reqwest::Client,
    config: AzureConfig,
    window: super::window::Window,
    requests: AtomicU64,
    retries: AtomicU64,
    busy: AtomicU64,
    timeouts: AtomicU64,
    waited_us: AtomicU64,
    /// The Entra ID token, where requests carry one.
    bearer: Option<Bearer>,
}

impl Client {
    pub fn new(config: AzureConfig) -> Result<Self, String> {
        let roots = match &config.ca_file {
            Some(path) => trusted_roots(path)?,
            None => Vec::new(),
        };
        let mut http = reqwest::Client::builder()
            .tcp_nodelay(true)
            .pool_max_idle_per_host(config.max_connections)
            .pool_idle_timeout(Duration::from_secs(30))
            .timeout(config.request_timeout)
            .connect_timeout(Duration::from_secs(10));
        for root in &roots {
            http = http.add_root_certificate(root.clone());
        }
        let http = http.build().map_err(|e| e.without_url().to_string())?;
        let bearer = match &config.credentials {
            Credentials::Entra(source) => {
                let env = |var: &str| std::env::var(var).ok();
                let credential =
                    entra::credential(source, config.authority_host.as_deref(), &roots, &env)?;
                let scope = if config.cosmos {
                    entra::COSMOS_SCOPE
                } else {
                    entra::STORAGE_SCOPE
                };
                Some(Bearer::new(credential, scope))
            }
            _ => None,
        };
        Ok(Self {
            bearer,
            http,
            window: super::window::Window::new(config.max_connections),
            config,
            requests: AtomicU64::new(0),
            retries: AtomicU64::new(0),
            busy: AtomicU64::new(0),
            timeouts: AtomicU64::new(0),
            waited_us: AtomicU64::new(0),
        })
    }

    pub fn config(&self) -> &AzureConfig {
        &self.config
    }

    pub fn stats(&self) -> ClientStats {
        ClientStats {
            tokens: self.bearer.as_ref().map_or(0, Bearer::fetched),
            requests: self.requests.load(Ordering::Relaxed),
            retries: self.retries.load(Ordering::Relaxed),
            busy: self.busy.load(Ordering::Relaxed),
            timeouts: self.timeouts.load(Ordering::Relaxed),
            waited: Duration::from_micros(self.waited_us.load(Ordering::Relaxed)),
            window: self.window.width(),
        }
    }

    /// Sends a request, retrying transient failures per the retry policy.
    /// Any answer the service gives that is not a success is an error.
    ///
    /// A busy answer (503 ServerBusy, 429) refused the work before doing it,
    /// so it is retried for as long as the policy's `busy_timeout` allows
    /// (by default without end), not a number of times: a throttled scan
    /// slows down and finishes rather than fails; a statement's own timeout
    /// or a cancel ends it. Its wait
    /// is the service's hint where it gives one (`x-ms-retry-after-ms`,
    /// `Retry-After`), else the backoff formula. Other failures are retried
    /// `max_retries` times.
    pub async fn send(&self, req: &Request) -> Result<Response, SendError> {
        let policy = self.config.retry;
        let started = std::time::Instant::now();
        let mut attempts = 0u32;
        let mut answer_lost = false;
        let mut retried = 0u32;
        let (mut busy, mut other) = (0u32, 0u32);
        let result = (|| {
            attempts += 1;
            self.attempt(req)
        })
        .retry(policy.backoff_forever())
        .sleep(tokio::time::sleep)
        .when(|f| policy.max_retries > 0 && f.is_retryable())
        .adjust(|failure, _| {
            let jitter = rand::random::<f64>();
            // A hint is honoured between zmin and zmax: a service cannot
            // stall a client, nor make it retry at once.
            let hint = match failure {
                Failure::Status { retry_after, .. } => {
                    retry_after.map(|h| h.clamp(policy.min_delay, policy.max_delay))
                }
                _ => None,
            };
            if failure.is_busy() {
                busy += 1;
                let wait = hint.unwrap_or_else(|| policy.wait(busy, jitter));
                let within = policy
                    .busy_timeout
                    .is_none_or(|limit| started.elapsed() + wait <= limit);
                within.then_some(wait)
            } else {
                other += 1;
                let wait = policy.wait(other, jitter);
                (other <= policy.max_retries).then(|| hint.map_or(wait, |h| wait.max(h)))
            }
        })
        .notify(|failure, wait| {
            // A read has nothing to apply; a lost answer to it is just lost.
            answer_lost |= req.method != Method::GET && failure.may_have_applied();
            self.retries.fetch_add(1, Ordering::Relaxed);
            self.waited_us
                .fetch_add(wait.as_micros() as u64, Ordering::Relaxed);
            super::super::retries::note(failure.is_busy(), wait);
            retried += 1;
            log_retry(req, failure, retried, wait);
        })
        .await;
        match result {
            Ok(mut resp) => {
                resp.answer_lost = answer_lost;
                resp.attempts = attempts;
                Ok(resp)
            }
            Err(failure) => Err(SendError {
                failure,
                attempts,
                answer_lost,
            }),
        }
    }

    async fn attempt(&self, req: &Request) -> Result<Response, Failure> {
        let mut slot = self.window.enter().await;
        let mut bearer = match &self.bearer {
            Some(b) => Some(b.header().await.map_err(Failure::SignIn)?),
            None => None,
        };
        let mut refused = false;
        let resp = loop {
            self.requests.fetch_add(1, Ordering::Relaxed);
            let built = self.build(req, bearer.as_deref()).map_err(Failure::Local)?;
            let resp = self
                .http
                .execute(built)
                .await
                .map_err(|e| self.transport(e))?;
            // A token the service refuses (expired by its clock: 401
            // InvalidAuthenticationInfo, or before 2021 403
            // AuthenticationFailed) is dropped, and the request sent once
            // more where the credential gives another; else the refusal is
            // the answer (the SDK's credentials keep a token until five
            // minutes before its expiry, so a revoked one stays refused).
            if let (Some(b), Some(sent)) = (&self.bearer, &bearer)
                && !refused
                && token_refused(&resp)
            {
                refused = true;
                b.forget(sent).await;
                let next = b.header().await.map_err(Failure::SignIn)?;
                if &next != sent {
                    bearer = Some(next);
                    continue;
                }
            }
            break resp;
        };
        let status = resp.status();
        match status.as_u16() {
            503 | 429 => self.busy.fetch_add(1, Ordering::Relaxed),
            408 | 504 => self.timeouts.fetch_add(1, Ordering::Relaxed),
            _ => 0,
        };
        let headers = resp.headers().clone();
        // The request timeout covers the body too: an answer that stops
        // midway times out here.
        let body = resp.bytes().await.map_err(|e| self.transport(e))?.to_vec();
        if status.is_success() {
            slot.answered(false);
            return Ok(Response {
                headers,
                body,
                answer_lost: false,
                attempts: 1,
            });
        }
        let (code, message) = parse_error(&headers, &body);
        // A range server's refusal slows the requests to it (they wait and
        // retry) but says nothing of the account: the window, which bounds
        // the whole client, halves only when the account is over its limit.
        match status.as_u16() {
            503 | 429 if !range_busy(status.as_u16(), &code, &message) => slot.answered(true),
            503 | 429 => {}
            _ => slot.answered(false),
        }
        // The service's own timeout: 500 with this code (a 408 or 504 was
        // counted above).
        if code == "OperationTimedOut" && !matches!(status.as_u16(), 408 | 504) {
            self.timeouts.fetch_add(1, Ordering::Relaxed);
        }
        Err(Failure::Status {
            status: status.as_u16(),
            code,
            message,
            retry_after: retry_hint(&headers),
        })
    }

    /// An attempt that got no (whole) answer, counted as a timeout if it
    /// ran out of time.
    fn transport(&self, e: reqwest::Error) -> Failure {
        if e.is_timeout() {
            self.timeouts.fetch_add(1, Ordering::Relaxed);
        }
        Failure::Transport(describe(e))
    }

    /// The full URL, headers and signature of a request, stamped now.
    fn build(&self, req: &Request, bearer: Option<&str>) -> Result<reqwest::Request, String> {
        let path = format!("{}{}", self.config.base_path(), req.path);
        let mut url = format!("{}{}", self.config.endpoint, req.path);
        let mut sep = '?';
        for (name, value) in &req.query {
            url.push(sep);
            url.push_str(name);
            url.push('=');
            url.push_str(&encode(value));
            sep = '&';
        }
        if let Credentials::Sas(sas) = &self.config.credentials {
            url.push(sep);
            url.push_str(sas);
        }
        let url = reqwest::Url::parse(&url).map_err(|e| format!("invalid request URL: {e}"))?;
        let date = chrono::Utc::now()
            .format("%a, %d %b %Y %H:%M:%S GMT")
            .to_string();
        let mut builder = self
            .http
            .request(req.method.clone(), url)
            .header("x-ms-version", API_VERSION)
            .header("x-ms-date", &date)
            .header("Accept", ACCEPT_JSON)
            .header("DataServiceVersion", "3.0;NetFx")
            .header("MaxDataServiceVersion", "3.0;NetFx");
        for (name, value) in &req.headers {
            let value = HeaderValue::from_str(value).map_err(|_| "invalid header value")?;
            builder = builder.header(name, value);
        }
        let content_type = req.body.as_ref().map_or("", |(t, _)| t.as_str());
        if let Credentials::SharedKey { key, lite } = &self.config.credentials {
            let parts = SignedParts {
                method: req.method.as_str(),
                content_md5: "",
                content_type,
                date: &date,
                path: &path,
                comp: req
                    .query
                    .iter()
                    .find(|(n, _)| *n == "comp")
                    .map(|(_, v)| v.as_str()),
            };
            builder = builder.header(
                "Authorization",
                authorization(&self.config.account, key, &parts, *lite),
            );
        }
        if let Some(bearer) = bearer {
            builder = builder.header("Authorization", bearer);
        }
        if let Some((content_type, bytes)) = &req.body {
            builder = builder
                .header("Content-Type", content_type)
                .body(bytes.clone());
        }
        builder.build().map_err(|e| e.without_url().to_string())
    }
}

/// Whether an answer refuses the request's bearer token.
fn token_refused(resp: &reqwest::Response) -> bool {
    match resp.status().as_u16() {
        401 => true,
        403 => resp
            .headers()
            .get("x-ms-error-code")
            .is_some_and(|c| c == "AuthenticationFailed"),
        _ => false,
    }
}

/// How long the service asks a client to wait: Cosmos DB's
/// `x-ms-retry-after-ms` (milliseconds, possibly fractional), else
/// `Retry-After` in seconds.
fn retry_hint(headers: &HeaderMap) -> Option<Duration> {
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    text("x-ms-retry-after-ms")
        .and_then(|v| v.trim().parse::<f64>().ok())
        .and_then(|ms| Duration::try_from_secs_f64(ms / 1000.0).ok())
        .or_else(|| text("retry-after").and_then(parse_retry_after))
}

/// A transport error with its causes ("error sending request: … Connection
/// refused"), without the URL, which may carry a SAS signature.
/// A retry, in the log: the service's busy answers (503 ServerBusy, 429)
/// at `warn`, since throttling is the store telling the operator something,
/// other retries at `info`. The path names the table and keys (a batch's
/// is `/$batch`); never the account's key, which only signs the request.
fn log_retry(req: &Request, failure: &Failure, retry: u32, wait: Duration) {
    let path = req.path.as_str();
    match failure {
        Failure::Status {
            status: status @ (503 | 429),
            code,
            ..
        } => tracing::warn!(
            method = %req.method, path, status, code, retry, wait_ms = wait.as_millis() as u64,
            "azure: the service is busy, retrying"
        ),
        Failure::Status { status, code, .. } => tracing::info!(
            method = %req.method, path, status, code, retry, wait_ms = wait.as_millis() as u64,
            "azure: retrying"
        ),
        Failure::Transport(why) | Failure::Local(why) | Failure::SignIn(why) => tracing::info!(
            method = %req.method, path, error = %why, retry, wait_ms = wait.as_millis() as u64,
            "azure: no answer, retrying"
        ),
    }
}

/// The PEM certificates of `path`, each trusted as a root.
fn trusted_roots(path: &std::path::Path) -> Result<Vec<reqwest::Certificate>, String> {
    let pem = std::fs::read(path).map_err(|e| format!("CaFile {}: {e}", path.display()))?;
    let roots = reqwest::Certificate::from_pem_bundle(&pem)
        .map_err(|e| format!("CaFile {}: {e}", path.display()))?;
    if roots.is_empty() {
        return Err(format!(
            "CaFile {} holds no PEM certificate",
            path.display()
        ));
    }
    Ok(roots)
}

fn describe(e: reqwest::Error) -> String {
    let e = e.without_url();
    let mut text = e.to_string();
    let mut source = std::error::Error::source(&e);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// JSON text with every non-ASCII character escaped (UTF-16, as JSON escapes
/// are). Outside strings JSON holds only ASCII, so escaping the whole text is safe.
pub fn ascii_json(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_ascii() {
            out.push(c);
        } else {
            let mut units = [0u16; 2];
            for u in c.encode_utf16(&mut units) {
                out.push_str(&format!("\\u{u:04x}"));
            }
        }
    }
    out
}

/// Whether a busy answer is a range server's, not the account's: Azure
/// Storage's 503 ServerBusy says which only in its message, one of four it
/// documents ("The server is busy." for a partition's server; "... is over
/// the account limit." for the account's operations, ingress or egress).
/// Cosmos DB's 429 is the account's (its throughput is provisioned per
/// table or account), and so is any other 503 (a gateway's, an outage's).
fn range_busy(status: u16, code: &str, message: &str) -> bool {
    status == 503 && code == "ServerBusy" && !message.contains("over the account limit")
}

/// The error code and message of an error answer: `odata.error` JSON, the
/// XML `<Error>` form, or the `x-ms-error-code` header.
pub fn parse_error(headers: &HeaderMap, body: &[u8]) -> (String, String) {
    let header_code = headers
        .get("x-ms-error-code")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    if let Ok(json) = serde_json::from_slice::<serde_json::Value>(body)
        && let Some(err) = json.get("odata.error")
    {
        let code = err.get("code").and_then(|c| c.as_str()).map(str::to_owned);
        let message = err
            .pointer("/message/value")
            .and_then(|m| m.as_str())
            .unwrap_or("")
            .to_owned();
        return (code.or(header_code).unwrap_or_default(), message);
    }
    let text = String::from_utf8_lossy(body);
    let between = |open: &str, close: &str| {
        let start = text.find(open)? + open.len();
        let end = text[start..].find(close)? + start;
        Some(text[start..end].to_owned())
    };
    let code = between("<Code>", "</Code>")
        .or(header_code)
        .unwrap_or_default();
    let message = between("<Message>", "</Message>").unwrap_or_default();
    (code, message)
}

#[cfg(test)]
mod tests {
    #[test]
    fn ascii_json_escapes_as_utf16() {
        let text = serde_json::json!({ "S": "é\u{10000}\"x" }).to_string();
        let ascii = super::ascii_json(&text);
        assert_eq!(ascii, r#"{"S":"\u00e9\ud800\udc00\"x"}"#);
        let back: serde_json::Value = serde_json::from_str(&ascii).unwrap();
        assert_eq!(back.to_string(), text);
    }

    #[test]
    fn a_busy_answer_is_the_accounts_only_where_it_says_so() {
        let range = |status, message: &str| super::range_busy(status, "ServerBusy", message);
        assert!(range(503, "The server is busy."));
        assert!(range(
            503,
            "The server is currently unable to receive requests. Please retry your request."
        ));
        for account in ["Operations per second", "Ingress", "Egress"] {
            assert!(!range(
                503,
                &format!("{account} is over the account limit.")
            ));
        }
        assert!(!range(429, "Request rate is large."));
        // A 503 that is not ServerBusy (a gateway's, an outage's).
        assert!(!super::range_busy(
            503,
            "ServiceUnavailable",
            "The server is busy."
        ));
    }
}
