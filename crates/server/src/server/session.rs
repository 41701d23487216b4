//! One connection: the simple and extended query protocols over a
//! [`Runner`], with session parameters, transactions and cursors.

use std::fmt::Debug;
use std::sync::{Arc, Mutex, OnceLock};

use async_trait::async_trait;
use datafusion::sql::sqlparser::ast::{CloseCursor, Statement};
use futures::{Sink, SinkExt};
use pgwire::api::copy::{send_copy_both_response, send_copy_in_response, send_copy_out_response};
use pgwire::api::portal::Portal;
use pgwire::api::portal::PortalExecutionState;
use pgwire::api::query::{
    ExtendedQueryHandler, SimpleQueryHandler, send_execution_response, send_query_response,
    send_ready_for_query,
};
use pgwire::api::results::{DescribePortalResponse, DescribeStatementResponse, Response, Tag};
use pgwire::api::stmt::{QueryParser, StoredStatement};
use pgwire::api::store::Entry;
use pgwire::api::store::PortalStore;
use pgwire::api::{ClientInfo, ClientPortalStore};
use pgwire::api::{DEFAULT_NAME, PgWireConnectionState};
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use pgwire::messages::PgWireBackendMessage;
use pgwire::messages::data::{NoData, RowDescription};
use pgwire::messages::extendedquery::{Describe, Execute, TARGET_TYPE_BYTE_PORTAL};
use pgwire::messages::response::{EmptyQueryResponse, TransactionStatus};
use pgwire::messages::simplequery::Query;
use pgwire::messages::startup::ParameterStatus;

use super::cancel::{Guard, Probe, Registration, Registry};
use super::command;
use super::plan::{Kind, Runner, Stmt, is_query, write_kind, writes};
use super::sqlstate::{
    FEATURE_NOT_SUPPORTED, NO_ACTIVE_TRANSACTION, engine_error, error, notice_code,
};
use crate::engine::{BlockChange, BlockStatus, Notice, Outcome};

/// The query handler of one connection.
pub struct Session {
    runner: Arc<Runner>,
    registry: Arc<Registry>,
    registration: OnceLock<Registration>,
    /// Cursors declared WITHOUT HOLD, closed when their transaction ends.
    tx_cursors: Mutex<Vec<String>>,
    copying: super::copying::Copying,
    probe: Option<Probe>,
}

impl Session {
    pub fn new(runner: Runner, registry: Arc<Registry>, probe: Option<Probe>) -> Self {
        Self {
            runner: Arc::new(runner),
            registry,
            registration: OnceLock::new(),
            tx_cursors: Mutex::new(Vec::new()),
            copying: Default::default(),
            probe,
        }
    }

    /// The connection's start, on its first statement (the handshake has
    /// given it its key by then): its cancel registration, and the
    /// parameters of its startup message (`application_name`,
    /// `options=-c statement_timeout=...`). A value SET would refuse is
    /// ignored here rather than failing the connection.
    fn start<C: ClientInfo>(&self, client: &C) -> &Registration {
        self.registration.get_or_init(|| {
            let session = &self.runner.session;
            for (name, value) in startup_parameters(client.metadata()) {
                let _ = session.set_parameter(&name, &value);
            }
            // pgwire tells the client its startup parameters itself.
            let _ = session.take_reported();
            let (pid, key) = client.pid_and_secret_key();
            self.registry.register(pid, key)
        })
    }

    /// A statement's guard: the connection's cancel signal and the session's
    /// `statement_timeout`.
    pub(super) fn runner(&self) -> &Runner {
        &self.runner
    }

    pub(super) fn copying(&self) -> &super::copying::Copying {
        &self.copying
    }

    pub(super) fn guard<C: ClientInfo>(&self, client: &C) -> Guard {
        let registration = self.start(client);
        let timeout = self.runner.session.statement_timeout();
        registration.signal.guard(timeout, self.probe.clone())
    }

