//! One connection: the simple and extended query protocols over a
//! [`Planner`], with session parameters, transactions and cursors.

use std::fmt::Debug;
use std::sync::{Arc, Mutex, OnceLock};

use async_trait::async_trait;
use datafusion::sql::sqlparser::ast::{CloseCursor, Statement};
use futures::{Sink, SinkExt};
use pgwire::api::portal::Portal;
use pgwire::api::query::{ExtendedQueryHandler, SimpleQueryHandler};
use pgwire::api::results::{
    DescribePortalResponse, DescribeStatementResponse, QueryResponse, Response, Tag,
};
use pgwire::api::stmt::{QueryParser, StoredStatement};
use pgwire::api::store::PortalStore;
use pgwire::api::{ClientInfo, ClientPortalStore};
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::PgWireBackendMessage;
use pgwire::messages::response::TransactionStatus;
use pgwire::messages::startup::ParameterStatus;

use super::cancel::{Guard, Probe, Registration, Registry};
use super::command::{self, Vars};
use super::plan::{Kind, Planner, Stmt, is_query};
use super::sqlstate::{IN_FAILED_TRANSACTION, error};

/// The query handler of one connection.
pub struct Session {
    planner: Arc<Planner>,
    registry: Arc<Registry>,
    registration: OnceLock<Registration>,
    vars: Arc<Mutex<Vars>>,
    /// Cursors declared WITHOUT HOLD, closed when their transaction ends.
    tx_cursors: Mutex<Vec<String>>,
    probe: Option<Probe>,
}

impl Session {
    pub fn new(planner: Planner, registry: Arc<Registry>, probe: Option<Probe>) -> Self {
        let vars = Arc::new(Mutex::new(Vars::default()));
        planner
            .ctx
            .register_udf(super::current_setting::udf(vars.clone()));
        Self {
            planner: Arc::new(planner),
            registry,
            registration: OnceLock::new(),
            vars,
            tx_cursors: Mutex::new(Vec::new()),
            probe,
        }
    }

    /// A statement's guard: the connection's cancel signal (registered on
    /// first use, once the handshake has given the connection its key) and
    /// the session's `statement_timeout`.
    fn guard<C: ClientInfo>(&self, client: &C) -> Guard {
        let registration = self.registration.get_or_init(|| {
            let (pid, key) = client.pid_and_secret_key();
            self.registry.register(pid, key)
        });
        let timeout = self.vars.lock().ok().and_then(|v| v.statement_timeout);
        registration.signal.guard(timeout, self.probe.clone())
    }

