//! `PartitionScanExec`: runs an access path's requests concurrently (split
//! per partition by `fanout`), each following continuation tokens page by
//! page, and streams their rows in request order where the plan has a key
//! order to keep, as they come where it has none. At most `max_in_flight`
//! requests run at once; each hands over at most two decoded pages before it
//! waits for the consumer, so memory does not grow with the table. Dropping
//! the stream (LIMIT reached, query cancelled) stops every request and the
//! listing of partitions.
//!
//! A path over index rows decodes them with the index's layout where they
//! carry every column the query needs; otherwise each page of index rows
//! leads to its base rows (`lookup`), read concurrently under the same
//! in-flight bound and kept in index order.

use std::collections::HashSet;
use std::fmt;
use std::sync::{Arc, Mutex};

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::Statistics;
use datafusion::common::config::ConfigOptions;
use datafusion::common::stats::Precision;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::TaskContext;
use datafusion::physical_expr::DynamicFilterTracking;
use datafusion::physical_expr::utils::conjunction_opt;
use datafusion::physical_expr::{
    EquivalenceProperties, LexOrdering, PhysicalExpr, PhysicalSortExpr,
};
use datafusion::physical_plan::execution_plan::{
    Boundedness, EmissionType, ReplaceChildrenOptions,
};
use datafusion::physical_plan::filter_pushdown::{
    ChildPushdownResult, FilterPushdownPhase, FilterPushdownPropagation,
};
use datafusion::physical_plan::metrics::{ExecutionPlanMetricsSet, MetricsSet};
use datafusion::physical_plan::statistics::StatisticsArgs;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
    SendableRecordBatchStream, SortOrderPushdownResult,
};
use futures::{StreamExt, TryStreamExt};
use tokio::sync::mpsc;

use super::access::{AccessPath, KeyRequest};
use super::decode::{BatchSink, DecodePlan, Layout, Skipped, Source, decode_with};
use super::fanout::{Fanout, ListingCounters, expand};
use super::metrics::{BillCount, ExactCount};
use super::rescan::Rescan;
use super::units::{Unit, batched};
use crate::catalog::stats::TableStats;
use crate::exec::ExecError;
use crate::exec::notices::ScanVerdict;
use crate::storage::{ContinuationToken, KeyRange, PageEnd, Query, StoredEntity, TableStore};
use cached::KeptPages;

mod cached;

/// Tuning of scans: [`ScanOptions::default`], then the `with_` methods.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct ScanOptions {
    /// Most store requests in flight at once for one scan.
    pub max_in_flight: usize,
    /// Decoded pages a request may hold ahead of the consumer.
    pub pages_ahead: usize,
    /// Whether a request spanning partitions runs as one request per partition.
    pub fan_out: bool,
}

impl Default for ScanOptions {
    fn default() -> Self {
        Self {
            max_in_flight: 8,
            pages_ahead: 2,
            fan_out: true,
        }
    }
}

impl ScanOptions {
    /// At most `n` store requests in flight for one scan.
    pub fn with_max_in_flight(mut self, n: usize) -> Self {
        self.max_in_flight = n;
        self
    }

    /// At most `n` decoded pages held ahead of the consumer per request.
    pub fn with_pages_ahead(mut self, n: usize) -> Self {
        self.pages_ahead = n;
        self
    }

    /// Whether a request spanning partitions runs as one per partition.
    pub fn with_fan_out(mut self, on: bool) -> Self {
        self.fan_out = on;
        self
    }
}

/// The scan of a mapped or raw table along an access path.
#[derive(Debug, Clone)]
pub struct PartitionScanExec {
    store: Arc<dyn TableStore>,
    layout: Arc<Layout>,
    /// The layout of the rows the path reads: `layout`, or an index's.
    rows: Arc<Layout>,
    /// Whether index rows lead to their base rows.
    lookup: bool,
    path: AccessPath,
    /// Other paths for the same filters, one of which may give an order
    /// a sort above wants (`try_pushdown_sort`).
    alternatives: Vec<AccessPath>,
    stats: Option<Arc<TableStats>>,
    fanout: Fanout,
    /// Whether rows must come in request order (the plan relies on key order).
    ordered: bool,
    /// Output columns of ascending typed text in that order: their UTF-16
    /// order is made code points' as rows stream (`order::CodePointOrder`).
    utf16_text: Arc<[usize]>,
    projection: Vec<usize>,
    schema: SchemaRef,
    limit: Option<usize>,
    options: ScanOptions,
    properties: Arc<PlanProperties>,
    metrics: ExecutionPlanMetricsSet,
    counters: Counters,
    /// The scan policy's verdict, acted on when the scan runs.
    verdict: Option<ScanVerdict>,
    /// The planner's handle to read the table again by key.
    rescan: Option<Arc<dyn Rescan>>,
    /// A hash join's dynamic filter on its rows (`dynamic`), and what it
    /// read as when the scan took a narrower path by it (for EXPLAIN
    /// ANALYZE).
    dynamic: Option<Arc<dyn PhysicalExpr>>,
    dynamic_used: Arc<Mutex<Option<String>>>,
}

#[derive(Debug, Clone)]
struct Counters {
    scanned: ExactCount,
    returned: ExactCount,
    requests: ExactCount,
    /// Retries the store made for the scan's requests.
    retries: ExactCount,
    /// Of them, retries of answers that refused the work as busy.
    throttled: ExactCount,
    /// Time the store waited before its retries, in milliseconds.
    retry_wait_ms: ExactCount,
    partitions: ExactCount,
    listing_requests: ExactCount,
    lanes: ExactCount,
    peak_in_flight: ExactCount,
    in_flight: Arc<std::sync::atomic::AtomicUsize>,
    index_rows: ExactCount,
    lookups: ExactCount,
    /// Requests answered from the store's derived cache.
    cached: ExactCount,
    seen: Arc<Mutex<HashSet<String>>>,
    /// Its billable transactions, by kind.
    bill: BillCount,
}

