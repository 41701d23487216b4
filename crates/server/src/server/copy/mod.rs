//! `COPY ... TO STDOUT` and `COPY ... FROM STDIN` over the wire, so that
//! psql's `\copy` works both ways. The statement and the data are read in
//! `load::copy`; here they become the copy protocol's messages: COPY TO's
//! rows one CopyData each, COPY FROM's CopyData pieces into the
//! [`CopyIn`], each under the statement's cancel and timeout. As in
//! PostgreSQL, after a bad row the rest of the data is read and dropped,
//! and the error answers the client's end of data.

use std::sync::Arc;

use bytes::Bytes;
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use futures::{Stream, StreamExt};
use pgwire::api::results::CopyResponse;
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::copy::CopyData;

use super::cancel::Guard;
use super::sqlstate::{copy_error, error};
use crate::engine::Session;
use crate::load::copy::{self, CopyIn};
use crate::load::format::CopyFormat;

/// The rows of a query as COPY data: a CSV header (or binary's signature)
/// first, then a CopyData per row; pgwire ends binary data with its
/// trailer. Each batch's rows are written into one buffer, and each row's
/// CopyData is a slice of it: no allocation per row or value.
pub fn copy_out(
    schema: SchemaRef,
    batches: impl Stream<Item = PgWireResult<RecordBatch>> + Send + 'static,
    format: CopyFormat,
) -> CopyResponse {
    let columns = schema.fields().len();
    let binary = i8::from(format.binary);
    let header = Arc::new(std::sync::Mutex::new(copy::header(&schema, &format)));
    let header_left = header.clone();
    let mut ends = Vec::new();
    let rows = batches.flat_map(move |batch| {
        let mut text = Vec::new();
        ends.clear();
        let encoded = batch.and_then(|b| {
            // The header goes with the first row: pgwire counts one row
            // per CopyData in the command tag.
            if b.num_rows() > 0
                && let Some(h) = header.lock().ok().and_then(|mut h| h.take())
            {
                text.extend_from_slice(&h);
            }
            copy::encode_into(&b, &format, &mut text, &mut ends)
                .map_err(|e| error(super::sqlstate::INTERNAL_ERROR, e.to_string()))
        });
        let lines: Vec<PgWireResult<CopyData>> = match encoded {
            Ok(()) => {
                let text = Bytes::from(text);
                let starts = std::iter::once(0).chain(ends.iter().copied());
                starts
                    .zip(&ends)
                    .map(|(start, &end)| Ok(CopyData::new(text.slice(start..end))))
                    .collect()
            }
            Err(e) => vec![Err(e)],
        };
        futures::stream::iter(lines)
    });
    // An empty result still has its header (counted as a row in the tag:
    // pgwire counts CopyData messages).
    let rows = rows.chain(futures::stream::iter(std::iter::from_fn(move || {
        header_left
            .lock()
            .ok()
            .and_then(|mut h| h.take())
            .map(|h| Ok(CopyData::new(Bytes::from(h))))
    })));
    CopyResponse::new(binary, columns, rows)
}

/// A COPY FROM STDIN in progress on a connection.
pub struct WireCopyIn {
    copy: Box<CopyIn>,
    /// The statement's cancel and timeout, over every piece's write.
    guard: Guard,
    /// What stopped the copy; the rest of the data is dropped.
    failed: Option<PgWireError>,
}

impl WireCopyIn {
    /// A copy whose data is about to come, under the statement's `guard`.
    pub fn new(copy: Box<CopyIn>, guard: Guard) -> Self {
        Self {
            copy,
            guard,
            failed: None,
        }
    }

    /// The number of columns the data carries.
    pub fn width(&self) -> usize {
        self.copy.width()
    }

    /// Rows written so far.
    pub fn written(&self) -> u64 {
        self.copy.written()
    }

    /// Whether the data comes in binary COPY's format.
    pub fn binary(&self) -> bool {
        self.copy.binary()
    }

    /// Takes a CopyData message's bytes; after an error they are dropped.
    pub async fn take(&mut self, session: &Session, data: &[u8]) {
        if self.failed.is_some() {
            return;
        }
        let copy = &mut self.copy;
        let taken = self
            .guard
            .run(async { copy.take(session, data).await.map_err(|e| copy_error(&e)) })
            .await;
        if let Err(e) = taken {
            self.failed = Some(e);
        }
    }

    /// The client's end of data: the number of rows written, or the error
    /// that stopped the copy.
    pub async fn finish(&mut self, session: &Session) -> PgWireResult<u64> {
        if let Some(e) = self.failed.take() {
            return Err(e);
        }
        let copy = &mut self.copy;
        self.guard
            .run(async { copy.finish(session).await.map_err(|e| copy_error(&e)) })
            .await
    }
}