    fn vars(&self) -> PgWireResult<std::sync::MutexGuard<'_, Vars>> {
        self.vars
            .lock()
            .map_err(|_| super::plan::internal("session state poisoned"))
    }

    /// Runs one statement that is not a prepared query.
    async fn run<C>(&self, client: &mut C, statement: &Statement) -> PgWireResult<Response>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let status = client.transaction_status();
        let ends_transaction = matches!(
            statement,
            Statement::Commit { .. } | Statement::Rollback { .. }
        );
        if matches!(status, TransactionStatus::Error) && !ends_transaction {
            return Err(error(
                IN_FAILED_TRANSACTION,
                "current transaction is aborted, commands ignored until end of transaction block",
            ));
        }
        match statement {
            Statement::StartTransaction { .. } => Ok(Response::TransactionStart(Tag::new("BEGIN"))),
            Statement::Commit { .. } | Statement::Rollback { .. } => {
                self.close_tx_cursors(client)?;
                // A failed transaction ends as a rollback, as in PostgreSQL.
                let tag = match (statement, status) {
                    (Statement::Commit { .. }, TransactionStatus::Error) => "ROLLBACK",
                    (Statement::Commit { .. }, _) => "COMMIT",
                    _ => "ROLLBACK",
                };
                Ok(Response::TransactionEnd(Tag::new(tag)))
            }
            Statement::Set(_) => {
                let Some(target) = command::set_target(statement) else {
                    return Err(command::not_supported(statement));
                };
                let (name, value) = target?;
                if name.to_ascii_lowercase().starts_with("datafusion.") {
                    self.planner
                        .ctx
                        .sql(&statement.to_string())
                        .await
                        .map_err(|e| super::sqlstate::datafusion_error(&e))?;
                    return Ok(Response::Execution(Tag::new("SET")));
                }
                let report = self.vars()?.set(&name, &value)?;
                if let Some((name, value)) = report {
                    client
                        .feed(PgWireBackendMessage::ParameterStatus(ParameterStatus::new(
                            name, value,
                        )))
                        .await?;
                }
                Ok(Response::Execution(Tag::new("SET")))
            }
            Statement::ShowVariable { .. } => {
                let shown = command::show(&*self.vars()?, statement);
                match shown {
                    Some(r) => Ok(Response::Query(r?)),
                    None => Err(command::not_supported(statement)),
                }
            }
            Statement::Declare { stmts } => {
                let store = command::portals(client.portal_store())?;
                let Some(declare) = stmts.first() else {
                    return Err(command::not_supported(statement));
                };
                let (name, hold) = command::declare(&self.planner, store, declare).await?;
                if !hold && matches!(status, TransactionStatus::Transaction) {
                    if let Ok(mut names) = self.tx_cursors.lock() {
                        names.push(name);
                    }
                }
                Ok(Response::Execution(Tag::new("DECLARE CURSOR")))
            }
            Statement::Fetch {
                name, direction, ..
            } => {
                let count = command::fetch_count(direction)?;
                let guard = self.guard(client);
                let store = command::portals(client.portal_store())?;
                let rows = command::fetch(&self.planner, store, &name.value, count, guard).await?;
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
            Statement::Discard { .. } => Ok(Response::Execution(Tag::new("DISCARD ALL"))),
            Statement::Deallocate { name, .. } => {
                client.portal_store().rm_statement(&name.value);
                Ok(Response::Execution(Tag::new("DEALLOCATE")))
            }
            Statement::CreateTable(_) | Statement::Drop { .. } => {
                let in_tx = !matches!(status, TransactionStatus::Idle);
                command::ddl(&self.planner, statement, in_tx).await
            }
            s if is_query(s) => {
                let guard = self.guard(client);
                let rows = self.planner.query(s.clone(), guard).await?;
                Ok(Response::Query(rows))
            }
            other => Err(command::not_supported(other)),
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
        let fields = self.planner.get_result_schema(
            &cursor.statement.statement,
            Some(&cursor.result_column_format),
        )?;
        Ok(Some(fields))
    }
}

#[async_trait]
impl SimpleQueryHandler for Session {
    async fn do_query<C>(&self, client: &mut C, query: &str) -> PgWireResult<Vec<Response>>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let statements = self.planner.parse(query)?;
        let mut responses = Vec::with_capacity(statements.len());
        for statement in &statements {
            match self.run(client, statement).await {
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
    type QueryParser = Planner;

    fn query_parser(&self) -> Arc<Planner> {
        self.planner.clone()
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
        match &portal.statement.statement.kind {
            Kind::Query { .. } => {
                if matches!(client.transaction_status(), TransactionStatus::Error) {
                    return Err(error(
                        IN_FAILED_TRANSACTION,
                        "current transaction is aborted, commands ignored until end of transaction block",
                    ));
                }
                let guard = self.guard(client);
                let rows: QueryResponse = self.planner.execute(portal, guard).await?;
                Ok(Response::Query(rows))
            }
            Kind::Command(statement) => self.run(client, statement).await,
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
        let params = self.planner.get_parameter_types(&target.statement)?;
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
            None => self.planner.get_result_schema(&target.statement, None)?,
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
            None => self.planner.get_result_schema(
                &target.statement.statement,
                Some(&target.result_column_format),
            )?,
        };
        Ok(DescribePortalResponse::new(fields))
    }
}
