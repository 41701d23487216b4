//! Format 2 values: an entity's Timestamp and properties, laid out so that
//! a reader finds the properties it wants and skips the rest unparsed.
//!
//! ```text
//! ticks: i64 LE | n: u8 | n ids: u16 LE | n type tags: u8 | n ends: u32 LE | data
//! ```
//!
//! A property is named by its id in the table's dictionary (`dict`), not
//! spelled; its data runs from the previous property's end (0 for the
//! first) to its own, counted from the start of the data: a String's UTF-8
//! or a Binary's bytes, a Boolean's byte, or the fixed-width little-endian
//! value (DateTime as ticks). The ETag follows from the Timestamp, so it
//! is not stored. Reading one property is a scan of at most 252 ids and
//! one slice; no other property is parsed.

use std::cell::RefCell;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::dict::Dict;
use crate::storage::entity::{ETag, Entity, Properties, StoredEntity};
use crate::storage::value::{EdmValue, from_ticks, to_ticks};
use crate::storage::view::{EntityView, ValueRef};
use crate::storage::{PartitionKey, Result, RowKey, StorageError};

const STRING: u8 = 1;
const BINARY: u8 = 2;
const BOOLEAN: u8 = 3;
const DATETIME: u8 = 4;
const DOUBLE: u8 = 5;
const GUID: u8 = 6;
const INT32: u8 = 7;
const INT64: u8 = 8;

/// Bytes before the ids: the ticks and the count.
const HEAD: usize = 9;

fn corrupt(what: &str) -> StorageError {
    StorageError::Corrupt(what.to_owned())
}

/// Encodes an entity's Timestamp and properties, whose names the table's
/// dictionary numbers `ids`, in the properties' order.
pub fn encode(timestamp: &DateTime<Utc>, properties: &Properties, ids: &[u16]) -> Result<Vec<u8>> {
    let n = properties.len();
    if ids.len() != n {
        return Err(corrupt("a property without an id"));
    }
    // At most 252 properties: validated before any write.
    let count = u8::try_from(n).map_err(|_| corrupt("too many properties to encode"))?;
    let data: usize = properties.values().map(data_len).sum();
    let mut out = Vec::with_capacity(HEAD + 7 * n + data);
    out.extend_from_slice(&to_ticks(timestamp).to_le_bytes());
    out.push(count);
    for id in ids {
        out.extend_from_slice(&id.to_le_bytes());
    }
    out.extend(properties.values().map(tag));
    let mut end = 0u32;
    for v in properties.values() {
        // An entity is at most 1 MiB: validated before any write.
        end += data_len(v) as u32;
        out.extend_from_slice(&end.to_le_bytes());
    }
    for v in properties.values() {
        match v {
            EdmValue::String(s) => out.extend_from_slice(s.as_bytes()),
            EdmValue::Binary(b) => out.extend_from_slice(b),
            EdmValue::Boolean(b) => out.push(u8::from(*b)),
            EdmValue::DateTime(t) => out.extend_from_slice(&to_ticks(t).to_le_bytes()),
            EdmValue::Double(d) => out.extend_from_slice(&d.to_le_bytes()),
            EdmValue::Guid(g) => out.extend_from_slice(g.as_bytes()),
            EdmValue::Int32(i) => out.extend_from_slice(&i.to_le_bytes()),
            EdmValue::Int64(i) => out.extend_from_slice(&i.to_le_bytes()),
        }
    }
    Ok(out)
}

fn tag(v: &EdmValue) -> u8 {
    match v {
        EdmValue::String(_) => STRING,
        EdmValue::Binary(_) => BINARY,
        EdmValue::Boolean(_) => BOOLEAN,
        EdmValue::DateTime(_) => DATETIME,
        EdmValue::Double(_) => DOUBLE,
        EdmValue::Guid(_) => GUID,
        EdmValue::Int32(_) => INT32,
        EdmValue::Int64(_) => INT64,
    }
}

fn data_len(v: &EdmValue) -> usize {
    match v {
        EdmValue::String(s) => s.len(),
        EdmValue::Binary(b) => b.len(),
        EdmValue::Boolean(_) => 1,
        EdmValue::Int32(_) => 4,
        EdmValue::DateTime(_) | EdmValue::Double(_) | EdmValue::Int64(_) => 8,
        EdmValue::Guid(_) => 16,
    }
}

