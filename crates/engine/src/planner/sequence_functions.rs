//! `nextval`, `currval` and `setval` over the engine's sequences
//! (`exec::write::sequences`, `catalog::sequence`), and [`AsyncValues`],
//! which lets `nextval` appear in `VALUES` (and so in `DEFAULT`s filled
//! into them).
//!
//! `nextval` and `setval` write to the store, so they are DataFusion async
//! functions: the physical planner runs them in an `AsyncFuncExec` above
//! their input. `currval` reads what this session's `nextval` returned last,
//! kept in a config extension ([`SequenceSession`]) that each session gets
//! afresh (`Engine::session`).

use std::any::Any;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use datafusion::arrow::array::{Array, ArrayRef, BooleanArray, Int64Array, Int64Builder};
use datafusion::arrow::datatypes::DataType;
use datafusion::common::cast::{as_boolean_array, as_int64_array, as_string_array};
use datafusion::common::config::{ConfigEntry, ConfigExtension, ExtensionOptions};
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Column, DFSchema, DataFusionError, ScalarValue, exec_err};
use datafusion::config::ConfigOptions;
use datafusion::error::Result;
use datafusion::logical_expr::ExprSchemable;
use datafusion::logical_expr::async_udf::{AsyncScalarUDF, AsyncScalarUDFImpl};
use datafusion::logical_expr::expr::{Cast, ScalarFunction};
use datafusion::logical_expr::{
    ColumnarValue, EmptyRelation, Expr, LogicalPlan, LogicalPlanBuilder, ScalarFunctionArgs,
    ScalarUDF, ScalarUDFImpl, Signature, TypeSignature, Values, Volatility,
};
use datafusion::optimizer::AnalyzerRule;

use crate::catalog::CatalogError;
use crate::catalog::sequence::{SequenceError, name_from_text};
use crate::exec::write::sequences::Sequences;

/// What this session's `nextval` returned last, per sequence.
#[derive(Debug, Clone, Default)]
pub struct SequenceSession {
    last: Arc<Mutex<HashMap<String, i64>>>,
}

impl SequenceSession {
    fn record(&self, name: &str, value: i64) {
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        last.insert(name.to_owned(), value);
    }

    /// Forgets them (`DISCARD ALL`).
    pub fn clear(&self) {
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        last.clear();
    }

    fn current(&self, name: &str) -> Option<i64> {
        let last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        last.get(name).copied()
    }

    fn of(options: &ConfigOptions) -> Result<&Self> {
        options
            .extensions
            .get::<Self>()
            .ok_or_else(|| DataFusionError::Internal("no sequence session state".into()))
    }
}

impl ConfigExtension for SequenceSession {
    const PREFIX: &'static str = "tablesql_sequences";
}

// State, not settings: nothing to SET or SHOW; a cloned config (each
// statement's) shares the session's values.
impl ExtensionOptions for SequenceSession {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }

    fn cloned(&self) -> Box<dyn ExtensionOptions> {
        Box::new(self.clone())
    }

    fn set(&mut self, key: &str, _value: &str) -> Result<()> {
        exec_err!("{key} cannot be set")
    }

    fn entries(&self) -> Vec<ConfigEntry> {
        Vec::new()
    }
}

/// Which of the three functions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Which {
    Next,
    Current,
    Set,
}

/// One of the functions over one engine's sequences.
#[derive(Debug)]
struct SequenceFunction {
    which: Which,
    sequences: Arc<Sequences>,
    signature: Signature,
}

impl PartialEq for SequenceFunction {
    fn eq(&self, other: &Self) -> bool {
        self.which == other.which && Arc::ptr_eq(&self.sequences, &other.sequences)
    }
}

impl Eq for SequenceFunction {}

impl Hash for SequenceFunction {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.which.hash(state);
        Arc::as_ptr(&self.sequences).hash(state);
    }
}

/// `nextval(name)`, `currval(name)` and `setval(name, value [, is_called])`.
pub fn udfs(sequences: Arc<Sequences>) -> Vec<ScalarUDF> {
    use DataType::{Boolean, Int64, Utf8};
    let make = |which, signature| SequenceFunction {
        which,
        sequences: sequences.clone(),
        signature,
    };
    let next = make(
        Which::Next,
        Signature::exact(vec![Utf8], Volatility::Volatile),
    );
    let current = make(
        Which::Current,
        Signature::exact(vec![Utf8], Volatility::Volatile),
    );
    let set = make(
        Which::Set,
        Signature::one_of(
            vec![
                TypeSignature::Exact(vec![Utf8, Int64]),
                TypeSignature::Exact(vec![Utf8, Int64, Boolean]),
            ],
            Volatility::Volatile,
        ),
    );
    vec![
        AsyncScalarUDF::new(Arc::new(next)).into_scalar_udf(),
        ScalarUDF::new_from_impl(current),
        AsyncScalarUDF::new(Arc::new(set)).into_scalar_udf(),
    ]
}

