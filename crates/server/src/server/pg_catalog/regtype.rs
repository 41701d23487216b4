//! `regtype` shown as a type's name. PostgreSQL's `regtype` is an oid
//! whose text is the type's name: pgcli lists columns with
//! `atttypid::regtype::text` and functions with
//! `COALESCE(proallargtypes::regtype[], proargtypes::regtype[])::text[]`.
//! datafusion-pg-catalog plans `regtype` as a plain int4, so those gave
//! `'25'` where PostgreSQL gives `text`. Comparisons stay on oids
//! (`prorettype::regtype != 'trigger'::regtype`), so only the casts that
//! make text of a regtype are respelled: `x::regtype::text` (or `varchar`,
//! `name`) and `x::regtype[]`, whose elements print as names, become
//! [`REGTYPEOUT`]`(x)`. A quoted name (`'int4'::regtype`) is left to
//! datafusion-pg-catalog, which looks it up as an oid. So a `regtype[]`
//! compares as names, not oids (`x::regtype[] @> ARRAY['int4'::regtype]`
//! fails to plan): no tool seen compares one.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::ops::ControlFlow;
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, ListArray, StringArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Field, Int32Type};
use datafusion::common::exec_err;
use datafusion::error::Result;
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDFImpl, Signature, Volatility,
};
use datafusion::sql::sqlparser::ast::{
    ArrayElemTypeDef, DataType as SqlType, Expr, Function, FunctionArg, FunctionArgExpr,
    FunctionArgumentList, FunctionArguments, Ident, ObjectName, ObjectNamePart, Statement, Value,
    visit_expressions_mut,
};

use crate::engine::Respell;

/// The function the casts become: PostgreSQL's name for regtype's output.
pub const REGTYPEOUT: &str = "regtypeout";

/// The respelling (see the module doc).
#[derive(Debug)]
pub struct RegtypeText;

/// The last part of a type's name, lower case, if it is a bare name.
fn custom_name(t: &SqlType) -> Option<String> {
    let SqlType::Custom(name, args) = t else {
        return None;
    };
    if !args.is_empty() {
        return None;
    }
    match name.0.last()? {
        ObjectNamePart::Identifier(i) => Some(i.value.to_ascii_lowercase()),
        _ => None,
    }
}

fn is_regtype(t: &SqlType) -> bool {
    custom_name(t).as_deref() == Some("regtype")
}

fn is_text(t: &SqlType) -> bool {
    match t {
        SqlType::Text | SqlType::Varchar(_) | SqlType::String(_) => true,
        other => matches!(
            custom_name(other).as_deref(),
            Some("text" | "varchar" | "name")
        ),
    }
}

fn quoted_literal(e: &Expr) -> bool {
    matches!(
        e,
        Expr::Value(v) if matches!(v.value, Value::SingleQuotedString(_) | Value::EscapedStringLiteral(_))
    )
}

fn regtypeout(arg: Expr) -> Expr {
    Expr::Function(Function {
        name: ObjectName(vec![ObjectNamePart::Identifier(Ident::new(REGTYPEOUT))]),
        uses_odbc_syntax: false,
        parameters: FunctionArguments::None,
        args: FunctionArguments::List(FunctionArgumentList {
            duplicate_treatment: None,
            args: vec![FunctionArg::Unnamed(FunctionArgExpr::Expr(arg))],
            clauses: vec![],
        }),
        filter: None,
        null_treatment: None,
        over: None,
        within_group: vec![],
    })
}

/// `e` respelled if it is one of the casts of the module doc.
fn respelled(e: &Expr) -> Option<Expr> {
    let Expr::Cast {
        expr, data_type, ..
    } = e
    else {
        return None;
    };
    if let SqlType::Array(ArrayElemTypeDef::SquareBracket(element, _)) = data_type
        && is_regtype(element)
        && !quoted_literal(expr)
    {
        return Some(regtypeout(expr.as_ref().clone()));
    }
    if is_text(data_type)
        && let Expr::Cast {
            expr: inner,
            data_type: inner_type,
            ..
        } = expr.as_ref()
        && is_regtype(inner_type)
        && !quoted_literal(inner)
    {
        return Some(regtypeout(inner.as_ref().clone()));
    }
    None
}

impl Respell for RegtypeText {
    fn rewrite(&self, mut statement: Statement) -> Statement {
        let _ = visit_expressions_mut(&mut statement, |e| {
            if let Some(out) = respelled(e) {
                *e = out;
            }
            ControlFlow::<()>::Continue(())
        });
        statement
    }
}

