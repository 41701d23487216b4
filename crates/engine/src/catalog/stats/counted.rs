//! Statistics from the counts a store keeps (`TableStore::partition_counts`)
//! for a table never analyzed: each partition's entities per RowKey kind,
//! read as the key paths of the table's mapping (the base rows' kind, each
//! local index's). Only a store that counts its writes has them (the
//! embedded one); they carry no guideposts, sizes or distinct prefixes.

use std::collections::BTreeMap;
use std::sync::Arc;

use chrono::Utc;

use super::{KeyPrefixes, PRIMARY_PATH, PartitionStats, StatsCache, TableStats};
use crate::catalog::TableDef;
use crate::keys::{KeyTemplate, Segment};
use crate::storage::key::row_kind;
use crate::storage::{PartitionCount, TableName};

/// The RowKey kind (`storage::key::row_kind`) every key of a template
/// starts with, "" where it starts with a field.
pub fn template_kind(t: &KeyTemplate) -> &str {
    match t.segments().first() {
        Some(Segment::Literal(l)) => row_kind(l),
        _ => "",
    }
}

/// Which key path each RowKey kind of a table's rows is: an index's rows
/// are the kind its template starts with, the base rows theirs; where the
/// base template starts with no kind, every kind no index claims is the
/// base rows'. A raw table's (or an index table's) rows are all its one
/// path's.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct KindPaths {
    base: String,
    /// (kind, index name), for the indexes whose template starts with one.
    indexes: Vec<(String, String)>,
}

impl KindPaths {
    /// The paths of `def`'s rows (`None`: a raw table).
    pub fn of(def: Option<&TableDef>) -> Self {
        let Some(d) = def else {
            return Self::default();
        };
        Self {
            base: template_kind(&d.row_key).to_owned(),
            indexes: d
                .indexes
                .iter()
                .map(|i| (template_kind(&i.row_key).to_owned(), i.name.clone()))
                .filter(|(k, _)| !k.is_empty())
                .collect(),
        }
    }

    /// The path whose rows are of `kind`, if any.
    fn path_of(&self, kind: &str) -> Option<&str> {
        match self.indexes.iter().find(|(k, _)| k == kind) {
            Some((_, name)) => Some(name),
            None => (self.base.is_empty() || self.base == kind).then_some(PRIMARY_PATH),
        }
    }
}

impl TableStats {
    /// The statistics that a store's kept counts give, read now, with the
    /// kinds read as `def`'s key paths (`KindPaths`): each partition's
    /// entities, and per path the entities of its kind (0 where the
    /// partition has none, so that a sum over partitions knows it).
    pub fn counted(def: Option<&TableDef>, counts: &[PartitionCount]) -> Self {
        Self::counted_as(&KindPaths::of(def), counts)
    }

    fn counted_as(paths: &KindPaths, counts: &[PartitionCount]) -> Self {
        let partitions = counts
            .iter()
            .map(|c| {
                let mut by_path: BTreeMap<String, Vec<u64>> = std::iter::once(PRIMARY_PATH)
                    .chain(paths.indexes.iter().map(|(_, name)| name.as_str()))
                    .map(|name| (name.to_owned(), vec![0]))
                    .collect();
                for (kind, n) in &c.kinds {
                    if let Some(counts) = paths.path_of(kind).and_then(|p| by_path.get_mut(p)) {
                        counts[0] += n;
                    }
                }
                PartitionStats {
                    partition: c.partition.clone(),
                    entities: c.entities(),
                    bytes: 0,
                    largest: 0,
                    widest: 0,
                    guideposts: Vec::new(),
                    oldest: None,
                    newest: None,
                    prefixes: KeyPrefixes(by_path),
                }
            })
            .collect();
        TableStats {
            taken: Utc::now(),
            guidepost_every: 0,
            counted: true,
            partitions,
        }
    }
}

