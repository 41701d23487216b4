//! Fan-out: a request that spans several partitions becomes one request per
//! partition, so that a scan runs them side by side instead of following one
//! chain of continuation tokens through the whole table. A scan whose rows
//! may come in any order reads several segments of the range side by side
//! instead (`spread`), each a chain where it reads whole partitions.
//!
//! Table Storage cannot list its partitions, so they are listed as the scan
//! runs (`TableStore::partitions`) and each request is made as soon as the
//! partition after it is known. The requests tile the original range with no
//! gap: the first starts where the range starts and each ends where the next
//! listed partition begins, so a partition created after the listing passed
//! its place is still read, by the request before it. Under a row-value
//! bound (`access::PartitionBound`) each listed partition is read whole,
//! narrowed to the bound's rows, or passed by; the gaps around it are read
//! as they are.

use std::collections::VecDeque;
use std::fmt;
use std::ops::Bound;
use std::sync::Arc;

use datafusion::error::Result;
use futures::stream::{self, BoxStream, StreamExt};

use super::access::{AccessPath, KeyRequest, PartitionBound, PartitionChoice};
use super::metrics::ExactCount;
use crate::catalog::stats::{PartitionStats, TableStats};
use crate::exec::ExecError;
use crate::storage::{KeyRange, PartitionKey, PartitionPage, RowKey, TableName, TableStore};

mod spread;
pub use spread::midpoint;

/// How a scan spreads a request that spans several partitions.
#[derive(Debug, Clone, PartialEq)]
pub enum Fanout {
    /// As planned: one request follows its tokens from partition to partition.
    Sequential,
    /// One request per partition, the partitions listed as the scan runs.
    Partitions,
    /// The requests made from `ANALYZE`'s statistics: one per partition, or
    /// per chunk between guideposts of a big one; no listing.
    Analyzed(Box<Analyzed>),
}

/// A scan's requests planned from statistics, and what EXPLAIN says of them.
#[derive(Debug, Clone, PartialEq)]
pub struct Analyzed {
    /// Every request of the scan, in key order.
    pub requests: Vec<KeyRequest>,
    /// Partitions read in chunks.
    pub chunks: usize,
    /// Analyzed partitions the requests read.
    pub partitions: usize,
    /// Their entities when analyzed.
    pub entities: u64,
    /// When the statistics were taken.
    pub taken: chrono::DateTime<chrono::Utc>,
    /// Whether they are the store's kept counts (read at planning), not
    /// `ANALYZE`'s.
    pub counted: bool,
}

impl Fanout {
    /// The lanes (`spread`) a scan with `in_flight` requests at once reads
    /// in, for a scan whose rows may come in any order: none where it does
    /// not fan out, or where its known requests are too few to spread; for
    /// a listing, as many as it may find.
    pub fn lanes(&self, in_flight: usize) -> Option<usize> {
        match self {
            Fanout::Sequential => None,
            Fanout::Partitions => (in_flight > 1).then_some(in_flight),
            Fanout::Analyzed(a) => {
                spread::worth_spreading(a.requests.len(), in_flight).then_some(in_flight)
            }
        }
    }
}

impl fmt::Display for Fanout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fanout::Sequential => f.write_str("fanout=none"),
            Fanout::Partitions => f.write_str("fanout=partitions(listed)"),
            Fanout::Analyzed(a) => {
                if a.chunks > 0 {
                    write!(f, "fanout=chunks({})", a.requests.len())?;
                } else {
                    write!(f, "fanout=partitions({})", a.requests.len())?;
                }
                write!(
                    f,
                    " estimate=[partitions={} entities={} ",
                    a.partitions, a.entities
                )?;
                if a.counted {
                    f.write_str("counted]")
                } else {
                    write!(f, "analyzed={}]", a.taken.format("%Y-%m-%dT%H:%M:%SZ"))
                }
            }
        }
    }
}

/// The requests of a path from statistics: each request spanning partitions
/// becomes, per analyzed partition in its range, one request (or one per
/// chunk between the partition's guideposts within the request's rows),
/// passed through the path's row-value bound; the others stay.
///
/// As with listing, the requests tile each range: a partition's request
/// runs up to the next analyzed partition, so one created since `ANALYZE`
/// is still read, by the request before it; where a partition is read on
/// its own (in chunks, or narrowed or passed by under the bound), requests
/// for the gaps around it keep the tiling whole.
pub fn analyzed(stats: &TableStats, path: &AccessPath) -> Analyzed {
    let mut out = Analyzed {
        requests: Vec::new(),
        chunks: 0,
        partitions: 0,
        entities: 0,
        taken: stats.taken,
        counted: stats.counted,
    };
    for request in &path.requests {
        match request {
            KeyRequest::Scan {
                partitions,
                rows,
                at_most_one,
            } if spans_partitions(request) => tiles(
                stats,
                partitions,
                rows,
                *at_most_one,
                path.partition_bound.as_ref(),
                &mut out,
            ),
            other => out.requests.push(other.clone()),
        }
    }
    out
}

