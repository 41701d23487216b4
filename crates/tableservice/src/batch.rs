//! `POST /$batch`: an entity group transaction as a `multipart/mixed` body
//! holding one changeset of HTTP requests, answered with one HTTP response
//! per operation, or with the one that failed, its index before its message
//! (`3:The specified entity already exists.`).

use std::fmt::Write as _;

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Response, StatusCode};
use tablesql_storage::storage::{ETag, IfMatch, StorageError, TableName, WriteOp};

use crate::http::{
    Account, Answer, bad, decode, entity, entity_keys, error_body, header, status_of,
};
use crate::service::{Refusal, Service};

/// One operation of a changeset.
struct Part {
    method: String,
    /// The path after the account: `/T` or `/T(PartitionKey='…',RowKey='…')`.
    path: String,
    if_match: Option<String>,
    body: String,
}

pub async fn run(
    service: &Service,
    account: &Account,
    content_type: &str,
    body: &[u8],
) -> Result<Answer, Refusal> {
    let limits = service.limits();
    if body.len() > limits.max_batch_bytes {
        return Err(Refusal::Bad {
            status: 413,
            code: "RequestBodyTooLarge",
            message: format!(
                "The batch is {} bytes, over {}.",
                body.len(),
                limits.max_batch_bytes
            ),
        });
    }
    if !content_type.starts_with("multipart/mixed") {
        return Err(bad("InvalidInput", "a batch is multipart/mixed"));
    }
    let text =
        std::str::from_utf8(body).map_err(|_| bad("InvalidInput", "the batch is not UTF-8"))?;
    let parts = parts(text, &account.name)?;
    let mut table: Option<TableName> = None;
    let mut ops = Vec::with_capacity(parts.len());
    for p in &parts {
        let (name, keys) = match p.path.find('(') {
            None => (p.path.trim_start_matches('/'), None),
            Some(at) => {
                let inner = p.path[at + 1..]
                    .strip_suffix(')')
                    .ok_or_else(|| bad("InvalidUri", "unbalanced parentheses"))?;
                (
                    p.path[..at].trim_start_matches('/'),
                    Some(entity_keys(&decode(inner))?),
                )
            }
        };
        let name =
            TableName::new(decode(name)).map_err(|e| bad("InvalidResourceName", &e.to_string()))?;
        match &table {
            None => table = Some(name),
            Some(t) if *t == name => {}
            Some(_) => return Err(bad("InvalidInput", "a batch writes one table")),
        }
        let if_match = p.if_match.as_deref().map(|v| {
            if v == "*" {
                IfMatch::Any
            } else {
                IfMatch::ETag(ETag::from_wire(v))
            }
        });
        let op = match (p.method.as_str(), keys, if_match) {
            ("POST", None, _) => WriteOp::Insert(entity(p.body.as_bytes())?),
            ("DELETE", Some((partition_key, row_key)), Some(if_match)) => WriteOp::Delete {
                partition_key,
                row_key,
                if_match,
            },
            ("PUT", Some(_), Some(m)) => WriteOp::Update(entity(p.body.as_bytes())?, m),
            ("PUT", Some(_), None) => WriteOp::InsertOrReplace(entity(p.body.as_bytes())?),
            ("MERGE" | "PATCH", Some(_), Some(m)) => WriteOp::Merge(entity(p.body.as_bytes())?, m),
            ("MERGE" | "PATCH", Some(_), None) => {
                WriteOp::InsertOrMerge(entity(p.body.as_bytes())?)
            }
            (m, _, _) => return Err(bad("InvalidInput", &format!("{m} is no write of a batch"))),
        };
        ops.push(op);
    }
    let table = table.ok_or_else(|| {
        Refusal::Store(tablesql_storage::storage::InvalidInput::EmptyBatch.into())
    })?;
    let id = uuid_like();
    match service.write(&table, ops, true).await {
        Ok(outcomes) => {
            let mut b = String::new();
            let _ = write!(
                b,
                "--batchresponse_{id}\r\nContent-Type: multipart/mixed; boundary=changesetresponse_{id}\r\n\r\n"
            );
            for (i, o) in outcomes.iter().enumerate() {
                let _ = write!(
                    b,
                    "--changesetresponse_{id}\r\nContent-Type: application/http\r\nContent-Transfer-Encoding: binary\r\n\r\n\
                     HTTP/1.1 204 No Content\r\nContent-ID: {}\r\n",
                    i + 1
                );
                if let Some(e) = &o.etag {
                    let _ = write!(b, "ETag: {e}\r\n");
                }
                b.push_str("\r\n\r\n");
            }
            let _ = write!(
                b,
                "--changesetresponse_{id}--\r\n--batchresponse_{id}--\r\n"
            );
            Ok(multipart(&id, b))
        }
        Err(Refusal::Store(StorageError::Batch { index, source })) => {
            let (status, code, message) = status_of(&Refusal::Store(*source), limits.profile);
            let body = error_body(&code, &format!("{index}:{message}"));
            let mut b = String::new();
            let _ = write!(
                b,
                "--batchresponse_{id}\r\nContent-Type: multipart/mixed; boundary=changesetresponse_{id}\r\n\r\n\
                 --changesetresponse_{id}\r\nContent-Type: application/http\r\nContent-Transfer-Encoding: binary\r\n\r\n\
                 HTTP/1.1 {status} {}\r\nContent-ID: {}\r\nContent-Type: application/json;odata=minimalmetadata\r\n\r\n{body}\r\n\
                 --changesetresponse_{id}--\r\n--batchresponse_{id}--\r\n",
                StatusCode::from_u16(status)
                    .ok()
                    .and_then(|s| s.canonical_reason())
                    .unwrap_or("Error"),
                index + 1
            );
            Ok(multipart(&id, b))
        }
        Err(other) => Err(other),
    }
}

