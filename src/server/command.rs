//! Statements that are not queries: session parameters (SET, SHOW), cursors
//! (DECLARE, FETCH, CLOSE), the catalog DDL, and clear refusals of what the
//! store cannot do.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use datafusion::arrow::array::{ArrayRef, RecordBatch, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::sql::sqlparser::ast::{
    Declare, Expr, FetchDirection, Set, Statement, TransactionMode, Value,
};
use pgwire::api::Type;
use pgwire::api::portal::{Format, Portal};
use pgwire::api::results::{FieldFormat, FieldInfo, QueryResponse};
use pgwire::api::stmt::StoredStatement;
use pgwire::api::store::{Entry, MemPortalStore, PortalStore};
use pgwire::error::PgWireResult;
use pgwire::messages::extendedquery::Bind;

use super::cancel::Guard;
use super::plan::{Runner, Stmt, result_fields as plan_fields};
use super::sqlstate::{
    CANT_CHANGE_RUNTIME_PARAM, DUPLICATE_CURSOR, FEATURE_NOT_SUPPORTED, INVALID_CURSOR_NAME,
    INVALID_PARAMETER_VALUE, UNDEFINED_OBJECT, engine_error, error,
};
use crate::engine::{PG_VERSION, PG_VERSION_NUM};

/// Session parameters, as `SET` leaves them and `SHOW` reads them.
#[derive(Debug)]
pub struct Vars {
    values: BTreeMap<String, String>,
    pub statement_timeout: Option<Duration>,
}

/// Parameters a client is told about when they change (PostgreSQL's
/// GUC_REPORT set).
const REPORTED: &[(&str, &str)] = &[
    ("application_name", "application_name"),
    ("client_encoding", "client_encoding"),
    ("datestyle", "DateStyle"),
    ("intervalstyle", "IntervalStyle"),
    ("timezone", "TimeZone"),
    ("search_path", "search_path"),
    ("standard_conforming_strings", "standard_conforming_strings"),
];

/// Parameters a client may read but not change.
const READ_ONLY: &[&str] = &[
    "server_version",
    "server_version_num",
    "server_encoding",
    "integer_datetimes",
    "max_identifier_length",
    "is_superuser",
    "max_index_keys",
    "block_size",
];

impl Default for Vars {
    fn default() -> Self {
        let values = [
            ("application_name", ""),
            ("client_encoding", "UTF8"),
            ("datestyle", "ISO, MDY"),
            ("intervalstyle", "postgres"),
            ("timezone", "UTC"),
            ("search_path", "public"),
            ("standard_conforming_strings", "on"),
            ("extra_float_digits", "1"),
            ("bytea_output", "hex"),
            ("lc_messages", "C"),
            ("server_version", PG_VERSION),
            ("server_version_num", PG_VERSION_NUM),
            ("server_encoding", "UTF8"),
            ("integer_datetimes", "on"),
            ("max_identifier_length", "63"),
            ("is_superuser", "on"),
            // PostgreSQL's compiled-in limits, which pgJDBC reads.
            ("max_index_keys", "32"),
            ("block_size", "8192"),
            ("statement_timeout", "0"),
            // No JIT compiler here; asyncpg turns it off on connect.
            ("jit", "off"),
            // Each read sees the entities committed when it reads (and a
            // transaction block's own buffered writes): read committed.
            ("transaction_isolation", "read committed"),
            ("default_transaction_isolation", "read committed"),
            ("default_transaction_read_only", "off"),
            ("transaction_read_only", "off"),
        ];
        Self {
            values: values
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            statement_timeout: None,
        }
    }
}

impl Vars {
    /// Sets a parameter; returns the name and value to report, if any.
    pub fn set(&mut self, name: &str, value: &str) -> PgWireResult<Option<(String, String)>> {
        let name = name.to_ascii_lowercase();
        if READ_ONLY.contains(&name.as_str()) {
            return Err(error(
                CANT_CHANGE_RUNTIME_PARAM,
                format!("parameter \"{name}\" cannot be changed"),
            ));
        }
        let value = match name.as_str() {
            "statement_timeout" => {
                let t = parse_duration_ms(value)?;
                self.statement_timeout = (t > 0).then(|| Duration::from_millis(t));
                t.to_string()
            }
            "client_encoding" => {
                let v = value.to_ascii_uppercase().replace('-', "");
                if v != "UTF8" && v != "UNICODE" {
                    return Err(error(
                        INVALID_PARAMETER_VALUE,
                        format!("client_encoding {value:?} is not supported: tablesql speaks UTF8"),
                    ));
                }
                "UTF8".to_owned()
            }
            _ => value.to_owned(),
        };
        self.values.insert(name.clone(), value.clone());
        Ok(REPORTED
            .iter()
            .find(|(lower, _)| *lower == name)
            .map(|(_, shown)| ((*shown).to_owned(), value)))
    }

