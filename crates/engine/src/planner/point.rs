//! Point reads planned once. A prepared query whose only filters fix a
//! mapped table's primary key (`col = $n` or a literal, every PartitionKey
//! field and a leading run of RowKey fields that holds the primary key) is
//! planned here, at prepare, into what each run needs: which value feeds
//! which key field, the decoding of the projected columns, the output
//! columns. A run composes the keys, reads the one entity on the calling
//! task (a get, or a one-entity prefix query), and decodes it, with no
//! pushdown, physical planning, spawned task or channel. Values it cannot
//! take as keys (a NULL; for an integer column anything but an integer
//! that fits it, for a text column anything but text) make `run` answer
//! `None`, and the caller plans the statement as usual.

use std::sync::Arc;

use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::ParamValues;
use datafusion::error::{DataFusionError, Result};
use datafusion::logical_expr::{BinaryExpr, Expr, LogicalPlan, Operator};
use datafusion::scalar::ScalarValue;

use super::StoreTable;
use super::simple_scan::{SimpleScan, simple_scan};
use crate::catalog::ColumnType;
use crate::exec::ExecError;
use crate::exec::read::decode::{BatchSink, DecodePlan, Source, page_into};
use crate::exec::read::row::{Row, RowDecoder};
use crate::exec::write::transaction::Transaction;
use crate::keys::{KeyBounds, KeyValue};
use crate::storage::{
    ContinuationToken, PartitionKey, Query, RowKey, RowSink, StorageError, TableName, TableStore,
    retries,
};

/// Where a key field's value comes from at each run.
#[derive(Debug, Clone)]
enum Value {
    /// Placeholder `$n` (0-based here).
    Param(usize),
    /// A literal of the statement.
    Literal(ScalarValue),
}

/// A prepared point read: see the module doc.
#[derive(Debug)]
pub struct PointRead {
    table: Arc<StoreTable>,
    /// The storage table's name, for the workload statistics.
    storage: Arc<str>,
    /// The PartitionKey's fields' values, in field order, with their types.
    partition: Vec<(Value, ColumnType)>,
    /// The PartitionKey when the statement's literals alone fix it (the
    /// benchmark's `event = '...' AND distance = '...'`): composed once
    /// here, not at every run.
    fixed_partition: Option<PartitionKey>,
    /// The leading RowKey fields' values, in field order.
    row: Vec<(Value, ColumnType)>,
    /// Whether `row` fixes every RowKey field (a get, not a prefix query).
    whole_row_key: bool,
    decode: Arc<DecodePlan>,
    /// The properties a prefix query selects.
    select: Option<Arc<[String]>>,
    /// Output columns, as positions in the decoded projection, where they
    /// are not those positions in order.
    output: Option<Arc<[usize]>>,
    /// `LIMIT 0`.
    empty: bool,
}

impl PointRead {
    /// The storage table it reads.
    pub fn storage_table(&self) -> &Arc<str> {
        &self.storage
    }

    /// The point read `plan` is, if it is one.
    pub fn of(plan: &LogicalPlan) -> Option<Self> {
        let SimpleScan {
            scan,
            table,
            filters,
            columns: output,
        } = simple_scan(plan)?;
        let layout = table.layout();
        let def = layout.def.as_ref()?;
        if !table.pushes_down() || layout.index.is_some() {
            return None;
        }
        // Each filter fixes one key field; no field twice, nothing else.
        let mut partition = vec![None; def.partition_key.columns().count()];
        let mut row = vec![None; def.row_key.columns().count()];
        for f in filters {
            let (column, value) = equality(f)?;
            let i = layout.schema.index_of(&column.name).ok()?;
            let (source, t) = layout.columns.get(i)?;
            let slot = match source {
                Source::PartitionField(n) => partition.get_mut(*n)?,
                Source::RowField(n) => row.get_mut(*n)?,
                _ => return None,
            };
            if slot.is_some() {
                return None;
            }
            *slot = Some((value, *t));
        }
        let partition = partition.into_iter().collect::<Option<Vec<_>>>()?;
        let leading: Vec<_> = row.iter().map_while(Clone::clone).collect();
        // Anything fixed past the leading run is a filter this path skips.
        if row.iter().skip(leading.len()).any(Option::is_some) {
            return None;
        }
        // A `{#N}` PartitionKey is known from a whole RowKey only.
        if def.partition_key.row_buckets().is_some() && leading.len() < row.len() {
            return None;
        }
        let fixed: Vec<&str> = def
            .partition_key
            .columns()
            .chain(def.row_key.columns().take(leading.len()))
            .collect();
        if !def.primary_key.iter().all(|c| fixed.contains(&c.as_str())) {
            return None;
        }
        let scanned: Vec<usize> = match &scan.projection {
            Some(p) => p.clone(),
            None => (0..layout.schema.fields().len()).collect(),
        };
        // Only the output columns are decoded (the keys fix the rest), each
        // once; `output` then places them.
        let mut projection: Vec<usize> = Vec::new();
        let mut placed = Vec::with_capacity(output.len());
        for &o in &output {
            let column = *scanned.get(o)?;
            let at = match projection.iter().position(|&c| c == column) {
                Some(at) => at,
                None => {
                    projection.push(column);
                    projection.len() - 1
                }
            };
            placed.push(at);
        }
        let output = (placed.iter().enumerate().any(|(i, &at)| i != at)).then(|| Arc::from(placed));
        let decoded = Arc::new(layout.schema.project(&projection).ok()?);
        let decode = Arc::new(DecodePlan::new(
            Arc::new(layout.clone()),
            &projection,
            &decoded,
        ));
        let select = Some(Arc::from(layout.properties(decode.projection())));
        // `Some` only when every field is a literal: `key_values` with no
        // parameters fails at any `$n`. A `{#N}` key is the RowKey's.
        let fixed_partition = def
            .partition_key
            .row_buckets()
            .is_none()
            .then(|| key_values(&partition, &ParamValues::List(Vec::new())))
            .flatten()
            .and_then(|values| def.partition_key.compose(&values).ok())
            .and_then(|pk| PartitionKey::new(pk).ok());
        Some(Self {
            storage: Arc::from(layout.table.as_str()),
            whole_row_key: leading.len() == row.len(),
            row: leading,
            partition,
            fixed_partition,
            decode,
            select,
            output,
            empty: scan.fetch == Some(0),
            table,
        })
    }

