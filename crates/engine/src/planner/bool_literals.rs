//! A quoted literal compared with a boolean is a boolean, as in
//! PostgreSQL, where `'t'` is of no type until it meets one:
//! `indisprimary = 't'` (psqlODBC's primary-key query) compares booleans.
//! DataFusion types `'t'` as text and finds no common type for Boolean and
//! Utf8, so the comparison fails to plan. An expression planner, asked as
//! the SQL planner builds each comparison (with the types of its sides at
//! hand), reads such a literal as PostgreSQL's boolean input does (`t`,
//! `true`, `yes`, `on`, `1` and their prefixes, any case), and refuses
//! other text as PostgreSQL does (22P02).

use datafusion::arrow::datatypes::DataType;
use datafusion::arrow::error::ArrowError;
use datafusion::common::{DFSchema, DataFusionError, ScalarValue};
use datafusion::error::Result;
use datafusion::logical_expr::Expr;
use datafusion::logical_expr::ExprSchemable;
use datafusion::logical_expr::planner::{ExprPlanner, PlannerResult, RawBinaryExpr};
use datafusion::sql::sqlparser::ast::BinaryOperator;

/// The planner (see the module doc).
#[derive(Debug, Default)]
pub struct BooleanLiterals;

/// PostgreSQL's boolean input (`boolin`): a word or a unique prefix of
/// one, any case, spaces around it ignored.
pub fn parse_bool(text: &str) -> Option<bool> {
    let v = text.trim().to_ascii_lowercase();
    let prefix = |word: &str, at_least: usize| v.len() >= at_least && word.starts_with(&v);
    if prefix("true", 1) || prefix("yes", 1) || prefix("on", 2) || v == "1" {
        Some(true)
    } else if prefix("false", 1) || prefix("no", 1) || prefix("off", 2) || v == "0" {
        Some(false)
    } else {
        None
    }
}

fn compares(op: &BinaryOperator) -> bool {
    use BinaryOperator as O;
    matches!(op, O::Eq | O::NotEq | O::Lt | O::LtEq | O::Gt | O::GtEq)
}

fn text(e: &Expr) -> Option<&str> {
    match e {
        Expr::Literal(
            ScalarValue::Utf8(Some(s))
            | ScalarValue::LargeUtf8(Some(s))
            | ScalarValue::Utf8View(Some(s)),
            None,
        ) => Some(s),
        _ => None,
    }
}

fn boolean(e: &Expr, schema: &DFSchema) -> bool {
    e.get_type(schema).is_ok_and(|t| t == DataType::Boolean)
}

/// `text` as a boolean literal, or PostgreSQL's error.
fn typed(text: &str) -> Result<Expr> {
    match parse_bool(text) {
        Some(b) => Ok(Expr::Literal(ScalarValue::Boolean(Some(b)), None)),
        None => Err(DataFusionError::ArrowError(
            Box::new(ArrowError::ParseError(format!(
                "invalid input syntax for type boolean: \"{text}\""
            ))),
            None,
        )),
    }
}

impl ExprPlanner for BooleanLiterals {
    fn plan_binary_op(
        &self,
        expr: RawBinaryExpr,
        schema: &DFSchema,
    ) -> Result<PlannerResult<RawBinaryExpr>> {
        let RawBinaryExpr { op, left, right } = expr;
        if compares(&op) {
            let (l, r) = (text(&left), text(&right));
            if let Some(t) = r.filter(|_| l.is_none() && boolean(&left, schema)) {
                let right = typed(t)?;
                return Ok(PlannerResult::Original(RawBinaryExpr { op, left, right }));
            }
            if let Some(t) = l.filter(|_| r.is_none() && boolean(&right, schema)) {
                let left = typed(t)?;
                return Ok(PlannerResult::Original(RawBinaryExpr { op, left, right }));
            }
        }
        Ok(PlannerResult::Original(RawBinaryExpr { op, left, right }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boolean_input_is_postgresqls() {
        for t in ["t", "TRUE", " yes ", "y", "on", "1", "tr"] {
            assert_eq!(parse_bool(t), Some(true), "{t}");
        }
        for f in ["f", "false", "No", "off", "of", "0", "n"] {
            assert_eq!(parse_bool(f), Some(false), "{f}");
        }
        for bad in ["", "o", "2", "truth", "yess", "x"] {
            assert_eq!(parse_bool(bad), None, "{bad}");
        }
    }
}
