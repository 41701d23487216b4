//! Parameter types of prepared statements where DataFusion's inference
//! leaves them unknown, or names them too coarsely for a driver.
//!
//! A placeholder that is only cast (`$1::oid[]`) gets the cast's type, as
//! PostgreSQL infers it. `oid` and `oid[]` are int4 to DataFusion, but a
//! driver must be told `oid[]`: asyncpg's type introspection binds
//! `$1::oid[]`, has a codec for `oid[]` built in, and would have to
//! introspect `int4[]` with the same query, without end. Its values are
//! decoded as `int4[]`, the same layout, since arrow-pg knows no `oid[]`.

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::sync::LazyLock;

use datafusion::arrow::datatypes::DataType;
use datafusion::sql::sqlparser::ast::{
    ArrayElemTypeDef, DataType as SqlType, Expr, ObjectNamePart, Statement, Value, ValueWithSpan,
    visit_expressions,
};
use std::sync::Arc;

use arrow_pg::datatypes::into_pg_type;
use datafusion::common::metadata::ScalarAndMetadata;
use datafusion::common::{ParamValues, ScalarValue};
use pgwire::api::Type;
use pgwire::api::portal::Portal;
use pgwire::api::stmt::StoredStatement;
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::types::FromSqlText;
use pgwire::types::format::FormatOptions;
use postgres_types::FromSqlOwned;

/// Placeholders cast to `oid` or `oid[]` in the statement's text, by
/// number, with the type a driver is told.
pub fn oid_placeholders(statement: &Statement) -> HashMap<usize, Type> {
    let mut found = HashMap::new();
    let _ = visit_expressions(statement, |e: &Expr| {
        if let Expr::Cast {
            expr, data_type, ..
        } = e
            && let Expr::Value(ValueWithSpan {
                value: Value::Placeholder(p),
                ..
            }) = expr.as_ref()
            && let Ok(n) = p.trim_start_matches('$').parse::<usize>()
        {
            let t = match data_type {
                t if is_oid(t) => Some(Type::OID),
                SqlType::Array(
                    ArrayElemTypeDef::SquareBracket(t, _) | ArrayElemTypeDef::AngleBracket(t),
                ) if is_oid(t) => Some(Type::OID_ARRAY),
                _ => None,
            };
            if let Some(t) = t {
                found.insert(n, t);
            }
        }
        ControlFlow::<()>::Continue(())
    });
    found
}

fn is_oid(t: &SqlType) -> bool {
    matches!(t, SqlType::Custom(name, _) if name.0.last().and_then(ObjectNamePart::as_ident).is_some_and(|i| i.value.eq_ignore_ascii_case("oid")))
}

/// The type a driver is told for placeholder `$n`, DataFusion's `inferred`
/// type unless the statement casts it to `oid` or `oid[]`, which DataFusion
/// infers as int4 (or not at all).
pub fn told_type(
    n: usize,
    inferred: Option<&DataType>,
    oids: &HashMap<usize, Type>,
) -> PgWireResult<Type> {
    let int4ish = match inferred {
        None | Some(DataType::Int32) => true,
        Some(DataType::List(item)) => item.data_type() == &DataType::Int32,
        Some(_) => false,
    };
    match (oids.get(&n), inferred) {
        (Some(oid), _) if int4ish => Ok(oid.clone()),
        (_, Some(t)) => into_pg_type(t),
        (_, None) => Ok(Type::UNKNOWN),
    }
}

/// The type a parameter told as `told` is decoded as.
pub fn decoded_as(told: &Type) -> &Type {
    if *told == Type::OID_ARRAY {
        &Type::INT4_ARRAY
    } else {
        told
    }
}

