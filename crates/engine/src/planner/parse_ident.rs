//! `parse_ident(text [, strict])`: a qualified name split into its parts as
//! PostgreSQL reads one, unquoted parts folded to lower case, quoted ones
//! kept, with spaces allowed around the dots. datafusion-pg-catalog's
//! splits at each dot and keeps the spaces, so ADBC's `adbc_ingest`, which
//! asks `$1::regclass` of `"public" . "t"`, found no table (its `regclass`
//! lookup reads the name with `parse_ident`).

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, BooleanArray, ListBuilder, StringBuilder};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Field};
use datafusion::common::cast::as_string_array;
use datafusion::common::exec_err;
use datafusion::error::Result;
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, TypeSignature,
    Volatility,
};

/// The parts of `text`. With `strict`, anything after the name is an
/// error; without, it ends the name.
pub fn parse_ident(text: &str, strict: bool) -> Result<Vec<String>, String> {
    let invalid = || format!("string is not a valid identifier: \"{text}\"");
    let mut parts = Vec::new();
    let mut rest = text.trim_start();
    loop {
        if let Some(quoted) = rest.strip_prefix('"') {
            let mut part = String::new();
            let mut chars = quoted.char_indices();
            let end = loop {
                match chars.next() {
                    Some((i, '"')) if quoted[i + 1..].starts_with('"') => {
                        part.push('"');
                        chars.next();
                    }
                    Some((i, '"')) => break i + 1,
                    Some((_, c)) => part.push(c),
                    None => return Err(format!("{}: unclosed double quotes", invalid())),
                }
            };
            if part.is_empty() {
                return Err(format!("{}: zero-length quoted identifier", invalid()));
            }
            parts.push(part);
            rest = &quoted[end..];
        } else {
            let starts = rest
                .chars()
                .next()
                .is_some_and(|c| c.is_alphabetic() || c == '_' || !c.is_ascii());
            if !starts {
                return Err(invalid());
            }
            let end = rest
                .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == '$' || !c.is_ascii()))
                .unwrap_or(rest.len());
            // PostgreSQL folds ASCII letters only (`downcase_identifier`).
            parts.push(rest[..end].to_ascii_lowercase());
            rest = &rest[end..];
        }
        let after = rest.trim_start();
        match after.strip_prefix('.') {
            Some(next) => rest = next.trim_start(),
            None => {
                rest = after;
                break;
            }
        }
    }
    if strict && !rest.is_empty() {
        return Err(invalid());
    }
    Ok(parts)
}

/// The SQL function.
pub fn parse_ident_udf() -> ScalarUDF {
    ScalarUDF::new_from_impl(ParseIdent {
        signature: Signature::one_of(
            vec![TypeSignature::Any(1), TypeSignature::Any(2)],
            Volatility::Immutable,
        ),
    })
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct ParseIdent {
    signature: Signature,
}

impl ScalarUDFImpl for ParseIdent {
    fn name(&self) -> &str {
        "parse_ident"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(DataType::List(Arc::new(Field::new(
            "item",
            DataType::Utf8,
            true,
        ))))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let Some(names) = arrays.first() else {
            return exec_err!("parse_ident takes a name");
        };
        let names = cast(names, &DataType::Utf8)?;
        let names = as_string_array(&names)?;
        let strict = match arrays.get(1) {
            Some(s) => Some(cast(s, &DataType::Boolean)?),
            None => None,
        };
        let strict = strict
            .as_ref()
            .and_then(|s| s.as_any().downcast_ref::<BooleanArray>());
        let mut out = ListBuilder::new(StringBuilder::new());
        for row in 0..names.len() {
            if names.is_null(row) || strict.is_some_and(|s| s.is_null(row)) {
                out.append(false);
                continue;
            }
            let strict = strict.is_none_or(|s| s.value(row));
            match parse_ident(names.value(row), strict) {
                Ok(parts) => {
                    for part in parts {
                        out.values().append_value(part);
                    }
                    out.append(true);
                }
                Err(e) => return exec_err!("{e}"),
            }
        }
        let out: ArrayRef = Arc::new(out.finish());
        Ok(ColumnarValue::Array(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_split_as_postgresql_splits_them() {
        // SELECT parse_ident(...) in PostgreSQL 15.
        assert_eq!(
            parse_ident("\"public\" . \"ingest\"", true).unwrap(),
            ["public", "ingest"]
        );
        assert_eq!(
            parse_ident("  Public.Tab  ", true).unwrap(),
            ["public", "tab"]
        );
        assert_eq!(
            parse_ident("\"Mixed \"\"Q\"\" Case\"", true).unwrap(),
            ["Mixed \"Q\" Case"]
        );
        assert_eq!(parse_ident("a.b$1.\"C\"", true).unwrap(), ["a", "b$1", "C"]);
        assert_eq!(parse_ident("a.b()", false).unwrap(), ["a", "b"]);
        assert!(parse_ident("a.b()", true).is_err());
        assert!(parse_ident("a..b", true).is_err());
        assert!(parse_ident("\"\"", true).is_err());
        assert!(parse_ident("\"open", true).is_err());
        assert!(parse_ident("1a", true).is_err());
        assert_eq!(parse_ident("Äb.C", true).unwrap(), ["Äb", "c"]);
    }
}
