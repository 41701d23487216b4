//! A literal as a key value of a column's type: the one conversion that
//! the pushdown's ranges and the prepared point reads share.

use datafusion::common::ScalarValue;

use crate::catalog::ColumnType;
use crate::keys::{KeyFloat, KeyValue};

/// `v` as a value of a key field holding a `t` column; `None` where it is
/// not one (a float against an integer, a number against text, a UUID
/// column compared with text that is not a UUID's canonical spelling,
/// which DataFusion compares as text), and for NULL.
pub fn key_of_scalar(t: ColumnType, v: &ScalarValue) -> Option<KeyValue> {
    use ScalarValue as S;
    let int = match v {
        S::Int8(Some(i)) => Some(i64::from(*i)),
        S::Int16(Some(i)) => Some(i64::from(*i)),
        S::Int32(Some(i)) => Some(i64::from(*i)),
        S::Int64(Some(i)) => Some(*i),
        S::UInt8(Some(i)) => Some(i64::from(*i)),
        S::UInt16(Some(i)) => Some(i64::from(*i)),
        S::UInt32(Some(i)) => Some(i64::from(*i)),
        S::UInt64(Some(i)) => i64::try_from(*i).ok(),
        _ => None,
    };
    let text = match v {
        S::Utf8(Some(s)) | S::LargeUtf8(Some(s)) | S::Utf8View(Some(s)) => Some(s.as_str()),
        _ => None,
    };
    match t {
        ColumnType::Int => int.filter(|i| i32::try_from(*i).is_ok()).map(KeyValue::Int),
        ColumnType::BigInt => int.map(KeyValue::Int),
        ColumnType::Text => text.map(|s| KeyValue::Text(s.to_owned())),
        ColumnType::Double => match v {
            S::Float64(Some(d)) => Some(KeyValue::Double(KeyFloat::new(*d))),
            S::Float32(Some(d)) => Some(KeyValue::Double(KeyFloat::new(f64::from(*d)))),
            _ => None,
        },
        ColumnType::Boolean => match v {
            S::Boolean(Some(b)) => Some(KeyValue::Bool(*b)),
            _ => None,
        },
        ColumnType::Timestamp => {
            let micros = match v {
                S::TimestampMicrosecond(Some(t), _) => Some(*t),
                S::TimestampMillisecond(Some(t), _) => t.checked_mul(1_000),
                S::TimestampSecond(Some(t), _) => t.checked_mul(1_000_000),
                // Only a whole microsecond is a value the column holds.
                S::TimestampNanosecond(Some(t), _) if t % 1_000 == 0 => Some(t / 1_000),
                _ => None,
            };
            micros.map(KeyValue::Timestamp)
        }
        ColumnType::Numeric { scale, .. } => {
            // Exactly at the column's scale, or not a key value.
            let (units, at) = match v {
                S::Decimal128(Some(u), _, s) => (*u, i32::from(*s)),
                S::Int64(Some(i)) => (i128::from(*i), 0),
                S::Int32(Some(i)) => (i128::from(*i), 0),
                _ => return None,
            };
            let shift = i32::from(scale) - at;
            let scaled = if shift >= 0 {
                units.checked_mul(10i128.checked_pow(shift.unsigned_abs())?)?
            } else {
                let d = 10i128.checked_pow(shift.unsigned_abs())?;
                (units % d == 0).then(|| units / d)?
            };
            i64::try_from(scaled).ok().map(KeyValue::Int)
        }
        ColumnType::Date => match v {
            S::Date32(Some(days)) => crate::exec::write::encode::midnight(*days)
                .map(|t| KeyValue::Timestamp(t.timestamp_micros())),
            _ => None,
        },
        ColumnType::Uuid => {
            let u = uuid::Uuid::try_parse(text?).ok()?;
            (u.hyphenated().to_string() == text?).then(|| KeyValue::Uuid(u.as_u128()))
        }
        ColumnType::Bytea => None,
    }
}