impl PartitionScanExec {
    /// The rows a scan that reads no column (a `count(*)`) returns, where
    /// the store counts them without reading: each request a range of
    /// whole partitions over RowKeys that are all (where no index rows
    /// share them) or exactly one kind of row (the base rows' literal,
    /// `BIB:`), with no condition for the store or the scan to apply and
    /// every entity one row. Where index rows share the partitions and the
    /// base rows' RowKey starts with a field, a range can look like a kind
    /// and hold index rows, so nothing is counted. A RowKey that does not
    /// fit the template, which the scan refuses, is counted as a row. A
    /// store that fails to say is asked no further: the scan will meet the
    /// failure itself. Only a scan of no column asks, since the store may
    /// read a counter per partition for it.
    fn counted_rows(&self) -> Option<u64> {
        let (shares_rows, base_kind) = self.layout.def.as_deref().map_or((false, true), |d| {
            let led = matches!(
                d.row_key.segments().first(),
                Some(crate::keys::Segment::Literal(_))
            );
            (!d.indexes.is_empty(), led)
        });
        if !self.projection.is_empty()
            || (shares_rows && !base_kind)
            || self.lookup
            || self.path.index().is_some()
            || self.path.filter.is_some()
            || self.path.partition_bound.is_some()
            || self.dynamic.is_some()
            || self.path.requests.is_empty()
        {
            return None;
        }
        let mut n = 0;
        for request in &self.path.requests {
            let KeyRequest::Scan {
                partitions,
                rows,
                at_most_one: false,
            } = request
            else {
                return None;
            };
            if shares_rows && *rows == KeyRange::all() {
                return None;
            }
            n += self.store.counted(self.table(), partitions, rows).ok()??;
        }
        Some(n)
    }

    /// A scan of `layout`'s table along `path`, producing the `projection`
    /// columns, and declaring the key order they arrive in.
    pub fn new(
        store: Arc<dyn TableStore>,
        layout: Arc<Layout>,
        path: AccessPath,
        projection: Vec<usize>,
        limit: Option<usize>,
        options: ScanOptions,
    ) -> Result<Self> {
        let schema = Arc::new(layout.schema.project(&projection)?);
        let (rows, lookup) = match path.index() {
            None => (layout.clone(), false),
            Some(read) => {
                let rows = layout.over_index(read.position).ok_or_else(|| {
                    DataFusionError::Internal(format!("no index {} to read", read.name))
                })?;
                let lookup = needs_lookup(&layout, read.position, &projection);
                (Arc::new(rows), lookup)
            }
        };
        // A store whose pages come in no key order (Cosmos DB's) promises
        // DataFusion none: sorts, top-N and merges are planned above it.
        let ordering = if store.key_ordered() {
            super::order::key_ordering(&rows, &path, &projection)
        } else {
            super::order::KeyOrder::default()
        };
        // Rows that carry only keys cannot answer a property filter: it
        // applies to the base rows looked up, or is left to DataFusion
        // (which keeps every property condition).
        let mut path = path;
        if !lookup && rows.index.is_some() && !carries_all(&layout, &path) {
            path.filter = None;
        }
        let ordered = !ordering.sort.is_empty();
        // Under a LIMIT the first pages usually answer: listing partitions
        // and starting a request in each would cost more than it saves.
        // A row-value bound passes partitions by only when they are known.
        // A store in no key order cannot list partitions but by a scan of
        // every key: its scan follows the service's tokens instead.
        let fanout = if options.fan_out
            && store.key_ordered()
            && (limit.is_none() || path.partition_bound.is_some())
            && path.requests.iter().any(super::fanout::spans_partitions)
        {
            Fanout::Partitions
        } else {
            Fanout::Sequential
        };
        let utf16_text: Arc<[usize]> = ordering.utf16_text.clone().into();
        let eq = match LexOrdering::new(ordering.sort) {
            Some(o) => EquivalenceProperties::new_with_orderings(schema.clone(), [o]),
            None => EquivalenceProperties::new(schema.clone()),
        };
        let properties = PlanProperties::new(
            eq,
            Partitioning::UnknownPartitioning(1),
            EmissionType::Incremental,
            Boundedness::Bounded,
        );
        let metrics = ExecutionPlanMetricsSet::new();
        let counters = Counters::register(&metrics);
        Ok(Self {
            store,
            layout,
            rows,
            lookup,
            path,
            alternatives: Vec::new(),
            stats: None,
            fanout,
            ordered,
            utf16_text,
            projection,
            schema,
            limit,
            options,
            properties: Arc::new(properties),
            metrics,
            counters,
            verdict: None,
            rescan: None,
            dynamic: None,
            dynamic_used: Arc::default(),
        })
    }

    /// With the planner's handle to read the same table again under more
    /// conditions (a lookup join's reads by key).
    pub fn with_rescan(mut self, rescan: Arc<dyn Rescan>) -> Self {
        self.rescan = Some(rescan);
        self
    }

    /// The handle to read the table again, if the planner gave one.
    pub fn rescan(&self) -> Option<&Arc<dyn Rescan>> {
        self.rescan.as_ref()
    }

    /// The most rows it reads.
    pub fn limit(&self) -> Option<usize> {
        self.limit
    }

    /// The scan policy's verdict, to act on when the scan runs (a notice,
    /// or a refusal), so that EXPLAIN still shows the plan.
    pub fn with_verdict(mut self, verdict: Option<ScanVerdict>) -> Self {
        self.verdict = verdict;
        self
    }

    /// Plans the fan-out from `ANALYZE`'s statistics instead of listing
    /// partitions as the scan runs.
    pub fn with_stats(mut self, stats: Option<Arc<TableStats>>) -> Self {
        if let (Fanout::Partitions, Some(stats)) = (&self.fanout, &stats) {
            self.fanout = Fanout::Analyzed(Box::new(super::fanout::analyzed(stats, &self.path)));
        }
        self.stats = stats;
        self
    }

