//! The Table REST API over HTTP/1.1 (hyper's server): path-style URLs
//! (`http://host:port/ACCOUNT/...`) as Azurite serves them, JSON with minimal
//! metadata, Shared Key and Shared Key Lite signatures checked with the
//! account's key, Entra ID bearer tokens checked where the account has an
//! [`Identity`] (which also answers `GET /msi/token`, and, over TLS on a
//! listener of its own, Entra ID's token endpoint: [`serve_authority`]),
//! and `GET /_tablesql/counters` for the counters.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::body::Incoming;
use hyper::header::HeaderMap;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use percent_encoding::percent_decode_str;
use serde_json::{Value, json};
use tablesql_storage::storage::azure::auth::{SignedParts, authorization};
use tablesql_storage::storage::odata::{entity_from_body, entity_to_json};
use tablesql_storage::storage::{
    ETag, IfMatch, PartitionKey, RowKey, StorageError, TableName, WriteOp,
};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use crate::batch;
use crate::identity::Identity;
use crate::limits::Profile;
use crate::scan::PageRequest;
use crate::service::{Refusal, Service};
use crate::token;

/// The account the service answers for, and its key.
#[derive(Debug, Clone)]
pub struct Account {
    pub name: String,
    pub key: Vec<u8>,
    /// Entra ID's side, where the account accepts bearer tokens.
    pub identity: Option<Arc<Identity>>,
}

impl Account {
    /// An account from its name and its key in base64, as connection
    /// strings give it.
    pub fn new(name: impl Into<String>, key_base64: &str) -> Result<Self, String> {
        let key = STANDARD
            .decode(key_base64)
            .map_err(|_| "the account key is not base64".to_owned())?;
        Ok(Self {
            name: name.into(),
            key,
            identity: None,
        })
    }

    /// The account accepting Entra ID tokens of `identity`.
    pub fn with_identity(mut self, identity: Arc<Identity>) -> Self {
        self.identity = Some(identity);
        self
    }
}

pub(crate) type Answer = Response<Full<Bytes>>;

/// A running service; dropping it stops it and closes its connections.
#[derive(Debug)]
pub struct Running {
    pub addr: SocketAddr,
    pub service: Arc<Service>,
    pub account: Account,
    task: tokio::task::JoinHandle<()>,
}

impl Running {
    /// The connection string of the account: tablesql's `Emulator=false`
    /// (the client treats the service as Azure, not as Azurite), and
    /// `Cosmos=true` on the `cosmos` profile.
    pub fn connection_string(&self) -> String {
        let cosmos = self.service.limits().profile == Profile::Cosmos;
        format!(
            "DefaultEndpointsProtocol=http;AccountName={};AccountKey={};TableEndpoint=http://{}/{};Emulator=false;Cosmos={cosmos}",
            self.account.name,
            STANDARD.encode(&self.account.key),
            self.addr,
            self.account.name
        )
    }

