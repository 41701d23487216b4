//! The catalog: how a SQL table maps onto partitioned storage. A definition
//! names the SQL columns and their types, the PartitionKey and RowKey templates
//! of base rows, and the RowKey templates of denormalized index rows. It is
//! written as SQL DDL (`CREATE TABLE ... WITH (...)`, see [`ddl`]), shipped as
//! files in the top-level `catalog/` folder and persisted in the store itself
//! ([`persist`]) so that every front end over one store sees one catalog.
//! Tables without a definition are read raw with an inferred schema ([`raw`]).

pub mod ddl;
pub mod persist;
pub mod raw;
pub mod secret;
pub mod stats;
mod types;

use crate::keys::{FieldFormat, KeyError, KeyTemplate, Segment};
use crate::storage::{StorageError, TableName};

pub use types::ColumnType;

/// A catalog definition that does not hold together, or a catalog that cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    /// DDL that does not parse or is not a mapping.
    #[error("invalid table definition: {0}")]
    Definition(String),
    /// A key template that does not parse.
    #[error(transparent)]
    Template(#[from] KeyError),
    /// A column type tablesql cannot store.
    #[error(
        "column {column}: type {sql_type} is not supported (use INT, BIGINT, DOUBLE, TEXT, BOOLEAN, TIMESTAMP, BYTEA or UUID)"
    )]
    UnsupportedType { column: String, sql_type: String },
    /// A name used twice, or a reference to a column that is not declared.
    #[error("table {table}: {reason}")]
    Inconsistent { table: String, reason: String },
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
    /// The store failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
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
    /// rows (`building_<name> = true`): writes keep its rows, reads do not
    /// use it yet.
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
}

/// The system columns every mapped table exposes beside its own.
pub const SYSTEM_COLUMNS: [&str; 4] = ["PartitionKey", "RowKey", "Timestamp", "_etag"];

impl TableDef {
    /// Checks that the parts agree: templates name declared columns of key
    /// types, the primary key is a leading run of key fields, no name twice.
    pub fn validate(&self) -> Result<(), CatalogError> {
        let bad = |reason: String| CatalogError::Inconsistent {
            table: self.name.clone(),
            reason,
        };
        // It holds the catalog, the statistics and the store's secret.
        if self
            .storage_table
            .as_str()
            .eq_ignore_ascii_case(persist::CATALOG_TABLE)
        {
            return Err(bad(format!(
                "storage table {} is tablesql's own catalog",
                persist::CATALOG_TABLE
            )));
        }
        let mut seen = std::collections::HashSet::new();
        for c in &self.columns {
            if !seen.insert(c.name.to_lowercase()) {
                return Err(bad(format!("column {} is declared twice", c.name)));
            }
            if SYSTEM_COLUMNS
                .iter()
                .any(|s| s.eq_ignore_ascii_case(&c.name))
            {
                return Err(bad(format!("column {} is a system column", c.name)));
            }
        }
        let templates = std::iter::once(("partition_key", &self.partition_key))
            .chain(std::iter::once(("row_key", &self.row_key)))
            .chain(self.indexes.iter().map(|i| (i.name.as_str(), &i.row_key)));
        for (what, template) in templates {
            for seg in template.segments() {
                let Segment::Field { column, format } = seg else {
                    continue;
                };
                let col = self.column(column).ok_or_else(|| {
                    bad(format!("{what} template names undeclared column {column}"))
                })?;
                let fits = match (col.column_type, format) {
                    (ColumnType::Text, FieldFormat::Text) => true,
                    (ColumnType::Int | ColumnType::BigInt, _) => true,
                    _ => false,
                };
                if !fits {
                    return Err(bad(format!(
                        "column {column} of type {} cannot be written in key field {seg_text}",
                        col.column_type,
                        seg_text = template
                    )));
                }
            }
        }
        let key_fields: Vec<&str> = self.key_columns().collect();
        for (i, c) in key_fields.iter().enumerate() {
            if key_fields[..i].contains(c) {
                return Err(bad(format!("column {c} appears in the keys twice")));
            }
        }
        let pk_fields = self.partition_key.columns().count();
        let n = self.primary_key.len();
        let leading = key_fields.get(..n).unwrap_or(&[]);
        let same = n >= pk_fields
            && n == leading.len()
            && self
                .primary_key
                .iter()
                .all(|c| leading.contains(&c.as_str()));
        if !same {
            return Err(bad(format!(
                "the primary key must be the PartitionKey fields and a leading run of RowKey fields (from {})",
                key_fields.join(", ")
            )));
        }
        // Base rows and index rows share partitions; each kind must own a
        // RowKey prefix so a scan reads base rows by range, never by guess.
        if !self.indexes.is_empty() {
            let lead = |t: &crate::keys::KeyTemplate| match t.segments().first() {
                Some(Segment::Literal(l)) => Some(l.clone()),
                _ => None,
            };
            let base = lead(&self.row_key).ok_or_else(|| {
                bad("with index rows, the row_key template must start with literal text (like BIB:)".into())
            })?;
            let mut taken: Vec<(String, &str)> = vec![(base, "the base rows")];
            for i in &self.indexes {
                let own = lead(&i.row_key).ok_or_else(|| {
                    bad(format!(
                        "index {} must start with literal text (like AGE:)",
                        i.name
                    ))
                })?;
                // Each kind of row owns its prefix: a range read of one
                // kind must never meet another's rows.
                if let Some((other, whose)) = taken
                    .iter()
                    .find(|(p, _)| own.starts_with(p.as_str()) || p.starts_with(own.as_str()))
                {
                    return Err(bad(format!(
                        "index {} starts like {whose} ({own:?} and {other:?}): scans could not tell them apart",
                        i.name
                    )));
                }
                taken.push((own, &i.name));
            }
        }
        let mut names = std::collections::HashSet::new();
        for i in &self.indexes {
            if !names.insert(i.name.clone()) {
                return Err(bad(format!("index {} is defined twice", i.name)));
            }
            // A key cannot hold NULL: a row with NULL there would have no
            // index row, and the index would miss it.
            if let Some(c) = i
                .row_key
                .columns()
                .find(|c| self.column(c).is_some_and(|c| !c.not_null))
            {
                return Err(bad(format!(
                    "index {} field {c} must be NOT NULL (an index row's key cannot hold NULL)",
                    i.name
                )));
            }
            // An index row must lead back to its base row: with the
            // partition's fields, its RowKey holds the whole primary key.
            let missing: Vec<&str> = self
                .primary_key
                .iter()
                .map(String::as_str)
                .filter(|c| !self.partition_key.columns().any(|p| p == *c))
                .filter(|c| !i.row_key.columns().any(|f| f == *c))
                .collect();
            if !missing.is_empty() {
                return Err(bad(format!(
                    "index {} lacks primary key column {}, so an index row could not name its base row",
                    i.name,
                    missing.join(", ")
                )));
            }
        }
        Ok(())
    }

    /// The column of that name.
    pub fn column(&self, name: &str) -> Option<&ColumnDef> {
        self.columns.iter().find(|c| c.name == name)
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
    }

    /// Whether a column is read from the keys rather than from properties.
    pub fn is_key_column(&self, name: &str) -> bool {
        self.key_columns().any(|c| c == name)
    }
}

/// Lower-cases an identifier the way SQL does unless it was quoted.
pub fn normalize_ident(ident: &datafusion::sql::sqlparser::ast::Ident) -> String {
    if ident.quote_style.is_some() {
        ident.value.clone()
    } else {
        ident.value.to_lowercase()
    }
}
