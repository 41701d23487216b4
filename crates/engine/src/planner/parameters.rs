//! PostgreSQL's session parameters: what drivers and tools `SET` on connect
//! and read back (`application_name`, `DateStyle`, `search_path`,
//! `statement_timeout`, `server_version_num`), with `SHOW`,
//! `current_setting(name)` and `set_config(name, value, is_local)`.
//!
//! tablesql's own settings (`tablesql.*`) and DataFusion's (`datafusion.*`)
//! are DataFusion's session config; these are the rest. They were the wire
//! server's alone, so `SET application_name` worked over the wire and
//! failed in the shell. They live in a config extension that every session
//! gets afresh (`Engine::session`), as `currval`'s state does, so
//! each front end's session has them and the two functions read them from
//! the statement's config.

use std::any::Any;
use std::collections::BTreeMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use datafusion::arrow::array::{Array, StringArray};
use datafusion::arrow::datatypes::DataType;
use datafusion::common::cast::as_string_array;
use datafusion::common::config::{ConfigEntry, ConfigExtension, ExtensionOptions};
use datafusion::common::{DataFusionError, exec_err};
use datafusion::config::ConfigOptions;
use datafusion::error::Result;
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, TypeSignature,
    Volatility,
};
use datafusion::sql::sqlparser::ast::{Expr, Set, Statement, TransactionMode, Value};

use super::identity::{PG_VERSION, PG_VERSION_NUM};

/// Why a parameter cannot be set or read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParameterError {
    /// No such parameter.
    #[error("unrecognized configuration parameter \"{0}\"")]
    Unknown(String),
    /// A parameter a client may read but not change.
    #[error("parameter \"{0}\" cannot be changed")]
    ReadOnly(String),
    /// A value the parameter cannot take.
    #[error("{0}")]
    InvalidValue(String),
    /// A form of `SET` that sets nothing here.
    #[error("{0}")]
    NotSupported(String),
}

/// A parameter's failure inside a function DataFusion runs, as DataFusion
/// carries ours: it keeps its SQLSTATE (`exec::sqlstate`).
fn external(e: ParameterError) -> DataFusionError {
    DataFusionError::External(Box::new(e))
}

impl ParameterError {
    /// The SQLSTATE a client is told (`crate::sqlstate`).
    pub fn sqlstate(&self) -> &'static str {
        use crate::sqlstate as code;
        match self {
            ParameterError::Unknown(_) => code::UNDEFINED_OBJECT,
            ParameterError::ReadOnly(_) => code::CANT_CHANGE_RUNTIME_PARAM,
            ParameterError::InvalidValue(_) => code::INVALID_PARAMETER_VALUE,
            ParameterError::NotSupported(_) => code::FEATURE_NOT_SUPPORTED,
        }
    }
}

/// Parameters a client is told about when they change (PostgreSQL's
/// GUC_REPORT set), by their name in lower case and as reported.
const REPORTED: &[(&str, &str)] = &[
    ("application_name", "application_name"),
    ("client_encoding", "client_encoding"),
    ("datestyle", "DateStyle"),
    ("intervalstyle", "IntervalStyle"),
    ("timezone", "TimeZone"),
    ("search_path", "search_path"),
    ("standard_conforming_strings", "standard_conforming_strings"),
];

/// Parameters a client may read but not change.
const READ_ONLY: &[&str] = &[
    "server_version",
    "server_version_num",
    "server_encoding",
    "integer_datetimes",
    "max_identifier_length",
    "is_superuser",
    "max_index_keys",
    "block_size",
];

/// Every session's parameters before any `SET`.
fn defaults() -> BTreeMap<String, String> {
    [
        ("application_name", ""),
        ("client_encoding", "UTF8"),
        ("datestyle", "ISO, MDY"),
        ("intervalstyle", "postgres"),
        ("timezone", "UTC"),
        ("search_path", "public"),
        ("standard_conforming_strings", "on"),
        ("extra_float_digits", "1"),
        ("bytea_output", "hex"),
        ("lc_messages", "C"),
        ("server_version", PG_VERSION),
        ("server_version_num", PG_VERSION_NUM),
        ("server_encoding", "UTF8"),
        ("integer_datetimes", "on"),
        ("max_identifier_length", "63"),
        ("is_superuser", "on"),
        // PostgreSQL's compiled-in limits, which pgJDBC reads.
        ("max_index_keys", "32"),
        ("block_size", "8192"),
        ("statement_timeout", "0"),
        // No JIT compiler here; asyncpg turns it off on connect.
        ("jit", "off"),
        // The open block's level, or the default's (`engine::block`):
        // read committed unless set.
        ("transaction_isolation", "read committed"),
        ("default_transaction_isolation", "read committed"),
        ("default_transaction_read_only", "off"),
        ("transaction_read_only", "off"),
    ]
    .iter()
    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
    .collect()
}

