//! One query page, as the service computes it: entities walked in chunks
//! from where the last page stopped, each chunk paced by its range server
//! and the account and counted as scanned whether the filter keeps it or
//! not. A page ends when it holds `$top` entities, when the walk crosses
//! into another range server (`storage`), or when the query budget runs
//! out, with what it has, possibly nothing, and a continuation.
//!
//! On `storage` the walk is in key order. On `cosmos` partitions come in
//! the order of a hash of their keys and each page is shuffled, as Cosmos
//! DB's Table API promises no order; and a `Timestamp` comparison matches
//! nothing there, as Cosmos DB answers it.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::time::Instant;

use tablesql_storage::storage::{
    CmpOp, ContinuationToken, EdmValue, Filter, KeyRange, Operand, PartitionKey, Query, RowKey,
    StoredEntity, TableName,
};

use crate::counters::{Counts, Place};
use crate::limits::Profile;
use crate::service::{Refusal, Service, sleep_until};

/// Entities read from the store, and paced, at a time.
const CHUNK: u32 = 100;

/// What a client asked of one page.
#[derive(Debug, Clone, Default)]
pub struct PageRequest {
    pub filter: Option<Filter>,
    /// `$top`: 1 to 1,000.
    pub top: usize,
    /// `$select`: the custom properties to return.
    pub select: Option<Vec<String>>,
    /// Where the last page stopped.
    pub resume: Option<(PartitionKey, RowKey)>,
}

/// One page's answer.
#[derive(Debug, Default)]
pub struct PageAnswer {
    pub entities: Vec<StoredEntity>,
    /// Where the next page starts; `None` when the query is done.
    pub next: Option<(PartitionKey, RowKey)>,
}

/// The key ranges the top-level conjuncts of a filter set: the part of the
/// table the service walks. The RowKey range narrows the walk only within
/// one partition, as Azure seeks a RowKey only under an equal PartitionKey.
pub fn key_ranges(filter: Option<&Filter>) -> (KeyRange<PartitionKey>, KeyRange<RowKey>) {
    let mut pks = KeyRange::all();
    let mut rks = KeyRange::all();
    for c in filter.map(Filter::conjuncts).unwrap_or_default() {
        if let Filter::Compare {
            operand,
            op,
            value: EdmValue::String(s),
        } = c
        {
            match operand {
                Operand::PartitionKey => {
                    if let Ok(k) = PartitionKey::new(s.clone()) {
                        narrow(&mut pks, *op, k);
                    }
                }
                Operand::RowKey => {
                    if let Ok(k) = RowKey::new(s.clone()) {
                        narrow(&mut rks, *op, k);
                    }
                }
                _ => {}
            }
        }
    }
    if pks.single().is_none() {
        rks = KeyRange::all();
    }
    (pks, rks)
}

/// Tightens a range by one comparison (`ne` narrows nothing).
fn narrow<K: Ord + Clone>(range: &mut KeyRange<K>, op: CmpOp, k: K) {
    let raise = |start: &mut Bound<K>, b: Bound<K>| {
        let higher = match (&*start, &b) {
            (Bound::Unbounded, _) => true,
            (Bound::Included(a) | Bound::Excluded(a), Bound::Included(n)) => n > a,
            (Bound::Included(a), Bound::Excluded(n)) => n >= a,
            (Bound::Excluded(a), Bound::Excluded(n)) => n > a,
            (_, Bound::Unbounded) => false,
        };
        if higher {
            *start = b;
        }
    };
    let lower = |end: &mut Bound<K>, b: Bound<K>| {
        let lower = match (&*end, &b) {
            (Bound::Unbounded, _) => true,
            (Bound::Included(a) | Bound::Excluded(a), Bound::Included(n)) => n < a,
            (Bound::Included(a), Bound::Excluded(n)) => n <= a,
            (Bound::Excluded(a), Bound::Excluded(n)) => n < a,
            (_, Bound::Unbounded) => false,
        };
        if lower {
            *end = b;
        }
    };
    match op {
        CmpOp::Eq => {
            raise(&mut range.start, Bound::Included(k.clone()));
            lower(&mut range.end, Bound::Included(k));
        }
        CmpOp::Gt => raise(&mut range.start, Bound::Excluded(k)),
        CmpOp::Ge => raise(&mut range.start, Bound::Included(k)),
        CmpOp::Lt => lower(&mut range.end, Bound::Excluded(k)),
        CmpOp::Le => lower(&mut range.end, Bound::Included(k)),
        CmpOp::Ne => {}
    }
}

/// Whether an entity passes a filter as the profile evaluates it.
fn passes(f: &Filter, e: &StoredEntity, profile: Profile) -> bool {
    match f {
        Filter::And(a, b) => passes(a, e, profile) && passes(b, e, profile),
        Filter::Or(a, b) => passes(a, e, profile) || passes(b, e, profile),
        Filter::Not(a) => !passes(a, e, profile),
        Filter::Compare {
            operand: Operand::Timestamp,
            ..
        } if profile == Profile::Cosmos => false,
        compare => compare.matches(e),
    }
}

