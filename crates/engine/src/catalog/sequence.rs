//! Sequences as the storage guidance builds them: one counter entity per
//! sequence in the catalog table (PartitionKey `sequence`, RowKey the name)
//! holding PostgreSQL's pair `(last_value, is_called)` and the options.
//!
//! A process takes values a block at a time (hi-lo): it reads the counter,
//! moves `last_value` past a block of `cache` values and writes it back
//! If-Match the ETag it read, so that of two processes reserving at once
//! one wins and the other reads again. On a conflict (412, 409, or a write
//! whose answer was lost) it starts again after the storage's backoff, up
//! to [`ATTEMPTS`] times. A block whose write may or may not have landed is
//! never used: values can be skipped, never handed out twice.

use std::time::Duration;

use datafusion::sql::sqlparser::ast::{Expr, SequenceOptions, UnaryOperator, Value};
use rand::Rng as _;

use super::persist::table;
use super::{CatalogError, normalize_ident};
use crate::storage::retry::RetryPolicy;
use crate::storage::{
    EdmValue, Entity, IfMatch, PartitionKey, RowKey, StorageError, StoredEntity, TableStore,
    WriteOp,
};

/// The PartitionKey of sequence counters in the catalog table.
const SEQUENCES_PARTITION: &str = "sequence";
/// The version of the stored form.
const FORMAT_VERSION: i32 = 1;
/// Tries of one reservation before it fails (the guidance's usual bound).
pub const ATTEMPTS: u32 = 50;

/// The waits between tries: the storage's formula, from a few milliseconds
/// (contention between processes clears quickly) up to a second.
fn backoff() -> RetryPolicy {
    RetryPolicy::default()
        .with_max_retries(ATTEMPTS - 1)
        .with_delays(
            Duration::from_millis(4),
            Duration::from_millis(1),
            Duration::from_secs(1),
        )
}

/// A failure of a sequence operation.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SequenceError {
    /// No sequence of that name.
    #[error("relation \"{0}\" does not exist")]
    Unknown(String),
    /// A sequence of that name exists already.
    #[error("relation \"{0}\" already exists")]
    Exists(String),
    /// `CREATE SEQUENCE` options that do not hold together.
    #[error("sequence {name}: {reason}")]
    Option {
        /// The sequence.
        name: String,
        /// What does not hold together.
        reason: String,
    },
    /// The sequence reached its bound and does not cycle.
    #[error("nextval: reached {} value of sequence \"{name}\" ({bound})", if *maximum { "maximum" } else { "minimum" })]
    Exhausted {
        /// The sequence.
        name: String,
        /// The bound it reached.
        bound: i64,
        /// Whether that bound is its maximum (else its minimum).
        maximum: bool,
    },
    /// `setval` outside the sequence's bounds.
    #[error("setval: value {value} is out of bounds for sequence \"{name}\" ({min}..{max})")]
    OutOfBounds {
        /// The sequence.
        name: String,
        /// The value asked for.
        value: i64,
        /// Its `MINVALUE`.
        min: i64,
        /// Its `MAXVALUE`.
        max: i64,
    },
    /// `currval` before `nextval` in this session.
    #[error("currval of sequence \"{0}\" is not yet defined in this session")]
    NotYetDefined(String),
    /// Other processes changed the counter under every try.
    #[error(
        "could not reserve values of sequence \"{name}\": the counter changed under {attempts} attempts; try again"
    )]
    Contention {
        /// The sequence.
        name: String,
        /// Tries made, the first included.
        attempts: u32,
    },
    /// The stored counter is not one this build reads.
    #[error("stored sequence \"{name}\": {reason}")]
    Corrupt {
        /// The sequence.
        name: String,
        /// What could not be read.
        reason: String,
    },
}

impl SequenceError {
    /// The SQLSTATE a client is told (`crate::sqlstate`).
    pub fn sqlstate(&self) -> &'static str {
        use crate::sqlstate as code;
        match self {
            SequenceError::Unknown(_) => code::UNDEFINED_TABLE,
            SequenceError::Exists(_) => code::DUPLICATE_TABLE,
            SequenceError::Option { .. } => code::INVALID_PARAMETER_VALUE,
            SequenceError::Exhausted { .. } => code::SEQUENCE_GENERATOR_LIMIT_EXCEEDED,
            SequenceError::OutOfBounds { .. } => code::NUMERIC_OUT_OF_RANGE,
            SequenceError::NotYetDefined(_) => code::OBJECT_NOT_IN_PREREQUISITE_STATE,
            SequenceError::Contention { .. } => code::SERIALIZATION_FAILURE,
            SequenceError::Corrupt { .. } => code::DATA_CORRUPTED,
        }
    }
}