#[derive(Debug)]
struct Values {
    values: BTreeMap<String, String>,
    statement_timeout: Option<Duration>,
    /// Reported parameters changed since the front end last asked, each
    /// with its latest value.
    reported: BTreeMap<String, String>,
}

impl Default for Values {
    fn default() -> Self {
        Self {
            values: defaults(),
            statement_timeout: None,
            reported: BTreeMap::new(),
        }
    }
}

/// One session's parameters (see the module doc). Clones share them: a
/// statement's config is a clone of its session's.
#[derive(Debug, Clone, Default)]
pub struct SessionParameters {
    values: Arc<Mutex<Values>>,
}

impl SessionParameters {
    fn lock(&self) -> MutexGuard<'_, Values> {
        self.values.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The parameters of the session whose config `options` is.
    pub fn of(options: &ConfigOptions) -> Result<&Self> {
        options
            .extensions
            .get::<Self>()
            .ok_or_else(|| DataFusionError::Internal("no session parameters".into()))
    }

    /// Sets `name` (any case) to `value`, as `SET` does; a parameter it
    /// does not know is kept, as PostgreSQL keeps a custom one.
    pub fn set(&self, name: &str, value: &str) -> Result<(), ParameterError> {
        self.assign(name, value, true)
    }

    /// As [`Self::set`]; `report` false leaves the change unreported
    /// (`set_config`'s).
    fn assign(&self, name: &str, value: &str, report: bool) -> Result<(), ParameterError> {
        let name = name.to_ascii_lowercase();
        if READ_ONLY.contains(&name.as_str()) {
            return Err(ParameterError::ReadOnly(name));
        }
        let mut values = self.lock();
        let value = match name.as_str() {
            "statement_timeout" => {
                let t = duration_ms(value)?;
                values.statement_timeout = (t > 0).then(|| Duration::from_millis(t));
                t.to_string()
            }
            // PostgreSQL's names, kept as given (`read uncommitted` runs
            // as read committed, and shows as itself).
            "default_transaction_isolation" | "transaction_isolation" => {
                if crate::exec::write::reads::Isolation::named(value).is_none() {
                    return Err(ParameterError::InvalidValue(format!(
                        "invalid value for parameter \"{name}\": \"{value}\""
                    )));
                }
                value.trim().to_ascii_lowercase()
            }
            "client_encoding" => {
                let v = value.to_ascii_uppercase().replace('-', "");
                if v != "UTF8" && v != "UNICODE" {
                    return Err(ParameterError::InvalidValue(format!(
                        "client_encoding {value:?} is not supported: tablesql speaks UTF8"
                    )));
                }
                "UTF8".to_owned()
            }
            _ => value.to_owned(),
        };
        if let Some((_, shown)) = REPORTED.iter().find(|(lower, _)| *lower == name)
            && report
        {
            values.reported.insert((*shown).to_owned(), value.clone());
        }
        values.values.insert(name, value);
        Ok(())
    }

    /// A parameter's value, by its name in any case.
    pub fn get(&self, name: &str) -> Result<String, ParameterError> {
        self.lock()
            .values
            .get(&name.to_ascii_lowercase())
            .cloned()
            .ok_or_else(|| ParameterError::Unknown(name.to_owned()))
    }