fn tiles(
    stats: &TableStats,
    range: &KeyRange<PartitionKey>,
    rows: &KeyRange<RowKey>,
    at_most_one: bool,
    bound: Option<&PartitionBound>,
    out: &mut Analyzed,
) {
    let known: Vec<&PartitionStats> = stats
        .partitions
        .iter()
        .filter(|p| range.contains(&p.partition))
        .collect();
    if known.is_empty() {
        out.requests.push(KeyRequest::Scan {
            partitions: range.clone(),
            rows: rows.clone(),
            at_most_one,
        });
        return;
    }
    for (i, p) in known.iter().enumerate() {
        let start = if i == 0 {
            range.start.clone()
        } else {
            Bound::Included(p.partition.clone())
        };
        let end = known.get(i + 1).map_or_else(
            || range.end.clone(),
            |n| Bound::Excluded(n.partition.clone()),
        );
        let choice = bound.map_or(PartitionChoice::Whole, |b| b.choose(&p.partition));
        let split_at: Vec<&RowKey> = p
            .guideposts
            .iter()
            .filter(|g| rows.contains(g) && rows.start != Bound::Included((*g).clone()))
            .collect();
        let tile = Tile {
            owner: &p.partition,
            partitions: KeyRange { start, end },
            rows,
            at_most_one,
        };
        let read = tile.requests(choice, &split_at, &mut out.requests);
        if read.chunked {
            out.chunks += 1;
        }
        if read.owner {
            out.partitions += 1;
            out.entities += estimate(p, rows);
        }
    }
}

/// The request range of one known partition, `owner`: from it (or the
/// range's start) up to the next known partition (or the range's end).
struct Tile<'a> {
    owner: &'a PartitionKey,
    partitions: KeyRange<PartitionKey>,
    rows: &'a KeyRange<RowKey>,
    at_most_one: bool,
}

/// What a tile's requests read of its owner.
struct TileRead {
    owner: bool,
    chunked: bool,
}

impl Tile<'_> {
    /// The tile's requests: the whole tile as one where its owner is read
    /// whole and unsplit; otherwise the owner as `choice` says (split at
    /// `split_at`), and the gaps before and after it read as they are: a
    /// partition there was made after the partitions were known.
    fn requests(
        self,
        choice: PartitionChoice,
        split_at: &[&RowKey],
        out: &mut impl Extend<KeyRequest>,
    ) -> TileRead {
        let scan = |partitions, rows| KeyRequest::Scan {
            partitions,
            rows,
            at_most_one: self.at_most_one,
        };
        let one = || KeyRange::exactly(self.owner.clone());
        let split = !split_at.is_empty() && !self.at_most_one;
        if choice == PartitionChoice::Whole && !split {
            out.extend([scan(self.partitions, self.rows.clone())]);
            return TileRead {
                owner: true,
                chunked: false,
            };
        }
        let before = KeyRange {
            start: self.partitions.start.clone(),
            end: Bound::Excluded(self.owner.clone()),
        };
        if !before.is_empty() && self.partitions.start != Bound::Included(self.owner.clone()) {
            out.extend([scan(before, self.rows.clone())]);
        }
        let read = match choice {
            PartitionChoice::Skip => TileRead {
                owner: false,
                chunked: false,
            },
            PartitionChoice::Rows(r) => {
                out.extend([scan(one(), r)]);
                TileRead {
                    owner: true,
                    chunked: false,
                }
            }
            PartitionChoice::Whole => {
                let mut lower = self.rows.start.clone();
                for g in split_at {
                    let chunk = KeyRange {
                        start: lower,
                        end: Bound::Excluded((*g).clone()),
                    };
                    out.extend([scan(one(), chunk)]);
                    lower = Bound::Included((*g).clone());
                }
                let last = KeyRange {
                    start: lower,
                    end: self.rows.end.clone(),
                };
                out.extend([scan(one(), last)]);
                TileRead {
                    owner: true,
                    chunked: true,
                }
            }
        };
        let after = KeyRange {
            start: Bound::Excluded(self.owner.clone()),
            end: self.partitions.end,
        };
        if !after.is_empty() {
            out.extend([scan(after, self.rows.clone())]);
        }
        read
    }
}

