//! `current_setting(name)`: a session's parameters to SQL (Grafana and
//! pgjdbc read `server_version_num` and `search_path` this way).

use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};

use datafusion::arrow::array::{Array, StringArray};
use datafusion::arrow::datatypes::DataType;
use datafusion::common::{ScalarValue, exec_err};
use datafusion::error::Result;
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

use super::command::Vars;

/// The UDF over one session's parameters.
pub fn udf(vars: Arc<Mutex<Vars>>) -> ScalarUDF {
    ScalarUDF::new_from_impl(CurrentSetting {
        vars,
        // Volatile, not Stable: a prepared plan is optimized once, and a
        // Stable call would be folded to the value at Parse.
        signature: Signature::exact(vec![DataType::Utf8], Volatility::Volatile),
    })
}

#[derive(Debug)]
struct CurrentSetting {
    vars: Arc<Mutex<Vars>>,
    signature: Signature,
}

// One instance per session: identity is the session's parameters.
impl PartialEq for CurrentSetting {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.vars, &other.vars)
    }
}

impl Eq for CurrentSetting {}

impl Hash for CurrentSetting {
    fn hash<H: Hasher>(&self, state: &mut H) {
        Arc::as_ptr(&self.vars).hash(state);
    }
}

impl CurrentSetting {
    fn lookup(&self, name: &str) -> Result<String> {
        let Ok(vars) = self.vars.lock() else {
            return exec_err!("session parameters unavailable");
        };
        match vars.get(name) {
            Ok(v) => Ok(v.to_owned()),
            Err(_) => exec_err!("unrecognized configuration parameter \"{name}\""),
        }
    }
}

impl ScalarUDFImpl for CurrentSetting {
    fn name(&self) -> &str {
        "current_setting"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        match args.args.first() {
            Some(ColumnarValue::Scalar(ScalarValue::Utf8(Some(name)))) => Ok(
                ColumnarValue::Scalar(ScalarValue::Utf8(Some(self.lookup(name)?))),
            ),
            Some(ColumnarValue::Scalar(_)) => Ok(ColumnarValue::Scalar(ScalarValue::Utf8(None))),
            Some(ColumnarValue::Array(names)) => {
                let Some(names) = names.as_any().downcast_ref::<StringArray>() else {
                    return exec_err!("current_setting takes a text argument");
                };
                let values = names
                    .iter()
                    .map(|n| n.map(|n| self.lookup(n)).transpose())
                    .collect::<Result<StringArray>>()?;
                Ok(ColumnarValue::Array(Arc::new(values)))
            }
            None => exec_err!("current_setting takes one argument"),
        }
    }
}