/// A sequence's options, as `CREATE SEQUENCE` gives them (PostgreSQL's
/// defaults for a `bigint` sequence).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SequenceDef {
    /// The name, normalized.
    pub name: String,
    /// `INCREMENT BY`, never 0.
    pub increment: i64,
    /// `MINVALUE`.
    pub min: i64,
    /// `MAXVALUE`.
    pub max: i64,
    /// `START WITH`.
    pub start: i64,
    /// `CACHE`: how many values a process reserves with one write.
    pub cache: i64,
    /// `CYCLE`: start again at the other bound when one is reached.
    pub cycle: bool,
}

impl SequenceDef {
    /// The definition `CREATE SEQUENCE name <options>` gives.
    pub fn from_options(name: &str, options: &[SequenceOptions]) -> Result<Self, SequenceError> {
        let bad = |reason: String| SequenceError::Option {
            name: name.to_owned(),
            reason,
        };
        let (mut increment, mut min, mut max, mut start, mut cache, mut cycle) =
            (1, None, None, None, 1, false);
        for option in options {
            match option {
                SequenceOptions::IncrementBy(e, _) => increment = integer(e).map_err(bad)?,
                SequenceOptions::MinValue(e) => {
                    min = e.as_ref().map(integer).transpose().map_err(bad)?
                }
                SequenceOptions::MaxValue(e) => {
                    max = e.as_ref().map(integer).transpose().map_err(bad)?
                }
                SequenceOptions::StartWith(e, _) => start = Some(integer(e).map_err(bad)?),
                SequenceOptions::Cache(e) => cache = integer(e).map_err(bad)?,
                // sqlparser's flag is `NO`.
                SequenceOptions::Cycle(no) => cycle = !*no,
            }
        }
        if increment == 0 {
            return Err(bad("INCREMENT must not be zero".into()));
        }
        if cache < 1 {
            return Err(bad(format!("CACHE ({cache}) must be greater than zero")));
        }
        let (min, max) = if increment > 0 {
            (min.unwrap_or(1), max.unwrap_or(i64::MAX))
        } else {
            (min.unwrap_or(i64::MIN), max.unwrap_or(-1))
        };
        if min >= max {
            return Err(bad(format!(
                "MINVALUE ({min}) must be less than MAXVALUE ({max})"
            )));
        }
        let start = start.unwrap_or(if increment > 0 { min } else { max });
        if !(min..=max).contains(&start) {
            return Err(bad(format!(
                "START value ({start}) must be within MINVALUE ({min}) and MAXVALUE ({max})"
            )));
        }
        Ok(Self {
            name: name.to_owned(),
            increment,
            min,
            max,
            start,
            cache,
            cycle,
        })
    }
}

/// An integer option value (a literal, possibly negated).
fn integer(e: &Expr) -> Result<i64, String> {
    match e {
        Expr::Value(v) => match &v.value {
            Value::Number(n, _) => n.parse().map_err(|_| format!("{n} is not a bigint")),
            other => Err(format!("{other} is not an integer")),
        },
        Expr::UnaryOp {
            op: UnaryOperator::Minus,
            expr,
        } => integer(expr).and_then(|v| v.checked_neg().ok_or_else(|| format!("-{v} overflows"))),
        Expr::UnaryOp {
            op: UnaryOperator::Plus,
            expr,
        } => integer(expr),
        other => Err(format!("{other} is not an integer")),
    }
}

/// The name a `nextval('...')` argument names: PostgreSQL reads it as a
/// relation name, lower-casing it unless it is double-quoted.
pub fn name_from_text(text: &str) -> String {
    let text = text.trim();
    let text = text.strip_prefix("public.").unwrap_or(text);
    match text.strip_prefix('"').and_then(|t| t.strip_suffix('"')) {
        Some(quoted) => quoted.replace("\"\"", "\""),
        None => text.to_lowercase(),
    }
}

