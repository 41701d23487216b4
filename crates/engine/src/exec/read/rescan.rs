//! A scan's table read again under more conditions. A lookup join reads
//! its inner table once per batch of outer keys: the same table, columns
//! and conditions as the scan the planner first made, plus `key IN (...)`.
//! What that read costs and how it is planned is the pushdown's business,
//! so the scan carries this handle from the planner (which implements it)
//! instead of exec re-deriving access paths from the scan's.

use std::fmt::Debug;
use std::sync::Arc;

use datafusion::error::Result;
use datafusion::logical_expr::Expr;
use datafusion::physical_plan::ExecutionPlan;

use super::access::AccessPath;

/// The scan it came from, planned again with more conditions.
pub trait Rescan: Debug + Send + Sync {
    /// The scan of the same table and columns under its conditions and
    /// `extra` (conditions on its columns, by unqualified name): a plan with
    /// the scan's schema, which applies every condition of the original scan
    /// that the new path does not answer.
    fn with(&self, extra: &[Expr]) -> Result<Arc<dyn ExecutionPlan>>;

    /// The path that plan takes.
    fn path(&self, extra: &[Expr]) -> AccessPath;

    /// Point reads of one partition the store answers in one request
    /// (`TableStore::get_many_limit`).
    fn keys_per_request(&self) -> usize;

    /// The rows one value of `columns` holds on `path` (a path this handle
    /// gave), by the statistics; `None` where there are none.
    fn rows_per_key(&self, path: &AccessPath, columns: &[String]) -> Option<f64>;
}
