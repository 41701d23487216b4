//! Point reads in batches. A path of many points (`access=points(N)`, the
//! key reads of a lookup join) costs one store request per key where each
//! is a `get`; a store that reads several RowKeys of one partition in one
//! request (`TableStore::get_many_limit`, Azure's `$filter` of keys) takes
//! them in runs of that many, so a batch of a thousand keys costs a thousand
//! divided by the run, not a thousand round trips. The points of a path are
//! sorted, so the keys of one partition are adjacent and each run keeps key
//! order.

use super::access::KeyRequest;
use crate::storage::{PartitionKey, RowKey};

/// What one task of a scan asks of the store.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Unit {
    /// One request of the path.
    One(KeyRequest),
    /// Several point reads of one partition, in one `get_many`.
    Keys(PartitionKey, Vec<RowKey>),
}

/// The path's requests as runs of at most `limit` keys per partition, where
/// every request is a point read and the store batches them; `None`
/// otherwise (the requests run one by one).
pub(super) fn batched(requests: &[KeyRequest], limit: usize) -> Option<Vec<Unit>> {
    if limit < 2 || requests.len() < 2 {
        return None;
    }
    let mut units: Vec<Unit> = Vec::new();
    for request in requests {
        let KeyRequest::Get(pk, rk) = request else {
            return None;
        };
        match units.last_mut() {
            Some(Unit::Keys(p, keys)) if p == pk && keys.len() < limit => keys.push(rk.clone()),
            _ => units.push(Unit::Keys(pk.clone(), vec![rk.clone()])),
        }
    }
    Some(units)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(pk: &str, rk: &str) -> KeyRequest {
        KeyRequest::Get(
            PartitionKey::from_stored(pk.into()),
            RowKey::from_stored(rk.into()),
        )
    }

    fn keys(pk: &str, rks: &[&str]) -> Unit {
        Unit::Keys(
            PartitionKey::from_stored(pk.into()),
            rks.iter()
                .map(|r| RowKey::from_stored((*r).into()))
                .collect(),
        )
    }

    #[test]
    fn points_group_by_partition_in_runs_of_the_stores_limit() {
        let requests = [get("a", "1"), get("a", "2"), get("a", "3"), get("b", "1")];
        assert_eq!(
            batched(&requests, 2),
            Some(vec![
                keys("a", &["1", "2"]),
                keys("a", &["3"]),
                keys("b", &["1"])
            ])
        );
    }

    #[test]
    fn a_store_without_batched_reads_or_a_path_with_ranges_runs_requests_one_by_one() {
        assert_eq!(batched(&[get("a", "1"), get("a", "2")], 1), None);
        let scan = KeyRequest::Scan {
            partitions: crate::storage::KeyRange::all(),
            rows: crate::storage::KeyRange::all(),
            at_most_one: false,
        };
        assert_eq!(batched(&[get("a", "1"), scan], 12), None);
    }
}
