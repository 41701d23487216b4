//! A statement's bill as EXPLAIN shows it. On Azure every request is a
//! billed transaction, so a user choosing between two queries or two
//! mappings needs to see what each costs. EXPLAIN and EXPLAIN ANALYZE end
//! with one row more, `bill`: the statement's transactions by kind
//! (`storage::bill::Transactions`), then each node that asks the store
//! anything with its own.
//!
//! EXPLAIN estimates them before the run from each read's access path
//! (`AccessPath::bill`): point reads exactly, other reads from `ANALYZE`'s
//! statistics, and where there are none the least they cost, marked `>=`.
//! Writes, a lookup join's reads and a correlated subquery's runs depend
//! on rows not yet read: they are named, not estimated. EXPLAIN ANALYZE
//! shows what each node was billed (its `transactions` metric, counted by
//! the store it was given). In a transaction block that store is the
//! block's: a write is billed as it is asked, though the block sends it
//! at COMMIT, in batches of its own.

use datafusion::arrow::array::StringArray;
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::physical_plan::ExecutionPlan;

use super::ops::apply::SubqueryApplyExec;
use super::read::global::GlobalIndexExec;
use super::read::lookup_join::LookupJoinExec;
use super::read::metrics::own_bill;
use super::read::scan::PartitionScanExec;
use super::write::dml::DmlExec;
use crate::storage::bill::Transactions;

/// The EXPLAIN row's `plan_type`.
pub const PLAN_TYPE: &str = "bill";

/// One node's part of the bill.
struct Line {
    label: String,
    transactions: Transactions,
    /// The count or estimate, not only the least it can be.
    exact: bool,
    /// Why it is not estimated, if it is not.
    note: Option<&'static str>,
}

/// The bill EXPLAIN shows for `plan`, before it runs.
pub fn estimated(plan: &dyn ExecutionPlan) -> String {
    let mut lines = Vec::new();
    estimate_into(plan, &mut lines);
    shown("estimated", &lines)
}

/// The bill EXPLAIN ANALYZE shows for `plan`, which has run.
pub fn actual(plan: &dyn ExecutionPlan) -> String {
    let mut lines = Vec::new();
    actual_into(plan, &mut lines);
    shown("transactions", &lines)
}

/// The `bill` row of an EXPLAIN whose output is `schema` (`plan_type`,
/// `plan`); `None` for any other shape.
pub fn row(schema: &SchemaRef, text: String) -> Option<RecordBatch> {
    let utf8 = |i: usize| schema.fields().get(i).map(|f| f.data_type()) == Some(&DataType::Utf8);
    if schema.fields().len() != 2 || !utf8(0) || !utf8(1) {
        return None;
    }
    RecordBatch::try_new(
        schema.clone(),
        vec![
            std::sync::Arc::new(StringArray::from(vec![PLAN_TYPE])),
            std::sync::Arc::new(StringArray::from(vec![text])),
        ],
    )
    .ok()
}

/// The part of the bill EXPLAIN shows for `plan`'s own node, if it is
/// one that asks the store anything (its label, and the estimate of it).
fn estimated_part(plan: &dyn ExecutionPlan) -> Option<Line> {
    const NO_STATISTICS: &str = "no statistics (ANALYZE): a page a request at least";
    let read = |label: String, (transactions, exact): (Transactions, bool)| Line {
        label,
        transactions,
        exact,
        note: (!exact).then_some(NO_STATISTICS),
    };
    let unknown = |label: String, note: &'static str| Line {
        label,
        transactions: Transactions::default(),
        exact: false,
        note: Some(note),
    };
    if let Some(scan) = plan.downcast_ref::<PartitionScanExec>() {
        let label = format!("{} {}", scan.table(), scan.path().access.name());
        Some(read(label, scan.estimated_bill()))
    } else if let Some(g) = plan.downcast_ref::<GlobalIndexExec>() {
        let label = format!("{} {}", g.table(), g.path().access.name());
        Some(read(label, g.path().bill(1, true)))
    } else if let Some(write) = plan.downcast_ref::<DmlExec>() {
        let label = format!("{} {}", write.table(), write.op_name());
        Some(unknown(label, "a batch per 100 rows of a partition"))
    } else if plan.downcast_ref::<LookupJoinExec>().is_some() {
        let note = "a read per batch of outer rows' keys";
        Some(unknown("lookup join".into(), note))
    } else if plan.downcast_ref::<SubqueryApplyExec>().is_some() {
        let note = "a run per distinct outer value";
        Some(unknown("correlated subquery".into(), note))
    } else {
        None
    }
}

fn estimate_into(plan: &dyn ExecutionPlan, out: &mut Vec<Line>) {
    out.extend(estimated_part(plan));
    for child in plan.children() {
        estimate_into(child.as_ref(), out);
    }
}

fn actual_into(plan: &dyn ExecutionPlan, out: &mut Vec<Line>) {
    if let Some(transactions) = own_bill(plan) {
        let label = estimated_part(plan).map_or_else(|| plan.name().to_owned(), |l| l.label);
        out.push(Line {
            label,
            transactions,
            exact: true,
            note: None,
        });
    }
    for child in plan.children() {
        actual_into(child.as_ref(), out);
    }
}

/// `what=total`, then a line per node.
fn shown(what: &str, lines: &[Line]) -> String {
    let mut total = Transactions::default();
    for line in lines {
        total += line.transactions;
    }
    let at_least = |exact: bool| if exact { "=" } else { ">=" };
    let exact = lines.iter().all(|l| l.exact);
    let mut text = format!("{what}{}{total}", at_least(exact));
    for line in lines {
        text.push_str(&format!("\n  {}: ", line.label));
        if line.exact {
            text.push_str(&line.transactions.to_string());
        } else if line.transactions.total() == 0 {
            text.push_str("not estimated");
        } else {
            text.push_str(&format!(">={}", line.transactions));
        }
        if let Some(note) = line.note {
            text.push_str(&format!(", {note}"));
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_total_is_at_least_when_a_part_is_only_a_least() {
        let t = |query_pages, point_reads| Transactions {
            query_pages,
            point_reads,
            ..Transactions::default()
        };
        let lines = [
            Line {
                label: "Orders row_range".into(),
                transactions: t(1, 0),
                exact: true,
                note: None,
            },
            Line {
                label: "Customers point".into(),
                transactions: t(0, 9),
                exact: true,
                note: None,
            },
        ];
        assert_eq!(
            shown("estimated", &lines),
            "estimated=10 (query_pages=1 point_reads=9)\n  \
             Orders row_range: 1 (query_pages=1)\n  \
             Customers point: 9 (point_reads=9)"
        );
        let unknown = [Line {
            label: "Orders full_scan".into(),
            transactions: t(1, 0),
            exact: false,
            note: Some("without statistics"),
        }];
        assert_eq!(
            shown("estimated", &unknown),
            "estimated>=1 (query_pages=1)\n  Orders full_scan: >=1 (query_pages=1), without statistics"
        );
        let write = [Line {
            label: "Orders insert".into(),
            transactions: Transactions::default(),
            exact: false,
            note: Some("a batch per 100 rows of a partition"),
        }];
        assert_eq!(
            shown("estimated", &write),
            "estimated>=0\n  Orders insert: not estimated, a batch per 100 rows of a partition"
        );
    }
}
