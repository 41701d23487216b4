//! The catalog: how a SQL table maps onto partitioned storage. A definition
//! names the SQL columns and their types, the PartitionKey and RowKey templates
//! of base rows, and the RowKey templates of denormalized index rows. It is
//! written as SQL DDL (`CREATE TABLE ... WITH (...)`, see [`ddl`]), shipped as
//! files in the top-level `catalog/` folder and persisted in the store itself
//! (`persist`) so that every front end over one store sees one catalog.
//! Tables without a definition are read raw with an inferred schema (`raw`).
//!
//! - `ddl`: table definitions as SQL DDL, the `CREATE TABLE ... WITH` syntax;
//!   `ddl::create` a definition from its statement, `ddl::alter` `ALTER TABLE`.
//! - `validate`: `TableDef::validate`, the checks every definition passes
//!   before it is used or stored.
//! - `types`: column types: what a column holds, its EDM property and its Arrow
//!   type.
//! - `state`: what the catalog keeps of a table beside its DDL (an index
//!   still being built), typed, never a user's option.
//! - `persist`: the definitions' copy in the store (`TablesqlCatalog`), and the
//!   version entity that tells other engines of a change.
//! - `files`: catalog files: a directory of `.sql` mappings, checked whole
//!   before any is applied.
//! - `raw`: raw-table inference: a table without a mapping, its schema from a
//!   sample.
//! - `stats`: `ANALYZE`'s statistics in the store (counts, sizes, guideposts,
//!   distinct key prefixes per partition); `stats::counted` those of a table
//!   never analyzed, from a store's kept counts.
//! - `sequence`: sequences: a counter entity each, values reserved a block at a
//!   time.
//! - `secret`: the store's secret that signs page tokens.

pub mod ddl;
pub(crate) mod files;
pub(crate) mod persist;
pub(crate) mod raw;
pub(crate) mod secret;
#[doc(hidden)]
pub mod sequence;
pub(crate) mod state;
pub mod stats;
mod types;
mod validate;

use crate::keys::{FieldFormat, KeyError, KeyTemplate, Segment};
use crate::storage::{StorageError, TableName};

pub use sequence::{SequenceDef, SequenceError};
pub use types::{ColumnType, decimal_text, parse_decimal};

/// A catalog definition that does not hold together, or a catalog that cannot be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CatalogError {
    /// DDL that does not parse or is not a mapping.
    #[error("invalid table definition: {0}")]
    Definition(String),
    /// A key template that does not parse.
    #[error(transparent)]
    Template(#[from] KeyError),
    /// A column type tablesql cannot store.
    #[error(
        "column {column}: type {sql_type} is not supported: a column is stored as one of the storage's eight types (use INT, BIGINT, SERIAL, DOUBLE, TEXT, BOOLEAN, TIMESTAMP, DATE, NUMERIC(p, s) with p up to 38, BYTEA or UUID)"
    )]
    UnsupportedType {
        /// The column's name.
        column: String,
        /// The SQL type it was declared with.
        sql_type: String,
    },
    /// A name used twice, or a reference to a column that is not declared.
    #[error("table {table}: {reason}")]
    Inconsistent {
        /// The table's name.
        table: String,
        /// What does not hold together.
        reason: String,
    },
    /// No definition of that name.
    #[error("table {0} is not in the catalog")]
    UnknownTable(String),
    /// `DROP TABLE` of a storage table that has no mapping: its entities
    /// are the application's, and SQL does not delete them.
    #[error(
        "table {0} is a storage table without a mapping; storage tables are not dropped through SQL"
    )]
    NotDroppable(String),
    /// A definition of that name exists already.
    #[error("table {0} already exists")]
    TableExists(String),
    /// The store's secret (which signs page tokens) is unusable.
    #[error("the store's secret for page tokens: {0}")]
    Secret(&'static str),
    /// A sequence operation failed.
    #[error(transparent)]
    Sequence(#[from] sequence::SequenceError),
    /// The store failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
}

impl CatalogError {
    /// The SQLSTATE a client is told (`crate::sqlstate`).
    pub fn sqlstate(&self) -> &'static str {
        use crate::sqlstate as code;
        match self {
            CatalogError::Definition(_)
            | CatalogError::Template(_)
            | CatalogError::UnsupportedType { .. }
            | CatalogError::Inconsistent { .. } => code::INVALID_TABLE_DEFINITION,
            CatalogError::UnknownTable(_) => code::UNDEFINED_TABLE,
            CatalogError::NotDroppable(_) => code::FEATURE_NOT_SUPPORTED,
            CatalogError::TableExists(_) => code::DUPLICATE_TABLE,
            CatalogError::Secret(_) => code::DATA_CORRUPTED,
            CatalogError::Sequence(s) => s.sqlstate(),
            CatalogError::Storage(s) => s.sqlstate(),
        }
    }
}

