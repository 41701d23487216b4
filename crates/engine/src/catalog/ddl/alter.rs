//! `ALTER TABLE` of a mapped table: a change of its definition, one
//! function per operation.

use datafusion::sql::sqlparser::ast::{
    AlterTable, AlterTableOperation, ColumnDef as SqlColumn, ColumnOption, Ident, ObjectName,
    RenameTableNameKind,
};

use super::{object_name, owned_sequence};
use crate::catalog::{CatalogError, ColumnDef, ColumnType, TableDef, normalize_ident};

/// `def` as `ALTER TABLE` leaves it. Changes of the catalog only, never of
/// stored rows: `ADD COLUMN` of a nullable column without a default (rows
/// stored before read NULL, as PostgreSQL's do), `DROP COLUMN` of a column
/// outside the keys (its stored properties stay, unread), `RENAME TO`.
/// What would need every stored row rewritten is refused, naming why: a
/// column added with a default or NOT NULL, a key column dropped, a column
/// renamed (the storage names a property by its column).
pub fn alter(def: &TableDef, alter: &AlterTable) -> Result<TableDef, CatalogError> {
    let refuse = Refuse(&def.name);
    let mut out = def.clone();
    for op in &alter.operations {
        match op {
            AlterTableOperation::AddColumn {
                if_not_exists,
                column_def,
                ..
            } => add_column(&mut out, column_def, *if_not_exists, refuse)?,
            AlterTableOperation::DropColumn {
                column_names,
                if_exists,
                ..
            } => drop_columns(&mut out, column_names, *if_exists, refuse)?,
            AlterTableOperation::RenameTable {
                table_name: RenameTableNameKind::To(name) | RenameTableNameKind::As(name),
            } => rename_table(&mut out, &def.name, name, refuse)?,
            AlterTableOperation::RenameColumn {
                old_column_name,
                new_column_name,
            } => rename_column(&mut out, old_column_name, new_column_name, refuse)?,
            other => return Err(refuse.because(format!("{other} is not supported"))),
        }
    }
    out.validate()?;
    Ok(out)
}

/// The refusal of one `ALTER TABLE`, naming the table as the statement did.
#[derive(Clone, Copy)]
struct Refuse<'a>(&'a str);

impl Refuse<'_> {
    fn because(self, why: String) -> CatalogError {
        CatalogError::Definition(format!("ALTER TABLE {}: {why}", self.0))
    }
}

/// `ADD COLUMN`: only what the rows stored before can read without a rewrite.
fn add_column(
    out: &mut TableDef,
    c: &SqlColumn,
    if_not_exists: bool,
    refuse: Refuse<'_>,
) -> Result<(), CatalogError> {
    let column = normalize_ident(&c.name);
    if out.column(&column).is_some() {
        if if_not_exists {
            return Ok(());
        }
        return Err(refuse.because(format!("column {column} already exists")));
    }
    if out.dropped.contains(&column) || out.declares_property(&column) {
        return Err(refuse.because(format!(
            "column {column} was dropped or renamed, and its values are still in the stored rows under that name: a new column of that name would show them (choose another name)"
        )));
    }
    let column_type =
        ColumnType::from_sql(&c.data_type).ok_or_else(|| CatalogError::UnsupportedType {
            column: column.clone(),
            sql_type: c.data_type.to_string(),
        })?;
    let (mut not_null, mut default) = (false, None);
    for o in &c.options {
        match &o.option {
            ColumnOption::Null => not_null = false,
            ColumnOption::NotNull => not_null = true,
            ColumnOption::Default(e) if e.to_string().eq_ignore_ascii_case("NULL") => {
                default = None
            }
            ColumnOption::Default(e) => default = Some(e.to_string()),
            other => {
                return Err(refuse.because(format!(
                    "column {column} {other}: the rows stored before would not hold it without being rewritten; add the column plain, then UPDATE"
                )));
            }
        }
    }
    let added = ColumnDef {
        name: column.clone(),
        column_type,
        not_null,
        default,
        identity: None,
        property: None,
    };
    // No row is rewritten: a row stored before reads the column's fill
    // (`ColumnDef::fill`). Only a NOT NULL column with a constant default
    // has one: a nullable column's absent property is also how a NULL is
    // stored.
    match (&added.default, added.not_null, added.fill()) {
        (None, false, _) | (Some(_), true, Some(_)) => {}
        (Some(d), false, _) => {
            return Err(refuse.because(format!(
                "column {column} DEFAULT {d}: the rows stored before would read NULL where PostgreSQL gives them the default (a NULL is stored as an absent property); add it NOT NULL DEFAULT {d}, or plain and then UPDATE"
            )));
        }
        (None, true, _) => {
            return Err(refuse.because(format!(
                "column {column} NOT NULL needs a DEFAULT for the rows stored before"
            )));
        }
        (Some(d), true, None) => {
            return Err(refuse.because(format!(
                "column {column} NOT NULL DEFAULT {d}: the rows stored before read the default, so it must be a constant of the column's type"
            )));
        }
    }
    // Before a hidden row key, which stays last.
    let at = out
        .columns
        .iter()
        .position(|c| c.name == crate::catalog::HIDDEN_ROWID)
        .unwrap_or(out.columns.len());
    out.columns.insert(at, added);
    Ok(())
}