    /// Other paths over the same filters (index rows, or the base rows),
    /// which a sort above may take for the order they give.
    pub fn with_alternatives(mut self, alternatives: Vec<AccessPath>) -> Self {
        self.alternatives = alternatives;
        self
    }

    /// The scan along alternative `i`, if its rows come in order `want`.
    fn ordered_by(&self, want: &[PhysicalSortExpr]) -> Result<Option<Self>> {
        if !self.store.key_ordered() {
            return Ok(None);
        }
        for (i, alt) in self.alternatives.iter().enumerate() {
            let rows = match alt.index() {
                None => self.layout.clone(),
                Some(read) => match self.layout.over_index(read.position) {
                    Some(l) => Arc::new(l),
                    None => continue,
                },
            };
            let have = super::order::key_ordering(&rows, alt, &self.projection).sort;
            if !super::order::satisfies(&have, want) {
                continue;
            }
            let mut alternatives = self.alternatives.clone();
            alternatives[i] = self.path.clone();
            // A sort costs less than a lookup per row.
            if let Some(read) = alt.index()
                && needs_lookup(&self.layout, read.position, &self.projection)
            {
                continue;
            }
            let scan = Self::new(
                self.store.clone(),
                self.layout.clone(),
                alt.clone(),
                self.projection.clone(),
                self.limit,
                self.options,
            )?
            .with_stats(self.stats.clone())
            .with_alternatives(alternatives)
            .with_verdict(self.verdict.clone());
            let mut scan = match &self.rescan {
                Some(r) => scan.with_rescan(r.clone()),
                None => scan,
            };
            scan.dynamic = self.dynamic.clone();
            return Ok(Some(scan));
        }
        Ok(None)
    }

    /// Rows in request (key) order even where no ordering is declared:
    /// token paging ends a page on one row's key, and resumes after it in
    /// key order, so text keys are not put in code point order.
    pub fn in_key_order(mut self) -> Self {
        self.ordered = true;
        self.utf16_text = Arc::from([]);
        self
    }

    /// The segments of the key space its fan-out reads side by side
    /// (`fanout::expand`): one where rows come in key order; otherwise as
    /// many as requests in flight, so that they lie far apart.
    fn lanes(&self) -> usize {
        if self.ordered {
            1
        } else {
            self.options.max_in_flight.max(1)
        }
    }

    /// The access path it runs.
    pub fn path(&self) -> &AccessPath {
        &self.path
    }

    /// The storage table it reads.
    pub fn table(&self) -> &crate::storage::TableName {
        &self.layout.table
    }

    /// The transactions its path costs, and whether that is an estimate
    /// rather than the least it can cost (`AccessPath::bill`).
    pub fn estimated_bill(&self) -> (crate::storage::bill::Transactions, bool) {
        self.path.bill(self.store.get_many_limit(), self.lookup)
    }

    /// Whether it reads whole entities over a range: no filter sent with
    /// the requests and every property asked for (the guidance's reads
    /// without filter or projection).
    pub fn reads_whole_entities(&self) -> bool {
        use super::access::Access;
        let ranged = matches!(
            self.path.access,
            Access::FullScan | Access::PartitionRange | Access::RowRange
        );
        let every = self
            .layout
            .columns
            .iter()
            .filter(|(s, _)| matches!(s, Source::Property { .. }))
            .count();
        ranged
            && !self.lookup
            && self.path.filter.is_none()
            && every > 0
            && self.rows.properties(&self.projection).len() >= every
    }
}

impl Counters {
    fn register(metrics: &ExecutionPlanMetricsSet) -> Self {
        let m = |name: &'static str| ExactCount::register(metrics, name);
        Self {
            scanned: m("entities_scanned"),
            returned: m("entities_returned"),
            requests: m("requests"),
            retries: m("retries"),
            throttled: m("throttled"),
            retry_wait_ms: m("retry_wait_ms"),
            partitions: m("partitions"),
            listing_requests: m("listing_requests"),
            lanes: m("lanes_run"),
            peak_in_flight: m("peak_in_flight"),
            in_flight: Arc::default(),
            index_rows: m("index_rows_skipped"),
            lookups: m("index_lookups"),
            cached: m("requests_cached"),
            seen: Arc::default(),
            bill: BillCount::register(metrics),
        }
    }
}

impl DisplayAs for PartitionScanExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "PartitionScanExec: table={} {}",
            self.layout.table, self.path
        )?;
        if self.lookup {
            f.write_str(" lookup=base_rows")?;
        }
        if self.fanout != Fanout::Sequential {
            write!(f, " {}", self.fanout)?;
            if let Some(n) = self.fanout.lanes(self.lanes()) {
                write!(f, " lanes={n}")?;
            }
        }
        let names: Vec<&str> = self
            .schema
            .fields()
            .iter()
            .map(|f| f.name().as_str())
            .collect();
        write!(f, " projection=[{}]", names.join(", "))?;
        if let Some(l) = self.limit {
            write!(f, " limit={l}")?;
        }
        if let Some(used) = self.dynamic_used.lock().ok().and_then(|u| u.clone()) {
            write!(f, " dynamic_filter=read({used})")?;
        }
        Ok(())
    }
}

