//! Catalog functions that look oids up: in the relations of the last
//! catalog read ([`Known`]), or in the static `pg_type` and `pg_proc`
//! tables, read once when the catalog is installed.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, BooleanArray, Int32Array, StringArray};
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
    let table: [(&'static str, &[usize], DataType, Kind); 7] = [
        ("pg_table_is_visible", &[1], Boolean, Kind::TableIsVisible),
        (
            "pg_collation_is_visible",
            &[1],
            Boolean,
            Kind::CollationIsVisible,
        ),
        ("pg_get_indexdef", &[1, 3], Utf8, Kind::IndexDef),
        ("pg_get_constraintdef", &[1, 2], Utf8, Kind::ConstraintDef),
        ("pg_get_serial_sequence", &[2], Utf8, Kind::SerialSequence),
        ("to_regtype", &[1], Int32, Kind::ToRegtype(types.clone())),
        (
            "pg_get_function_result",
            &[1],
            Utf8,
            Kind::FunctionResult(results.clone()),
        ),
    ];
    table
        .into_iter()
        .map(|(name, arities, returns, kind)| {
            ScalarUDF::new_from_impl(CatalogFunction {
                name,
                // Any argument types: oids arrive as int4, int8 or text
                // literals, and are cast to int4 on the way in.
                signature: Signature::one_of(
                    arities.iter().map(|n| TypeSignature::Any(*n)).collect(),
                    Volatility::Stable,
                ),
                returns,
                kind,
                known: known.clone(),
            })
        })
        .collect()
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
        let out: ArrayRef = match &self.kind {
            Kind::TableIsVisible => {
                let relations = self.known.current();
                oid_bools(&arrays, |o| relations.visible(o))?
            }
            Kind::CollationIsVisible => oid_bools(&arrays, |_| true)?,
            Kind::IndexDef => self.index_defs(&arrays)?,
            Kind::ConstraintDef => {
                let relations = self.known.current();
                oid_texts(&arrays, |o| {
                    let ix = relations.constraint(o)?;
                    Some(format!("PRIMARY KEY ({})", quoted_list(&ix.columns)))
                })?
            }
            Kind::SerialSequence => Arc::new(StringArray::new_null(args.number_rows)),
            Kind::ToRegtype(types) => {
                let Some(names) = arrays.first() else {
                    return exec_err!("to_regtype takes a type name");
                };
                let names = cast(names, &DataType::Utf8)?;
                let oids: Int32Array = as_string_array(&names)?
                    .iter()
                    .map(|name| name.and_then(|n| type_oid(types, n)))
                    .collect();
                Arc::new(oids)
            }
            Kind::FunctionResult(results) => oid_texts(&arrays, |o| results.get(&o).cloned())?,
        };
        Ok(ColumnarValue::Array(out))
    }
}

impl CatalogFunction {
    /// `pg_get_indexdef(oid [, column, pretty])`; the pretty flag changes
    /// nothing in these definitions.
    fn index_defs(&self, arrays: &[ArrayRef]) -> Result<ArrayRef> {
        let relations = self.known.current();
        let oids = int4_arg(arrays, 0)?;
        let columns = match arrays.get(1) {
            Some(_) => Some(int4_arg(arrays, 1)?),
            None => None,
        };
        let defs: StringArray = oids
            .iter()
            .enumerate()
            .map(|(row, oid)| {
                let column = columns
                    .as_ref()
                    .filter(|c| c.is_valid(row))
                    .map_or(0, |c| c.value(row));
                index_def(relations.index(oid?)?, column)
            })
            .collect();
        Ok(Arc::new(defs))
    }
}

/// `f` of each oid of the first argument (NULL stays NULL).
fn oid_bools(arrays: &[ArrayRef], f: impl Fn(i32) -> bool) -> Result<ArrayRef> {
    let out: BooleanArray = int4_arg(arrays, 0)?.iter().map(|o| o.map(&f)).collect();
    Ok(Arc::new(out))
}