    /// Every parameter and its value, in name order (`SHOW ALL`).
    pub fn all(&self) -> Vec<(String, String)> {
        self.lock()
            .values
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    /// `statement_timeout`, when one is set.
    pub fn statement_timeout(&self) -> Option<Duration> {
        self.lock().statement_timeout
    }

    /// The reported parameters (`DateStyle`, `application_name`, ...)
    /// changed since the last call, as the wire's ParameterStatus names
    /// them.
    pub fn take_reported(&self) -> Vec<(String, String)> {
        std::mem::take(&mut self.lock().reported)
            .into_iter()
            .collect()
    }

    /// Back to the defaults (`DISCARD ALL`).
    pub fn reset(&self) {
        *self.lock() = Values::default();
    }

    /// The parameters every session starts with, in name order.
    pub fn default_names() -> Vec<String> {
        defaults().into_keys().collect()
    }
}

impl ConfigExtension for SessionParameters {
    const PREFIX: &'static str = "tablesql_parameters";
}

// State, not DataFusion settings: `SET name` reaches them through the
// engine, never through DataFusion's config.
impl ExtensionOptions for SessionParameters {
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

/// `statement_timeout` values: milliseconds, or a number with a unit.
fn duration_ms(value: &str) -> Result<u64, ParameterError> {
    let bad = || {
        ParameterError::InvalidValue(format!(
            "invalid value for parameter \"statement_timeout\": {value:?}"
        ))
    };
    let v = value.trim().to_ascii_lowercase();
    let split = v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len());
    let (digits, unit) = v.split_at(split);
    let n: u64 = digits.parse().map_err(|_| bad())?;
    let factor = match unit.trim() {
        "" | "ms" => 1,
        "s" => 1_000,
        "min" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return Err(bad()),
    };
    Ok(n.saturating_mul(factor))
}

/// A `SET` of a session parameter as (name, value); `None` for other
/// statements and for the settings that are DataFusion's config
/// (`tablesql.*`, `datafusion.*`).
pub fn set_target(statement: &Statement) -> Option<Result<(String, String), ParameterError>> {
    let Statement::Set(set) = statement else {
        return None;
    };
    Some(match set {
        Set::SingleAssignment {
            variable, values, ..
        } => {
            let name = variable.to_string();
            if is_engine_setting(&name) {
                return None;
            }
            Ok((
                name,
                values.iter().map(expr_text).collect::<Vec<_>>().join(", "),
            ))
        }
        Set::SetTimeZone { value, .. } => Ok(("timezone".to_owned(), expr_text(value))),
        // SET SESSION CHARACTERISTICS AS TRANSACTION ...: the level a
        // `BEGIN` opens its block at (`engine::block`; a block's own `SET
        // TRANSACTION` is the block's).
        Set::SetTransaction { modes, .. } => match modes.first() {
            Some(TransactionMode::IsolationLevel(level)) => Ok((
                "default_transaction_isolation".to_owned(),
                level.to_string().to_ascii_lowercase(),
            )),
            Some(TransactionMode::AccessMode(mode)) => Ok((
                "default_transaction_read_only".to_owned(),
                if mode.to_string().eq_ignore_ascii_case("READ ONLY") {
                    "on"
                } else {
                    "off"
                }
                .to_owned(),
            )),
            None => Err(ParameterError::NotSupported(
                "SET TRANSACTION without a mode".into(),
            )),
        },
        other => Err(ParameterError::NotSupported(format!(
            "{other} is not supported"
        ))),
    })
}

/// Whether a name is one of DataFusion's config (`tablesql.*`, `datafusion.*`).
fn is_engine_setting(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    lower.starts_with("datafusion.") || lower.starts_with("tablesql.")
}

fn expr_text(expr: &Expr) -> String {
    match expr {
        Expr::Value(v) => match &v.value {
            Value::SingleQuotedString(s) | Value::DoubleQuotedString(s) => s.clone(),
            Value::Number(n, _) => n.clone(),
            Value::Boolean(b) => if *b { "on" } else { "off" }.to_owned(),
            other => other.to_string(),
        },
        Expr::Identifier(i) => i.value.clone(),
        other => other.to_string(),
    }
}

/// What a `SHOW` of session parameters answers: the columns' names, and
/// whether it is `SHOW ALL` (`name`, `setting`); `None` for other
/// statements and the settings that are DataFusion's config.
pub fn show_target(statement: &Statement) -> Option<Shown> {
    let Statement::ShowVariable { variable } = statement else {
        return None;
    };
    // The parser splits a dotted name into its parts.
    let parts: Vec<&str> = variable.iter().map(|i| i.value.as_str()).collect();
    if is_engine_setting(&parts.join(".")) {
        return None;
    }
    let words = parts.join(" ");
    Some(match words.to_ascii_lowercase().as_str() {
        "all" => Shown::All,
        // The parameter behind SHOW's multi-word spellings.
        "transaction isolation level" => Shown::One("transaction_isolation".to_owned()),
        "time zone" => Shown::One("timezone".to_owned()),
        other => Shown::One(other.replace(' ', "_")),
    })
}

/// What a `SHOW` shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Shown {
    /// `SHOW ALL`: every parameter, as `name` and `setting`.
    All,
    /// One parameter, in a column of its name.
    One(String),
}

