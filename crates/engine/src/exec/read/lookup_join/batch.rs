//! One execution of a lookup join: outer rows regrouped into batches, each
//! batch's distinct keys read from the inner table, then the batch joined
//! with the rows read. Keys are chosen in input order, so a join that keeps
//! inner rows reads each key once; the reads of the next batch run while
//! the current one is joined (`READS_AHEAD`).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::compute::concat_batches;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::ScalarValue;
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::TaskContext;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::metrics::ExecutionPlanMetricsSet;
use datafusion::physical_plan::{SendableRecordBatchStream, collect};
use futures::stream::{self, BoxStream};
use futures::{StreamExt, TryStreamExt};

use super::{JoinSpec, KeyReads};
use crate::exec::read::metrics::{BillCount, ExactCount, bill, sum as sum_metric};

/// Batches whose keys are read ahead of the one being joined.
const READS_AHEAD: usize = 2;

/// EXPLAIN ANALYZE's counters of a lookup join.
#[derive(Debug, Clone)]
struct Counters {
    batches: ExactCount,
    outer_rows: ExactCount,
    keys: ExactCount,
    requests: ExactCount,
    rows_read: ExactCount,
    /// The key reads' bills, summed.
    bill: BillCount,
}

/// What every batch of one execution shares.
pub(super) struct Run {
    outer_keys: Vec<Arc<dyn PhysicalExpr>>,
    outer_schema: SchemaRef,
    inner_schema: SchemaRef,
    reads: Arc<dyn KeyReads>,
    spec: JoinSpec,
    context: Arc<TaskContext>,
    /// The keys read so far, where each key is read once.
    seen: Option<Mutex<HashSet<Vec<ScalarValue>>>>,
    counters: Counters,
}

impl Run {
    pub(super) fn new(
        outer_keys: Vec<Arc<dyn PhysicalExpr>>,
        outer_schema: SchemaRef,
        inner_schema: SchemaRef,
        reads: Arc<dyn KeyReads>,
        spec: JoinSpec,
        context: Arc<TaskContext>,
        metrics: &ExecutionPlanMetricsSet,
    ) -> Self {
        let m = |name: &'static str| ExactCount::register(metrics, name);
        let seen = spec.keeps_inner().then(Mutex::default);
        Self {
            outer_keys,
            outer_schema,
            inner_schema,
            reads,
            spec,
            context,
            seen,
            counters: Counters {
                batches: m("batches"),
                outer_rows: m("outer_rows"),
                keys: m("keys"),
                requests: m("requests"),
                rows_read: m("rows_read"),
                bill: BillCount::register(metrics),
            },
        }
    }