/// One SQL column.
#[derive(Debug, Clone, PartialEq)]
pub struct ColumnDef {
    /// The column's SQL name (lower case unless quoted in the DDL).
    pub name: String,
    /// Its type.
    pub column_type: ColumnType,
    /// Whether NULL is refused.
    pub not_null: bool,
    /// The SQL expression an INSERT that leaves the column out gets
    /// (`DEFAULT nextval('s')`, `DEFAULT 0`).
    pub default: Option<String>,
    /// The sequence `GENERATED BY DEFAULT AS IDENTITY` asks for, created
    /// with the table; the stored definition keeps only the `DEFAULT
    /// nextval(...)` it gives.
    pub identity: Option<sequence::SequenceDef>,
    /// The name of the property its values are stored under, where that
    /// is not its own: a column renamed (`ALTER TABLE ... RENAME COLUMN`)
    /// keeps reading and writing the property its rows hold.
    pub property: Option<String>,
}

impl ColumnDef {
    /// The property its values are stored under.
    pub fn property_name(&self) -> &str {
        self.property.as_deref().unwrap_or(&self.name)
    }

    /// What a stored row without this column's property reads as: for a
    /// NOT NULL column with a constant DEFAULT, that default (a row stored
    /// before `ALTER TABLE ... ADD COLUMN c ... NOT NULL DEFAULT v`, which
    /// rewrites no row; a NOT NULL column is never written absent, so an
    /// absent property is such a row); `None` for the rest, which read
    /// NULL.
    pub fn fill(&self) -> Option<crate::storage::EdmValue> {
        use crate::storage::EdmValue;
        use datafusion::sql::sqlparser::ast::{Expr, UnaryOperator, Value};
        if !self.not_null {
            return None;
        }
        let text = self.default.as_deref()?;
        let expr = datafusion::sql::sqlparser::parser::Parser::new(
            &datafusion::sql::sqlparser::dialect::PostgreSqlDialect {},
        )
        .try_with_sql(text)
        .and_then(|mut p| p.parse_expr())
        .ok()?;
        let (negative, expr) = match expr {
            Expr::UnaryOp {
                op: UnaryOperator::Minus,
                expr,
            } => (true, *expr),
            e => (false, e),
        };
        let Expr::Value(v) = expr else {
            return None;
        };
        match (&v.value, self.column_type) {
            (Value::Number(n, _), ColumnType::Int) => {
                let n: i32 = n.parse().ok()?;
                Some(EdmValue::Int32(if negative { n.checked_neg()? } else { n }))
            }
            (Value::Number(n, _), ColumnType::BigInt) => {
                let n: i64 = n.parse().ok()?;
                Some(EdmValue::Int64(if negative { n.checked_neg()? } else { n }))
            }
            (Value::Number(n, _), ColumnType::Double) => {
                let n: f64 = n.parse().ok()?;
                Some(EdmValue::Double(if negative { -n } else { n }))
            }
            (Value::SingleQuotedString(s), ColumnType::Text) if !negative => {
                Some(EdmValue::String(s.clone()))
            }
            (Value::Boolean(b), ColumnType::Boolean) if !negative => Some(EdmValue::Boolean(*b)),
            _ => None,
        }
    }
}

/// A denormalized index row: a RowKey template that shares its partition with
/// the base row. Scans of the table skip index rows; the planner reads them
/// where their leading fields fix more than the base RowKey's do.
#[derive(Debug, Clone, PartialEq)]
pub struct IndexDef {
    /// The index's name (`index_<name>` in the DDL options).
    pub name: String,
    /// Its RowKey template.
    pub row_key: KeyTemplate,
    /// Whether an index row carries every mapped column as a property (what
    /// tablesql's own writes store; the default), or only its keys
    /// (`covering_<name> = false`), so that a query needing other columns
    /// looks the base row up.
    pub covering: bool,
    /// Whether `CREATE INDEX` is still writing the rows of existing base
    /// rows: writes keep its rows, reads do not use it yet. The catalog's
    /// state, never the DDL's (`state`).
    pub building: bool,
}

impl IndexDef {
    /// Whether the index row holds `column` without a lookup: a field of
    /// its keys, or any column when it is covering.
    pub fn carries(&self, def: &TableDef, column: &str) -> bool {
        self.covering
            || def.partition_key.columns().any(|c| c == column)
            || self.row_key.columns().any(|c| c == column)
    }
}