    pub fn get(&self, name: &str) -> PgWireResult<&str> {
        self.values
            .get(&name.to_ascii_lowercase())
            .map(String::as_str)
            .ok_or_else(|| {
                error(
                    UNDEFINED_OBJECT,
                    format!("unrecognized configuration parameter \"{name}\""),
                )
            })
    }

    fn all(&self) -> impl Iterator<Item = (&String, &String)> {
        self.values.iter()
    }

    /// The parameters every session starts with, in name order: the rows
    /// of `pg_settings`.
    pub fn default_names() -> Vec<String> {
        Self::default().values.into_keys().collect()
    }
}

/// `statement_timeout` values: milliseconds, or a number with a unit.
fn parse_duration_ms(value: &str) -> PgWireResult<u64> {
    let v = value.trim().to_ascii_lowercase();
    let split = v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len());
    let (digits, unit) = v.split_at(split);
    let n: u64 = digits.parse().map_err(|_| bad_timeout(value))?;
    let factor = match unit.trim() {
        "" | "ms" => 1,
        "s" => 1_000,
        "min" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return Err(bad_timeout(value)),
    };
    Ok(n.saturating_mul(factor))
}

fn bad_timeout(value: &str) -> pgwire::error::PgWireError {
    error(
        INVALID_PARAMETER_VALUE,
        format!("invalid value for parameter \"statement_timeout\": {value:?}"),
    )
}

/// A `SET` statement as (name, value), or `None` for other statements.
pub fn set_target(statement: &Statement) -> Option<PgWireResult<(String, String)>> {
    let Statement::Set(set) = statement else {
        return None;
    };
    Some(match set {
        Set::SingleAssignment {
            variable, values, ..
        } => Ok((
            variable.to_string(),
            values.iter().map(expr_text).collect::<Vec<_>>().join(", "),
        )),
        Set::SetTimeZone { value, .. } => Ok(("timezone".to_owned(), expr_text(value))),
        // SET SESSION CHARACTERISTICS AS TRANSACTION ...: recorded for SHOW.
        // Every level runs as read committed (the store has no snapshots).
        Set::SetTransaction { modes, .. } => match modes.first() {
            Some(TransactionMode::IsolationLevel(level)) => Ok((
                "default_transaction_isolation".to_owned(),
                level.to_string().to_ascii_lowercase(),
            )),
            Some(TransactionMode::AccessMode(mode)) => Ok((
                "default_transaction_read_only".to_owned(),
                if mode.to_string().eq_ignore_ascii_case("READ ONLY") {
                    "on"
                } else {
                    "off"
                }
                .to_owned(),
            )),
            None => Err(error(
                FEATURE_NOT_SUPPORTED,
                "SET TRANSACTION without a mode",
            )),
        },
        other => Err(error(
            FEATURE_NOT_SUPPORTED,
            format!("{other} is not supported"),
        )),
    })
}

fn expr_text(expr: &Expr) -> String {
    match expr {
        Expr::Value(v) => match &v.value {
            Value::SingleQuotedString(s) | Value::DoubleQuotedString(s) => s.clone(),
            Value::Number(n, _) => n.clone(),
            Value::Boolean(b) => if *b { "on" } else { "off" }.to_owned(),
            other => other.to_string(),
        },
        Expr::Identifier(i) => i.value.clone(),
        other => other.to_string(),
    }
}

/// Whether a `SHOW` names a `tablesql.*` setting: the engine session's to
/// answer.
pub fn shows_tablesql(statement: &Statement) -> bool {
    match statement {
        Statement::ShowVariable { variable } => {
            let name: Vec<_> = variable
                .iter()
                .map(|i| i.value.to_ascii_lowercase())
                .collect();
            name.join(".").starts_with("tablesql.")
        }
        _ => false,
    }
}