fn external(e: CatalogError) -> DataFusionError {
    DataFusionError::External(Box::new(e))
}

impl ScalarUDFImpl for SequenceFunction {
    fn name(&self) -> &str {
        match self.which {
            Which::Next => "nextval",
            Which::Current => "currval",
            Which::Set => "setval",
        }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(DataType::Int64)
    }

    /// `currval` only: the other two run asynchronously.
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        if self.which != Which::Current {
            return exec_err!("{} runs only as an async function", self.name());
        }
        let session = SequenceSession::of(&args.config_options)?;
        let arrays = arrays(&args)?;
        let names = as_string_array(first(&arrays)?)?;
        let mut out = Int64Builder::with_capacity(names.len());
        for name in names.iter() {
            match name.map(name_from_text) {
                None => out.append_null(),
                Some(name) => match session.current(&name) {
                    Some(v) => out.append_value(v),
                    None => return Err(external(SequenceError::NotYetDefined(name).into())),
                },
            }
        }
        Ok(ColumnarValue::Array(Arc::new(out.finish())))
    }
}

/// The arguments as arrays of the batch's length: a literal name is one
/// call per row, not one call.
fn arrays(args: &ScalarFunctionArgs) -> Result<Vec<ArrayRef>> {
    args.args
        .iter()
        .map(|a| a.to_array(args.number_rows))
        .collect()
}

fn first(arrays: &[ArrayRef]) -> Result<&ArrayRef> {
    arrays
        .first()
        .ok_or_else(|| DataFusionError::Plan("a sequence function needs a sequence name".into()))
}

#[async_trait]
impl AsyncScalarUDFImpl for SequenceFunction {
    async fn invoke_async_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let session = SequenceSession::of(&args.config_options)?.clone();
        let arrays = arrays(&args)?;
        let names = as_string_array(first(&arrays)?)?;
        let mut out = Int64Builder::with_capacity(names.len());
        match self.which {
            Which::Next => {
                // In row order within a batch (a VALUES list whose rows
                // differ in which cells call nextval runs those rows as
                // one-row branches, in no set order: see `AsyncValues`).
                for name in names.iter() {
                    let Some(name) = name.map(name_from_text) else {
                        out.append_null();
                        continue;
                    };
                    let value = self.sequences.next(&name).await.map_err(external)?;
                    session.record(&name, value);
                    out.append_value(value);
                }
            }
            Which::Set => {
                let values = as_int64_array(
                    arrays
                        .get(1)
                        .ok_or_else(|| DataFusionError::Plan("setval needs a value".into()))?,
                )?;
                let called = match arrays.get(2) {
                    Some(a) => as_boolean_array(a)?.clone(),
                    None => BooleanArray::from(vec![true; names.len()]),
                };
                for i in 0..names.len() {
                    if names.is_null(i) || values.is_null(i) || called.is_null(i) {
                        out.append_null();
                        continue;
                    }
                    let name = name_from_text(names.value(i));
                    let value = values.value(i);
                    self.sequences
                        .set(&name, value, called.value(i))
                        .await
                        .map_err(external)?;
                    out.append_value(value);
                }
            }
            Which::Current => return self.invoke_with_args(args),
        }
        let out: Int64Array = out.finish();
        Ok(ColumnarValue::Array(Arc::new(out)))
    }
}

/// Whether an expression calls an async function (`nextval`, `setval`).
fn calls_async(e: &Expr) -> bool {
    e.exists(|e| {
        Ok(
            matches!(e, Expr::ScalarFunction(ScalarFunction { func, .. })
            if func.as_async().is_some()),
        )
    })
    .unwrap_or(false)
}

/// `VALUES` cells that call an async function, moved into projections:
/// DataFusion evaluates `VALUES` cells at planning, where an async function
/// cannot run, and runs them in projections. A column that calls the same
/// function in every row becomes one projection over the rest, in row order;
/// otherwise each row that calls one becomes a one-row projection, and the
/// union of those and the other rows keeps every row (in no set order).
#[derive(Debug, Default)]
pub struct AsyncValues;

