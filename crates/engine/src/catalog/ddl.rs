//! Table definitions as SQL DDL, the one syntax of catalog files, of the
//! `CREATE TABLE` statement and of the copy persisted in the store:
//!
//! ```sql
//! CREATE TABLE registrations (
//!     event TEXT NOT NULL, distance TEXT NOT NULL, bib INT NOT NULL,
//!     name TEXT NOT NULL, gender TEXT NOT NULL, age INT NOT NULL,
//!     finish BIGINT, club TEXT,
//!     PRIMARY KEY (event, distance, bib)
//! ) WITH (
//!     storage_table = 'Registrations',
//!     partition_key = '{event}__{distance}',
//!     row_key = 'BIB:{bib:05}__{name}__{gender}__{age}',
//!     index_age = 'AGE:{age:03}__{bib}__{name}__{gender}'
//! );
//! ```
//! `storage_table` defaults to the SQL name; `PRIMARY KEY` defaults to every
//! key field; each `index_<name>` option declares an index row template,
//! whose rows carry every column unless `covering_<name> = false` says they
//! carry only their keys.

use datafusion::sql::sqlparser::ast::{
    ColumnOption, CreateTable, CreateTableOptions, Expr, ForeignKeyConstraint, ObjectName,
    SqlOption, Statement, TableConstraint, Value,
};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;

use super::sequence::SequenceDef;
use super::{
    CatalogError, ColumnDef, ColumnType, GlobalIndexDef, IndexDef, TableDef, normalize_ident,
};
use crate::storage::TableName;

mod alter;
mod create;

pub use alter::alter;
pub use create::from_create_table;

/// Parses one user's `CREATE TABLE ... WITH (...)` statement.
pub fn parse(sql: &str) -> Result<TableDef, CatalogError> {
    from_create_table(&create_statement(sql)?)
}

/// The one `CREATE TABLE` statement `sql` holds, parsed.
pub(super) fn create_statement(sql: &str) -> Result<CreateTable, CatalogError> {
    let statements = Parser::parse_sql(&PostgreSqlDialect {}, sql)
        .map_err(|e| CatalogError::Definition(e.to_string()))?;
    match <[Statement; 1]>::try_from(statements) {
        Ok([Statement::CreateTable(create)]) => Ok(create),
        _ => Err(CatalogError::Definition(
            "expected exactly one CREATE TABLE statement".into(),
        )),
    }
}

/// Whether a parsed `CREATE TABLE` defines a table by its columns (not
/// `CREATE TABLE ... AS SELECT`, whose columns its query gives).
pub fn is_mapping(create: &CreateTable) -> bool {
    create.query.is_none()
}

fn options(create: &CreateTable) -> &[SqlOption] {
    match &create.table_options {
        CreateTableOptions::With(o) | CreateTableOptions::Options(o) => o,
        _ => &[],
    }
}

/// A table name, normalized; mapped tables live in the default schema, so a
/// qualifier may only name it (`public.t`, `datafusion.public.t`).
pub fn object_name(name: &ObjectName) -> Result<String, CatalogError> {
    let parts: Vec<String> = name
        .0
        .iter()
        .map(|p| p.as_ident().map(normalize_ident))
        .collect::<Option<_>>()
        .ok_or_else(|| CatalogError::Definition(format!("invalid table name {name}")))?;
    match parts.as_slice() {
        [table] => Ok(table.clone()),
        [schema, table] | [_, schema, table] if schema == "public" => Ok(table.clone()),
        _ => Err(CatalogError::Definition(format!(
            "mapped tables live in schema public, not {name}"
        ))),
    }
}

/// The sequence of an identity column, named as PostgreSQL names it.
pub fn identity_sequence(table: &str, column: &str) -> String {
    format!("{table}_{column}_seq")
}

/// The sequence column `c` of table `table` owns: its identity sequence,
/// where its default draws from it (DROP TABLE drops it with the table).
pub fn owned_sequence(table: &str, c: &ColumnDef) -> Option<String> {
    let seq = identity_sequence(table, &c.name);
    (c.default.as_deref() == Some(identity_default(&seq).as_str())).then_some(seq)
}

/// The `DEFAULT` an identity column stores: `nextval` of its sequence,
/// quoted where `nextval` would otherwise fold its case.
pub fn identity_default(sequence: &str) -> String {
    let name = if sequence == sequence.to_lowercase() {
        sequence.to_owned()
    } else {
        format!("\"{}\"", sequence.replace('"', "\"\""))
    };
    format!("nextval('{}')", name.replace('\'', "''"))
}

