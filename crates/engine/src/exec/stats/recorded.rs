//! Statements recorded into the `Workload`: their text normalized as
//! `pg_stat_statements` does (literals become `$n`, so runs that differ
//! only in values count as one statement), and their rows counted as they
//! stream, the run recorded once the stream is done or dropped.

use std::ops::ControlFlow;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::error::Result;
use datafusion::execution::{RecordBatchStream, SendableRecordBatchStream};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::metrics::MetricValue;
use datafusion::sql::sqlparser::ast::{Expr, Statement, Value, visit_expressions_mut};
use futures::Stream;

use super::workload::{Run, Workload};
use crate::exec::read::scan::PartitionScanExec;
use crate::exec::write::dml::DmlExec;

/// `statement` with each literal replaced by a placeholder numbered after
/// those it has; a positional `ORDER BY 2` or `GROUP BY 1` of the top query
/// keeps its number (it names a column, not a value).
pub fn normalize(statement: &Statement) -> String {
    let mut s = statement.clone();
    // The statement as its user wrote it, without the parser's names.
    crate::planner::output_names::unname(&mut s);
    keep_positions(&mut s);
    let mut highest = 0usize;
    let _ = visit_expressions_mut(&mut s, |e| {
        if let Expr::Value(v) = e
            && let Value::Placeholder(p) = &v.value
            && let Some(n) = p.strip_prefix('$').and_then(|n| n.parse::<usize>().ok())
        {
            highest = highest.max(n);
        }
        ControlFlow::<()>::Continue(())
    });
    let _ = visit_expressions_mut(&mut s, |e| {
        let literal = match e {
            Expr::Value(v) => !matches!(v.value, Value::Placeholder(_)),
            Expr::TypedString(_) => true,
            _ => false,
        };
        if literal {
            highest += 1;
            *e = Expr::Value(Value::Placeholder(format!("${highest}")).into());
        }
        ControlFlow::<()>::Continue(())
    });
    s.to_string()
}

/// The top query's positional `ORDER BY` and `GROUP BY` items (`2`),
/// spelled as identifiers: the same text, and no literal to replace.
fn keep_positions(statement: &mut Statement) {
    use datafusion::sql::sqlparser::ast::{GroupByExpr, Ident, OrderByKind, SetExpr};
    let Statement::Query(q) = statement else {
        return;
    };
    let keep = |e: &mut Expr| {
        if let Expr::Value(v) = e
            && let Value::Number(n, _) = &v.value
        {
            *e = Expr::Identifier(Ident::new(n.clone()));
        }
    };
    if let Some(order) = &mut q.order_by
        && let OrderByKind::Expressions(items) = &mut order.kind
    {
        items.iter_mut().for_each(|o| keep(&mut o.expr));
    }
    if let SetExpr::Select(select) = q.body.as_mut()
        && let GroupByExpr::Expressions(items, _) = &mut select.group_by
    {
        items.iter_mut().for_each(keep);
    }
}

/// What the scans of an executed plan did: entities examined and returned,
/// requests, and their access paths; the retries of its scans and writes;
/// and the transactions its nodes were billed.
pub fn plan_run(plan: &Arc<dyn ExecutionPlan>, run: &mut Run) {
    let mut paths: Vec<&'static str> = Vec::new();
    let mut stack = vec![plan];
    while let Some(node) = stack.pop() {
        if let Some(dml) = node.downcast_ref::<DmlExec>() {
            run.table = Some(std::sync::Arc::from(dml.table().as_str()));
            let span = dml.written_span();
            run.span = span.keys.map(|(first, last)| (first, last, span.entities));
        }
        if let Some(scan) = node.downcast_ref::<PartitionScanExec>() {
            let path = scan.path().access.name();
            if !paths.contains(&path) {
                paths.push(path);
            }
            if run.table.is_none() {
                run.table = Some(std::sync::Arc::from(scan.table().as_str()));
            }
            if scan.reads_whole_entities() {
                run.whole = Some(scan.table().as_str().to_owned());
            }
        }
        for m in node.metrics().iter().flat_map(|set| set.iter()) {
            if let MetricValue::Custom { name, value } = m.value() {
                let n = value.as_usize() as u64;
                match name.as_ref() {
                    "entities_scanned" => run.scanned += n,
                    "entities_returned" => run.returned += n,
                    "requests" => run.requests += n,
                    "retries" => run.retries += n,
                    _ => {}
                }
            }
        }
        stack.extend(node.children());
    }
    run.bill += crate::exec::read::metrics::bill(plan.as_ref());
    paths.sort_unstable();
    run.path = match paths.as_slice() {
        [] => "none".into(),
        [one] => (*one).into(),
        many => many.join("+").into(),
    };
}

