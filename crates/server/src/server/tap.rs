//! Counts what the server says, as it writes it: each CommandComplete
//! (a statement done, by its tag) and each ErrorResponse (by its SQLSTATE)
//! that leaves for the client, whichever path through pgwire sent it.
//! Only the few bytes of those messages' starts are kept; other messages
//! are skipped by their length.

use std::sync::Arc;

use super::metrics::Metrics;

/// Bytes of a message's body kept: a tag, or an error's fields up to its
/// code (pgwire writes severity, then code, before the text).
const KEPT: usize = 128;

/// The writer's side of one connection (see the module doc).
#[derive(Debug)]
pub(super) struct Tap {
    metrics: Arc<Metrics>,
    header: [u8; 5],
    have: usize,
    remaining: usize,
    body: Vec<u8>,
}

impl Tap {
    pub(super) fn new(metrics: Arc<Metrics>) -> Self {
        Self {
            metrics,
            header: [0; 5],
            have: 0,
            remaining: 0,
            body: Vec::new(),
        }
    }

    /// Bytes written to the client, in order.
    pub(super) fn written(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            if self.have < 5 {
                let n = (5 - self.have).min(bytes.len());
                self.header[self.have..self.have + n].copy_from_slice(&bytes[..n]);
                self.have += n;
                bytes = &bytes[n..];
                if self.have == 5 {
                    let len = u32::from_be_bytes([
                        self.header[1],
                        self.header[2],
                        self.header[3],
                        self.header[4],
                    ]);
                    self.remaining = (len as usize).saturating_sub(4);
                    self.body.clear();
                    if self.remaining == 0 {
                        self.done();
                    }
                }
                continue;
            }
            let n = self.remaining.min(bytes.len());
            if matches!(self.header[0], b'C' | b'E') && self.body.len() < KEPT {
                let keep = n.min(KEPT - self.body.len());
                self.body.extend_from_slice(&bytes[..keep]);
            }
            self.remaining -= n;
            bytes = &bytes[n..];
            if self.remaining == 0 {
                self.done();
            }
        }
    }

    fn done(&mut self) {
        match self.header[0] {
            b'C' => {
                let tag = self.body.split(|b| *b == 0).next().unwrap_or_default();
                self.metrics.completed(&String::from_utf8_lossy(tag));
            }
            b'E' => {
                // Fields: a type byte, then a NUL-terminated string.
                let mut fields = self.body.as_slice();
                while let Some((&kind, rest)) = fields.split_first() {
                    let Some(end) = rest.iter().position(|b| *b == 0) else {
                        break;
                    };
                    if kind == b'C' {
                        self.metrics.error(&String::from_utf8_lossy(&rest[..end]));
                        break;
                    }
                    fields = &rest[end + 1..];
                }
            }
            _ => {}
        }
        self.have = 0;
        self.body.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::MemoryStore;

    fn message(kind: u8, body: &[u8]) -> Vec<u8> {
        let mut m = vec![kind];
        m.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
        m.extend_from_slice(body);
        m
    }

    #[test]
    fn counts_tags_and_codes_across_split_writes() {
        let metrics = Arc::new(Metrics::new(Arc::new(MemoryStore::new()), None));
        let mut tap = Tap::new(metrics.clone());
        let mut bytes = message(b'D', &[0, 1, 0, 0, 0, 1, b'x']);
        bytes.extend(message(b'C', b"SELECT 1\0"));
        bytes.extend(message(b'E', b"SERROR\0VERROR\0C42P01\0Mno such table\0\0"));
        bytes.extend(message(b'Z', b"I"));
        bytes.extend(message(b'C', b"INSERT 0 2\0"));
        // One byte at a time: messages cut anywhere.
        for b in &bytes {
            tap.written(std::slice::from_ref(b));
        }
        let text = metrics.encode().expect("encode");
        assert!(
            text.contains("tablesql_statements_total{kind=\"select\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("tablesql_statements_total{kind=\"insert\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("tablesql_errors_total{sqlstate=\"42P01\"} 1"),
            "{text}"
        );
    }
}