/// The FOREIGN KEY clauses of a `CREATE TABLE`, of the table and of its
/// columns, each with the columns it is on. They are accepted, so that an
/// ORM's related tables can be created, and not enforced: checking a
/// reference on every write is a read of the other table per row, and on
/// every delete a search of the referring table, which has no index to
/// find its rows by (docs/mapping.md, "Plain tables"). The definition does not keep
/// them. An `ON DELETE` or `ON UPDATE` action other than the default would
/// change rows, not check them, and is refused.
pub fn foreign_keys(
    create: &CreateTable,
) -> Result<Vec<(Vec<String>, &ForeignKeyConstraint)>, CatalogError> {
    use datafusion::sql::sqlparser::ast::ReferentialAction;
    let of_columns = create.columns.iter().flat_map(|c| {
        c.options.iter().filter_map(move |o| match &o.option {
            ColumnOption::ForeignKey(fk) => Some((vec![normalize_ident(&c.name)], fk)),
            _ => None,
        })
    });
    let of_table = create.constraints.iter().filter_map(|c| match c {
        TableConstraint::ForeignKey(fk) => {
            Some((fk.columns.iter().map(normalize_ident).collect(), fk))
        }
        _ => None,
    });
    let found: Vec<_> = of_columns.chain(of_table).collect();
    for (_, fk) in &found {
        for action in [fk.on_delete, fk.on_update].into_iter().flatten() {
            if !matches!(
                action,
                ReferentialAction::NoAction | ReferentialAction::Restrict
            ) {
                return Err(CatalogError::Definition(format!(
                    "FOREIGN KEY ... REFERENCES {} ON ... {action} is not supported: foreign keys are accepted but not enforced, and {action} would change rows",
                    fk.foreign_table
                )));
            }
        }
    }
    Ok(found)
}

/// How many buckets a plain table's rows spread over (`{#16}`): sixteen
/// partitions take about 16 × 2,000 entities/s of inserts, and a scan of
/// the table or a range of its key costs sixteen requests more than one.
pub const DEFAULT_BUCKETS: u8 = 16;

/// The mapping of a table created without one, from its primary key:
///
/// - a composite key whose first column is not generated: that column is
///   the PartitionKey, the rest the RowKey (`r:` and the fields), so a
///   point read is one request and a range over the rest reads one
///   partition (a tenant's or an order's rows together);
/// - any other key (one column, or a SERIAL/identity first): the RowKey is
///   every key column, and the PartitionKey the RowKey's bucket among
///   [`DEFAULT_BUCKETS`] (`{#16}`), so growing ids spread their inserts
///   over sixteen partitions, no append-only hot partition, while a whole
///   key still names its partition: a point read stays one request, and a
///   range of the key one request per bucket.
///
/// The RowKey starts with the literal `r:` so that `CREATE INDEX` can put
/// index rows beside the base rows. Integers are written signed and
/// zero-padded (`{id:+10}`, `{id:+18}`), the other types as typed fields
/// (`{name:s}`, `{at:t}`, see `keys::typed`), so that the RowKey's order
/// is the key's and ranges of any key column read key ranges.
fn default_mapping(
    columns: &[ColumnDef],
    primary_key: &[String],
) -> Result<(crate::keys::KeyTemplate, crate::keys::KeyTemplate), CatalogError> {
    let field = |c: &str| -> Result<String, CatalogError> {
        let column = columns.iter().find(|d| d.name == c).ok_or_else(|| {
            CatalogError::Definition(format!("primary key column {c} is not a column"))
        })?;
        Ok(match column.column_type {
            ColumnType::Int => format!("{{{c}:+10}}"),
            ColumnType::BigInt => format!("{{{c}:+18}}"),
            other => match super::typed_spec(other) {
                Some(spec) => format!("{{{c}:{spec}}}"),
                None => {
                    return Err(CatalogError::Definition(format!(
                        "primary key column {c} is {other}: a key cannot hold it (or map the table WITH (...))"
                    )));
                }
            },
        })
    };
    let generated = |c: &str| columns.iter().any(|d| d.name == c && d.identity.is_some());
    let (partition, rows) = match primary_key {
        [first, rest @ ..] if !rest.is_empty() && !generated(first) => (field(first)?, rest),
        _ => (format!("{{#{DEFAULT_BUCKETS}}}"), primary_key),
    };
    let rows = rows
        .iter()
        .map(|c| field(c))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((
        partition.parse()?,
        format!("r:{}", rows.join("__")).parse()?,
    ))
}

