//! The session's side of COPY (`copy/`): starting one from its statement,
//! and pgwire's copy-in messages.

use std::fmt::Debug;
use std::sync::Mutex;

use async_trait::async_trait;
use futures::Sink;
use pgwire::api::ClientInfo;
use pgwire::api::copy::CopyHandler;
use pgwire::api::results::{CopyResponse, Response, Tag};
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::PgWireBackendMessage;
use pgwire::messages::copy::{CopyData, CopyDone, CopyFail};

use super::copy::{self, WireCopyIn};
use super::session::Session;
use super::sqlstate::{QUERY_CANCELED, copy_error, error};
use crate::load::copy::Copy;

/// The COPY FROM a connection is in, if any.
#[derive(Default)]
pub struct Copying(Mutex<Option<Box<WireCopyIn>>>);

impl Copying {
    fn take(&self) -> Option<Box<WireCopyIn>> {
        self.0.lock().ok().and_then(|mut c| c.take())
    }

    /// The COPY FROM that a `message` belongs to, taken out while it runs.
    fn running(&self, message: &str) -> PgWireResult<Box<WireCopyIn>> {
        self.take().ok_or_else(|| {
            error(
                super::sqlstate::PROTOCOL_VIOLATION,
                format!("{message} outside COPY FROM"),
            )
        })
    }

    fn put(&self, state: Box<WireCopyIn>) {
        if let Ok(mut c) = self.0.lock() {
            *c = Some(state);
        }
    }
}

impl Session {
    /// Starts a COPY statement: the rows of COPY TO, or the CopyIn answer
    /// of COPY FROM, whose data then comes through [`CopyHandler`].
    pub(super) async fn start_copy<C: ClientInfo>(
        &self,
        client: &C,
        statement: &datafusion::sql::sqlparser::ast::Statement,
    ) -> PgWireResult<Response> {
        let runner = self.runner();
        let planned = crate::load::copy::plan(&runner.session, statement).await;
        match planned.map_err(|e| copy_error(&e))? {
            Copy::Out { query, format } => {
                let (schema, batches) = runner.batches(query, self.guard(client)).await?;
                crate::load::copy::check_out(&schema, &format).map_err(|e| copy_error(&e))?;
                Ok(Response::CopyOut(copy::copy_out(schema, batches, format)))
            }
            Copy::In(state) => {
                let state = WireCopyIn::new(state, self.guard(client));
                let (width, binary) = (state.width(), state.binary());
                self.copying().put(Box::new(state));
                // The format tells the client how to send: psql reads a
                // binary file whole only when told the copy is binary.
                Ok(Response::CopyIn(CopyResponse::new(
                    i8::from(binary),
                    width,
                    futures::stream::empty(),
                )))
            }
        }
    }
}

#[async_trait]
impl CopyHandler for Session {
    async fn on_copy_data<C>(&self, _client: &mut C, data: CopyData) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let mut state = self.copying().running("CopyData")?;
        state.take(&self.runner().session, &data.data).await;
        self.copying().put(state);
        Ok(())
    }

    async fn on_copy_done<C>(&self, client: &mut C, _done: CopyDone) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let mut state = self.copying().running("CopyDone")?;
        let rows = state.finish(&self.runner().session).await?;
        let tag = Tag::new("COPY").with_rows(usize::try_from(rows).unwrap_or(usize::MAX));
        futures::SinkExt::send(client, PgWireBackendMessage::CommandComplete(tag.into())).await?;
        Ok(())
    }

    async fn on_copy_fail<C>(&self, _client: &mut C, fail: CopyFail) -> PgWireError
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let written = self.copying().take().map_or(0, |s| s.written());
        error(
            QUERY_CANCELED,
            format!(
                "COPY from stdin failed: {} ({written} rows were written before it)",
                fail.message
            ),
        )
    }
}