/// `f` of each oid of the first argument (NULL stays NULL).
fn oid_texts(arrays: &[ArrayRef], f: impl Fn(i32) -> Option<String>) -> Result<ArrayRef> {
    let out: StringArray = int4_arg(arrays, 0)?
        .iter()
        .map(|o| o.and_then(&f))
        .collect();
    Ok(Arc::new(out))
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

/// A type's oid by name as `to_regtype` reads it: `int4`, `pg_catalog.int4`,
/// `"int4"`, `INT4` (unquoted names fold to lower case), the SQL names
/// (`integer`, `timestamp with time zone`, ...), and `name[]` for the
/// array type `_name`.
fn type_oid(types: &HashMap<String, i32>, name: &str) -> Option<i32> {
    let name = name.trim();
    let (name, array) = match name.strip_suffix("[]") {
        Some(element) => (element.trim_end(), true),
        None => (name, false),
    };
    let name = name
        .strip_prefix("pg_catalog.")
        .or_else(|| name.strip_prefix("PG_CATALOG."))
        .unwrap_or(name);
    let name = match name.strip_prefix('"').and_then(|n| n.strip_suffix('"')) {
        Some(quoted) => quoted.to_owned(),
        None => name.to_lowercase(),
    };
    let name = SQL_NAMES
        .iter()
        .find(|(sql, _)| *sql == name)
        .map_or(name.as_str(), |(_, internal)| internal);
    if array {
        types.get(&format!("_{name}")).copied()
    } else {
        types.get(name).copied()
    }
}

/// SQL's type names for PostgreSQL's internal ones.
const SQL_NAMES: [(&str, &str); 14] = [
    ("integer", "int4"),
    ("int", "int4"),
    ("smallint", "int2"),
    ("bigint", "int8"),
    ("real", "float4"),
    ("float", "float8"),
    ("double precision", "float8"),
    ("boolean", "bool"),
    ("character varying", "varchar"),
    ("character", "bpchar"),
    ("decimal", "numeric"),
    ("timestamp without time zone", "timestamp"),
    ("timestamp with time zone", "timestamptz"),
    ("time without time zone", "time"),
];

use crate::catalog::ddl::ident as quote_ident;

fn quoted_list(columns: &[String]) -> String {
    columns
        .iter()
        .map(|c| quote_ident(c))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `pg_get_indexdef(oid, column)`: the whole definition for column 0, else
/// that column's name (NULL past the last).
pub(super) fn index_def(ix: &IndexRelation, column: i32) -> Option<String> {
    if column > 0 {
        let at = usize::try_from(column - 1).ok()?;
        return ix.columns.get(at).map(|c| quote_ident(c));
    }
    Some(format!(
        "CREATE {}INDEX {} ON {}.{} USING btree ({}){}",
        if ix.unique { "UNIQUE " } else { "" },
        quote_ident(&ix.name),
        quote_ident(&ix.schema),
        quote_ident(&ix.table_name),
        quoted_list(&ix.columns),
        if ix.global {
            " WITH (global='true')"
        } else {
            ""
        }
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn to_regtype_reads_names_as_postgresql_does() {
        let types: HashMap<String, i32> = [("int4", 23), ("_int4", 1007), ("timestamptz", 1184)]
            .into_iter()
            .map(|(n, o)| (n.to_owned(), o))
            .collect();
        for (name, oid) in [
            ("int4", Some(23)),
            ("INT4", Some(23)),
            ("pg_catalog.int4", Some(23)),
            ("\"int4\"", Some(23)),
            ("\"INT4\"", None),
            ("integer", Some(23)),
            ("int4[]", Some(1007)),
            ("integer[]", Some(1007)),
            ("timestamp with time zone", Some(1184)),
            ("hstore", None),
        ] {
            assert_eq!(type_oid(&types, name), oid, "{name}");
        }
    }

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
            unique: true,
            global: false,
            valid: true,
        };
        assert_eq!(
            index_def(&ix, 0).as_deref(),
            Some("CREATE UNIQUE INDEX t_pkey ON raw.t USING btree (\"PartitionKey\", \"RowKey\")")
        );
        assert_eq!(index_def(&ix, 2).as_deref(), Some("\"RowKey\""));
        assert_eq!(index_def(&ix, 3), None);
        let email = IndexRelation {
            constraint: None,
            name: "members_email".into(),
            schema: "public".into(),
            table_name: "members".into(),
            columns: vec!["email".into()],
            primary: false,
            global: true,
            ..ix
        };
        assert_eq!(
            index_def(&email, 0).as_deref(),
            Some(
                "CREATE UNIQUE INDEX members_email ON public.members USING btree (email) WITH (global='true')"
            )
        );
    }
}
