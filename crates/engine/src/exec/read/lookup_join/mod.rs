//! `LookupJoinExec`: an equi-join that reads its inner table by key.
//!
//! A hash join reads both inputs whole. When one input is a mapped table
//! whose key the join columns fix and the other is small, that is a scan of
//! a million rows (a thousand pages of requests on Azure) to answer a
//! hundred: the inner rows wanted are named by the outer rows' keys.
//! CockroachDB's lookup join and YugabyteDB's batched nested loop read
//! them so, a batch of outer keys at a time; this is that operator.
//!
//! Per batch of at most `batch` outer rows: the distinct non-NULL key
//! tuples are read from the inner table by key ([`KeyReads`]: point reads,
//! batched per partition where the store allows, or key-prefix ranges),
//! then the batch and the rows read are joined by DataFusion's own hash
//! join, built from the join this operator replaces with its join type,
//! condition, filter and projection. So every join type answers exactly as
//! the hash join would: an outer row's matches are all among the rows its
//! keys read. A join that keeps the inner side's rows (a semi join whose
//! output is the inner table's) reads each key once over the whole input,
//! so no inner row comes out twice. The next batch's keys are read while
//! the current batch is joined.

mod batch;

use std::fmt;
use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{JoinType, NullEquality, ScalarValue};
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::TaskContext;
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::joins::utils::JoinFilter;
use datafusion::physical_plan::joins::{HashJoinExec, HashJoinExecBuilder, PartitionMode};
use datafusion::physical_plan::metrics::{ExecutionPlanMetricsSet, MetricsSet};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, Distribution, ExecutionPlan, Partitioning, PlanProperties,
    SendableRecordBatchStream,
};

/// What a lookup join asks of its inner side.
pub trait KeyReads: fmt::Debug + Send + Sync {
    /// The plans that read the inner rows whose key columns hold one of
    /// `keys` (tuples in key-column order, none NULL), each with the inner
    /// side's schema; together they read every such row once.
    fn reads(&self, keys: &[Vec<ScalarValue>]) -> Result<Vec<Arc<dyn ExecutionPlan>>>;

    /// For EXPLAIN: the table, its key columns and the path a read takes.
    fn describe(&self) -> String;
}

/// Which input of the replaced hash join the outer rows are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OuterSide {
    /// The hash join's left (build) input.
    Left,
    /// Its right (probe) input.
    Right,
}

/// The join a lookup join answers, as the hash join it replaces held it:
/// the inner side's input there is where the rows read by key go.
#[derive(Debug, Clone)]
pub struct JoinSpec {
    /// The join's equality pairs, (left, right) as in the hash join.
    pub on: Vec<(Arc<dyn PhysicalExpr>, Arc<dyn PhysicalExpr>)>,
    /// The filter beyond the equalities.
    pub filter: Option<JoinFilter>,
    /// The join type, of the hash join's left and right.
    pub join_type: JoinType,
    /// The hash join's output projection.
    pub projection: Option<Arc<[usize]>>,
    /// Which input is the outer side.
    pub outer: OuterSide,
}

impl JoinSpec {
    /// Whether the join's output is the inner side's rows, each once,
    /// whatever the outer rows (a semi join on the inner side): each key is
    /// then read once over the whole input.
    pub fn keeps_inner(&self) -> bool {
        matches!(
            (self.outer, self.join_type),
            (OuterSide::Left, JoinType::RightSemi) | (OuterSide::Right, JoinType::LeftSemi)
        )
    }

    /// Whether a lookup join can answer this join type from the outer side:
    /// every output row is decided by one outer row and the inner rows its
    /// keys read. Joins that keep unmatched inner rows (right, full, an
    /// anti join of the inner side) need the whole inner table.
    pub fn answerable(&self) -> bool {
        match (self.outer, self.join_type) {
            (OuterSide::Left, t) => {
                matches!(
                    t,
                    JoinType::Inner | JoinType::Left | JoinType::LeftSemi | JoinType::LeftAnti
                ) || (t == JoinType::RightSemi && self.filter.is_none())
            }
            (OuterSide::Right, t) => {
                matches!(
                    t,
                    JoinType::Inner | JoinType::Right | JoinType::RightSemi | JoinType::RightAnti
                ) || (t == JoinType::LeftSemi && self.filter.is_none())
            }
        }
    }

    /// Whether the outer rows' order is kept: the hash join keeps its probe
    /// (right) side's order for these join types.
    pub fn keeps_outer_order(&self) -> bool {
        self.outer == OuterSide::Right
            && matches!(
                self.join_type,
                JoinType::Inner | JoinType::Right | JoinType::RightSemi | JoinType::RightAnti
            )
    }

    /// The hash join of one batch: `outer` and `inner` in their places.
    fn hash_join(
        &self,
        outer: Arc<dyn ExecutionPlan>,
        inner: Arc<dyn ExecutionPlan>,
    ) -> Result<HashJoinExec> {
        let (left, right) = match self.outer {
            OuterSide::Left => (outer, inner),
            OuterSide::Right => (inner, outer),
        };
        HashJoinExecBuilder::new(left, right, self.on.clone(), self.join_type)
            .with_filter(self.filter.clone())
            .with_projection_ref(self.projection.clone())
            .with_partition_mode(PartitionMode::CollectLeft)
            .with_null_equality(NullEquality::NullEqualsNothing)
            .build()
    }
}