/// The storage table a plain table's name suggests: its letters and digits
/// (a storage table name has no others), starting with a letter, 3 to 63
/// characters. The engine adds a number where the name is taken.
fn storage_name(name: &str) -> Result<TableName, CatalogError> {
    let mut text: String = name.chars().filter(char::is_ascii_alphanumeric).collect();
    if !text.starts_with(|c: char| c.is_ascii_alphabetic()) {
        text.insert(0, 't');
    }
    while text.len() < 3 {
        text.push('0');
    }
    text.truncate(56);
    TableName::new(text)
        .map_err(|e| CatalogError::Definition(format!("storage table for {name}: {e}")))
}

/// The sequence of identity column `column`: `options` as given, and an
/// INT column's kept in its range, as PostgreSQL's `AS integer` does.
fn identity_for(
    table: &str,
    column: &str,
    column_type: ColumnType,
    options: &[datafusion::sql::sqlparser::ast::SequenceOptions],
) -> Result<SequenceDef, CatalogError> {
    if !matches!(column_type, ColumnType::Int | ColumnType::BigInt) {
        return Err(CatalogError::Definition(format!(
            "column {column}: an identity column is INT or BIGINT"
        )));
    }
    let mut seq = SequenceDef::from_options(&identity_sequence(table, column), options)?;
    if column_type == ColumnType::Int {
        seq.min = seq.min.max(i64::from(i32::MIN));
        seq.max = seq.max.min(i64::from(i32::MAX));
        if !(seq.min..=seq.max).contains(&seq.start) {
            return Err(CatalogError::Definition(format!(
                "column {column}: START {} is outside an INT column's range",
                seq.start
            )));
        }
    }
    Ok(seq)
}

/// The column type of PostgreSQL's serial pseudo-types (`SERIAL`,
/// `BIGSERIAL`, `SMALLSERIAL` and their `serialN` spellings); `None` for
/// any other type.
fn serial_type(t: &datafusion::sql::sqlparser::ast::DataType) -> Option<ColumnType> {
    let datafusion::sql::sqlparser::ast::DataType::Custom(name, modifiers) = t else {
        return None;
    };
    if !modifiers.is_empty() {
        return None;
    }
    match name.to_string().to_lowercase().as_str() {
        "serial" | "serial4" | "smallserial" | "serial2" => Some(ColumnType::Int),
        "bigserial" | "serial8" => Some(ColumnType::BigInt),
        _ => None,
    }
}

/// A true/false option's value.
pub(super) fn flag_option(key: &str, value: &Expr) -> Result<bool, CatalogError> {
    flag(key, &string_value(key, value)?)
}

/// A true/false option.
fn flag(key: &str, text: &str) -> Result<bool, CatalogError> {
    match text.to_lowercase().as_str() {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(CatalogError::Definition(format!(
            "option {key}: expected true or false, found {text:?}"
        ))),
    }
}

/// What a `CREATE INDEX` declares.
#[derive(Debug, Clone, PartialEq)]
pub enum NewIndex {
    /// Index rows beside the base rows, in their partitions.
    Local(IndexDef),
    /// Entities in a storage table of their own (`WITH (global = true)`).
    Global(GlobalIndexDef),
}

/// One column of an index as `CREATE INDEX` lists it.
struct IndexColumn {
    name: String,
    descending: bool,
    /// `NULLS FIRST` / `NULLS LAST` as written.
    nulls_first: Option<bool>,
}

