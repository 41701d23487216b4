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

#[derive(Debug)]
struct Listing {
    partitions: Arc<Vec<PartitionKey>>,
    at: Instant,
    /// Writes since the listing: partitions may have come or gone.
    writes: u64,
}

/// Each table's listing, by folded name.
#[derive(Debug, Default)]
pub struct Ranges {
    tables: Mutex<HashMap<String, Listing>>,
}

impl Ranges {
    /// Whether the table needs a new listing: none yet, or writes since it,
    /// and (unless `exact`) an old one.
    pub fn stale(&self, table: &str, exact: bool) -> bool {
        let tables = self.tables.lock().unwrap_or_else(|e| e.into_inner());
        match tables.get(&table.to_lowercase()) {
            None => true,
            Some(l) => l.writes > 0 && (exact || l.at.elapsed() > STALE_AFTER),
        }
    }

    pub fn set(&self, table: &str, partitions: Vec<PartitionKey>) {
        let listing = Listing {
            partitions: Arc::new(partitions),
            at: Instant::now(),
            writes: 0,
        };
        self.tables
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(table.to_lowercase(), listing);
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
        if let Some(l) = self
            .tables
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_mut(&table.to_lowercase())
        {
            l.writes += 1;
        }
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
        assert!(r.stale("T", false));
        let pks: Vec<_> = (0..10)
            .map(|i| PartitionKey::new(format!("p{i}")).unwrap())
            .collect();
        r.set("T", pks.clone());
        assert!(!r.stale("t", true));
        let servers: Vec<_> = pks.iter().map(|p| r.server_of("T", p, 4)).collect();
        assert_eq!(servers, [0, 0, 0, 0, 1, 1, 1, 1, 2, 2]);
        // A partition between p3 and p4 joins p3's server... or p4's: where it falls.
        assert_eq!(r.server_of("T", &PartitionKey::new("p35").unwrap(), 4), 1);
        r.touch("T");
        assert!(r.stale("T", true));
        assert!(!r.stale("T", false));
    }
}
