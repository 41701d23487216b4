//! COPY's binary format, as PostgreSQL writes and reads it (its manual,
//! COPY, "Binary Format"): a signature, then each row as a field count and
//! each field as a length (-1 for NULL) and its value in the type's binary
//! send form, big-endian; a count of -1 ends the data. The tools that move
//! many rows speak it (DuckDB's scanner, asyncpg's `copy_records_to_table`,
//! connectorx, ADBC): nothing to format or parse as text.
//!
//! - Out ([`encode_into`]): each column is typed once per batch and each
//!   value written straight into the batch's buffer, in the type the wire
//!   server describes the column as (arrow-pg's mapping: Int8 and UInt8 as
//!   int2, UInt16 as int4, UInt32 as int8, Float32 as float4, UInt64 and
//!   Decimal128 as numeric). A type with no binary form here is refused by
//!   name before a row is written.
//! - In ([`Reader`]): rows are decoded into builders of the table's column
//!   types, each field checked as PostgreSQL checks it (its length is its
//!   type's), and handed to the loader as arrays, with no text between.
//!
//! Pure functions and state: the bytes come and go through the callers.

use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, BinaryBuilder, BooleanBuilder, Date32Builder, Decimal128Builder,
    Float64Builder, Int32Builder, Int64Builder, StringBuilder, TimestampMicrosecondBuilder,
};
use datafusion::arrow::datatypes::{
    DataType, Date32Type, Date64Type, Decimal128Type, Float32Type, Float64Type, Int8Type,
    Int16Type, Int32Type, Int64Type, Time32MillisecondType, Time32SecondType,
    Time64MicrosecondType, Time64NanosecondType, TimeUnit, TimestampMicrosecondType,
    TimestampMillisecondType, TimestampNanosecondType, TimestampSecondType, UInt8Type, UInt16Type,
    UInt32Type, UInt64Type,
};
use datafusion::arrow::error::ArrowError;

use super::{LineFault, LoadError};

/// The first bytes of binary COPY data: the signature, no flags, no
/// header extension.
pub const HEADER: [u8; 19] = *b"PGCOPY\n\xff\r\n\0\0\0\0\0\0\0\0\0";

/// The end of binary COPY data: a row of -1 fields.
pub const TRAILER: [u8; 2] = [0xff, 0xff];

/// Days from 1970-01-01 (Arrow's dates) to 2000-01-01 (PostgreSQL's).
const EPOCH_DAYS: i32 = 10_957;
/// Microseconds from 1970-01-01 to 2000-01-01.
const EPOCH_MICROS: i64 = 946_684_800_000_000;

/// Writes one column's value of row `i`, which is not NULL.
type Writer<'a> = Box<dyn Fn(usize, &mut Vec<u8>) -> Result<(), ArrowError> + 'a>;

/// A batch's rows in binary COPY's form, appended to `out`; `ends` gets
/// where each row ends in it.
pub fn encode_into(
    batch: &datafusion::arrow::array::RecordBatch,
    out: &mut Vec<u8>,
    ends: &mut Vec<usize>,
) -> Result<(), ArrowError> {
    let writers = batch
        .columns()
        .iter()
        .map(|c| writer(c.as_ref()))
        .collect::<Result<Vec<_>, _>>()?;
    // `logical_nulls`: a NullArray's values are NULL though it has no mask.
    let nulls: Vec<_> = batch.columns().iter().map(|c| c.logical_nulls()).collect();
    let count = i16::try_from(batch.num_columns())
        .map_err(|_| ArrowError::InvalidArgumentError("too many columns for COPY".into()))?;
    for row in 0..batch.num_rows() {
        out.extend_from_slice(&count.to_be_bytes());
        for (write, nulls) in writers.iter().zip(&nulls) {
            if nulls.as_ref().is_some_and(|n| n.is_null(row)) {
                out.extend_from_slice(&(-1i32).to_be_bytes());
            } else {
                write(row, out)?;
            }
        }
        ends.push(out.len());
    }
    Ok(())
}

/// Whether a column of type `ty` has a binary form here: the error names
/// it (checked before a COPY TO starts, so no row is sent of a copy that
/// cannot finish).
pub fn check_type(name: &str, ty: &DataType) -> Result<(), String> {
    let empty = datafusion::arrow::array::new_empty_array(ty);
    writer(empty.as_ref())
        .map(|_| ())
        .map_err(|_| format!("COPY (FORMAT binary) has no binary form for column \"{name}\" of type {ty}; use text or csv"))
}

/// A field: its length, then its bytes.
fn field(out: &mut Vec<u8>, bytes: &[u8]) -> Result<(), ArrowError> {
    let len = i32::try_from(bytes.len()).map_err(|_| {
        ArrowError::InvalidArgumentError("a value too long for COPY (over 2 GiB)".into())
    })?;
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(bytes);
    Ok(())
}

