//! Whether a join reads its inner side by key, from the estimates.
//!
//! The rule (`tablesql.enable_lookup_join = on`): the outer side must have
//! an estimate of its rows (a path of points counts its keys; a LIMIT
//! bounds them; `ANALYZE` estimates the rest) of at most
//! [`MAX_OUTER_ROWS`]; without one, the join stays a hash join, as before
//! lookup joins existed. An estimate through another join below does not
//! count (a LIMIT above that join does): DataFusion takes a join column
//! without statistics to be unique, so a join to the many side of a
//! foreign key is estimated at the one side's rows (TPC-H Q7: 1,000
//! estimated, 182,762 read, by 49,813 key reads where the hash join takes
//! 338 requests).
//!
//! Then the two are compared in request-equivalents: a request costs
//! [`REQUEST_ROWS`] rows read. A lookup reads per outer row (a key read
//! per row at worst; fewer where keys repeat) the rows one key holds: one
//! for a whole key, and for a key prefix the path's rows over the distinct
//! prefixes `ANALYZE` counted (one where it did not); it makes a request
//! per row's key (a page per 1,000 of its rows), or per as many keys as
//! the store reads in one request where the keys are whole (points), and
//! through a global index a point read per row. A hash join costs the
//! inner scan's estimated requests and rows, which only `ANALYZE` gives:
//! an inner table never analyzed is taken to be bigger than the outer
//! side, since a hash join reads it whole whatever its size.

use std::sync::Arc;

use datafusion::error::Result;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::statistics::{StatisticsArgs, StatisticsContext};

use super::inner::InnerScan;
use crate::exec::read::access::{Access, AccessPath};
use crate::planner::settings::LookupJoin;

/// Most estimated outer rows a lookup join is chosen for.
pub const MAX_OUTER_ROWS: usize = 10_000;

/// What one store request weighs against one row read.
pub const REQUEST_ROWS: u64 = 100;

/// Entities in one page of a query's answer.
const PAGE_ROWS: f64 = 1_000.0;

/// The choice for one orientation of a join.
#[derive(Debug, Clone, PartialEq)]
pub struct Choice {
    /// The outer side's estimated rows, if known (the smaller side is the
    /// better outer side).
    pub outer_rows: Option<usize>,
    /// Why, for EXPLAIN.
    pub note: String,
}

/// Whether the join should read `inner` by the keys of `outer`'s rows.
pub fn choose(
    setting: LookupJoin,
    outer: &Arc<dyn ExecutionPlan>,
    inner: &InnerScan,
    probe: &AccessPath,
) -> Result<Option<Choice>> {
    let outer_rows = StatisticsContext::new()
        .compute(outer.as_ref(), &StatisticsArgs::new())?
        .num_rows
        .get_value()
        .copied();
    let trusted = if grounded(outer) {
        outer_rows
    } else {
        limit_above_joins(outer)
    };
    match setting {
        LookupJoin::Off => Ok(None),
        LookupJoin::Always => Ok(Some(Choice {
            outer_rows,
            note: "chosen=always".into(),
        })),
        LookupJoin::On => {
            let Some(rows) = trusted.filter(|n| *n <= MAX_OUTER_ROWS) else {
                return Ok(None);
            };
            let (requests, read) = match probe.access {
                Access::Points => (
                    rows.div_ceil(inner.rescan.keys_per_request()) as u64,
                    rows as u64,
                ),
                _ => {
                    let per_key = inner
                        .rescan
                        .rows_per_key(probe, &inner.columns)
                        .unwrap_or(1.0)
                        .max(1.0);
                    let pages = (per_key / PAGE_ROWS).ceil() as u64;
                    let read = (rows as f64 * per_key).ceil() as u64;
                    // A global index's entities each name a base row,
                    // read by point as the hash join's path would.
                    let lookups = if probe.index().is_some_and(|i| i.global) {
                        read
                    } else {
                        0
                    };
                    (
                        (rows as u64).saturating_mul(pages).saturating_add(lookups),
                        read,
                    )
                }
            };
            let lookup = requests.saturating_mul(REQUEST_ROWS).saturating_add(read);
            let (hash, shown) = match inner.path.estimate {
                Some(e) => (
                    e.requests
                        .saturating_mul(REQUEST_ROWS)
                        .saturating_add(e.rows),
                    format!("hash~{}req/{}rows", e.requests, e.rows),
                ),
                None => (u64::MAX, "hash=unanalyzed".to_owned()),
            };
            Ok((lookup < hash).then(|| Choice {
                outer_rows,
                note: format!("estimate: outer~{rows}rows lookup~{requests}req/{read}rows {shown}"),
            }))
        }
    }
}

/// Whether `plan`'s row estimate comes from the store's counts (and
/// DataFusion's filters over them): no join below.
fn grounded(plan: &Arc<dyn ExecutionPlan>) -> bool {
    !plan.name().ends_with("JoinExec") && plan.children().into_iter().all(grounded)
}

/// The LIMIT that bounds `plan`'s rows above any join in it, going down
/// its single-input operators (not the estimate under the LIMIT, which
/// may be a join's undercount).
fn limit_above_joins(plan: &Arc<dyn ExecutionPlan>) -> Option<usize> {
    if let Some(n) = plan.fetch() {
        return Some(n);
    }
    match plan.children().as_slice() {
        [child] if !plan.name().ends_with("JoinExec") => limit_above_joins(child),
        _ => None,
    }
}
