//! Integer arithmetic as PostgreSQL's, where DataFusion's wraps around on
//! overflow: an analyzer rule (after type coercion, so operands have their
//! final types) that replaces `+`, `-` and `*` over two integers of one
//! type with `exec::ops::checked`'s functions (names stay the operator's;
//! constant folding still folds them), and sums BIGINTs as NUMERIC.

use std::sync::Arc;

use datafusion::arrow::datatypes::DataType;
use datafusion::common::DFSchema;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::Transformed;
use datafusion::error::Result;
use datafusion::logical_expr::expr::AggregateFunction;
use datafusion::logical_expr::{BinaryExpr, Expr, ExprSchemable, LogicalPlan, Operator, ScalarUDF};
use datafusion::optimizer::AnalyzerRule;
use datafusion::optimizer::analyzer::type_coercion::TypeCoercion;

use super::rewrite::rewrite_named;

use crate::exec::ops::checked::{Checked, CheckedArithmetic, INTEGERS};

/// The rule, with its three functions built once.
#[derive(Debug)]
pub struct CheckedIntegers {
    add: Arc<ScalarUDF>,
    sub: Arc<ScalarUDF>,
    mul: Arc<ScalarUDF>,
}

impl Default for CheckedIntegers {
    fn default() -> Self {
        let udf = |which| Arc::new(CheckedArithmetic::udf(which));
        Self {
            add: udf(Checked::Add),
            sub: udf(Checked::Sub),
            mul: udf(Checked::Mul),
        }
    }
}

impl AnalyzerRule for CheckedIntegers {
    fn analyze(&self, plan: LogicalPlan, config: &ConfigOptions) -> Result<LogicalPlan> {
        let mut sums = false;
        let plan = rewrite_named(plan, may_overflow, |e, schema| match e {
            Expr::BinaryExpr(b) => self.arithmetic(b, schema),
            Expr::AggregateFunction(a) => {
                let sum = sum_as_numeric(a, schema)?;
                sums |= sum.transformed;
                Ok(sum)
            }
            other => Ok(Transformed::no(other)),
        })?;
        if sums {
            // A BIGINT sum is NUMERIC now: what compares with it or computes
            // from it is coerced again.
            return TypeCoercion::new().analyze(plan, config);
        }
        Ok(plan)
    }

    fn name(&self) -> &str {
        "checked_integers"
    }
}

/// Whether `rewrite_named` should look at an expression: arithmetic, or a sum.
fn may_overflow(e: &Expr) -> bool {
    match e {
        Expr::BinaryExpr(b) => {
            matches!(b.op, Operator::Plus | Operator::Minus | Operator::Multiply)
        }
        Expr::AggregateFunction(a) => a.func.name() == "sum",
        _ => false,
    }
}

impl CheckedIntegers {
    /// `l + r` over two integers of one type as `checked_add(l, r)`.
    /// Operands whose type is not known here (a parameter before binding)
    /// keep the operator.
    fn arithmetic(&self, b: BinaryExpr, schema: &DFSchema) -> Result<Transformed<Expr>> {
        let udf = match b.op {
            Operator::Plus => &self.add,
            Operator::Minus => &self.sub,
            Operator::Multiply => &self.mul,
            _ => return Ok(Transformed::no(Expr::BinaryExpr(b))),
        };
        let left = b.left.get_type(schema).ok();
        let integers = left.as_ref().is_some_and(|t| INTEGERS.contains(t))
            && b.right.get_type(schema).ok() == left;
        if !integers {
            return Ok(Transformed::no(Expr::BinaryExpr(b)));
        }
        Ok(Transformed::yes(udf.call(vec![*b.left, *b.right])))
    }
}

/// `sum(b)` of a BIGINT as PostgreSQL's: a NUMERIC, which does not
/// overflow where the BIGINT sum would (DataFusion's wraps around).
fn sum_as_numeric(a: AggregateFunction, schema: &DFSchema) -> Result<Transformed<Expr>> {
    // Type coercion has already widened a smaller integer to BIGINT with a
    // cast; such a sum is PostgreSQL's BIGINT sum and stays one.
    let bigint = |arg: &Expr| match arg {
        Expr::Cast(c) => c.expr.get_type(schema).ok() == Some(DataType::Int64),
        other => other.get_type(schema).ok() == Some(DataType::Int64),
    };
    let bigint = a.func.name() == "sum" && matches!(a.params.args.as_slice(), [arg] if bigint(arg));
    if !bigint {
        return Ok(Transformed::no(Expr::AggregateFunction(a)));
    }
    let mut a = a;
    a.params.args = a
        .params
        .args
        .into_iter()
        .map(|arg| arg.cast_to(&DataType::Decimal128(38, 0), schema))
        .collect::<Result<_>>()?;
    Ok(Transformed::yes(Expr::AggregateFunction(a)))
}