impl AnalyzerRule for AsyncValues {
    fn name(&self) -> &str {
        "tablesql_async_values"
    }

    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        plan.transform_up(|node| {
            let LogicalPlan::Values(values) = &node else {
                return Ok(Transformed::no(node));
            };
            if !values.values.iter().flatten().any(calls_async) {
                return Ok(Transformed::no(node));
            }
            match columns_as_projection(values)? {
                Some(plan) => Ok(Transformed::yes(plan)),
                None => rows_as_projections(values).map(Transformed::yes),
            }
        })
        .map(|t| t.data)
    }
}

/// The usual shape, `VALUES (DEFAULT, 'a'), (DEFAULT, 'b')`, where a column
/// holds one async call in every row and no other cell calls one: the
/// column is computed by one projection over the others, row by row in
/// order (ids ascend down the rows, as in PostgreSQL). `None` for any other
/// shape.
fn columns_as_projection(values: &Values) -> Result<Option<LogicalPlan>> {
    let Some(first) = values.values.first() else {
        return Ok(None);
    };
    let hoisted: Vec<Option<&Expr>> = first
        .iter()
        .enumerate()
        .map(|(j, cell)| {
            (calls_async(cell) && values.values.iter().all(|r| r.get(j) == Some(cell)))
                .then_some(cell)
        })
        .collect();
    let rest_async = values.values.iter().any(|row| {
        row.iter()
            .zip(&hoisted)
            .any(|(cell, h)| h.is_none() && calls_async(cell))
    });
    if rest_async {
        return Ok(None);
    }
    let fields = values.schema.fields();
    // The hoisted cells become typed NULLs the projection replaces.
    let rows = values
        .values
        .iter()
        .map(|row| {
            row.iter()
                .zip(&hoisted)
                .zip(fields.iter())
                .map(|((cell, h), field)| match h {
                    Some(_) => Ok(Expr::Literal(
                        ScalarValue::try_from(field.data_type())?,
                        None,
                    )),
                    None => Ok(cell.clone()),
                })
                .collect::<Result<Vec<_>>>()
        })
        .collect::<Result<Vec<_>>>()?;
    let projection = hoisted
        .iter()
        .zip(fields.iter())
        .map(|(h, field)| match h {
            Some(call) => Ok(Expr::Cast(Cast::new(
                Box::new((*call).clone()),
                field.data_type().clone(),
            ))
            .alias(field.name())),
            None => Ok(Expr::Column(Column::from_name(field.name()))),
        })
        .collect::<Result<Vec<_>>>()?;
    // The NULLs stand where the schema may say non-null.
    let nullable: Vec<_> = fields
        .iter()
        .zip(&hoisted)
        .map(|(f, h)| {
            Arc::new(
                f.as_ref()
                    .clone()
                    .with_nullable(f.is_nullable() || h.is_some()),
            )
        })
        .collect();
    let schema =
        DFSchema::from_unqualified_fields(nullable.into(), values.schema.metadata().clone())?;
    let values = LogicalPlan::Values(Values {
        schema: Arc::new(schema),
        values: rows,
    });
    Ok(Some(
        LogicalPlanBuilder::from(values)
            .project(projection)?
            .build()?,
    ))
}

fn rows_as_projections(values: &Values) -> Result<LogicalPlan> {
    let schema: &DFSchema = &values.schema;
    let (async_rows, plain): (Vec<_>, Vec<_>) = values
        .values
        .iter()
        .cloned()
        .partition(|row| row.iter().any(calls_async));
    let mut inputs = Vec::new();
    if !plain.is_empty() {
        inputs.push(LogicalPlan::Values(Values {
            schema: values.schema.clone(),
            values: plain,
        }));
    }
    for row in async_rows {
        let one = LogicalPlan::EmptyRelation(EmptyRelation {
            produce_one_row: true,
            schema: Arc::new(DFSchema::empty()),
        });
        let cells = row
            .into_iter()
            .zip(schema.fields())
            .map(|(cell, field)| {
                let cell = if cell.get_type(&DFSchema::empty())? == *field.data_type() {
                    cell
                } else {
                    cell.cast_to(field.data_type(), &DFSchema::empty())?
                };
                Ok(cell.alias(field.name()))
            })
            .collect::<Result<Vec<_>>>()?;
        inputs.push(LogicalPlanBuilder::from(one).project(cells)?.build()?);
    }
    let mut inputs = inputs.into_iter();
    let Some(first) = inputs.next() else {
        return exec_err!("VALUES without rows");
    };
    let mut builder = LogicalPlanBuilder::from(first);
    for input in inputs {
        builder = builder.union(input)?;
    }
    builder.build()
}
