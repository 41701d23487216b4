//! The SQLSTATE codes of tablesql's errors, as PostgreSQL names them
//! (Appendix A of its manual). Each error enum says its own code beside
//! its variants (`StorageError::sqlstate`, `CatalogError::sqlstate`,
//! `ExecError::sqlstate`, `EngineError::sqlstate` ...), so a new variant
//! is given one where it is written, and every front end reads the same:
//! the wire server in its ErrorResponse, the shell under `VERBOSITY
//! verbose`. The codes of the wire alone (a lost connection, a login, a
//! shutdown) are the server's (`server::sqlstate`).

pub const SUCCESSFUL_COMPLETION: &str = "00000";
pub const FEATURE_NOT_SUPPORTED: &str = "0A000";
pub const CARDINALITY_VIOLATION: &str = "21000";
pub const DATA_EXCEPTION: &str = "22000";
pub const NUMERIC_OUT_OF_RANGE: &str = "22003";
pub const DATETIME_FIELD_OVERFLOW: &str = "22008";
pub const DIVISION_BY_ZERO: &str = "22012";
pub const CHARACTER_NOT_IN_REPERTOIRE: &str = "22021";
pub const INVALID_PARAMETER_VALUE: &str = "22023";
pub const SEQUENCE_GENERATOR_LIMIT_EXCEEDED: &str = "2200H";
pub const INVALID_TEXT_REPRESENTATION: &str = "22P02";
pub const INVALID_BINARY_REPRESENTATION: &str = "22P03";
pub const BAD_COPY_FILE_FORMAT: &str = "22P04";
pub const NOT_NULL_VIOLATION: &str = "23502";
pub const UNIQUE_VIOLATION: &str = "23505";
pub const ACTIVE_TRANSACTION: &str = "25001";
pub const NO_ACTIVE_TRANSACTION: &str = "25P01";
pub const IN_FAILED_TRANSACTION: &str = "25P02";
pub const INVALID_SAVEPOINT: &str = "3B001";
pub const SERIALIZATION_FAILURE: &str = "40001";
pub const DEADLOCK_DETECTED: &str = "40P01";
pub const STATEMENT_COMPLETION_UNKNOWN: &str = "40003";
pub const SYNTAX_ERROR: &str = "42601";
pub const DUPLICATE_COLUMN: &str = "42701";
pub const AMBIGUOUS_COLUMN: &str = "42702";
pub const UNDEFINED_COLUMN: &str = "42703";
pub const UNDEFINED_OBJECT: &str = "42704";
pub const UNDEFINED_FUNCTION: &str = "42883";
pub const UNDEFINED_TABLE: &str = "42P01";
pub const DUPLICATE_TABLE: &str = "42P07";
pub const INVALID_TABLE_DEFINITION: &str = "42P16";
pub const GENERATED_ALWAYS: &str = "428C9";
pub const OUT_OF_MEMORY: &str = "53200";
pub const PROGRAM_LIMIT_EXCEEDED: &str = "54000";
pub const OBJECT_NOT_IN_PREREQUISITE_STATE: &str = "55000";
pub const CANT_CHANGE_RUNTIME_PARAM: &str = "55P02";
pub const LOCK_NOT_AVAILABLE: &str = "55P03";
pub const SYSTEM_ERROR: &str = "58000";
pub const INTERNAL_ERROR: &str = "XX000";
pub const DATA_CORRUPTED: &str = "XX001";