    /// Runs the read with `params`; `None` when a value cannot be a key
    /// (the caller then plans the statement with the values bound). Inside a
    /// transaction block `tx`, it reads through the block's buffer.
    pub async fn run(
        &self,
        tx: Option<&Arc<Transaction>>,
        params: &ParamValues,
    ) -> Result<Option<PointAnswer<RecordBatch>>> {
        let sink = BatchSink::new(self.decode.clone(), 1);
        let Some(read) = self.read(tx, params, sink).await? else {
            return Ok(None);
        };
        let (batch, _) = read.found.finish().map_err(external)?;
        let batch = match &self.output {
            Some(output) => batch.project(output)?,
            None => batch,
        };
        Ok(Some(PointAnswer {
            found: batch,
            requests: read.requests,
            retries: read.retries,
        }))
    }

    /// As `run`, into one [`Row`] (none if no entity has the key) rather
    /// than a batch: for a client that takes the row as it is.
    pub async fn run_row(
        &self,
        tx: Option<&Arc<Transaction>>,
        params: &ParamValues,
    ) -> Result<Option<PointAnswer<Option<Row>>>> {
        let sink = RowDecoder::new(self.decode.clone(), self.output.clone());
        let Some(read) = self.read(tx, params, sink).await? else {
            return Ok(None);
        };
        Ok(Some(PointAnswer {
            found: read.found.finish().map_err(external)?,
            requests: read.requests,
            retries: read.retries,
        }))
    }

    /// The keys `params` give, and the entity they name read into `sink`.
    async fn read<S: RowSink + 'static>(
        &self,
        tx: Option<&Arc<Transaction>>,
        params: &ParamValues,
        sink: S,
    ) -> Result<Option<PointAnswer<S>>> {
        // No values to take when the literals fixed the PartitionKey.
        let partition = match &self.fixed_partition {
            Some(_) => Vec::new(),
            None => match key_values(&self.partition, params) {
                Some(values) => values,
                None => return Ok(None),
            },
        };
        let Some(row) = key_values(&self.row, params) else {
            return Ok(None);
        };
        let layout = self.table.layout();
        let Some(def) = layout.def.as_ref() else {
            return Ok(None);
        };
        if self.empty {
            return Ok(Some(PointAnswer {
                found: sink,
                requests: 0,
                retries: 0,
            }));
        }
        let rk = if self.whole_row_key {
            match def
                .row_key
                .compose(&row)
                .ok()
                .and_then(|k| RowKey::new(k).ok())
            {
                Some(rk) => Some(rk),
                None => return Ok(None),
            }
        } else {
            None
        };
        let pk = match &self.fixed_partition {
            Some(pk) => pk.clone(),
            None => {
                let row_key = rk.as_ref().map_or("", |k| k.as_str());
                let composed = def
                    .partition_key
                    .compose_partition(&partition, row_key)
                    .ok()
                    .and_then(|pk| PartitionKey::new(pk).ok());
                match composed {
                    Some(pk) => pk,
                    None => return Ok(None),
                }
            }
        };
        let lent = self.table.store_lent(tx);
        let store: &dyn TableStore = &**lent;
        let read = if let Some(rk) = rk {
            get(store, &layout.table, &pk, &rk, sink).await
        } else {
            let Ok(KeyBounds::Range { start, end }) = def.row_key.prefix_range(&row, None) else {
                return Ok(None);
            };
            let mut query = Query::partition(pk)
                .rows(super::pushdown::row_range(start, end))
                .top(1);
            query.select = self.select.clone();
            first(store, &layout.table, &query, sink).await
        };
        let (found, requests, retries) = read.map_err(|e| external(ExecError::from(e)))?;
        Ok(Some(PointAnswer {
            found,
            requests,
            retries,
        }))
    }
}