    /// Waits until the service stops (it runs until dropped).
    pub async fn wait(mut self) {
        let _ = (&mut self.task).await;
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Serves `service` for `account` on `listener` until the returned handle drops.
pub fn serve(
    listener: TcpListener,
    service: Arc<Service>,
    account: Account,
) -> std::io::Result<Running> {
    let addr = listener.local_addr()?;
    let (s, a) = (service.clone(), account.clone());
    let task = accept(listener, None, move |req| {
        let (service, account) = (s.clone(), a.clone());
        async move { handle(&service, &account, req).await }
    });
    Ok(Running {
        addr,
        service,
        account,
        task,
    })
}

/// Entra ID's token endpoint over TLS, served until the handle drops.
#[derive(Debug)]
pub struct Authority {
    pub addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Authority {
    /// The `AuthorityHost` a client names.
    pub fn host(&self) -> String {
        format!("https://{}", self.addr)
    }
}

impl Drop for Authority {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Serves `identity`'s token endpoint (`POST /{tenant}/oauth2/v2.0/token`)
/// over TLS with the PEM certificate chain and key given: the Azure SDK
/// signs in only at an HTTPS authority.
pub fn serve_authority(
    listener: TcpListener,
    cert: &std::path::Path,
    key: &std::path::Path,
    identity: Arc<Identity>,
) -> std::io::Result<Authority> {
    let addr = listener.local_addr()?;
    let tls = crate::identity::acceptor(cert, key)?;
    let task = accept(listener, Some(tls), move |req| {
        let identity = identity.clone();
        async move { Ok(token_endpoint(&identity, req).await) }
    });
    Ok(Authority { addr, task })
}

async fn token_endpoint(identity: &Identity, req: Request<Incoming>) -> Answer {
    let (parts, body) = req.into_parts();
    let tenant = parts
        .uri
        .path()
        .strip_suffix("/oauth2/v2.0/token")
        .and_then(|p| p.strip_prefix('/'));
    let (Some(tenant), &Method::POST) = (tenant, &parts.method) else {
        return json_answer(StatusCode::NOT_FOUND, &json!({"error": "not_found"}));
    };
    let body = match body.collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => {
            return json_answer(
                StatusCode::BAD_REQUEST,
                &json!({"error": "invalid_request"}),
            );
        }
    };
    let form = form_params(&String::from_utf8_lossy(&body));
    identity_answer(identity.client_credentials(tenant, &form))
}

fn identity_answer(answered: crate::identity::Answered) -> Answer {
    match answered {
        Ok(body) => json_answer(StatusCode::OK, &body),
        Err((status, body)) => json_answer(
            StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST),
            &body,
        ),
    }
}

/// Accepts connections on `listener` (through `tls` where given) and serves
/// each with `handler`, until the task is aborted. The connections' tasks
/// go with the accept loop's: stopping it closes every connection, not
/// only the listener.
fn accept<H, F>(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    handler: H,
) -> tokio::task::JoinHandle<()>
where
    H: Fn(Request<Incoming>) -> F + Clone + Send + Sync + 'static,
    F: std::future::Future<Output = Result<Answer, Lost>> + Send + 'static,
{
    tokio::spawn(async move {
        let mut connections = tokio::task::JoinSet::new();
        loop {
            // Finished connections leave the set as they end.
            while connections.try_join_next().is_some() {}
            let tcp = match listener.accept().await {
                Ok((tcp, _)) => tcp,
                Err(e) => {
                    tracing::warn!(error = %e, "table service: accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let _ = tcp.set_nodelay(true);
            let (handler, tls) = (handler.clone(), tls.clone());
            connections.spawn(async move {
                let served = match tls {
                    None => connection(TokioIo::new(tcp), handler).await,
                    Some(tls) => match tls.accept(tcp).await {
                        Ok(stream) => connection(TokioIo::new(stream), handler).await,
                        Err(e) => {
                            tracing::debug!(error = %e, "table service: TLS handshake failed");
                            return;
                        }
                    },
                };
                if let Err(e) = served {
                    tracing::debug!(error = %e, "table service: connection closed");
                }
            });
        }
    })
}

async fn connection<I, H, F>(io: TokioIo<I>, handler: H) -> Result<(), hyper::Error>
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    H: Fn(Request<Incoming>) -> F + Send + Sync + 'static,
    F: std::future::Future<Output = Result<Answer, Lost>> + Send + 'static,
{
    hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(Duration::from_secs(30))
        .serve_connection(io, hyper::service::service_fn(handler))
        .await
}

/// A lost answer: hyper closes the connection without writing one.
#[derive(Debug)]
struct Lost;

impl std::fmt::Display for Lost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the answer was lost (injected)")
    }
}

impl std::error::Error for Lost {}

async fn handle(
    service: &Service,
    account: &Account,
    req: Request<Incoming>,
) -> Result<Answer, Lost> {
    let (parts, body) = req.into_parts();
    let body = match body.collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => return Err(Lost),
    };
    let path = parts.uri.path().to_owned();
    if path == "/_tablesql/counters" {
        return Ok(json_answer(StatusCode::OK, &service.counters().json()));
    }
    let query = query_params(parts.uri.query().unwrap_or(""));
    // A managed identity's endpoint: its host's, not the service's, so
    // its requests are no Table requests and are not counted.
    if let (Some(identity), "/msi/token") = (&account.identity, path.as_str()) {
        let header = ["x-identity-header", "secret"]
            .iter()
            .find_map(|h| parts.headers.get(*h).and_then(|v| v.to_str().ok()));
        return Ok(identity_answer(identity.managed_identity(header, &query)));
    }
    let profile = service.limits().profile;
    let answer = match authorize(
        account,
        profile,
        &parts.method,
        &parts.headers,
        &path,
        &query,
    ) {
        Err(refusal) => Err(refusal),
        Ok(()) => {
            let latency = service.latency();
            if !latency.is_zero() {
                tokio::time::sleep(latency).await;
            }
            match service.injected() {
                Err(r) => Err(r),
                Ok(()) => {
                    let rest = path
                        .strip_prefix(&format!("/{}", account.name))
                        .unwrap_or(&path);
                    route(
                        service,
                        account,
                        &parts.method,
                        &parts.headers,
                        rest,
                        &query,
                        &body,
                    )
                    .await
                }
            }
        }
    };
    let throttled = matches!(answer, Err(Refusal::Busy { .. } | Refusal::TimedOut));
    service.counters.request(throttled);
    match answer {
        Ok(a) => Ok(a),
        Err(Refusal::LostAnswer) => Err(Lost),
        Err(r) => Ok(refusal_answer(&r, service.limits().profile)),
    }
}

async fn route(
    service: &Service,
    account: &Account,
    method: &Method,
    headers: &HeaderMap,
    rest: &str,
    query: &[(String, String)],
    body: &[u8],
) -> Result<Answer, Refusal> {
    let param = |name: &str| param(query, name);
    let return_content = headers
        .get("prefer")
        .and_then(|v| v.to_str().ok())
        .is_none_or(|p| !p.contains("return-no-content"));
    if rest == "/Tables" && method == Method::GET {
        let tables = service.list_tables().await?;
        let value: Vec<Value> = tables
            .iter()
            .map(|t| json!({"TableName": t.as_str()}))
            .collect();
        return Ok(json_answer(StatusCode::OK, &json!({ "value": value })));
    }
    if rest == "/Tables" && method == Method::POST {
        let json: Value = parse_json(body)?;
        let name = json["TableName"]
            .as_str()
            .ok_or_else(|| bad("InvalidInput", "no TableName"))?;
        let table = table_name(name)?;
        service.create_table(&table).await?;
        return Ok(if return_content {
            json_answer(StatusCode::CREATED, &json!({"TableName": table.as_str()}))
        } else {
            empty(StatusCode::NO_CONTENT)
        });
    }
    if let Some(name) = rest
        .strip_prefix("/Tables('")
        .and_then(|r| r.strip_suffix("')"))
    {
        if method != Method::DELETE {
            return Err(bad("UnsupportedHttpVerb", "a table is deleted, not read"));
        }
        service.delete_table(&table_name(&decode(name))?).await?;
        return Ok(empty(StatusCode::NO_CONTENT));
    }
    if rest == "/$batch" && method == Method::POST {
        let content_type = headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        return batch::run(service, account, content_type, body).await;
    }
    let rest = rest.strip_prefix('/').unwrap_or(rest);
    let (table, keys) = match rest.find('(') {
        None => (rest, None),
        Some(at) => {
            let inner = rest[at..]
                .strip_prefix('(')
                .and_then(|r| r.strip_suffix(')'))
                .ok_or_else(|| bad("InvalidUri", "unbalanced parentheses"))?;
            (
                &rest[..at],
                (!inner.is_empty())
                    .then(|| entity_keys(&decode(inner)))
                    .transpose()?,
            )
        }
    };
    let table = table_name(&decode(table))?;
    let if_match = headers
        .get("if-match")
        .and_then(|v| v.to_str().ok())
        .map(|v| {
            if v == "*" {
                IfMatch::Any
            } else {
                IfMatch::ETag(ETag::from_wire(v))
            }
        });
    match (method.as_str(), keys) {
        ("GET", None) => {
            let filter = param("$filter")
                .map(crate::odata_filter::parse)
                .transpose()
                .map_err(|e| bad("InvalidInput", &e))?;
            let top = match param("$top") {
                None => 1000,
                Some(t) => t
                    .parse::<usize>()
                    .ok()
                    .filter(|t| (1..=1000).contains(t))
                    .ok_or_else(|| bad("InvalidInput", "$top is 1 to 1000"))?,
            };
            let select =
                param("$select").map(|s| s.split(',').map(|n| n.trim().to_owned()).collect());
            let resume = match param("NextPartitionKey") {
                None => None,
                Some(pk) => Some(token::decode(pk, param("NextRowKey"))?),
            };
            let page = service
                .query(
                    &table,
                    PageRequest {
                        filter,
                        top,
                        select,
                        resume,
                    },
                )
                .await?;
            let value: Vec<Value> = page.entities.iter().map(entity_to_json).collect();
            let mut answer = json_answer(StatusCode::OK, &json!({ "value": value }));
            if let Some((pk, rk)) = &page.next {
                let (npk, nrk) = token::encode(pk, rk, service.limits().profile);
                let h = answer.headers_mut();
                h.insert("x-ms-continuation-NextPartitionKey", header(&npk));
                if let Some(nrk) = nrk {
                    h.insert("x-ms-continuation-NextRowKey", header(&nrk));
                }
            }
            Ok(answer)
        }
        ("GET", Some((pk, rk))) => match service.get(&table, &pk, &rk).await? {
            Some(e) => {
                let mut answer = json_answer(StatusCode::OK, &entity_to_json(&e));
                answer
                    .headers_mut()
                    .insert("etag", header(&e.etag.to_string()));
                Ok(answer)
            }
            None => Err(StorageError::EntityNotFound {
                partition_key: pk.as_str().into(),
                row_key: rk.as_str().into(),
            }
            .into()),
        },
        ("POST", None) => {
            let entity = entity(body)?;
            let outcome = service
                .write(&table, vec![WriteOp::Insert(entity.clone())], false)
                .await?;
            let etag = outcome.first().and_then(|o| o.etag.clone());
            let mut answer = if return_content {
                let mut stored = tablesql_storage::storage::odata::entity_body(&entity);
                if let Some(e) = &etag {
                    stored["odata.etag"] = Value::String(e.to_string());
                }
                json_answer(StatusCode::CREATED, &stored)
            } else {
                empty(StatusCode::NO_CONTENT)
            };
            if let Some(e) = etag {
                answer.headers_mut().insert("etag", header(&e.to_string()));
            }
            Ok(answer)
        }
        (m @ ("PUT" | "MERGE" | "PATCH" | "DELETE"), Some((pk, rk))) => {
            let op = match (m, if_match) {
                ("DELETE", Some(if_match)) => WriteOp::Delete {
                    partition_key: pk.clone(),
                    row_key: rk.clone(),
                    if_match,
                },
                ("DELETE", None) => {
                    return Err(bad("MissingRequiredHeader", "a delete needs If-Match"));
                }
                (m, if_match) => {
                    let e = entity(body)?;
                    if e.partition_key != pk || e.row_key != rk {
                        return Err(bad(
                            "PropertiesNeedValue",
                            "the body's keys differ from the URL's",
                        ));
                    }
                    match (m, if_match) {
                        ("PUT", Some(im)) => WriteOp::Update(e, im),
                        ("PUT", None) => WriteOp::InsertOrReplace(e),
                        (_, Some(im)) => WriteOp::Merge(e, im),
                        (_, None) => WriteOp::InsertOrMerge(e),
                    }
                }
            };
            let outcome = service.write(&table, vec![op], false).await?;
            let mut answer = empty(StatusCode::NO_CONTENT);
            if let Some(e) = outcome.first().and_then(|o| o.etag.clone()) {
                answer.headers_mut().insert("etag", header(&e.to_string()));
            }
            Ok(answer)
        }
        _ => Err(bad(
            "UnsupportedHttpVerb",
            &format!("{method} is not served here"),
        )),
    }
}

pub(crate) fn entity(body: &[u8]) -> Result<tablesql_storage::storage::Entity, Refusal> {
    let json = parse_json(body)?;
    let obj = json
        .as_object()
        .ok_or_else(|| bad("InvalidInput", "the body is not an object"))?;
    let mut e = entity_from_body(obj).map_err(|e| bad("InvalidInput", &e.to_string()))?;
    e.validate().map_err(|e| Refusal::Store(e.into()))?;
    Ok(e)
}

fn parse_json(body: &[u8]) -> Result<Value, Refusal> {
    serde_json::from_slice(body).map_err(|e| bad("InvalidInput", &format!("invalid JSON: {e}")))
}

fn table_name(name: &str) -> Result<TableName, Refusal> {
    TableName::new(name).map_err(|e| bad("InvalidResourceName", &e.to_string()))
}

/// `PartitionKey='a',RowKey='b'`, quotes doubled.
pub(crate) fn entity_keys(inner: &str) -> Result<(PartitionKey, RowKey), Refusal> {
    let invalid = || bad("InvalidUri", "expected PartitionKey='…',RowKey='…'");
    let rest = inner.strip_prefix("PartitionKey='").ok_or_else(invalid)?;
    let (pk, rest) = quoted(rest).ok_or_else(invalid)?;
    let rest = rest.strip_prefix(",RowKey='").ok_or_else(invalid)?;
    let (rk, rest) = quoted(rest).ok_or_else(invalid)?;
    if !rest.is_empty() {
        return Err(invalid());
    }
    let pk = PartitionKey::new(pk).map_err(|e| Refusal::Store(e.into()))?;
    let rk = RowKey::new(rk).map_err(|e| Refusal::Store(e.into()))?;
    Ok((pk, rk))
}

/// The text up to a lone closing quote, and what follows the quote.
fn quoted(s: &str) -> Option<(String, &str)> {
    let mut out = String::new();
    let mut chars = s.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        if c == '\'' {
            if chars.peek().map(|(_, c)| *c) == Some('\'') {
                chars.next();
                out.push('\'');
            } else {
                return Some((out, &s[i + 1..]));
            }
        } else {
            out.push(c);
        }
    }
    None
}

pub(crate) fn decode(s: &str) -> String {
    percent_decode_str(s).decode_utf8_lossy().into_owned()
}

/// The value of the first pair named `name` of a query or a form.
pub(crate) fn param<'a>(pairs: &'a [(String, String)], name: &str) -> Option<&'a str> {
    pairs
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