/// A value's bytes with its layout checked: every id, tag and end is in
/// bounds, so reading a property can fail only on its own data.
#[derive(Clone, Copy)]
pub struct Layout<'a> {
    bytes: &'a [u8],
    n: usize,
}

impl<'a> Layout<'a> {
    pub fn of(bytes: &'a [u8]) -> Result<Self> {
        let n = usize::from(*bytes.get(8).ok_or_else(|| corrupt("value truncated"))?);
        let layout = Layout { bytes, n };
        if bytes.len() < layout.data_start() || layout.data().len() < layout.end(n) {
            return Err(corrupt("value truncated"));
        }
        Ok(layout)
    }

    pub fn ticks(&self) -> i64 {
        let mut a = [0; 8];
        a.copy_from_slice(&self.bytes[..8]);
        i64::from_le_bytes(a)
    }

    pub fn len(&self) -> usize {
        self.n
    }

    /// The id of property `i` (< `len`).
    pub fn id(&self, i: usize) -> u16 {
        let at = HEAD + 2 * i;
        u16::from_le_bytes([self.bytes[at], self.bytes[at + 1]])
    }

    fn data_start(&self) -> usize {
        HEAD + 7 * self.n
    }

    fn data(&self) -> &'a [u8] {
        &self.bytes[self.data_start()..]
    }

    /// Where property `i`'s data ends (0 for i = 0's start).
    fn end(&self, i: usize) -> usize {
        if i == 0 {
            return 0;
        }
        let at = HEAD + 3 * self.n + 4 * (i - 1);
        let mut a = [0; 4];
        a.copy_from_slice(&self.bytes[at..at + 4]);
        u32::from_le_bytes(a) as usize
    }

    /// The value of property `i` (< `len`).
    pub fn value(&self, i: usize) -> Result<ValueRef<'a>> {
        let tag = self.bytes[HEAD + 2 * self.n + i];
        let data = self
            .data()
            .get(self.end(i)..self.end(i + 1))
            .ok_or_else(|| corrupt("value out of order"))?;
        let fixed = |n: usize| {
            if data.len() == n {
                Ok(data)
            } else {
                Err(corrupt("value of the wrong width"))
            }
        };
        Ok(match tag {
            STRING => ValueRef::String(
                std::str::from_utf8(data).map_err(|_| corrupt("text is not UTF-8"))?,
            ),
            BINARY => ValueRef::Binary(data),
            BOOLEAN => ValueRef::Boolean(fixed(1)?[0] != 0),
            DATETIME => ValueRef::DateTime(from_ticks(i64::from_le_bytes(array(fixed(8)?)))),
            DOUBLE => ValueRef::Double(f64::from_le_bytes(array(fixed(8)?))),
            GUID => ValueRef::Guid(Uuid::from_bytes(array(fixed(16)?))),
            INT32 => ValueRef::Int32(i32::from_le_bytes(array(fixed(4)?))),
            INT64 => ValueRef::Int64(i64::from_le_bytes(array(fixed(8)?))),
            _ => return Err(corrupt("unknown type tag")),
        })
    }
}

fn array<const N: usize>(b: &[u8]) -> [u8; N] {
    let mut a = [0; N];
    a.copy_from_slice(b);
    a
}

/// Decodes a stored value into an entity with the given keys, keeping only
/// the properties in `wanted` (all when `None`): the others are not read.
pub fn decode(
    pk: PartitionKey,
    rk: RowKey,
    bytes: &[u8],
    dict: &Dict,
    wanted: Option<&[String]>,
) -> Result<StoredEntity> {
    let layout = Layout::of(bytes)?;
    let timestamp = from_ticks(layout.ticks());
    let mut properties = Properties::new();
    for i in 0..layout.len() {
        let id = layout.id(i);
        let name = dict
            .name(id)
            .ok_or_else(|| corrupt("a property id the table's names do not hold"))?;
        if wanted.is_some_and(|w| !w.iter().any(|n| **n == **name)) {
            continue;
        }
        properties.insert(name.to_string(), layout.value(i)?.to_owned_value());
    }
    Ok(StoredEntity {
        entity: Entity {
            partition_key: pk,
            row_key: rk,
            properties,
        },
        etag: ETag::for_timestamp(&timestamp),
        timestamp,
    })
}