/// The index a `CREATE INDEX [name] ON table [USING btree] (columns)
/// [INCLUDE (...)] [WITH (...)]` declares on `def`, as PostgreSQL reads
/// it: columns ascending or `DESC`, NULLs where `NULLS FIRST/LAST` puts
/// them (PostgreSQL's defaults otherwise), a name made up as PostgreSQL
/// makes one (`table_col_idx`) when none is given. `WITH (row_key =
/// '<template>')` gives its RowKey template, whose leading fields must be
/// the listed columns in their directions; without it the template is the
/// name in capitals and a colon, then a typed field per listed column
/// (`{c:s}`, `{c:~i10,nulls_last}`, see `keys::typed`), then the
/// primary-key columns the PartitionKey and the list lack, joined by `__`.
/// `WITH (covering = false)` declares rows that carry only their keys.
///
/// `WITH (global = true)`, and `UNIQUE` (uniqueness over every partition
/// needs one place per value), declare a global index (`global_index`).
/// Refused, with the reason: `NULLS NOT DISTINCT`, a partial index
/// (`WHERE`), an expression, an access method other than btree, an
/// operator class other than the pattern ones, and `INCLUDE` on rows that
/// are not covering (a covering row already carries every column).
pub fn index_from_create(
    create: &datafusion::sql::sqlparser::ast::CreateIndex,
    def: &TableDef,
) -> Result<NewIndex, CatalogError> {
    let bad = |m: String| CatalogError::Definition(m);
    if create.unique && create.nulls_distinct == Some(false) {
        return Err(bad(
            "UNIQUE ... NULLS NOT DISTINCT is not supported: NULLs are distinct in a unique index"
                .into(),
        ));
    }
    if create.predicate.is_some() {
        return Err(bad(
            "partial indexes (CREATE INDEX ... WHERE) are not supported: every row has its index row".into(),
        ));
    }
    if let Some(using) = &create.using
        && !using.to_string().eq_ignore_ascii_case("btree")
    {
        return Err(bad(format!(
            "index access method {using} is not supported (index rows are ordered keys: btree)"
        )));
    }
    let columns = index_columns(create)?;
    if columns.is_empty() {
        return Err(bad("an index needs at least one column".into()));
    }
    let name = match &create.name {
        Some(n) => match n.0.as_slice() {
            [part] => part
                .as_ident()
                .map(normalize_ident)
                .ok_or_else(|| bad(format!("invalid index name {n}")))?,
            _ => return Err(bad(format!("an index is named within its table, not {n}"))),
        },
        None => default_index_name(&def.name, &columns),
    };
    let IndexOptions {
        row_key,
        covering,
        global,
        table,
        partition_key,
    } = IndexOptions::read(create)?;
    if table.is_some() || partition_key.is_some() {
        if !global || create.unique || !covering {
            return Err(bad(
                "table and partition_key declare a global index's layout: they need global = true, and neither UNIQUE nor covering".into(),
            ));
        }
        let (Some(table), Some(partition_key), Some(row_key)) = (table, partition_key, row_key)
        else {
            return Err(bad(
                "a declared global index needs table, partition_key and row_key".into(),
            ));
        };
        return Ok(NewIndex::Global(declared_global(
            def,
            name,
            &columns,
            &table,
            partition_key,
            row_key,
        )?));
    }
    // Uniqueness over every partition needs one place per value: a
    // unique index is global.
    if global || create.unique {
        if row_key.is_some() || !covering {
            return Err(bad(
                "a global index's keys are derived from its columns: row_key and covering do not apply".into(),
            ));
        }
        let mut g = global_index(def, name, &columns)?;
        if create.unique {
            g.unique = Some(columns.len());
        }
        return Ok(NewIndex::Global(g));
    }
    if !create.include.is_empty() && !covering {
        return Err(bad(
            "INCLUDE needs covering index rows (covering = true, the default, carries every column)".into(),
        ));
    }
    let row_key = match row_key {
        Some(t) => leads_with(t, &columns)?,
        None => derived_template(def, &name, &columns)?,
    };
    Ok(NewIndex::Local(IndexDef {
        name,
        row_key,
        covering,
        building: false,
    }))
}

/// The columns a `CREATE INDEX` lists, each a column (text collated as
/// `C`, or with a pattern operator class, orders as a key already does).
fn index_columns(
    create: &datafusion::sql::sqlparser::ast::CreateIndex,
) -> Result<Vec<IndexColumn>, CatalogError> {
    let bad = |m: String| CatalogError::Definition(m);
    let mut columns = Vec::new();
    for c in &create.columns {
        // Text keys order by code point: C's collation, and what the
        // pattern operator classes give `LIKE 'p%'`; naming them changes
        // nothing.
        let expr = match &c.column.expr {
            Expr::Collate { expr, collation }
                if ["c", "posix"].contains(
                    &collation
                        .to_string()
                        .trim_matches('"')
                        .to_lowercase()
                        .as_str(),
                ) =>
            {
                expr.as_ref()
            }
            other => other,
        };
        let Expr::Identifier(ident) = expr else {
            return Err(bad(format!(
                "index column {} is an expression: only columns can be indexed (text orders as COLLATE \"C\")",
                c.column.expr
            )));
        };
        if let Some(class) = &c.operator_class {
            let class = class.to_string().to_lowercase();
            if ![
                "text_pattern_ops",
                "varchar_pattern_ops",
                "bpchar_pattern_ops",
            ]
            .contains(&class.as_str())
            {
                return Err(bad(format!(
                    "operator class {class} on index column {ident} is not supported (only the pattern classes, which text keys already are)"
                )));
            }
        }
        columns.push(IndexColumn {
            name: normalize_ident(ident),
            descending: c.column.options.asc == Some(false),
            nulls_first: c.column.options.nulls_first,
        });
    }
    Ok(columns)
}

/// The `WITH (...)` options of a `CREATE INDEX`.
struct IndexOptions {
    row_key: Option<crate::keys::KeyTemplate>,
    covering: bool,
    global: bool,
    /// A declared global index's storage table and PartitionKey template:
    /// an application's own layout.
    table: Option<String>,
    partition_key: Option<crate::keys::KeyTemplate>,
}

