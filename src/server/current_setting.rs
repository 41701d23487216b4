//! `current_setting(name)` and `set_config(name, value, is_local)`: a
//! session's parameters to and from SQL (Grafana and pgjdbc read
//! `server_version_num` and `search_path` this way; asyncpg turns `jit`
//! off with `set_config`).

use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};

use datafusion::arrow::array::{Array, StringArray};
use datafusion::arrow::datatypes::DataType;
use datafusion::common::cast::as_string_array;
use datafusion::common::{ScalarValue, exec_err};
use datafusion::error::Result;
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, TypeSignature,
    Volatility,
};

use super::command::Vars;

/// `current_setting` over one session's parameters.
pub fn udf(vars: Arc<Mutex<Vars>>) -> ScalarUDF {
    ScalarUDF::new_from_impl(SessionParameters {
        vars,
        set: false,
        // Volatile, not Stable: a prepared plan is optimized once, and a
        // Stable call would be folded to the value at Parse.
        signature: Signature::exact(vec![DataType::Utf8], Volatility::Volatile),
    })
}

/// `set_config` over one session's parameters: sets one as `SET` does
/// (`is_local` included: a transaction sets nothing apart here) and
/// returns its new value. Unlike `SET`, it sends the client no
/// ParameterStatus, and the engine's own settings (`tablesql.*`,
/// `datafusion.*`) are refused: they change only through `SET`.
pub fn set_config_udf(vars: Arc<Mutex<Vars>>) -> ScalarUDF {
    use DataType::{Boolean, Utf8};
    ScalarUDF::new_from_impl(SessionParameters {
        vars,
        set: true,
        signature: Signature::one_of(
            vec![TypeSignature::Exact(vec![Utf8, Utf8, Boolean])],
            Volatility::Volatile,
        ),
    })
}

#[derive(Debug)]
struct SessionParameters {
    vars: Arc<Mutex<Vars>>,
    set: bool,
    signature: Signature,
}

// One instance per session: identity is the session's parameters.
impl PartialEq for SessionParameters {
    fn eq(&self, other: &Self) -> bool {
        self.set == other.set && Arc::ptr_eq(&self.vars, &other.vars)
    }
}

impl Eq for SessionParameters {}

impl Hash for SessionParameters {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.set.hash(state);
        Arc::as_ptr(&self.vars).hash(state);
    }
}

impl SessionParameters {
    fn lookup(&self, name: &str) -> Result<String> {
        let Ok(vars) = self.vars.lock() else {
            return exec_err!("session parameters unavailable");
        };
        match vars.get(name) {
            Ok(v) => Ok(v.to_owned()),
            Err(_) => exec_err!("unrecognized configuration parameter \"{name}\""),
        }
    }

    fn assign(&self, name: &str, value: &str) -> Result<String> {
        let lower = name.to_ascii_lowercase();
        if lower.starts_with("tablesql.") || lower.starts_with("datafusion.") {
            return exec_err!("set_config cannot change \"{name}\": use SET");
        }
        let Ok(mut vars) = self.vars.lock() else {
            return exec_err!("session parameters unavailable");
        };
        match vars.set(name, value) {
            Ok(_) => Ok(vars
                .get(name)
                .map(str::to_owned)
                .unwrap_or_else(|_| value.to_owned())),
            Err(e) => exec_err!("{e}"),
        }
    }
}

impl ScalarUDFImpl for SessionParameters {
    fn name(&self) -> &str {
        if self.set {
            "set_config"
        } else {
            "current_setting"
        }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let Some(names) = arrays.first() else {
            return exec_err!("{} takes a parameter name", self.name());
        };
        let names = as_string_array(names)?;
        let values = match (self.set, arrays.get(1)) {
            (true, Some(v)) => Some(as_string_array(v)?),
            (true, None) => return exec_err!("set_config takes a name and a value"),
            (false, _) => None,
        };
        let out = (0..names.len())
            .map(|i| {
                if names.is_null(i) {
                    return Ok(None);
                }
                match values {
                    Some(v) if v.is_null(i) => {
                        exec_err!("set_config of a NULL value is not supported: use RESET")
                    }
                    Some(v) => self.assign(names.value(i), v.value(i)).map(Some),
                    None => self.lookup(names.value(i)).map(Some),
                }
            })
            .collect::<Result<StringArray>>()?;
        // Scalar arguments give one value, which DataFusion spreads over the rows.
        if args
            .args
            .iter()
            .all(|a| matches!(a, ColumnarValue::Scalar(_)))
        {
            return Ok(ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?));
        }
        Ok(ColumnarValue::Array(Arc::new(out)))
    }
}