/// An `application/x-www-form-urlencoded` body, where `+` is a space.
fn form_params(body: &str) -> Vec<(String, String)> {
    query_params(&body.replace('+', "%20"))
}

fn query_params(q: &str) -> Vec<(String, String)> {
    q.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (n, v) = p.split_once('=').unwrap_or((p, ""));
            (decode(n), decode(v))
        })
        .collect()
}

/// Checks a bearer token with the account's identity, or a Shared Key or
/// Shared Key Lite signature against the account's key (unless the
/// identity turned Shared Key off).
fn authorize(
    account: &Account,
    profile: Profile,
    method: &Method,
    headers: &HeaderMap,
    path: &str,
    query: &[(String, String)],
) -> Result<(), Refusal> {
    let get = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    };
    let given = get("authorization");
    let refused = |status: u16, code: &'static str, message: &str| Refusal::Bad {
        status,
        code,
        message: message.to_owned(),
    };
    if let Some(token) = given.strip_prefix("Bearer ") {
        return match &account.identity {
            Some(identity) => identity.check(token, profile),
            None => Err(refused(
                401,
                "InvalidAuthenticationInfo",
                "the account accepts no Entra ID token",
            )),
        };
    }
    let lite = given.starts_with("SharedKeyLite ");
    if !(lite || given.starts_with("SharedKey ")) {
        return Err(refused(
            403,
            "AuthenticationFailed",
            "the request is not signed with Shared Key (the local service checks no SAS)",
        ));
    }
    if account.identity.as_ref().is_some_and(|i| !i.shared_key()) {
        return Err(refused(
            403,
            "KeyBasedAuthenticationNotPermitted",
            "Key based authentication is not permitted on this storage account.",
        ));
    }
    let date = match get("x-ms-date") {
        "" => get("date"),
        d => d,
    };
    let comp = query
        .iter()
        .find(|(n, _)| n == "comp")
        .map(|(_, v)| v.as_str());
    let parts = SignedParts {
        method: method.as_str(),
        content_md5: get("content-md5"),
        content_type: get("content-type"),
        date,
        path,
        comp,
    };
    if authorization(&account.name, &account.key, &parts, lite) == given {
        Ok(())
    } else {
        Err(refused(
            403,
            "AuthenticationFailed",
            "the signature does not match the account's key",
        ))
    }
}