impl IndexOptions {
    fn read(create: &datafusion::sql::sqlparser::ast::CreateIndex) -> Result<Self, CatalogError> {
        let bad = |m: String| CatalogError::Definition(m);
        let (mut row_key, mut covering, mut global) = (None, true, false);
        // An application's layout: its table and PartitionKey template.
        let (mut table, mut partition_key) = (None, None);
        for option in &create.with {
            let Expr::BinaryOp {
                left,
                op: datafusion::sql::sqlparser::ast::BinaryOperator::Eq,
                right,
            } = option
            else {
                return Err(bad(format!("option {option} is not key = value")));
            };
            let Expr::Identifier(key) = left.as_ref() else {
                return Err(bad(format!("option {option} is not key = value")));
            };
            let key = key.value.to_lowercase();
            let text = || string_value(&key, right);
            match key.as_str() {
                "row_key" => row_key = Some(text()?.parse::<crate::keys::KeyTemplate>()?),
                "covering" => covering = flag(&key, &text()?)?,
                "global" => global = flag(&key, &text()?)?,
                "table" => table = Some(text()?),
                "partition_key" => {
                    partition_key = Some(text()?.parse::<crate::keys::KeyTemplate>()?)
                }
                // PostgreSQL's B-tree storage parameters: nothing to tune here.
                "fillfactor" | "deduplicate_items" => {}
                _ => {
                    return Err(bad(format!(
                        "unknown index option {key} (expected row_key, covering, global, table or partition_key)"
                    )));
                }
            }
        }
        Ok(Self {
            row_key,
            covering,
            global,
            table,
            partition_key,
        })
    }
}

