//! A session's own relations: the catalog changes its open transaction
//! block holds until COMMIT, and its temporary tables.
//!
//! PostgreSQL's DDL belongs to the transaction: a table a block creates,
//! renames or drops is so for that block alone until COMMIT, and as it was
//! after ROLLBACK. The store cannot write a catalog change and rows of other
//! partitions in one atomic step, so a block's changes wait here, each
//! relation as the block would leave it, and the session plans through them
//! (`engine::overlay`). COMMIT writes them with the block's rows, the
//! catalog's partition last, in one entity group transaction
//! (`engine::block_ddl`): other sessions see all of a block's DDL at once,
//! or none of it.
//!
//! Savepoints mark this state as `Transaction` marks its buffer; the storage
//! tables and sequences a block made are kept apart, since a `ROLLBACK TO`
//! forgets the relation but the store still has them, to delete when the
//! block ends.
//!
//! Temporary tables are the session's alone (schema `pg_temp`), in its
//! memory, as PostgreSQL keeps them in a backend's: gone with the session.
//! Their creation and drop in a block are undone by ROLLBACK; their rows
//! are not (see docs/sql.md).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use datafusion::catalog::TableProvider;

use crate::catalog::TableDef;
use crate::storage::{StoredEntity, TableName};

/// A relation as a block leaves it.
#[derive(Debug, Clone)]
pub(crate) enum Relation {
    /// A mapped table, with the provider the session plans with.
    Table {
        def: Arc<TableDef>,
        provider: Arc<dyn TableProvider>,
    },
    /// A view: its `CREATE VIEW` text, planned.
    View {
        sql: String,
        provider: Arc<dyn TableProvider>,
    },
}

impl Relation {
    pub(crate) fn provider(&self) -> Arc<dyn TableProvider> {
        match self {
            Relation::Table { provider, .. } | Relation::View { provider, .. } => provider.clone(),
        }
    }
}

/// What a block saw of a name.
#[derive(Debug, Clone)]
pub(crate) enum Seen {
    /// The block made or changed it.
    Changed(Relation),
    /// The block dropped it (or renamed it away).
    Dropped,
    /// The block did not touch it: the shared catalog says.
    Untouched,
}

type Relations = BTreeMap<String, Option<Relation>>;
type Temp = BTreeMap<String, Arc<dyn TableProvider>>;

#[derive(Debug, Default)]
struct State {
    /// Whether a block is open.
    open: bool,
    /// The block's relations, by name (`None`: dropped).
    relations: Relations,
    /// The session's temporary tables.
    temp: Temp,
    /// The temporary tables at BEGIN, for ROLLBACK.
    temp_at_begin: Temp,
    /// Both at each savepoint, oldest first.
    marks: Vec<(String, Relations, Temp)>,
    /// Storage tables the block created (deleted at ROLLBACK, and at
    /// COMMIT those no relation kept).
    made: Vec<TableName>,
    /// Sequences the block created, for ROLLBACK.
    sequences: Vec<String>,
    /// Each name's stored entity when the block first changed it (`None`:
    /// no such relation), whose version COMMIT writes If-Match. Not marked
    /// by savepoints: a first change undone leaves the base true.
    bases: BTreeMap<String, Option<StoredEntity>>,
}

/// See the module doc. One per session, shared with its context.
#[derive(Debug, Default)]
pub(crate) struct OwnRelations {
    state: Mutex<State>,
}

/// What a block's end leaves to do in the store.
#[derive(Debug, Default)]
pub(crate) struct Ended {
    /// The storage tables it created.
    pub made: Vec<TableName>,
    /// The sequences it created.
    pub sequences: Vec<String>,
}