/// [`REGTYPEOUT`]: an oid, or a list of them, as type names; the names
/// are `pg_type`'s as `format_type` writes them (`integer`, `text[]`).
#[derive(Debug)]
pub struct RegtypeOut {
    signature: Signature,
    names: Arc<HashMap<i32, String>>,
}

impl RegtypeOut {
    /// Over `names`, each type's oid to its name.
    pub fn new(names: Arc<HashMap<i32, String>>) -> Self {
        Self {
            signature: Signature::any(1, Volatility::Stable),
            names,
        }
    }

    /// regtypeout's text: `-` for 0, the number for an oid of no type.
    fn name(&self, oid: i32) -> String {
        match self.names.get(&oid) {
            Some(name) => name.clone(),
            None if oid == 0 => "-".to_owned(),
            None => oid.to_string(),
        }
    }

    fn names_of(&self, oids: &ArrayRef) -> Result<StringArray> {
        let oids = cast(oids, &DataType::Int32)?;
        let Some(oids) = oids.as_primitive_opt::<Int32Type>() else {
            return exec_err!("{REGTYPEOUT} takes oids");
        };
        Ok(oids.iter().map(|o| o.map(|o| self.name(o))).collect())
    }
}

impl PartialEq for RegtypeOut {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.names, &other.names)
    }
}

impl Eq for RegtypeOut {}

impl Hash for RegtypeOut {
    fn hash<H: Hasher>(&self, state: &mut H) {
        Arc::as_ptr(&self.names).hash(state);
    }
}

fn text_list() -> DataType {
    DataType::List(Arc::new(Field::new("item", DataType::Utf8, true)))
}

impl ScalarUDFImpl for RegtypeOut {
    fn name(&self) -> &str {
        REGTYPEOUT
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        Ok(match args.first() {
            Some(DataType::List(_) | DataType::LargeList(_) | DataType::FixedSizeList(..)) => {
                text_list()
            }
            _ => DataType::Utf8,
        })
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let Some(arg) = arrays.first() else {
            return exec_err!("{REGTYPEOUT} takes one argument");
        };
        let out: ArrayRef = match arg.data_type() {
            DataType::List(_) | DataType::LargeList(_) | DataType::FixedSizeList(..) => {
                let list = cast(
                    arg,
                    &DataType::List(Arc::new(Field::new("item", DataType::Int32, true))),
                )?;
                let list = list.as_list::<i32>();
                Arc::new(ListArray::try_new(
                    Arc::new(Field::new("item", DataType::Utf8, true)),
                    list.offsets().clone(),
                    Arc::new(self.names_of(list.values())?),
                    list.nulls().cloned(),
                )?)
            }
            _ => Arc::new(self.names_of(arg)?),
        };
        Ok(ColumnarValue::Array(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion::sql::sqlparser::parser::Parser;

    fn respell(sql: &str) -> String {
        let mut statements = Parser::parse_sql(&PostgreSqlDialect {}, sql).unwrap();
        RegtypeText.rewrite(statements.remove(0)).to_string()
    }

    fn printed(sql: &str) -> String {
        Parser::parse_sql(&PostgreSqlDialect {}, sql).unwrap()[0].to_string()
    }

    #[test]
    fn casts_that_print_a_regtype_become_its_name() {
        assert_eq!(
            respell("SELECT att.atttypid::regtype::text FROM pg_attribute att"),
            "SELECT regtypeout(att.atttypid) FROM pg_attribute att"
        );
        assert_eq!(
            respell(
                "SELECT COALESCE(proallargtypes::regtype[], proargtypes::pg_catalog.regtype[])::text[] FROM pg_proc"
            ),
            "SELECT COALESCE(regtypeout(proallargtypes), regtypeout(proargtypes))::TEXT[] FROM pg_proc"
        );
        assert_eq!(
            respell("SELECT 23::regtype::varchar"),
            "SELECT regtypeout(23)"
        );
    }

    #[test]
    fn comparisons_and_quoted_names_stay_oids() {
        let kept = "SELECT * FROM pg_proc AS p WHERE p.prorettype::regtype <> 'trigger'::regtype";
        assert_eq!(respell(kept), printed(kept));
        let named = "SELECT 'int4'::regtype::text";
        assert_eq!(respell(named), printed(named));
    }
}
