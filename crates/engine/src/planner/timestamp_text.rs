//! A timestamp cast to text as PostgreSQL writes it. DataFusion's cast
//! writes Arrow's `2011-04-20T15:40:00Z`; PostgreSQL's `ts::text` is
//! `2011-04-20 15:40:00+00`, the text COPY, the shell and the wire already
//! write (`load::pg_text`). Tools compare and parse that text (a
//! `ts::text LIKE '2011-04-20 %'`, dbt's snapshot hashes). After type
//! coercion, so that implicit casts (`ts || ''`) are seen too, each cast of
//! a timestamp in UTC or without a zone to text becomes
//! [`PG_TIMESTAMP_TEXT`] of it in microseconds; a timestamp in another
//! zone keeps Arrow's text.

use std::sync::Arc;

use datafusion::arrow::array::ArrayRef;
use datafusion::arrow::datatypes::{DataType, TimeUnit};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::Transformed;
use datafusion::common::{DFSchema, exec_err};
use datafusion::error::Result;
use datafusion::logical_expr::expr::{Cast, TryCast};
use datafusion::logical_expr::{
    ColumnarValue, Expr, ExprSchemable, LogicalPlan, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl,
    Signature, Volatility,
};
use datafusion::optimizer::AnalyzerRule;

use super::rewrite::rewrite_named;
use crate::load::pg_text::{timestamp_strings, timestamp_zone};

/// The function a timestamp's cast to text becomes.
pub const PG_TIMESTAMP_TEXT: &str = "tablesql_timestamp_text";

/// The analyzer rule (see the module doc).
#[derive(Debug)]
pub struct TimestampText {
    udf: Arc<ScalarUDF>,
}

impl Default for TimestampText {
    fn default() -> Self {
        Self {
            udf: Arc::new(ScalarUDF::new_from_impl(TimestampTextUdf {
                signature: Signature::any(1, Volatility::Immutable),
            })),
        }
    }
}

fn is_text(t: &DataType) -> bool {
    matches!(t, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View)
}

fn is_text_cast(e: &Expr) -> bool {
    match e {
        Expr::Cast(Cast { field, .. }) | Expr::TryCast(TryCast { field, .. }) => {
            is_text(field.data_type())
        }
        _ => false,
    }
}

impl TimestampText {
    fn respelled(&self, e: Expr, schema: &DFSchema) -> Result<Transformed<Expr>> {
        let (expr, target) = match &e {
            Expr::Cast(Cast { expr, field }) | Expr::TryCast(TryCast { expr, field }) => {
                (expr, field.data_type().clone())
            }
            _ => return Ok(Transformed::no(e)),
        };
        // Any unit (a literal's are nanoseconds), written in PostgreSQL's
        // microseconds.
        let micros = match expr.get_type(schema) {
            Ok(DataType::Timestamp(_, zone)) => DataType::Timestamp(TimeUnit::Microsecond, zone),
            _ => return Ok(Transformed::no(e)),
        };
        if !is_text(&target) || timestamp_zone(&micros).is_none() {
            return Ok(Transformed::no(e));
        }
        let stamp = match expr.get_type(schema) {
            Ok(t) if t == micros => expr.as_ref().clone(),
            _ => datafusion::logical_expr::cast(expr.as_ref().clone(), micros),
        };
        let text = self.udf.call(vec![stamp]);
        Ok(Transformed::yes(match target {
            DataType::Utf8 => text,
            other => datafusion::logical_expr::cast(text, other),
        }))
    }
}

impl AnalyzerRule for TimestampText {
    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        rewrite_named(plan, is_text_cast, |e, schema| self.respelled(e, schema))
    }

    fn name(&self) -> &str {
        "timestamp_text"
    }
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct TimestampTextUdf {
    signature: Signature,
}

impl ScalarUDFImpl for TimestampTextUdf {
    fn name(&self) -> &str {
        PG_TIMESTAMP_TEXT
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let Some(stamps) = arrays.first() else {
            return exec_err!("{PG_TIMESTAMP_TEXT} takes a timestamp");
        };
        let Some(out) = timestamp_strings(stamps.as_ref()) else {
            return exec_err!("{PG_TIMESTAMP_TEXT} takes a timestamp in UTC or without a zone");
        };
        let out: ArrayRef = Arc::new(out);
        Ok(ColumnarValue::Array(out))
    }
}
