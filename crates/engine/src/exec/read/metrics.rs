//! The scan's EXPLAIN ANALYZE counters. DataFusion's own `Count` prints
//! rounded figures (`1.20 K`); these print the exact number, since
//! `entities_scanned=1` is the contract a point query is checked against.
//! A node that asks the store for anything keeps its bill among them
//! (`transactions`, [`BillCount`]); a statement's is the sum of its nodes'
//! ([`bill`]).

use std::any::Any;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::storage::TableStore;
use crate::storage::bill::{Bill, Transactions};
use crate::storage::metered::MeteredStore;
use datafusion::physical_plan::metrics::{
    CustomMetricValue, ExecutionPlanMetricsSet, MetricBuilder, MetricValue,
};

/// A counter shown exactly.
#[derive(Debug, Default, Clone)]
pub struct ExactCount(Arc<AtomicUsize>);

impl ExactCount {
    /// A counter registered under `name` in `metrics`.
    pub fn register(metrics: &ExecutionPlanMetricsSet, name: &'static str) -> Self {
        let count = Self::default();
        MetricBuilder::new(metrics).build(MetricValue::Custom {
            name: name.into(),
            value: Arc::new(count.clone()),
        });
        count
    }

    /// Adds `n`.
    pub fn add(&self, n: usize) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }

    /// Raises the value to `n` if it is lower (a peak).
    pub fn raise_to(&self, n: usize) {
        self.0.fetch_max(n, Ordering::Relaxed);
    }

    /// The count.
    pub fn value(&self) -> usize {
        self.0.load(Ordering::Relaxed)
    }
}

impl fmt::Display for ExactCount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.value())
    }
}

impl CustomMetricValue for ExactCount {
    fn new_empty(&self) -> Arc<dyn CustomMetricValue> {
        Arc::new(Self::default())
    }

    fn aggregate(&self, other: Arc<dyn CustomMetricValue + 'static>) {
        self.add(other.as_usize());
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn as_usize(&self) -> usize {
        self.value()
    }

    fn is_eq(&self, other: &Arc<dyn CustomMetricValue>) -> bool {
        self.value() == other.as_usize()
    }
}

/// The value of the exact counter `name` in `plan`'s own metrics (not its
/// inputs'), if it keeps one.
pub fn count(plan: &dyn datafusion::physical_plan::ExecutionPlan, name: &str) -> Option<u64> {
    let metrics = plan.metrics()?;
    metrics.iter().find_map(|m| match m.value() {
        MetricValue::Custom { name: n, value } if n.as_ref() == name => {
            Some(value.as_usize() as u64)
        }
        _ => None,
    })
}

/// The sum of metric `name` over `plan` and its inputs.
pub fn sum(plan: &dyn datafusion::physical_plan::ExecutionPlan, name: &str) -> usize {
    let own = plan.metrics().map_or(0, |m| {
        m.iter()
            .filter(|m| m.value().name() == name)
            .map(|m| m.value().as_usize())
            .sum()
    });
    own + plan
        .children()
        .iter()
        .map(|c| sum(c.as_ref(), name))
        .sum::<usize>()
}

/// A node's billable transactions, by kind (`storage::bill`), shown as
/// `transactions=7 (query_pages=2 point_reads=5)`.
#[derive(Debug, Default, Clone)]
pub struct BillCount(Arc<Bill>);

/// The metric's name.
pub const TRANSACTIONS: &str = "transactions";

impl BillCount {
    /// A bill registered in `metrics`.
    pub fn register(metrics: &ExecutionPlanMetricsSet) -> Self {
        let count = Self::default();
        MetricBuilder::new(metrics).build(MetricValue::Custom {
            name: TRANSACTIONS.into(),
            value: Arc::new(count.clone()),
        });
        count
    }

    /// `store`, its requests billed here.
    pub fn billed(&self, store: Arc<dyn TableStore>) -> Arc<dyn TableStore> {
        MeteredStore::over(store, self.0.clone())
    }

    /// Adds `t` (what a plan the node ran for itself was billed).
    pub fn add(&self, t: Transactions) {
        self.0.add_all(t);
    }

    /// The counts.
    pub fn get(&self) -> Transactions {
        self.0.get()
    }
}

impl fmt::Display for BillCount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.get().fmt(f)
    }
}

impl CustomMetricValue for BillCount {
    fn new_empty(&self) -> Arc<dyn CustomMetricValue> {
        Arc::new(Self::default())
    }

    fn aggregate(&self, other: Arc<dyn CustomMetricValue + 'static>) {
        if let Some(o) = other.as_any().downcast_ref::<BillCount>() {
            self.add(o.get());
        }
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn as_usize(&self) -> usize {
        self.get().total() as usize
    }

    fn is_eq(&self, other: &Arc<dyn CustomMetricValue>) -> bool {
        other
            .as_any()
            .downcast_ref::<BillCount>()
            .is_some_and(|o| o.get() == self.get())
    }
}

/// The transactions `plan`'s own node was billed (a node run twice keeps
/// a bill a run: all of them); `None` for a node that keeps no bill.
pub fn own_bill(plan: &dyn datafusion::physical_plan::ExecutionPlan) -> Option<Transactions> {
    plan.metrics()?
        .iter()
        .filter_map(|m| match m.value() {
            MetricValue::Custom { value, .. } => value
                .as_any()
                .downcast_ref::<BillCount>()
                .map(BillCount::get),
            _ => None,
        })
        .reduce(|mut a, b| {
            a += b;
            a
        })
}

/// The transactions `plan` and its inputs were billed.
pub fn bill(plan: &dyn datafusion::physical_plan::ExecutionPlan) -> Transactions {
    let mut out = own_bill(plan).unwrap_or_default();
    for c in plan.children() {
        out += bill(c.as_ref());
    }
    out
}
