//! Fan-out: a request that spans several partitions becomes one request per
//! partition, so that a scan runs them side by side instead of following one
//! chain of continuation tokens through the whole table.
//!
//! Table Storage cannot list its partitions, so they are listed as the scan
//! runs (`TableStore::partitions`) and each request is made as soon as the
//! partition after it is known. The requests tile the original range with no
//! gap: the first starts where the range starts and each ends where the next
//! listed partition begins, so a partition created after the listing passed
//! its place is still read, by the request before it. Under a row-value
//! bound (`access::PartitionBound`) each listed partition's request is kept,
//! narrowed to the bound's rows, or dropped.

use std::collections::VecDeque;
use std::fmt;
use std::ops::Bound;
use std::sync::Arc;

use datafusion::error::Result;
use futures::stream::{self, BoxStream, StreamExt};

use super::ExecError;
use super::access::{KeyRequest, PartitionBound, PartitionChoice};
use super::metrics::ExactCount;
use crate::storage::{KeyRange, PartitionKey, RowKey, TableName, TableStore};

/// How a scan spreads a request that spans several partitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fanout {
    /// As planned: one request follows its tokens from partition to partition.
    Sequential,
    /// One request per partition, the partitions listed as the scan runs.
    Partitions,
}

impl fmt::Display for Fanout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fanout::Sequential => f.write_str("fanout=none"),
            Fanout::Partitions => f.write_str("fanout=partitions(listed)"),
        }
    }
}

/// Whether a request reads more than one partition.
pub fn spans_partitions(request: &KeyRequest) -> bool {
    match request {
        KeyRequest::Get(..) => false,
        KeyRequest::Scan { partitions, .. } => !matches!(
            (&partitions.start, &partitions.end),
            (Bound::Included(a), Bound::Included(b)) if a == b
        ),
    }
}

/// What the listing of partitions counts.
#[derive(Debug, Clone)]
pub struct ListingCounters {
    /// Store requests the listings made.
    pub requests: ExactCount,
}

/// The requests a scan runs, in key order: `requests` as given, except that
/// under `Fanout::Partitions` each one spanning partitions is split by the
/// partitions the store lists, and passed through `bound` if given. A
/// listing failure ends the stream with it.
pub fn expand(
    store: Arc<dyn TableStore>,
    table: TableName,
    requests: Vec<KeyRequest>,
    fanout: Fanout,
    bound: Option<PartitionBound>,
    counters: ListingCounters,
) -> BoxStream<'static, Result<KeyRequest>> {
    let bound = bound.map(Arc::new);
    stream::iter(requests)
        .flat_map(move |request| match (fanout, &request) {
            (
                Fanout::Partitions,
                KeyRequest::Scan {
                    partitions,
                    rows,
                    at_most_one,
                },
            ) if spans_partitions(&request) => split(
                Split {
                    store: store.clone(),
                    table: table.clone(),
                    range: partitions.clone(),
                    rows: rows.clone(),
                    at_most_one: *at_most_one,
                    bound: bound.clone(),
                    counters: counters.clone(),
                },
                State::default(),
            ),
            _ => stream::once(async { Ok(request) }).boxed(),
        })
        .boxed()
}

/// One request being split.
struct Split {
    store: Arc<dyn TableStore>,
    table: TableName,
    range: KeyRange<PartitionKey>,
    rows: KeyRange<RowKey>,
    at_most_one: bool,
    bound: Option<Arc<PartitionBound>>,
    counters: ListingCounters,
}

/// Where a split stands.
#[derive(Default)]
struct State {
    /// Requests made and not yet handed out.
    ready: VecDeque<KeyRequest>,
    /// The start of the request not yet made; `None` before the first partition.
    lower: Option<Bound<PartitionKey>>,
    /// The partition that request reads (the last listed).
    owner: Option<PartitionKey>,
    /// The last partition listed, where the next listing page starts.
    after: Option<PartitionKey>,
    /// The listing is over (or failed).
    done: bool,
}