    /// Sends the notices the session's last statement left (PostgreSQL sends
    /// them before the statement's rows).
    async fn send_notices<C>(&self, client: &mut C, extra: Vec<Notice>) -> PgWireResult<()>
    where
        C: Sink<PgWireBackendMessage> + Unpin + Send,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let left = self.runner.session.take_notices();
        for notice in extra.into_iter().chain(left) {
            let info = ErrorInfo::new(
                "NOTICE".to_owned(),
                notice_code(notice.kind).to_owned(),
                notice.text,
            );
            client
                .send(PgWireBackendMessage::NoticeResponse(info.into()))
                .await?;
        }
        Ok(())
    }

    /// The transaction status the client is told: the engine session's
    /// block (`engine::block`), the one authority on it.
    pub fn wire_status(&self) -> TransactionStatus {
        match self.runner.session.status() {
            BlockStatus::Idle => TransactionStatus::Idle,
            BlockStatus::InBlock => TransactionStatus::Transaction,
            BlockStatus::Failed => TransactionStatus::Error,
        }
    }

    /// The protocol answered an error the engine did not see (a Bind that
    /// does not fit, a broken-off stream): the session's block fails.
    pub fn statement_failed(&self) {
        self.runner.session.statement_failed();
    }

    /// Runs one statement that is not a prepared query; a failure fails the
    /// session's open block. `outer` is the portal that carries the
    /// statement's parameters, if it came through the extended protocol.
    async fn run<C>(
        &self,
        client: &mut C,
        statement: &Statement,
        outer: Option<&Portal<Stmt>>,
    ) -> PgWireResult<Response>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let done = self.translate(client, statement, outer).await;
        if done.is_err() {
            self.statement_failed();
        }
        done
    }

    /// Runs a statement through the engine session and translates its
    /// outcome into the protocol's answer.
    async fn through_session<C>(
        &self,
        client: &mut C,
        statement: &Statement,
    ) -> PgWireResult<Response>
    where
        C: ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send,
        C::PortalStore: PortalStore,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let outcome = self.runner.session.execute(statement.clone()).await;
        self.send_notices(client, Vec::new()).await?;
        // PostgreSQL reports a changed DateStyle, application_name, ...
        for (name, value) in self.runner.session.take_reported() {
            client
                .feed(PgWireBackendMessage::ParameterStatus(ParameterStatus::new(
                    name, value,
                )))
                .await?;
        }
        let outcome = outcome.map_err(|e| engine_error(&e))?;
        // A block's cursors (WITHOUT HOLD) end with it.
        if let Outcome::Block(BlockChange::Ended(_)) = &outcome {
            self.close_tx_cursors(client)?;
        }
        let tag = outcome.tag().map(|t| Tag::new(&t));
        Ok(match (outcome, tag) {
            (Outcome::Rows(rows), _) => Response::Query(super::plan::respond_stream(rows).await?),
            (Outcome::Block(BlockChange::Began), Some(tag)) => Response::TransactionStart(tag),
            (Outcome::Block(BlockChange::Ended(_)), Some(tag)) => Response::TransactionEnd(tag),
            (Outcome::Written { kind, rows }, _) => {
                let rows = usize::try_from(rows).unwrap_or(usize::MAX);
                Response::Execution(super::plan::write_tag(kind, rows)?)
            }
            (_, Some(tag)) => Response::Execution(tag),
            (_, None) => return Err(super::plan::internal("a command without a tag")),
        })
    }

    async fn translate<C>(
        &self,
        client: &mut C,
        statement: &Statement,
        outer: Option<&Portal<Stmt>>,
    ) -> PgWireResult<Response>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        self.runner
            .session
            .admit(statement)
            .map_err(|e| engine_error(&e))?;
        let status = self.runner.session.status();
        match statement {
            Statement::Copy { .. } => self.start_copy(client, statement).await,
            Statement::Declare { stmts } => {
                let store = command::portals(client.portal_store())?;
                let Some(declare) = stmts.first() else {
                    return Err(command::not_supported(statement));
                };
                if declare.hold != Some(true) && status != BlockStatus::InBlock {
                    return Err(error(
                        NO_ACTIVE_TRANSACTION,
                        "DECLARE CURSOR can only be used in transaction blocks (or WITH HOLD)",
                    ));
                }
                let (name, hold) = command::declare(&self.runner, store, declare, outer).await?;
                if !hold
                    && status == BlockStatus::InBlock
                    && let Ok(mut names) = self.tx_cursors.lock()
                {
                    names.push(name);
                }
                Ok(Response::Execution(Tag::new("DECLARE CURSOR")))
            }
            Statement::Fetch {
                name, direction, ..
            } => {
                let count = command::fetch_count(direction)?;
                let guard = self.guard(client);
                let store = command::portals(client.portal_store())?;
                let rows = command::fetch(&self.runner, store, &name.value, count, guard).await?;
                Ok(Response::Query(rows))
            }
            Statement::Close { cursor } => {
                let store = command::portals(client.portal_store())?;
                match cursor {
                    CloseCursor::All => store.clear_portals(),
                    CloseCursor::Specific { name } => {
                        command::cursor(store, &name.value)?;
                        store.rm_portal(&name.value);
                    }
                }
                Ok(Response::Execution(Tag::new("CLOSE CURSOR")))
            }
            // Poolers hand the connection to the next client after this.
            Statement::Discard { .. } => {
                self.runner
                    .session
                    .discard()
                    .map_err(|e| engine_error(&e))?;
                if let Ok(mut names) = self.tx_cursors.lock() {
                    names.clear();
                }
                let store = command::portals(client.portal_store())?;
                store.clear_portals();
                Ok(Response::Execution(Tag::new("DISCARD ALL")))
            }
            Statement::Deallocate { name, .. } => {
                client.portal_store().rm_statement(&name.value);
                Ok(Response::Execution(Tag::new("DEALLOCATE")))
            }
            s if is_query(s) => {
                let guard = self.guard(client);
                let rows = self.runner.query(s.clone(), guard).await;
                self.send_notices(client, Vec::new()).await?;
                Ok(Response::Query(rows?))
            }
            s if write_kind(s).is_some() => {
                let guard = self.guard(client);
                let done = self.runner.write_statement(s.clone(), guard).await;
                self.send_notices(client, Vec::new()).await?;
                done
            }
            // The rest is the engine session's: transaction control, DDL,
            // SET and SHOW, and its refusals.
            _ => self.through_session(client, statement).await,
        }
    }

    fn close_tx_cursors<C>(&self, client: &C) -> PgWireResult<()>
    where
        C: ClientPortalStore,
        C::PortalStore: PortalStore,
    {
        let names: Vec<String> = match self.tx_cursors.lock() {
            Ok(mut names) => names.drain(..).collect(),
            Err(_) => Vec::new(),
        };
        let store = command::portals(client.portal_store())?;
        for name in names {
            store.rm_portal(&name);
        }
        Ok(())
    }

    /// The row description of a FETCH: its cursor's.
    fn fetch_fields<C>(
        &self,
        client: &C,
        statement: &Stmt,
    ) -> PgWireResult<Option<Vec<pgwire::api::results::FieldInfo>>>
    where
        C: ClientPortalStore,
        C::PortalStore: PortalStore,
    {
        let Kind::Command(s) = &statement.kind else {
            return Ok(None);
        };
        let Statement::Fetch { name, .. } = s.as_ref() else {
            return Ok(None);
        };
        let store = command::portals(client.portal_store())?;
        let cursor = command::cursor(store, &name.value)?;
        let fields = self.runner.get_result_schema(
            &cursor.statement.statement,
            Some(&cursor.result_column_format),
        )?;
        Ok(Some(fields))
    }
}

