//! Each table's property names, numbered: a format 2 value names its
//! properties by these ids rather than spelling every name in every
//! entity.
//!
//! Ids are given in order and never reused or renumbered, and a name is
//! committed in the same transaction as the first value that uses it. So
//! a read transaction's snapshot holds the name of every id its values
//! carry, and a dictionary of the same making of the table (the stamp
//! that `create_table` writes under id `STAMP`) that is as long as the
//! snapshot's is complete for it: `EmbeddedStore::dict` compares the
//! stamp and the length (a redb table keeps its length) and reloads only
//! when they differ. The stamp is what keeps a table deleted and made
//! again, with as many names, from being read with the old names. The
//! process keeps the last loaded dictionary of each table; a writer
//! extends a copy and publishes it only once its commit is durable, so a
//! failed commit leaves no id that the file does not hold.

use std::sync::Arc;

// Looked up for every property a write stores: foldhash, not SipHash
// (names come from the table's own writers, not from an attacker who
// could aim collisions at one process's map).
use foldhash::HashMap;

use redb::{ReadableTable, TableDefinition};

use crate::storage::{Result, StorageError};

/// The redb table of a store table's property names: id -> name.
pub fn table_name(folded: &str) -> String {
    format!("names_{folded}")
}

pub fn definition(name: &str) -> TableDefinition<'_, u16, &'static str> {
    TableDefinition::new(name)
}

/// The id under which a names table holds the stamp of the table's
/// making, not a name.
pub const STAMP: u16 = u16::MAX;

/// The most names a table numbers (every id below `STAMP`).
pub const MAX_NAMES: usize = STAMP as usize;

/// Writes the stamp of a table's making into its new names table.
pub fn stamp(table: &mut redb::Table<'_, u16, &'static str>, stamp: &str) -> Result<()> {
    table.insert(STAMP, stamp)?;
    Ok(())
}

/// A table's property names by id, and ids by name, of one making of the
/// table.
#[derive(Debug, Default, Clone)]
pub struct Dict {
    stamp: String,
    names: Vec<Arc<str>>,
    ids: HashMap<Arc<str>, u16>,
}

impl Dict {
    /// Reads every name of a names table.
    pub fn load(table: &impl ReadableTable<u16, &'static str>) -> Result<Self> {
        let mut dict = Dict::default();
        for item in table.iter()? {
            let (id, name) = item?;
            if id.value() == STAMP {
                dict.stamp = name.value().to_owned();
                continue;
            }
            if usize::from(id.value()) != dict.names.len() {
                return Err(StorageError::Corrupt("property ids out of sequence".into()));
            }
            dict.add(name.value());
        }
        Ok(dict)
    }

    fn add(&mut self, name: &str) -> u16 {
        // Ids stay below STAMP: `id_or_add` refuses past it.
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

    /// Whether it is of the same making of the table as a names table in
    /// some snapshot, and as long (and so knows every id of that
    /// snapshot's values).
    pub fn matches(&self, table: &impl ReadableTable<u16, &'static str>) -> Result<bool> {
        let stamped = u64::from(!self.stamp.is_empty());
        if table.len()? != self.len() + stamped {
            return Ok(false);
        }
        Ok(table.get(STAMP)?.map(|s| s.value() == self.stamp) == Some(true) || stamped == 0)
    }

    /// How many of `names` it does not hold yet.
    pub fn missing<'n>(&self, names: impl IntoIterator<Item = &'n str>) -> usize {
        let mut new: Vec<&str> = names.into_iter().filter(|n| self.id(n).is_none()).collect();
        new.sort_unstable();
        new.dedup();
        new.len()
    }

    /// The id of a name, if it has one.
    pub fn id(&self, name: &str) -> Option<u16> {
        self.ids.get(name).copied()
    }

    /// The name of an id.
    pub fn name(&self, id: u16) -> Option<&Arc<str>> {
        self.names.get(usize::from(id))
    }