impl Split {
    /// Queues the request of `[start, end)`, which reads partition `owner`
    /// (and any created in the range since it was listed), as the bound
    /// chooses.
    fn push(
        &self,
        state: &mut State,
        owner: Option<PartitionKey>,
        start: Bound<PartitionKey>,
        end: Bound<PartitionKey>,
    ) {
        let choice = match (&self.bound, &owner) {
            (Some(bound), Some(pk)) => bound.choose(pk),
            _ => PartitionChoice::Whole,
        };
        let (partitions, rows) = match (choice, owner) {
            (PartitionChoice::Skip, _) => return,
            (PartitionChoice::Rows(rows), Some(pk)) => (KeyRange::exactly(pk), rows),
            _ => (KeyRange { start, end }, self.rows.clone()),
        };
        state.ready.push_back(KeyRequest::Scan {
            partitions,
            rows,
            at_most_one: self.at_most_one,
        });
    }

    /// Takes in one listed partition: the request before it is now known.
    fn listed(&self, state: &mut State, pk: PartitionKey) {
        match state.lower.replace(Bound::Included(pk.clone())) {
            // The first partition: its request starts where the range does.
            None => state.lower = Some(self.range.start.clone()),
            Some(lower) => {
                let owner = state.owner.take();
                self.push(state, owner, lower, Bound::Excluded(pk.clone()));
            }
        }
        state.owner = Some(pk);
    }

    /// The listing ended: the last request runs to the end of the range.
    fn finish(&self, state: &mut State) {
        let lower = state
            .lower
            .take()
            .unwrap_or_else(|| self.range.start.clone());
        let owner = state.owner.take();
        self.push(state, owner, lower, self.range.end.clone());
        state.done = true;
    }
}

fn split(split: Split, state: State) -> BoxStream<'static, Result<KeyRequest>> {
    stream::unfold((split, state), |(split, mut state)| async move {
        loop {
            if let Some(next) = state.ready.pop_front() {
                return Some((Ok(next), (split, state)));
            }
            if state.done {
                return None;
            }
            let page = split
                .store
                .partitions(&split.table, &split.range, state.after.as_ref())
                .await;
            match page {
                Err(e) => {
                    state.done = true;
                    let e = datafusion::error::DataFusionError::from(ExecError::from(e));
                    return Some((Err(e), (split, state)));
                }
                Ok(page) => {
                    split.counters.requests.add(page.requests);
                    for pk in page.partitions {
                        split.listed(&mut state, pk);
                    }
                    match page.after {
                        Some(after) => state.after = Some(after),
                        None => split.finish(&mut state),
                    }
                }
            }
        }
    })
    .boxed()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::{Entity, MemoryStore, WriteOp};

    fn pk(s: &str) -> PartitionKey {
        PartitionKey::new(s).expect("key")
    }

    async fn store_with(partitions: &[&str]) -> Arc<dyn TableStore> {
        let store = MemoryStore::new();
        let t = TableName::new("fanned").expect("name");
        store.create_table(&t).await.expect("create");
        for p in partitions {
            let e = Entity::new(pk(p), RowKey::new("r").expect("key"));
            store.execute(&t, WriteOp::Insert(e)).await.expect("insert");
        }
        Arc::new(store)
    }

    async fn expanded(store: Arc<dyn TableStore>, range: KeyRange<PartitionKey>) -> Vec<String> {
        let request = KeyRequest::Scan {
            partitions: range,
            rows: KeyRange::all(),
            at_most_one: false,
        };
        let counters = ListingCounters {
            requests: ExactCount::default(),
        };
        let t = TableName::new("fanned").expect("name");
        expand(store, t, vec![request], Fanout::Partitions, None, counters)
            .map(|r| r.expect("request").to_string())
            .collect()
            .await
    }

    #[tokio::test]
    async fn requests_tile_the_range_one_per_partition() {
        let store = store_with(&["a", "b", "c"]).await;
        assert_eq!(
            expanded(store.clone(), KeyRange::all()).await,
            [
                r#"pk=(-inf, "b") rk=(-inf, +inf)"#,
                r#"pk=["b", "c") rk=(-inf, +inf)"#,
                r#"pk=["c", +inf) rk=(-inf, +inf)"#,
            ]
        );
        let range = KeyRange {
            start: Bound::Excluded(pk("a")),
            end: Bound::Included(pk("c")),
        };
        assert_eq!(
            expanded(store, range).await,
            [
                r#"pk=("a", "c") rk=(-inf, +inf)"#,
                r#"pk="c" rk=(-inf, +inf)"#
            ]
        );
    }

    #[tokio::test]
    async fn an_empty_table_is_one_request() {
        let store = store_with(&[]).await;
        assert_eq!(
            expanded(store, KeyRange::all()).await,
            [r#"pk=(-inf, +inf) rk=(-inf, +inf)"#]
        );
    }
}