/// A fixed-width value, from a primitive array.
fn fixed<'a, T, const N: usize>(
    array: &'a dyn Array,
    f: impl Fn(T::Native) -> [u8; N] + 'a,
) -> Writer<'a>
where
    T: datafusion::arrow::datatypes::ArrowPrimitiveType,
{
    let a = array.as_primitive::<T>();
    Box::new(move |i, out| field(out, &f(a.value(i))))
}

/// A time in `unit` as microseconds (nanoseconds cut to the one before).
fn micros(unit: &TimeUnit, v: i64) -> i64 {
    match unit {
        TimeUnit::Second => v.saturating_mul(1_000_000),
        TimeUnit::Millisecond => v.saturating_mul(1_000),
        TimeUnit::Microsecond => v,
        TimeUnit::Nanosecond => v.div_euclid(1_000),
    }
}

/// The writer of a column's values, as the wire describes its type.
fn writer(array: &dyn Array) -> Result<Writer<'_>, ArrowError> {
    use DataType as T;
    Ok(match array.data_type() {
        T::Null => Box::new(|_, out| field(out, &[])),
        T::Boolean => {
            let a = array.as_boolean();
            Box::new(move |i, out| field(out, &[u8::from(a.value(i))]))
        }
        T::Int8 => fixed::<Int8Type, 2>(array, |v| i16::from(v).to_be_bytes()),
        T::UInt8 => fixed::<UInt8Type, 2>(array, |v| i16::from(v).to_be_bytes()),
        T::Int16 => fixed::<Int16Type, 2>(array, i16::to_be_bytes),
        T::UInt16 => fixed::<UInt16Type, 4>(array, |v| i32::from(v).to_be_bytes()),
        T::Int32 => fixed::<Int32Type, 4>(array, i32::to_be_bytes),
        T::UInt32 => fixed::<UInt32Type, 8>(array, |v| i64::from(v).to_be_bytes()),
        T::Int64 => fixed::<Int64Type, 8>(array, i64::to_be_bytes),
        T::Float32 => fixed::<Float32Type, 4>(array, f32::to_be_bytes),
        T::Float64 => fixed::<Float64Type, 8>(array, f64::to_be_bytes),
        T::UInt64 => {
            let a = array.as_primitive::<UInt64Type>();
            Box::new(move |i, out| numeric_field(i128::from(a.value(i)), 0, out))
        }
        T::Decimal128(_, scale) if *scale >= 0 => {
            let (a, scale) = (array.as_primitive::<Decimal128Type>(), *scale);
            Box::new(move |i, out| numeric_field(a.value(i), scale.unsigned_abs(), out))
        }
        T::Utf8 => {
            let a = array.as_string::<i32>();
            Box::new(move |i, out| field(out, a.value(i).as_bytes()))
        }
        T::LargeUtf8 => {
            let a = array.as_string::<i64>();
            Box::new(move |i, out| field(out, a.value(i).as_bytes()))
        }
        T::Utf8View => {
            let a = array.as_string_view();
            Box::new(move |i, out| field(out, a.value(i).as_bytes()))
        }
        T::Binary => {
            let a = array.as_binary::<i32>();
            Box::new(move |i, out| field(out, a.value(i)))
        }
        T::LargeBinary => {
            let a = array.as_binary::<i64>();
            Box::new(move |i, out| field(out, a.value(i)))
        }
        T::BinaryView => {
            let a = array.as_binary_view();
            Box::new(move |i, out| field(out, a.value(i)))
        }
        T::FixedSizeBinary(_) => {
            let a = array.as_fixed_size_binary();
            Box::new(move |i, out| field(out, a.value(i)))
        }
        T::Date32 => fixed::<Date32Type, 4>(array, |d| d.saturating_sub(EPOCH_DAYS).to_be_bytes()),
        T::Date64 => fixed::<Date64Type, 4>(array, |ms| {
            let days = i32::try_from(ms.div_euclid(86_400_000)).unwrap_or(i32::MAX);
            days.saturating_sub(EPOCH_DAYS).to_be_bytes()
        }),
        T::Timestamp(unit, _) => {
            let unit = *unit;
            let since = move |v: i64| micros(&unit, v).saturating_sub(EPOCH_MICROS).to_be_bytes();
            match unit {
                TimeUnit::Second => fixed::<TimestampSecondType, 8>(array, since),
                TimeUnit::Millisecond => fixed::<TimestampMillisecondType, 8>(array, since),
                TimeUnit::Microsecond => fixed::<TimestampMicrosecondType, 8>(array, since),
                TimeUnit::Nanosecond => fixed::<TimestampNanosecondType, 8>(array, since),
            }
        }
        T::Time32(TimeUnit::Second) => fixed::<Time32SecondType, 8>(array, |v| {
            micros(&TimeUnit::Second, i64::from(v)).to_be_bytes()
        }),
        T::Time32(TimeUnit::Millisecond) => fixed::<Time32MillisecondType, 8>(array, |v| {
            micros(&TimeUnit::Millisecond, i64::from(v)).to_be_bytes()
        }),
        T::Time64(TimeUnit::Microsecond) => {
            fixed::<Time64MicrosecondType, 8>(array, i64::to_be_bytes)
        }
        T::Time64(TimeUnit::Nanosecond) => fixed::<Time64NanosecondType, 8>(array, |v| {
            micros(&TimeUnit::Nanosecond, v).to_be_bytes()
        }),
        other => {
            return Err(ArrowError::NotYetImplemented(format!(
                "COPY (FORMAT binary) has no binary form for a column of type {other}; use text or csv"
            )));
        }
    })
}

