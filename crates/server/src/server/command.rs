//! Statements that are not queries and are the wire's own: cursors
//! (DECLARE, FETCH, CLOSE, which are protocol portals), the row description
//! of a SHOW before it runs, and clear refusals of what the store cannot do.

use std::sync::Arc;

use datafusion::sql::sqlparser::ast::{Declare, FetchDirection, Statement};
use pgwire::api::Type;
use pgwire::api::portal::{Format, Portal};
use pgwire::api::results::{FieldFormat, FieldInfo, QueryResponse};
use pgwire::api::stmt::StoredStatement;
use pgwire::api::store::{Entry, MemPortalStore, PortalStore};
use pgwire::error::PgWireResult;
use pgwire::messages::extendedquery::Bind;

use super::cancel::Guard;
use super::plan::{Runner, Stmt};
use super::sqlstate::{DUPLICATE_CURSOR, FEATURE_NOT_SUPPORTED, INVALID_CURSOR_NAME, error};
use crate::engine::Session;

/// The row description of a command known before it runs (SHOW); cursors
/// are described from their portal instead.
pub fn result_fields(statement: &Statement) -> PgWireResult<Vec<FieldInfo>> {
    if let Some(columns) = Session::shown_columns(statement) {
        return Ok(columns.iter().map(|c| text_field(c)).collect());
    }
    Ok(match statement {
        // The engine's settings: `tablesql.*` in a column of its name,
        // DataFusion's own as its SHOW answers (`name`, `value`).
        Statement::ShowVariable { variable } => {
            let name = variable
                .iter()
                .map(|i| i.value.to_ascii_lowercase())
                .collect::<Vec<_>>()
                .join(".");
            if name.starts_with("datafusion.") {
                vec![text_field("name"), text_field("value")]
            } else {
                vec![text_field(&name)]
            }
        }
        _ => Vec::new(),
    })
}

fn text_field(name: &str) -> FieldInfo {
    FieldInfo::new(name.to_owned(), None, None, Type::TEXT, FieldFormat::Text)
}

/// The portal store of the connection, typed. pgwire hands the simple-query
/// handler an untyped store; this connection's is always ours.
pub fn portals<S: PortalStore>(store: &S) -> PgWireResult<&MemPortalStore<Stmt>> {
    store
        .as_any()
        .downcast_ref::<MemPortalStore<Stmt>>()
        .ok_or_else(|| super::plan::internal("unexpected portal store"))
}

/// `DECLARE name CURSOR FOR query`: the cursor is a protocol-level portal of
/// that name, so clients can also Describe it (psycopg's named cursors do).
/// With `outer` (DECLARE through the extended protocol, as psycopg sends it),
/// the cursor's query is bound to the values the client bound to DECLARE.
pub async fn declare(
    runner: &Runner,
    store: &MemPortalStore<Stmt>,
    declare: &Declare,
    outer: Option<&Portal<Stmt>>,
) -> PgWireResult<(String, bool)> {
    let (Some(name), Some(query)) = (declare.names.first(), declare.for_query.as_ref()) else {
        return Err(error(
            FEATURE_NOT_SUPPORTED,
            "only DECLARE name CURSOR FOR query is supported",
        ));
    };
    if declare.scroll == Some(true) {
        return Err(error(
            FEATURE_NOT_SUPPORTED,
            "cursors are forward-only: SCROLL is not supported",
        ));
    }
    let name = name.value.clone();
    if matches!(store.get_portal(&name), Some(Entry::Value(_))) {
        return Err(error(
            DUPLICATE_CURSOR,
            format!("cursor \"{name}\" already exists"),
        ));
    }
    let statement = Statement::Query(query.clone());
    let prepared = runner.prepare(&statement.to_string(), statement).await?;
    let (types, formats, values) = match outer {
        Some(p) => (
            p.statement.parameter_types.clone(),
            format_codes(&p.parameter_format),
            p.parameters.clone(),
        ),
        None => (vec![], vec![], vec![]),
    };
    let stored = StoredStatement::new(name.clone(), Arc::new(prepared), types);
    let bind = Bind::new(Some(name.clone()), None, formats, values, vec![]);
    let portal = Portal::try_new(&bind, Arc::new(stored))?;
    store.put_portal(Arc::new(portal));
    Ok((name, declare.hold == Some(true)))
}

fn format_codes(format: &Format) -> Vec<i16> {
    match format {
        Format::UnifiedText => vec![],
        Format::UnifiedBinary => vec![1],
        Format::Individual(codes) => codes.clone(),
    }
}

/// How many rows a FETCH asks for; 0 means all that remain.
pub fn fetch_count(direction: &FetchDirection) -> PgWireResult<usize> {
    let n = |v: &dyn std::fmt::Display| {
        v.to_string().parse::<usize>().map_err(|_| {
            error(
                FEATURE_NOT_SUPPORTED,
                format!("FETCH count {v} is not supported (cursors are forward-only)"),
            )
        })
    };
    match direction {
        FetchDirection::Next => Ok(1),
        FetchDirection::Forward { limit: None } => Ok(1),
        FetchDirection::Forward { limit: Some(l) } | FetchDirection::Count { limit: l } => {
            match n(l)? {
                // FETCH 0 would re-read the current row; a forward-only
                // cursor has none to re-read.
                0 => Err(error(FEATURE_NOT_SUPPORTED, "FETCH 0 is not supported")),
                k => Ok(k),
            }
        }
        FetchDirection::All | FetchDirection::ForwardAll => Ok(0),
        other => Err(error(
            FEATURE_NOT_SUPPORTED,
            format!("FETCH {other} is not supported: cursors are forward-only"),
        )),
    }
}

/// `FETCH n FROM name`: continues the cursor's stream where it stopped.
pub async fn fetch(
    runner: &Runner,
    store: &MemPortalStore<Stmt>,
    name: &str,
    count: usize,
    guard: Guard,
) -> PgWireResult<QueryResponse> {
    let portal = cursor(store, name)?;
    let started = !matches!(
        *portal.state().lock().await,
        pgwire::api::portal::PortalExecutionState::Initial
    );
    if !started {
        let response = runner.execute_cursor(&portal, guard).await?;
        portal.start(response).await;
    }
    let mut fetched = portal.fetch(count).await?.response;
    fetched.set_command_tag("FETCH");
    Ok(fetched)
}

/// The open cursor of that name.
pub fn cursor(store: &MemPortalStore<Stmt>, name: &str) -> PgWireResult<Arc<Portal<Stmt>>> {
    match store.get_portal(name) {
        Some(Entry::Value(p)) => Ok(p),
        _ => Err(error(
            INVALID_CURSOR_NAME,
            format!("cursor \"{name}\" does not exist"),
        )),
    }
}

/// The refusal for statements tablesql does not run.
pub fn not_supported(statement: &Statement) -> pgwire::error::PgWireError {
    let text = statement.to_string();
    let head: String = text
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ");
    error(
        FEATURE_NOT_SUPPORTED,
        format!("statement not supported: {head}"),
    )
}