/// `SHOW name` and `SHOW ALL` as a result set.
pub fn show(vars: &Vars, statement: &Statement) -> Option<PgWireResult<QueryResponse>> {
    let Statement::ShowVariable { variable } = statement else {
        return None;
    };
    let name = variable
        .iter()
        .map(|i| i.value.clone())
        .collect::<Vec<_>>()
        .join(" ");
    Some(if name.eq_ignore_ascii_case("all") {
        let (names, values): (Vec<&str>, Vec<&str>) =
            vars.all().map(|(k, v)| (k.as_str(), v.as_str())).unzip();
        text_result(&[("name", names), ("setting", values)])
    } else {
        vars.get(&parameter_name(&name))
            .and_then(|v| text_result(&[(&parameter_name(&name), vec![v])]))
    })
}

/// The parameter behind SHOW's multi-word spellings.
fn parameter_name(words: &str) -> String {
    match words.to_ascii_lowercase().as_str() {
        "transaction isolation level" => "transaction_isolation".to_owned(),
        "time zone" => "timezone".to_owned(),
        other => other.replace(' ', "_"),
    }
}

fn text_result(columns: &[(&str, Vec<&str>)]) -> PgWireResult<QueryResponse> {
    let schema = Arc::new(Schema::new(
        columns
            .iter()
            .map(|(n, _)| Field::new(*n, DataType::Utf8, true))
            .collect::<Vec<_>>(),
    ));
    let arrays: Vec<ArrayRef> = columns
        .iter()
        .map(|(_, v)| Arc::new(StringArray::from(v.clone())) as ArrayRef)
        .collect();
    let batch = RecordBatch::try_new(schema.clone(), arrays)
        .map_err(|e| error(super::sqlstate::INTERNAL_ERROR, e.to_string()))?;
    let fields = Arc::new(plan_fields(&schema, &Format::UnifiedText, false)?);
    let rows: Vec<_> = arrow_pg::datatypes::encode_recordbatch(fields.clone(), batch).collect();
    Ok(QueryResponse::new(fields, futures::stream::iter(rows)))
}

/// The row description of a command known before it runs (SHOW); cursors
/// are described from their portal instead.
pub fn result_fields(statement: &Statement) -> PgWireResult<Vec<FieldInfo>> {
    Ok(match statement {
        Statement::ShowVariable { variable } => {
            let name = variable
                .iter()
                .map(|i| i.value.clone())
                .collect::<Vec<_>>()
                .join(" ");
            if name.eq_ignore_ascii_case("all") {
                vec![text_field("name"), text_field("setting")]
            } else {
                vec![text_field(&parameter_name(&name))]
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
    // The engine's own refusal first: the same words in every front end.
    if let Some(why) = crate::engine::refuse::in_memory_only(statement) {
        return engine_error(&crate::engine::EngineError::NotSupported(why));
    }
    let what = match statement {
        Statement::Merge { .. } | Statement::Truncate { .. } => {
            "tablesql writes rows with INSERT, UPDATE, DELETE and COPY; MERGE and TRUNCATE are not supported".to_owned()
        }
        other => {
            let text = other.to_string();
            let head: String = text
                .split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ");
            format!("statement not supported: {head}")
        }
    };
    error(FEATURE_NOT_SUPPORTED, what)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_parse_like_postgres() {
        assert_eq!(parse_duration_ms("150").unwrap(), 150);
        assert_eq!(parse_duration_ms("2s").unwrap(), 2000);
        assert_eq!(parse_duration_ms("1min").unwrap(), 60_000);
        assert!(parse_duration_ms("soon").is_err());
    }

    #[test]
    fn set_and_show() {
        let mut vars = Vars::default();
        assert_eq!(
            vars.set("application_name", "bi").unwrap(),
            Some(("application_name".into(), "bi".into()))
        );
        assert_eq!(vars.set("statement_timeout", "1s").unwrap(), None);
        assert_eq!(vars.statement_timeout, Some(Duration::from_secs(1)));
        assert_eq!(vars.get("STATEMENT_TIMEOUT").unwrap(), "1000");
        assert!(vars.set("server_version", "1").is_err());
        assert!(vars.set("client_encoding", "LATIN1").is_err());
        assert!(vars.get("no_such_thing").is_err());
    }
}
