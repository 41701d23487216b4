//! A `regproc` column compared with 0, as PostgreSQL compares it: ADBC's
//! PostgreSQL driver asks `pg_type ... WHERE typreceive != 0 OR typsend !=
//! 0` at connect. datafusion-pg-catalog keeps a regproc column as the
//! function's name, which PostgreSQL prints (`int4recv`), and the name of
//! no function, regproc 0, as `-`; DataFusion would cast each name to an
//! integer to compare it with 0, and fail on the first. An expression
//! planner, asked as each comparison is built, compares such a column with
//! `'-'` where the SQL compares it with 0. Other numbers are left alone
//! (they would name a function by its oid, which the names do not carry).

use datafusion::arrow::datatypes::DataType;
use datafusion::common::{DFSchema, ExprSchema, ScalarValue};
use datafusion::error::Result;
use datafusion::logical_expr::Expr;
use datafusion::logical_expr::planner::{ExprPlanner, PlannerResult, RawBinaryExpr};
use datafusion::sql::sqlparser::ast::BinaryOperator;
use datafusion_pg_catalog::pg_catalog::oid_field::{OID_ALIAS_KEY, kind};

/// The planner (see the module doc).
#[derive(Debug, Default)]
pub struct RegprocZero;

/// A column of function names that stands for a regproc.
fn regproc_name(e: &Expr, schema: &DFSchema) -> bool {
    let Expr::Column(column) = e else {
        return false;
    };
    schema.field_from_column(column).is_ok_and(|f| {
        matches!(
            f.data_type(),
            DataType::Utf8 | DataType::Utf8View | DataType::LargeUtf8
        ) && f.metadata().get(OID_ALIAS_KEY).map(String::as_str) == Some(kind::REGPROC)
    })
}

fn zero(e: &Expr) -> bool {
    matches!(
        e,
        Expr::Literal(ScalarValue::Int64(Some(0)) | ScalarValue::Int32(Some(0)), _)
    )
}

impl ExprPlanner for RegprocZero {
    fn plan_binary_op(
        &self,
        expr: RawBinaryExpr,
        schema: &DFSchema,
    ) -> Result<PlannerResult<RawBinaryExpr>> {
        let RawBinaryExpr {
            op,
            mut left,
            mut right,
        } = expr;
        if matches!(op, BinaryOperator::Eq | BinaryOperator::NotEq) {
            let none = || Expr::Literal(ScalarValue::Utf8(Some("-".to_owned())), None);
            // The literal first: the field lookup runs only beside a 0.
            if zero(&right) && regproc_name(&left, schema) {
                right = none();
            } else if zero(&left) && regproc_name(&right, schema) {
                left = none();
            }
        }
        Ok(PlannerResult::Original(RawBinaryExpr { op, left, right }))
    }
}