#[derive(Clone)]
/// One request's run: pages into a bounded channel until done, the
/// consumer gone, or (for `at_most_one`) the first row.
struct RequestRun {
    store: Arc<dyn TableStore>,
    /// The layout of the rows the requests read.
    layout: Arc<Layout>,
    query: Query,
    counters: Counters,
    /// One permit per store request in flight, shared by the scan's requests.
    permits: Arc<tokio::sync::Semaphore>,
    /// Where index rows lead to base rows: how to read and decode those.
    lookup: Option<Arc<Lookup>>,
    /// Most store requests in flight.
    width: usize,
    /// How the rows' pages decode.
    decode: Arc<DecodePlan>,
    /// What the scan derives from the rows it reads (its layout,
    /// projection and properties), naming its pages in the store's derived
    /// cache; `None` where it keeps nothing.
    shape: Option<Arc<str>>,
    /// The scan's LIMIT: no request reads a page past the one that
    /// reached it, since its later rows come after those in every order.
    limit: Option<usize>,
    /// The scan's `utf16_text`: rows holding characters past U+FFFF there
    /// may belong later, so they do not count toward the LIMIT.
    utf16_text: Arc<[usize]>,
}

/// What a page sent: its rows, and those that count toward the LIMIT (all
/// but rows whose text keys `order::CodePointOrder` may hold back).
#[derive(Debug, Default, Clone, Copy)]
struct Sent {
    rows: usize,
    counted: usize,
}

/// The base rows behind index rows.
struct Lookup {
    /// The base rows' layout.
    layout: Arc<Layout>,
    /// The index.
    position: usize,
    /// The base rows' properties and filter.
    query: Query,
    /// How the base rows decode.
    decode: Arc<DecodePlan>,
}

impl RequestRun {
    async fn run(self, request: Unit, tx: mpsc::Sender<Result<RecordBatch>>) {
        let result = tokio::select! {
            r = self.pump(request, &tx) => r,
            () = tx.closed() => Ok(()),
        };
        if let Err(e) = result {
            let _ = tx.send(Err(e)).await;
        }
    }

    /// One store request: counted with its retries, and holding a permit
    /// while in flight.
    async fn request<T>(&self, call: impl Future<Output = crate::storage::Result<T>>) -> Result<T> {
        use std::sync::atomic::Ordering;
        self.counters.requests.add(1);
        let _permit = self
            .permits
            .acquire()
            .await
            .map_err(|e| DataFusionError::External(Box::new(e)))?;
        let now = self.counters.in_flight.fetch_add(1, Ordering::Relaxed) + 1;
        self.counters.peak_in_flight.raise_to(now);
        // Counted down on drop too: an aborted request is no longer in flight.
        let _landed = InFlight(&self.counters.in_flight);
        let (answer, retries) =
            crate::storage::retries::counted_by(self.store.as_ref(), call).await;
        self.counters.retries.add(retries.retries as usize);
        self.counters.throttled.add(retries.busy as usize);
        self.counters
            .retry_wait_ms
            .add(retries.waited.as_millis() as usize);
        Ok(answer.map_err(ExecError::from)?)
    }