/// A join whose inner rows are read by the outer rows' keys.
#[derive(Debug)]
pub struct LookupJoinExec {
    outer: Arc<dyn ExecutionPlan>,
    /// The outer side's key expressions, in key-column order.
    outer_keys: Vec<Arc<dyn PhysicalExpr>>,
    /// The inner side as planned before the join became a lookup: its
    /// schema is what the reads give, and the estimates read it.
    inner: Arc<dyn ExecutionPlan>,
    reads: Arc<dyn KeyReads>,
    spec: JoinSpec,
    /// Outer rows per batch.
    batch: usize,
    /// Shown by EXPLAIN: the planner's reason and estimates.
    note: String,
    properties: Arc<PlanProperties>,
    metrics: ExecutionPlanMetricsSet,
}

impl LookupJoinExec {
    /// The join `spec` with `outer` as its outer input, whose
    /// `outer_keys` are looked up in the inner side (`inner`, as planned)
    /// through `reads`, `batch` outer rows at a time.
    pub fn try_new(
        outer: Arc<dyn ExecutionPlan>,
        outer_keys: Vec<Arc<dyn PhysicalExpr>>,
        inner: Arc<dyn ExecutionPlan>,
        reads: Arc<dyn KeyReads>,
        spec: JoinSpec,
        batch: usize,
    ) -> Result<Self> {
        if !spec.answerable() {
            return Err(DataFusionError::Internal(format!(
                "a lookup join cannot answer a {} join from its {:?} side",
                spec.join_type, spec.outer
            )));
        }
        // The join of one batch, planned once here for its schema and the
        // orderings it keeps.
        let template = spec.hash_join(outer.clone(), inner.clone())?;
        let schema = template.schema();
        let eq = if spec.keeps_outer_order() {
            template.properties().eq_properties.clone()
        } else {
            EquivalenceProperties::new(schema.clone())
        };
        let properties = PlanProperties::new(
            eq,
            Partitioning::UnknownPartitioning(1),
            EmissionType::Incremental,
            Boundedness::Bounded,
        );
        Ok(Self {
            outer,
            outer_keys,
            inner,
            reads,
            spec,
            batch: batch.max(1),
            note: String::new(),
            properties: Arc::new(properties),
            metrics: ExecutionPlanMetricsSet::new(),
        })
    }

    /// With the planner's note for EXPLAIN (why, and at what estimate).
    pub fn with_note(mut self, note: String) -> Self {
        self.note = note;
        self
    }

    fn schema_ref(&self) -> SchemaRef {
        self.properties.eq_properties.schema().clone()
    }
}

impl DisplayAs for LookupJoinExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let keys: Vec<String> = self.outer_keys.iter().map(|k| k.to_string()).collect();
        write!(
            f,
            "LookupJoinExec: join_type={}, outer={}, keys=[{}], lookup={}, batch={}",
            self.spec.join_type,
            match self.spec.outer {
                OuterSide::Left => "left",
                OuterSide::Right => "right",
            },
            keys.join(", "),
            self.reads.describe(),
            self.batch
        )?;
        if let Some(filter) = &self.spec.filter {
            write!(f, ", filter={}", filter.expression())?;
        }
        if !self.note.is_empty() {
            write!(f, ", {}", self.note)?;
        }
        Ok(())
    }
}

impl ExecutionPlan for LookupJoinExec {
    fn name(&self) -> &str {
        "LookupJoinExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.outer]
    }

    fn required_input_distribution(&self) -> Vec<Distribution> {
        vec![Distribution::SinglePartition]
    }

    // The order it keeps is stated in `properties`, not here: DataFusion's
    // sort pushdown hands an operator that maintains its input's order the
    // parent's requirement unchanged, column indexes and all, which is only
    // right where the output's columns are the input's (a join's are not:
    // `ORDER BY b.k1` became a sort of the outer input's third column).
    fn maintains_input_order(&self) -> Vec<bool> {
        vec![false]
    }

    fn apply_expressions(
        &self,
        f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        for e in &self.outer_keys {
            if f(e)? == TreeNodeRecursion::Stop {
                return Ok(TreeNodeRecursion::Stop);
            }
        }
        Ok(TreeNodeRecursion::Continue)
    }

    fn with_new_children(
        self: Arc<Self>,
        mut children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        match (children.pop(), children.is_empty()) {
            (Some(outer), true) => Ok(Arc::new(
                LookupJoinExec::try_new(
                    outer,
                    self.outer_keys.clone(),
                    self.inner.clone(),
                    self.reads.clone(),
                    self.spec.clone(),
                    self.batch,
                )?
                .with_note(self.note.clone()),
            )),
            _ => Err(DataFusionError::Internal(
                "LookupJoinExec has one child".into(),
            )),
        }
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        if partition != 0 {
            return Err(DataFusionError::Internal(format!(
                "LookupJoinExec has one partition, not {partition}"
            )));
        }
        let outer = self.outer.execute(0, context.clone())?;
        let run = batch::Run::new(
            self.outer_keys.clone(),
            self.outer.schema(),
            self.inner.schema(),
            self.reads.clone(),
            self.spec.clone(),
            context,
            &self.metrics,
        );
        let schema = self.schema_ref();
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            schema,
            run.stream(outer, self.batch),
        )))
    }
}
