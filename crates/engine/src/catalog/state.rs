//! What the catalog keeps of a table beside its definition: state that the
//! engine sets and no statement of a user may, today which of its indexes
//! are still being built (`CREATE INDEX` stores an index as building before
//! it writes the rows of the base rows already there, so that a process
//! killed midway leaves an index that writes keep and reads do not use).
//!
//! The definition is DDL a user could have written; the state is this typed
//! record, stored beside it as JSON (`persist`). Kept apart, a `CREATE
//! TABLE` cannot set the state and `SHOW CREATE TABLE` never shows it. Rows
//! written before this record kept it as `building_<name> = true` options
//! in the DDL; [`TableState::split_legacy`] reads that form.

use std::collections::BTreeSet;

use datafusion::sql::sqlparser::ast::{CreateTable, CreateTableOptions, SqlOption};
use serde::{Deserialize, Serialize};

use super::{CatalogError, TableDef, ddl};

/// A table's catalog state.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TableState {
    /// The indexes and global indexes still being built, by name.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub building: BTreeSet<String>,
}

impl TableState {
    /// The state `def` carries.
    pub fn of(def: &TableDef) -> Self {
        let indexes = def.indexes.iter().filter(|i| i.building).map(|i| &i.name);
        let globals = def
            .global_indexes
            .iter()
            .filter(|g| g.building)
            .map(|g| &g.name);
        TableState {
            building: indexes.chain(globals).cloned().collect(),
        }
    }

    /// Whether there is none to keep.
    pub fn is_empty(&self) -> bool {
        self.building.is_empty()
    }

    /// Puts the state on `def`; a name `def` has no index of is an error
    /// (the two were stored together, so they disagree only if damaged).
    /// Names match as the DDL's option keys read them, whatever their
    /// case (`index_ByAge` reads back as index `byage`).
    pub fn apply(&self, def: &mut TableDef) -> Result<(), CatalogError> {
        for name in &self.building {
            let named = |n: &String| n.eq_ignore_ascii_case(name);
            if let Some(i) = def.indexes.iter_mut().find(|i| named(&i.name)) {
                i.building = true;
            } else if let Some(g) = def.global_indexes.iter_mut().find(|g| named(&g.name)) {
                g.building = true;
            } else {
                return Err(CatalogError::Definition(format!(
                    "the state marks index {name} as building, and the table has no such index"
                )));
            }
        }
        Ok(())
    }

    /// The stored form.
    pub fn to_json(&self) -> Result<String, CatalogError> {
        serde_json::to_string(self)
            .map_err(|e| CatalogError::Definition(format!("the table's state: {e}")))
    }

    /// Reads the stored form.
    pub fn from_json(text: &str) -> Result<Self, CatalogError> {
        serde_json::from_str(text)
            .map_err(|e| CatalogError::Definition(format!("the table's state {text:?}: {e}")))
    }

    /// A version-1 row's DDL, which before this record held the state as
    /// `building_<name> = true` options: the options taken out into the
    /// state, the rest left as the user's statement.
    pub fn split_legacy(create: &mut CreateTable) -> Result<Self, CatalogError> {
        let mut state = TableState::default();
        let (CreateTableOptions::With(options) | CreateTableOptions::Options(options)) =
            &mut create.table_options
        else {
            return Ok(state);
        };
        let mut kept = Vec::with_capacity(options.len());
        for option in options.drain(..) {
            let mark = match &option {
                SqlOption::KeyValue { key, value } => {
                    let key = key.value.to_lowercase();
                    match key.strip_prefix("building_").filter(|n| !n.is_empty()) {
                        Some(name) => Some((name.to_owned(), ddl::flag_option(&key, value)?)),
                        None => None,
                    }
                }
                _ => None,
            };
            match mark {
                Some((name, true)) => {
                    state.building.insert(name);
                }
                Some((_, false)) => {}
                None => kept.push(option),
            }
        }
        *options = kept;
        Ok(state)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const THINGS: &str = "CREATE TABLE things (p TEXT, r TEXT, a TEXT NOT NULL, PRIMARY KEY (p, r)) \
        WITH (partition_key = '{p}', row_key = 'R:{r}', index_a = 'A:{a}__{r}'";

    #[test]
    fn an_index_being_built_is_the_catalogs_state_not_a_users_option() {
        let written = format!("{THINGS}, building_a = true)");
        let e = ddl::parse(&written).unwrap_err();
        assert!(e.to_string().contains("unknown option building_a"), "{e}");

        let mut def = ddl::parse(&format!("{THINGS})")).unwrap();
        assert_eq!(TableState::of(&def), TableState::default());
        def.indexes[0].building = true;
        let state = TableState::of(&def);
        assert_eq!(state.to_json().unwrap(), r#"{"building":["a"]}"#);
        // The definition a user is shown, and may write again, has none.
        let mut read = ddl::parse(&def.to_ddl()).unwrap();
        assert!(!read.indexes[0].building);
        TableState::from_json(&state.to_json().unwrap())
            .unwrap()
            .apply(&mut read)
            .unwrap();
        assert_eq!(read, def);
    }

    #[test]
    fn format_ones_building_options_are_read_into_the_state() {
        let stored = format!("{THINGS}, building_a = true)");
        let mut create = ddl::create_statement(&stored).unwrap();
        let state = TableState::split_legacy(&mut create).unwrap();
        assert_eq!(state.building, BTreeSet::from(["a".to_owned()]));
        let mut def = ddl::from_create_table(&create).unwrap();
        state.apply(&mut def).unwrap();
        assert!(def.indexes[0].building);
    }

    #[test]
    fn a_building_index_keeps_its_mark_whatever_the_case_of_its_name() {
        let mut def = ddl::parse(&format!("{THINGS}, index_ByAge = 'B:{{a}}__{{r}}')")).unwrap();
        let state = TableState {
            building: BTreeSet::from(["ByAge".to_owned()]),
        };
        state.apply(&mut def).unwrap();
        let marked: Vec<&str> = def
            .indexes
            .iter()
            .filter(|i| i.building)
            .map(|i| i.name.as_str())
            .collect();
        assert_eq!(marked, ["byage"], "{def:?}");
    }

    #[test]
    fn a_state_naming_no_index_is_refused() {
        let mut def = ddl::parse(&format!("{THINGS})")).unwrap();
        let state = TableState::from_json(r#"{"building":["gone"]}"#).unwrap();
        let e = state.apply(&mut def).unwrap_err();
        assert!(e.to_string().contains("no such index"), "{e}");
        assert!(TableState::from_json(r#"{"built":[]}"#).is_err());
    }
}