    async fn pump(&self, request: Unit, tx: &mpsc::Sender<Result<RecordBatch>>) -> Result<()> {
        let table = &self.layout.table;
        let request = match request {
            Unit::One(request) => request,
            Unit::Keys(pk, rks) => {
                let entities = self.request(self.store.get_many(table, &pk, &rks)).await?;
                self.counters.scanned.add(entities.len());
                let kept: Vec<_> = entities
                    .into_iter()
                    .filter(|e| self.query.passes(e))
                    .collect();
                self.emit(&kept, tx).await?;
                return Ok(());
            }
        };
        match request {
            KeyRequest::Get(pk, rk) => {
                let found = self.request(self.store.get(table, &pk, &rk)).await?;
                let entities: Vec<_> = found.into_iter().collect();
                self.counters.scanned.add(entities.len());
                let kept: Vec<_> = entities
                    .into_iter()
                    .filter(|e| self.query.passes(e))
                    .collect();
                self.emit(&kept, tx).await?;
            }
            KeyRequest::Scan {
                partitions,
                rows,
                at_most_one,
            } => {
                let mut query = self.query.clone();
                query.partitions = partitions;
                query.rows = rows;
                if at_most_one {
                    query.top = Some(1);
                }
                match self.cache(&query, at_most_one) {
                    Some(cache) => self.scan_cached(cache, &query, tx).await?,
                    None => {
                        self.scan(&query, at_most_one, tx, None).await?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Follows a request's continuation tokens page by page; `Ok(true)` if
    /// every page reached the consumer. `keep` gathers the pages sent,
    /// until they pass what the cache would keep.
    async fn scan(
        &self,
        query: &Query,
        at_most_one: bool,
        tx: &mpsc::Sender<Result<RecordBatch>>,
        mut keep: Option<&mut KeptPages>,
    ) -> Result<bool> {
        let table = &self.layout.table;
        let mut token: Option<ContinuationToken> = None;
        let mut counted = 0;
        // Under a LIMIT (`$top`), once a page held rows back: the next
        // pages whole, so that keys full of characters past U+FFFF do not
        // cost a request per few rows.
        let mut widened: Option<Query> = None;
        loop {
            let query = widened.as_ref().unwrap_or(query);
            // Rows decoded as the store reads them; index rows that
            // lead to base rows are read whole, to look those up.
            let (continuation, page) = if self.lookup.is_none() {
                let (end, sink) = self.page_into(query, token.as_ref()).await?;
                self.counters.scanned.add(end.scanned);
                self.count_partitions(sink.partitions().iter().map(String::as_str));
                let partitions = keep.is_some().then(|| sink.partitions().to_vec());
                let (batch, skipped) = sink.finish()?;
                if let (Some(pages), Some(partitions)) = (keep.as_deref_mut(), partitions) {
                    pages.take(&batch, skipped, partitions);
                }
                let Some(sent) = self.send(batch, skipped, tx).await else {
                    return Ok(false);
                };
                (end.continuation, sent)
            } else {
                let page = self
                    .request(self.store.query(table, query, token.as_ref()))
                    .await?;
                self.counters.scanned.add(page.scanned);
                match self.emit(&page.entities, tx).await? {
                    Some(sent) => (page.continuation, sent),
                    None => return Ok(false),
                }
            };
            counted += page.counted;
            if continuation.is_some() && self.limit.is_some_and(|l| counted >= l) {
                // Not every page: nothing of it is kept.
                return Ok(false);
            }
            if page.counted < page.rows && query.top.is_some() {
                let mut whole = query.clone();
                whole.top = None;
                widened = Some(whole);
            }
            match continuation {
                Some(next) if !(at_most_one && page.rows > 0) => token = Some(next),
                _ => return Ok(true),
            }
        }
    }

    /// Decodes and sends a page (`send`); `None` if the consumer left.
    async fn emit(
        &self,
        entities: &[crate::storage::StoredEntity],
        tx: &mpsc::Sender<Result<RecordBatch>>,
    ) -> Result<Option<Sent>> {
        if entities.is_empty() {
            return Ok(Some(Sent::default()));
        }
        self.count_partitions(entities.iter().map(|e| e.partition_key().as_str()));
        let base;
        let (plan, entities) = match &self.lookup {
            None => (&self.decode, entities),
            Some(lookup) => {
                base = self.look_up(lookup, entities).await?;
                (&lookup.decode, base.as_slice())
            }
        };
        let (batch, skipped) = decode_with(plan, entities)?;
        Ok(self.send(batch, skipped, tx).await)
    }

    /// Sends a decoded page; `None` if the consumer left.
    async fn send(
        &self,
        batch: RecordBatch,
        skipped: Skipped,
        tx: &mpsc::Sender<Result<RecordBatch>>,
    ) -> Option<Sent> {
        self.counters.index_rows.add(skipped.index_rows);
        let rows = batch.num_rows();
        let counted = match self.utf16_text.is_empty() {
            true => rows,
            false => super::order::CodePointOrder::counted(&self.utf16_text, &batch),
        };
        if rows > 0 && tx.send(Ok(batch)).await.is_err() {
            return None;
        }
        Some(Sent { rows, counted })
    }

    /// Counts the partitions not met before.
    fn count_partitions<'a>(&self, keys: impl Iterator<Item = &'a str>) {
        if let Ok(mut seen) = self.counters.seen.lock() {
            let mut last: Option<&str> = None;
            for pk in keys {
                if last != Some(pk) {
                    last = Some(pk);
                    if !seen.contains(pk) {
                        seen.insert(pk.to_owned());
                        self.counters.partitions.add(1);
                    }
                }
            }
        }
    }

    /// One page decoded by the store straight into Arrow builders.
    async fn page_into(
        &self,
        query: &Query,
        token: Option<&ContinuationToken>,
    ) -> Result<(PageEnd, BatchSink)> {
        let capacity = query
            .page_size()
            .map_err(|e| DataFusionError::External(Box::new(e)))?;
        let sink = BatchSink::new(self.decode.clone(), capacity);
        let read =
            super::decode::page_into(self.store.as_ref(), &self.layout.table, query, token, sink);
        let (end, sink) = self.request(read).await?;
        Ok((end, sink))
    }
}

impl RequestRun {
    /// The base rows of a page of index rows, in its order: read
    /// concurrently (the permits bound them), each kept where it agrees
    /// with its index row and passes the filter.
    async fn look_up(
        &self,
        lookup: &Lookup,
        index_rows: &[StoredEntity],
    ) -> Result<Vec<StoredEntity>> {
        use futures::TryStreamExt;
        let def = crate::exec::write::encode::mapped(&lookup.layout)?;
        let ix = def.indexes.get(lookup.position).ok_or_else(|| {
            DataFusionError::Internal(format!("no index {} to look up", lookup.position))
        })?;
        let requests = index_rows
            .iter()
            .map(|e| super::lookup::base_request(def, ix, e))
            .collect::<Result<Vec<_>, ExecError>>()?;
        self.counters.lookups.add(requests.len());
        let found: Vec<Option<StoredEntity>> = futures::stream::iter(requests)
            .map(|r| self.fetch_one(r, &lookup.query))
            .buffered(self.width)
            .try_collect()
            .await?;
        let mut rows = Vec::with_capacity(found.len());
        for (index_row, base) in index_rows.iter().zip(found) {
            let Some(base) = base else { continue };
            self.counters.scanned.add(1);
            if super::lookup::agrees(def, ix, index_row, &base) && lookup.query.passes(&base) {
                rows.push(base);
            }
        }
        Ok(rows)
    }

    /// The one entity a lookup request names, if it exists.
    async fn fetch_one(&self, request: KeyRequest, base: &Query) -> Result<Option<StoredEntity>> {
        let table = &self.layout.table;
        match request {
            KeyRequest::Get(pk, rk) => self.request(self.store.get(table, &pk, &rk)).await,
            KeyRequest::Scan {
                partitions, rows, ..
            } => {
                let mut query = base.clone();
                query.partitions = partitions;
                query.rows = rows;
                query.filter = None;
                query.top = Some(1);
                let mut token: Option<ContinuationToken> = None;
                loop {
                    let page = self
                        .request(self.store.query(table, &query, token.as_ref()))
                        .await?;
                    if let Some(e) = page.entities.into_iter().next() {
                        return Ok(Some(e));
                    }
                    match page.continuation {
                        Some(next) => token = Some(next),
                        None => return Ok(None),
                    }
                }
            }
        }
    }
}

/// Whether the index rows `path` reads carry every column.
fn carries_all(layout: &Layout, path: &AccessPath) -> bool {
    let index = path.index().map(|i| i.position);
    layout
        .def
        .as_ref()
        .and_then(|d| d.indexes.get(index?))
        .is_some_and(|ix| ix.covering)
}

/// Whether reading index `position`'s rows for `projection` needs their
/// base rows: a column the index row does not carry, or a system column
/// of the base row (its RowKey, Timestamp, ETag).
fn needs_lookup(layout: &Layout, position: usize, projection: &[usize]) -> bool {
    let Some(def) = &layout.def else {
        return false;
    };
    let Some(ix) = def.indexes.get(position) else {
        return false;
    };
    projection
        .iter()
        .any(|&i| match layout.columns.get(i).map(|c| &c.0) {
            Some(Source::RowKey | Source::Timestamp | Source::ETag) => true,
            Some(Source::RowField(_) | Source::Property { .. }) => {
                !ix.carries(def, layout.schema.field(i).name())
            }
            _ => false,
        })
}

impl ExecutionPlan for PartitionScanExec {
    fn name(&self) -> &str {
        "PartitionScanExec"
    }

    /// A LIMIT found above the scan once a sort its key order answers is
    /// gone (a keyset page: `ORDER BY` the key, `LIMIT n`): the scan stops
    /// at it, and reads its requests in key order rather than fan out.
    fn with_fetch(&self, limit: Option<usize>) -> Option<Arc<dyn ExecutionPlan>> {
        // A dynamic filter's read (`DynamicChoice`) streams without one.
        if self.dynamic.is_some() {
            return None;
        }
        let limit = match (limit, self.limit) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let scan = Self::new(
            self.store.clone(),
            self.layout.clone(),
            self.path.clone(),
            self.projection.clone(),
            limit,
            self.options,
        )
        .ok()?
        .with_stats(self.stats.clone())
        .with_alternatives(self.alternatives.clone())
        .with_verdict(self.verdict.clone());
        let mut scan = match &self.rescan {
            Some(r) => scan.with_rescan(r.clone()),
            None => scan,
        };
        // A page scan's key order stays (`in_key_order`).
        scan.ordered |= self.ordered;
        scan.utf16_text = self.utf16_text.clone();
        Some(Arc::new(scan))
    }

    fn fetch(&self) -> Option<usize> {
        self.limit
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        Vec::new()
    }

    /// Its dynamic filter: the hash join that fills it looks for it here
    /// to know that someone reads it.
    fn apply_expressions(
        &self,
        f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        match &self.dynamic {
            Some(d) => f(d),
            None => Ok(TreeNodeRecursion::Continue),
        }
    }

    /// Takes a hash join's dynamic filters where the scan can read the
    /// table again under more conditions (`dynamic`); none is applied
    /// exactly, so DataFusion keeps whatever else it does with them.
    fn handle_child_pushdown_result(
        &self,
        phase: FilterPushdownPhase,
        child_pushdown_result: ChildPushdownResult,
        _config: &ConfigOptions,
    ) -> Result<FilterPushdownPropagation<Arc<dyn ExecutionPlan>>> {
        let dynamic: Vec<Arc<dyn PhysicalExpr>> = child_pushdown_result
            .parent_filters
            .iter()
            .map(|f| Arc::clone(&f.filter))
            .filter(|f| DynamicFilterTracking::classify(f).contains_dynamic_filter())
            .collect();
        let mut result = FilterPushdownPropagation::all_unsupported(child_pushdown_result);
        let takes = phase == FilterPushdownPhase::Post
            && self.rescan.is_some()
            && self.limit.is_none()
            && self.dynamic.is_none();
        if takes && let Some(filter) = conjunction_opt(dynamic) {
            let mut scan = self.clone();
            scan.metrics = ExecutionPlanMetricsSet::new();
            scan.counters = Counters::register(&scan.metrics);
            scan.dynamic = Some(filter);
            scan.dynamic_used = Arc::default();
            result = result.with_updated_node(Arc::new(scan) as Arc<dyn ExecutionPlan>);
        }
        Ok(result)
    }

    fn replace_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
        _options: ReplaceChildrenOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        leaf(self, children)
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        leaf(self, children)
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }

    /// The rows it reads at most, where something bounds them: a path of
    /// points reads one row per key, a LIMIT its count, and `ANALYZE`'s
    /// statistics estimate the rest. Join selection and lookup joins
    /// (`planner::lookup`) read it; without a bound it is unknown. The key
    /// columns' distinct counts come from the statistics too (over the
    /// whole table, so at most the rows read), for DataFusion's join
    /// estimates.
    ///
    /// Where the store keeps counts that answer the path exactly (the
    /// embedded store's, `TableStore::counted`), the number of rows is
    /// exact: DataFusion then answers a `count(*)` from it without running
    /// the scan.
    fn statistics_from_inputs(
        &self,
        _input_stats: &[Arc<Statistics>],
        args: &StatisticsArgs,
    ) -> Result<Arc<Statistics>> {
        let counted = args
            .partition()
            .is_none()
            .then(|| self.counted_rows())
            .flatten()
            .map(|n| usize::try_from(n).unwrap_or(usize::MAX));
        let points =
            (self.path.access == super::access::Access::Points).then_some(self.path.requests.len());
        let rows = [
            self.path
                .estimate
                .map(|e| usize::try_from(e.rows).unwrap_or(usize::MAX)),
            points,
            self.limit,
        ]
        .into_iter()
        .flatten()
        .min();
        let mut stats = Statistics::new_unknown(&self.schema);
        if let Some(rows) = rows {
            stats.num_rows = Precision::Inexact(rows);
        }
        if let Some(n) = counted {
            stats.num_rows = Precision::Exact(self.limit.map_or(n, |l| l.min(n)));
        }
        if let (Some(table), Some(def)) = (&self.stats, self.layout.def.as_deref()) {
            for (i, field) in self.schema.fields().iter().enumerate() {
                let Some(n) = table.column_distinct(def, field.name()) else {
                    continue;
                };
                let n = usize::try_from(n).unwrap_or(usize::MAX);
                stats.column_statistics[i].distinct_count =
                    Precision::Inexact(rows.map_or(n, |r| n.min(r)));
            }
        }
        Ok(Arc::new(stats))
    }

    /// An ORDER BY that another path's key order answers (an index's,
    /// within a partition) takes that path, and no sort is planned.
    fn try_pushdown_sort(
        &self,
        order: &[PhysicalSortExpr],
    ) -> Result<SortOrderPushdownResult<Arc<dyn ExecutionPlan>>> {
        Ok(match self.ordered_by(order)? {
            Some(scan) => SortOrderPushdownResult::Exact {
                inner: Arc::new(scan),
            },
            None => SortOrderPushdownResult::Unsupported,
        })
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        if partition != 0 {
            return Err(DataFusionError::Internal(format!(
                "PartitionScanExec has one partition, not {partition}"
            )));
        }
        if let Some(verdict) = &self.verdict {
            verdict.apply(context.session_config())?;
        }
        let planned = self.read()?;
        let (Some(dynamic), Some(rescan)) = (&self.dynamic, &self.rescan) else {
            return Ok(planned);
        };
        // Decided when the rows are first asked for: the join has read its
        // build side and filled the filter by then. The planned stream
        // starts no request until polled.
        let choice = DynamicChoice {
            filter: Arc::clone(dynamic),
            rescan: Arc::clone(rescan),
            schema: self.schema.clone(),
            path: self.path.clone(),
            ordering: self.properties.output_ordering().cloned(),
            used: self.dynamic_used.clone(),
            counters: self.counters.clone(),
        };
        let stream =
            futures::stream::once(async move { choice.decide(planned, context) }).try_flatten();
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            self.schema.clone(),
            stream,
        )))
    }
}