#[async_trait]
impl SimpleQueryHandler for Session {
    /// pgwire's own, but for the status the client is told at the end:
    /// the engine session's (see `wire_status`), which a `ROLLBACK TO`
    /// in a failed block makes good again where pgwire's would stay failed.
    async fn on_query<C>(&self, client: &mut C, query: Query) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        if !matches!(client.state(), PgWireConnectionState::ReadyForQuery) {
            return Err(PgWireError::NotReadyForQuery);
        }
        client.set_state(PgWireConnectionState::QueryInProgress);
        let empty = query.query.chars().all(|c| c == ';' || c.is_whitespace());
        if empty {
            client
                .feed(PgWireBackendMessage::EmptyQueryResponse(
                    EmptyQueryResponse::new(),
                ))
                .await?;
        } else {
            for response in SimpleQueryHandler::do_query(self, client, &query.query).await? {
                match response {
                    Response::EmptyQuery => {
                        client
                            .feed(PgWireBackendMessage::EmptyQueryResponse(
                                EmptyQueryResponse::new(),
                            ))
                            .await?;
                    }
                    Response::Query(rows) => send_query_response(client, rows, true).await?,
                    Response::Execution(tag)
                    | Response::TransactionStart(tag)
                    | Response::TransactionEnd(tag) => send_execution_response(client, tag).await?,
                    Response::Error(e) => {
                        client
                            .feed(PgWireBackendMessage::ErrorResponse((*e).into()))
                            .await?;
                    }
                    Response::CopyIn(copy) => {
                        send_copy_in_response(client, copy).await?;
                        client.set_state(PgWireConnectionState::CopyInProgress(false));
                    }
                    Response::CopyOut(copy) => send_copy_out_response(client, copy).await?,
                    Response::CopyBoth(copy) => {
                        send_copy_both_response(client, copy).await?;
                        client.set_state(PgWireConnectionState::CopyInProgress(false));
                    }
                }
            }
        }
        let status = self.wire_status();
        client.set_transaction_status(status);
        // A COPY FROM in progress answers ReadyForQuery at its end.
        if !matches!(client.state(), PgWireConnectionState::CopyInProgress(_)) {
            client.set_state(PgWireConnectionState::ReadyForQuery);
            send_ready_for_query(client, status).await?;
        }
        Ok(())
    }

    async fn do_query<C>(&self, client: &mut C, query: &str) -> PgWireResult<Vec<Response>>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        self.start(client);
        let statements = self.runner.parse(query)?;
        let mut responses = Vec::with_capacity(statements.len());
        // The client sends COPY FROM's data after the whole string's
        // answers; a statement after it would run before the data.
        let copy_in_before_end = statements
            .iter()
            .rev()
            .skip(1)
            .any(|s| matches!(s, Statement::Copy { to: false, .. }));
        if copy_in_before_end {
            return Err(error(
                FEATURE_NOT_SUPPORTED,
                "COPY FROM STDIN must be the last statement of its query string",
            ));
        }
        for statement in &statements {
            // Rows of earlier SELECTs are encoded lazily, as the client reads
            // them; before anything but a query that only reads (a write,
            // DDL, the end of a block or a return to a savepoint, whose
            // buffer the rows were read through) they are read to the end,
            // so they show the data as it was when they ran.
            if writes(statement) || !is_query(statement) {
                let mut failed = false;
                for r in responses.iter_mut() {
                    match r {
                        Response::Query(q) => {
                            let rows: Vec<_> = futures::StreamExt::collect(&mut q.data_rows).await;
                            failed |= rows.iter().any(Result::is_err);
                            q.data_rows = Box::pin(futures::stream::iter(rows));
                        }
                        Response::CopyOut(c) => {
                            let data: Vec<_> =
                                futures::StreamExt::collect(&mut c.data_stream).await;
                            failed |= data.iter().any(Result::is_err);
                            c.data_stream = Box::pin(futures::stream::iter(data));
                        }
                        _ => {}
                    }
                }
                // An earlier statement failed while its rows were read: it
                // is answered with its error, and nothing after it runs (a
                // COMMIT after it must not commit).
                if failed {
                    self.statement_failed();
                    break;
                }
            }
            match self.run(client, statement, None).await {
                Ok(r) => responses.push(r),
                // Statements before the failing one keep their results; the
                // rest do not run, as in PostgreSQL.
                Err(e) if responses.is_empty() => return Err(e),
                Err(e) => {
                    responses.push(Response::Error(Box::new(e.into())));
                    break;
                }
            }
        }
        Ok(responses)
    }
}