    /// The ids of an entity's property names, in order, into `out`;
    /// names new to the table are given ids as `id_or_add` gives them.
    /// `last` holds the names of the entity numbered before, by position:
    /// a batch's entities mostly have the same names in the same order,
    /// and comparing a name is cheaper than hashing it.
    pub fn ids_of<'n>(
        &mut self,
        names: impl Iterator<Item = &'n str>,
        table: &mut redb::Table<'_, u16, &'static str>,
        last: &mut Vec<(Arc<str>, u16)>,
        out: &mut Vec<u16>,
    ) -> Result<()> {
        out.clear();
        for (i, name) in names.enumerate() {
            if let Some((seen, id)) = last.get(i)
                && **seen == *name
            {
                out.push(*id);
                continue;
            }
            let id = self.id_or_add(name, table)?;
            let seen = self
                .name(id)
                .cloned()
                .ok_or_else(|| StorageError::Corrupt("a property id without a name".into()))?;
            match last.get_mut(i) {
                Some(slot) => *slot = (seen, id),
                None => last.push((seen, id)),
            }
            out.push(id);
        }
        Ok(())
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
        if self.names.len() >= MAX_NAMES {
            return Err(
                crate::storage::InvalidInput::TooManyPropertyNames { limit: MAX_NAMES }.into(),
            );
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
///
/// `changing` counts the commits under way that add names or delete a
/// table, from before they commit until their dictionaries are kept (or
/// forgotten). While it is 0, every committed name is in the kept
/// dictionaries and none of them is of a deleted table, so a reader may
/// take a kept one without checking it against its snapshot: a point read
/// then costs no names table (`EmbeddedStore::kept_dict`).
#[derive(Debug, Default)]
pub struct Dicts {
    kept: std::sync::Mutex<(u64, HashMap<String, Arc<Dict>>)>,
    changing: std::sync::atomic::AtomicUsize,
}

/// A change of names under way, from before its commit until it is
/// dropped, after the dictionaries are kept or forgotten.
pub struct Changing<'a>(&'a Dicts);

impl Drop for Changing<'_> {
    fn drop(&mut self) {
        self.0
            .changing
            .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Dicts {
    /// Marks a change of names under way until the guard is dropped.
    pub fn changing(&self) -> Changing<'_> {
        self.changing
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Changing(self)
    }

    /// The kept dictionary of a table where no change of names is under
    /// way: then it holds every name of any snapshot begun before this
    /// call. `None` where the caller must check against its snapshot.
    pub fn settled(&self, folded: &str) -> Option<Arc<Dict>> {
        if self.changing.load(std::sync::atomic::Ordering::SeqCst) != 0 {
            return None;
        }
        self.get(folded)
    }

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
        self.kept.lock().unwrap_or_else(|p| p.into_inner())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_get_the_same_ids_whether_remembered_from_the_entity_before_or_looked_up() {
        let db = redb::Database::builder()
            .create_with_backend(redb::backends::InMemoryBackend::new())
            .expect("db");
        let txn = db.begin_write().expect("txn");
        let mut table = txn.open_table(definition("names_t")).expect("table");
        let mut dict = Dict::default();
        let (mut last, mut ids) = (Vec::new(), Vec::new());
        let mut number = |names: &[&str], dict: &mut Dict| {
            dict.ids_of(names.iter().copied(), &mut table, &mut last, &mut ids)
                .expect("ids");
            ids.clone()
        };
        assert_eq!(number(&["age", "name"], &mut dict), [0, 1]);
        assert_eq!(number(&["age", "name"], &mut dict), [0, 1]);
        // Another order, a new name, fewer names, then more again.
        assert_eq!(number(&["name", "age", "bib"], &mut dict), [1, 0, 2]);
        assert_eq!(number(&["bib"], &mut dict), [2]);
        assert_eq!(number(&["bib", "age", "bib2"], &mut dict), [2, 0, 3]);
        assert_eq!(number(&["age", "name"], &mut dict), [0, 1]);
        for (id, name) in ["age", "name", "bib", "bib2"].iter().enumerate() {
            assert_eq!(dict.id(name), Some(id as u16));
            let stored = table
                .get(id as u16)
                .expect("get")
                .map(|v| v.value().to_owned());
            assert_eq!(stored.as_deref(), Some(*name));
        }
    }
}
