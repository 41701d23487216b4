//! Catalog functions that look oids up: in the relations of the last
//! catalog read ([`Known`]), or in the static `pg_type` and `pg_proc`
//! tables, read once when the catalog is installed.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, BooleanBuilder, Int32Array, Int32Builder, StringBuilder,
};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Int32Type};
use datafusion::common::cast::as_string_array;
use datafusion::common::exec_err;
use datafusion::error::Result;
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, TypeSignature,
    Volatility,
};

use super::relations::{IndexRelation, Known};

/// The functions, each an instance over the catalog it reads.
pub fn udfs(
    known: &Arc<Known>,
    types: &Arc<HashMap<String, i32>>,
    results: &Arc<HashMap<i32, String>>,
) -> Vec<ScalarUDF> {
    use DataType::{Boolean, Int32, Utf8};
    // Any argument types: oids arrive as int4, int8 or text literals, and
    // are cast to int4 on the way in.
    let arities = |arities: &[usize]| {
        Signature::one_of(
            arities.iter().map(|n| TypeSignature::Any(*n)).collect(),
            Volatility::Stable,
        )
    };
    let f = |name: &'static str, signature: Signature, returns: DataType, kind: Kind| {
        ScalarUDF::new_from_impl(CatalogFunction {
            name,
            signature,
            returns,
            kind,
            known: known.clone(),
        })
    };
    vec![
        f(
            "pg_table_is_visible",
            arities(&[1]),
            Boolean,
            Kind::TableIsVisible,
        ),
        f(
            "pg_collation_is_visible",
            arities(&[1]),
            Boolean,
            Kind::CollationIsVisible,
        ),
        f("pg_get_indexdef", arities(&[1, 3]), Utf8, Kind::IndexDef),
        f(
            "pg_get_constraintdef",
            arities(&[1, 2]),
            Utf8,
            Kind::ConstraintDef,
        ),
        f(
            "pg_get_serial_sequence",
            arities(&[2]),
            Utf8,
            Kind::SerialSequence,
        ),
        f(
            "to_regtype",
            arities(&[1]),
            Int32,
            Kind::ToRegtype(types.clone()),
        ),
        f(
            "pg_get_function_result",
            arities(&[1]),
            Utf8,
            Kind::FunctionResult(results.clone()),
        ),
    ]
}

#[derive(Debug)]
enum Kind {
    /// False only for a relation in a schema off the search path.
    TableIsVisible,
    /// Every collation lives in `pg_catalog`, on the search path.
    CollationIsVisible,
    /// `CREATE INDEX ...`, or with a column number its column's name.
    IndexDef,
    /// `PRIMARY KEY (...)`.
    ConstraintDef,
    /// No column owns a sequence: always NULL.
    SerialSequence,
    /// A type's oid by name, NULL for a type that does not exist.
    ToRegtype(Arc<HashMap<String, i32>>),
    /// A function's result type as PostgreSQL prints it (`SETOF text`).
    FunctionResult(Arc<HashMap<i32, String>>),
}

#[derive(Debug)]
struct CatalogFunction {
    name: &'static str,
    signature: Signature,
    returns: DataType,
    kind: Kind,
    known: Arc<Known>,
}

impl PartialEq for CatalogFunction {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name && Arc::ptr_eq(&self.known, &other.known)
    }
}

impl Eq for CatalogFunction {}

impl Hash for CatalogFunction {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.name.hash(state);
        Arc::as_ptr(&self.known).hash(state);
    }
}

