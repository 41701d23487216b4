//! Which typed value a stored value or key field becomes in a column, for
//! every place a row is decoded into.
//!
//! A scan decodes into Arrow builders (`decode::BatchSink`); a prepared
//! point read decodes its one row into cells the wire encodes directly
//! (`row::RowDecoder`), without a batch. Both must take and refuse the same
//! values, or a row would read differently by the path it took: so the
//! rules are written once here, over a [`Target`] each of them implements.

use base64::Engine as _;

use crate::catalog::ColumnType;
use crate::keys::KeyRef;
use crate::storage::ValueRef;
use crate::storage::value::format_datetime;

/// What a column holds, as far as the rules care.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Int,
    BigInt,
    Double,
    /// `TEXT` and `UUID` (a UUID reads as its hyphenated text).
    Text,
    Boolean,
    Timestamp,
    Date,
    /// A NUMERIC, in units of 10^-scale.
    Decimal(u8),
    Bytea,
}

impl Kind {
    /// The kind of a column of type `t`.
    pub fn of(t: ColumnType) -> Self {
        match t {
            ColumnType::Int => Self::Int,
            ColumnType::BigInt => Self::BigInt,
            ColumnType::Double => Self::Double,
            ColumnType::Text | ColumnType::Uuid => Self::Text,
            ColumnType::Boolean => Self::Boolean,
            ColumnType::Timestamp => Self::Timestamp,
            ColumnType::Date => Self::Date,
            ColumnType::Numeric { scale, .. } => Self::Decimal(scale),
            ColumnType::Bytea => Self::Bytea,
        }
    }
}

/// One column's typed appends: a target takes the one its [`Kind`] names
/// (the rules call no other), one per row.
pub trait Target {
    /// An `INT`.
    fn int(&mut self, v: i32);
    /// A `BIGINT`.
    fn bigint(&mut self, v: i64);
    /// A `DOUBLE`.
    fn double(&mut self, v: f64);
    /// A `TEXT` (a UUID as its hyphenated text).
    fn text(&mut self, v: &str);
    /// A `BOOLEAN`.
    fn boolean(&mut self, v: bool);
    /// Microseconds since 1970 in UTC.
    fn micros(&mut self, v: i64);
    /// Days since 1970-01-01.
    fn days(&mut self, v: i32);
    /// In units of 10^-scale of the column's kind.
    fn decimal(&mut self, v: i128);
    /// A `BYTEA`.
    fn bytes(&mut self, v: &[u8]);
    /// NULL.
    fn null(&mut self);
}

