//! Entities: keys plus a bag of typed properties, the limits they obey, and the
//! Timestamp and ETag a store gives every write.

use std::collections::BTreeMap;
use std::fmt;

use chrono::{DateTime, Utc};

use super::error::InvalidInput;
use super::key::{PartitionKey, RowKey};
use super::value::{
    EdmValue, MAX_DATETIME_TICKS, MIN_DATETIME_TICKS, Ticks, format_datetime, from_ticks, to_ticks,
    utf16_bytes,
};

/// Most custom properties an entity may carry (255 less the three system ones).
pub const MAX_PROPERTIES: usize = 252;
/// Longest property name, in characters.
pub const MAX_PROPERTY_NAME_CHARS: usize = 255;
/// Largest String (as UTF-16) or Binary value, in bytes.
pub const MAX_VALUE_BYTES: usize = 64 * 1024;
/// Largest entity by the service's size formula, in bytes.
pub const MAX_ENTITY_BYTES: usize = 1024 * 1024;
/// Names of the system properties, which a client cannot set.
pub const SYSTEM_PROPERTIES: [&str; 3] = ["PartitionKey", "RowKey", "Timestamp"];

/// Custom properties by name, in name order.
pub type Properties = BTreeMap<String, EdmValue>;

/// An entity as a client writes it: keys and custom properties.
#[derive(Debug, Clone, PartialEq)]
pub struct Entity {
    /// The partition the entity lives in.
    pub partition_key: PartitionKey,
    /// The entity's key within its partition.
    pub row_key: RowKey,
    /// The custom properties.
    pub properties: Properties,
}

impl Entity {
    /// An entity with no properties yet.
    pub fn new(partition_key: PartitionKey, row_key: RowKey) -> Self {
        Self {
            partition_key,
            row_key,
            properties: Properties::new(),
        }
    }

    /// Adds a property (builder style).
    pub fn with(mut self, name: impl Into<String>, value: EdmValue) -> Self {
        self.properties.insert(name.into(), value);
        self
    }

    /// Size by the service's formula: 4 + 2·|PK| + 2·|RK| + Σ(8 + 2·|name| + value).
    pub fn stored_size(&self) -> usize {
        4 + utf16_bytes(self.partition_key.as_str())
            + utf16_bytes(self.row_key.as_str())
            + self
                .properties
                .iter()
                .map(|(name, value)| 8 + utf16_bytes(name) + value.stored_size())
                .sum::<usize>()
    }

    /// Checks every limit of the model and drops DateTime digits below 100 ns,
    /// the precision the service keeps. Keys were checked when they were made.
    /// Returns the size by the service's formula (`stored_size`), worked out in
    /// the same pass, which is what a batch counts against its limit.
    pub fn validate(&mut self) -> Result<usize, InvalidInput> {
        if self.properties.len() > MAX_PROPERTIES {
            return Err(InvalidInput::TooManyProperties {
                count: self.properties.len(),
            });
        }
        let mut size =
            4 + utf16_bytes(self.partition_key.as_str()) + utf16_bytes(self.row_key.as_str());
        for (name, value) in self.properties.iter_mut() {
            validate_property_name(name)?;
            // The value's length against the per-value limit, and its size.
            let (bytes, stored) = match value {
                EdmValue::String(s) => {
                    let bytes = utf16_bytes(s);
                    (bytes, 4 + bytes)
                }
                EdmValue::Binary(b) => (b.len(), 4 + b.len()),
                EdmValue::DateTime(t) => {
                    let ticks = to_ticks(t);
                    if !(MIN_DATETIME_TICKS..=MAX_DATETIME_TICKS).contains(&ticks) {
                        return Err(InvalidInput::DateTimeOutOfRange { name: name.clone() });
                    }
                    *t = from_ticks(ticks);
                    (0, 8)
                }
                other => (0, other.stored_size()),
            };
            if bytes > MAX_VALUE_BYTES {
                return Err(InvalidInput::ValueTooLarge {
                    name: name.clone(),
                    bytes,
                });
            }
            size += 8 + utf16_bytes(name) + stored;
        }
        if size > MAX_ENTITY_BYTES {
            return Err(InvalidInput::EntityTooLarge { bytes: size });
        }
        Ok(size)
    }
}

/// Checks a custom property name: a C# identifier of at most 255 characters that
/// is not a system property's name.
pub fn validate_property_name(name: &str) -> Result<(), InvalidInput> {
    let bad = |reason| {
        Err(InvalidInput::PropertyName {
            name: name.to_owned(),
            reason,
        })
    };
    if SYSTEM_PROPERTIES.contains(&name) {
        return Err(InvalidInput::SystemProperty {
            name: name.to_owned(),
        });
    }
    // Names are almost always ASCII, checked here byte by byte: every entity
    // of every write passes through this.
    let (starts_well, rest_well, chars) = if name.is_ascii() {
        let b = name.as_bytes();
        let word = |c: &u8| c.is_ascii_alphanumeric() || *c == b'_';
        let first = b.first().map(|c| c.is_ascii_alphabetic() || *c == b'_');
        (first, b.iter().skip(1).all(word), b.len())
    } else {
        let mut chars = name.chars();
        let first = chars.next().map(|c| c.is_alphabetic() || c == '_');
        let rest = chars.all(|c| c.is_alphanumeric() || c == '_');
        (first, rest, name.chars().count())
    };
    match starts_well {
        None => bad("is empty"),
        Some(false) => bad("must start with a letter or an underscore"),
        Some(true) if !rest_well => bad("may hold only letters, digits and underscores"),
        Some(true) if chars > MAX_PROPERTY_NAME_CHARS => bad("is longer than 255 characters"),
        Some(true) => Ok(()),
    }
}