/// The values of a portal whose parameters are all integers or text of
/// the types their columns hold, decoded here; `None` leaves the portal to
/// arrow-pg's general decoding, which answers the same for these.
///
/// A prepared point query binds such values at every run, and the general
/// path cost a tenth of its server time: per value a match over every type
/// and four `String`s (pgwire's default `FormatOptions`, made for each
/// text-format value). Here a value is parsed as pgwire parses it, with
/// one `FormatOptions` for the process. The type is arrow-pg's choice too:
/// the client's declared type, else the one the server told (`UNKNOWN`,
/// declared or told, is left to arrow-pg).
pub fn simple_values<S: Clone>(
    portal: &Portal<S>,
    inferred: &[Option<DataType>],
    told: &[Type],
) -> Option<PgWireResult<ParamValues>> {
    let mut values = Vec::with_capacity(portal.parameter_len());
    for i in 0..portal.parameter_len() {
        let ty = match portal.statement.parameter_types.get(i) {
            Some(Some(declared)) => declared,
            _ => told.get(i)?,
        };
        let inferred = inferred.get(i)?.as_ref();
        let raw = portal.parameters.get(i)?.as_deref();
        let binary = portal.parameter_format.is_binary(i);
        let value = match (ty, inferred) {
            (&Type::INT2, None | Some(DataType::Int16)) => {
                decode(raw, binary, ty).map(ScalarValue::Int16)
            }
            (&Type::INT4, None | Some(DataType::Int32)) => {
                decode(raw, binary, ty).map(ScalarValue::Int32)
            }
            (&Type::INT8, None | Some(DataType::Int64)) => {
                decode(raw, binary, ty).map(ScalarValue::Int64)
            }
            (&Type::TEXT | &Type::VARCHAR, None | Some(DataType::Utf8)) => {
                decode(raw, binary, ty).map(ScalarValue::Utf8)
            }
            _ => return None,
        };
        match value {
            Ok(v) => values.push(ScalarAndMetadata::from(v)),
            Err(e) => return Some(Err(e)),
        }
    }
    Some(Ok(ParamValues::List(values)))
}

/// One value as `Portal::parameter` reads it: NULL, binary, or text.
fn decode<T>(raw: Option<&[u8]>, binary: bool, ty: &Type) -> PgWireResult<Option<T>>
where
    T: for<'a> FromSqlText<'a> + FromSqlOwned,
{
    static OPTIONS: LazyLock<FormatOptions> = LazyLock::new(FormatOptions::default);
    let Some(raw) = raw else {
        return Ok(None);
    };
    let value = if binary {
        T::from_sql(ty, raw)
    } else {
        T::from_sql_text(ty, raw, &OPTIONS)
    };
    value.map(Some).map_err(PgWireError::FailedToParseParameter)
}

/// The portal with the `oid[]` parameter types its client declared in
/// Parse read as `int4[]` (see [`decoded_as`]); `None` if it declared none.
pub fn oid_lists_as_int4<S: Clone>(portal: &Portal<S>) -> Option<Portal<S>> {
    let declared = &portal.statement.parameter_types;
    if !declared.iter().flatten().any(|t| *t == Type::OID_ARRAY) {
        return None;
    }
    let statement = StoredStatement::new(
        portal.statement.id.clone(),
        portal.statement.statement.clone(),
        declared
            .iter()
            .map(|t| t.as_ref().map(|t| decoded_as(t).clone()))
            .collect(),
    );
    // A copy for decoding only: its execution state is never used.
    let mut copy = Portal::new_cursor(portal.name.clone(), Arc::new(statement));
    copy.parameter_format = portal.parameter_format.clone();
    copy.parameters = portal.parameters.clone();
    copy.result_column_format = portal.result_column_format.clone();
    Some(copy)
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion::sql::sqlparser::parser::Parser;

    #[test]
    fn placeholders_cast_to_oids_are_told_as_oids() {
        let sql = "SELECT 1 FROM t WHERE a = any($1::oid[]) AND b = $2::oid AND c = $3::int4";
        let statements = Parser::parse_sql(&PostgreSqlDialect {}, sql).unwrap_or_default();
        let found = statements.first().map(oid_placeholders).unwrap_or_default();
        assert_eq!(found.get(&1), Some(&Type::OID_ARRAY));
        assert_eq!(found.get(&2), Some(&Type::OID));
        assert_eq!(found.get(&3), None);
        assert_eq!(decoded_as(&Type::OID_ARRAY), &Type::INT4_ARRAY);
        // By placeholder number, and only over an int4 inference.
        let int4 = DataType::Int32;
        assert_eq!(told_type(2, Some(&int4), &found).ok(), Some(Type::OID));
        assert_eq!(
            told_type(2, Some(&DataType::Utf8), &found).ok(),
            Some(Type::TEXT)
        );
        assert_eq!(told_type(3, Some(&int4), &found).ok(), Some(Type::INT4));
        assert_eq!(told_type(4, None, &found).ok(), Some(Type::UNKNOWN));
    }
}