pub(crate) fn bad(code: &'static str, message: &str) -> Refusal {
    Refusal::Bad {
        status: 400,
        code,
        message: message.to_owned(),
    }
}

pub(crate) fn header(v: &str) -> hyper::header::HeaderValue {
    hyper::header::HeaderValue::from_str(v)
        .unwrap_or_else(|_| hyper::header::HeaderValue::from_static(""))
}

fn json_answer(status: StatusCode, body: &Value) -> Answer {
    let mut r = Response::new(Full::new(Bytes::from(body.to_string())));
    *r.status_mut() = status;
    r.headers_mut().insert(
        "content-type",
        hyper::header::HeaderValue::from_static(
            "application/json;odata=minimalmetadata;streaming=true;charset=utf-8",
        ),
    );
    r
}

pub(crate) fn empty(status: StatusCode) -> Answer {
    let mut r = Response::new(Full::new(Bytes::new()));
    *r.status_mut() = status;
    r
}

/// The status, code and message the service answers a refusal with.
pub(crate) fn status_of(r: &Refusal, profile: Profile) -> (u16, String, String) {
    match r {
        Refusal::Busy { message, .. } => match profile {
            Profile::Storage => (503, "ServerBusy".into(), (*message).into()),
            Profile::Cosmos => (429, "TooManyRequests".into(), (*message).into()),
        },
        Refusal::TimedOut => (
            500,
            "OperationTimedOut".into(),
            "Operation could not be completed within the specified time.".into(),
        ),
        Refusal::Bad {
            status,
            code,
            message,
        } => (*status, (*code).into(), message.clone()),
        Refusal::LostAnswer => (500, "InternalError".into(), "lost".into()),
        Refusal::Store(e) => store_status(e),
    }
}