#[async_trait]
impl ExtendedQueryHandler for Session {
    type Statement = Stmt;
    type QueryParser = Runner;

    fn query_parser(&self) -> Arc<Runner> {
        self.runner.clone()
    }

    /// A query's portal is described from the description its statement
    /// keeps (`server::row::Descriptions`), without the copy of it that
    /// pgwire's `DescribePortalResponse` takes: a prepared query's client
    /// (pgbench, libpq's `PQsendQueryPrepared`) describes its portal at
    /// every run. Anything else takes pgwire's path.
    async fn on_describe<C>(&self, client: &mut C, message: Describe) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Stmt>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let name = message.name.as_deref().unwrap_or(DEFAULT_NAME);
        if message.target_type == TARGET_TYPE_BYTE_PORTAL
            && let Some(Entry::Value(portal)) = client.portal_store().get_portal(name)
            && let Kind::Query {
                prepared,
                write: None,
                descriptions,
                ..
            } = &portal.statement.statement.kind
        {
            let fields = descriptions.of(
                &prepared.schema(),
                &portal.result_column_format,
                portal.statement.statement.catalog,
            )?;
            // As pgwire's `send_describe_response`: no columns, no data.
            let answer = if fields.is_empty() {
                PgWireBackendMessage::NoData(NoData::new())
            } else {
                PgWireBackendMessage::RowDescription(RowDescription::new(
                    fields.iter().map(Into::into).collect(),
                ))
            };
            client.send(answer).await?;
            return Ok(());
        }
        self._on_describe(client, message).await
    }

    /// pgwire answers an Execute without a row limit by collecting the whole
    /// result first; a query's rows are streamed instead, so memory stays
    /// bounded whatever the result size (tokio-postgres, pgjdbc's default
    /// fetch size, pgbench). Limited Executes and commands take pgwire's path.
    async fn on_execute<C>(&self, client: &mut C, message: Execute) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Stmt>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        // Every Execute is a statement of its own for cancels, also one that
        // resumes a portal's stream (a driver's fetch size).
        self.start(client).signal.next_statement();
        let name = message.name.as_deref().unwrap_or(DEFAULT_NAME);
        let portal = match client.portal_store().get_portal(name) {
            Some(Entry::Value(p)) => p,
            _ => return self._on_execute(client, message).await,
        };
        let fresh = matches!(*portal.state().lock().await, PortalExecutionState::Initial);
        let query = matches!(
            portal.statement.statement.kind,
            Kind::Query { write: None, .. }
        );
        if message.max_rows != 0 || !fresh || !query {
            return self._on_execute(client, message).await;
        }
        if !matches!(client.state(), PgWireConnectionState::ReadyForQuery) {
            return Err(PgWireError::NotReadyForQuery);
        }
        client.set_state(PgWireConnectionState::QueryInProgress);
        let result = match ExtendedQueryHandler::do_query(self, client, &portal, 0).await {
            Ok(Response::Query(rows)) => send_query_response(client, rows, false).await,
            Ok(_) => Err(super::plan::internal("a query answered without rows")),
            Err(e) => Err(e),
        };
        *portal.state().lock().await = PortalExecutionState::Finished;
        client.set_state(PgWireConnectionState::ReadyForQuery);
        result
    }

    async fn do_query<C>(
        &self,
        client: &mut C,
        portal: &Portal<Stmt>,
        _max_rows: usize,
    ) -> PgWireResult<Response>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Stmt>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        self.start(client);
        match &portal.statement.statement.kind {
            Kind::Query { write, .. } => {
                // The paths a point read does not take are boxed (this
                // write, the command below, the general plan in
                // `Runner::bound`): async_trait moves this whole future
                // into a box at every Execute, and it is as large as its
                // largest path.
                if write.is_some() {
                    let guard = self.guard(client);
                    let done = Box::pin(self.runner.execute_write(portal, guard)).await;
                    self.send_notices(client, Vec::new()).await?;
                    return done;
                }
                let guard = self.guard(client);
                let rows = self.runner.execute(portal, guard).await;
                self.send_notices(client, Vec::new()).await?;
                Ok(Response::Query(rows?))
            }
            Kind::Command(statement) => Box::pin(self.run(client, statement, Some(portal))).await,
        }
    }

    async fn do_describe_statement<C>(
        &self,
        client: &mut C,
        target: &StoredStatement<Stmt>,
    ) -> PgWireResult<DescribeStatementResponse>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Stmt>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let params = self.runner.get_parameter_types(&target.statement)?;
        let params = (0..params.len().max(target.parameter_types.len()))
            .map(|i| {
                target
                    .parameter_types
                    .get(i)
                    .cloned()
                    .flatten()
                    .or_else(|| params.get(i).cloned())
                    .unwrap_or(pgwire::api::Type::UNKNOWN)
            })
            .collect();
        let fields = match self.fetch_fields(client, &target.statement)? {
            Some(f) => f,
            None => self.runner.get_result_schema(&target.statement, None)?,
        };
        Ok(DescribeStatementResponse::new(params, fields))
    }

    async fn do_describe_portal<C>(
        &self,
        client: &mut C,
        target: &Portal<Stmt>,
    ) -> PgWireResult<DescribePortalResponse>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Stmt>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let fields = match self.fetch_fields(client, &target.statement.statement)? {
            Some(f) => f,
            None => self.runner.get_result_schema(
                &target.statement.statement,
                Some(&target.result_column_format),
            )?,
        };
        Ok(DescribePortalResponse::new(fields))
    }
}