/// Which of a reader's property names each id stands for: position + 1 by
/// id, 0 for an id not wanted. Built once per page for the names a sink
/// asks for, not per entity.
#[derive(Debug, Default)]
pub struct Slots {
    names: Vec<String>,
    by_id: Vec<u32>,
}

impl Slots {
    fn for_names(&mut self, names: &[String], dict: &Dict) {
        if self.names == names {
            return;
        }
        self.names = names.to_vec();
        self.by_id.clear();
        for (pos, name) in names.iter().enumerate().rev() {
            if let Some(id) = dict.id(name) {
                let id = usize::from(id);
                if self.by_id.len() <= id {
                    self.by_id.resize(id + 1, 0);
                }
                // Reversed, so a name given twice answers at its first.
                self.by_id[id] = pos as u32 + 1;
            }
        }
    }

    fn position(&self, id: u16) -> Option<usize> {
        match self.by_id.get(usize::from(id)) {
            Some(&p) if p > 0 => Some(p as usize - 1),
            _ => None,
        }
    }
}

/// A stored entity lent in place: its keys (read in place or decoded into
/// the scan's buffers) and its value, read as a sink asks. The first fault
/// found in the value while lent is kept, and the scan fails with it.
pub struct RawEntity<'a> {
    pub partition_key: &'a str,
    pub row_key: &'a str,
    pub value: &'a [u8],
    pub dict: &'a Dict,
    pub slots: &'a RefCell<Slots>,
    pub fault: RefCell<Option<StorageError>>,
}

impl<'a> RawEntity<'a> {
    fn layout(&self) -> Option<Layout<'a>> {
        match Layout::of(self.value) {
            Ok(l) => Some(l),
            Err(e) => {
                self.keep(e);
                None
            }
        }
    }

    fn keep(&self, e: StorageError) {
        if let Ok(mut fault) = self.fault.try_borrow_mut() {
            fault.get_or_insert(e);
        }
    }

    fn read(&self, layout: &Layout<'a>, i: usize) -> Option<ValueRef<'a>> {
        match layout.value(i) {
            Ok(v) => Some(v),
            Err(e) => {
                self.keep(e);
                None
            }
        }
    }

    /// Reads every property once, to find a fault a reader that wants only
    /// some of them would not meet.
    pub fn check(&self) {
        if let Some(layout) = self.layout() {
            for i in 0..layout.len() {
                if self.dict.name(layout.id(i)).is_none() {
                    self.keep(corrupt("a property id the table's names do not hold"));
                }
                self.read(&layout, i);
            }
        }
    }

    /// The fault met while lent, if any.
    pub fn take_fault(&self) -> Option<StorageError> {
        self.fault.try_borrow_mut().ok().and_then(|mut f| f.take())
    }
}

