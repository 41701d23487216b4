//! The workload statistics in SQL: the views `tablesql_stat_statements`
//! (one row per normalized statement run since the last reset),
//! `tablesql_stat_partitions` (one row per partition the statements read or
//! wrote) and `tablesql_stat_tables` (one row per storage table, with its
//! bill), and `tablesql_stat_reset()`, which forgets them, as
//! `pg_stat_statements_reset()` does. Where the engine stores them
//! (`EngineOptions::workload_flush`), the views show this process's counts
//! merged with every other process's stored ones (`exec::stats::persist`),
//! and a reset forgets the stored ones too, at the next flush.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{ArrayRef, Float64Array, Int64Array, RecordBatch, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use datafusion::catalog::{Session, TableFunctionArgs, TableFunctionImpl, TableProvider};
use datafusion::common::plan_err;
use datafusion::datasource::MemTable;
use datafusion::datasource::TableType;
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::error::Result;
use datafusion::logical_expr::{ColumnarValue, Expr, ScalarUDF, Volatility, create_udf};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::scalar::ScalarValue;

use crate::catalog::stats::StatsCache;
use crate::exec::stats::advise::{Evidence, Finding, advise};
use crate::exec::stats::workload::{PartitionRow, StatementStats, TableRow, Workload};
use crate::report;
use crate::storage::bill::Transactions;

/// The statements view's name.
pub const STATEMENTS_VIEW: &str = "tablesql_stat_statements";
/// The partitions view's name.
pub const PARTITIONS_VIEW: &str = "tablesql_stat_partitions";
/// The tables view's name.
pub const TABLES_VIEW: &str = "tablesql_stat_tables";
/// The reset function's name.
pub const RESET: &str = "tablesql_stat_reset";

/// Which view.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Statements,
    Partitions,
    Tables,
}

/// A view of the workload statistics, computed afresh at each scan.
#[derive(Debug)]
pub struct WorkloadView {
    workload: Arc<Workload>,
    kind: Kind,
    schema: SchemaRef,
}

impl WorkloadView {
    /// `tablesql_stat_statements`.
    pub fn statements(workload: Arc<Workload>) -> Self {
        let count = |name: &str| Field::new(name, DataType::Int64, false);
        let ms = |name: &str| Field::new(name, DataType::Float64, false);
        let schema = Arc::new(Schema::new(
            vec![
                Field::new("query", DataType::Utf8, false),
                count("calls"),
                ms("total_ms"),
                ms("mean_ms"),
                ms("min_ms"),
                ms("max_ms"),
                count("rows"),
                count("entities_scanned"),
                count("entities_returned"),
                Field::new("density", DataType::Float64, true),
                count("requests"),
                count("retries"),
                count("conflicts"),
                Field::new("access_path", DataType::Utf8, false),
            ]
            .into_iter()
            .chain(bill_fields())
            .collect::<Vec<_>>(),
        ));
        Self {
            workload,
            kind: Kind::Statements,
            schema,
        }
    }

    /// `tablesql_stat_partitions`.
    pub fn partitions(workload: Arc<Workload>) -> Self {
        let schema = partitions_schema();
        Self {
            workload,
            kind: Kind::Partitions,
            schema,
        }
    }

    /// `tablesql_stat_tables`: each storage table's traffic and bill.
    pub fn tables(workload: Arc<Workload>) -> Self {
        let count = |name: &str| Field::new(name, DataType::Int64, false);
        let schema = Arc::new(Schema::new(
            vec![
                Field::new("table_name", DataType::Utf8, false),
                count("entities_read"),
                count("entities_written"),
                count("requests"),
                count("conflicts"),
            ]
            .into_iter()
            .chain(bill_fields())
            .collect::<Vec<_>>(),
        ));
        Self {
            workload,
            kind: Kind::Tables,
            schema,
        }
    }

    fn batch(&self) -> Result<RecordBatch> {
        match self.kind {
            Kind::Partitions => partitions_batch(&self.schema, &self.workload.partitions()),
            Kind::Statements => statements_batch(&self.schema, &self.workload.statements()),
            Kind::Tables => tables_batch(&self.schema, &self.workload.tables()),
        }
    }
}

/// The bill's columns of a view (`exec::bill`): every billable
/// transaction, then the kinds but `other`.
fn bill_fields() -> [Field; 5] {
    [
        "transactions",
        "query_pages",
        "point_reads",
        "batches",
        "writes",
    ]
    .map(|name| Field::new(name, DataType::Int64, false))
}

/// The values of [`bill_fields`], a row a bill.
fn bill_columns(bills: impl Iterator<Item = Transactions> + Clone) -> [ArrayRef; 5] {
    let count = |f: fn(&Transactions) -> u64| -> ArrayRef {
        let values = bills
            .clone()
            .map(|b| i64::try_from(f(&b)).unwrap_or(i64::MAX));
        Arc::new(values.collect::<Int64Array>())
    };
    [
        count(Transactions::total),
        count(|b| b.query_pages),
        count(|b| b.point_reads),
        count(|b| b.batches),
        count(|b| b.writes),
    ]
}