/// Session parameters of a startup message: plain keys, and `-c name=value`
/// or `--name=value` in `options`.
fn startup_parameters(
    metadata: &std::collections::HashMap<String, String>,
) -> Vec<(String, String)> {
    let mut found = Vec::new();
    for (key, value) in metadata {
        match key.as_str() {
            "user" | "database" | "replication" => {}
            "options" => {
                let mut words = value.split_whitespace();
                while let Some(word) = words.next() {
                    let setting = match word {
                        "-c" => words.next(),
                        w => w.strip_prefix("--").or_else(|| w.strip_prefix("-c")),
                    };
                    if let Some((name, v)) = setting.and_then(|s| s.split_once('=')) {
                        found.push((name.replace('-', "_"), v.to_owned()));
                    }
                }
            }
            _ => found.push((key.clone(), value.clone())),
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn startup_options_become_parameters() {
        let metadata = [
            ("user", "me"),
            ("application_name", "psql"),
            ("options", "-c statement_timeout=5s --search-path=raw"),
        ]
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
        let mut found = startup_parameters(&metadata);
        found.sort();
        assert_eq!(
            found,
            [
                ("application_name".to_owned(), "psql".to_owned()),
                ("search_path".to_owned(), "raw".to_owned()),
                ("statement_timeout".to_owned(), "5s".to_owned()),
            ]
        );
    }
}