/// `DROP COLUMN`: a column outside the keys; its stored values stay, unread.
fn drop_columns(
    out: &mut TableDef,
    column_names: &[Ident],
    if_exists: bool,
    refuse: Refuse<'_>,
) -> Result<(), CatalogError> {
    for ident in column_names {
        let column = normalize_ident(ident);
        if out.column(&column).is_none() {
            if if_exists {
                continue;
            }
            return Err(refuse.because(format!("column {column} does not exist")));
        }
        if out.is_template_column(&column) || out.primary_key.contains(&column) {
            return Err(refuse.because(format!(
                "column {column} is in the keys of stored rows (PartitionKey, RowKey or an index's): dropping it would change them"
            )));
        }
        // Its stored values are under its property's name.
        if let Some(c) = out.column(&column) {
            out.dropped.push(c.property_name().to_owned());
        }
        out.columns.retain(|c| c.name != column);
    }
    Ok(())
}

/// `RENAME TO`, unless an identity column's sequence is named after the table.
fn rename_table(
    out: &mut TableDef,
    old: &str,
    name: &ObjectName,
    refuse: Refuse<'_>,
) -> Result<(), CatalogError> {
    // An identity column's sequence is named after the table (`t_id_seq`),
    // and DROP TABLE finds it by that name.
    if let Some(c) = out
        .columns
        .iter()
        .find(|c| owned_sequence(old, c).is_some())
    {
        return Err(refuse.because(format!(
            "RENAME TO is not supported for a table with an identity column ({}): its sequence is named after the table",
            c.name
        )));
    }
    out.name = object_name(name)?;
    Ok(())
}

/// `RENAME COLUMN`: the stored rows keep the property's name, which the
/// column reads and writes under its new one (`renamed`).
fn rename_column(
    out: &mut TableDef,
    old_column_name: &Ident,
    new_column_name: &Ident,
    refuse: Refuse<'_>,
) -> Result<(), CatalogError> {
    let (old, new) = (
        normalize_ident(old_column_name),
        normalize_ident(new_column_name),
    );
    let Some(c) = out.column(&old) else {
        return Err(refuse.because(format!("column {old} does not exist")));
    };
    if out.is_template_column(&old) || out.primary_key.contains(&old) {
        return Err(refuse.because(format!(
            "RENAME COLUMN {old}: it is a field of the keys' templates; renaming a key column is not supported yet"
        )));
    }
    if owned_sequence(&out.name, c).is_some() {
        return Err(refuse.because(format!(
            "RENAME COLUMN {old}: it is an identity column, whose sequence is named after it"
        )));
    }
    if out.column(&new).is_some() {
        return Err(refuse.because(format!("column {new} already exists")));
    }
    let property = c.property_name().to_owned();
    if new != property && (out.dropped.contains(&new) || out.declares_property(&new)) {
        return Err(refuse.because(format!(
            "column {new} was dropped or renamed, and its values are still in the stored rows under that name (choose another name)"
        )));
    }
    if [&new, &property].iter().any(|n| n.contains(['=', ';'])) {
        return Err(refuse.because(format!(
            "RENAME COLUMN {old} TO {new}: a renamed column's name may not hold '=' or ';'"
        )));
    }
    if let Some(c) = out.columns.iter_mut().find(|c| c.name == old) {
        c.name = new.clone();
        c.property = (new != property).then_some(property);
    }
    Ok(())
}
