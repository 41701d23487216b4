//! The database a session is in. A store is one database; a front end
//! names it for a session (the wire server, the name a client connects
//! to: `postgres` for dbt and most tools, `tablesql` for ours), and
//! `current_database()` and `current_catalog` answer that name.
//!
//! Tools qualify every relation with it: dbt writes
//! `"postgres"."public"."runners"`. DataFusion would look for a catalog of
//! that name, so as a session parses a statement, and again before a
//! statement runs, is prepared or starts (a front end may hand one over
//! unparsed by it), a three-part name whose database is the session's
//! loses that part; one of another database is refused as PostgreSQL
//! refuses it, `cross-database references are not implemented` (0A000).

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{CopySource, ObjectName, Statement, visit_relations_mut};

use super::{EngineError, Session};
use crate::catalog::normalize_ident;

/// DataFusion's name for the store's catalog, which plans name too.
const DATAFUSION_CATALOG: &str = "datafusion";

impl Session {
    /// The database the session is in.
    pub fn database(&self) -> String {
        self.database
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Puts the session in `database`: the name `current_database()`
    /// answers and three-part names may give.
    pub fn set_database(&self, database: &str) {
        self.ctx
            .register_udf(crate::planner::identity::current_database_udf(database));
        *self.database.lock().unwrap_or_else(|p| p.into_inner()) = database.to_owned();
        // Plans are made from a snapshot of the context: a new one.
        self.configuration_changed();
    }

    /// `statement` with the session's database taken off its three-part
    /// names (see the module doc).
    pub(super) fn local_names(&self, statement: Statement) -> Result<Statement, EngineError> {
        local_names(statement, &self.database())
    }
}

/// `statement` with `database` (or DataFusion's catalog name) taken off
/// its three-part relation names; a name of another database is refused.
fn local_names(mut statement: Statement, database: &str) -> Result<Statement, EngineError> {
    match strip(&mut statement, database) {
        Some(name) => Err(EngineError::NotSupported(format!(
            "cross-database references are not implemented: {name}"
        ))),
        None => Ok(statement),
    }
}

/// Takes `database` (or DataFusion's catalog name) off the three-part
/// relation names of `statement`, up to the first of another database,
/// which it returns.
pub(super) fn strip(statement: &mut Statement, database: &str) -> Option<String> {
    let mut foreign = None;
    let mut local = |name: &mut ObjectName| {
        if name.0.len() != 3 {
            return ControlFlow::Continue(());
        }
        let first = name.0[0].as_ident().map(normalize_ident);
        match first.as_deref() {
            Some(d) if d == database || d == DATAFUSION_CATALOG => {
                name.0.remove(0);
                ControlFlow::Continue(())
            }
            _ => {
                foreign = Some(name.to_string());
                ControlFlow::Break(())
            }
        }
    };
    // Names sqlparser's visitor does not take for relations.
    let flow = match statement {
        Statement::Drop { names, .. } => names.iter_mut().try_for_each(&mut local),
        Statement::CreateView(view) => local(&mut view.name),
        Statement::Copy {
            source: CopySource::Table { table_name, .. },
            ..
        } => local(table_name),
        _ => ControlFlow::Continue(()),
    };
    if flow.is_continue() {
        let _ = visit_relations_mut(statement, local);
    }
    foreign
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::planner::sql::SqlParser;

    fn local(sql: &str, database: &str) -> Result<String, String> {
        let statement = SqlParser::new().parse(sql).expect("parses").remove(0);
        local_names(statement, database)
            .map(|s| s.to_string())
            .map_err(|e| e.to_string())
    }

    #[test]
    fn the_sessions_database_is_taken_off_and_another_refused() {
        assert_eq!(
            local(
                r#"INSERT INTO "postgres"."public"."r" SELECT * FROM postgres.public.s JOIN t ON true"#,
                "postgres"
            ),
            Ok(r#"INSERT INTO "public"."r" SELECT * FROM public.s JOIN t ON true"#.to_owned())
        );
        assert_eq!(
            local("SELECT * FROM datafusion.public.r", "postgres"),
            Ok("SELECT * FROM public.r".to_owned())
        );
        assert_eq!(
            local("DROP TABLE postgres.public.r, s", "postgres"),
            Ok("DROP TABLE public.r, s".to_owned())
        );
        for sql in [
            "DROP VIEW other.public.v",
            "CREATE VIEW other.public.v AS SELECT 1",
            "COPY other.public.r FROM STDIN",
        ] {
            assert!(local(sql, "postgres").is_err(), "{sql}");
        }
        let refused = local("SELECT * FROM other.public.r", "postgres");
        assert!(
            refused.as_ref().is_err_and(
                |e| e.contains("cross-database references are not implemented: other.public.r")
            ),
            "{refused:?}"
        );
    }
}
