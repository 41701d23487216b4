//! Column types: what a SQL column holds, how it is stored as an EDM property,
//! and its Arrow type.

use std::fmt;

use datafusion::arrow::datatypes::{DataType, TimeUnit};
use datafusion::sql::sqlparser::ast::DataType as SqlType;

use crate::storage::EdmType;

/// The SQL types a mapped column may have.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ColumnType {
    /// `INT`: Edm.Int32.
    Int,
    /// `BIGINT`: Edm.Int64.
    BigInt,
    /// `DOUBLE`: Edm.Double.
    Double,
    /// `TEXT`: Edm.String.
    Text,
    /// `BOOLEAN`: Edm.Boolean.
    Boolean,
    /// `TIMESTAMP`: Edm.DateTime, read as microseconds in UTC.
    Timestamp,
    /// `DATE`: Edm.DateTime at midnight UTC (EDM has no date type), read
    /// as days.
    Date,
    /// `NUMERIC(precision, scale)`: Edm.String of its exact decimal text
    /// (EDM has no decimal, and a double would round it), read as Arrow's
    /// Decimal128.
    Numeric {
        /// Digits in all, 1 to 38.
        precision: u8,
        /// Digits after the point, at most `precision`.
        scale: u8,
    },
    /// `BYTEA`: Edm.Binary.
    Bytea,
    /// `UUID`: Edm.Guid, read as its text form.
    Uuid,
}

/// The Arrow type of timestamps: microseconds, UTC (Edm.DateTime's 100 ns ticks
/// are truncated; its whole range, years 1601 to 9999, fits).
pub fn timestamp_type() -> DataType {
    DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into()))
}

impl ColumnType {
    /// `NUMERIC(p, s)`, if Decimal128 holds it (p ≤ 38, s ≤ p).
    pub fn numeric(p: u64, s: u64) -> Option<Self> {
        let precision = u8::try_from(p).ok().filter(|p| (1..=38).contains(p))?;
        let scale = u8::try_from(s).ok().filter(|s| *s <= precision)?;
        Some(Self::Numeric { precision, scale })
    }

    /// The type a SQL DDL type names, if tablesql can store it.
    pub fn from_sql(t: &SqlType) -> Option<Self> {
        Some(match t {
            // SMALLINT's values fit INT's: stored as Int32, as EDM has no smaller.
            SqlType::Int(_)
            | SqlType::Int4(_)
            | SqlType::Int32
            | SqlType::Integer(_)
            | SqlType::SmallInt(_)
            | SqlType::Int2(_)
            | SqlType::TinyInt(_) => Self::Int,
            SqlType::BigInt(_) | SqlType::Int8(_) | SqlType::Int64 => Self::BigInt,
            // REAL's values are exact in a DOUBLE.
            SqlType::Double(_)
            | SqlType::DoublePrecision
            | SqlType::Float8
            | SqlType::Float64
            | SqlType::Float(_)
            | SqlType::Real
            | SqlType::Float4 => Self::Double,
            SqlType::Text
            | SqlType::Varchar(_)
            | SqlType::CharacterVarying(_)
            | SqlType::String(_)
            | SqlType::Char(_)
            // JSON is kept as its text, as PostgreSQL's json type keeps it.
            | SqlType::JSON
            | SqlType::JSONB => Self::Text,
            SqlType::Boolean | SqlType::Bool => Self::Boolean,
            SqlType::Timestamp(..) => Self::Timestamp,
            SqlType::Date => Self::Date,
            SqlType::Numeric(info) | SqlType::Decimal(info) | SqlType::Dec(info) => {
                use datafusion::sql::sqlparser::ast::ExactNumberInfo as N;
                let (p, s) = match info {
                    N::Precision(p) => (*p, 0),
                    N::PrecisionAndScale(p, s) => (*p, u64::try_from(*s).ok()?),
                    // Unbounded: no exact Arrow type holds it.
                    N::None => return None,
                };
                Self::numeric(p, s)?
            }
            SqlType::Bytea => Self::Bytea,
            SqlType::Uuid => Self::Uuid,
            _ => return None,
        })
    }

    /// The type a column of query results with Arrow type `t` is stored
    /// as (`CREATE TABLE ... AS SELECT`), if tablesql can store it; an
    /// untyped NULL is text, as PostgreSQL makes an `unknown` column.
    pub fn from_arrow(t: &DataType) -> Option<Self> {
        Some(match t {
            DataType::Int8
            | DataType::Int16
            | DataType::Int32
            | DataType::UInt8
            | DataType::UInt16 => Self::Int,
            DataType::Int64 | DataType::UInt32 => Self::BigInt,
            DataType::Float16 | DataType::Float32 | DataType::Float64 => Self::Double,
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View | DataType::Null => {
                Self::Text
            }
            DataType::Boolean => Self::Boolean,
            DataType::Timestamp(_, _) => Self::Timestamp,
            DataType::Date32 | DataType::Date64 => Self::Date,
            DataType::Decimal128(p, s) => Self::numeric(u64::from(*p), u64::try_from(*s).ok()?)?,
            DataType::Binary | DataType::LargeBinary | DataType::BinaryView => Self::Bytea,
            _ => return None,
        })
    }