/// `stream`, recorded as a run of `statement` (normalized) when it ends or
/// is dropped, unless it failed; `plan` is what it executes, for its
/// scans' counts.
pub fn recorded(
    workload: Arc<Workload>,
    statement: String,
    plan: Option<Arc<dyn ExecutionPlan>>,
    stream: SendableRecordBatchStream,
) -> SendableRecordBatchStream {
    Box::pin(Recorded {
        inner: stream,
        record: Some(Record {
            workload,
            statement,
            plan,
            started: Instant::now(),
            rows: 0,
        }),
    })
}

struct Recorded {
    inner: SendableRecordBatchStream,
    record: Option<Record>,
}

struct Record {
    workload: Arc<Workload>,
    statement: String,
    plan: Option<Arc<dyn ExecutionPlan>>,
    started: Instant,
    rows: u64,
}

impl Record {
    fn finish(self) {
        let mut run = Run {
            elapsed: self.started.elapsed(),
            rows: self.rows,
            path: "none".into(),
            ..Run::default()
        };
        if let Some(plan) = &self.plan {
            plan_run(plan, &mut run);
            // A write answers one row, its count: the rows are those written.
            if let Some(n) = crate::exec::rows_written(plan.as_ref()) {
                run.rows = n;
            }
        }
        self.workload.ran(&self.statement, run);
    }
}

impl Stream for Recorded {
    type Item = Result<RecordBatch>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let next = self.inner.as_mut().poll_next(cx);
        match &next {
            Poll::Ready(Some(Ok(batch))) => {
                if let Some(r) = &mut self.record {
                    r.rows += batch.num_rows() as u64;
                }
            }
            Poll::Ready(None) => {
                if let Some(r) = self.record.take() {
                    r.finish();
                }
            }
            // As PostgreSQL: a statement that failed is not a run; one the
            // store refused for a conflict is counted as such.
            Poll::Ready(Some(Err(e))) => {
                if let Some(r) = self.record.take()
                    && crate::exec::is_conflict(e)
                {
                    r.workload.refused(&r.statement);
                }
            }
            Poll::Pending => {}
        }
        next
    }
}

impl RecordBatchStream for Recorded {
    fn schema(&self) -> SchemaRef {
        self.inner.schema()
    }
}

impl Drop for Recorded {
    fn drop(&mut self) {
        // Stopped early (a LIMIT in the client, a cursor closed): still a
        // run.
        if let Some(r) = self.record.take() {
            r.finish();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion::sql::sqlparser::parser::Parser;

    fn normalized(sql: &str) -> String {
        let parsed = Parser::parse_sql(&PostgreSqlDialect {}, sql).expect("parse");
        normalize(&parsed[0])
    }

    #[test]
    fn literals_become_placeholders_after_those_given() {
        assert_eq!(
            normalized("SELECT name FROM r WHERE event = 'Boston' AND bib = 42 LIMIT 5"),
            "SELECT name FROM r WHERE event = $1 AND bib = $2 LIMIT $3"
        );
        assert_eq!(
            normalized("SELECT name FROM r WHERE event = $2 AND bib = 7"),
            "SELECT name FROM r WHERE event = $2 AND bib = $3"
        );
        assert_eq!(
            normalized("SELECT 1"),
            normalized("SELECT 2"),
            "runs differing in values are one statement"
        );
        assert_eq!(
            normalized("SELECT a, count(*) FROM t WHERE b = 2 GROUP BY 1 ORDER BY 2 DESC"),
            "SELECT a, count(*) FROM t WHERE b = $1 GROUP BY 1 ORDER BY 2 DESC",
            "positions name columns"
        );
        assert_eq!(
            normalized("SELECT * FROM t WHERE d > DATE '2024-01-01'"),
            "SELECT * FROM t WHERE d > $1"
        );
    }
}
