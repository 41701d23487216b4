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

use datafusion::arrow::datatypes::DataType;
use datafusion::sql::sqlparser::ast::{
    ArrayElemTypeDef, DataType as SqlType, Expr, ObjectNamePart, Statement, Value, ValueWithSpan,
    visit_expressions,
};
use std::sync::Arc;

use arrow_pg::datatypes::into_pg_type;
use pgwire::api::Type;
use pgwire::api::portal::Portal;
use pgwire::api::stmt::StoredStatement;
use pgwire::error::PgWireResult;

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