/// A global index: the Index Table pattern (`DOMAIN.md`, "Secondary
/// lookups"). Its entities live in a storage table of their own, keyed by
/// the indexed values (the first column's in the PartitionKey), so a lookup
/// by them reads one partition whatever the number of base partitions.
/// Each entity carries the indexed columns and the base row's key columns
/// as properties, so it names its base row.
///
/// Its writes cannot share an entity group transaction with the base row,
/// so they are ordered instead: the new index entity first, then the base
/// row, then the old index entity's delete. A reader checks every entity it
/// meets against the base row it names, and keeps it only where that row
/// exists and writes this very entity: a write killed at any step leaves
/// an entity with no base row, or a stale one, and neither is ever returned
/// (`tablesql_repair_index` deletes them); it never leaves a base row
/// without its entity.
#[derive(Debug, Clone, PartialEq)]
pub struct GlobalIndexDef {
    /// The index's name.
    pub name: String,
    /// The storage table holding its entities (`global_table_<name>`).
    pub table: TableName,
    /// The PartitionKey template of its entities (`global_pk_<name>`).
    pub partition_key: KeyTemplate,
    /// The RowKey template of its entities (`global_rk_<name>`).
    pub row_key: KeyTemplate,
    /// Whether `CREATE INDEX` is still writing its entities: writes keep
    /// them, reads do not use it. The catalog's state (`state`).
    pub building: bool,
    /// `CREATE UNIQUE INDEX`: the number of leading key fields that are
    /// the unique columns (`global_unique_<name> = 'n'`). A row whose
    /// unique columns are all non-NULL writes its entity under the key
    /// those fields fix, without the primary key, by an Insert: a second
    /// row with the same values finds it taken (23505). A row with a NULL
    /// among them writes the whole key, as NULLs are distinct.
    pub unique: Option<usize>,
    /// The application's layout (`global_declared_<name> = true`): the
    /// table and key templates were declared, not derived, and the
    /// entities are the application's too. Writes merge into them (their
    /// other properties stay), a check compares only the properties the
    /// index writes, and `DROP INDEX` keeps the table unless CASCADE.
    pub declared: bool,
}

impl GlobalIndexDef {
    /// The columns of its keys, in key order.
    pub fn key_columns(&self) -> impl Iterator<Item = &str> {
        self.partition_key.columns().chain(self.row_key.columns())
    }

    /// The indexed columns, as `CREATE INDEX` listed them: a unique index's
    /// unique fields; else the key columns without the primary key's that
    /// close them (`CREATE INDEX` adds those, so that each entity names one
    /// row; an index that listed them itself has the same entities).
    pub fn indexed_columns(&self, primary_key: &[String]) -> Vec<String> {
        let keys: Vec<String> = self.key_columns().map(str::to_owned).collect();
        let n = match self.unique {
            Some(n) => n.min(keys.len()),
            None => {
                let mut n = keys.len();
                while n > 1 && primary_key.contains(&keys[n - 1]) {
                    n -= 1;
                }
                n
            }
        };
        keys[..n].to_vec()
    }
}

/// How one SQL table maps onto a storage table.
#[derive(Debug, Clone, PartialEq)]
pub struct TableDef {
    /// The SQL name.
    pub name: String,
    /// The storage table holding the entities.
    pub storage_table: TableName,
    /// The declared columns, in order.
    pub columns: Vec<ColumnDef>,
    /// The PartitionKey template.
    pub partition_key: KeyTemplate,
    /// The RowKey template of base rows.
    pub row_key: KeyTemplate,
    /// The columns that identify a row: every PartitionKey field and a leading
    /// run of RowKey fields. Fixing them all is a point query.
    pub primary_key: Vec<String>,
    /// The index rows written beside each base row.
    pub indexes: Vec<IndexDef>,
    /// The indexes in storage tables of their own.
    pub global_indexes: Vec<GlobalIndexDef>,
    /// The storage table was created for this table (plain `CREATE TABLE`,
    /// or `WITH (owned = true)`): `DROP TABLE` deletes it and its rows, as
    /// PostgreSQL's does. A mapping of a table that applications wrote
    /// leaves it in the store.
    pub owned: bool,
    /// Columns `ALTER TABLE ... DROP COLUMN` removed: their values stay in
    /// the stored rows, so a column of that name is not added again (it
    /// would show them, in whatever type they were written).
    pub dropped: Vec<String>,
}

/// The system columns every mapped table exposes beside its own.
pub const SYSTEM_COLUMNS: [&str; 4] = ["PartitionKey", "RowKey", "Timestamp", "_etag"];

/// The generated row key of a plain table created without a primary key:
/// its last column, a random UUID by default, hidden as the system
/// columns are (not in `*`, nor in the columns tools list).
pub const HIDDEN_ROWID: &str = "_rowid";