#[cfg(test)]
mod simple_values_tests {
    use super::*;
    use arrow_pg::datatypes::df::deserialize_parameters_with_server_types;
    use bytes::Bytes;
    use pgwire::messages::data::{FORMAT_CODE_BINARY, FORMAT_CODE_TEXT};
    use pgwire::messages::extendedquery::Bind;

    /// A portal of one value, declared `declared` by its client, in
    /// `format`.
    fn portal(value: Option<&[u8]>, format: i16, declared: Option<Type>) -> Portal<&'static str> {
        let bind = Bind::new(
            None,
            None,
            vec![format],
            vec![value.map(Bytes::copy_from_slice)],
            vec![],
        );
        let statement = StoredStatement::new("s".into(), "s", vec![declared]);
        Portal::try_new(&bind, Arc::new(statement)).expect("portal")
    }

    /// What arrow-pg makes of the portal, as `Runner::values` asks it.
    fn general(p: &Portal<&'static str>, inferred: &[Option<DataType>], told: &[Type]) -> String {
        let inferred: Vec<_> = inferred.iter().map(Option::as_ref).collect();
        let told: Vec<_> = told.iter().map(Some).collect();
        format!(
            "{:?}",
            deserialize_parameters_with_server_types(p, &inferred, &told)
        )
    }

    #[test]
    #[allow(clippy::type_complexity)] // one table of cases, read across
    fn integers_and_text_decode_as_arrow_pg_decodes_them() {
        let cases: Vec<(Option<&[u8]>, i16, Option<Type>, Option<DataType>, Type)> = vec![
            (
                Some(b"4182"),
                FORMAT_CODE_TEXT,
                None,
                Some(DataType::Int32),
                Type::INT4,
            ),
            (
                Some(b"-7"),
                FORMAT_CODE_TEXT,
                Some(Type::INT8),
                Some(DataType::Int64),
                Type::INT8,
            ),
            (Some(b"12"), FORMAT_CODE_TEXT, None, None, Type::INT2),
            (
                Some(&[0, 0, 1, 2]),
                FORMAT_CODE_BINARY,
                Some(Type::INT4),
                None,
                Type::INT4,
            ),
            (
                None,
                FORMAT_CODE_TEXT,
                None,
                Some(DataType::Int32),
                Type::INT4,
            ),
            (
                Some("Zoë".as_bytes()),
                FORMAT_CODE_TEXT,
                None,
                Some(DataType::Utf8),
                Type::TEXT,
            ),
            (
                Some(b"x"),
                FORMAT_CODE_BINARY,
                Some(Type::VARCHAR),
                None,
                Type::TEXT,
            ),
            // Not an int4: both fail alike.
            (
                Some(b" 42"),
                FORMAT_CODE_TEXT,
                None,
                Some(DataType::Int32),
                Type::INT4,
            ),
            (
                Some(b"99999999999"),
                FORMAT_CODE_TEXT,
                None,
                Some(DataType::Int32),
                Type::INT4,
            ),
        ];
        for (value, format, declared, inferred, told) in cases {
            let p = portal(value, format, declared);
            let (inferred, told) = ([inferred], [told]);
            let fast = simple_values(&p, &inferred, &told).expect("a simple value");
            assert_eq!(
                format!("{fast:?}"),
                general(&p, &inferred, &told),
                "{value:?} {format}"
            );
        }
    }

    #[test]
    fn other_types_and_coercions_are_left_to_arrow_pg() {
        let cases: Vec<(Option<Type>, Option<DataType>, Type)> = vec![
            // An int4 value for an int8 column: a coercion.
            (None, Some(DataType::Int64), Type::INT4),
            (None, Some(DataType::LargeUtf8), Type::TEXT),
            (None, Some(DataType::Float64), Type::FLOAT8),
            (Some(Type::OID), Some(DataType::Int32), Type::INT4),
            (None, None, Type::UNKNOWN),
        ];
        for (declared, inferred, told) in cases {
            let p = portal(Some(b"1"), FORMAT_CODE_TEXT, declared);
            assert!(simple_values(&p, &[inferred], &[told]).is_none());
        }
    }
}
