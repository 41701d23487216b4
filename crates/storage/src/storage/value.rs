//! Property values: the eight EDM types of the service.

use chrono::{DateTime, TimeZone, Utc};
use uuid::Uuid;

/// One property value, typed as the service types it.
#[derive(Debug, Clone)]
pub enum EdmValue {
    /// Edm.String: UTF-16 in the service, at most 64 KiB.
    String(String),
    /// Edm.Binary: at most 64 KiB.
    Binary(Vec<u8>),
    /// Edm.Boolean.
    Boolean(bool),
    /// Edm.DateTime: UTC, 100-nanosecond precision.
    DateTime(DateTime<Utc>),
    /// Edm.Double.
    Double(f64),
    /// Edm.Guid.
    Guid(Uuid),
    /// Edm.Int32.
    Int32(i32),
    /// Edm.Int64.
    Int64(i64),
}

/// The type of an `EdmValue`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EdmType {
    /// Edm.String.
    String,
    /// Edm.Binary.
    Binary,
    /// Edm.Boolean.
    Boolean,
    /// Edm.DateTime.
    DateTime,
    /// Edm.Double.
    Double,
    /// Edm.Guid.
    Guid,
    /// Edm.Int32.
    Int32,
    /// Edm.Int64.
    Int64,
}

impl EdmType {
    /// The OData name of the type, e.g. `Edm.Int64`.
    pub fn odata_name(self) -> &'static str {
        match self {
            EdmType::String => "Edm.String",
            EdmType::Binary => "Edm.Binary",
            EdmType::Boolean => "Edm.Boolean",
            EdmType::DateTime => "Edm.DateTime",
            EdmType::Double => "Edm.Double",
            EdmType::Guid => "Edm.Guid",
            EdmType::Int32 => "Edm.Int32",
            EdmType::Int64 => "Edm.Int64",
        }
    }

    /// The type an OData name (`Edm.Int64`) denotes.
    pub fn from_odata_name(name: &str) -> Option<Self> {
        [
            EdmType::String,
            EdmType::Binary,
            EdmType::Boolean,
            EdmType::DateTime,
            EdmType::Double,
            EdmType::Guid,
            EdmType::Int32,
            EdmType::Int64,
        ]
        .into_iter()
        .find(|t| t.odata_name() == name)
    }
}

impl EdmValue {
    /// The value's type.
    pub fn edm_type(&self) -> EdmType {
        match self {
            EdmValue::String(_) => EdmType::String,
            EdmValue::Binary(_) => EdmType::Binary,
            EdmValue::Boolean(_) => EdmType::Boolean,
            EdmValue::DateTime(_) => EdmType::DateTime,
            EdmValue::Double(_) => EdmType::Double,
            EdmValue::Guid(_) => EdmType::Guid,
            EdmValue::Int32(_) => EdmType::Int32,
            EdmValue::Int64(_) => EdmType::Int64,
        }
    }

    /// Bytes the value counts for in the service's entity size formula.
    pub fn stored_size(&self) -> usize {
        match self {
            EdmValue::String(s) => 4 + utf16_bytes(s),
            EdmValue::Binary(b) => 4 + b.len(),
            EdmValue::Boolean(_) => 1,
            EdmValue::DateTime(_) | EdmValue::Double(_) | EdmValue::Int64(_) => 8,
            EdmValue::Guid(_) => 16,
            EdmValue::Int32(_) => 4,
        }
    }
}

/// Two values are equal when they have one type and the same stored bits (so a
/// NaN equals itself: this is identity of stored data, not SQL comparison).
impl PartialEq for EdmValue {
    fn eq(&self, other: &Self) -> bool {
        use EdmValue::*;
        match (self, other) {
            (String(a), String(b)) => a == b,
            (Binary(a), Binary(b)) => a == b,
            (Boolean(a), Boolean(b)) => a == b,
            (DateTime(a), DateTime(b)) => a == b,
            (Double(a), Double(b)) => a.to_bits() == b.to_bits(),
            (Guid(a), Guid(b)) => a == b,
            (Int32(a), Int32(b)) => a == b,
            (Int64(a), Int64(b)) => a == b,
            _ => false,
        }
    }
}