/// A given RowKey template of a local index, which must lead with the
/// listed columns in their directions.
fn leads_with(
    t: crate::keys::KeyTemplate,
    columns: &[IndexColumn],
) -> Result<crate::keys::KeyTemplate, CatalogError> {
    let bad = |m: String| CatalogError::Definition(m);
    for (n, c) in columns.iter().enumerate() {
        let field = t.field(n);
        if field.is_none_or(|(name, _)| name != c.name) {
            return Err(bad(format!(
                "row_key {t} must lead with the listed columns ({})",
                columns
                    .iter()
                    .map(|c| c.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        // The template's direction rules; a column listed DESC
        // must have a descending field.
        if c.descending && field.and_then(|(_, f)| f.order()) != Some(false) {
            return Err(bad(format!(
                "row_key {t}: field {} must be descending (~) as the column is listed DESC",
                c.name
            )));
        }
    }
    Ok(t)
}

/// A typed field of column `c` in a direction and place of NULL.
fn typed_field(
    def: &TableDef,
    c: &str,
    descending: bool,
    nulls_first: Option<bool>,
) -> Result<String, CatalogError> {
    let column = def.column(c).ok_or_else(|| CatalogError::Inconsistent {
        table: def.name.clone(),
        reason: format!("index column {c} is not a column"),
    })?;
    let spec = super::typed_spec(column.column_type).ok_or_else(|| {
        CatalogError::Definition(format!(
            "index column {c} is {}: a key cannot hold it",
            column.column_type
        ))
    })?;
    let nulls = match nulls_first {
        Some(true) if !descending => ",nulls_first",
        Some(false) if descending => ",nulls_last",
        _ => "",
    };
    let dir = if descending { "~" } else { "" };
    Ok(format!("{{{c}:{dir}{spec}{nulls}}}"))
}

/// A global index on `columns`: the first column's value is the
/// PartitionKey, so an equality on it reads one partition; the other
/// columns, then every primary-key column not listed, the RowKey. Its
/// storage table is the base table's storage table's name, `x` and the
/// index's name, cut to 56 characters (the engine adds a number where that
/// is taken).
fn global_index(
    def: &TableDef,
    name: String,
    columns: &[IndexColumn],
) -> Result<GlobalIndexDef, CatalogError> {
    let (first, rest) = columns
        .split_first()
        .ok_or_else(|| CatalogError::Definition("an index needs at least one column".into()))?;
    let partition = typed_field(def, &first.name, first.descending, first.nulls_first)?;
    let mut fields = rest
        .iter()
        .map(|c| typed_field(def, &c.name, c.descending, c.nulls_first))
        .collect::<Result<Vec<_>, _>>()?;
    for c in &def.primary_key {
        if !columns.iter().any(|l| l.name == *c) {
            fields.push(typed_field(def, c, false, None)?);
        }
    }
    // `k:` leads, so that a unique entity's RowKey (the fields of its
    // unique columns only) is never empty.
    let row = format!("k:{}", fields.join("__"));
    let suffix: String = name.chars().filter(char::is_ascii_alphanumeric).collect();
    let table: String = format!("{}x{suffix}", def.storage_table.as_str())
        .chars()
        .take(56)
        .collect();
    Ok(GlobalIndexDef {
        table: TableName::new(table)
            .map_err(|e| CatalogError::Definition(format!("global index {name}: {e}")))?,
        partition_key: partition.parse()?,
        row_key: row.parse()?,
        building: false,
        unique: None,
        declared: false,
        name,
    })
}

/// A global index over entities an application writes: in its table
/// `table`, keyed by its templates. The PartitionKey may hold only listed
/// columns (an equality on them then reads one partition), and the two
/// keys together every listed column and every column of the base row's
/// keys, so that each entity names one base row by its keys alone.
fn declared_global(
    def: &TableDef,
    name: String,
    columns: &[IndexColumn],
    table: &str,
    partition_key: crate::keys::KeyTemplate,
    row_key: crate::keys::KeyTemplate,
) -> Result<GlobalIndexDef, CatalogError> {
    let bad = |m: String| CatalogError::Definition(format!("index {name}: {m}"));
    let listed = |c: &str| columns.iter().any(|l| l.name == c);
    if let Some(c) = partition_key.columns().find(|c| !listed(c)) {
        return Err(bad(format!(
            "partition_key {partition_key} holds {c}, which the index does not list"
        )));
    }
    let keyed: Vec<&str> = partition_key.columns().chain(row_key.columns()).collect();
    let needed = columns.iter().map(|c| c.name.as_str()).chain(
        def.columns
            .iter()
            .map(|c| c.name.as_str())
            .filter(|c| def.is_key_column(c)),
    );
    for c in needed {
        if !keyed.contains(&c) {
            return Err(bad(format!(
                "the keys ({partition_key}, {row_key}) must hold {c}: every listed column and every column of the base row's keys"
            )));
        }
    }
    for c in &keyed {
        if def.column(c).is_none() {
            return Err(bad(format!("{c} is not a column of {}", def.name)));
        }
    }
    if columns
        .iter()
        .any(|c| c.descending || c.nulls_first.is_some())
    {
        return Err(bad(
            "a declared layout's order is its templates': write ~ in the template, not DESC".into(),
        ));
    }
    Ok(GlobalIndexDef {
        table: TableName::new(table).map_err(|e| bad(format!("table {table}: {e}")))?,
        partition_key,
        row_key,
        building: false,
        unique: None,
        declared: true,
        name,
    })
}

/// PostgreSQL's name for an unnamed index: `table_col1_col2_idx`, cut to
/// 63 characters.
fn default_index_name(table: &str, columns: &[IndexColumn]) -> String {
    let mut name = table.to_owned();
    for c in columns {
        name.push('_');
        name.push_str(&c.name);
    }
    name.push_str("_idx");
    name.chars().take(63).collect()
}

/// The default template of an index on `columns` (see `index_from_create`).
fn derived_template(
    def: &TableDef,
    name: &str,
    columns: &[IndexColumn],
) -> Result<crate::keys::KeyTemplate, CatalogError> {
    let mut fields: Vec<(&str, bool, Option<bool>)> = columns
        .iter()
        .map(|c| (c.name.as_str(), c.descending, c.nulls_first))
        .collect();
    for c in &def.primary_key {
        if !def.partition_key.columns().any(|p| p == c) && !fields.iter().any(|f| f.0 == c) {
            fields.push((c, false, None));
        }
    }
    // The index rows' own prefix: the name's letters, digits and `_`.
    let lead: String = name
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect::<String>()
        .to_uppercase();
    let mut text = format!("{}:", if lead.is_empty() { "IX" } else { &lead });
    let fields = fields
        .iter()
        .map(|(c, descending, nulls_first)| typed_field(def, c, *descending, *nulls_first))
        .collect::<Result<Vec<_>, _>>()?;
    text.push_str(&fields.join("__"));
    Ok(text.parse()?)
}

fn string_value(key: &str, value: &Expr) -> Result<String, CatalogError> {
    match value {
        Expr::Value(v) => match &v.value {
            Value::SingleQuotedString(s) => Ok(s.clone()),
            Value::Boolean(b) => Ok(b.to_string()),
            other => Err(CatalogError::Definition(format!(
                "option {key}: expected a quoted string, found {other}"
            ))),
        },
        Expr::Identifier(ident) => Ok(ident.value.clone()),
        other => Err(CatalogError::Definition(format!(
            "option {key}: expected a quoted string, found {other}"
        ))),
    }
}

/// Quotes an identifier when SQL would otherwise change or misread it, as
/// PostgreSQL prints one.
pub fn ident(name: &str) -> String {
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

fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

impl TableDef {
    /// The definition as canonical DDL, as a user writes it: what `SHOW
    /// CREATE TABLE` shows and the stored catalog keeps. [`parse`] reads it
    /// back the same but for the catalog's own state, which DDL never
    /// holds (an index still being built: `catalog::state`).
    pub fn to_ddl(&self) -> String {
        let mut out = format!("CREATE TABLE {} (\n", ident(&self.name));
        for c in &self.columns {
            let null = if c.not_null { " NOT NULL" } else { "" };
            let default = match &c.default {
                Some(d) => format!(" DEFAULT {d}"),
                None => String::new(),
            };
            out.push_str(&format!(
                "    {} {}{null}{default},\n",
                ident(&c.name),
                c.column_type
            ));
        }
        let pk: Vec<String> = self.primary_key.iter().map(|c| ident(c)).collect();
        out.push_str(&format!("    PRIMARY KEY ({})\n) WITH (\n", pk.join(", ")));
        let mut options = vec![
            format!("storage_table = {}", quote(self.storage_table.as_str())),
            format!("partition_key = {}", quote(&self.partition_key.to_string())),
            format!("row_key = {}", quote(&self.row_key.to_string())),
        ];
        if self.owned {
            options.push("owned = true".into());
        }
        if !self.dropped.is_empty() {
            options.push(format!("dropped = {}", quote(&self.dropped.join(","))));
        }
        let renamed: Vec<String> = self
            .columns
            .iter()
            .filter_map(|c| Some(format!("{}={}", c.name, c.property.as_deref()?)))
            .collect();
        if !renamed.is_empty() {
            options.push(format!("renamed = {}", quote(&renamed.join(";"))));
        }
        for g in &self.global_indexes {
            options.push(format!(
                "global_table_{} = {}",
                g.name,
                quote(g.table.as_str())
            ));
            options.push(format!(
                "global_pk_{} = {}",
                g.name,
                quote(&g.partition_key.to_string())
            ));
            options.push(format!(
                "global_rk_{} = {}",
                g.name,
                quote(&g.row_key.to_string())
            ));
            if let Some(n) = g.unique {
                options.push(format!("global_unique_{} = '{n}'", g.name));
            }
            if g.declared {
                options.push(format!("global_declared_{} = true", g.name));
            }
        }
        for i in &self.indexes {
            options.push(format!(
                "index_{} = {}",
                i.name,
                quote(&i.row_key.to_string())
            ));
            if !i.covering {
                options.push(format!("covering_{} = false", i.name));
            }
        }
        out.push_str(&format!("    {}\n);\n", options.join(",\n    ")));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const REGISTRATIONS: &str = include_str!("../../../../catalog/registrations.sql");

    #[test]
    fn shipped_definition_parses_and_round_trips() {
        let def = parse(REGISTRATIONS).unwrap();
        assert_eq!(def.name, "registrations");
        assert_eq!(def.storage_table.as_str(), "Registrations");
        assert_eq!(def.primary_key, ["event", "distance", "bib"]);
        assert_eq!(def.indexes.len(), 1);
        assert_eq!(parse(&def.to_ddl()).unwrap(), def);
    }

    #[test]
    fn create_index_declares_a_template() {
        let def = parse(REGISTRATIONS).unwrap();
        let declared = |sql: &str| {
            let statements = Parser::parse_sql(&PostgreSqlDialect {}, sql).unwrap();
            match statements.as_slice() {
                [Statement::CreateIndex(c)] => index_from_create(c, &def),
                _ => panic!("not CREATE INDEX: {sql}"),
            }
        };
        let index = |sql: &str| {
            declared(sql).map(|n| match n {
                NewIndex::Local(ix) => ix,
                NewIndex::Global(g) => panic!("a global index: {g:?}"),
            })
        };
        // A global index: the first column's value is the PartitionKey,
        // then the rest, then the whole primary key.
        match declared(
            "CREATE INDEX by_club ON registrations (club DESC, age) WITH (global = true)",
        ) {
            Ok(NewIndex::Global(g)) => {
                assert_eq!(g.partition_key.to_string(), "{club:~s}");
                assert_eq!(
                    g.row_key.to_string(),
                    "k:{age:i10}__{event:s}__{distance:s}__{bib:i10}"
                );
                assert_eq!(g.table.as_str(), "Registrationsxbyclub");
            }
            other => panic!("{other:?}"),
        }
        // UNIQUE is global: its unique columns are the leading key fields.
        match declared("CREATE UNIQUE INDEX u ON registrations (club, age)") {
            Ok(NewIndex::Global(g)) => assert_eq!(g.unique, Some(2)),
            other => panic!("{other:?}"),
        }
        // By default: the listed columns, then the primary key's rest.
        let ix = index("CREATE INDEX by_name ON registrations (name)").unwrap();
        assert_eq!(ix.row_key.to_string(), "BY_NAME:{name:s}__{bib:i10}");
        assert!(ix.covering && !ix.building);
        // As PostgreSQL writes them: a made-up name, DESC, NULLS FIRST/LAST.
        let ix = index("CREATE INDEX ON registrations (age DESC NULLS LAST, name)").unwrap();
        assert_eq!(ix.name, "registrations_age_name_idx");
        assert_eq!(
            ix.row_key.to_string(),
            "REGISTRATIONS_AGE_NAME_IDX:{age:~i10,nulls_last}__{name:s}__{bib:i10}"
        );
        let ix = index(
            "CREATE INDEX IF NOT EXISTS a ON registrations USING btree (age NULLS FIRST) INCLUDE (club)",
        )
        .unwrap();
        assert_eq!(ix.row_key.to_string(), "A:{age:i10,nulls_first}__{bib:i10}");
        let ix = index(
            "CREATE INDEX old ON registrations (age) WITH (row_key = 'OLD:{age:~03}__{bib}', covering = false)",
        )
        .unwrap();
        assert_eq!(ix.row_key.to_string(), "OLD:{age:~03}__{bib}");
        assert!(!ix.covering);
        for (sql, needle) in [
            (
                "CREATE INDEX x ON registrations (age DESC) WITH (row_key = 'X:{age:03}__{bib}')",
                "must be descending",
            ),
            (
                "CREATE INDEX x ON registrations (lower(name))",
                "expression",
            ),
            (
                "CREATE INDEX x ON registrations USING hash (age)",
                "access method",
            ),
            (
                "CREATE INDEX x ON registrations (age) WHERE age > 5",
                "partial",
            ),
            (
                "CREATE INDEX x ON registrations (age) WITH (row_key = 'X:{bib}__{age}')",
                "must lead with",
            ),
            (
                "CREATE INDEX x ON registrations (age) WITH (fill = 1)",
                "unknown index option",
            ),
            (
                "CREATE UNIQUE INDEX x ON registrations (age) NULLS NOT DISTINCT",
                "NULLS NOT DISTINCT",
            ),
        ] {
            let e = index(sql).unwrap_err().to_string();
            assert!(e.contains(needle), "{sql}: {e}");
        }
    }

    #[test]
    fn inconsistent_definitions_are_refused() {
        let base = "CREATE TABLE tee (a TEXT, b INT, c DOUBLE) WITH (partition_key = '{a}', row_key = '{b:05}'";
        assert!(parse(&format!("{base})")).is_ok());
        for (sql, needle) in [
            (format!("{base}, index_x = '{{zz}}')"), "undeclared column zz"),
            ("CREATE TABLE tee (a TEXT, c DOUBLE) WITH (partition_key = '{a}', row_key = '{c:05}')".into(), "cannot be written"),
            ("CREATE TABLE tee (a TEXT, b INT, PRIMARY KEY (b)) WITH (partition_key = '{a}', row_key = '{b:05}')".into(), "primary key"),
            ("CREATE TABLE tee (a TEXT) WITH (row_key = '{a}')".into(), "partition_key"),
            ("CREATE TABLE tee (a TEXT, b NUMERIC) WITH (partition_key = '{a}', row_key = 'x')".into(), "not supported"),
            ("CREATE TABLE tee (a TEXT, b INT) WITH (partition_key = '{a}', row_key = '{#4}')".into(), "is a PartitionKey template"),
            ("CREATE TABLE tee (a INT, b TEXT, PRIMARY KEY (a)) WITH (partition_key = '{#16}', row_key = 'r:{a:05}__{b}')".into(), "every RowKey field"),
            (format!("{base}, colour = 'red')"), "unknown option colour"),
            (format!("{base}, index_x = 'X:{{c:02}}__{{b}}')"), "cannot be written"),
            ("CREATE TABLE tee (a TEXT, b INT NOT NULL, c INT) WITH (partition_key = '{a}', row_key = 'R:{b:05}', index_x = 'X:{c:02}__{b}')".into(), "typed field that holds NULL"),
            (format!("{base}, covering_y = false)"), "names no index"),
            ("CREATE TABLE tee (a TEXT, b INT) WITH (partition_key = '{a}{b}', row_key = 'x')".into(), "separator"),
        ] {
            let e = parse(&sql).unwrap_err().to_string();
            assert!(e.contains(needle), "{sql}: {e}");
        }
    }
}