/// A partition's place in Cosmos DB's walk: by a hash of its key.
fn hashed(pk: &PartitionKey) -> (u64, &str) {
    // FNV-1a: stable across runs and builds, so a token stays meaningful.
    let h = pk.as_str().bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    (h, pk.as_str())
}

impl Service {
    /// One page of a query.
    pub async fn query(&self, table: &TableName, req: PageRequest) -> Result<PageAnswer, Refusal> {
        let table = self.resolve(table).await?;
        let limits = self.limits();
        let cosmos = limits.profile == Profile::Cosmos;
        // A page's range boundaries, and Cosmos DB's walk, follow every
        // partition written so far.
        self.map_ranges(&table, true).await?;
        let (pks, rks) = key_ranges(req.filter.as_ref());
        let start_pk = req.resume.as_ref().map(|(p, _)| p).or(match &pks.start {
            Bound::Included(p) | Bound::Excluded(p) => Some(p),
            Bound::Unbounded => None,
        });
        self.admit(table.as_str(), start_pk)?;
        let start_pk = start_pk.cloned();
        let mut walk = Walk::new(self, &table, pks, rks, req.resume.clone(), cosmos);
        // A page that reads no partition is still a request (a billed
        // transaction): counted where its walk starts.
        let unread = |start: Option<&PartitionKey>| {
            let server = start.map_or(0, |pk| {
                self.ranges
                    .server_of(table.as_str(), pk, limits.partitions_per_server)
            });
            let at = Place {
                table: table.as_str(),
                partition: start.map_or("", PartitionKey::as_str),
                server,
            };
            self.counters.add(
                at,
                Counts {
                    requests: 1,
                    ..Counts::default()
                },
            );
        };
        if self.chance(limits.empty_pages) {
            unread(start_pk.as_ref());
            // Nothing read, and a token to where the walk starts.
            return Ok(PageAnswer {
                entities: Vec::new(),
                next: walk.start(start_pk),
            });
        }
        let deadline = Instant::now() + limits.query_budget;
        let mut page = PageAnswer::default();
        let mut touched: BTreeMap<(PartitionKey, usize), Counts> = BTreeMap::new();
        let mut page_server = None;
        'walk: loop {
            let Some(chunk) = walk.chunk().await? else {
                break;
            };
            let mut i = 0;
            while i < chunk.len() {
                let server = self.ranges.server_of(
                    table.as_str(),
                    chunk[i].partition_key(),
                    limits.partitions_per_server,
                );
                if !cosmos && page_server.is_some_and(|s| s != server) {
                    page.next = Some(keys(&chunk[i]));
                    break 'walk;
                }
                page_server = Some(server);
                // The run of this chunk on one server and one partition.
                let pk = chunk[i].partition_key().clone();
                let mut end = i;
                let mut kept = Vec::new();
                while end < chunk.len()
                    && chunk[end].partition_key() == &pk
                    && page.entities.len() + kept.len() < req.top
                {
                    if req
                        .filter
                        .as_ref()
                        .is_none_or(|f| passes(f, &chunk[end], limits.profile))
                    {
                        kept.push(end);
                    }
                    end += 1;
                }
                let (fit, done) = self.take(table.as_str(), server, end - i, Some(deadline));
                sleep_until(done).await;
                let counts = touched.entry((pk, server)).or_default();
                counts.scanned += fit as u64;
                for &k in kept.iter().filter(|&&k| k < i + fit) {
                    let mut e = chunk[k].clone();
                    if let Some(names) = &req.select {
                        e.entity.properties.retain(|n, _| names.contains(n));
                    }
                    counts.returned += 1;
                    page.entities.push(e);
                }
                if fit < end - i {
                    // The budget ran out part way: answer what was read.
                    page.next = Some(keys(&chunk[i + fit]));
                    break 'walk;
                }
                i = end;
                if page.entities.len() >= req.top {
                    page.next = match chunk.get(i) {
                        Some(e) => Some(keys(e)),
                        None => walk.position(),
                    };
                    break 'walk;
                }
            }
            if walk.position().is_none() {
                break;
            }
            if Instant::now() >= deadline {
                page.next = walk.position();
                break;
            }
        }
        if touched.is_empty() {
            unread(start_pk.as_ref());
        }
        for ((pk, server), mut counts) in touched {
            counts.requests = 1;
            let at = Place {
                table: table.as_str(),
                partition: pk.as_str(),
                server,
            };
            self.counters.add(at, counts);
        }
        if cosmos {
            self.shuffle(&mut page.entities);
        }
        Ok(page)
    }
}

fn keys(e: &StoredEntity) -> (PartitionKey, RowKey) {
    (e.partition_key().clone(), e.row_key().clone())
}