/// A numeric field: `v` × 10^-`scale`.
fn numeric_field(v: i128, scale: u8, out: &mut Vec<u8>) -> Result<(), ArrowError> {
    let mut value = [0u8; 8 + 2 * GROUPS];
    let len = numeric_bytes(v, scale, &mut value);
    field(out, &value[..len])
}

/// Base-10000 digits an i128 and its fraction can need: 39 decimal digits
/// of which up to 38 after the point, 11 groups on either side of it.
const GROUPS: usize = 22;

/// PostgreSQL's numeric send form of `v` × 10^-`scale` (scale ≤ 38) into
/// `out`: digit count, weight (the power of 10000 of the first digit),
/// sign, display scale, then base-10000 digits without leading or
/// trailing zeros, as `numeric_send` writes them. Returns the length.
pub fn numeric_bytes(v: i128, scale: u8, out: &mut [u8; 8 + 2 * GROUPS]) -> usize {
    // Decimal digits of |v|, least significant first.
    let (mut rev, mut n, mut u) = ([0u8; 40], 0usize, v.unsigned_abs());
    while u > 0 {
        rev[n] = (u % 10) as u8;
        u /= 10;
        n += 1;
    }
    let s = usize::from(scale.min(38));
    let digit = |p: isize| -> i16 {
        usize::try_from(p)
            .ok()
            .and_then(|p| rev.get(p).filter(|_| p < n))
            .map_or(0, |d| i16::from(*d))
    };
    let group = |top: isize| {
        digit(top) * 1000 + digit(top - 1) * 100 + digit(top - 2) * 10 + digit(top - 3)
    };
    let int_groups = n.saturating_sub(s).div_ceil(4).max(1);
    let frac_groups = s.div_ceil(4);
    let mut groups = [0i16; GROUPS];
    let mut count = 0;
    let point = s as isize;
    for k in (0..int_groups).rev() {
        groups[count] = group(point + 4 * k as isize + 3);
        count += 1;
    }
    for j in 0..frac_groups {
        groups[count] = group(point - 1 - 4 * j as isize);
        count += 1;
    }
    let mut weight = int_groups as i16 - 1;
    let first = groups[..count].iter().position(|g| *g != 0);
    let last = groups[..count].iter().rposition(|g| *g != 0);
    let kept = match (first, last) {
        (Some(first), Some(last)) => {
            weight -= first as i16;
            &groups[first..=last]
        }
        _ => {
            weight = 0;
            &groups[..0]
        }
    };
    let sign: u16 = if v < 0 { 0x4000 } else { 0 };
    out[0..2].copy_from_slice(&(kept.len() as i16).to_be_bytes());
    out[2..4].copy_from_slice(&weight.to_be_bytes());
    out[4..6].copy_from_slice(&sign.to_be_bytes());
    out[6..8].copy_from_slice(&u16::from(scale).to_be_bytes());
    for (i, g) in kept.iter().enumerate() {
        out[8 + 2 * i..10 + 2 * i].copy_from_slice(&g.to_be_bytes());
    }
    8 + 2 * kept.len()
}