impl ScalarUDFImpl for CatalogFunction {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(self.returns.clone())
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let rows = args.number_rows;
        let out: ArrayRef = match &self.kind {
            Kind::TableIsVisible => {
                let relations = self.known.current();
                let oids = int4_arg(&arrays, 0)?;
                let mut b = BooleanBuilder::with_capacity(rows);
                for oid in oids.iter() {
                    b.append_option(oid.map(|o| relations.visible(o)));
                }
                Arc::new(b.finish())
            }
            Kind::IndexDef => {
                let relations = self.known.current();
                let oids = int4_arg(&arrays, 0)?;
                let columns = match arrays.get(1) {
                    Some(_) => Some(int4_arg(&arrays, 1)?),
                    None => None,
                };
                let mut b = StringBuilder::new();
                for (row, oid) in oids.iter().enumerate() {
                    // The pretty flag changes nothing in these definitions.
                    let column = columns
                        .as_ref()
                        .filter(|c| c.is_valid(row))
                        .map_or(0, |c| c.value(row));
                    b.append_option(
                        oid.and_then(|o| relations.index(o))
                            .and_then(|ix| index_def(ix, column)),
                    );
                }
                Arc::new(b.finish())
            }
            Kind::ConstraintDef => {
                let relations = self.known.current();
                let oids = int4_arg(&arrays, 0)?;
                let mut b = StringBuilder::new();
                for oid in oids.iter() {
                    b.append_option(
                        oid.and_then(|o| relations.constraint(o))
                            .map(|ix| format!("PRIMARY KEY ({})", quoted_list(&ix.columns))),
                    );
                }
                Arc::new(b.finish())
            }
            Kind::CollationIsVisible => {
                let oids = int4_arg(&arrays, 0)?;
                let mut b = BooleanBuilder::with_capacity(rows);
                for oid in oids.iter() {
                    b.append_option(oid.map(|_| true));
                }
                Arc::new(b.finish())
            }
            Kind::SerialSequence => {
                let mut b = StringBuilder::new();
                for _ in 0..rows {
                    b.append_null();
                }
                Arc::new(b.finish())
            }
            Kind::ToRegtype(types) => {
                let Some(names) = arrays.first() else {
                    return exec_err!("to_regtype takes a type name");
                };
                let names = cast(names, &DataType::Utf8)?;
                let names = as_string_array(&names)?;
                let mut b = Int32Builder::with_capacity(rows);
                for name in names.iter() {
                    b.append_option(name.and_then(|n| type_oid(types, n)));
                }
                Arc::new(b.finish())
            }
            Kind::FunctionResult(results) => {
                let oids = int4_arg(&arrays, 0)?;
                let mut b = StringBuilder::new();
                for oid in oids.iter() {
                    b.append_option(oid.and_then(|o| results.get(&o)));
                }
                Arc::new(b.finish())
            }
        };
        Ok(ColumnarValue::Array(out))
    }
}

/// Argument `at` as int4 (oids, column numbers).
fn int4_arg(arrays: &[ArrayRef], at: usize) -> Result<Int32Array> {
    let Some(a) = arrays.get(at) else {
        return exec_err!("missing argument {}", at + 1);
    };
    let a = cast(a, &DataType::Int32)?;
    match a.as_primitive_opt::<Int32Type>() {
        Some(a) => Ok(a.clone()),
        None => exec_err!("argument {} is not an oid", at + 1),
    }
}

/// `name`, `pg_catalog.name` or `"name"`, as `to_regtype` reads it.
fn type_oid(types: &HashMap<String, i32>, name: &str) -> Option<i32> {
    let bare = name
        .trim()
        .trim_start_matches("pg_catalog.")
        .trim_matches('"');
    types.get(bare).copied()
}

/// An identifier as PostgreSQL prints it: quoted unless lower-case and plain.
fn quote_ident(name: &str) -> String {
    let plain = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if plain {
        name.to_owned()
    } else {
        format!("\"{}\"", name.replace('"', "\"\""))
    }
}

fn quoted_list(columns: &[String]) -> String {
    columns
        .iter()
        .map(|c| quote_ident(c))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `pg_get_indexdef(oid, column)`: the whole definition for column 0, else
/// that column's name (NULL past the last).
fn index_def(ix: &IndexRelation, column: i32) -> Option<String> {
    if column > 0 {
        let at = usize::try_from(column - 1).ok()?;
        return ix.columns.get(at).map(|c| quote_ident(c));
    }
    Some(format!(
        "CREATE {}INDEX {} ON {}.{} USING btree ({})",
        if ix.primary { "UNIQUE " } else { "" },
        quote_ident(&ix.name),
        quote_ident(&ix.schema),
        quote_ident(&ix.table_name),
        quoted_list(&ix.columns)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_print_as_postgresql_prints_them() {
        assert_eq!(quote_ident("bib"), "bib");
        assert_eq!(quote_ident("RowKey"), "\"RowKey\"");
        assert_eq!(quote_ident("a\"b"), "\"a\"\"b\"");
        assert_eq!(quote_ident("_etag"), "_etag");
    }

    #[test]
    fn an_index_definition_names_its_columns() {
        let ix = IndexRelation {
            oid: 1,
            constraint: Some(2),
            name: "t_pkey".into(),
            table: 3,
            namespace: 4,
            schema: "raw".into(),
            table_name: "t".into(),
            columns: vec!["PartitionKey".into(), "RowKey".into()],
            attnums: vec![1, 2],
            primary: true,
            valid: true,
        };
        assert_eq!(
            index_def(&ix, 0).as_deref(),
            Some("CREATE UNIQUE INDEX t_pkey ON raw.t USING btree (\"PartitionKey\", \"RowKey\")")
        );
        assert_eq!(index_def(&ix, 2).as_deref(), Some("\"RowKey\""));
        assert_eq!(index_def(&ix, 3), None);
    }
}