/// The walk of one page over the store, chunk by chunk.
struct Walk<'a> {
    service: &'a Service,
    table: &'a TableName,
    pks: KeyRange<PartitionKey>,
    rks: KeyRange<RowKey>,
    /// The next entity's position, or where the walk starts; `None` at the end.
    at: Option<(PartitionKey, RowKey)>,
    started: bool,
    /// Cosmos DB's order: the partitions still to walk, next first.
    hashed: Option<Vec<PartitionKey>>,
}

impl<'a> Walk<'a> {
    fn new(
        service: &'a Service,
        table: &'a TableName,
        pks: KeyRange<PartitionKey>,
        rks: KeyRange<RowKey>,
        resume: Option<(PartitionKey, RowKey)>,
        cosmos: bool,
    ) -> Self {
        let hashed = cosmos.then(|| {
            let listed = service.ranges.partitions(table.as_str());
            let mut order: Vec<PartitionKey> =
                listed.iter().filter(|p| pks.contains(p)).cloned().collect();
            order.sort_by(|a, b| hashed(a).cmp(&hashed(b)));
            // Resume at the partition the token names, or the one after it
            // in this order if it is gone.
            if let Some((pk, _)) = &resume {
                let from = order.partition_point(|p| hashed(p) < hashed(pk));
                order.drain(..from);
            }
            order.reverse();
            order
        });
        Self {
            service,
            table,
            pks,
            rks,
            at: resume,
            started: false,
            hashed,
        }
    }

    /// Where a walk not yet begun starts: where it resumes, the next
    /// partition of Cosmos DB's order, or the start of the key range.
    fn start(&self, start_pk: Option<PartitionKey>) -> Option<(PartitionKey, RowKey)> {
        if self.at.is_some() {
            return self.at.clone();
        }
        match &self.hashed {
            Some(order) => order.last().map(|p| (p.clone(), RowKey::default())),
            None => Some((start_pk.unwrap_or_default(), RowKey::default())),
        }
    }

    /// Where the walk goes on from, if it does.
    fn position(&self) -> Option<(PartitionKey, RowKey)> {
        self.at.clone()
    }

    /// The next chunk of entities, or `None` at the end of the walk.
    async fn chunk(&mut self) -> Result<Option<Vec<StoredEntity>>, Refusal> {
        if self.started && self.at.is_none() {
            return Ok(None);
        }
        self.started = true;
        loop {
            let (query, from) = match &mut self.hashed {
                None => {
                    let query = Query {
                        partitions: self.pks.clone(),
                        rows: self.rks.clone(),
                        top: Some(CHUNK),
                        ..Query::default()
                    };
                    (query, self.at.clone())
                }
                Some(order) => {
                    let Some(pk) = order.last().cloned() else {
                        self.at = None;
                        return Ok(None);
                    };
                    let from = self.at.clone().filter(|(p, _)| *p == pk);
                    let query = Query {
                        rows: self.rks.clone(),
                        top: Some(CHUNK),
                        ..Query::partition(pk)
                    };
                    (query, from)
                }
            };
            let token = from.map(|(p, r)| ContinuationToken::at(p, r));
            let page = self
                .service
                .store
                .query(self.table, &query, token.as_ref())
                .await?;
            let next = page
                .continuation
                .map(|t| (t.next_partition_key, t.next_row_key));
            match (&mut self.hashed, next) {
                (_, Some(next)) => self.at = Some(next),
                (None, None) => self.at = None,
                (Some(order), None) => {
                    order.pop();
                    self.at = order.last().map(|p| (p.clone(), RowKey::default()));
                }
            }
            if !page.entities.is_empty() {
                return Ok(Some(page.entities));
            }
            if self.at.is_none() {
                return Ok(None);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmp(operand: Operand, op: CmpOp, s: &str) -> Filter {
        Filter::Compare {
            operand,
            op,
            value: EdmValue::String(s.into()),
        }
    }

    #[test]
    fn top_level_key_conjuncts_bound_the_walk() {
        let f = cmp(Operand::PartitionKey, CmpOp::Eq, "p")
            .and(cmp(Operand::RowKey, CmpOp::Ge, "a"))
            .and(cmp(Operand::RowKey, CmpOp::Lt, "m").or(cmp(Operand::RowKey, CmpOp::Eq, "z")));
        let (pks, rks) = key_ranges(Some(&f));
        assert_eq!(pks.single().map(PartitionKey::as_str), Some("p"));
        assert_eq!(rks.start, Bound::Included(RowKey::new("a").unwrap()));
        // Under an `or` a comparison bounds nothing.
        assert_eq!(rks.end, Bound::Unbounded);
        // Without one partition, a RowKey bound is a filter, not a seek.
        let f =
            cmp(Operand::PartitionKey, CmpOp::Gt, "p").and(cmp(Operand::RowKey, CmpOp::Eq, "r"));
        let (pks, rks) = key_ranges(Some(&f));
        assert_eq!(pks.start, Bound::Excluded(PartitionKey::new("p").unwrap()));
        assert_eq!(rks, KeyRange::all());
    }
}
