//! PostgreSQL functions DataFusion lacks that depend on nothing but their
//! arguments: `like_escape` (what a `LIKE ... ESCAPE 'c'` becomes, see
//! `pg_spelling`), `json_build_object`, `quote_literal` and
//! `quote_nullable`, `pg_typeof`, the constant answers of a server that is
//! no standby and has no other session's temporary schema
//! (`pg_is_in_recovery`, `pg_is_other_temp_schema`), and the list forms of
//! `_pg_expandarray` and `generate_subscripts`.

use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, Int32Array, Int32Builder, ListArray, ListBuilder, StringBuilder, StructArray,
};
use datafusion::arrow::datatypes::{DataType, Field, Fields};
use datafusion::common::cast::{as_list_array, as_string_array};
use datafusion::common::{ScalarValue, exec_err, plan_err};
use datafusion::error::Result;
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility, create_udf,
};

use super::pg_spelling::{EXPANDARRAY_ITEMS, LIKE_ESCAPE, SUBSCRIPTS};

/// `like_escape(pattern, escape)`: the pattern rewritten to escape with a
/// backslash, as PostgreSQL's function of the same name does. An empty
/// escape means none, so every backslash becomes literal.
pub fn like_escape(pattern: &str, escape: &str) -> Result<String, String> {
    let mut chars = escape.chars();
    let esc = match (chars.next(), chars.next()) {
        (None, _) => None,
        (Some(c), None) => Some(c),
        _ => return Err("invalid escape string: it must be empty or one character".into()),
    };
    let mut out = String::with_capacity(pattern.len() + 4);
    let mut it = pattern.chars();
    while let Some(c) = it.next() {
        if Some(c) == esc {
            match it.next() {
                Some(next @ ('%' | '_' | '\\')) => {
                    out.push('\\');
                    out.push(next);
                }
                Some(next) => out.push(next),
                None => return Err("LIKE pattern must not end with escape character".into()),
            }
        } else if c == '\\' {
            out.push_str("\\\\");
        } else {
            out.push(c);
        }
    }
    Ok(out)
}

/// The `like_escape` SQL function.
pub fn like_escape_udf() -> ScalarUDF {
    create_udf(
        LIKE_ESCAPE,
        vec![DataType::Utf8, DataType::Utf8],
        DataType::Utf8,
        Volatility::Immutable,
        Arc::new(|args: &[ColumnarValue]| {
            let arrays = ColumnarValue::values_to_arrays(args)?;
            let (patterns, escapes) = match arrays.as_slice() {
                [p, e] => (as_string_array(p)?, as_string_array(e)?),
                _ => return exec_err!("like_escape takes a pattern and an escape"),
            };
            let mut out = StringBuilder::with_capacity(patterns.len(), 0);
            for (p, e) in patterns.iter().zip(escapes.iter()) {
                match (p, e) {
                    (Some(p), Some(e)) => match like_escape(p, e) {
                        Ok(s) => out.append_value(s),
                        Err(why) => return exec_err!("{why}"),
                    },
                    _ => out.append_null(),
                }
            }
            Ok(ColumnarValue::Array(Arc::new(out.finish())))
        }),
    )
}

