//! Entity group transactions on the wire: a `multipart/mixed` body holding one
//! changeset of HTTP requests (CRLF line ends), and its answer, one HTTP
//! response per operation, or one error response naming the failed index.

use std::fmt::Write as _;

use super::super::entity::IfMatch;
use super::super::odata::entity_body;
use super::super::write::WriteOp;
use super::http::{ACCEPT_JSON, ascii_json};

/// The body and content type of a `$batch` request.
/// With `ascii`, entity JSON escapes every non-ASCII character.
pub fn encode(
    table_url: &str,
    entity_url: impl Fn(&WriteOp) -> String,
    ops: &[WriteOp],
    ascii: bool,
) -> (String, Vec<u8>) {
    let id = uuid::Uuid::from_u128(rand::random());
    let batch = format!("batch_{id}");
    let changeset = format!("changeset_{id}");
    let mut b = String::new();
    // `write!` to a String cannot fail.
    let _ = write!(
        b,
        "--{batch}\r\nContent-Type: multipart/mixed; boundary={changeset}\r\n\r\n"
    );
    for (i, op) in ops.iter().enumerate() {
        let (method, url, if_match, body) = match op {
            WriteOp::Insert(e) => ("POST", table_url.to_owned(), None, Some(e)),
            WriteOp::Update(e, m) => ("PUT", entity_url(op), Some(m), Some(e)),
            WriteOp::Merge(e, m) => ("MERGE", entity_url(op), Some(m), Some(e)),
            WriteOp::Delete { if_match, .. } => ("DELETE", entity_url(op), Some(if_match), None),
            WriteOp::InsertOrReplace(e) => ("PUT", entity_url(op), None, Some(e)),
            WriteOp::InsertOrMerge(e) => ("MERGE", entity_url(op), None, Some(e)),
        };
        let _ = write!(
            b,
            "--{changeset}\r\nContent-Type: application/http\r\nContent-Transfer-Encoding: binary\r\n\r\n\
             {method} {url} HTTP/1.1\r\nContent-ID: {}\r\nAccept: {ACCEPT_JSON}\r\n\
             DataServiceVersion: 3.0;\r\n",
            i + 1
        );
        if let Some(m) = if_match {
            let _ = write!(b, "If-Match: {}\r\n", if_match_text(m));
        }
        match body {
            Some(e) => {
                let mut json = entity_body(e).to_string();
                if ascii {
                    json = ascii_json(&json);
                }
                let _ = write!(
                    b,
                    "Content-Type: application/json\r\nPrefer: return-no-content\r\n\r\n{json}\r\n"
                );
            }
            None => b.push_str("\r\n"),
        }
    }
    let _ = write!(b, "--{changeset}--\r\n\r\n--{batch}--\r\n");
    (format!("multipart/mixed; boundary={batch}"), b.into_bytes())
}

/// The `If-Match` header value of a precondition.
pub fn if_match_text(m: &IfMatch) -> String {
    match m {
        IfMatch::Any => "*".to_owned(),
        IfMatch::ETag(e) => e.to_string(),
    }
}

/// One operation's answer inside a batch response.
#[derive(Debug, Clone, PartialEq)]
pub struct PartResponse {
    pub status: u16,
    pub etag: Option<String>,
    /// The operation's 0-based index: from the `N:` prefix of an error message,
    /// else from `Content-ID`.
    pub index: Option<usize>,
    pub body: String,
}

/// The HTTP responses inside a batch answer, in order.
pub fn decode(body: &str) -> Result<Vec<PartResponse>, String> {
    let mut parts = Vec::new();
    let mut rest = body;
    while let Some(at) = rest.find("HTTP/1.1 ") {
        rest = &rest[at + "HTTP/1.1 ".len()..];
        let status = rest
            .get(..3)
            .and_then(|s| s.parse::<u16>().ok())
            .ok_or("a batch response part has no status")?;
        let head_end = rest
            .find("\r\n\r\n")
            .ok_or("a batch response part has no end of headers")?;
        let head = &rest[..head_end];
        rest = &rest[head_end + 4..];
        let body_end = rest.find("\r\n--").unwrap_or(rest.len());
        let part_body = rest[..body_end].trim().to_owned();
        rest = &rest[body_end..];
        let header = |name: &str| {
            head.lines().find_map(|l| {
                let (n, v) = l.split_once(':')?;
                n.trim()
                    .eq_ignore_ascii_case(name)
                    .then(|| v.trim().to_owned())
            })
        };
        let content_id = header("Content-ID").and_then(|c| c.parse::<usize>().ok());
        let index = error_index(&part_body).or(content_id.and_then(|c| c.checked_sub(1)));
        parts.push(PartResponse {
            status,
            etag: header("ETag"),
            index,
            body: part_body,
        });
    }
    Ok(parts)
}

/// `3` from an error message `"3:The specified entity already exists."`.
fn error_index(body: &str) -> Option<usize> {
    let json: serde_json::Value = serde_json::from_str(body).ok()?;
    let message = json.pointer("/odata.error/message/value")?.as_str()?;
    let (n, _) = message.split_once(':')?;
    n.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_success_and_failure_answers() {
        let ok = "--batchresponse_1\r\nContent-Type: multipart/mixed; boundary=changesetresponse_2\r\n\r\n\
            --changesetresponse_2\r\nContent-Type: application/http\r\nContent-Transfer-Encoding: binary\r\n\r\n\
            HTTP/1.1 204 No Content\r\nContent-ID: 1\r\nETag: W/\"datetime'2026-01-01T00%3A00%3A00.0000001Z'\"\r\n\r\n\r\n\
            --changesetresponse_2\r\nContent-Type: application/http\r\nContent-Transfer-Encoding: binary\r\n\r\n\
            HTTP/1.1 204 No Content\r\nContent-ID: 2\r\n\r\n\r\n--changesetresponse_2--\r\n--batchresponse_1--\r\n";
        let parts = decode(ok).unwrap();
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[0].status, 204);
        assert_eq!(
            parts[0].etag.as_deref(),
            Some("W/\"datetime'2026-01-01T00%3A00%3A00.0000001Z'\"")
        );
        assert_eq!(parts[1].index, Some(1));
        let failed = "--batchresponse_1\r\n\
            HTTP/1.1 409 Conflict\r\nContent-ID: 1\r\nContent-Type: application/json\r\n\r\n\
            {\"odata.error\":{\"code\":\"EntityAlreadyExists\",\"message\":{\"lang\":\"en-US\",\"value\":\"4:The specified entity already exists.\"}}}\r\n\
            --batchresponse_1--\r\n";
        let parts = decode(failed).unwrap();
        assert_eq!((parts[0].status, parts[0].index), (409, Some(4)));
    }
}