/// A numeric's send form as a NUMERIC(`precision`, `scale`) value in
/// units of 10^-scale, rounded half away from zero to the scale as
/// PostgreSQL rounds a value into a column's.
pub fn numeric_value(bytes: &[u8], precision: u8, scale: u8) -> Result<i128, String> {
    let word = |i: usize| {
        bytes
            .get(i..i + 2)
            .map(|b| u16::from_be_bytes([b[0], b[1]]))
            .ok_or_else(|| "numeric: too few bytes".to_owned())
    };
    let ndigits = usize::from(word(0)?);
    let weight = i32::from(word(2)? as i16);
    let sign = word(4)?;
    if bytes.len() != 8 + 2 * ndigits {
        return Err(format!(
            "numeric: {ndigits} digits take {} bytes, got {}",
            8 + 2 * ndigits,
            bytes.len()
        ));
    }
    let negative = match sign {
        0x0000 => false,
        0x4000 => true,
        0xC000 => return Err("NaN does not fit a NUMERIC column here".into()),
        0xD000 | 0xF000 => return Err("infinity does not fit a NUMERIC column".into()),
        other => {
            return Err(format!(
                "invalid sign in external \"numeric\" value: {other:#x}"
            ));
        }
    };
    let overflow = || format!("numeric field overflow: precision {precision}, scale {scale}");
    let (mut acc, mut round): (i128, Option<i128>) = (0, None);
    for i in 0..ndigits {
        let d = i128::from(word(8 + 2 * i)?);
        if d > 9999 {
            return Err("invalid digit in external \"numeric\" value".into());
        }
        // The power of ten this digit's units stand for, in units of 10^-scale.
        let e = 4 * (weight - i as i32) + i32::from(scale);
        if e >= 0 && d == 0 {
            // A zero adds nothing, however high its place.
            continue;
        }
        if e >= 0 {
            let unit = 10i128.checked_pow(e.unsigned_abs()).ok_or_else(overflow)?;
            acc = d
                .checked_mul(unit)
                .and_then(|x| acc.checked_add(x))
                .ok_or_else(overflow)?;
        } else if round.is_none() {
            // The first digit past the scale decides the rounding.
            let cut = e.unsigned_abs();
            if cut < 4 {
                acc = acc.checked_add(d / 10i128.pow(cut)).ok_or_else(overflow)?;
                round = Some(d / 10i128.pow(cut - 1) % 10);
            } else {
                round = Some(if cut == 4 { d / 1000 } else { 0 });
            }
        }
    }
    if round.is_some_and(|r| r >= 5) {
        acc = acc.checked_add(1).ok_or_else(overflow)?;
    }
    if acc >= 10i128.pow(u32::from(precision.min(38))) {
        return Err(overflow());
    }
    Ok(if negative { -acc } else { acc })
}

/// A date or timestamp beyond what a column stores (PostgreSQL's
/// `infinity` and `-infinity` among them).
fn infinity(what: &str) -> (LineFault, String) {
    (
        LineFault::BadBinary,
        format!("{what} out of range: infinity and -infinity are not stored"),
    )
}

/// One loaded column's values, decoded into a builder of its type.
enum Decoder {
    Bool(BooleanBuilder),
    Int32(Int32Builder),
    Int64(Int64Builder),
    Float64(Float64Builder),
    Text(StringBuilder),
    Bytes(BinaryBuilder),
    Date(Date32Builder),
    Timestamp(TimestampMicrosecondBuilder),
    Numeric(Decimal128Builder, u8, u8),
}

impl Decoder {
    fn of(ty: &DataType) -> Option<Self> {
        Some(match ty {
            DataType::Boolean => Self::Bool(BooleanBuilder::new()),
            DataType::Int32 => Self::Int32(Int32Builder::new()),
            DataType::Int64 => Self::Int64(Int64Builder::new()),
            DataType::Float64 => Self::Float64(Float64Builder::new()),
            DataType::Utf8 => Self::Text(StringBuilder::new()),
            DataType::Binary => Self::Bytes(BinaryBuilder::new()),
            DataType::Date32 => Self::Date(Date32Builder::new()),
            DataType::Timestamp(TimeUnit::Microsecond, _) => {
                Self::Timestamp(TimestampMicrosecondBuilder::new())
            }
            DataType::Decimal128(p, s) if *s >= 0 => {
                Self::Numeric(Decimal128Builder::new(), *p, s.unsigned_abs())
            }
            _ => return None,
        })
    }