fn store_status(e: &StorageError) -> (u16, String, String) {
    let text = e.to_string();
    let (status, code) = match e.root() {
        StorageError::TableNotFound(_) => (404, "TableNotFound"),
        StorageError::TableAlreadyExists(_) => (409, "TableAlreadyExists"),
        StorageError::TableBeingDeleted(_) => (409, "TableBeingDeleted"),
        StorageError::EntityNotFound { .. } => (404, "ResourceNotFound"),
        StorageError::EntityAlreadyExists { .. } => (409, "EntityAlreadyExists"),
        StorageError::PreconditionFailed { .. } => (412, "UpdateConditionNotSatisfied"),
        StorageError::Invalid(i) => {
            use tablesql_storage::storage::InvalidInput as I;
            match i {
                I::KeyTooLong { .. } => (400, "KeyValueTooLarge"),
                I::TooManyProperties { .. } => (400, "TooManyProperties"),
                I::ValueTooLarge { .. } => (400, "PropertyValueTooLarge"),
                I::EntityTooLarge { .. } => (400, "EntityTooLarge"),
                I::BatchTooLarge { .. } => (413, "RequestBodyTooLarge"),
                I::CrossPartition { .. } => (400, "CommandsInBatchActOnDifferentPartitions"),
                _ => (400, "InvalidInput"),
            }
        }
        _ => (500, "InternalError"),
    };
    (status, code.into(), text)
}

pub(crate) fn error_body(code: &str, message: &str) -> Value {
    json!({"odata.error": {"code": code, "message": {"lang": "en-US", "value": message}}})
}

fn refusal_answer(r: &Refusal, profile: Profile) -> Answer {
    let (status, code, message) = status_of(r, profile);
    let mut answer = json_answer(
        StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        &error_body(&code, &message),
    );
    let h = answer.headers_mut();
    h.insert("x-ms-error-code", header(&code));
    if let Refusal::Busy {
        hint: Some(hint), ..
    } = r
    {
        match profile {
            Profile::Storage => {
                h.insert("retry-after", header(&hint.as_secs().max(1).to_string()));
            }
            Profile::Cosmos => {
                h.insert("x-ms-retry-after-ms", header(&hint.as_millis().to_string()));
            }
        }
    }
    answer
}