/// What a scan with a dynamic filter needs to choose its path at its
/// first poll.
struct DynamicChoice {
    filter: Arc<dyn PhysicalExpr>,
    rescan: Arc<dyn Rescan>,
    schema: SchemaRef,
    path: AccessPath,
    ordering: Option<LexOrdering>,
    used: Arc<Mutex<Option<String>>>,
    counters: Counters,
}

impl DynamicChoice {
    /// The read along the narrower path the filter's key conditions give,
    /// where there is one that keeps the scan's order; else `planned`.
    fn decide(
        self,
        planned: SendableRecordBatchStream,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let extra = super::dynamic::key_conditions(&self.filter, &self.schema)?;
        if extra.is_empty() {
            return Ok(planned);
        }
        let path = self.rescan.path(&extra);
        if !super::dynamic::narrower(&path, &self.path) {
            return Ok(planned);
        }
        // The filter only saves reading: a path that does not plan leaves
        // the planned one.
        let Ok(plan) = self.rescan.with(&extra) else {
            return Ok(planned);
        };
        let keeps_order = match &self.ordering {
            Some(o) => plan
                .properties()
                .equivalence_properties()
                .ordering_satisfy(o.clone())?,
            None => true,
        };
        if !keeps_order || plan.properties().output_partitioning().partition_count() != 1 {
            return Ok(planned);
        }
        if let Ok(mut used) = self.used.lock() {
            // Its access alone: the keys can be many.
            let shown = path.to_string();
            let access = shown.split_whitespace().next().unwrap_or_default();
            *used = Some(access.trim_start_matches("access=").to_owned());
        }
        let rows = plan.execute(0, context)?;
        // The read's counts are the scan's, for EXPLAIN ANALYZE, once it
        // is done.
        let counters = self.counters;
        let done = futures::stream::once(async move {
            for (name, counter) in [
                ("requests", &counters.requests),
                ("entities_scanned", &counters.scanned),
                ("entities_returned", &counters.returned),
                ("partitions", &counters.partitions),
                ("retries", &counters.retries),
                ("throttled", &counters.throttled),
                ("retry_wait_ms", &counters.retry_wait_ms),
            ] {
                counter.add(super::metrics::sum(plan.as_ref(), name));
            }
            counters.bill.add(super::metrics::bill(plan.as_ref()));
        })
        .filter_map(|()| futures::future::ready(None));
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            self.schema,
            rows.chain(done),
        )))
    }
}