impl StatsCache {
    /// A table's statistics: `ANALYZE`'s, else those its store's kept
    /// counts give (`counts`: `TableStore::partition_counts`; `def` the
    /// table's mapping, `None` for a raw table or an index's table). The
    /// store hands back the same counts until a write lands, so they are
    /// made into statistics once per write and mapping, not at every plan
    /// (a storage table is planned both raw and mapped, and its kinds are
    /// other paths in each).
    pub fn get_or_counted(
        &self,
        table: &TableName,
        def: Option<&TableDef>,
        counts: impl FnOnce() -> Option<Arc<[PartitionCount]>>,
    ) -> Option<Arc<TableStats>> {
        if let Some(analyzed) = self.get(table) {
            return Some(analyzed);
        }
        let counts = counts()?;
        let key = (table.clone(), KindPaths::of(def));
        let made = || self.1.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((kept, stats)) = made().get(&key)
            && Arc::ptr_eq(kept, &counts)
        {
            return Some(stats.clone());
        }
        // Made outside the lock: other tables' plans need not wait.
        let stats = Arc::new(TableStats::counted_as(&key.1, &counts));
        made().insert(key, (counts, stats.clone()));
        Some(stats)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::PartitionKey;

    fn count(pk: &str, kinds: &[(&str, u64)]) -> PartitionCount {
        PartitionCount {
            partition: PartitionKey::new(pk).expect("a key"),
            kinds: kinds.iter().map(|(k, n)| ((*k).to_owned(), *n)).collect(),
        }
    }

    fn registrations() -> TableDef {
        crate::catalog::ddl::parse(include_str!("../../../../../catalog/registrations.sql"))
            .expect("parses")
    }

    #[test]
    fn kept_counts_give_each_key_path_the_entities_of_its_kind() {
        let def = registrations();
        let counts = [
            count("a", &[("AGE:", 3), ("BIB:", 3), ("X:", 1)]),
            count("b", &[("BIB:", 2)]),
        ];
        let stats = TableStats::counted(Some(&def), &counts);
        assert!(stats.counted);
        assert_eq!(stats.entities(), 9);
        assert_eq!(stats.path_entities(PRIMARY_PATH), Some(5));
        assert_eq!(stats.path_entities("age"), Some(3));
        // Rows of a kind no path has count in the partition's entities only.
        assert_eq!(stats.partitions[0].entities, 7);
        // The partitions holding each path's rows.
        assert_eq!(stats.distinct(PRIMARY_PATH, 0), Some(2));
        assert_eq!(stats.distinct("age", 0), Some(1));
        // A raw table's rows, of every kind, are its one path's.
        let raw = TableStats::counted(None, &counts);
        assert_eq!(raw.path_entities(PRIMARY_PATH), Some(9));
    }

    /// The same storage table planned raw and mapped gets each its own
    /// statistics from the same counts, and new ones only for new counts.
    #[test]
    fn one_table_planned_raw_and_mapped_keeps_both_readings() {
        let def = registrations();
        let cache = StatsCache::default();
        let table = TableName::new("Registrations").expect("a name");
        let counts: Arc<[PartitionCount]> =
            Arc::from(vec![count("a", &[("AGE:", 3), ("BIB:", 3)])]);
        let raw = cache
            .get_or_counted(&table, None, || Some(counts.clone()))
            .expect("raw");
        let mapped = cache
            .get_or_counted(&table, Some(&def), || Some(counts.clone()))
            .expect("mapped");
        assert_eq!(raw.path_entities(PRIMARY_PATH), Some(6));
        assert_eq!(mapped.path_entities(PRIMARY_PATH), Some(3));
        let again = cache
            .get_or_counted(&table, Some(&def), || Some(counts.clone()))
            .expect("again");
        assert!(Arc::ptr_eq(&mapped, &again));
        let newer: Arc<[PartitionCount]> = Arc::from(vec![count("a", &[("AGE:", 4), ("BIB:", 4)])]);
        let moved = cache
            .get_or_counted(&table, Some(&def), || Some(newer))
            .expect("moved");
        assert_eq!(moved.path_entities(PRIMARY_PATH), Some(4));
    }
}
