//! `single_value(x)`: the one row of a scalar subquery. SQL lets a scalar
//! subquery be any query that yields at most one row for its outer row, and
//! answers NULL for none and an error for two. DataFusion plans only
//! aggregated correlated subqueries, so `planner::subquery_rules` puts this
//! aggregate over the others; it gives the value of the only row (NULL for no
//! row) and fails with [`ExecError::SubqueryRows`] on a second row, NULL or not.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray};
use datafusion::arrow::datatypes::{DataType, Field, FieldRef, UInt64Type};
use datafusion::common::ScalarValue;
use datafusion::error::{DataFusionError, Result};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::utils::format_state_name;
use datafusion::logical_expr::{Accumulator, AggregateUDFImpl, Signature, Volatility};

use crate::exec::ExecError;

/// The aggregate's name in plans.
pub const NAME: &str = "single_value";

/// The aggregate function.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct SingleValue {
    signature: Signature,
}

impl Default for SingleValue {
    fn default() -> Self {
        Self {
            signature: Signature::any(1, Volatility::Immutable),
        }
    }
}

impl AggregateUDFImpl for SingleValue {
    fn name(&self) -> &str {
        NAME
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        arg_types
            .first()
            .cloned()
            .ok_or_else(|| DataFusionError::Plan(format!("{NAME} takes one argument")))
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        Ok(Box::new(SingleValueAccumulator {
            value: ScalarValue::try_from(args.return_field.data_type())?,
            rows: 0,
        }))
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        Ok(vec![
            Arc::new(
                args.return_field
                    .as_ref()
                    .clone()
                    .with_name(format_state_name(args.name, "value"))
                    .with_nullable(true),
            ),
            Arc::new(Field::new(
                format_state_name(args.name, "rows"),
                DataType::UInt64,
                false,
            )),
        ])
    }
}

/// The value seen and how many rows brought one.
#[derive(Debug)]
struct SingleValueAccumulator {
    value: ScalarValue,
    rows: u64,
}

impl SingleValueAccumulator {
    /// Takes `rows` more rows, the last of them holding `value`.
    fn add(&mut self, rows: u64, value: impl FnOnce() -> Result<ScalarValue>) -> Result<()> {
        if rows == 0 {
            return Ok(());
        }
        self.rows += rows;
        if self.rows > 1 {
            return Err(ExecError::SubqueryRows.into());
        }
        self.value = value()?;
        Ok(())
    }
}

impl Accumulator for SingleValueAccumulator {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        let Some(column) = values.first() else {
            return Ok(());
        };
        self.add(column.len() as u64, || {
            ScalarValue::try_from_array(column, column.len() - 1)
        })
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        let (Some(values), Some(rows)) = (states.first(), states.get(1)) else {
            return Ok(());
        };
        let rows = rows.as_primitive_opt::<UInt64Type>().ok_or_else(|| {
            DataFusionError::Internal(format!("{NAME}: the row count is not UInt64"))
        })?;
        for i in 0..rows.len() {
            self.add(rows.value(i), || ScalarValue::try_from_array(values, i))?;
        }
        Ok(())
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        Ok(vec![
            self.value.clone(),
            ScalarValue::UInt64(Some(self.rows)),
        ])
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        Ok(self.value.clone())
    }

    fn size(&self) -> usize {
        std::mem::size_of_val(self) + self.value.size() - std::mem::size_of_val(&self.value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::Int32Array;

    fn accumulator() -> SingleValueAccumulator {
        SingleValueAccumulator {
            value: ScalarValue::Int32(None),
            rows: 0,
        }
    }

    #[test]
    fn none_one_or_an_error() -> Result<()> {
        let mut acc = accumulator();
        acc.update_batch(&[Arc::new(Int32Array::from(Vec::<i32>::new()))])?;
        assert_eq!(acc.evaluate()?, ScalarValue::Int32(None));
        acc.update_batch(&[Arc::new(Int32Array::from(vec![7]))])?;
        assert_eq!(acc.evaluate()?, ScalarValue::Int32(Some(7)));
        // A second row is an error even when it is NULL.
        let second = acc.update_batch(&[Arc::new(Int32Array::from(vec![None]))]);
        assert!(second.is_err());
        Ok(())
    }
}