fn multipart(id: &str, body: String) -> Answer {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = StatusCode::ACCEPTED;
    r.headers_mut().insert(
        "content-type",
        header(&format!("multipart/mixed; boundary=batchresponse_{id}")),
    );
    r
}

fn uuid_like() -> String {
    format!("{:032x}", rand::random::<u128>())
}

/// The changeset's requests, in order.
fn parts(text: &str, account: &str) -> Result<Vec<Part>, Refusal> {
    let malformed = |why: &str| bad("InvalidInput", &format!("malformed batch: {why}"));
    let at = text
        .find("boundary=changeset")
        .ok_or_else(|| malformed("no changeset"))?;
    let boundary_start = at + "boundary=".len();
    let boundary_end = text[boundary_start..]
        .find(['\r', '\n', ';'])
        .map_or(text.len(), |e| boundary_start + e);
    let delimiter = format!("--{}", &text[boundary_start..boundary_end]);
    let mut out = Vec::new();
    for chunk in text[boundary_end..].split(&delimiter).skip(1) {
        if chunk.starts_with("--") {
            break;
        }
        // The part's own MIME headers, then the HTTP request.
        let (_, request) = chunk
            .split_once("\r\n\r\n")
            .ok_or_else(|| malformed("a part without headers"))?;
        let (head, body) = request.split_once("\r\n\r\n").unwrap_or((request, ""));
        let mut lines = head.lines();
        let request_line = lines
            .next()
            .ok_or_else(|| malformed("a part without a request"))?;
        let mut words = request_line.split_whitespace();
        let (Some(method), Some(url)) = (words.next(), words.next()) else {
            return Err(malformed("a request line without a URL"));
        };
        let path = url
            .split_once("://")
            .map_or(url, |(_, rest)| rest.find('/').map_or("", |i| &rest[i..]));
        let path = path.strip_prefix(&format!("/{account}")).unwrap_or(path);
        let if_match = lines.find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.trim()
                .eq_ignore_ascii_case("if-match")
                .then(|| v.trim().to_owned())
        });
        out.push(Part {
            method: method.to_owned(),
            path: path.to_owned(),
            if_match,
            body: body.trim().to_owned(),
        });
    }
    Ok(out)
}