/// Text as a person reads it: strings raw, DateTime as the service writes it,
/// Binary in base64, Double as OData spells NaN and the infinities.
impl std::fmt::Display for EdmValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use base64::Engine as _;
        match self {
            EdmValue::String(s) => f.write_str(s),
            EdmValue::Binary(b) => {
                f.write_str(&base64::engine::general_purpose::STANDARD.encode(b))
            }
            EdmValue::Boolean(b) => write!(f, "{b}"),
            EdmValue::DateTime(t) => f.write_str(&format_datetime(t)),
            EdmValue::Double(d) if d.is_nan() => f.write_str("NaN"),
            EdmValue::Double(d) if d.is_infinite() => {
                f.write_str(if *d > 0.0 { "Infinity" } else { "-Infinity" })
            }
            EdmValue::Double(d) => write!(f, "{d}"),
            EdmValue::Guid(g) => write!(f, "{g}"),
            EdmValue::Int32(i) => write!(f, "{i}"),
            EdmValue::Int64(i) => write!(f, "{i}"),
        }
    }
}

/// Length of a string in UTF-16 bytes, the unit of the service's size limits.
pub fn utf16_bytes(s: &str) -> usize {
    if s.is_ascii() {
        s.len() * 2
    } else {
        s.encode_utf16().count() * 2
    }
}

/// 100-nanosecond ticks since the Unix epoch: the precision the service keeps.
pub type Ticks = i64;

/// A DateTime as ticks, dropping digits below 100 ns.
pub fn to_ticks(t: &DateTime<Utc>) -> Ticks {
    t.timestamp()
        .saturating_mul(10_000_000)
        .saturating_add(i64::from(t.timestamp_subsec_nanos() / 100))
}

/// Ticks back to a DateTime (saturating at chrono's range).
pub fn from_ticks(ticks: Ticks) -> DateTime<Utc> {
    let secs = ticks.div_euclid(10_000_000);
    let nanos = (ticks.rem_euclid(10_000_000) * 100) as u32;
    Utc.timestamp_opt(secs, nanos)
        .single()
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
}

/// Ticks of 1601-01-01T00:00:00Z, the earliest DateTime the service stores.
pub const MIN_DATETIME_TICKS: Ticks = -116_444_736_000_000_000;
/// Ticks of 9999-12-31T23:59:59.9999999Z, the latest.
pub const MAX_DATETIME_TICKS: Ticks = 2_534_023_007_999_999_999;

/// Formats a DateTime as the service does: UTC with 7 fractional digits.
pub fn format_datetime(t: &DateTime<Utc>) -> String {
    // chrono has no 7-digit fraction specifier.
    format!(
        "{}.{:07}Z",
        t.format("%Y-%m-%dT%H:%M:%S"),
        t.timestamp_subsec_nanos() / 100
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_round_trip_and_bounds() {
        let t = Utc.with_ymd_and_hms(1601, 1, 1, 0, 0, 0).unwrap();
        assert_eq!(to_ticks(&t), MIN_DATETIME_TICKS);
        let t = Utc.with_ymd_and_hms(9999, 12, 31, 23, 59, 59).unwrap()
            + chrono::Duration::nanoseconds(999_999_900);
        assert_eq!(to_ticks(&t), MAX_DATETIME_TICKS);
        assert_eq!(from_ticks(MAX_DATETIME_TICKS), t);
        assert_eq!(from_ticks(-1), Utc.timestamp_opt(-1, 999_999_900).unwrap());
        assert_eq!(
            format_datetime(&from_ticks(1)),
            "1970-01-01T00:00:00.0000001Z"
        );
    }

    #[test]
    fn nan_is_identical_to_itself() {
        assert_eq!(EdmValue::Double(f64::NAN), EdmValue::Double(f64::NAN));
        assert_ne!(EdmValue::Int32(1), EdmValue::Int64(1));
    }
}