impl Shown {
    /// The result's column names.
    pub fn columns(&self) -> Vec<String> {
        match self {
            Shown::All => vec!["name".to_owned(), "setting".to_owned()],
            Shown::One(name) => vec![name.clone()],
        }
    }
}

/// `current_setting(name)`: a session parameter's value.
pub fn current_setting_udf() -> ScalarUDF {
    ScalarUDF::new_from_impl(ParameterFunction {
        set: false,
        // Volatile, not Stable: a prepared plan is optimized once, and a
        // Stable call would be folded to the value at Parse.
        signature: Signature::exact(vec![DataType::Utf8], Volatility::Volatile),
    })
}

/// `set_config(name, value, is_local)`: sets a parameter as `SET` does
/// (`is_local` included: a transaction sets nothing apart here) and
/// returns its new value. Unlike `SET`, it reports nothing to a wire
/// client, and DataFusion's config (`tablesql.*`, `datafusion.*`) is
/// refused: it changes only through `SET`.
pub fn set_config_udf() -> ScalarUDF {
    use DataType::{Boolean, Utf8};
    ScalarUDF::new_from_impl(ParameterFunction {
        set: true,
        signature: Signature::one_of(
            vec![TypeSignature::Exact(vec![Utf8, Utf8, Boolean])],
            Volatility::Volatile,
        ),
    })
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct ParameterFunction {
    set: bool,
    signature: Signature,
}

impl ParameterFunction {
    fn assign(parameters: &SessionParameters, name: &str, value: &str) -> Result<String> {
        if is_engine_setting(name) {
            return Err(external(ParameterError::NotSupported(format!(
                "set_config cannot change \"{name}\": use SET"
            ))));
        }
        // Not a ParameterStatus: set_config's change goes unreported.
        match parameters.assign(name, value, false) {
            Ok(()) => Ok(parameters.get(name).unwrap_or_else(|_| value.to_owned())),
            Err(e) => Err(external(e)),
        }
    }
}

impl ScalarUDFImpl for ParameterFunction {
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
        let parameters = SessionParameters::of(&args.config_options)?;
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
                let name = names.value(i);
                match values {
                    Some(v) if v.is_null(i) => Err(external(ParameterError::NotSupported(
                        "set_config of a NULL value is not supported: use RESET".into(),
                    ))),
                    Some(v) => Self::assign(parameters, name, v.value(i)).map(Some),
                    None => match parameters.get(name) {
                        Ok(v) => Ok(Some(v)),
                        Err(e) => Err(external(e)),
                    },
                }
            })
            .collect::<Result<StringArray>>()?;
        super::pg_functions::shaped_like(&args.args, Arc::new(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_parse_like_postgres() {
        assert_eq!(duration_ms("150"), Ok(150));
        assert_eq!(duration_ms("2s"), Ok(2000));
        assert_eq!(duration_ms("1min"), Ok(60_000));
        assert!(duration_ms("soon").is_err());
    }

    #[test]
    fn set_and_show() {
        let p = SessionParameters::default();
        p.set("application_name", "bi").unwrap();
        assert_eq!(
            p.take_reported(),
            [("application_name".to_owned(), "bi".to_owned())]
        );
        p.set("statement_timeout", "1s").unwrap();
        assert!(p.take_reported().is_empty());
        assert_eq!(p.statement_timeout(), Some(Duration::from_secs(1)));
        assert_eq!(p.get("STATEMENT_TIMEOUT").unwrap(), "1000");
        // A clone is the same session's.
        assert_eq!(p.clone().get("application_name").unwrap(), "bi");
        assert_eq!(
            p.set("server_version", "1"),
            Err(ParameterError::ReadOnly("server_version".into()))
        );
        assert!(p.set("client_encoding", "LATIN1").is_err());
        assert!(p.get("no_such_thing").is_err());
        p.reset();
        assert_eq!(p.get("application_name").unwrap(), "");
        assert_eq!(p.statement_timeout(), None);
    }
}