impl PartitionScanExec {
    /// The stream of the planned path's rows.
    fn read(&self) -> Result<SendableRecordBatchStream> {
        let counters = self.counters.clone();
        // Every request of this run, billed to the scan.
        let store = counters.bill.billed(self.store.clone());
        let mut query = Query::all();
        if !self.rows.reads_every_property(&self.projection) {
            query = query.select(self.rows.properties(&self.projection));
        }
        query.filter = self.path.filter.clone();
        let lookup = self.lookup.then(|| {
            let mut base = Query::all().select(self.layout.properties(&self.projection));
            base.filter = self.path.filter.clone();
            // The index rows' keys are all the lookup reads of them.
            query = Query::all().select(Vec::<String>::new());
            Arc::new(Lookup {
                decode: Arc::new(DecodePlan::new(
                    self.layout.clone(),
                    &self.projection,
                    &self.schema,
                )),
                layout: self.layout.clone(),
                position: self.path.index().map_or(0, |i| i.position),
                query: base,
            })
        });
        if let Some(limit) = self.limit {
            query.top = Some(limit.clamp(1, crate::storage::query::MAX_PAGE) as u32);
        }
        // Named only where a request could be kept (a point read is not).
        let keeps = self.store.derived().is_some()
            && lookup.is_none()
            && query.filter.is_none()
            && query.top.is_none()
            && self.path.requests.iter().any(|r| {
                matches!(
                    r,
                    KeyRequest::Scan {
                        at_most_one: false,
                        ..
                    }
                )
            });
        let shape = keeps.then(|| {
            format!(
                "{} projection={:?} select={:?}",
                self.rows.printed(),
                self.projection,
                query.select
            )
            .into()
        });
        let run = RequestRun {
            shape,
            limit: self.limit,
            utf16_text: self.utf16_text.clone(),
            decode: Arc::new(DecodePlan::new(
                self.rows.clone(),
                &self.projection,
                &self.schema,
            )),
            store: store.clone(),
            layout: self.rows.clone(),
            lookup,
            width: self.options.max_in_flight.max(1),
            query,
            counters: counters.clone(),
            permits: Arc::new(tokio::sync::Semaphore::new(
                self.options.max_in_flight.max(1),
            )),
        };
        let pages_ahead = self.options.pages_ahead.max(1);
        let width = self.options.max_in_flight.max(1);
        let requests = match batched(&self.path.requests, self.store.get_many_limit()) {
            Some(units) => futures::stream::iter(units.into_iter().map(Ok)).boxed(),
            None => expand(
                store,
                self.layout.table.clone(),
                self.path.requests.clone(),
                self.fanout.clone(),
                self.path.partition_bound.clone(),
                ListingCounters {
                    requests: counters.listing_requests.clone(),
                    retries: counters.retries.clone(),
                    lanes: counters.lanes.clone(),
                },
                self.lanes(),
            )
            .map(|r| r.map(Unit::One))
            .boxed(),
        };
        // Each request runs as a task, started at most `width` ahead of the
        // one being read; the permits bound the store requests in flight to
        // `max_in_flight`.
        let streams = requests.map(move |request| match request {
            Ok(request) => {
                let (tx, rx) = mpsc::channel(pages_ahead);
                let task = tokio::spawn(run.clone().run(request, tx));
                ReceiverStream {
                    rx,
                    task: Some(task),
                }
                .boxed()
            }
            Err(e) => futures::stream::once(async { Err(e) }).boxed(),
        });
        let streams = if self.ordered {
            streams
                .map(futures::future::ready)
                .buffered(width)
                .flatten()
                .boxed()
        } else {
            streams.flatten_unordered(width).boxed()
        };
        let streams = if self.utf16_text.is_empty() {
            streams
        } else {
            code_point_order(streams, &self.properties, &self.utf16_text)
        };
        let limited = Limited {
            inner: streams,
            remaining: self.limit,
            returned: counters.returned,
        };
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            self.schema.clone(),
            limited,
        )))
    }
}