/// The name a `CREATE`/`DROP SEQUENCE` names.
pub fn object_name(
    name: &datafusion::sql::sqlparser::ast::ObjectName,
) -> Result<String, CatalogError> {
    let parts: Vec<String> = name
        .0
        .iter()
        .map(|p| p.as_ident().map(normalize_ident))
        .collect::<Option<_>>()
        .ok_or_else(|| CatalogError::Definition(format!("invalid sequence name {name}")))?;
    match parts.as_slice() {
        [n] => Ok(n.clone()),
        [schema, n] if schema == "public" => Ok(n.clone()),
        _ => Err(CatalogError::Definition(format!(
            "sequences live in schema public, not {name}"
        ))),
    }
}

/// A stored counter: the definition, PostgreSQL's `(last_value,
/// is_called)`, and the ETag its next write must match.
#[derive(Debug, Clone)]
struct Counter {
    def: SequenceDef,
    last_value: i64,
    is_called: bool,
    etag: crate::storage::ETag,
}

/// Values reserved by one write, handed out in order: `next`, `next +
/// increment`, ... up to `last`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Block {
    next: Option<i64>,
    last: i64,
    increment: i64,
}

impl Block {
    /// The next value of the block, `None` when it is used up.
    pub fn take(&mut self) -> Option<i64> {
        let value = self.next?;
        self.next = if value == self.last {
            None
        } else {
            value.checked_add(self.increment)
        };
        Some(value)
    }
}

/// The block a counter gives next, and the `last_value` to store: pure, the
/// hi-lo step.
fn next_block(c: &Counter) -> Result<Block, SequenceError> {
    let d = &c.def;
    let within = |v: i64| (d.min..=d.max).contains(&v);
    let first = if !c.is_called {
        Some(c.last_value)
    } else {
        c.last_value.checked_add(d.increment).filter(|v| within(*v))
    };
    let first = match first {
        Some(v) if within(v) => v,
        _ if d.cycle => {
            if d.increment > 0 {
                d.min
            } else {
                d.max
            }
        }
        _ => {
            return Err(SequenceError::Exhausted {
                name: d.name.clone(),
                bound: if d.increment > 0 { d.max } else { d.min },
                maximum: d.increment > 0,
            });
        }
    };
    // As many of `cache` values as fit before the bound.
    let room = if d.increment > 0 {
        (i128::from(d.max) - i128::from(first)) / i128::from(d.increment)
    } else {
        (i128::from(first) - i128::from(d.min)) / -i128::from(d.increment)
    };
    let steps = room.min(i128::from(d.cache) - 1);
    let last = i128::from(first) + steps * i128::from(d.increment);
    let last = i64::try_from(last).map_err(|_| SequenceError::Corrupt {
        name: d.name.clone(),
        reason: "block bound overflows".into(),
    })?;
    Ok(Block {
        next: Some(first),
        last,
        increment: d.increment,
    })
}

fn partition() -> Result<PartitionKey, CatalogError> {
    Ok(PartitionKey::new(SEQUENCES_PARTITION).map_err(StorageError::from)?)
}

fn row_key(name: &str) -> Result<RowKey, CatalogError> {
    RowKey::new(name).map_err(|e| CatalogError::Definition(format!("sequence name {name:?}: {e}")))
}

fn entity(def: &SequenceDef, last_value: i64, is_called: bool) -> Result<Entity, CatalogError> {
    Ok(Entity::new(partition()?, row_key(&def.name)?)
        .with("format_version", EdmValue::Int32(FORMAT_VERSION))
        .with("increment", EdmValue::Int64(def.increment))
        .with("min_value", EdmValue::Int64(def.min))
        .with("max_value", EdmValue::Int64(def.max))
        .with("start_value", EdmValue::Int64(def.start))
        .with("cache", EdmValue::Int64(def.cache))
        .with("cycle", EdmValue::Boolean(def.cycle))
        .with("last_value", EdmValue::Int64(last_value))
        .with("is_called", EdmValue::Boolean(is_called)))
}

fn parse(e: &StoredEntity) -> Result<Counter, SequenceError> {
    let name = e.row_key().as_str().to_owned();
    let corrupt = |reason: &str| SequenceError::Corrupt {
        name: name.clone(),
        reason: reason.to_owned(),
    };
    if e.get("format_version") != Some(&EdmValue::Int32(FORMAT_VERSION)) {
        return Err(corrupt("unknown format version"));
    }
    let int = |p: &str| match e.get(p) {
        Some(EdmValue::Int64(v)) => Ok(*v),
        _ => Err(corrupt(&format!("no {p}"))),
    };
    let flag = |p: &str| match e.get(p) {
        Some(EdmValue::Boolean(v)) => Ok(*v),
        _ => Err(corrupt(&format!("no {p}"))),
    };
    let def = SequenceDef {
        name: name.clone(),
        increment: int("increment")?,
        min: int("min_value")?,
        max: int("max_value")?,
        start: int("start_value")?,
        cache: int("cache")?,
        cycle: flag("cycle")?,
    };
    // What `from_options` guarantees, checked again on what was stored.
    if def.increment == 0 || def.cache < 1 || def.min >= def.max {
        return Err(corrupt("options out of range"));
    }
    Ok(Counter {
        def,
        last_value: int("last_value")?,
        is_called: flag("is_called")?,
        etag: e.etag.clone(),
    })
}

