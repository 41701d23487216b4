//! The Azure backend: the `TableStore` trait over the Azure Table REST API
//! (Azure Storage, Cosmos DB Table, Azurite), JSON with minimal metadata.
//!
//! Every limit of the model is checked here before a request leaves, since
//! some services (Azurite) accept what Azure refuses; and every query answer is
//! filtered again on the client, so a filter the service evaluates differently
//! or only in part still gives this model's answer.

pub mod auth;
mod batch;
pub mod config;
pub mod entra;
mod errors;
mod filter_text;
mod http;
mod window;
mod write_id;

use std::collections::HashMap;

use async_trait::async_trait;
use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE};
use reqwest::Method;
use serde_json::Value;
use tokio::sync::Mutex;

use super::TableStore;
use super::entity::{IfMatch, StoredEntity};
use super::error::{InvalidInput, Result, StorageError};
use super::key::{PartitionKey, RowKey};
use super::odata::{entity_body, entity_from_json};
use super::query::{ContinuationToken, MAX_PAGE, Page, Query, ServiceToken};
use super::table_name::TableName;
use super::write::MAX_BATCH_BYTES;
use super::write::{WriteOp, WriteOutcome, validate_batch};

pub use super::retry::RetryPolicy;
pub use config::{AzureConfig, ConfigError, Credentials};
pub use http::ClientStats;

use errors::{Ctx, ambiguous_if_lost, map_error, map_status};
use filter_text::Push;
use http::{Client, Request, encode};

/// A `TableStore` on one storage account of the Azure Table service.
#[derive(Debug)]
pub struct AzureStore {
    client: Client,
    scan_budget: usize,
    /// On an emulator only: table names as created, by folded name. Azure
    /// resolves table names ignoring case; Azurite does not, so the client does.
    names: Option<Mutex<HashMap<String, TableName>>>,
}

impl AzureStore {
    /// A store on the account a configuration names. Nothing is sent yet.
    pub fn new(config: AzureConfig) -> Result<Self> {
        let names = config.emulator.then(Mutex::default);
        let client = Client::new(config).map_err(StorageError::Protocol)?;
        Ok(Self {
            client,
            scan_budget: MAX_PAGE,
            names,
        })
    }

    /// Examines at most `n` entities per page when `n` is below a page: the
    /// store then asks the service for pages of `n` entities by key only and
    /// applies the property filter itself, so one page costs one bounded
    /// request (a page may then be empty and still carry a token).
    pub fn with_scan_budget(mut self, n: usize) -> Self {
        self.scan_budget = n.max(1);
        self
    }

    /// Requests and retries so far.
    pub fn stats(&self) -> ClientStats {
        self.client.stats()
    }

    /// The account's configuration.
    pub fn config(&self) -> &AzureConfig {
        self.client.config()
    }

    /// The table's name as the service knows it (see `names`).
    async fn resolve(&self, table: &TableName) -> Result<TableName> {
        let Some(names) = &self.names else {
            return Ok(table.clone());
        };
        let mut names = names.lock().await;
        if !names.contains_key(&table.folded()) {
            match self.list_names().await {
                Ok(listed) => *names = listed.into_iter().map(|n| (n.folded(), n)).collect(),
                // A table SAS may not list tables: use the name as given
                // (a failed sign-in is no such refusal).
                Err(StorageError::Unauthorized { code, .. }) if code != "SignInFailed" => {
                    return Ok(table.clone());
                }
                Err(e) => return Err(e),
            }
        }
        Ok(names.get(&table.folded()).unwrap_or(table).clone())
    }

    /// Notes a created or deleted table in `names`.
    async fn remember(&self, table: &TableName, created: bool) {
        if let Some(names) = &self.names {
            let mut names = names.lock().await;
            if created {
                names.insert(table.folded(), table.clone());
            } else {
                names.remove(&table.folded());
            }
        }
    }