    /// The PostgreSQL type whose send form the column reads.
    fn type_name(&self) -> &'static str {
        match self {
            Self::Bool(_) => "boolean",
            Self::Int32(_) => "integer",
            Self::Int64(_) => "bigint",
            Self::Float64(_) => "double precision",
            Self::Text(_) => "text",
            Self::Bytes(_) => "bytea",
            Self::Date(_) => "date",
            Self::Timestamp(_) => "timestamp",
            Self::Numeric(..) => "numeric",
        }
    }

    fn push_null(&mut self) {
        match self {
            Self::Bool(b) => b.append_null(),
            Self::Int32(b) => b.append_null(),
            Self::Int64(b) => b.append_null(),
            Self::Float64(b) => b.append_null(),
            Self::Text(b) => b.append_null(),
            Self::Bytes(b) => b.append_null(),
            Self::Date(b) => b.append_null(),
            Self::Timestamp(b) => b.append_null(),
            Self::Numeric(b, ..) => b.append_null(),
        }
    }

    /// Appends a value; what is wrong with it, and its kind of fault.
    fn push(&mut self, v: &[u8]) -> Result<(), (LineFault, String)> {
        let width = |n: usize| -> Result<(), (LineFault, String)> {
            if v.len() == n {
                return Ok(());
            }
            Err((
                LineFault::BadBinary,
                format!(
                    "incorrect binary data format: {} takes {n} bytes, the field has {}",
                    self.type_name(),
                    v.len()
                ),
            ))
        };
        let be8 = |v: &[u8]| v.try_into().map(i64::from_be_bytes).unwrap_or(0);
        let be4 = |v: &[u8]| v.try_into().map(i32::from_be_bytes).unwrap_or(0);
        match self {
            Self::Bool(_) => width(1)?,
            Self::Int32(_) | Self::Date(_) => width(4)?,
            Self::Int64(_) | Self::Float64(_) | Self::Timestamp(_) => width(8)?,
            _ => {}
        }
        match self {
            Self::Bool(b) => b.append_value(v[0] != 0),
            Self::Int32(b) => b.append_value(be4(v)),
            Self::Int64(b) => b.append_value(be8(v)),
            Self::Float64(b) => b.append_value(f64::from_bits(be8(v) as u64)),
            Self::Text(b) => b.append_value(std::str::from_utf8(v).map_err(|_| {
                (
                    LineFault::NotUtf8,
                    "invalid byte sequence for encoding \"UTF8\"".to_owned(),
                )
            })?),
            Self::Bytes(b) => b.append_value(v),
            // PostgreSQL's infinities (the extreme values) have no
            // counterpart in a stored date or timestamp.
            Self::Date(b) => match be4(v) {
                i32::MIN | i32::MAX => return Err(infinity("date")),
                days => b.append_value(
                    days.checked_add(EPOCH_DAYS)
                        .ok_or_else(|| infinity("date"))?,
                ),
            },
            Self::Timestamp(b) => match be8(v) {
                i64::MIN | i64::MAX => return Err(infinity("timestamp")),
                micros => b.append_value(
                    micros
                        .checked_add(EPOCH_MICROS)
                        .ok_or_else(|| infinity("timestamp"))?,
                ),
            },
            Self::Numeric(b, p, s) => {
                let value = numeric_value(v, *p, *s).map_err(|e| (LineFault::BadBinary, e))?;
                b.append_value(value);
            }
        }
        Ok(())
    }

    /// The values so far as an array of `ty` (the builder's, with the
    /// column's time zone or precision); the builder starts again empty.
    fn finish(&mut self, ty: &DataType) -> Result<ArrayRef, ArrowError> {
        Ok(match self {
            Self::Bool(b) => Arc::new(b.finish()),
            Self::Int32(b) => Arc::new(b.finish()),
            Self::Int64(b) => Arc::new(b.finish()),
            Self::Float64(b) => Arc::new(b.finish()),
            Self::Text(b) => Arc::new(b.finish()),
            Self::Bytes(b) => Arc::new(b.finish()),
            Self::Date(b) => Arc::new(b.finish()),
            Self::Timestamp(b) => {
                let zone = match ty {
                    DataType::Timestamp(_, zone) => zone.clone(),
                    _ => None,
                };
                Arc::new(b.finish().with_timezone_opt(zone))
            }
            Self::Numeric(b, p, s) => {
                let scale = i8::try_from(*s).unwrap_or(i8::MAX);
                Arc::new(b.finish().with_precision_and_scale(*p, scale)?)
            }
        })
    }
}

/// A binary COPY FROM's rows as they arrive: the header once, then whole
/// rows decoded into the loaded columns' builders until the caller takes
/// them as arrays.
pub struct Reader {
    columns: Vec<(String, DataType, Decoder)>,
    header_read: bool,
    ended: bool,
    /// Rows read so far (PostgreSQL's "line" of a binary COPY).
    line: u64,
    /// The line of the first row the builders hold.
    first: u64,
    held: usize,
    /// A row failed to decode: its earlier fields are in the builders, so
    /// nothing more is read or taken.
    failed: bool,
}

impl std::fmt::Debug for Reader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reader")
            .field("line", &self.line)
            .field("held", &self.held)
            .finish()
    }
}

impl Reader {
    /// A reader of rows of `columns` (name and type, in the data's order);
    /// `None` names a column whose type has no binary form here.
    pub fn new(columns: Vec<(String, DataType)>) -> Result<Self, String> {
        let columns = columns
            .into_iter()
            .map(|(name, ty)| match Decoder::of(&ty) {
                Some(d) => Ok((name, ty, d)),
                None => Err(format!(
                    "COPY FROM (FORMAT binary) cannot read column \"{name}\" of type {ty}"
                )),
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            columns,
            header_read: false,
            ended: false,
            line: 0,
            first: 1,
            held: 0,
            failed: false,
        })
    }

