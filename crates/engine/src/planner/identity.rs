//! What tablesql says it is. Drivers read a PostgreSQL version from the
//! `server_version` startup parameter (pgJDBC, asyncpg, psql) or parse it
//! out of `version()` (SQLAlchemy's dialect), and pick their catalog
//! queries by it; every place that names the version reads it here, so
//! they agree: the startup parameters, `SHOW server_version`,
//! `server_version_num` and `version()`.

use std::sync::Arc;

use datafusion::arrow::datatypes::DataType;
use datafusion::common::ScalarValue;
use datafusion::logical_expr::{ColumnarValue, ScalarUDF, Volatility, create_udf};

/// The PostgreSQL version tablesql answers as: the one whose catalog
/// queries and protocol its clients are tested with.
pub const PG_VERSION: &str = "16.6";

/// The database a session is in until a front end names another (the wire
/// server names the one a client connects to): `current_database()`.
pub const DEFAULT_DATABASE: &str = "tablesql";

/// `server_version_num` of [`PG_VERSION`].
pub const PG_VERSION_NUM: &str = "160006";

/// `version()`: PostgreSQL's form first, so that drivers parse it, then
/// what it is.
pub fn version() -> String {
    format!(
        "PostgreSQL {PG_VERSION} (tablesql {} on DataFusion {}), 64-bit",
        env!("CARGO_PKG_VERSION"),
        datafusion::DATAFUSION_VERSION
    )
}

/// The `version()` function, in place of DataFusion's own.
pub fn version_udf() -> ScalarUDF {
    let text = version();
    create_udf(
        "version",
        vec![],
        DataType::Utf8,
        Volatility::Immutable,
        Arc::new(move |_| Ok(ColumnarValue::Scalar(ScalarValue::Utf8(Some(text.clone()))))),
    )
}

/// `current_database()`, and `current_catalog` (the SQL standard's name
/// for it), answering `database`: a session registers its own.
pub fn current_database_udf(database: &str) -> ScalarUDF {
    let name = database.to_owned();
    create_udf(
        "current_database",
        vec![],
        DataType::Utf8,
        Volatility::Stable,
        Arc::new(move |_| Ok(ColumnarValue::Scalar(ScalarValue::Utf8(Some(name.clone()))))),
    )
    .with_aliases(["current_catalog"])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_version_reads_as_postgresql() {
        let v = version();
        assert!(v.starts_with(&format!("PostgreSQL {PG_VERSION} ")), "{v}");
        let (major, minor) = PG_VERSION.split_once('.').unwrap_or_default();
        let num: u32 = PG_VERSION_NUM.parse().unwrap_or_default();
        assert_eq!(
            num,
            major.parse::<u32>().unwrap_or_default() * 10_000
                + minor.parse::<u32>().unwrap_or_default()
        );
    }
}