/// The entities of `p` within `rows`: its share of the guideposts, or all
/// of them where it has none.
fn estimate(p: &PartitionStats, rows: &KeyRange<RowKey>) -> u64 {
    if p.guideposts.is_empty() || (rows.start == Bound::Unbounded && rows.end == Bound::Unbounded) {
        return p.entities;
    }
    let within = p.guideposts.iter().filter(|g| rows.contains(g)).count() as u64;
    let chunks = p.guideposts.len() as u64 + 1;
    (p.entities * (within + 1)).div_ceil(chunks).min(p.entities)
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
    /// Retries the store made for them.
    pub retries: ExactCount,
    /// Segments of the key space read side by side (`spread`): none where
    /// the requests ran in key order.
    pub lanes: ExactCount,
}

/// The requests a scan runs: `requests` as given, except that under
/// `Fanout::Partitions` each one spanning partitions is split by the
/// partitions the store lists, and passed through `bound` if given. A
/// listing failure ends the stream with it. With one lane they come in key
/// order; with more, from that many segments of the key space in turn
/// (`spread`), for a scan whose order nothing uses.
pub fn expand(
    store: Arc<dyn TableStore>,
    table: TableName,
    requests: Vec<KeyRequest>,
    fanout: Fanout,
    bound: Option<PartitionBound>,
    counters: ListingCounters,
    lanes: usize,
) -> BoxStream<'static, Result<KeyRequest>> {
    if let Fanout::Analyzed(a) = fanout {
        return spread::runs(a.requests, lanes, &counters.lanes);
    }
    // Listing partitions to fan out over needs a store in key order: on
    // another, each listing is a scan of every key.
    let listing = fanout == Fanout::Partitions && store.key_ordered();
    let bound = bound.map(Arc::new);
    stream::iter(requests)
        .flat_map(move |request| match &request {
            KeyRequest::Scan {
                partitions,
                rows,
                at_most_one,
            } if listing && spans_partitions(&request) => {
                let this = Split {
                    store: store.clone(),
                    table: table.clone(),
                    range: partitions.clone(),
                    rows: rows.clone(),
                    at_most_one: *at_most_one,
                    bound: bound.clone(),
                    counters: counters.clone(),
                };
                if lanes > 1 {
                    spread::listed(this, lanes)
                } else {
                    split(this, State::default())
                }
            }
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
        let partitions = KeyRange { start, end };
        let (Some(bound), Some(owner)) = (&self.bound, owner) else {
            state.ready.push_back(KeyRequest::Scan {
                partitions,
                rows: self.rows.clone(),
                at_most_one: self.at_most_one,
            });
            return;
        };
        let tile = Tile {
            owner: &owner,
            partitions,
            rows: &self.rows,
            at_most_one: self.at_most_one,
        };
        tile.requests(bound.choose(&owner), &[], &mut state.ready);
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

    /// One page of the range's partitions after `after`, counted.
    async fn list(&self, after: Option<&PartitionKey>) -> Result<PartitionPage> {
        let listing = self.store.partitions(&self.table, &self.range, after);
        let (page, retries) =
            crate::storage::retries::counted_by(self.store.as_ref(), listing).await;
        self.counters.retries.add(retries.retries as usize);
        let page =
            page.map_err(|e| datafusion::error::DataFusionError::from(ExecError::from(e)))?;
        self.counters.requests.add(page.requests);
        Ok(page)
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
            match split.list(state.after.as_ref()).await {
                Err(e) => {
                    state.done = true;
                    return Some((Err(e), (split, state)));
                }
                Ok(page) => {
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
        expanded_in(store, range, 1)
            .await
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    async fn expanded_in(
        store: Arc<dyn TableStore>,
        range: KeyRange<PartitionKey>,
        lanes: usize,
    ) -> Vec<KeyRequest> {
        let request = KeyRequest::Scan {
            partitions: range,
            rows: KeyRange::all(),
            at_most_one: false,
        };
        let counters = ListingCounters {
            requests: ExactCount::default(),
            retries: ExactCount::default(),
            lanes: ExactCount::default(),
        };
        let t = TableName::new("fanned").expect("name");
        expand(
            store,
            t,
            vec![request],
            Fanout::Partitions,
            None,
            counters,
            lanes,
        )
        .map(|r| r.expect("request"))
        .collect()
        .await
    }

    #[tokio::test]
    async fn lanes_start_far_apart_and_still_read_each_partition_once() {
        let names: Vec<String> = (0..40).map(|i| format!("p{i:02}")).collect();
        let keys: Vec<&str> = names.iter().map(String::as_str).collect();
        let store = store_with(&keys).await;
        let got = expanded_in(store, KeyRange::all(), 4).await;
        let reads = |pk: &PartitionKey| {
            got.iter()
                .filter(
                    |r| matches!(r, KeyRequest::Scan { partitions, .. } if partitions.contains(pk)),
                )
                .count()
        };
        for name in &keys {
            assert_eq!(reads(&pk(name)), 1, "{name}");
        }
        // The first four requests come from the four quarters of the table.
        let first: Vec<usize> = got[..4]
            .iter()
            .map(|r| {
                let index = names.iter().position(|n| {
                    matches!(r, KeyRequest::Scan { partitions, .. } if partitions.contains(&pk(n)))
                });
                index.expect("a partition") / 10
            })
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        assert_eq!(first, [0, 1, 2, 3]);
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

    fn rk(s: &str) -> RowKey {
        RowKey::new(s).expect("key")
    }

    #[test]
    fn statistics_make_one_request_per_partition_or_chunk() {
        use crate::catalog::stats::{PartitionStats, TableStats};
        let part = |p: &str, guideposts: &[&str]| PartitionStats {
            partition: pk(p),
            entities: 10,
            bytes: 100,
            largest: 10,
            widest: 1,
            guideposts: guideposts.iter().map(|g| rk(g)).collect(),
            oldest: None,
            newest: None,
            prefixes: Default::default(),
        };
        let stats = TableStats {
            taken: chrono::Utc::now(),
            guidepost_every: 4,
            counted: false,
            partitions: vec![
                part("a", &[]),
                part("b", &["R:4", "R:8", "S:1"]),
                part("c", &[]),
            ],
        };
        let path = AccessPath::new(
            crate::exec::read::access::Access::FullScan,
            vec![KeyRequest::Scan {
                partitions: KeyRange::all(),
                rows: KeyRange {
                    start: Bound::Included(rk("R:")),
                    end: Bound::Excluded(rk("R;")),
                },
                at_most_one: false,
            }],
        );
        let a = analyzed(&stats, &path);
        let shown: Vec<String> = a.requests.iter().map(ToString::to_string).collect();
        // "b" splits at its guideposts within the rows (not at "S:1"); the
        // gaps between analyzed partitions stay covered.
        assert_eq!(
            shown,
            [
                r#"pk=(-inf, "b") rk=["R:", "R;")"#,
                r#"pk="b" rk=["R:", "R:4")"#,
                r#"pk="b" rk=["R:4", "R:8")"#,
                r#"pk="b" rk=["R:8", "R;")"#,
                r#"pk=("b", "c") rk=["R:", "R;")"#,
                r#"pk=["c", +inf) rk=["R:", "R;")"#,
            ]
        );
        assert_eq!((a.chunks, a.partitions), (1, 3));
        // Two of b's three guideposts are in the rows: about 3/4 of it.
        assert_eq!(a.entities, 10 + 8 + 10);
    }

    #[test]
    fn a_partition_passed_by_or_narrowed_keeps_the_gaps_around_it() {
        let rows = KeyRange::all();
        let tile = |choice| {
            let mut out = Vec::new();
            Tile {
                owner: &pk("b"),
                partitions: KeyRange {
                    start: Bound::Unbounded,
                    end: Bound::Excluded(pk("d")),
                },
                rows: &rows,
                at_most_one: false,
            }
            .requests(choice, &[], &mut out);
            out.iter().map(ToString::to_string).collect::<Vec<_>>()
        };
        assert_eq!(
            tile(PartitionChoice::Skip),
            [
                r#"pk=(-inf, "b") rk=(-inf, +inf)"#,
                r#"pk=("b", "d") rk=(-inf, +inf)"#
            ]
        );
        let from = KeyRange {
            start: Bound::Excluded(rk("5")),
            end: Bound::Unbounded,
        };
        assert_eq!(
            tile(PartitionChoice::Rows(from)),
            [
                r#"pk=(-inf, "b") rk=(-inf, +inf)"#,
                r#"pk="b" rk=("5", +inf)"#,
                r#"pk=("b", "d") rk=(-inf, +inf)"#
            ]
        );
        assert_eq!(
            tile(PartitionChoice::Whole),
            [r#"pk=(-inf, "d") rk=(-inf, +inf)"#]
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