/// `tablesql_expandarray_items(a)`: for each array, the list of its
/// elements as structs `{x: element, n: position from 1}`.
pub fn expandarray_items_udf() -> ScalarUDF {
    ScalarUDF::new_from_impl(ExpandArrayItems {
        signature: Signature::any(1, Volatility::Immutable),
    })
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct ExpandArrayItems {
    signature: Signature,
}

fn item_fields(element: &DataType) -> Fields {
    Fields::from(vec![
        Field::new("x", element.clone(), true),
        Field::new("n", DataType::Int32, false),
    ])
}

impl ScalarUDFImpl for ExpandArrayItems {
    fn name(&self) -> &str {
        EXPANDARRAY_ITEMS
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        match args {
            [DataType::List(element)] => Ok(DataType::List(Arc::new(Field::new(
                "item",
                DataType::Struct(item_fields(element.data_type())),
                true,
            )))),
            other => plan_err!("_pg_expandarray takes an array, not {other:?}"),
        }
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let [array] = arrays.as_slice() else {
            return exec_err!("_pg_expandarray takes one array");
        };
        let lists = as_list_array(array)?;
        let offsets = lists.value_offsets();
        // Each element's position within its own list, from 1. Elements
        // outside every list (a sliced array) keep 0: no list refers to them.
        let first = offsets
            .first()
            .map_or(0, |o| usize::try_from(*o).unwrap_or(0));
        let mut positions = vec![0; first];
        for w in offsets.windows(2) {
            positions.extend(1..=(w[1] - w[0]));
        }
        positions.resize(lists.values().len(), 0);
        let element = lists.values().data_type().clone();
        let items = StructArray::try_new(
            item_fields(&element),
            vec![
                lists.values().clone(),
                Arc::new(Int32Array::from(positions)) as ArrayRef,
            ],
            None,
        )?;
        let out = ListArray::try_new(
            Arc::new(Field::new(
                "item",
                DataType::Struct(item_fields(&element)),
                true,
            )),
            lists.offsets().clone(),
            Arc::new(items),
            lists.nulls().cloned(),
        )?;
        Ok(ColumnarValue::Array(Arc::new(out)))
    }
}

/// The field metadata that marks a list column as one of PostgreSQL's
/// vector types (`int2vector`, `oidvector`: the wire server's catalog),
/// whose subscripts start at 0.
pub const PG_VECTOR_KEY: &str = "tablesql.pg_vector";

/// `tablesql_subscripts(a, dim)`: the list `[1, ..., len]` of `a`'s
/// subscripts (what `generate_subscripts(a, 1)` becomes, see
/// `pg_spelling`), `[0, ..., len - 1]` of a vector's ([`PG_VECTOR_KEY`]);
/// empty in any other dimension, as PostgreSQL yields no row there for a
/// one-dimensional array.
pub fn subscripts_udf() -> ScalarUDF {
    ScalarUDF::new_from_impl(Subscripts {
        signature: Signature::any(2, Volatility::Immutable),
    })
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct Subscripts {
    signature: Signature,
}

impl ScalarUDFImpl for Subscripts {
    fn name(&self) -> &str {
        SUBSCRIPTS
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        match args {
            [DataType::List(_), dim] if dim.is_integer() => Ok(DataType::List(Arc::new(
                Field::new("item", DataType::Int32, true),
            ))),
            other => plan_err!("generate_subscripts takes an array and a dimension, not {other:?}"),
        }
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let [array, dims] = arrays.as_slice() else {
            return exec_err!("generate_subscripts takes an array and a dimension");
        };
        let lists = as_list_array(array)?;
        let first = match args.arg_fields.first() {
            Some(f) if f.metadata().contains_key(PG_VECTOR_KEY) => 0,
            _ => 1,
        };
        let dims = datafusion::arrow::compute::cast(dims, &DataType::Int64)?;
        let dims = datafusion::common::cast::as_int64_array(&dims)?;
        let mut out = ListBuilder::new(Int32Builder::new());
        for i in 0..lists.len() {
            if lists.is_null(i) || dims.is_null(i) {
                out.append_null();
                continue;
            }
            if dims.value(i) == 1 {
                let len = lists.value_length(i);
                out.values()
                    .append_slice(&(first..len + first).collect::<Vec<_>>());
            }
            out.append(true);
        }
        Ok(ColumnarValue::Array(Arc::new(out.finish())))
    }
}

/// A function's answer `out` (a value a row) shaped as its arguments:
/// one scalar where every argument is one, which DataFusion spreads over
/// the rows; the array otherwise.
pub(crate) fn shaped_like(args: &[ColumnarValue], out: ArrayRef) -> Result<ColumnarValue> {
    if args.iter().all(|a| matches!(a, ColumnarValue::Scalar(_))) {
        return Ok(ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?));
    }
    Ok(ColumnarValue::Array(out))
}

/// `json_extract_path_text(json, key, ...)`, PostgreSQL's: the value at
/// the path of keys (or array positions) in a JSON text, as text: a
/// string without its quotes, another value as JSON; NULL where the path
/// leads nowhere, the JSON is NULL or does not parse. What reads a raw
/// table's `_properties`.
pub fn json_extract_path_text_udf() -> ScalarUDF {
    ScalarUDF::new_from_impl(JsonExtractPathText {
        signature: Signature::variadic_any(Volatility::Immutable),
    })
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct JsonExtractPathText {
    signature: Signature,
}

/// The value at `path` in `json`, as `json_extract_path_text` answers it.
fn extract_path_text(json: &str, path: &[Option<String>]) -> Option<String> {
    let mut at: serde_json::Value = serde_json::from_str(json).ok()?;
    for step in path {
        let step = step.as_deref()?;
        at = match at {
            serde_json::Value::Object(mut o) => o.remove(step)?,
            serde_json::Value::Array(mut a) => {
                let i: usize = step.parse().ok()?;
                if i >= a.len() {
                    return None;
                }
                a.swap_remove(i)
            }
            _ => return None,
        };
    }
    match at {
        serde_json::Value::Null => None,
        serde_json::Value::String(s) => Some(s),
        other => Some(other.to_string()),
    }
}

impl ScalarUDFImpl for JsonExtractPathText {
    fn name(&self) -> &str {
        "json_extract_path_text"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let Some((json, path)) = arrays.split_first() else {
            return exec_err!("json_extract_path_text takes a JSON text and a path");
        };
        let text = |a: &ArrayRef, row: usize| -> Result<Option<String>> {
            Ok(match ScalarValue::try_from_array(a, row)? {
                ScalarValue::Utf8(s) | ScalarValue::LargeUtf8(s) | ScalarValue::Utf8View(s) => s,
                v if v.is_null() => None,
                other => Some(other.to_string()),
            })
        };
        let mut out = StringBuilder::new();
        for row in 0..json.len() {
            let steps = path
                .iter()
                .map(|p| text(p, row))
                .collect::<Result<Vec<_>>>()?;
            match text(json, row)? {
                Some(j) => out.append_option(extract_path_text(&j, &steps)),
                None => out.append_null(),
            }
        }
        shaped_like(&args.args, Arc::new(out.finish()))
    }
}

/// `json_build_object(k1, v1, ...)`: a JSON object of the pairs, as text,
/// keys as text and values as JSON numbers, booleans, strings or null.
pub fn json_build_object_udf() -> ScalarUDF {
    ScalarUDF::new_from_impl(JsonBuildObject {
        signature: Signature::variadic_any(Volatility::Immutable),
    })
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct JsonBuildObject {
    signature: Signature,
}

impl ScalarUDFImpl for JsonBuildObject {
    fn name(&self) -> &str {
        "json_build_object"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        if !args.args.len().is_multiple_of(2) {
            return exec_err!("json_build_object takes an even number of arguments");
        }
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let rows = arrays.first().map_or(1, |a| a.len());
        let mut out = StringBuilder::new();
        for row in 0..rows {
            let mut object = serde_json::Map::new();
            for pair in arrays.chunks(2) {
                let [k, v] = pair else { continue };
                let key = ScalarValue::try_from_array(k, row)?;
                if key.is_null() {
                    return exec_err!("json_build_object: a key must not be null");
                }
                let key = match key {
                    ScalarValue::Utf8(Some(s))
                    | ScalarValue::LargeUtf8(Some(s))
                    | ScalarValue::Utf8View(Some(s)) => s,
                    other => other.to_string(),
                };
                object.insert(key, json_value(&ScalarValue::try_from_array(v, row)?));
            }
            out.append_value(serde_json::Value::Object(object).to_string());
        }
        shaped_like(&args.args, Arc::new(out.finish()))
    }
}

/// `quote_literal(x)`: `x` as text quoted to be a SQL string literal
/// (`'O''Reilly'`, `E'a\\\\b'` where a backslash is doubled), NULL for NULL;
/// `quote_nullable(x)`: the same, but the text `NULL` for NULL. Clients
/// inline their arguments with it (asyncpg's `copy_from_query`).
pub fn quote_udfs() -> [ScalarUDF; 2] {
    [false, true].map(|nullable| {
        ScalarUDF::new_from_impl(Quote {
            nullable,
            signature: Signature::any(1, Volatility::Immutable),
        })
    })
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct Quote {
    nullable: bool,
    signature: Signature,
}

impl ScalarUDFImpl for Quote {
    fn name(&self) -> &str {
        if self.nullable {
            "quote_nullable"
        } else {
            "quote_literal"
        }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let [arg] = args.args.as_slice() else {
            return exec_err!("{} takes one argument", self.name());
        };
        // A constant is quoted once.
        let (array, scalar) = match arg {
            ColumnarValue::Scalar(v) => (v.to_array()?, true),
            ColumnarValue::Array(a) => (a.clone(), false),
        };
        let options = crate::load::copy::text_options();
        let formatter = crate::load::pg_text::formatter(array.as_ref(), &options)?;
        let booleans = array
            .as_any()
            .downcast_ref::<datafusion::arrow::array::BooleanArray>();
        // `logical_nulls`: an untyped NULL's array has no mask.
        let nulls = array.logical_nulls();
        let mut out = StringBuilder::new();
        for i in 0..array.len() {
            if nulls.as_ref().is_some_and(|n| n.is_null(i)) {
                if self.nullable {
                    out.append_value("NULL");
                } else {
                    out.append_null();
                }
                continue;
            }
            // A value's text as PostgreSQL writes it: `t`, not `true`.
            let text = match booleans {
                Some(b) => if b.value(i) { "t" } else { "f" }.to_owned(),
                None => formatter.value(i).to_string(),
            };
            out.append_value(quote_literal(&text));
        }
        let out = out.finish();
        if scalar {
            return Ok(ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?));
        }
        Ok(ColumnarValue::Array(Arc::new(out)))
    }
}

/// `pg_typeof(x)`: the name of `x`'s type as PostgreSQL prints a
/// regtype (`integer`, `timestamp with time zone`), for the type the wire
/// describes a value of the Arrow type as. A literal's type is
/// DataFusion's: `pg_typeof(1)` is `bigint`.
pub fn pg_typeof_udf() -> ScalarUDF {
    ScalarUDF::new_from_impl(PgTypeof {
        signature: Signature::any(1, Volatility::Immutable),
    })
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct PgTypeof {
    signature: Signature,
}

impl ScalarUDFImpl for PgTypeof {
    fn name(&self) -> &str {
        "pg_typeof"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let [arg] = args.arg_fields.as_slice() else {
            return exec_err!("pg_typeof takes one argument");
        };
        let name = regtype_name(arg.data_type());
        Ok(ColumnarValue::Scalar(ScalarValue::Utf8(Some(name))))
    }
}

/// PostgreSQL's printed name of the type an Arrow type is sent as
/// (arrow-pg's mapping, which the wire server describes columns by).
pub fn regtype_name(t: &DataType) -> String {
    use DataType as T;
    match t {
        T::Null => "unknown",
        T::Boolean => "boolean",
        T::Int8 | T::Int16 | T::UInt8 => "smallint",
        T::Int32 | T::UInt16 => "integer",
        T::Int64 | T::UInt32 => "bigint",
        T::UInt64 | T::Decimal32(..) | T::Decimal64(..) | T::Decimal128(..) | T::Decimal256(..) => {
            "numeric"
        }
        T::Float16 | T::Float32 => "real",
        T::Float64 => "double precision",
        T::Utf8 | T::LargeUtf8 | T::Utf8View => "text",
        T::Binary | T::LargeBinary | T::BinaryView | T::FixedSizeBinary(_) => "bytea",
        T::Date32 | T::Date64 => "date",
        T::Timestamp(_, Some(_)) => "timestamp with time zone",
        T::Timestamp(_, None) => "timestamp without time zone",
        T::Time32(_) | T::Time64(_) => "time without time zone",
        T::Interval(_) | T::Duration(_) => "interval",
        T::List(f)
        | T::LargeList(f)
        | T::FixedSizeList(f, _)
        | T::ListView(f)
        | T::LargeListView(f) => {
            return format!("{}[]", regtype_name(f.data_type()));
        }
        T::Struct(_) => "record",
        T::Dictionary(_, value) => return regtype_name(value),
        _ => "unknown",
    }
    .to_owned()
}

/// `pg_is_in_recovery()`, false: tablesql is never a standby replaying
/// WAL; and `pg_is_other_temp_schema(oid)`, false: no schema is another
/// session's temporary one. Tools ask both at connect (dbt's docs, pgAdmin).
pub fn constant_udfs() -> [ScalarUDF; 2] {
    let is_in_recovery = create_udf(
        "pg_is_in_recovery",
        vec![],
        DataType::Boolean,
        Volatility::Stable,
        Arc::new(|_| Ok(ColumnarValue::Scalar(ScalarValue::Boolean(Some(false))))),
    );
    let other_temp = create_udf(
        "pg_is_other_temp_schema",
        vec![DataType::Int64],
        DataType::Boolean,
        Volatility::Stable,
        // False, but NULL for NULL (the function is strict).
        Arc::new(|args: &[ColumnarValue]| match args.first() {
            Some(ColumnarValue::Array(a)) => Ok(ColumnarValue::Array(Arc::new(
                (0..a.len())
                    .map(|i| a.is_valid(i).then_some(false))
                    .collect::<datafusion::arrow::array::BooleanArray>(),
            ))),
            Some(ColumnarValue::Scalar(v)) => Ok(ColumnarValue::Scalar(ScalarValue::Boolean(
                (!v.is_null()).then_some(false),
            ))),
            None => exec_err!("pg_is_other_temp_schema takes one argument"),
        }),
    );
    [is_in_recovery, other_temp]
}

/// A string as a SQL literal, as PostgreSQL's `quote_literal` writes it.
pub fn quote_literal(v: &str) -> String {
    let quoted = v.replace('\'', "''");
    if v.contains('\\') {
        format!("E'{}'", quoted.replace('\\', "\\\\"))
    } else {
        format!("'{quoted}'")
    }
}

fn json_value(v: &ScalarValue) -> serde_json::Value {
    use serde_json::Value as J;
    match v {
        v if v.is_null() => J::Null,
        ScalarValue::Boolean(Some(b)) => J::Bool(*b),
        ScalarValue::Int8(Some(n)) => J::from(*n),
        ScalarValue::Int16(Some(n)) => J::from(*n),
        ScalarValue::Int32(Some(n)) => J::from(*n),
        ScalarValue::Int64(Some(n)) => J::from(*n),
        ScalarValue::UInt8(Some(n)) => J::from(*n),
        ScalarValue::UInt16(Some(n)) => J::from(*n),
        ScalarValue::UInt32(Some(n)) => J::from(*n),
        ScalarValue::UInt64(Some(n)) => J::from(*n),
        ScalarValue::Float32(Some(x)) => {
            serde_json::Number::from_f64(f64::from(*x)).map_or(J::Null, J::Number)
        }
        ScalarValue::Float64(Some(x)) => {
            serde_json::Number::from_f64(*x).map_or(J::Null, J::Number)
        }
        ScalarValue::Utf8(Some(s))
        | ScalarValue::LargeUtf8(Some(s))
        | ScalarValue::Utf8View(Some(s)) => J::String(s.clone()),
        other => J::String(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_values_keep_their_types() {
        assert_eq!(
            json_value(&ScalarValue::Int64(Some(3))),
            serde_json::json!(3)
        );
        assert_eq!(
            json_value(&ScalarValue::Boolean(Some(true))),
            serde_json::json!(true)
        );
        assert_eq!(
            json_value(&ScalarValue::Utf8(None)),
            serde_json::Value::Null
        );
        assert_eq!(
            json_value(&ScalarValue::from("a\"b")),
            serde_json::json!("a\"b")
        );
    }

    #[test]
    fn quote_literal_doubles_quotes_and_marks_backslashes() {
        assert_eq!(quote_literal("O'Reilly"), "'O''Reilly'");
        assert_eq!(quote_literal("a\\b"), "E'a\\\\b'");
        assert_eq!(quote_literal(""), "''");
    }

    #[test]
    fn like_escape_moves_the_escape_to_backslash() {
        assert_eq!(like_escape("pg/_%", "/").as_deref(), Ok("pg\\_%"));
        assert_eq!(like_escape("a//b", "/").as_deref(), Ok("a/b"));
        assert_eq!(like_escape("a\\b", "/").as_deref(), Ok("a\\\\b"));
        assert_eq!(like_escape("a!%", "!").as_deref(), Ok("a\\%"));
        assert_eq!(like_escape("a\\%", "").as_deref(), Ok("a\\\\%"));
        assert!(like_escape("abc/", "/").is_err());
        assert!(like_escape("abc", "//").is_err());
    }
}