/// An entity tag: the version of one stored entity, new on every write.
///
/// A store that stamps writes itself keeps the Timestamp and renders the text
/// (`W/"datetime'…'"`, the service's form) only when asked: scans never pay for it.
#[derive(Debug, Clone)]
pub struct ETag(Repr);

#[derive(Debug, Clone)]
enum Repr {
    Stamp(Ticks),
    Wire(String),
}

impl ETag {
    /// The ETag the service gives a write stamped at `timestamp`.
    pub fn for_timestamp(timestamp: &DateTime<Utc>) -> Self {
        ETag(Repr::Stamp(to_ticks(timestamp)))
    }

    /// Wraps an ETag as a server or client sent it.
    pub fn from_wire(s: impl Into<String>) -> Self {
        ETag(Repr::Wire(s.into()))
    }

    /// The time of the write it versions, where it says (the service's
    /// ETags are `W/"datetime'<the entity's Timestamp>'"`): what a write
    /// that returns its row shows as the row's Timestamp.
    pub fn timestamp(&self) -> Option<DateTime<Utc>> {
        match &self.0 {
            Repr::Stamp(ticks) => Some(from_ticks(*ticks)),
            Repr::Wire(s) => {
                let inner = s.strip_prefix("W/\"datetime'")?.strip_suffix("'\"")?;
                crate::storage::odata::parse_datetime(&inner.replace("%3A", ":")).ok()
            }
        }
    }
}

impl PartialEq for ETag {
    fn eq(&self, other: &Self) -> bool {
        match (&self.0, &other.0) {
            (Repr::Stamp(a), Repr::Stamp(b)) => a == b,
            (Repr::Wire(a), Repr::Wire(b)) => a == b,
            _ => self.to_string() == other.to_string(),
        }
    }
}

impl Eq for ETag {}

impl fmt::Display for ETag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Repr::Stamp(ticks) => {
                let text = format_datetime(&from_ticks(*ticks)).replace(':', "%3A");
                write!(f, "W/\"datetime'{text}'\"")
            }
            Repr::Wire(s) => f.write_str(s),
        }
    }
}

/// The precondition of a conditional write (`If-Match`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IfMatch {
    /// `*`: the entity must exist, any version.
    Any,
    /// The entity must still have this ETag.
    ETag(ETag),
}

/// An entity as a store holds it: what was written, plus Timestamp and ETag.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredEntity {
    /// Keys and custom properties.
    pub entity: Entity,
    /// When the store last wrote the entity.
    pub timestamp: DateTime<Utc>,
    /// The version the store gave that write.
    pub etag: ETag,
}

impl StoredEntity {
    /// The entity's PartitionKey.
    pub fn partition_key(&self) -> &PartitionKey {
        &self.entity.partition_key
    }

    /// The entity's RowKey.
    pub fn row_key(&self) -> &RowKey {
        &self.entity.row_key
    }

    /// One custom property.
    pub fn get(&self, name: &str) -> Option<&EdmValue> {
        self.entity.properties.get(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_etag_tells_the_time_of_its_write_in_either_form() {
        let at = DateTime::parse_from_rfc3339("2026-11-26T21:23:39.1234567Z")
            .map(|t| t.with_timezone(&Utc))
            .expect("a time");
        let stamped = ETag::for_timestamp(&at);
        assert_eq!(stamped.timestamp(), Some(at));
        let wire = ETag::from_wire(stamped.to_string());
        assert_eq!(wire.timestamp(), Some(at));
        assert_eq!(ETag::from_wire("\"0x8DC\"").timestamp(), None);
    }

    #[test]
    fn property_names() {
        let long_wide = "é".repeat(255);
        for ok in [
            "a",
            "_a",
            "Name1",
            "été",
            "x".repeat(255).as_str(),
            &long_wide,
        ] {
            assert!(validate_property_name(ok).is_ok(), "{ok:?}");
        }
        let too_long_wide = "é".repeat(256);
        for bad in [
            "",
            "1a",
            "a-b",
            "a.b",
            "a b",
            "x".repeat(256).as_str(),
            "é-",
            "1é",
        ] {
            assert!(validate_property_name(bad).is_err(), "{bad:?}");
        }
        for bad in [too_long_wide.as_str(), "\u{e9}\u{2014}"] {
            assert!(validate_property_name(bad).is_err(), "{bad:?}");
        }
        assert!(matches!(
            validate_property_name("Timestamp"),
            Err(InvalidInput::SystemProperty { .. })
        ));
    }

    #[test]
    fn validate_returns_the_size_that_stored_size_reports() {
        let pk = PartitionKey::new("p\u{e9}").unwrap();
        let rk = RowKey::new("r\u{1f600}").unwrap();
        let mut e = Entity::new(pk, rk)
            .with("s", EdmValue::String("a\u{1f600}".into()))
            .with("b", EdmValue::Binary(vec![1, 2, 3]))
            .with("t", EdmValue::DateTime(super::super::value::from_ticks(7)))
            .with("n\u{e9}", EdmValue::Int64(1))
            .with("g", EdmValue::Guid(uuid::Uuid::nil()))
            .with("f", EdmValue::Boolean(true));
        assert_eq!(e.validate(), Ok(e.stored_size()));
    }

    #[test]
    fn etag_looks_like_the_services() {
        let t = super::super::value::from_ticks(1);
        assert_eq!(
            ETag::for_timestamp(&t).to_string(),
            "W/\"datetime'1970-01-01T00%3A00%3A00.0000001Z'\""
        );
        let wire = ETag::from_wire(ETag::for_timestamp(&t).to_string());
        assert_eq!(wire, ETag::for_timestamp(&t));
        assert_ne!(ETag::from_wire("W/\"x\""), ETag::for_timestamp(&t));
    }
}
