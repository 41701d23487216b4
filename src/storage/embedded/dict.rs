//! Each table's property names, numbered: a format 2 value names its
//! properties by these ids rather than spelling every name in every
//! entity.
//!
//! Ids are given in order and never reused or renumbered, and a name is
//! committed in the same transaction as the first value that uses it. So
//! a read transaction's snapshot holds the name of every id its values
//! carry, and a dictionary that is as long as the snapshot's is complete
//! for it: `EmbeddedStore::dict` compares the lengths (a redb table keeps
//! its length) and reloads only when the table has grown. The process
//! keeps the last loaded dictionary of each table; a writer extends a
//! copy and publishes it only once its commit is durable, so a failed
//! commit leaves no id that the file does not hold.

use std::collections::HashMap;
use std::sync::Arc;

use redb::{ReadableTable, ReadableTableMetadata, TableDefinition};

use crate::storage::{Result, StorageError};

/// The redb table of a store table's property names: id -> name.
pub fn table_name(folded: &str) -> String {
    format!("names_{folded}")
}

pub fn definition(name: &str) -> TableDefinition<'_, u16, &'static str> {
    TableDefinition::new(name)
}

/// A table's property names by id, and ids by name.
#[derive(Debug, Default, Clone)]
pub struct Dict {
    names: Vec<Arc<str>>,
    ids: HashMap<Arc<str>, u16>,
}

impl Dict {
    /// Reads every name of a names table.
    pub fn load(table: &impl ReadableTable<u16, &'static str>) -> Result<Self> {
        let mut dict = Dict::default();
        for item in table.iter()? {
            let (id, name) = item?;
            if usize::from(id.value()) != dict.names.len() {
                return Err(StorageError::Corrupt("property ids out of sequence".into()));
            }
            dict.add(name.value());
        }
        Ok(dict)
    }

    fn add(&mut self, name: &str) -> u16 {
        // Ids stay below u16::MAX: `id_or_add` refuses past it.
        let id = self.names.len() as u16;
        let name: Arc<str> = Arc::from(name);
        self.names.push(name.clone());
        self.ids.insert(name, id);
        id
    }

    /// How many names it holds.
    pub fn len(&self) -> u64 {
        self.names.len() as u64
    }

    /// Whether it is as long as a names table in some snapshot (and so
    /// knows every id of that snapshot's values).
    pub fn matches(&self, table: &impl ReadableTableMetadata) -> Result<bool> {
        Ok(table.len()? == self.len())
    }

    /// The id of a name, if it has one.
    pub fn id(&self, name: &str) -> Option<u16> {
        self.ids.get(name).copied()
    }

    /// The name of an id.
    pub fn name(&self, id: u16) -> Option<&Arc<str>> {
        self.names.get(usize::from(id))
    }

    /// The id of a name, giving it the next one (and writing it to the
    /// names table of the caller's transaction) if it has none.
    pub fn id_or_add(
        &mut self,
        name: &str,
        table: &mut redb::Table<'_, u16, &'static str>,
    ) -> Result<u16> {
        if let Some(id) = self.id(name) {
            return Ok(id);
        }
        if self.names.len() >= usize::from(u16::MAX) {
            return Err(crate::storage::InvalidInput::TooManyPropertyNames {
                limit: usize::from(u16::MAX),
            }
            .into());
        }
        let id = self.add(name);
        table.insert(id, name)?;
        Ok(id)
    }
}

/// The last dictionary loaded or committed of each table, by folded name,
/// and an epoch that deleting a table moves on: a dictionary read before
/// a table was deleted (and perhaps made again, its ids starting over) is
/// not kept.
#[derive(Debug, Default)]
pub struct Dicts(std::sync::Mutex<(u64, HashMap<String, Arc<Dict>>)>);

impl Dicts {
    /// The kept dictionary of a table, if any.
    pub fn get(&self, folded: &str) -> Option<Arc<Dict>> {
        self.lock().1.get(folded).cloned()
    }

    /// The epoch to pass to `offer`, read before the transaction that
    /// loads or extends a dictionary begins.
    pub fn epoch(&self) -> u64 {
        self.lock().0
    }

    /// Keeps a dictionary unless a table was deleted since `epoch` or a
    /// longer one is kept already (a reader's older snapshot must not
    /// replace a writer's newer names).
    pub fn offer(&self, folded: &str, dict: Arc<Dict>, epoch: u64) {
        let mut guard = self.lock();
        let (now, all) = &mut *guard;
        if *now != epoch {
            return;
        }
        match all.get(folded) {
            Some(kept) if kept.len() >= dict.len() => {}
            _ => {
                all.insert(folded.to_owned(), dict);
            }
        }
    }

    /// Forgets a table's names: it was deleted.
    pub fn forget(&self, folded: &str) {
        let mut guard = self.lock();
        guard.0 += 1;
        guard.1.remove(folded);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (u64, HashMap<String, Arc<Dict>>)> {
        // Every change is one assignment: a panicked holder left it whole.
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
impl Dict {
    /// A dictionary of these names, numbered in order.
    pub fn from_names(names: &[String]) -> Self {
        let mut dict = Dict::default();
        for n in names {
            dict.add(n);
        }
        dict
    }
}
