//! `Reread`: a mapped table's scan planned again with more conditions, the
//! planner's side of `exec::read::rescan`. A lookup join adds `key IN (...)`
//! per batch; the pushdown then picks the path for all the conditions
//! together (points, key prefixes, an index), and whatever of the scan's
//! own conditions that path does not answer is applied above it, since
//! DataFusion dropped the conditions the first path answered exactly.

use std::sync::Arc;

use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Column, DFSchema};
use datafusion::error::Result;
use datafusion::execution::context::ExecutionProps;
use datafusion::logical_expr::Expr;
use datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext;
use datafusion::logical_expr::utils::conjunction;
use datafusion::physical_expr::create_physical_expr;
use datafusion::physical_expr::expressions::Column as ColumnExpr;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::projection::{ProjectionExec, ProjectionExpr};

use crate::exec::read::access::AccessPath;
use crate::exec::read::rescan::Rescan;
use crate::planner::StoreTable;
use crate::planner::pushdown::cost;

/// A scan of a store table, to plan again under more conditions.
#[derive(Debug)]
pub struct Reread {
    table: StoreTable,
    /// The scan's conditions, unqualified.
    filters: Vec<Expr>,
    /// The layout columns it produces.
    projection: Vec<usize>,
    use_indexes: bool,
}

impl Reread {
    /// The scan of `table` (reading the statement's store) under `filters`,
    /// producing `projection`.
    pub fn new(
        table: StoreTable,
        filters: &[Expr],
        projection: Vec<usize>,
        use_indexes: bool,
    ) -> Self {
        Self {
            table,
            filters: filters.iter().map(unqualified).collect(),
            projection,
            use_indexes,
        }
    }

    fn all(&self, extra: &[Expr]) -> Vec<Expr> {
        let mut all = self.filters.clone();
        all.extend(extra.iter().map(unqualified));
        all
    }
}

impl Rescan for Reread {
    fn with(&self, extra: &[Expr]) -> Result<Arc<dyn ExecutionPlan>> {
        let all = self.all(extra);
        let pushdown = self.table.plan(&all);
        // The scan's own conditions this path leaves open (the added ones
        // need no check: the join compares the keys itself).
        let open: Vec<Expr> = self
            .filters
            .iter()
            .zip(&pushdown.exact)
            .filter(|(_, exact)| !**exact)
            .map(|(f, _)| f.clone())
            .collect();
        let store = self.table.store_in(None);
        above(&self.projection, open, self.table.layout(), |columns| {
            self.table.build(
                store,
                pushdown,
                Some(columns),
                None,
                self.use_indexes,
                None,
                None,
            )
        })
    }

    fn keys_per_request(&self) -> usize {
        self.table.store_in(None).get_many_limit().max(1)
    }

    fn rows_per_key(&self, path: &AccessPath, columns: &[String]) -> Option<f64> {
        let def = self.table.layout().def.as_deref()?;
        cost::rows_per_key(def, path, columns, &self.table.cost_statistics())
    }

    fn path(&self, extra: &[Expr]) -> AccessPath {
        let pushdown = self.table.plan(&self.all(extra));
        if self.use_indexes {
            pushdown.path
        } else {
            pushdown.base().clone()
        }
    }
}

/// `e` with its columns unqualified: the scan's schema names columns
/// without the table's name or alias.
fn unqualified(e: &Expr) -> Expr {
    e.clone()
        .transform(|e| match e {
            Expr::Column(c) if c.relation.is_some() => Ok(Transformed::yes(Expr::Column(
                Column::new_unqualified(c.name),
            ))),
            other => Ok(Transformed::no(other)),
        })
        .map_or_else(|_| e.clone(), |t| t.data)
}

/// The scan `build` makes of `projection`'s columns with `open` applied
/// above it: the scan reads the columns `open` needs too, and a projection
/// takes the rows back to `projection`'s.
pub(crate) fn above(
    projection: &[usize],
    open: Vec<Expr>,
    layout: &crate::exec::Layout,
    build: impl FnOnce(&Vec<usize>) -> Result<Arc<dyn ExecutionPlan>>,
) -> Result<Arc<dyn ExecutionPlan>> {
    let mut columns = projection.to_vec();
    for f in &open {
        for c in f.column_refs() {
            let i = layout.schema.index_of(&c.name)?;
            if !columns.contains(&i) {
                columns.push(i);
            }
        }
    }
    let scan = build(&columns)?;
    let Some(predicate) = conjunction(open) else {
        return Ok(scan);
    };
    let schema = DFSchema::try_from(scan.schema().as_ref().clone())?;
    let predicate = create_physical_expr(
        &predicate,
        &schema,
        &ExecutionProps::new(),
        &PhysicalPlanningContext::default(),
    )?;
    let filtered: Arc<dyn ExecutionPlan> = Arc::new(FilterExec::try_new(predicate, scan)?);
    if columns.len() == projection.len() {
        return Ok(filtered);
    }
    // Back to the scan's columns.
    let fields = filtered.schema();
    let exprs = (0..projection.len()).map(|i| {
        let name = fields.field(i).name().clone();
        ProjectionExpr {
            expr: Arc::new(ColumnExpr::new(&name, i)),
            alias: name,
        }
    });
    Ok(Arc::new(ProjectionExec::try_new(exprs, filtered)?))
}