impl EntityView for RawEntity<'_> {
    fn partition_key(&self) -> &str {
        self.partition_key
    }

    fn row_key(&self) -> &str {
        self.row_key
    }

    fn timestamp(&self) -> DateTime<Utc> {
        match self.value.first_chunk::<8>() {
            Some(ticks) => from_ticks(i64::from_le_bytes(*ticks)),
            None => {
                self.keep(corrupt("value truncated"));
                from_ticks(0)
            }
        }
    }

    fn etag(&self) -> ETag {
        ETag::for_timestamp(&self.timestamp())
    }

    fn property(&self, name: &str) -> Option<ValueRef<'_>> {
        let id = self.dict.id(name)?;
        let layout = self.layout()?;
        let i = (0..layout.len()).find(|&i| layout.id(i) == id)?;
        self.read(&layout, i)
    }

    fn select(&self, names: &[String], f: &mut dyn FnMut(usize, ValueRef<'_>)) {
        if names.is_empty() {
            return;
        }
        let Some(layout) = self.layout() else {
            return;
        };
        let Ok(mut slots) = self.slots.try_borrow_mut() else {
            // Asked from within another `select` of this page: by name.
            for (pos, name) in names.iter().enumerate() {
                if let Some(v) = self.property(name) {
                    f(pos, v);
                }
            }
            return;
        };
        slots.for_names(names, self.dict);
        for i in 0..layout.len() {
            if let Some(pos) = slots.position(layout.id(i))
                && let Some(v) = self.read(&layout, i)
            {
                f(pos, v);
            }
        }
    }

    fn each(&self, f: &mut dyn FnMut(&str, ValueRef<'_>)) {
        let Some(layout) = self.layout() else {
            return;
        };
        for i in 0..layout.len() {
            let Some(name) = self.dict.name(layout.id(i)) else {
                self.keep(corrupt("a property id the table's names do not hold"));
                continue;
            };
            if let Some(v) = self.read(&layout, i) {
                f(name, v);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Properties {
        [
            ("s".to_owned(), EdmValue::String("x".into())),
            ("b".to_owned(), EdmValue::Binary(vec![0, 255])),
            ("t".to_owned(), EdmValue::Boolean(true)),
            ("d".to_owned(), EdmValue::DateTime(from_ticks(-5))),
            ("f".to_owned(), EdmValue::Double(f64::NAN)),
            ("g".to_owned(), EdmValue::Guid(Uuid::from_u128(7))),
            ("i".to_owned(), EdmValue::Int32(-3)),
            ("l".to_owned(), EdmValue::Int64(i64::MIN)),
            ("e".to_owned(), EdmValue::String(String::new())),
        ]
        .into_iter()
        .collect()
    }

    /// Encodes with ids given in order of first use, as a table's
    /// dictionary gives them.
    fn encoded(props: &Properties, dict: &mut Dict) -> Vec<u8> {
        let names: Vec<String> = props.keys().cloned().collect();
        let ids: Vec<u16> = (0..names.len() as u16).collect();
        let bytes = encode(&from_ticks(123_456_789), props, &ids).expect("encodes");
        *dict = Dict::from_names(&names);
        bytes
    }

    #[test]
    fn value_round_trips_and_rejects_every_truncation() {
        let props = sample();
        let mut dict = Dict::default();
        let bytes = encoded(&props, &mut dict);
        let (pk, rk) = (
            PartitionKey::from_stored("p".into()),
            RowKey::from_stored("r".into()),
        );
        let e = decode(pk.clone(), rk.clone(), &bytes, &dict, None).expect("decodes");
        assert_eq!(format!("{:?}", e.entity.properties), format!("{props:?}"));
        assert_eq!(e.timestamp, from_ticks(123_456_789));
        let wanted = ["l".to_owned(), "s".to_owned()];
        let some = decode(pk.clone(), rk.clone(), &bytes, &dict, Some(&wanted)).expect("decodes");
        assert_eq!(
            some.entity.properties.keys().collect::<Vec<_>>(),
            ["l", "s"]
        );
        for cut in 0..bytes.len() {
            assert!(decode(pk.clone(), rk.clone(), &bytes[..cut], &dict, None).is_err());
        }
    }

    #[test]
    fn a_lent_entity_reads_the_properties_asked_for_in_the_order_asked() {
        let props = sample();
        let mut dict = Dict::default();
        let bytes = encoded(&props, &mut dict);
        let slots = RefCell::default();
        let e = RawEntity {
            partition_key: "p",
            row_key: "r",
            value: &bytes,
            dict: &dict,
            slots: &slots,
            fault: RefCell::new(None),
        };
        let names = ["i".to_owned(), "missing".to_owned(), "s".to_owned()];
        let mut got = Vec::new();
        e.select(&names, &mut |pos, v| got.push((pos, v.to_owned_value())));
        got.sort_by_key(|g| g.0);
        assert_eq!(
            got,
            [(0, EdmValue::Int32(-3)), (2, EdmValue::String("x".into()))]
        );
        assert_eq!(e.property("g"), Some(ValueRef::Guid(Uuid::from_u128(7))));
        assert_eq!(e.property("missing"), None);
        e.check();
        assert!(e.take_fault().is_none());
    }
}