impl OwnRelations {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `BEGIN` (a second keeps the first's changes, as `Transaction` does).
    pub(crate) fn begin(&self) {
        let mut s = self.lock();
        if !s.open {
            s.open = true;
            s.temp_at_begin = s.temp.clone();
        }
    }

    pub(crate) fn is_open(&self) -> bool {
        self.lock().open
    }

    /// Whether the open block changed the catalog.
    pub(crate) fn has_changes(&self) -> bool {
        !self.lock().relations.is_empty()
    }

    /// What the block did to `name`.
    pub(crate) fn seen(&self, name: &str) -> Seen {
        match self.lock().relations.get(name) {
            Some(Some(r)) => Seen::Changed(r.clone()),
            Some(None) => Seen::Dropped,
            None => Seen::Untouched,
        }
    }

    /// The names the block made and dropped, apart.
    pub(crate) fn names(&self) -> (Vec<String>, Vec<String>) {
        let s = self.lock();
        let (made, dropped): (Vec<_>, Vec<_>) = s.relations.iter().partition(|(_, r)| r.is_some());
        (
            made.into_iter().map(|(n, _)| n.clone()).collect(),
            dropped.into_iter().map(|(n, _)| n.clone()).collect(),
        )
    }

    /// Whether the block has yet to note `name`'s stored version.
    pub(crate) fn needs_base(&self, name: &str) -> bool {
        !self.lock().bases.contains_key(name)
    }

    /// Notes `name`'s stored entity as the block first found it.
    pub(crate) fn set_base(&self, name: &str, base: Option<StoredEntity>) {
        self.lock().bases.entry(name.to_owned()).or_insert(base);
    }

    /// `name` as the block leaves it (`None`: dropped).
    pub(crate) fn put(&self, name: &str, relation: Option<Relation>) {
        self.lock().relations.insert(name.to_owned(), relation);
    }

    /// A storage table the block created.
    pub(crate) fn made_storage(&self, table: TableName) {
        self.lock().made.push(table);
    }

    /// A sequence the block created.
    pub(crate) fn made_sequence(&self, name: String) {
        self.lock().sequences.push(name);
    }

    /// Whether the block created storage table `table`.
    pub(crate) fn made(&self, table: &TableName) -> bool {
        self.lock().made.contains(table)
    }

    /// A temporary table by name.
    pub(crate) fn temp(&self, name: &str) -> Option<Arc<dyn TableProvider>> {
        self.lock().temp.get(name).cloned()
    }

    pub(crate) fn temp_names(&self) -> Vec<String> {
        self.lock().temp.keys().cloned().collect()
    }

    /// Adds (`Some`) or drops (`None`) a temporary table.
    pub(crate) fn put_temp(&self, name: &str, table: Option<Arc<dyn TableProvider>>) {
        let mut s = self.lock();
        match table {
            Some(t) => s.temp.insert(name.to_owned(), t),
            None => s.temp.remove(name),
        };
    }

    /// Drops every temporary table (`DISCARD ALL`, outside a block).
    pub(crate) fn clear_temp(&self) {
        self.lock().temp.clear();
    }

    /// `SAVEPOINT name`.
    pub(crate) fn savepoint(&self, name: &str) {
        let mut s = self.lock();
        let mark = (name.to_owned(), s.relations.clone(), s.temp.clone());
        s.marks.push(mark);
    }

    /// `ROLLBACK TO name`: as at the newest mark of that name, which stays.
    pub(crate) fn rollback_to(&self, name: &str) {
        let mut s = self.lock();
        let Some(at) = s.marks.iter().rposition(|(n, ..)| n == name) else {
            return;
        };
        s.marks.truncate(at + 1);
        if let Some((_, relations, temp)) = s.marks.get(at).cloned() {
            s.relations = relations;
            s.temp = temp;
        }
    }

    /// `RELEASE name`: that mark and the ones after it forgotten.
    pub(crate) fn release(&self, name: &str) {
        let mut s = self.lock();
        if let Some(at) = s.marks.iter().rposition(|(n, ..)| n == name) {
            s.marks.truncate(at);
        }
    }

    /// The block's relations, each with its base, as COMMIT would write
    /// them, the block left open (it closes once the COMMIT's outcome is
    /// known: `end`).
    pub(crate) fn pending(&self) -> Vec<(String, Option<StoredEntity>, Option<Relation>)> {
        let s = self.lock();
        s.relations
            .iter()
            .map(|(name, r)| {
                let base = s.bases.get(name).cloned().flatten();
                (name.clone(), base, r.clone())
            })
            .collect()
    }

    /// Closes the block: after its COMMIT (`keep`), or at ROLLBACK with its
    /// temporary tables as at BEGIN; what it made in the store, for the
    /// caller to delete what no relation kept.
    pub(crate) fn end(&self, keep: bool) -> Ended {
        let mut s = self.lock();
        if !s.open {
            return Ended::default();
        }
        s.open = false;
        s.marks.clear();
        s.relations.clear();
        s.bases.clear();
        let begun = std::mem::take(&mut s.temp_at_begin);
        if !keep {
            s.temp = begun;
        }
        Ended {
            made: std::mem::take(&mut s.made),
            sequences: std::mem::take(&mut s.sequences),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::datatypes::Schema;
    use datafusion::datasource::empty::EmptyTable;

    fn table() -> Arc<dyn TableProvider> {
        Arc::new(EmptyTable::new(Arc::new(Schema::empty())))
    }

    fn view() -> Option<Relation> {
        Some(Relation::View {
            sql: "CREATE VIEW v AS SELECT 1".into(),
            provider: table(),
        })
    }

    #[test]
    fn a_savepoint_marks_relations_and_the_store_keeps_what_was_made() {
        let own = OwnRelations::default();
        own.begin();
        own.put("v", view());
        own.savepoint("s");
        own.put("v", None);
        own.put("w", view());
        own.put_temp("t", Some(table()));
        own.made_storage(TableName::new("Made").expect("name"));
        assert!(matches!(own.seen("v"), Seen::Dropped));
        own.rollback_to("s");
        assert!(matches!(own.seen("v"), Seen::Changed(_)));
        assert!(matches!(own.seen("w"), Seen::Untouched));
        assert!(own.temp("t").is_none());
        assert_eq!(own.pending().len(), 1);
        let ended = own.end(true);
        // Made after the mark, still in the store: the end deletes it.
        assert_eq!(ended.made.len(), 1);
        assert!(!own.has_changes());
    }

    #[test]
    fn rollback_puts_back_the_temporary_tables_of_begin() {
        let own = OwnRelations::default();
        own.put_temp("kept", Some(table()));
        own.begin();
        own.put_temp("kept", None);
        own.put_temp("new", Some(table()));
        own.put("v", view());
        own.end(false);
        assert!(own.pending().is_empty());
        assert!(own.temp("kept").is_some());
        assert!(own.temp("new").is_none());
        // Outside a block a temporary table is made at once.
        own.put_temp("later", Some(table()));
        assert_eq!(own.temp_names(), vec!["kept", "later"]);
    }
}