/// The columns of the row being decoded, each a target, by position in the
/// decoded projection.
pub trait Columns {
    /// Appends a property value to column `b`; `false` if it cannot hold it.
    fn value(&mut self, b: usize, v: ValueRef<'_>, lenient: bool) -> bool;
    /// Appends a key field's value to column `b`; `false` if it cannot hold
    /// it.
    fn key(&mut self, b: usize, v: &KeyRef<'_>) -> bool;
    /// Appends NULL to column `b`.
    fn null(&mut self, b: usize);
}

/// Microseconds in a day: a DATE's key and stored DateTime are its midnight.
const DAY_MICROS: i64 = 86_400_000_000;

/// The days since 1970-01-01 of the date `micros` falls on.
fn days(micros: i64) -> Option<i32> {
    i32::try_from(micros.div_euclid(DAY_MICROS)).ok()
}

/// Appends a property value to `t`, of kind `kind`; `false` if the column
/// cannot hold it. `lenient` (raw columns of mixed types) converts what a
/// typed column would refuse.
#[inline]
pub fn put_value(kind: Kind, t: &mut impl Target, v: ValueRef<'_>, lenient: bool) -> bool {
    match (kind, v) {
        (Kind::Int, ValueRef::Int32(i)) => t.int(i),
        (Kind::BigInt, ValueRef::Int64(i)) => t.bigint(i),
        (Kind::BigInt, ValueRef::Int32(i)) => t.bigint(i64::from(i)),
        (Kind::Double, ValueRef::Double(d)) => t.double(d),
        (Kind::Double, ValueRef::Int32(i)) => t.double(f64::from(i)),
        (Kind::Double, ValueRef::Int64(i)) if lenient => t.double(i as f64),
        (Kind::Text, ValueRef::String(s)) => t.text(s),
        (Kind::Text, ValueRef::Guid(g)) => t.text(
            g.hyphenated()
                .encode_lower(&mut uuid::Uuid::encode_buffer()),
        ),
        (Kind::Text, other) if lenient => t.text(&text_form(other)),
        (Kind::Boolean, ValueRef::Boolean(x)) => t.boolean(x),
        (Kind::Timestamp, ValueRef::DateTime(d)) => t.micros(d.timestamp_micros()),
        (Kind::Decimal(scale), ValueRef::String(s)) => {
            match crate::catalog::parse_decimal(s, scale) {
                Some(v) => t.decimal(v),
                None => return false,
            }
        }
        (Kind::Decimal(scale), ValueRef::Int32(i)) => {
            match i128::from(i).checked_mul(10i128.pow(u32::from(scale))) {
                Some(v) => t.decimal(v),
                None => return false,
            }
        }
        // The date it falls on (a DATE is stored as its midnight).
        (Kind::Date, ValueRef::DateTime(d)) => match days(d.timestamp_micros()) {
            Some(d) => t.days(d),
            None => return false,
        },
        (Kind::Bytea, ValueRef::Binary(x)) => t.bytes(x),
        _ => return false,
    }
    true
}

/// Appends a key field's value to `t`, of kind `kind`; `false` if the
/// column cannot hold it.
#[inline]
pub fn put_key(kind: Kind, t: &mut impl Target, v: &KeyRef<'_>) -> bool {
    match (kind, v) {
        (Kind::Int, KeyRef::Int(i)) => match i32::try_from(*i) {
            Ok(i) => t.int(i),
            Err(_) => return false,
        },
        (Kind::BigInt, KeyRef::Int(i)) => t.bigint(*i),
        // An integer column in a free-text field: its decimal text.
        // (Canonical decimal only: `+7` or `007` would never match a lookup.)
        (Kind::Int, KeyRef::Text(s)) => match canonical_int(s).map(i32::try_from) {
            Some(Ok(i)) => t.int(i),
            _ => return false,
        },
        (Kind::BigInt, KeyRef::Text(s)) => match canonical_int(s) {
            Some(i) => t.bigint(i),
            None => return false,
        },
        (Kind::Text, KeyRef::Text(s)) => t.text(s.as_ref()),
        (Kind::Text, KeyRef::Uuid(u)) => t.text(
            uuid::Uuid::from_u128(*u)
                .hyphenated()
                .encode_lower(&mut uuid::Uuid::encode_buffer()),
        ),
        (Kind::Double, KeyRef::Double(d)) => t.double(d.get()),
        (Kind::Boolean, KeyRef::Bool(x)) => t.boolean(*x),
        (Kind::Timestamp, KeyRef::Timestamp(m)) => t.micros(*m),
        (Kind::Decimal(_), KeyRef::Int(i)) => t.decimal(i128::from(*i)),
        (Kind::Date, KeyRef::Timestamp(m)) => match days(*m) {
            Some(d) => t.days(d),
            None => return false,
        },
        (_, KeyRef::Null) => t.null(),
        _ => return false,
    }
    true
}

/// The integer `s` spells as Rust and PostgreSQL print it: an optional
/// `-`, then digits without a leading zero (`0` alone); no `+`, no `-0`.
/// Checked byte by byte rather than by printing the value back, since a
/// scan reads one per row.
fn canonical_int(s: &str) -> Option<i64> {
    let (negative, digits) = match s.as_bytes() {
        [b'-', rest @ ..] => (true, rest),
        all => (false, all),
    };
    match digits {
        [] => return None,
        [b'0'] if !negative => return Some(0),
        [b'0', ..] => return None,
        _ => {}
    }
    // Accumulated negative, so that i64::MIN fits.
    let mut n: i64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        n = n.checked_mul(10)?.checked_sub(i64::from(d - b'0'))?;
    }
    if negative { Some(n) } else { n.checked_neg() }
}

/// A value's text form, for raw columns of mixed types.
pub(super) fn text_form(v: ValueRef<'_>) -> String {
    match v {
        ValueRef::String(s) => s.to_owned(),
        ValueRef::Binary(b) => base64::engine::general_purpose::STANDARD.encode(b),
        ValueRef::Boolean(b) => b.to_string(),
        ValueRef::DateTime(t) => format_datetime(&t),
        ValueRef::Double(d) => d.to_string(),
        ValueRef::Guid(g) => g.to_string(),
        ValueRef::Int32(i) => i.to_string(),
        ValueRef::Int64(i) => i.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::canonical_int;

    #[test]
    fn canonical_int_takes_exactly_what_an_integer_prints_as() {
        for i in [
            0i64,
            7,
            -7,
            10,
            -10,
            55,
            i64::from(i32::MAX),
            i64::MAX,
            i64::MIN,
            -1,
        ] {
            assert_eq!(canonical_int(&i.to_string()), Some(i), "{i}");
        }
        for bad in [
            "",
            "-",
            "+7",
            "007",
            "-0",
            "-07",
            "7 ",
            " 7",
            "7a",
            "1e3",
            "99999999999999999999",
        ] {
            assert_eq!(canonical_int(bad), None, "{bad:?}");
        }
    }
}
