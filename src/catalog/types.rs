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
            Self::Bytea => DataType::Binary,
        }
    }

    /// The EDM type values are written as.
    pub fn edm_type(self) -> EdmType {
        match self {
            Self::Int => EdmType::Int32,
            Self::BigInt => EdmType::Int64,
            Self::Double => EdmType::Double,
            Self::Text => EdmType::String,
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
        f.write_str(match self {
            Self::Int => "INT",
            Self::BigInt => "BIGINT",
            Self::Double => "DOUBLE",
            Self::Text => "TEXT",
            Self::Boolean => "BOOLEAN",
            Self::Timestamp => "TIMESTAMP",
            Self::Date => "DATE",
            Self::Bytea => "BYTEA",
            Self::Uuid => "UUID",
        })
    }
}
