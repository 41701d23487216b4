//! `pg_settings`: a row per session parameter, its value as the session's
//! own `current_setting` reads it, so that a `SET` shows here as in `SHOW`.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, RecordBatch, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, SchemaRef};
use datafusion::catalog::Session;
use datafusion::common::DataFusionError;
use datafusion::error::Result;
use datafusion::logical_expr::{ColumnarValue, ScalarFunctionArgs};

use super::relations::rows_batch;

pub fn pg_settings(schema: &SchemaRef, state: &dyn Session) -> Result<RecordBatch> {
    let names = crate::engine::Session::parameter_names();
    let Some(current_setting) = state.scalar_functions().get("current_setting") else {
        return Err(DataFusionError::Internal(
            "no current_setting in this session".into(),
        ));
    };
    let name_array: ArrayRef = Arc::new(StringArray::from(names.clone()));
    let values = current_setting.invoke_with_args(ScalarFunctionArgs {
        args: vec![ColumnarValue::Array(name_array)],
        arg_fields: vec![Arc::new(Field::new("name", DataType::Utf8, true))],
        number_rows: names.len(),
        return_field: Arc::new(Field::new("setting", DataType::Utf8, true)),
        config_options: Arc::new(state.config_options().clone()),
    })?;
    let values = values.into_array(names.len())?;
    let column = values.as_any().downcast_ref::<StringArray>();
    let rows: Vec<_> = names
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let setting = column.and_then(|c| c.is_valid(i).then(|| c.value(i).to_owned()));
            vec![
                ("name", name.as_str().into()),
                ("setting", datafusion::common::ScalarValue::Utf8(setting)),
            ]
        })
        .collect();
    rows_batch(schema, &rows)
}