    /// The Arrow type of the column.
    pub fn arrow_type(self) -> DataType {
        match self {
            Self::Int => DataType::Int32,
            Self::BigInt => DataType::Int64,
            Self::Double => DataType::Float64,
            Self::Text | Self::Uuid => DataType::Utf8,
            Self::Boolean => DataType::Boolean,
            Self::Timestamp => timestamp_type(),
            Self::Date => DataType::Date32,
            Self::Numeric { precision, scale } => {
                DataType::Decimal128(precision, i8::try_from(scale).unwrap_or(i8::MAX))
            }
            Self::Bytea => DataType::Binary,
        }
    }

    /// The EDM type values are written as.
    pub fn edm_type(self) -> EdmType {
        match self {
            Self::Int => EdmType::Int32,
            Self::BigInt => EdmType::Int64,
            Self::Double => EdmType::Double,
            Self::Text | Self::Numeric { .. } => EdmType::String,
            Self::Boolean => EdmType::Boolean,
            Self::Timestamp | Self::Date => EdmType::DateTime,
            Self::Bytea => EdmType::Binary,
            Self::Uuid => EdmType::Guid,
        }
    }

    /// Whether a stored property of EDM type `found` reads into this column:
    /// its own type, or a narrower one that widens without loss (Int32 into
    /// BIGINT or DOUBLE).
    pub fn reads(self, found: EdmType) -> bool {
        found == self.edm_type()
            || matches!((self, found), (Self::BigInt | Self::Double, EdmType::Int32))
    }
}

impl fmt::Display for ColumnType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Self::Numeric { precision, scale } = self {
            return write!(f, "NUMERIC({precision}, {scale})");
        }
        f.write_str(match self {
            Self::Int => "INT",
            Self::BigInt => "BIGINT",
            Self::Double => "DOUBLE",
            Self::Text => "TEXT",
            Self::Boolean => "BOOLEAN",
            Self::Timestamp => "TIMESTAMP",
            Self::Date => "DATE",
            Self::Numeric { .. } => "NUMERIC",
            Self::Bytea => "BYTEA",
            Self::Uuid => "UUID",
        })
    }
}

/// A NUMERIC's exact text with `scale` digits after the point, from its
/// value in units of 10^-scale (`1250`, 2 → `12.50`), as PostgreSQL shows it.
pub fn decimal_text(v: i128, scale: u8) -> String {
    let digits = v.unsigned_abs().to_string();
    let scale = usize::from(scale);
    let sign = if v < 0 { "-" } else { "" };
    if scale == 0 {
        return format!("{sign}{digits}");
    }
    let digits = format!("{digits:0>width$}", width = scale + 1);
    let (whole, fraction) = digits.split_at(digits.len() - scale);
    format!("{sign}{whole}.{fraction}")
}

/// The value of decimal text in units of 10^-scale, if it is exact at that
/// scale (`12.5`, 2 → 1250; `12.345`, 2 → none).
pub fn parse_decimal(text: &str, scale: u8) -> Option<i128> {
    let text = text.trim();
    let (negative, unsigned) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    let (whole, fraction) = unsigned.split_once('.').unwrap_or((unsigned, ""));
    let scale = usize::from(scale);
    let all_digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if (whole.is_empty() && fraction.is_empty()) || !all_digits(whole) || !all_digits(fraction) {
        return None;
    }
    // Digits past the scale must be zeros.
    let (kept, dropped) = fraction.split_at(fraction.len().min(scale));
    if !dropped.bytes().all(|b| b == b'0') {
        return None;
    }
    let mut v: i128 = 0;
    for b in whole.bytes().chain(kept.bytes()) {
        v = v.checked_mul(10)?.checked_add(i128::from(b - b'0'))?;
    }
    v = v.checked_mul(10i128.checked_pow(u32::try_from(scale - kept.len()).ok()?)?)?;
    Some(if negative { -v } else { v })
}

#[cfg(test)]
mod decimal_tests {
    use super::*;

    #[test]
    fn decimal_text_round_trips_at_its_scale() {
        for (text, scale, v, shown) in [
            ("12.5", 2, 1250, "12.50"),
            ("-0.05", 2, -5, "-0.05"),
            ("7", 0, 7, "7"),
            ("+3.100", 1, 31, "3.1"),
            ("0", 3, 0, "0.000"),
        ] {
            assert_eq!(parse_decimal(text, scale), Some(v), "{text}");
            assert_eq!(decimal_text(v, scale), shown);
        }
        for bad in ["12.345", "", ".", "1e3", "1.2.3", "--1"] {
            assert_eq!(parse_decimal(bad, 2), None, "{bad}");
        }
    }
}