    /// Rows decoded and not yet taken.
    pub fn held(&self) -> usize {
        self.held
    }

    /// Whether the trailer was read: what follows is ignored.
    pub fn ended(&self) -> bool {
        self.ended
    }

    fn fault(&self, fault: LineFault, reason: impl Into<String>) -> LoadError {
        LoadError::Line {
            line: self.line,
            fault,
            reason: reason.into(),
        }
    }

    /// Reads the header and whole rows from `data` until `limit` rows are
    /// held or the data runs out; the number of bytes read (the rest,
    /// part of a row, waits for more).
    pub fn read(&mut self, data: &[u8], limit: usize) -> Result<usize, LoadError> {
        if self.failed {
            return Err(self.fault(LineFault::BadRecord, "COPY stopped at an earlier row"));
        }
        if self.ended && !data.is_empty() {
            return Err(self.fault(LineFault::BadRecord, "received copy data after EOF marker"));
        }
        let mut at = 0;
        if !self.header_read {
            let Some(used) = self.header(data)? else {
                return Ok(0);
            };
            at = used;
            self.header_read = true;
        }
        while !self.ended && self.held < limit {
            let Some(end) = self.row_end(&data[at..])? else {
                break;
            };
            let row = &data[at..at + end];
            at += end;
            if row == TRAILER {
                self.ended = true;
                if at < data.len() {
                    return Err(
                        self.fault(LineFault::BadRecord, "received copy data after EOF marker")
                    );
                }
                break;
            }
            self.line += 1;
            if let Err(e) = self.decode(row) {
                self.failed = true;
                return Err(e);
            }
            self.held += 1;
        }
        Ok(at)
    }

    /// The header's length, once `data` holds it whole.
    fn header(&self, data: &[u8]) -> Result<Option<usize>, LoadError> {
        if data.len() < HEADER.len() {
            return Ok(None);
        }
        if data[..11] != HEADER[..11] {
            return Err(self.fault(LineFault::BadRecord, "COPY file signature not recognized"));
        }
        let flags = u32::from_be_bytes([data[11], data[12], data[13], data[14]]);
        if flags & (1 << 16) != 0 {
            return Err(self.fault(LineFault::BadRecord, "COPY data with OIDs is not supported"));
        }
        if flags & 0xffff_0000 != 0 {
            return Err(self.fault(
                LineFault::BadRecord,
                "unrecognized critical flags in COPY file header",
            ));
        }
        let extension = u32::from_be_bytes([data[15], data[16], data[17], data[18]]);
        let end = HEADER.len() + usize::try_from(extension).unwrap_or(usize::MAX);
        Ok((data.len() >= end).then_some(end))
    }

