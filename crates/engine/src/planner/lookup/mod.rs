//! Lookup joins: the physical optimizer rule that turns a hash join into a
//! `LookupJoinExec` where one input is a store table's scan whose key the
//! join columns fix (its primary key, or an index's leading fields, whole
//! or in part) and the other input is small.
//!
//! It runs right after DataFusion's join selection, which has chosen the
//! hash join's build side from the inputs' statistics, and before the
//! distribution and sorting are enforced, which then see the lookup join's
//! one input. Each orientation is tried (either input as the outer side,
//! where the join type allows: `JoinSpec::answerable`); the inner side must
//! be a chain of projections and filters over a scan (`inner`); a probe of
//! the pushdown with the key columns fixed must give a keyed path (points,
//! key ranges in fixed partitions, an index's points or ranges), never a
//! scan of every partition; and the estimates must favour it (`choose`),
//! unless `tablesql.enable_lookup_join = always`. Where both orientations
//! qualify, the smaller outer side wins.

mod choose;
mod inner;
mod reads;
mod reread;

pub use reread::Reread;
pub(crate) use reread::above;

use std::sync::Arc;

use datafusion::arrow::datatypes::DataType;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Column, NullEquality, ScalarValue};
use datafusion::error::Result;
use datafusion::logical_expr::{Expr, lit};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::joins::HashJoinExec;

use super::settings::{LookupJoin, TablesqlConfig};
use crate::exec::read::access::{Access, AccessPath};
use crate::exec::read::lookup_join::{JoinSpec, LookupJoinExec, OuterSide};

/// Turns hash joins into lookup joins where they qualify.
#[derive(Debug, Default)]
pub struct LookupJoins;

impl PhysicalOptimizerRule for LookupJoins {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let settings = config
            .extensions
            .get::<TablesqlConfig>()
            .cloned()
            .unwrap_or_default();
        if settings.lookup_join == LookupJoin::Off {
            return Ok(plan);
        }
        plan.transform_up(|node| {
            let Some(join) = node.downcast_ref::<HashJoinExec>() else {
                return Ok(Transformed::no(node));
            };
            Ok(match lookup(join, &settings)? {
                Some(lookup) => Transformed::yes(lookup),
                None => Transformed::no(node),
            })
        })
        .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "LookupJoins"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// The lookup join that answers `join`, if one qualifies.
fn lookup(
    join: &HashJoinExec,
    settings: &TablesqlConfig,
) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    // NULL-aware anti joins (NOT IN) depend on whether the inner side holds
    // a NULL anywhere; a join where NULL equals NULL would read NULL keys.
    if join.null_aware || join.null_equality != NullEquality::NullEqualsNothing {
        return Ok(None);
    }
    let mut best: Option<(Option<usize>, LookupJoinExec)> = None;
    for outer in [OuterSide::Right, OuterSide::Left] {
        let spec = JoinSpec {
            on: join.on.clone(),
            filter: join.filter.clone(),
            join_type: join.join_type,
            projection: join.projection.clone(),
            outer,
        };
        if !spec.answerable() {
            continue;
        }
        let (outer_plan, inner_plan) = match outer {
            OuterSide::Right => (join.right.clone(), join.left.clone()),
            OuterSide::Left => (join.left.clone(), join.right.clone()),
        };
        let (outer_keys, inner_keys): (Vec<_>, Vec<_>) = join
            .on
            .iter()
            .map(|(l, r)| match outer {
                OuterSide::Right => (r.clone(), l.clone()),
                OuterSide::Left => (l.clone(), r.clone()),
            })
            .unzip();
        let Some(scan) = inner::trace(&inner_plan, &inner_keys) else {
            continue;
        };
        let Some(probe) = probe(&scan, &inner_plan, &inner_keys) else {
            continue;
        };
        // The keys must narrow the read: a batch that reads what the scan
        // reads (a column outside every key, under a condition fixing the
        // partition) is the hash join's scan once per batch.
        if !keyed(&probe) || probe.requests == scan.path.requests {
            continue;
        }
        let Some(choice) = choose::choose(settings.lookup_join, &outer_plan, &scan, &probe)? else {
            continue;
        };
        let reads = reads::KeyedRead::new(scan, inner_plan.clone(), access_name(&probe));
        let exec = LookupJoinExec::try_new(
            outer_plan,
            outer_keys,
            inner_plan,
            Arc::new(reads),
            spec,
            settings.lookup_join_batch,
        )?
        .with_note(choice.note);
        let better = match &best {
            None => true,
            Some((rows, _)) => match (choice.outer_rows, rows) {
                (Some(a), Some(b)) => a < *b,
                (Some(_), None) => true,
                _ => false,
            },
        };
        if better {
            best = Some((choice.outer_rows, exec));
        }
    }
    Ok(best.map(|(_, exec)| Arc::new(exec) as Arc<dyn ExecutionPlan>))
}

/// The path a batch of keys would take: the key columns fixed to sample
/// values of their types.
fn probe(
    scan: &inner::InnerScan,
    inner: &Arc<dyn ExecutionPlan>,
    keys: &[Arc<dyn datafusion::physical_expr::PhysicalExpr>],
) -> Option<AccessPath> {
    let schema = inner.schema();
    let conditions = scan
        .columns
        .iter()
        .zip(keys)
        .map(|(name, key)| {
            let value = sample(&key.data_type(&schema).ok()?)?;
            Some(Expr::Column(Column::new_unqualified(name)).eq(lit(value)))
        })
        .collect::<Option<Vec<_>>>()?;
    Some(scan.rescan.path(&conditions))
}

/// A value of type `t` that a key field can hold.
fn sample(t: &DataType) -> Option<ScalarValue> {
    match t {
        DataType::Utf8 => Some(ScalarValue::Utf8(Some("a".into()))),
        DataType::LargeUtf8 => Some(ScalarValue::LargeUtf8(Some("a".into()))),
        DataType::Utf8View => Some(ScalarValue::Utf8View(Some("a".into()))),
        DataType::Boolean => Some(ScalarValue::Boolean(Some(true))),
        t if t.is_numeric() => ScalarValue::new_one(t).ok(),
        t => ScalarValue::new_zero(t).ok(),
    }
}

/// Whether a path reads by key: not every partition, and not a range of
/// partitions.
fn keyed(path: &AccessPath) -> bool {
    !matches!(path.access, Access::FullScan | Access::PartitionRange)
        && !path.reads_every_partition()
}

/// EXPLAIN's name of the access a batch takes.
fn access_name(path: &AccessPath) -> String {
    match path.index() {
        Some(i) => format!("{}({})", path.access.name(), i.name),
        None => path.access.name().to_owned(),
    }
}