fn external(e: ExecError) -> DataFusionError {
    DataFusionError::External(Box::new(e))
}

impl PointRead {
    /// What its requests are billed as: a GET where the primary key is the
    /// whole RowKey, else a query of the key's prefix, one page.
    pub fn operation(&self) -> crate::storage::bill::Operation {
        use crate::storage::bill::Operation;
        if self.whole_row_key {
            Operation::Get
        } else {
            Operation::QueryPage
        }
    }
}

/// What a point read found: `found` holds no row or one.
#[derive(Debug)]
pub struct PointAnswer<T> {
    /// What holds the row, if one was found: a batch, a row, or the sink
    /// it was read into.
    pub found: T,
    /// Requests it sent (a page past empty ones, or none for a key no
    /// table can hold).
    pub requests: u64,
    /// Retries the store made for them (see `storage::retries`).
    pub retries: u64,
}

/// The entity at `(pk, rk)`, if any, into `sink`; with the requests (one)
/// and the store's retries.
async fn get<S: RowSink>(
    store: &dyn TableStore,
    table: &TableName,
    pk: &PartitionKey,
    rk: &RowKey,
    mut sink: S,
) -> Result<(S, u64, u64), StorageError> {
    let (found, retries) = retries::counted_by(store, store.get(table, pk, rk)).await;
    if let Some(e) = found? {
        // A `Break` here means the sink kept an error (or its row): its
        // `finish` tells.
        let _ = sink.push(&e);
    }
    Ok((sink, 1, retries.retries))
}

/// The first entity `query` (of `top` 1) finds, following tokens past
/// empty pages, into `sink`; with the requests and the store's retries.
async fn first<S: RowSink + 'static>(
    store: &dyn TableStore,
    table: &TableName,
    query: &Query,
    mut sink: S,
) -> Result<(S, u64, u64), StorageError> {
    let mut token: Option<ContinuationToken> = None;
    let (mut requests, mut retries) = (0, 0);
    loop {
        let (page, n) =
            retries::counted_by(store, page_into(store, table, query, token.as_ref(), sink)).await;
        let (end, filled) = page?;
        (sink, requests, retries) = (filled, requests + 1, retries + n.retries);
        match end.continuation {
            Some(next) if end.returned == 0 => token = Some(next),
            _ => return Ok((sink, requests, retries)),
        }
    }
}

/// `column = value` (either way round), value a placeholder or a literal.
fn equality(e: &Expr) -> Option<(&datafusion::common::Column, Value)> {
    let Expr::BinaryExpr(BinaryExpr {
        left,
        op: Operator::Eq,
        right,
    }) = e
    else {
        return None;
    };
    let value = |e: &Expr| match e {
        Expr::Placeholder(p) => {
            let n: usize = p.id.strip_prefix('$')?.parse().ok()?;
            Some(Value::Param(n.checked_sub(1)?))
        }
        Expr::Literal(v, _) => Some(Value::Literal(v.clone())),
        _ => None,
    };
    match (left.as_ref(), right.as_ref()) {
        (Expr::Column(c), other) | (other, Expr::Column(c)) => Some((c, value(other)?)),
        _ => None,
    }
}

/// The key values of `fields` for `params`; `None` for a NULL, a missing
/// parameter, or a value of another type than its column's.
fn key_values(fields: &[(Value, ColumnType)], params: &ParamValues) -> Option<Vec<KeyValue>> {
    fields
        .iter()
        .map(|(value, t)| {
            let scalar = match value {
                Value::Literal(v) => v,
                Value::Param(n) => match params {
                    ParamValues::List(list) => &list.get(*n)?.value,
                    ParamValues::Map(_) => return None,
                },
            };
            key_value(scalar, *t)
        })
        .collect()
}

fn key_value(v: &ScalarValue, t: ColumnType) -> Option<KeyValue> {
    super::pushdown::key_of_scalar(t, v)
}