    /// Where the row at the start of `data` ends, once `data` holds it
    /// whole; its field count is checked.
    fn row_end(&self, data: &[u8]) -> Result<Option<usize>, LoadError> {
        let Some(count) = data.get(..2).map(|b| i16::from_be_bytes([b[0], b[1]])) else {
            return Ok(None);
        };
        if count == -1 {
            return Ok(Some(2));
        }
        if usize::try_from(count).ok() != Some(self.columns.len()) {
            return Err(LoadError::Line {
                line: self.line + 1,
                fault: LineFault::BadRecord,
                reason: format!(
                    "row field count is {count}, expected {}",
                    self.columns.len()
                ),
            });
        }
        let mut at = 2;
        for _ in 0..count {
            let Some(len) = data
                .get(at..at + 4)
                .map(|b| i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
            else {
                return Ok(None);
            };
            if len < -1 {
                return Err(LoadError::Line {
                    line: self.line + 1,
                    fault: LineFault::BadRecord,
                    reason: format!("invalid field size {len}"),
                });
            }
            at += 4 + usize::try_from(len).unwrap_or(0);
            if at > data.len() {
                return Ok(None);
            }
        }
        Ok(Some(at))
    }

    /// Decodes a whole row (its bounds checked by `row_end`).
    fn decode(&mut self, row: &[u8]) -> Result<(), LoadError> {
        let mut at = 2;
        let line = self.line;
        for (name, _, decoder) in &mut self.columns {
            let len = i32::from_be_bytes([row[at], row[at + 1], row[at + 2], row[at + 3]]);
            at += 4;
            let Ok(len) = usize::try_from(len) else {
                decoder.push_null();
                continue;
            };
            decoder
                .push(&row[at..at + len])
                .map_err(|(fault, reason)| LoadError::Line {
                    line,
                    fault,
                    reason: format!("{reason} (column \"{name}\")"),
                })?;
            at += len;
        }
        Ok(())
    }

    /// The rows held, as one array per column, and each row's line.
    pub fn take(&mut self) -> Result<(Vec<u64>, Vec<ArrayRef>), ArrowError> {
        if self.failed {
            return Err(ArrowError::InvalidArgumentError(
                "binary COPY stopped at a bad row: its rows are not taken".into(),
            ));
        }
        let lines = (self.first..self.first + self.held as u64).collect();
        let arrays = self
            .columns
            .iter_mut()
            .map(|(_, ty, d)| d.finish(ty))
            .collect::<Result<Vec<_>, _>>()?;
        self.first += self.held as u64;
        self.held = 0;
        Ok((lines, arrays))
    }

    /// The end of the data, with `rest` unread: only part of a row (or of
    /// the header) is an error; data that stops between rows without the
    /// trailer is whole, as PostgreSQL reads it.
    pub fn finish(&self, rest: &[u8]) -> Result<(), LoadError> {
        if !self.header_read {
            return Err(self.fault(LineFault::BadRecord, "COPY file signature not recognized"));
        }
        if !self.ended && !rest.is_empty() {
            return Err(self.fault(LineFault::BadRecord, "unexpected EOF in COPY data"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{
        Decimal128Array, Int32Array, RecordBatch, StringArray, TimestampMicrosecondArray,
    };
    use datafusion::arrow::datatypes::{Field, Schema};

    fn numeric(v: i128, scale: u8) -> Vec<u8> {
        let mut out = [0u8; 8 + 2 * GROUPS];
        let len = numeric_bytes(v, scale, &mut out);
        out[..len].to_vec()
    }

    fn words(v: &[i16]) -> Vec<u8> {
        v.iter().flat_map(|w| w.to_be_bytes()).collect()
    }

    #[test]
    fn numerics_are_written_as_numeric_send_writes_them() {
        // ndigits, weight, sign, dscale, digits.
        assert_eq!(numeric(1250, 2), words(&[2, 0, 0, 2, 12, 5000]));
        assert_eq!(numeric(-5, 1), words(&[1, -1, 0x4000, 1, 5000]));
        assert_eq!(numeric(0, 3), words(&[0, 0, 0, 3]));
        assert_eq!(numeric(100_000_000, 0), words(&[1, 2, 0, 0, 1]));
        assert_eq!(numeric(123_456_789, 4), words(&[3, 1, 0, 4, 1, 2345, 6789]));
        assert_eq!(numeric(1, 9), words(&[1, -3, 0, 9, 1000]));
    }

    #[test]
    fn numerics_read_back_and_round_to_the_column() {
        for (v, s) in [
            (1250i128, 2u8),
            (-5, 1),
            (0, 3),
            (123_456_789, 4),
            (1, 9),
            (i128::from(i64::MAX), 0),
            (-99_999_999_999_999_999_999_999_999_999_999_999_999, 38),
        ] {
            assert_eq!(numeric_value(&numeric(v, s), 38, s), Ok(v), "{v} {s}");
        }
        // 12.345 into NUMERIC(10, 2) is 12.35; -0.005 is -0.01.
        assert_eq!(numeric_value(&numeric(12_345, 3), 10, 2), Ok(1_235));
        assert_eq!(numeric_value(&numeric(-5, 3), 10, 2), Ok(-1));
        assert_eq!(numeric_value(&numeric(12_344, 3), 10, 2), Ok(1_234));
        // 1000.5 does not fit NUMERIC(4, 1); a sum past i128 is an error,
        // not a wrapped value.
        assert!(numeric_value(&numeric(10_005, 1), 4, 1).is_err());
        let huge = words(&[
            11, 9, 0, 4, 17, 141, 1834, 6046, 9231, 7316, 8730, 3715, 8841, 572, 9999,
        ]);
        assert!(numeric_value(&huge, 38, 1).is_err());
        // Zeros above any place i128 holds add nothing.
        assert_eq!(numeric_value(&words(&[2, 20, 0, 0, 0, 0]), 38, 0), Ok(0));
        assert!(numeric_value(&words(&[0, 0, 0xC000u16 as i16, 0]), 10, 2).is_err());
    }

    fn schema_batch() -> RecordBatch {
        let schema = Schema::new(vec![
            Field::new("id", DataType::Int32, false),
            Field::new("name", DataType::Utf8, true),
            Field::new(
                "at",
                DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into())),
                true,
            ),
            Field::new("price", DataType::Decimal128(10, 2), true),
        ]);
        let columns: Vec<ArrayRef> = vec![
            Arc::new(Int32Array::from(vec![1, -2])),
            Arc::new(StringArray::from(vec![Some("ünï"), None])),
            Arc::new(
                TimestampMicrosecondArray::from(vec![Some(EPOCH_MICROS + 1), Some(-1)])
                    .with_timezone("+00:00"),
            ),
            Arc::new(
                Decimal128Array::from(vec![Some(1250), None])
                    .with_precision_and_scale(10, 2)
                    .unwrap_or_else(|e| panic!("{e}")),
            ),
        ];
        RecordBatch::try_new(Arc::new(schema), columns).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn a_batch_reads_back_as_it_was_written_in_pieces() {
        let batch = schema_batch();
        let mut data = HEADER.to_vec();
        let mut ends = Vec::new();
        encode_into(&batch, &mut data, &mut ends).unwrap_or_else(|e| panic!("{e}"));
        // The first row: 4 fields, id 1 as int4.
        assert_eq!(&data[19..29], &[0, 4, 0, 0, 0, 4, 0, 0, 0, 1]);
        data.extend_from_slice(&TRAILER);
        let columns = batch
            .schema()
            .fields()
            .iter()
            .map(|f| (f.name().clone(), f.data_type().clone()))
            .collect();
        let mut reader = Reader::new(columns).unwrap_or_else(|e| panic!("{e}"));
        // Byte by byte: a row is read only when it is whole.
        let mut buffer = Vec::new();
        for b in &data {
            buffer.push(*b);
            let used = reader.read(&buffer, 100).unwrap_or_else(|e| panic!("{e}"));
            buffer.drain(..used);
        }
        assert!(reader.ended() && buffer.is_empty());
        reader.finish(&buffer).unwrap_or_else(|e| panic!("{e}"));
        let (lines, arrays) = reader.take().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(lines, vec![1, 2]);
        let read = RecordBatch::try_new(batch.schema(), arrays).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(read, batch);
    }

    #[test]
    fn bad_binary_data_is_refused_with_its_row() {
        let columns = vec![("id".to_owned(), DataType::Int32)];
        let mut reader = Reader::new(columns.clone()).unwrap_or_else(|e| panic!("{e}"));
        let mut data = HEADER.to_vec();
        data.extend_from_slice(&[0, 1, 0, 0, 0, 4, 0, 0, 0, 7]);
        // An int8 where the column is int4.
        data.extend_from_slice(&[0, 1, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0, 7]);
        let e = reader.read(&data, 100).err().map(|e| e.to_string());
        assert_eq!(
            e.as_deref(),
            Some(
                "incorrect binary data format: integer takes 4 bytes, the field has 8 (column \"id\") (line 2)"
            )
        );
        let mut reader = Reader::new(columns.clone()).unwrap_or_else(|e| panic!("{e}"));
        let e = reader.read(b"PGCOPY\nxxxxxxxxxxxxxxx", 10).err();
        assert!(e.is_some_and(|e| e.to_string().contains("signature")));
        let mut reader = Reader::new(columns).unwrap_or_else(|e| panic!("{e}"));
        let mut two = HEADER.to_vec();
        two.extend_from_slice(&[0, 2]);
        let e = reader.read(&two, 10).err();
        assert!(e.is_some_and(|e| e.to_string().contains("row field count is 2, expected 1")));
        // Part of a row at the end of the data.
        let mut reader =
            Reader::new(vec![("id".to_owned(), DataType::Int32)]).unwrap_or_else(|e| panic!("{e}"));
        let mut cut = HEADER.to_vec();
        cut.extend_from_slice(&[0, 1, 0, 0]);
        let used = reader.read(&cut, 10).unwrap_or_else(|e| panic!("{e}"));
        assert!(reader.finish(&cut[used..]).is_err());
        // A length below -1, and data after the trailer.
        let reader_of = || {
            Reader::new(vec![("id".to_owned(), DataType::Int32)]).unwrap_or_else(|e| panic!("{e}"))
        };
        let mut negative = HEADER.to_vec();
        negative.extend_from_slice(&[0, 1, 0xff, 0xff, 0xff, 0xfe]);
        let e = reader_of().read(&negative, 10).err();
        assert!(e.is_some_and(|e| e.to_string().contains("invalid field size -2")));
        let mut after = HEADER.to_vec();
        after.extend_from_slice(&[0xff, 0xff, 0]);
        let e = reader_of().read(&after, 10).err();
        assert!(e.is_some_and(|e| e.to_string().contains("after EOF marker")));
        // -infinity is refused, not stored as a date millions of years ago.
        let mut reader =
            Reader::new(vec![("d".to_owned(), DataType::Date32)]).unwrap_or_else(|e| panic!("{e}"));
        let mut minus = HEADER.to_vec();
        minus.extend_from_slice(&[0, 1, 0, 0, 0, 4, 0x80, 0, 0, 0]);
        let e = reader.read(&minus, 10).err();
        assert!(e.is_some_and(|e| e.to_string().contains("infinity")));
        assert!(reader.take().is_err());
    }
}