/// Every stored sequence, in name order, with its `last_value` (the
/// shell's `\ds`). A counter that cannot be read fails the listing.
pub async fn list(store: &dyn TableStore) -> Result<Vec<(SequenceDef, i64)>, CatalogError> {
    let table = table()?;
    let query = crate::storage::Query::partition(partition()?);
    let mut out = Vec::new();
    let mut token = None;
    loop {
        let page = match store.query(&table, &query, token.as_ref()).await {
            Ok(page) => page,
            // No catalog table yet: no sequence either.
            Err(StorageError::TableNotFound(_)) => return Ok(out),
            Err(e) => return Err(e.into()),
        };
        for e in &page.entities {
            let counter = parse(e)?;
            out.push((counter.def, counter.last_value));
        }
        match page.continuation {
            Some(t) => token = Some(t),
            None => return Ok(out),
        }
    }
}

/// Stores a new sequence. `Ok(false)`: it existed and `if_not_exists` said
/// to let it be.
pub async fn create(
    store: &dyn TableStore,
    def: &SequenceDef,
    if_not_exists: bool,
) -> Result<bool, CatalogError> {
    let table = table()?;
    match store.create_table(&table).await {
        Ok(()) | Err(StorageError::TableAlreadyExists(_)) => {}
        Err(e) => return Err(e.into()),
    }
    let op = WriteOp::Insert(entity(def, def.start, false)?);
    match store.execute(&table, op).await {
        Ok(_) => Ok(true),
        Err(StorageError::EntityAlreadyExists { .. }) if if_not_exists => Ok(false),
        Err(StorageError::EntityAlreadyExists { .. }) => {
            Err(SequenceError::Exists(def.name.clone()).into())
        }
        Err(e) => Err(e.into()),
    }
}

/// Removes a sequence. `Ok(false)`: there was none and `if_exists` said so.
pub async fn drop(
    store: &dyn TableStore,
    name: &str,
    if_exists: bool,
) -> Result<bool, CatalogError> {
    let op = WriteOp::Delete {
        partition_key: partition()?,
        row_key: row_key(name)?,
        if_match: IfMatch::Any,
    };
    match store.execute(&table()?, op).await {
        Ok(_) => Ok(true),
        Err(StorageError::EntityNotFound { .. } | StorageError::TableNotFound(_)) if if_exists => {
            Ok(false)
        }
        Err(StorageError::EntityNotFound { .. } | StorageError::TableNotFound(_)) => {
            Err(SequenceError::Unknown(name.to_owned()).into())
        }
        Err(e) => Err(e.into()),
    }
}

async fn read(store: &dyn TableStore, name: &str) -> Result<Counter, CatalogError> {
    match store.get(&table()?, &partition()?, &row_key(name)?).await {
        Ok(Some(e)) => Ok(parse(&e)?),
        Ok(None) | Err(StorageError::TableNotFound(_)) => {
            Err(SequenceError::Unknown(name.to_owned()).into())
        }
        Err(e) => Err(e.into()),
    }
}

/// Whether a failed If-Match write is worth starting again from a fresh
/// read: another writer came first, or (with `unclear`) the write's answer
/// was lost on a retry that met its own first attempt (a reservation that
/// may have landed is skipped, never reused). An outage is not retried
/// here: the store has retried it already.
fn contended(e: &StorageError, unclear: bool) -> bool {
    match e {
        StorageError::PreconditionFailed { .. } | StorageError::EntityAlreadyExists { .. } => true,
        StorageError::AmbiguousRetry { .. } => unclear,
        StorageError::Batch { source, .. } => contended(source, unclear),
        _ => false,
    }
}

