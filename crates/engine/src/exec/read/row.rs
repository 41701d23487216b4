//! One row decoded into typed cells, for a result of at most one row that
//! goes to a client as it is: a prepared point read. A batch's builders, its
//! arrays and their encoding back into rows cost such a read more than the
//! store's read of its entity (`perf` under pgbench, BENCHMARKS.md); cells
//! take the same values by the same rules (`cells`), and a row's text and
//! bytes share one buffer each.

use std::ops::{ControlFlow, Range};
use std::sync::Arc;

use super::cells::{Columns, Kind, Target, put_key, put_value};
use super::decode::{DecodePlan, Decoding};
use crate::exec::ExecError;
use crate::keys::KeyRef;
use crate::storage::{EntityView, RowSink, ValueRef};

/// A column's value in a [`Row`], as its type reads.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Cell<'a> {
    /// NULL.
    Null,
    /// An `INT`.
    Int(i32),
    /// A `BIGINT`.
    BigInt(i64),
    /// A `DOUBLE`.
    Double(f64),
    /// A `TEXT` or `UUID` (hyphenated).
    Text(&'a str),
    /// A `BOOLEAN`.
    Boolean(bool),
    /// A `TIMESTAMP`: microseconds since 1970 in UTC.
    Timestamp(i64),
    /// A `DATE`: days since 1970-01-01.
    Date(i32),
    /// A `NUMERIC`: the value in units of 10^-scale, and the scale.
    Numeric(i128, u8),
    /// A `BYTEA`.
    Bytes(&'a [u8]),
}

/// A cell as stored: text and bytes as ranges of the row's buffers.
#[derive(Debug, Clone, PartialEq)]
enum Stored {
    Null,
    Int(i32),
    BigInt(i64),
    Double(f64),
    Text(Range<usize>),
    Boolean(bool),
    Timestamp(i64),
    Date(i32),
    Numeric(i128),
    Bytes(Range<usize>),
}

/// One decoded row: its columns in output order.
#[derive(Debug, Clone)]
pub struct Row {
    cells: Vec<Stored>,
    kinds: Vec<Kind>,
    text: String,
    bytes: Vec<u8>,
    /// Output column `i` is decoded column `order[i]`, where that is not
    /// `i` itself.
    order: Option<Arc<[usize]>>,
}

impl Row {
    /// The number of columns.
    pub fn len(&self) -> usize {
        self.order.as_ref().map_or(self.cells.len(), |o| o.len())
    }

    /// Whether the row has no columns.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Column `i`'s value; `None` past the last column.
    pub fn get(&self, i: usize) -> Option<Cell<'_>> {
        let at = match &self.order {
            Some(order) => *order.get(i)?,
            None => i,
        };
        Some(match self.cells.get(at)? {
            Stored::Null => Cell::Null,
            Stored::Int(v) => Cell::Int(*v),
            Stored::BigInt(v) => Cell::BigInt(*v),
            Stored::Double(v) => Cell::Double(*v),
            Stored::Text(r) => Cell::Text(self.text.get(r.clone())?),
            Stored::Boolean(v) => Cell::Boolean(*v),
            Stored::Timestamp(v) => Cell::Timestamp(*v),
            Stored::Date(v) => Cell::Date(*v),
            Stored::Numeric(v) => match self.kinds.get(at)? {
                Kind::Decimal(scale) => Cell::Numeric(*v, *scale),
                _ => return None,
            },
            Stored::Bytes(r) => Cell::Bytes(self.bytes.get(r.clone())?),
        })
    }
}

/// One column of a row being filled.
struct Slot<'a> {
    cell: &'a mut Stored,
    text: &'a mut String,
    bytes: &'a mut Vec<u8>,
}

impl Target for Slot<'_> {
    fn int(&mut self, v: i32) {
        *self.cell = Stored::Int(v);
    }
    fn bigint(&mut self, v: i64) {
        *self.cell = Stored::BigInt(v);
    }
    fn double(&mut self, v: f64) {
        *self.cell = Stored::Double(v);
    }
    fn text(&mut self, v: &str) {
        let start = self.text.len();
        self.text.push_str(v);
        *self.cell = Stored::Text(start..self.text.len());
    }
    fn boolean(&mut self, v: bool) {
        *self.cell = Stored::Boolean(v);
    }
    fn micros(&mut self, v: i64) {
        *self.cell = Stored::Timestamp(v);
    }
    fn days(&mut self, v: i32) {
        *self.cell = Stored::Date(v);
    }
    fn decimal(&mut self, v: i128) {
        *self.cell = Stored::Numeric(v);
    }
    fn bytes(&mut self, v: &[u8]) {
        let start = self.bytes.len();
        self.bytes.extend_from_slice(v);
        *self.cell = Stored::Bytes(start..self.bytes.len());
    }
    fn null(&mut self) {
        *self.cell = Stored::Null;
    }
}

impl Row {
    fn slot(&mut self, b: usize) -> Option<(Kind, Slot<'_>)> {
        Some((
            *self.kinds.get(b)?,
            Slot {
                cell: self.cells.get_mut(b)?,
                text: &mut self.text,
                bytes: &mut self.bytes,
            },
        ))
    }
}

impl Columns for Row {
    fn value(&mut self, b: usize, v: ValueRef<'_>, lenient: bool) -> bool {
        self.slot(b)
            .is_some_and(|(kind, mut slot)| put_value(kind, &mut slot, v, lenient))
    }
    fn key(&mut self, b: usize, v: &KeyRef<'_>) -> bool {
        self.slot(b)
            .is_some_and(|(kind, mut slot)| put_key(kind, &mut slot, v))
    }
    fn null(&mut self, b: usize) {
        if let Some((_, mut slot)) = self.slot(b) {
            slot.null();
        }
    }
}

/// Decodes the first entity a store lends (`RowSink`) into a [`Row`]; index
/// rows are passed over as a batch's decoding passes them.
pub struct RowDecoder {
    plan: Arc<DecodePlan>,
    state: Decoding<Row>,
    found: bool,
    error: Option<ExecError>,
}

impl RowDecoder {
    /// A decoder into the columns of `plan`, placed in output order by
    /// `order` where that differs from the decoded order.
    pub fn new(plan: Arc<DecodePlan>, order: Option<Arc<[usize]>>) -> Self {
        let kinds: Vec<Kind> = plan.column_types().map(Kind::of).collect();
        let row = Row {
            cells: vec![Stored::Null; kinds.len()],
            kinds,
            text: String::new(),
            bytes: Vec::new(),
            order,
        };
        Self {
            state: Decoding::new(row, &plan),
            plan,
            found: false,
            error: None,
        }
    }

    /// The row taken, if an entity was; or the error that stopped it.
    pub fn finish(self) -> Result<Option<Row>, ExecError> {
        match self.error {
            Some(e) => Err(e),
            None => Ok(self.found.then(|| self.state.into_columns())),
        }
    }
}

impl RowSink for RowDecoder {
    fn push(&mut self, e: &dyn EntityView) -> ControlFlow<()> {
        if self.found || self.error.is_some() {
            return ControlFlow::Break(());
        }
        match self.state.take(&self.plan, e) {
            Ok(true) => {
                self.found = true;
                ControlFlow::Break(())
            }
            Ok(false) => ControlFlow::Continue(()),
            Err(err) => {
                self.error = Some(err);
                ControlFlow::Break(())
            }
        }
    }
}