fn tables_batch(schema: &SchemaRef, rows: &[TableRow]) -> Result<RecordBatch> {
    let count = |f: fn(&TableRow) -> u64| -> ArrayRef {
        let values = rows.iter().map(|r| i64::try_from(f(r)).unwrap_or(i64::MAX));
        Arc::new(values.collect::<Int64Array>())
    };
    Ok(RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(
                rows.iter()
                    .map(|r| Some(r.table.as_str()))
                    .collect::<StringArray>(),
            ),
            count(|r| r.totals.read),
            count(|r| r.totals.written),
            count(|r| r.totals.requests),
            count(|r| r.totals.conflicts),
        ]
        .into_iter()
        .chain(bill_columns(rows.iter().map(|r| r.bill)))
        .collect(),
    )?)
}

fn statements_batch(schema: &SchemaRef, rows: &[(String, StatementStats)]) -> Result<RecordBatch> {
    let count = |f: fn(&StatementStats) -> u64| -> ArrayRef {
        let values = rows
            .iter()
            .map(|(_, s)| i64::try_from(f(s)).unwrap_or(i64::MAX));
        Arc::new(values.collect::<Int64Array>())
    };
    let ms = |f: &dyn Fn(&StatementStats) -> f64| -> ArrayRef {
        Arc::new(rows.iter().map(|(_, s)| f(s)).collect::<Float64Array>())
    };
    let millis = |d: std::time::Duration| d.as_secs_f64() * 1000.0;
    let density: Float64Array = rows
        .iter()
        .map(|(_, s)| (s.scanned > 0).then(|| s.returned as f64 / s.scanned as f64))
        .collect();
    let columns: Vec<ArrayRef> = vec![
        Arc::new(
            rows.iter()
                .map(|(q, _)| Some(q.as_str()))
                .collect::<StringArray>(),
        ),
        count(|s| s.calls),
        ms(&|s| millis(s.total)),
        ms(&|s| millis(s.total) / s.calls.max(1) as f64),
        ms(&|s| millis(s.min)),
        ms(&|s| millis(s.max)),
        count(|s| s.rows),
        count(|s| s.scanned),
        count(|s| s.returned),
        Arc::new(density),
        count(|s| s.requests),
        count(|s| s.retries),
        count(|s| s.conflicts),
        Arc::new(
            rows.iter()
                .map(|(_, s)| Some(s.path.as_ref()))
                .collect::<StringArray>(),
        ),
    ];
    let bills = bill_columns(rows.iter().map(|(_, s)| s.bill));
    Ok(RecordBatch::try_new(
        schema.clone(),
        columns.into_iter().chain(bills).collect(),
    )?)
}

/// `tablesql_stat_partitions`'s columns.
fn partitions_schema() -> SchemaRef {
    let count = |name: &str| Field::new(name, DataType::Int64, false);
    Arc::new(Schema::new(vec![
        Field::new("table_name", DataType::Utf8, false),
        Field::new("partition_key", DataType::Utf8, false),
        count("entities_read"),
        count("entities_written"),
        count("requests"),
        count("conflicts"),
        count("peak_read_per_s"),
        count("peak_written_per_s"),
    ]))
}

fn partitions_batch(schema: &SchemaRef, rows: &[PartitionRow]) -> Result<RecordBatch> {
    let text = |f: fn(&PartitionRow) -> &str| -> ArrayRef {
        Arc::new(rows.iter().map(f).map(Some).collect::<StringArray>())
    };
    let count = |f: fn(&PartitionRow) -> u64| -> ArrayRef {
        let values = rows.iter().map(|r| i64::try_from(f(r)).unwrap_or(i64::MAX));
        Arc::new(values.collect::<Int64Array>())
    };
    Ok(RecordBatch::try_new(
        schema.clone(),
        vec![
            text(|r| &r.table),
            text(|r| &r.partition),
            count(|r| r.traffic.read),
            count(|r| r.traffic.written),
            count(|r| r.traffic.requests),
            count(|r| r.traffic.conflicts),
            count(|r| r.traffic.peak_read_per_s),
            count(|r| r.traffic.peak_written_per_s),
        ],
    )?)
}

#[async_trait]
impl TableProvider for WorkloadView {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::View
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let batch = self.batch()?;
        let exec =
            MemorySourceConfig::try_new_exec(&[vec![batch]], self.schema(), projection.cloned())?;
        Ok(exec)
    }
}

/// The advisor's table function's name.
pub const ADVISE: &str = "tablesql_advise";
/// The advisor's report function's name.
pub const ADVISE_REPORT: &str = "tablesql_advise_report";