/// Reads the counter, lets `change` compute its new `(last_value,
/// is_called)` and a result, and writes it If-Match, starting again on a
/// conflict up to [`ATTEMPTS`] times with the storage's backoff.
async fn modify<T>(
    store: &dyn TableStore,
    name: &str,
    unclear: bool,
    mut change: impl FnMut(&Counter) -> Result<((i64, bool), T), SequenceError>,
) -> Result<T, CatalogError> {
    let policy = backoff();
    for attempt in 0..ATTEMPTS {
        if attempt > 0 {
            let jitter = rand::rng().random::<f64>();
            tokio::time::sleep(policy.wait(attempt, jitter)).await;
        }
        let counter = read(store, name).await?;
        let ((last_value, is_called), out) = change(&counter)?;
        let op = WriteOp::Update(
            entity(&counter.def, last_value, is_called)?,
            IfMatch::ETag(counter.etag.clone()),
        );
        match store.execute(&table()?, op).await {
            Ok(_) => return Ok(out),
            Err(StorageError::EntityNotFound { .. }) => {
                return Err(SequenceError::Unknown(name.to_owned()).into());
            }
            Err(e) if contended(&e, unclear) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(SequenceError::Contention {
        name: name.to_owned(),
        attempts: ATTEMPTS,
    }
    .into())
}

/// Reserves the sequence's next block of values for this process.
pub async fn reserve(store: &dyn TableStore, name: &str) -> Result<Block, CatalogError> {
    modify(store, name, true, |c| {
        let block = next_block(c)?;
        Ok(((block.last, true), block))
    })
    .await
}

/// `setval(name, value, is_called)`: the next `nextval` of any process
/// whose block is used up returns `value` (or the one after it).
pub async fn set(
    store: &dyn TableStore,
    name: &str,
    value: i64,
    is_called: bool,
) -> Result<(), CatalogError> {
    // A lost answer is not retried: a second write after another
    // process's reservation would wind the counter back over its block.
    modify(store, name, false, |c| {
        if !(c.def.min..=c.def.max).contains(&value) {
            return Err(SequenceError::OutOfBounds {
                name: name.to_owned(),
                value,
                min: c.def.min,
                max: c.def.max,
            });
        }
        Ok(((value, is_called), ()))
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counter(def: SequenceDef, last_value: i64, is_called: bool) -> Counter {
        Counter {
            def,
            last_value,
            is_called,
            etag: crate::storage::ETag::from_wire("W/\"1\""),
        }
    }

    fn def(increment: i64, min: i64, max: i64, cache: i64, cycle: bool) -> SequenceDef {
        SequenceDef {
            name: "s".into(),
            increment,
            min,
            max,
            start: if increment > 0 { min } else { max },
            cache,
            cycle,
        }
    }

    fn values(mut b: Block) -> Vec<i64> {
        std::iter::from_fn(|| b.take()).collect()
    }

    #[test]
    fn blocks_follow_postgres_last_value_and_is_called() {
        let d = def(1, 1, 100, 5, false);
        assert_eq!(
            values(next_block(&counter(d.clone(), 1, false)).unwrap()),
            [1, 2, 3, 4, 5]
        );
        assert_eq!(
            values(next_block(&counter(d.clone(), 5, true)).unwrap()),
            [6, 7, 8, 9, 10]
        );
        // Clipped at the bound, then exhausted.
        assert_eq!(
            values(next_block(&counter(d.clone(), 97, true)).unwrap()),
            [98, 99, 100]
        );
        assert!(matches!(
            next_block(&counter(d, 100, true)),
            Err(SequenceError::Exhausted {
                bound: 100,
                maximum: true,
                ..
            })
        ));
        let down = def(-10, -35, -1, 3, true);
        assert_eq!(
            values(next_block(&counter(down.clone(), -1, false)).unwrap()),
            [-1, -11, -21]
        );
        // Cycles back to the top.
        assert_eq!(
            values(next_block(&counter(down, -31, true)).unwrap()),
            [-1, -11, -21]
        );
        let edge = def(1, 1, i64::MAX, 10, false);
        assert_eq!(
            values(next_block(&counter(edge.clone(), i64::MAX - 2, true)).unwrap()),
            [i64::MAX - 1, i64::MAX]
        );
        assert!(next_block(&counter(edge, i64::MAX, true)).is_err());
    }

    #[test]
    fn names_read_as_postgres_reads_regclass_text() {
        assert_eq!(name_from_text("Orders_ID_seq"), "orders_id_seq");
        assert_eq!(name_from_text("public.s"), "s");
        assert_eq!(name_from_text("\"Mixed\""), "Mixed");
    }
}
