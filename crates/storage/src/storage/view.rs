//! Entities lent rather than built: a store that can read an entity in place
//! hands a `RowSink` an `EntityView` over its own bytes, so a reader that
//! wants Arrow columns copies each value once, into its builder, and never
//! materializes a `StoredEntity` (a `String` per key and property name).

use std::cmp::Ordering;
use std::ops::ControlFlow;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::entity::{ETag, StoredEntity};
use super::value::{EdmType, EdmValue};

/// A property value borrowed from where the store holds it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ValueRef<'a> {
    /// Edm.String.
    String(&'a str),
    /// Edm.Binary.
    Binary(&'a [u8]),
    /// Edm.Boolean.
    Boolean(bool),
    /// Edm.DateTime.
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

impl ValueRef<'_> {
    /// The value's EDM type.
    pub fn edm_type(&self) -> EdmType {
        match self {
            ValueRef::String(_) => EdmType::String,
            ValueRef::Binary(_) => EdmType::Binary,
            ValueRef::Boolean(_) => EdmType::Boolean,
            ValueRef::DateTime(_) => EdmType::DateTime,
            ValueRef::Double(_) => EdmType::Double,
            ValueRef::Guid(_) => EdmType::Guid,
            ValueRef::Int32(_) => EdmType::Int32,
            ValueRef::Int64(_) => EdmType::Int64,
        }
    }

    /// An owned copy.
    pub fn to_owned_value(&self) -> EdmValue {
        match *self {
            ValueRef::String(s) => EdmValue::String(s.to_owned()),
            ValueRef::Binary(b) => EdmValue::Binary(b.to_vec()),
            ValueRef::Boolean(b) => EdmValue::Boolean(b),
            ValueRef::DateTime(t) => EdmValue::DateTime(t),
            ValueRef::Double(d) => EdmValue::Double(d),
            ValueRef::Guid(g) => EdmValue::Guid(g),
            ValueRef::Int32(i) => EdmValue::Int32(i),
            ValueRef::Int64(i) => EdmValue::Int64(i),
        }
    }
}

impl EdmValue {
    /// The value as borrowed.
    pub fn as_ref(&self) -> ValueRef<'_> {
        match self {
            EdmValue::String(s) => ValueRef::String(s),
            EdmValue::Binary(b) => ValueRef::Binary(b),
            EdmValue::Boolean(b) => ValueRef::Boolean(*b),
            EdmValue::DateTime(t) => ValueRef::DateTime(*t),
            EdmValue::Double(d) => ValueRef::Double(*d),
            EdmValue::Guid(g) => ValueRef::Guid(*g),
            EdmValue::Int32(i) => ValueRef::Int32(*i),
            EdmValue::Int64(i) => ValueRef::Int64(*i),
        }
    }
}

/// Orders two values of one type as the service does (strings by UTF-16
/// code unit); `None` when the types differ or a Double is NaN.
pub fn compare_refs(a: ValueRef<'_>, b: ValueRef<'_>) -> Option<Ordering> {
    use ValueRef::*;
    match (a, b) {
        (String(x), String(y)) => Some(super::key::cmp_utf16(x, y)),
        (Binary(x), Binary(y)) => Some(x.cmp(y)),
        (Boolean(x), Boolean(y)) => Some(x.cmp(&y)),
        (DateTime(x), DateTime(y)) => Some(x.cmp(&y)),
        (Double(x), Double(y)) => x.partial_cmp(&y),
        (Guid(x), Guid(y)) => Some(x.cmp(&y)),
        (Int32(x), Int32(y)) => Some(x.cmp(&y)),
        (Int64(x), Int64(y)) => Some(x.cmp(&y)),
        _ => None,
    }
}

/// One entity as a store lends it for the time of a call.
pub trait EntityView {
    /// The PartitionKey.
    fn partition_key(&self) -> &str;
    /// The RowKey.
    fn row_key(&self) -> &str;
    /// When the store last wrote the entity.
    fn timestamp(&self) -> DateTime<Utc>;
    /// The entity's version.
    fn etag(&self) -> ETag;
    /// One custom property by name.
    fn property(&self, name: &str) -> Option<ValueRef<'_>>;
    /// Calls `f` with the position in `names` and the value of each of
    /// those properties the entity has; the others are skipped unread.
    fn select(&self, names: &[String], f: &mut dyn FnMut(usize, ValueRef<'_>));
    /// Calls `f` with the name and value of every custom property: what a
    /// raw table reads into its `_properties` column.
    fn each(&self, f: &mut dyn FnMut(&str, ValueRef<'_>));
}

impl EntityView for StoredEntity {
    fn partition_key(&self) -> &str {
        self.entity.partition_key.as_str()
    }

    fn row_key(&self) -> &str {
        self.entity.row_key.as_str()
    }

    fn timestamp(&self) -> DateTime<Utc> {
        self.timestamp
    }

    fn etag(&self) -> ETag {
        self.etag.clone()
    }

    fn property(&self, name: &str) -> Option<ValueRef<'_>> {
        self.entity.properties.get(name).map(EdmValue::as_ref)
    }

    fn select(&self, names: &[String], f: &mut dyn FnMut(usize, ValueRef<'_>)) {
        for (i, name) in names.iter().enumerate() {
            if let Some(v) = self.entity.properties.get(name) {
                f(i, v.as_ref());
            }
        }
    }

    fn each(&self, f: &mut dyn FnMut(&str, ValueRef<'_>)) {
        for (name, v) in &self.entity.properties {
            f(name, v.as_ref());
        }
    }
}

/// Takes the entities of one page as the store reads them: those in the
/// query's ranges that pass its filter, in key order. The query's `select`
/// is a hint here (a view may lend every property); a sink reads what it
/// needs. `Break` stops the page early; the sink keeps its own reason.
pub trait RowSink: Send {
    /// One entity of the page.
    fn push(&mut self, entity: &dyn EntityView) -> ControlFlow<()>;
}

/// How a page read into a sink ended.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PageEnd {
    /// Where the next page starts; `None` at the end of the query (or when
    /// the sink stopped the page).
    pub continuation: Option<super::ContinuationToken>,
    /// Entities in range the store examined, as `Page::scanned`.
    pub scanned: usize,
    /// Entities handed to the sink.
    pub returned: usize,
    /// Of those, how many each PartitionKey gave, once each, in key order
    /// (for the engine's statistics per partition).
    pub partitions: Vec<(String, usize)>,
}

impl PageEnd {
    /// Counts one entity handed over from partition `pk`.
    ///
    /// `partitions` stays in key order, so that a partition met again
    /// after another (the pages of a store not in key order,
    /// `TableStore::key_ordered`, interleave them) is found and counted
    /// once. In key order, as every other store reads, an entity is of the
    /// last partition or of a new one after it: no search.
    pub fn count(&mut self, pk: &str) {
        self.returned += 1;
        let len = self.partitions.len();
        let at = match self.partitions.last() {
            None => Err(0),
            Some((last, _)) if last == pk => Ok(len - 1),
            Some((last, _)) => match super::key::cmp_utf16(last, pk) {
                Ordering::Less => Err(len),
                _ => self
                    .partitions
                    .binary_search_by(|(k, _)| super::key::cmp_utf16(k, pk)),
            },
        };
        match at {
            Ok(i) => self.partitions[i].1 += 1,
            Err(i) => self.partitions.insert(i, (pk.to_owned(), 1)),
        }
    }
}
