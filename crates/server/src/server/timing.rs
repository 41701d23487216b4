//! Each statement's time, from its Query or Execute message to the end of
//! its answer: into the metrics' histogram, and into the log when it took
//! at least `log_min_duration_statement` (PostgreSQL's setting), with its
//! text normalized (literals as `$n`, as the workload statistics show it).

use foldhash::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use pgwire::api::DEFAULT_NAME;
use pgwire::messages::PgWireFrontendMessage;
use pgwire::messages::extendedquery::TARGET_TYPE_BYTE_STATEMENT;

use super::plan::Runner;

/// The SQL of a connection's prepared statements and portals, so that an
/// Execute can be named by its text.
#[derive(Debug, Default)]
pub(super) struct Timing {
    statements: HashMap<String, Arc<str>>,
    /// Portal to statement name.
    portals: HashMap<String, String>,
}

/// A statement being timed.
pub(super) struct Timed {
    sql: Arc<str>,
    started: Instant,
}

impl Timing {
    /// Notes what `message` prepares or binds; for a Query or an Execute,
    /// starts timing its statement. A Bind of the portal to the statement
    /// it already names, and an Execute, allocate nothing: a prepared
    /// point query sends both every time.
    pub(super) fn message(&mut self, message: &PgWireFrontendMessage) -> Option<Timed> {
        let name = |n: &Option<String>| n.as_deref().unwrap_or(DEFAULT_NAME).to_owned();
        let sql = match message {
            PgWireFrontendMessage::Query(q) => Some(Arc::from(q.query.as_str())),
            PgWireFrontendMessage::Parse(p) => {
                self.statements
                    .insert(name(&p.name), Arc::from(p.query.as_str()));
                None
            }
            PgWireFrontendMessage::Bind(b) => {
                let portal = b.portal_name.as_deref().unwrap_or(DEFAULT_NAME);
                let statement = b.statement_name.as_deref().unwrap_or(DEFAULT_NAME);
                if self.portals.get(portal).map(String::as_str) != Some(statement) {
                    self.portals.insert(portal.to_owned(), statement.to_owned());
                }
                None
            }
            PgWireFrontendMessage::Close(c) => {
                let map_name = c.name.as_deref().unwrap_or(DEFAULT_NAME);
                if c.target_type == TARGET_TYPE_BYTE_STATEMENT {
                    self.statements.remove(map_name);
                } else {
                    self.portals.remove(map_name);
                }
                None
            }
            PgWireFrontendMessage::Execute(e) => self
                .portals
                .get(e.name.as_deref().unwrap_or(DEFAULT_NAME))
                .and_then(|s| self.statements.get(s))
                .cloned()
                .or_else(|| Some(Arc::from(""))),
            _ => None,
        }?;
        Some(Timed {
            sql,
            started: Instant::now(),
        })
    }
}

impl Timed {
    /// The statement is answered: how long it took, logged when at least
    /// `slow`.
    pub(super) fn done(self, connection: u64, slow: Option<Duration>, runner: &Runner) -> Duration {
        let took = self.started.elapsed();
        if slow.is_some_and(|s| took >= s) {
            let statement = normalized(&self.sql, runner);
            tracing::info!(
                connection,
                duration_ms = took.as_secs_f64() * 1000.0,
                statement = %statement,
                "slow statement"
            );
        }
        took
    }
}

/// The text with its literals as `$n`; a text that does not parse is not
/// shown (its values might be a secret), only its length.
fn normalized(sql: &str, runner: &Runner) -> String {
    match runner.parse(sql) {
        Ok(statements) if !statements.is_empty() => statements
            .iter()
            .map(crate::engine::statement_label)
            .collect::<Vec<_>>()
            .join("; "),
        _ => format!("<{} bytes that do not parse>", sql.len()),
    }
}