    async fn list_names(&self) -> Result<Vec<TableName>> {
        let mut names = Vec::new();
        let mut next: Option<String> = None;
        loop {
            let mut req = Request::new(Method::GET, "/Tables");
            if let Some(n) = &next {
                req = req.query("NextTableName", n.clone());
            }
            let ctx = Ctx {
                table: "Tables",
                keys: None,
            };
            let resp = self.send(req, ctx).await?;
            let json: Value = parse_json(&resp.body)?;
            for t in json["value"].as_array().into_iter().flatten() {
                let name = t["TableName"]
                    .as_str()
                    .ok_or_else(|| StorageError::Protocol("a table without a name".into()))?;
                names
                    .push(TableName::new(name).map_err(|e| StorageError::Protocol(e.to_string()))?);
            }
            let token = resp
                .header("x-ms-continuation-nexttablename")
                .map(str::to_owned);
            if token.is_none() || token == next {
                // No token: done. The same token again would loop forever.
                return Ok(names);
            }
            next = token;
        }
    }

    async fn send(&self, req: Request, ctx: Ctx<'_>) -> Result<http::Response> {
        self.client.send(&req).await.map_err(|e| map_error(e, &ctx))
    }

    /// Refuses what Cosmos DB's Table API would: RowKeys past 255 bytes.
    fn check_cosmos(&self, ops: &[WriteOp]) -> Result<()> {
        if !self.client.config().cosmos {
            return Ok(());
        }
        for (index, op) in ops.iter().enumerate() {
            let size = op.keys().1.as_str().len();
            if size > COSMOS_MAX_ROW_KEY {
                let source = InvalidInput::ServiceLimit {
                    what: "the RowKey",
                    size,
                    limit: COSMOS_MAX_ROW_KEY,
                    service: "Cosmos DB's Table API",
                };
                return Err(match ops.len() {
                    1 => source.into(),
                    _ => StorageError::Batch {
                        index,
                        source: Box::new(source.into()),
                    },
                });
            }
        }
        Ok(())
    }

