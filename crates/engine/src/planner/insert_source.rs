//! `VALUES` nested in an INSERT's query, made something DataFusion 55 plans.
//!
//! DataFusion plans every `VALUES` of an INSERT's source against the target
//! table's columns (`insert_to_plan` sets the planner context's table
//! schema, and `values.rs` takes it wherever the VALUES sits), so a VALUES
//! in a derived table or CTE of the source fails when its width is not the
//! table's: "Inconsistent data length across values list". SQLAlchemy 2
//! inserts an ORM's new rows exactly so (`INSERT INTO t (a, b) SELECT p0,
//! p1 FROM (VALUES (..., 0), (..., 1)) AS imp_sen(p0, p1, sen_counter)
//! ORDER BY sen_counter RETURNING id`), so without this no ORM commit of
//! two new objects plans. Each nested VALUES becomes the same rows as
//! `SELECT unnest(make_array(<column 1's values>)) AS column1, ...`: the
//! same names, types and order, planned without the table's schema, and
//! flat, however many rows. The top-level VALUES of an INSERT is left to
//! DataFusion, which types its placeholders by the target's columns.

use std::ops::ControlFlow;

use datafusion::error::{DataFusionError, Result};
use datafusion::sql::sqlparser::ast::{Insert, Query, SetExpr, Statement, VisitMut, VisitorMut};

/// Rewrites the VALUES nested in an INSERT's source (see the module doc);
/// any other statement is left alone.
pub fn flatten_nested_values(statement: &mut Statement) -> Result<()> {
    let source = match statement {
        Statement::Insert(Insert {
            source: Some(source),
            ..
        }) => source,
        Statement::Explain { statement, .. } => return flatten_nested_values(statement),
        _ => return Ok(()),
    };
    let mut rewrite = Rewrite { failed: None };
    // Inside the source only: its own body, if VALUES, stays.
    let _ = VisitMut::visit(source.body.as_mut(), &mut rewrite);
    if let Some(with) = source.with.as_mut() {
        for cte in &mut with.cte_tables {
            let _ = VisitMut::visit(cte.query.as_mut(), &mut rewrite);
        }
    }
    match rewrite.failed {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

struct Rewrite {
    failed: Option<DataFusionError>,
}

impl VisitorMut for Rewrite {
    type Break = ();

    fn post_visit_query(&mut self, query: &mut Query) -> ControlFlow<()> {
        let SetExpr::Values(values) = query.body.as_ref() else {
            return ControlFlow::Continue(());
        };
        let width = values.rows.first().map_or(0, |r| r.content.len());
        if width == 0 || values.rows.iter().any(|r| r.content.len() != width) {
            // DataFusion's own error says what is wrong.
            return ControlFlow::Continue(());
        }
        let columns: Vec<String> = (0..width)
            .map(|i| {
                let cells: Vec<String> = values
                    .rows
                    .iter()
                    .map(|r| r.content[i].to_string())
                    .collect();
                format!(
                    "unnest(make_array({})) AS column{}",
                    cells.join(", "),
                    i + 1
                )
            })
            .collect();
        let sql = format!("SELECT {}", columns.join(", "));
        match crate::planner::sql::parse_query(&sql) {
            Ok(select) => query.body = select.body,
            Err(e) => {
                self.failed = Some(DataFusionError::Plan(format!(
                    "VALUES in an INSERT's query: {e}"
                )));
                return ControlFlow::Break(());
            }
        }
        ControlFlow::Continue(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion::sql::sqlparser::parser::Parser;

    fn rewritten(sql: &str) -> String {
        let mut s = Parser::parse_sql(&PostgreSqlDialect {}, sql)
            .expect("parses")
            .remove(0);
        flatten_nested_values(&mut s).expect("rewrites");
        s.to_string()
    }

    #[test]
    fn only_values_nested_in_an_insert_query_are_flattened() {
        assert_eq!(
            rewritten(
                "INSERT INTO t (a, b) SELECT p0, p1 FROM (VALUES ($1::TEXT, 1, 0), ($2::TEXT, NULL, 1)) AS s(p0, p1, n) ORDER BY n"
            ),
            "INSERT INTO t (a, b) SELECT p0, p1 FROM (SELECT unnest(make_array($1::TEXT, $2::TEXT)) AS column1, unnest(make_array(1, NULL)) AS column2, unnest(make_array(0, 1)) AS column3) AS s (p0, p1, n) ORDER BY n"
        );
        let plain = "INSERT INTO t (a) VALUES (1), (2)";
        assert_eq!(rewritten(plain), plain);
        let query = "SELECT * FROM (VALUES (1, 2)) AS v (a, b)";
        assert_eq!(rewritten(query), query);
    }
}
