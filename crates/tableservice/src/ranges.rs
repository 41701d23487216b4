//! Range servers: a table's partitions in key order, cut into runs of
//! neighbouring PartitionKeys each served by one server, as Azure Storage
//! serves ranges of a table's partitions. The map is a listing of the
//! table's partitions, kept until writes may have added some.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tablesql_storage::storage::PartitionKey;

/// How old a listing may grow under writes before a range server's number
/// is read from a new one (a server's number only decides whose queue work
/// joins, so a stale one is harmless).
const STALE_AFTER: Duration = Duration::from_secs(1);

#[derive(Debug, Default)]
struct Listing {
    partitions: Arc<Vec<PartitionKey>>,
    at: Option<Instant>,
    /// Writes to the table so far.
    writes: u64,
    /// `writes` when the listing began: later ones may have added partitions.
    listed_at: u64,
}

/// Each table's listing, by folded name.
#[derive(Debug, Default)]
pub struct Ranges {
    tables: Mutex<HashMap<String, Listing>>,
}

/// Where a listing began, for [`Ranges::set`].
#[derive(Debug, Clone, Copy)]
pub struct Began(u64);

impl Ranges {
    /// Whether the table needs a new listing (none yet, or writes since it
    /// began, and unless `exact` an old one), and if so where it begins: a
    /// write that lands while it is read is not in it, and leaves it stale.
    pub fn stale(&self, table: &str, exact: bool) -> Option<Began> {
        let mut tables = self.tables.lock().unwrap_or_else(|e| e.into_inner());
        let l = tables.entry(table.to_lowercase()).or_default();
        let stale = match l.at {
            None => true,
            Some(at) => l.writes > l.listed_at && (exact || at.elapsed() > STALE_AFTER),
        };
        stale.then_some(Began(l.writes))
    }

    /// Installs a listing that began at `began`.
    pub fn set(&self, table: &str, partitions: Vec<PartitionKey>, began: Began) {
        let mut tables = self.tables.lock().unwrap_or_else(|e| e.into_inner());
        let l = tables.entry(table.to_lowercase()).or_default();
        // An older listing finishing after a newer one is not installed.
        if l.at.is_some() && began.0 < l.listed_at {
            return;
        }
        l.partitions = Arc::new(partitions);
        l.at = Some(Instant::now());
        l.listed_at = began.0;
    }

    /// The partitions of the last listing, in key order.
    pub fn partitions(&self, table: &str) -> Arc<Vec<PartitionKey>> {
        let tables = self.tables.lock().unwrap_or_else(|e| e.into_inner());
        tables
            .get(&table.to_lowercase())
            .map(|l| l.partitions.clone())
            .unwrap_or_default()
    }

    /// Notes a write to the table.
    pub fn touch(&self, table: &str) {
        let mut tables = self.tables.lock().unwrap_or_else(|e| e.into_inner());
        tables.entry(table.to_lowercase()).or_default().writes += 1;
    }

    pub fn forget(&self, table: &str) {
        self.tables
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&table.to_lowercase());
    }

    /// The server of a partition: its place among the listed partitions
    /// (where it is or would be), in runs of `per_server`.
    pub fn server_of(&self, table: &str, pk: &PartitionKey, per_server: usize) -> usize {
        let tables = self.tables.lock().unwrap_or_else(|e| e.into_inner());
        let place = tables
            .get(&table.to_lowercase())
            .map_or(0, |l| l.partitions.partition_point(|p| p < pk));
        place / per_server.max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn neighbours_share_a_server_and_writes_make_the_listing_stale() {
        let r = Ranges::default();
        let began = r.stale("T", false).unwrap();
        let pks: Vec<_> = (0..10)
            .map(|i| PartitionKey::new(format!("p{i}")).unwrap())
            .collect();
        r.set("T", pks.clone(), began);
        assert!(r.stale("t", true).is_none());
        let servers: Vec<_> = pks.iter().map(|p| r.server_of("T", p, 4)).collect();
        assert_eq!(servers, [0, 0, 0, 0, 1, 1, 1, 1, 2, 2]);
        // A partition not listed joins the server of its place among them.
        assert_eq!(r.server_of("T", &PartitionKey::new("p35").unwrap(), 4), 1);
        r.touch("T");
        assert!(r.stale("T", true).is_some());
        assert!(r.stale("T", false).is_none());
        // A write during a listing leaves the listing stale.
        let began = r.stale("T", true).unwrap();
        r.touch("T");
        r.set("T", pks, began);
        assert!(r.stale("T", true).is_some());
    }
}