    /// The joined rows of `outer`, read `size` outer rows at a time.
    pub(super) fn stream(
        self,
        outer: SendableRecordBatchStream,
        size: usize,
    ) -> BoxStream<'static, Result<RecordBatch>> {
        let run = Arc::new(self);
        let reading = run.clone();
        let joining = run.clone();
        rebatch(outer, run.outer_schema.clone(), size)
            .map(move |batch| {
                let run = reading.clone();
                // The keys are chosen here, in input order; their reads run
                // ahead.
                let keys = batch.and_then(|b| {
                    let keys = run.keys(&b)?;
                    Ok((b, keys))
                });
                async move {
                    let (batch, keys) = keys?;
                    let inner = run.read(keys).await?;
                    Ok::<_, DataFusionError>((batch, inner))
                }
            })
            .buffered(READS_AHEAD)
            .and_then(move |(batch, inner)| {
                let run = joining.clone();
                async move { run.join(batch, inner).await }
            })
            .map_ok(|batches| stream::iter(batches.into_iter().map(Ok)))
            .try_flatten()
            .boxed()
    }

    /// The distinct key tuples of `batch` with no NULL (a NULL equals
    /// nothing), in row order; less those read before where each key is
    /// read once.
    fn keys(&self, batch: &RecordBatch) -> Result<Vec<Vec<ScalarValue>>> {
        let rows = batch.num_rows();
        self.counters.batches.add(1);
        self.counters.outer_rows.add(rows);
        let arrays = self
            .outer_keys
            .iter()
            .map(|e| e.evaluate(batch)?.into_array(rows))
            .collect::<Result<Vec<_>>>()?;
        let mut here = HashSet::new();
        let mut keys = Vec::new();
        let mut seen = match &self.seen {
            Some(s) => Some(
                s.lock()
                    .map_err(|_| DataFusionError::Internal("a lookup join panicked".into()))?,
            ),
            None => None,
        };
        for row in 0..rows {
            if arrays.iter().any(|a| a.is_null(row)) {
                continue;
            }
            let key = arrays
                .iter()
                .map(|a| ScalarValue::try_from_array(a, row))
                .collect::<Result<Vec<_>>>()?;
            let new = match seen.as_mut() {
                Some(seen) => seen.insert(key.clone()),
                None => here.insert(key.clone()),
            };
            if new {
                keys.push(key);
            }
        }
        self.counters.keys.add(keys.len());
        Ok(keys)
    }

    /// The inner rows whose keys are `keys`, by the reads the planner gave.
    async fn read(&self, keys: Vec<Vec<ScalarValue>>) -> Result<Vec<RecordBatch>> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let plans = self.reads.reads(&keys)?;
        let results = futures::future::try_join_all(
            plans
                .iter()
                .map(|plan| collect(plan.clone(), self.context.clone())),
        )
        .await?;
        for plan in &plans {
            self.counters
                .requests
                .add(sum_metric(plan.as_ref(), "requests"));
            self.counters.bill.add(bill(plan.as_ref()));
        }
        let batches: Vec<RecordBatch> = results.into_iter().flatten().collect();
        self.counters
            .rows_read
            .add(batches.iter().map(RecordBatch::num_rows).sum());
        Ok(batches)
    }

    /// The hash join of one outer batch with the inner rows its keys read.
    async fn join(&self, outer: RecordBatch, inner: Vec<RecordBatch>) -> Result<Vec<RecordBatch>> {
        let outer =
            MemorySourceConfig::try_new_exec(&[vec![outer]], self.outer_schema.clone(), None)?;
        let inner = MemorySourceConfig::try_new_exec(&[inner], self.inner_schema.clone(), None)?;
        let join = self.spec.hash_join(outer, inner)?;
        collect(Arc::new(join), self.context.clone()).await
    }
}

/// `input` in batches of `size` rows (the last one shorter): big batches
/// sliced, small ones gathered, so a batch of keys is as big as allowed.
fn rebatch(
    input: SendableRecordBatchStream,
    schema: SchemaRef,
    size: usize,
) -> BoxStream<'static, Result<RecordBatch>> {
    let state = State {
        input,
        held: Vec::new(),
        rows: 0,
        done: false,
    };
    stream::unfold(state, move |mut s| {
        let schema = schema.clone();
        async move {
            loop {
                if s.rows >= size || (s.done && s.rows > 0) {
                    let all = if s.held.len() == 1 {
                        s.held.remove(0)
                    } else {
                        match concat_batches(&schema, &s.held) {
                            Ok(b) => b,
                            Err(e) => return Some((Err(e.into()), finished(s))),
                        }
                    };
                    let take = size.min(all.num_rows());
                    let head = all.slice(0, take);
                    let rest = all.slice(take, all.num_rows() - take);
                    s.rows = rest.num_rows();
                    s.held = if s.rows > 0 { vec![rest] } else { Vec::new() };
                    return Some((Ok(head), s));
                }
                if s.done {
                    return None;
                }
                match s.input.next().await {
                    Some(Ok(b)) => {
                        if b.num_rows() > 0 {
                            s.rows += b.num_rows();
                            s.held.push(b);
                        }
                    }
                    Some(Err(e)) => return Some((Err(e), finished(s))),
                    None => s.done = true,
                }
            }
        }
    })
    .boxed()
}

/// A state that ends the stream at its next poll (after an error).
fn finished(mut s: State) -> State {
    s.held.clear();
    s.rows = 0;
    s.done = true;
    s
}

/// Where `rebatch` is.
struct State {
    input: SendableRecordBatchStream,
    held: Vec<RecordBatch>,
    rows: usize,
    done: bool,
}
