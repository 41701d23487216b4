//! Integer `+`, `-` and `*` that fail on overflow, as PostgreSQL's do
//! ("integer out of range", SQLSTATE 22003). DataFusion's operators wrap
//! around (`2147483647 + 1` is `-2147483648`), a wrong answer with no error;
//! `planner::checked` puts these functions in their place. They keep the
//! operator's column name (`a + b`), so results are named as before.

use std::sync::Arc;

use datafusion::arrow::compute::kernels::numeric;
use datafusion::arrow::datatypes::DataType;
use datafusion::error::{DataFusionError, Result};
use datafusion::logical_expr::{
    ColumnarValue, Expr, Operator, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
    TypeSignature, Volatility,
};

/// The integer types the functions take, both arguments of one type.
pub const INTEGERS: [DataType; 3] = [DataType::Int16, DataType::Int32, DataType::Int64];

/// Which operator a function checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Checked {
    /// `+`.
    Add,
    /// `-`.
    Sub,
    /// `*`.
    Mul,
}

impl Checked {
    /// The operator it replaces.
    pub fn operator(self) -> Operator {
        match self {
            Checked::Add => Operator::Plus,
            Checked::Sub => Operator::Minus,
            Checked::Mul => Operator::Multiply,
        }
    }
}

/// `+`, `-` or `*` over integers, checked.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct CheckedArithmetic {
    which: Checked,
    signature: Signature,
}

impl CheckedArithmetic {
    /// The function for one operator.
    pub fn udf(which: Checked) -> ScalarUDF {
        let exact = INTEGERS
            .iter()
            .map(|t| TypeSignature::Exact(vec![t.clone(), t.clone()]))
            .collect();
        ScalarUDF::from(Self {
            which,
            signature: Signature::one_of(exact, Volatility::Immutable),
        })
    }
}

impl ScalarUDFImpl for CheckedArithmetic {
    fn name(&self) -> &str {
        match self.which {
            Checked::Add => "checked_add",
            Checked::Sub => "checked_sub",
            Checked::Mul => "checked_mul",
        }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        arg_types
            .first()
            .cloned()
            .ok_or_else(|| DataFusionError::Plan(format!("{} takes two arguments", self.name())))
    }

    /// The operator's name: `a + b`, as the expression it replaces.
    fn schema_name(&self, args: &[Expr]) -> Result<String> {
        match args {
            [l, r] => Ok(format!(
                "{} {} {}",
                l.schema_name(),
                self.which.operator(),
                r.schema_name()
            )),
            _ => Err(DataFusionError::Plan(format!(
                "{} takes two arguments",
                self.name()
            ))),
        }
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let scalar = args
            .args
            .iter()
            .all(|a| matches!(a, ColumnarValue::Scalar(_)));
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let [l, r] = arrays.as_slice() else {
            return Err(DataFusionError::Internal(format!(
                "{} takes two arguments",
                self.name()
            )));
        };
        let result = match self.which {
            Checked::Add => numeric::add(l, r),
            Checked::Sub => numeric::sub(l, r),
            Checked::Mul => numeric::mul(l, r),
        }?;
        let result = ColumnarValue::Array(Arc::new(result));
        if scalar {
            // Scalars in, a scalar out (constant folding relies on it).
            return Ok(ColumnarValue::Scalar(
                datafusion::common::ScalarValue::try_from_array(&result.into_array(1)?, 0)?,
            ));
        }
        Ok(result)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Array, Int32Array};
    use datafusion::arrow::datatypes::Field;
    use datafusion::common::config::ConfigOptions;

    fn call(which: Checked, l: i32, r: i32) -> Result<ColumnarValue> {
        let udf = CheckedArithmetic::udf(which);
        let field = Arc::new(Field::new("x", DataType::Int32, true));
        udf.invoke_with_args(ScalarFunctionArgs {
            args: vec![
                ColumnarValue::Array(Arc::new(Int32Array::from(vec![l]))),
                ColumnarValue::Array(Arc::new(Int32Array::from(vec![r]))),
            ],
            arg_fields: vec![field.clone(), field.clone()],
            number_rows: 1,
            return_field: field,
            config_options: Arc::new(ConfigOptions::default()),
        })
    }

    #[test]
    fn overflow_is_an_error() -> Result<()> {
        let ColumnarValue::Array(sum) = call(Checked::Add, 2, 3)? else {
            return Err(DataFusionError::Internal("not an array".into()));
        };
        assert_eq!(sum.len(), 1);
        assert!(call(Checked::Add, i32::MAX, 1).is_err());
        assert!(call(Checked::Sub, i32::MIN, 1).is_err());
        assert!(call(Checked::Mul, 65536, 65536).is_err());
        Ok(())
    }
}