    /// An entity as the service holds it, a write's id too (`write_id`).
    async fn get_raw(
        &self,
        table: &TableName,
        partition_key: &PartitionKey,
        row_key: &RowKey,
    ) -> Result<Option<StoredEntity>> {
        let req = Request::new(Method::GET, entity_path(table, partition_key, row_key));
        match self
            .send(req, Ctx::entity(table, partition_key, row_key))
            .await
        {
            Ok(resp) => {
                let json = parse_json(&resp.body)?;
                let obj = json.as_object().ok_or_else(|| {
                    StorageError::Protocol("an entity that is not an object".into())
                })?;
                entity_from_json(obj, resp.header("etag"))
                    .map(Some)
                    .map_err(|e| StorageError::Protocol(e.to_string()))
            }
            Err(StorageError::EntityNotFound { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// A write whose answer was lost, retried into a conflict the lost
    /// attempt would cause (`AmbiguousRetry`), settled by reading back what
    /// it wrote: every operation's entity as the writes leave it means the
    /// lost attempt was applied, and the writes' outcomes are the entities'
    /// ETags now. Otherwise, or if a read fails, the ambiguity stands. A
    /// Replace conditional on an ETag is settled only by its id
    /// (`write_id`), a conditional Merge never: another client's equal
    /// write in between (a sequence's next value, claimed by both) would
    /// read as ours by its values, and only one of them may have it. The
    /// ETag returned is the entity's now: an unconditional write by
    /// another client since ours landed would pass as ours. An insert, or an
    /// unconditional write, is settled by its values: the state is the one
    /// asked for either way (two clients inserting an equal entity in that
    /// moment both succeed). A conditional delete is never: the entity is
    /// gone whoever deleted it.
    async fn settle(
        &self,
        table: &TableName,
        ops: &[WriteOp],
        err: StorageError,
    ) -> Result<Vec<WriteOutcome>> {
        if !matches!(err, StorageError::AmbiguousRetry { .. }) {
            return Err(err);
        }
        let mut found = Vec::with_capacity(ops.len());
        for op in ops {
            let (pk, rk) = op.keys();
            let Ok(now) = self.get_raw(table, pk, rk).await else {
                return Err(err);
            };
            found.push(now);
        }
        let mut read = ops.iter().zip(&found);
        // A batch lands whole: one Replace's id proves every write applied.
        let proven = read.clone().any(|(op, now)| {
            matches!(op, WriteOp::Update(_, IfMatch::ETag(_))) && reads_as_applied(op, now.as_ref())
        });
        if !proven && !read.all(|(op, now)| reads_as_applied(op, now.as_ref())) {
            return Err(err);
        }
        let outcomes: Vec<WriteOutcome> = found
            .into_iter()
            .map(|now| WriteOutcome {
                etag: now.map(|now| now.etag),
            })
            .collect();
        tracing::info!(table = %table, writes = ops.len(), "azure: a lost answer's write was applied");
        Ok(outcomes)
    }

    async fn write_one(&self, table: &TableName, mut op: WriteOp) -> Result<WriteOutcome> {
        validate_batch(std::slice::from_mut(&mut op)).map_err(|e| match e {
            StorageError::Batch { source, .. } => *source,
            other => other,
        })?;
        self.check_cosmos(std::slice::from_ref(&op))?;
        let (pk, rk) = op.keys();
        let ctx = Ctx::entity(table, pk, rk);
        let entity_path = entity_path(table, pk, rk);
        let merge = || Method::from_bytes(b"MERGE").unwrap_or(Method::PATCH);
        let ascii = self.client.config().emulator;
        let req = match &op {
            WriteOp::Insert(e) => Request::new(Method::POST, format!("/{table}"))
                .header("prefer", "return-no-content")
                .json(&entity_body(e), ascii),
            WriteOp::Update(e, m) => Request::new(Method::PUT, entity_path)
                .header("if-match", batch::if_match_text(m))
                .json(&entity_body(e), ascii),
            WriteOp::Merge(e, m) => Request::new(merge(), entity_path)
                .header("if-match", batch::if_match_text(m))
                .json(&entity_body(e), ascii),
            WriteOp::Delete { if_match, .. } => Request::new(Method::DELETE, entity_path)
                .header("if-match", batch::if_match_text(if_match)),
            WriteOp::InsertOrReplace(e) => {
                Request::new(Method::PUT, entity_path).json(&entity_body(e), ascii)
            }
            WriteOp::InsertOrMerge(e) => {
                Request::new(merge(), entity_path).json(&entity_body(e), ascii)
            }
        };
        let resp = self.send(req, ctx).await?;
        Ok(WriteOutcome {
            etag: match op {
                WriteOp::Delete { .. } => None,
                _ => Some(super::ETag::from_wire(resp.header("etag").ok_or_else(
                    || StorageError::Protocol("a write answer without an ETag".into()),
                )?)),
            },
        })
    }
}

/// Whether `found`, an entity read back as the service holds it after a
/// write's answer was lost, shows the write applied (`AzureStore::settle`):
/// holding a conditional Replace's id, as an insert or an unconditional
/// write leaves it, or gone after an unconditional delete. Never for a
/// delete conditional on an ETag, or a conditional write without an id,
/// which another client's write would read the same as.
fn reads_as_applied(op: &WriteOp, found: Option<&StoredEntity>) -> bool {
    match (op, found) {
        (WriteOp::Update(e, IfMatch::ETag(_)) | WriteOp::Merge(e, IfMatch::ETag(_)), found) => {
            let id = write_id::of(e);
            id.is_some() && id == found.and_then(|now| write_id::of(&now.entity))
        }
        (
            WriteOp::Delete {
                if_match: IfMatch::ETag(_),
                ..
            },
            _,
        ) => false,
        (WriteOp::Delete { .. }, None) => true,
        (WriteOp::Insert(e) | WriteOp::Update(e, _) | WriteOp::InsertOrReplace(e), Some(now)) => {
            now.entity.properties == e.properties
        }
        (WriteOp::Merge(e, _) | WriteOp::InsertOrMerge(e), Some(now)) => e
            .properties
            .iter()
            .all(|(name, v)| now.entity.properties.get(name) == Some(v)),
        _ => false,
    }
}

/// `/T(PartitionKey='p',RowKey='r')`, quotes doubled, then percent-encoded.
fn entity_path(table: &TableName, pk: &PartitionKey, rk: &RowKey) -> String {
    let key = |k: &str| encode(&k.replace('\'', "''"));
    format!(
        "/{table}(PartitionKey='{}',RowKey='{}')",
        key(pk.as_str()),
        key(rk.as_str())
    )
}

/// The key a service's continuation value names, where its form is known:
/// base64 of the key (Azurite) or `1!<length>!<base64>` (Azure Storage).
fn decode_service_key(value: &str) -> Option<String> {
    let b64 = match value.strip_prefix("1!") {
        // Azure pads this form with `-` in place of `=`.
        Some(rest) => {
            let body = rest.split_once('!')?.1;
            let unpadded = body.trim_end_matches('-');
            format!("{unpadded}{}", "=".repeat(body.len() - unpadded.len()))
        }
        None => value.to_owned(),
    };
    let bytes = STANDARD
        .decode(&b64)
        .or_else(|_| URL_SAFE.decode(&b64))
        .ok()?;
    String::from_utf8(bytes).ok()
}

/// The position a page's continuation resumes at. Where the service's values
/// cannot be read, the last entity the service returned is used: the next
/// page starts after it, so it is a correct lower bound.
fn continuation_position(
    service: &ServiceToken,
    last_seen: Option<(&PartitionKey, &RowKey)>,
    previous: Option<&ContinuationToken>,
) -> (PartitionKey, RowKey) {
    let pk =
        decode_service_key(&service.next_partition_key).and_then(|k| PartitionKey::new(k).ok());
    let rk = match &service.next_row_key {
        None => RowKey::new("").ok(),
        Some(v) => decode_service_key(v).and_then(|k| RowKey::new(k).ok()),
    };
    match (pk, rk, last_seen, previous) {
        (Some(pk), Some(rk), _, _) => (pk, rk),
        (_, _, Some((pk, rk)), _) => (pk.clone(), rk.clone()),
        (_, _, None, Some(t)) => (t.next_partition_key.clone(), t.next_row_key.clone()),
        _ => (PartitionKey::default(), RowKey::default()),
    }
}

/// Cosmos DB's Table API's longest RowKey, in UTF-8 bytes.
const COSMOS_MAX_ROW_KEY: usize = 255;
/// Cosmos DB's Table API's largest batch request.
const COSMOS_MAX_BATCH_BYTES: usize = 2_000_000;

/// RowKeys one `get_many` request names: the service takes 15 comparisons
/// in a `$filter`, three of which bound the partition and the keys' span.
const GET_MANY_KEYS: usize = filter_text::MAX_COMPARISONS - 3;

#[async_trait]
impl TableStore for AzureStore {
    fn retries_requests(&self) -> bool {
        true
    }

    fn key_ordered(&self) -> bool {
        !self.client.config().cosmos
    }

    fn service_counters(&self) -> Option<crate::storage::ServiceCounters> {
        let c = self.client.stats();
        Some(crate::storage::ServiceCounters {
            requests: c.requests,
            retries: c.retries,
            busy: c.busy,
            timeouts: c.timeouts,
            waited: c.waited,
        })
    }

    async fn create_table(&self, table: &TableName) -> Result<()> {
        if self.names.is_some() && self.resolve(table).await?.as_str() != table.as_str() {
            return Err(StorageError::TableAlreadyExists(table.as_str().to_owned()));
        }
        let body = serde_json::json!({ "TableName": table.as_str() });
        let req = Request::new(Method::POST, "/Tables")
            .header("prefer", "return-no-content")
            .json(&body, false);
        self.send(req, Ctx::table(table)).await?;
        self.remember(table, true).await;
        Ok(())
    }

    async fn delete_table(&self, table: &TableName) -> Result<()> {
        let table = &self.resolve(table).await?;
        let req = Request::new(Method::DELETE, format!("/Tables('{table}')"));
        self.send(req, Ctx::table(table)).await?;
        self.remember(table, false).await;
        Ok(())
    }

    async fn list_tables(&self) -> Result<Vec<TableName>> {
        let mut names = self.list_names().await?;
        names.sort_by_key(|n| n.folded());
        Ok(names)
    }

    async fn get(
        &self,
        table: &TableName,
        partition_key: &PartitionKey,
        row_key: &RowKey,
    ) -> Result<Option<StoredEntity>> {
        let table = &self.resolve(table).await?;
        let mut found = self.get_raw(table, partition_key, row_key).await?;
        if let Some(found) = &mut found {
            write_id::strip(&mut found.entity);
        }
        Ok(found)
    }

    /// Up to [`GET_MANY_KEYS`] RowKeys of one partition in one query:
    /// `PartitionKey eq` the partition, `RowKey ge` the first and `le` the
    /// last key, and an `or` of `RowKey eq` each key. The service reads the
    /// keys' span of the partition for it (an `or` of keys is no range to
    /// it), so a batch of keys close together costs one request where
    /// separate gets cost one each.
    async fn get_many(
        &self,
        table: &TableName,
        partition_key: &PartitionKey,
        row_keys: &[RowKey],
    ) -> Result<Vec<StoredEntity>> {
        let mut found = Vec::with_capacity(row_keys.len());
        for chunk in row_keys.chunks(GET_MANY_KEYS) {
            if let [rk] = chunk {
                found.extend(self.get(table, partition_key, rk).await?);
                continue;
            }
            let (Some(first), Some(last)) = (chunk.first(), chunk.last()) else {
                continue;
            };
            let key = |rk: &RowKey| super::Filter::Compare {
                operand: super::filter::Operand::RowKey,
                op: super::filter::CmpOp::Eq,
                value: super::EdmValue::String(rk.as_str().to_owned()),
            };
            let filter = chunk[1..].iter().fold(key(first), |f, rk| {
                super::Filter::Or(Box::new(f), Box::new(key(rk)))
            });
            let query = Query::partition(partition_key.clone())
                .rows(super::KeyRange {
                    start: std::ops::Bound::Included(first.clone()),
                    end: std::ops::Bound::Included(last.clone()),
                })
                .filter(filter);
            found.extend(self.query_all(table, &query).await?);
        }
        // In RowKey order on every service (Cosmos DB's answers in none).
        found.sort_by(|a, b| a.row_key().cmp(b.row_key()));
        Ok(found)
    }

    fn get_many_limit(&self) -> usize {
        GET_MANY_KEYS
    }

    async fn query(
        &self,
        table: &TableName,
        query: &Query,
        continuation: Option<&ContinuationToken>,
    ) -> Result<Page> {
        let page_size = query.page_size()?;
        let table = &self.resolve(table).await?;
        let budgeted = self.scan_budget < page_size;
        let top = page_size.min(self.scan_budget);
        // A token of another store names only a key: resume by key filter,
        // which only a service in key order can.
        let resume = continuation
            .filter(|t| t.service.is_none())
            .map(|t| (&t.next_partition_key, &t.next_row_key));
        if resume.is_some() && self.client.config().cosmos {
            return Err(InvalidInput::ContinuationToken.into());
        }
        let mut req =
            Request::new(Method::GET, format!("/{table}()")).query("$top", top.to_string());
        let push = match (budgeted, self.client.config().emulator) {
            (true, _) => Push::KeysOnly,
            (false, true) => Push::SafeTypes,
            (false, false) => Push::AllTypes,
        };
        let config = self.client.config();
        if let Some(f) = filter_text::query_filter(query, push, resume, !config.cosmos) {
            req = req.query("$filter", f);
        }
        if let Some(names) = query.needed_properties() {
            let mut select = vec!["PartitionKey", "RowKey", "Timestamp"];
            select.extend(names.iter().map(String::as_str));
            req = req.query("$select", select.join(","));
        }
        if let Some(ServiceToken {
            next_partition_key,
            next_row_key,
        }) = continuation.and_then(|t| t.service.as_ref())
        {
            req = req.query("NextPartitionKey", next_partition_key.clone());
            if let Some(rk) = next_row_key {
                req = req.query("NextRowKey", rk.clone());
            }
        }
        let resp = self.send(req, Ctx::table(table)).await?;
        let json = parse_json(&resp.body)?;
        let mut page = Page::default();
        let mut last_seen = None;
        for item in json["value"].as_array().into_iter().flatten() {
            let obj = item
                .as_object()
                .ok_or_else(|| StorageError::Protocol("an entity that is not an object".into()))?;
            let mut e =
                entity_from_json(obj, None).map_err(|e| StorageError::Protocol(e.to_string()))?;
            write_id::strip(&mut e.entity);
            last_seen = Some((e.partition_key().clone(), e.row_key().clone()));
            page.scanned += 1;
            let in_range =
                query.partitions.contains(e.partition_key()) && query.rows.contains(e.row_key());
            if in_range && query.passes(&e) {
                query.project(&mut e.entity.properties);
                page.entities.push(e);
            }
        }
        if let Some(next_pk) = resp.header("x-ms-continuation-nextpartitionkey") {
            let service = ServiceToken {
                next_partition_key: next_pk.to_owned(),
                next_row_key: resp
                    .header("x-ms-continuation-nextrowkey")
                    .map(str::to_owned),
            };
            let (pk, rk) = continuation_position(
                &service,
                last_seen.as_ref().map(|(p, r)| (p, r)),
                continuation,
            );
            let mut token = ContinuationToken::at(pk, rk);
            token.service = Some(service);
            page.continuation = Some(token);
        }
        Ok(page)
    }

    async fn execute(&self, table: &TableName, mut op: WriteOp) -> Result<WriteOutcome> {
        let table = &self.resolve(table).await?;
        if self.client.config().write_ids {
            write_id::tag(&mut op);
        }
        match self.write_one(table, op.clone()).await {
            Err(e @ StorageError::AmbiguousRetry { .. }) => {
                let mut settled = self.settle(table, std::slice::from_ref(&op), e).await?;
                settled
                    .pop()
                    .ok_or_else(|| StorageError::Protocol("no outcome".into()))
            }
            other => other,
        }
    }

    async fn execute_batch(
        &self,
        table: &TableName,
        mut ops: Vec<WriteOp>,
    ) -> Result<Vec<WriteOutcome>> {
        validate_batch(&mut ops)?;
        self.check_cosmos(&ops)?;
        let table = &self.resolve(table).await?;
        let table_url = format!("{}/{table}", self.client.config().endpoint);
        let entity_url = |op: &WriteOp| {
            let (pk, rk) = op.keys();
            format!(
                "{}{}",
                self.client.config().endpoint,
                entity_path(table, pk, rk)
            )
        };
        let ascii = self.client.config().emulator;
        if self.client.config().write_ids {
            ops.iter_mut().for_each(write_id::tag);
        }
        let (mut content_type, mut body) = batch::encode(&table_url, entity_url, &ops, ascii);
        let limit = match self.client.config().cosmos {
            true => COSMOS_MAX_BATCH_BYTES,
            false => MAX_BATCH_BYTES,
        };
        // The ids are worth less than a batch that fits.
        if body.len() > limit {
            ops.iter_mut().for_each(write_id::untag);
            (content_type, body) = batch::encode(&table_url, entity_url, &ops, ascii);
        }
        // The service's 4 MiB is of the request body, which can outgrow the
        // entity size formula (base64 Binary, escapes, multipart framing).
        if body.len() > MAX_BATCH_BYTES {
            return Err(InvalidInput::BatchTooLarge { bytes: body.len() }.into());
        }
        if self.client.config().cosmos && body.len() > COSMOS_MAX_BATCH_BYTES {
            return Err(InvalidInput::ServiceLimit {
                what: "the batch request",
                size: body.len(),
                limit: COSMOS_MAX_BATCH_BYTES,
                service: "Cosmos DB's Table API",
            }
            .into());
        }
        let mut req = Request::new(Method::POST, "/$batch");
        req.body = Some((content_type, body));
        let resp = self.send(req, Ctx::table(table)).await?;
        let text = String::from_utf8_lossy(&resp.body);
        let parts = batch::decode(&text).map_err(StorageError::Protocol)?;
        if let Some(failed) = parts.iter().find(|p| p.status >= 300) {
            let index = failed.index.unwrap_or(0).min(ops.len() - 1);
            let (pk, rk) = ops[index].keys();
            let (code, message) =
                http::parse_error(&reqwest::header::HeaderMap::new(), failed.body.as_bytes());
            let source = map_status(failed.status, &code, &message, &Ctx::entity(table, pk, rk));
            if let StorageError::TableNotFound(_) = source {
                // A fault of the batch as a whole, not of one operation.
                return Err(source);
            }
            let err = StorageError::Batch {
                index,
                source: Box::new(source),
            };
            let err = ambiguous_if_lost(err, resp.answer_lost, resp.attempts);
            return self.settle(table, &ops, err).await;
        }
        if parts.len() != ops.len() {
            return Err(StorageError::Protocol(format!(
                "{} answers to a batch of {} operations",
                parts.len(),
                ops.len()
            )));
        }
        ops.iter()
            .zip(parts)
            .map(|(op, part)| match op {
                WriteOp::Delete { .. } => Ok(WriteOutcome { etag: None }),
                _ => part
                    .etag
                    .map(|e| WriteOutcome {
                        etag: Some(super::ETag::from_wire(e)),
                    })
                    .ok_or_else(|| StorageError::Protocol("a batch answer without an ETag".into())),
            })
            .collect()
    }
}

fn parse_json(body: &[u8]) -> Result<Value> {
    serde_json::from_slice(body).map_err(|e| StorageError::Protocol(format!("invalid JSON: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entity_paths_escape_quotes_and_reserved_characters() {
        let t = TableName::new("Tab").unwrap();
        let p =
            PartitionKey::new("it's a/b").unwrap_or_else(|_| PartitionKey::new("it's a").unwrap());
        let r = RowKey::new("é%").unwrap();
        assert_eq!(
            entity_path(&t, &p, &r),
            "/Tab(PartitionKey='it%27%27s%20a',RowKey='%C3%A9%25')"
        );
    }

    #[test]
    fn a_lost_write_reads_as_applied_only_as_it_leaves_the_entity() {
        use crate::storage::{ETag, EdmValue, Entity};
        let key = |n: i32| {
            Entity::new(PartitionKey::new("p").unwrap(), RowKey::new("r").unwrap())
                .with("n", EdmValue::Int32(n))
        };
        let stored = |n: i32| StoredEntity {
            entity: key(n),
            timestamp: chrono::Utc::now(),
            etag: ETag::from_wire("W/\"x\""),
        };
        let insert = WriteOp::Insert(key(4));
        assert!(reads_as_applied(&insert, Some(&stored(4))));
        // Another client's change since: the ambiguity stands.
        assert!(!reads_as_applied(&insert, Some(&stored(40))));
        assert!(!reads_as_applied(&insert, None));
        let merge = WriteOp::InsertOrMerge(key(4));
        let mut more = stored(4);
        more.entity
            .properties
            .insert("m".into(), EdmValue::Int32(1));
        assert!(reads_as_applied(&merge, Some(&more)));
        let any = |if_match| WriteOp::Delete {
            partition_key: PartitionKey::new("p").unwrap(),
            row_key: RowKey::new("r").unwrap(),
            if_match,
        };
        assert!(reads_as_applied(&any(IfMatch::Any), None));
        let version = IfMatch::ETag(ETag::from_wire("W/\"x\""));
        assert!(!reads_as_applied(&any(version.clone()), None));
        let mut update = WriteOp::Update(key(4), version);
        // An equal entity another client wrote, without the write's id.
        assert!(!reads_as_applied(&update, Some(&stored(4))));
        write_id::tag(&mut update);
        let mut ours = stored(4);
        ours.entity = update.entity().cloned().unwrap();
        assert!(reads_as_applied(&update, Some(&ours)));
        // Ours, since overwritten with its values by another: it may have
        // landed or not.
        let mut theirs = ours.clone();
        write_id::strip(&mut theirs.entity);
        assert!(!reads_as_applied(&update, Some(&theirs)));
        assert!(!reads_as_applied(&update, None));
    }

    #[test]
    fn service_continuations_decode_where_known() {
        assert_eq!(decode_service_key("cDE=").as_deref(), Some("p1"));
        assert_eq!(decode_service_key("1!8!cDE-").as_deref(), Some("p1"));
        let s = ServiceToken {
            next_partition_key: "!!opaque".into(),
            next_row_key: None,
        };
        let p = PartitionKey::new("a").unwrap();
        let r = RowKey::new("b").unwrap();
        assert_eq!(continuation_position(&s, Some((&p, &r)), None), (p, r));
    }
}
