//! The plan shape that fast paths take: a selection of columns over one
//! table's scan, with filters (`Projection` of columns, `Filter`,
//! `TableScan`, each of the first two optional). The wire server's direct
//! path and prepared point reads (`point`) both start from it.

use std::sync::Arc;

use datafusion::catalog::TableProvider;
use datafusion::catalog::default_table_source::source_as_provider;
use datafusion::logical_expr::utils::split_conjunction;
use datafusion::logical_expr::{Expr, LogicalPlan, TableScan};

use super::StoreTable;

/// A plan of the simple shape, taken apart.
pub(crate) struct SimpleScan<'a> {
    pub scan: &'a TableScan,
    /// The scanned table, when it is one of the store's.
    pub table: Arc<StoreTable>,
    /// The scan's filters and the Filter's conjuncts, each once (an
    /// inexact filter is both).
    pub filters: Vec<&'a Expr>,
    /// Output columns, as positions in the scan's output.
    pub columns: Vec<usize>,
}

/// `plan` taken apart, if it has the simple shape over a store table.
pub(crate) fn simple_scan(plan: &LogicalPlan) -> Option<SimpleScan<'_>> {
    let (columns, below) = match plan {
        LogicalPlan::Projection(p) => {
            let columns = p
                .expr
                .iter()
                .map(|e| match e {
                    Expr::Column(c) => Some(c),
                    _ => None,
                })
                .collect::<Option<Vec<_>>>()?;
            (Some(columns), p.input.as_ref())
        }
        other => (None, other),
    };
    let (predicate, below) = match below {
        LogicalPlan::Filter(f) => (Some(&f.predicate), f.input.as_ref()),
        other => (None, other),
    };
    let LogicalPlan::TableScan(scan) = below else {
        return None;
    };
    let provider: Arc<dyn TableProvider> = source_as_provider(&scan.source).ok()?;
    let any: Arc<dyn std::any::Any + Send + Sync> = provider;
    let table = any.downcast::<StoreTable>().ok()?;
    let mut filters: Vec<&Expr> = scan.filters.iter().collect();
    for f in predicate.map(split_conjunction).unwrap_or_default() {
        if !filters.contains(&f) {
            filters.push(f);
        }
    }
    let columns = match columns {
        Some(cols) => cols
            .iter()
            .map(|c| scan.projected_schema.index_of_column(c).ok())
            .collect::<Option<Vec<_>>>()?,
        None => (0..scan.projected_schema.fields().len()).collect(),
    };
    Some(SimpleScan {
        scan,
        table,
        filters,
        columns,
    })
}