impl TableDef {
    /// The index whose rows RowKey `rk` starts like, where the base rows'
    /// template has no literal prefix of its own (with one, a base row's
    /// RowKey never starts like an index's: `validate` keeps the prefixes
    /// apart). Scans skip such rows as index rows, and writes refuse a
    /// base row whose RowKey would read as one.
    pub fn index_prefix_of(&self, rk: &str) -> Option<&IndexDef> {
        if matches!(self.row_key.segments().first(), Some(Segment::Literal(_))) {
            return None;
        }
        self.indexes.iter().find(|i| {
            matches!(i.row_key.segments().first(), Some(Segment::Literal(l)) if rk.starts_with(l.as_str()))
        })
    }

    /// The column of that name.
    pub fn column(&self, name: &str) -> Option<&ColumnDef> {
        self.columns.iter().find(|c| c.name == name)
    }

    /// The columns `*` and the tools' column lists leave out: the system
    /// columns, and the generated row key of a table created without a
    /// primary key ([`HIDDEN_ROWID`]).
    pub fn hidden_columns(&self) -> Vec<&str> {
        let mut hidden: Vec<&str> = SYSTEM_COLUMNS.to_vec();
        if self.primary_key.len() == 1
            && self.primary_key[0] == HIDDEN_ROWID
            && self.column(HIDDEN_ROWID).is_some()
        {
            hidden.push(HIDDEN_ROWID);
        }
        hidden
    }

    /// The columns a user created, in order: what `*` is, and what an
    /// `INSERT` without a column list fills.
    pub fn visible_columns(&self) -> impl Iterator<Item = &ColumnDef> {
        let hidden = self.hidden_columns();
        self.columns
            .iter()
            .filter(move |c| !hidden.contains(&c.name.as_str()))
    }

    /// Whether a property of that name holds a column's values (a renamed
    /// column's under its former name).
    pub fn declares_property(&self, name: &str) -> bool {
        self.columns.iter().any(|c| c.property_name() == name)
    }

    /// The key columns in key order: PartitionKey fields, then RowKey fields.
    pub fn key_columns(&self) -> impl Iterator<Item = &str> {
        self.partition_key.columns().chain(self.row_key.columns())
    }

    /// Whether a column is a field of a key template, the base rows' or an
    /// index's: a condition on it may narrow the keys read.
    pub fn is_template_column(&self, name: &str) -> bool {
        self.is_key_column(name)
            || self
                .indexes
                .iter()
                .any(|i| i.row_key.columns().any(|c| c == name))
            || self
                .global_indexes
                .iter()
                .any(|g| g.key_columns().any(|c| c == name))
    }

    /// Whether a column is read from the keys rather than from properties.
    pub fn is_key_column(&self, name: &str) -> bool {
        self.key_columns().any(|c| c == name)
    }
}

/// Whether values of a `t` column can be written in a field of `format`.
fn fits(t: ColumnType, format: FieldFormat) -> bool {
    use crate::keys::TypedKind as K;
    match (t, format) {
        (ColumnType::Text, FieldFormat::Text) => true,
        (ColumnType::Int | ColumnType::BigInt, FieldFormat::Typed(f)) => {
            matches!(f.kind, K::Int { .. })
        }
        (ColumnType::Int | ColumnType::BigInt, _) => true,
        // A NUMERIC keys as its value in units of 10^-scale.
        (ColumnType::Numeric { precision, .. }, FieldFormat::Typed(f)) => {
            matches!(f.kind, K::Int { width } if width >= precision && width <= 18)
        }
        (_, FieldFormat::Typed(f)) => matches!(
            (t, f.kind),
            (ColumnType::Text, K::Text)
                | (ColumnType::Double, K::Double)
                | (ColumnType::Timestamp, K::Timestamp)
                | (ColumnType::Date, K::Date)
                | (ColumnType::Uuid, K::Uuid)
                | (ColumnType::Boolean, K::Bool)
        ),
        _ => false,
    }
}

/// The typed field spec (after `:`) that holds a `t` column's values in
/// key order, if the type can be in a key: what plain tables and `CREATE
/// INDEX` write.
pub fn typed_spec(t: ColumnType) -> Option<String> {
    Some(
        match t {
            ColumnType::Int => "i10",
            ColumnType::BigInt => "i19",
            ColumnType::Double => "f",
            ColumnType::Text => "s",
            ColumnType::Timestamp => "t",
            ColumnType::Date => "d",
            ColumnType::Uuid => "u",
            ColumnType::Boolean => "b",
            // In units of 10^-scale, where that fits a key's integer.
            ColumnType::Numeric { precision, .. } if precision <= 18 => {
                return Some(format!("i{precision}"));
            }
            ColumnType::Numeric { .. } | ColumnType::Bytea => return None,
        }
        .to_owned(),
    )
}

/// Lower-cases an identifier the way SQL does unless it was quoted.
pub fn normalize_ident(ident: &datafusion::sql::sqlparser::ast::Ident) -> String {
    if ident.quote_style.is_some() {
        ident.value.clone()
    } else {
        ident.value.to_lowercase()
    }
}