/// `rows` (in the scan's key order, `properties`'s ordering) in code point
/// order, through `order::CodePointOrder`.
fn code_point_order(
    rows: std::pin::Pin<Box<dyn futures::Stream<Item = Result<RecordBatch>> + Send>>,
    properties: &PlanProperties,
    utf16_text: &Arc<[usize]>,
) -> std::pin::Pin<Box<dyn futures::Stream<Item = Result<RecordBatch>> + Send>> {
    let sort = properties
        .output_ordering()
        .map(|o| o.iter().cloned().collect())
        .unwrap_or_default();
    let order = super::order::KeyOrder {
        sort,
        utf16_text: utf16_text.to_vec(),
    };
    let reorder = super::order::CodePointOrder::new(&order);
    futures::stream::unfold(Some((rows, reorder)), |state| async move {
        let (mut rows, mut reorder) = state?;
        loop {
            match rows.next().await {
                Some(Ok(batch)) => match reorder.push(batch) {
                    Ok(Some(out)) => return Some((Ok(out), Some((rows, reorder)))),
                    Ok(None) => continue,
                    Err(e) => return Some((Err(e), None)),
                },
                Some(Err(e)) => return Some((Err(e), None)),
                None => {
                    return match reorder.finish() {
                        Ok(Some(out)) => Some((Ok(out), None)),
                        Ok(None) => None,
                        Err(e) => Some((Err(e), None)),
                    };
                }
            }
        }
    })
    .boxed()
}

/// One store request in flight, until dropped.
struct InFlight<'a>(&'a std::sync::atomic::AtomicUsize);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Ends the stream at the row limit without asking for another page.
struct Limited {
    inner: std::pin::Pin<Box<dyn futures::Stream<Item = Result<RecordBatch>> + Send>>,
    remaining: Option<usize>,
    returned: ExactCount,
}

impl futures::Stream for Limited {
    type Item = Result<RecordBatch>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        if self.remaining == Some(0) {
            return std::task::Poll::Ready(None);
        }
        let item = futures::ready!(self.inner.poll_next_unpin(cx));
        let item = match item {
            Some(Ok(batch)) => {
                let batch = match self.remaining {
                    Some(r) => {
                        let take = batch.num_rows().min(r);
                        self.remaining = Some(r - take);
                        batch.slice(0, take)
                    }
                    None => batch,
                };
                self.returned.add(batch.num_rows());
                Some(Ok(batch))
            }
            other => other,
        };
        std::task::Poll::Ready(item)
    }
}

/// A leaf plan given children: itself, where there are none.
pub(super) fn leaf<T: ExecutionPlan + 'static>(
    plan: Arc<T>,
    children: Vec<Arc<dyn ExecutionPlan>>,
) -> Result<Arc<dyn ExecutionPlan>> {
    if children.is_empty() {
        Ok(plan)
    } else {
        Err(DataFusionError::Internal(format!(
            "{} has no children",
            plan.name()
        )))
    }
}

/// A request's pages as a stream. Dropping it aborts the request's task; a
/// task that died (a panic) ends the stream with an error, never silently.
struct ReceiverStream {
    rx: mpsc::Receiver<Result<RecordBatch>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Drop for ReceiverStream {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

impl futures::Stream for ReceiverStream {
    type Item = Result<RecordBatch>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        use std::task::Poll;
        if let Some(item) = futures::ready!(self.rx.poll_recv(cx)) {
            return Poll::Ready(Some(item));
        }
        // The sender is gone: the task ended; see how.
        let Some(task) = self.task.as_mut() else {
            return Poll::Ready(None);
        };
        let joined = futures::ready!(std::pin::Pin::new(task).poll(cx));
        self.task = None;
        Poll::Ready(
            joined
                .err()
                .map(|e| Err(DataFusionError::External(Box::new(e)))),
        )
    }
}
