//! Typed values ⇄ key strings: key templates such as
//! `BIB:{bib:05}__{name}__{gender}__{age}`, composed from column values,
//! decomposed back into them, and turned into key ranges for the predicates
//! each field can answer. Pure and synchronous; property-tested below.
//!
//! Formats: `{col}` free text, `{col:05}` a non-negative integer zero-padded to
//! 5 digits, `{col:+05}` any integer (a sign character, then 5 digits; the
//! nines' complement for negatives), `{col:~05}` a non-negative integer
//! inverted (`99999 − v`) for descending order. Fixed-width fields preserve
//! order, so ranges on them become key ranges; free text supports equality and
//! prefix. A free-text value escapes `%`, the characters keys may not hold and
//! those of the separator after it as `%XX`, so any text fits and decomposition
//! is unambiguous.
//!
//! Typed fields (`keys::typed`) hold every column type but BYTEA, and
//! NULL, in PostgreSQL's order, ascending or descending:
//! `{c:[~]K[,nulls_first|,nulls_last]}` with `K` one of `iNN`, `f`, `t`,
//! `u`, `b`, `s`. Ranges over them are `KeyTemplate::typed_range`; a text
//! field that ends the key has no terminator (unless NULLs sort first).
//!
//! A PartitionKey template may instead be `{#N}`: the row's RowKey hashed
//! into one of `N` buckets (`bucket_of`). It spreads keys that grow (a
//! SERIAL id) over `N` partitions while a whole RowKey still names its
//! partition, so a point query stays one request.
//!
//! - `template`: `KeyTemplate`, literal text and fields, composed into keys,
//!   decomposed back into values, and key ranges for the predicates a field can
//!   answer; `bucket_of`.
//! - `field`: one field of a template: how a value is written into a key and
//!   read back, and whether the encodings keep the values' order.
//! - `typed`: typed fields: every column type but BYTEA, and NULL, in
//!   PostgreSQL's order, ascending or descending.
//! - `reader`: `KeyReader`, a template compiled for reading many keys in one
//!   pass, as a scan reads them.
//! - `tests`: property tests of the codec: round trips, order, key ranges.
//! - `typed_tests`: property tests of the typed fields.

mod field;
mod reader;
mod template;
mod typed;

pub use field::{FieldFormat, KeyRef, KeyValue, escape_text, unescape_text};
pub use reader::KeyReader;
pub use template::{KeyBounds, KeyTemplate, MAX_BUCKETS, Segment, bucket_of, successor};
pub use typed::{KeyFloat, Typed, TypedKind};

/// A template that does not parse, or a value or key that does not fit one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// A template that breaks the syntax or the rules.
    #[error("invalid key template {template:?}: {reason}")]
    Template {
        /// The template's text.
        template: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A text value where the format needs an integer.
    #[error("column {column} is written in an integer key format but its value is not an integer")]
    NotAnInteger {
        /// The column's name.
        column: String,
    },
    /// An integer outside what its fixed-width format holds.
    #[error("value {value} of column {column} does not fit its key format ({min} to {max})")]
    OutOfRange {
        /// The column's name.
        column: String,
        /// The value.
        value: i64,
        /// The least value the format holds.
        min: i64,
        /// The greatest value the format holds.
        max: i64,
    },
    /// A value of another type than the field holds.
    #[error("column {column}: its key field holds {expected}")]
    WrongType {
        /// The column's name.
        column: String,
        /// What the field holds.
        expected: &'static str,
    },
    /// Too few values to compose a whole key.
    #[error("no value for key column {column}")]
    MissingValue {
        /// The key column without a value.
        column: String,
    },
    /// A key the template did not write.
    #[error("key {text:?} does not match the template at {column}")]
    Mismatch {
        /// The column whose field does not match.
        column: String,
        /// The key, or the part of it read for that field.
        text: String,
    },
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod typed_tests;