/// What the advisor reads: the workload statistics (this engine's, merged
/// with the stored ones) and the `ANALYZE` statistics.
#[derive(Debug, Clone)]
pub struct Advisor {
    workload: Arc<Workload>,
    stats: Arc<StatsCache>,
}

impl Advisor {
    /// Advice from `workload` and the `ANALYZE` statistics in `stats`.
    pub fn new(workload: Arc<Workload>, stats: Arc<StatsCache>) -> Self {
        Self { workload, stats }
    }

    /// The findings about one storage table (its name in any case) or
    /// all, and the evidence they were drawn from, handed to `then`.
    pub fn advise<T>(
        &self,
        only: Option<&str>,
        then: impl FnOnce(&[Finding], &Evidence<'_>) -> T,
    ) -> T {
        let about = |table: &str| only.is_none_or(|t| table.eq_ignore_ascii_case(t));
        let all = self.stats.all();
        let mut partitions = self.workload.partitions();
        partitions.retain(|p| about(&p.table));
        let mut tables = self.workload.tables();
        tables.retain(|t| about(&t.table));
        let evidence = Evidence {
            analyzed: all
                .iter()
                .filter(|(t, _)| about(t.as_str()))
                .map(|(t, s)| (t.as_str().to_owned(), s.as_ref()))
                .collect(),
            partitions,
            statements: self.workload.statements(),
            tables,
        };
        let mut findings = advise(&evidence);
        findings.retain(|f| f.table.is_empty() || about(&f.table));
        then(&findings, &evidence)
    }

    /// The advisor's report as an HTML page (see `crate::report`).
    pub fn report(&self, only: Option<&str>) -> String {
        self.advise(only, |findings, evidence| {
            report::html(findings, evidence, self.workload.since())
        })
    }
}

/// The optional table name both advisor functions take.
fn table_argument(name: &str, args: &TableFunctionArgs) -> Result<Option<String>> {
    match args.exprs() {
        [] => Ok(None),
        [Expr::Literal(ScalarValue::Utf8(Some(t)) | ScalarValue::Utf8View(Some(t)), _)] => {
            Ok(Some(t.clone()))
        }
        _ => plan_err!("{name}([table]) takes a table's name as text, or nothing"),
    }
}

/// `tablesql_advise([table])`: the partition advisor's findings (see
/// `exec::stats::advise`), one row each.
#[derive(Debug)]
pub struct AdviseFunction(pub Advisor);

impl TableFunctionImpl for AdviseFunction {
    fn call_with_args(&self, args: TableFunctionArgs) -> Result<Arc<dyn TableProvider>> {
        let only = table_argument(ADVISE, &args)?;
        let findings = self.0.advise(only.as_deref(), |f, _| f.to_vec());
        let text = |f: &dyn Fn(&Finding) -> &str| -> ArrayRef {
            Arc::new(findings.iter().map(|x| Some(f(x))).collect::<StringArray>())
        };
        let schema = Arc::new(Schema::new(vec![
            Field::new("table_name", DataType::Utf8, false),
            Field::new("finding", DataType::Utf8, false),
            Field::new("evidence", DataType::Utf8, false),
            Field::new("remedy", DataType::Utf8, false),
        ]));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                text(&|f| &f.table),
                text(&|f| f.kind),
                text(&|f| &f.evidence),
                text(&|f| &f.remedy),
            ],
        )?;
        Ok(Arc::new(MemTable::try_new(schema, vec![vec![batch]])?))
    }
}

/// `tablesql_advise_report([table])`: one row, one column `html`, the
/// report page, for `psql -Atc 'SELECT html FROM tablesql_advise_report()'
/// -o report.html`.
#[derive(Debug)]
pub struct AdviseReportFunction(pub Advisor);

impl TableFunctionImpl for AdviseReportFunction {
    fn call_with_args(&self, args: TableFunctionArgs) -> Result<Arc<dyn TableProvider>> {
        let only = table_argument(ADVISE_REPORT, &args)?;
        let page = self.0.report(only.as_deref());
        let schema = Arc::new(Schema::new(vec![Field::new("html", DataType::Utf8, false)]));
        let column: ArrayRef = Arc::new(StringArray::from(vec![page]));
        let batch = RecordBatch::try_new(schema.clone(), vec![column])?;
        Ok(Arc::new(MemTable::try_new(schema, vec![vec![batch]])?))
    }
}

/// `tablesql_stat_reset()`: forgets the statistics and answers when it did.
pub fn reset_udf(workload: Arc<Workload>) -> ScalarUDF {
    let utc = DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()));
    create_udf(
        RESET,
        vec![],
        utc,
        Volatility::Volatile,
        Arc::new(move |_| {
            workload.reset();
            let at = workload.since().timestamp_micros();
            Ok(ColumnarValue::Scalar(ScalarValue::TimestampMicrosecond(
                Some(at),
                Some("UTC".into()),
            )))
        }),
    )
}
