//! Format 1, read only: what `tablesql migrate` reads from a store written
//! before format 2.
//!
//! Keys: UTF-16BE of the PartitionKey, two zero bytes, UTF-16BE of the RowKey.
//! Comparing these bytes is comparing (PartitionKey, RowKey) by UTF-16 code unit,
//! the service's order, because U+0000 cannot occur in a key and so the separator
//! sorts below every code unit.
//!
//! Values: Timestamp ticks (i64 LE), property count (u16 LE), then per property
//! its name (u16 LE length, UTF-8), a type tag and the value (fixed width, or
//! u32 LE length and bytes for String and Binary). The ETag follows from the
//! Timestamp, so it is not stored.

#[cfg(test)]
use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::storage::entity::{ETag, Entity, Properties, StoredEntity};

use crate::storage::value::from_ticks;
#[cfg(test)]
use crate::storage::value::{EdmValue, to_ticks};
use crate::storage::view::ValueRef;
use crate::storage::{PartitionKey, RowKey, StorageError};

/// Appends a string as UTF-16BE.
#[cfg(test)]
fn push_utf16(out: &mut Vec<u8>, s: &str) {
    for unit in s.encode_utf16() {
        out.extend_from_slice(&unit.to_be_bytes());
    }
}

/// The key of an entity.
#[cfg(test)]
pub fn encode_key(pk: &PartitionKey, rk: &RowKey) -> Vec<u8> {
    let mut out = Vec::new();
    push_utf16(&mut out, pk.as_str());
    out.extend_from_slice(&[0, 0]);
    push_utf16(&mut out, rk.as_str());
    out
}

fn corrupt(what: &str) -> StorageError {
    StorageError::Corrupt(what.to_owned())
}

/// Decodes UTF-16BE key bytes into `out` (cleared first), reusing its buffer.
pub fn utf16_into(bytes: &[u8], out: &mut String) -> Result<(), StorageError> {
    out.clear();
    if bytes.chunks_exact(2).all(|c| c[0] == 0 && c[1] < 0x80) {
        // ASCII: the low bytes, copied as bytes into the reused buffer (a
        // char at a time cost a scan's key decoding twice as much).
        let mut buffer = std::mem::take(out).into_bytes();
        buffer.extend(bytes.chunks_exact(2).map(|c| c[1]));
        *out = String::from_utf8(buffer).map_err(|_| corrupt("key is not UTF-16"))?;
        return Ok(());
    }
    let units = bytes
        .chunks_exact(2)
        .map(|c| u16::from_be_bytes([c[0], c[1]]));
    for c in char::decode_utf16(units) {
        out.push(c.map_err(|_| corrupt("key is not UTF-16"))?);
    }
    Ok(())
}

/// Where the separator of a key's PartitionKey and RowKey starts.
pub fn separator(key: &[u8]) -> Result<usize, StorageError> {
    if !key.len().is_multiple_of(2) {
        return Err(corrupt("odd key length"));
    }
    key.chunks_exact(2)
        .position(|c| c == [0, 0])
        .map(|units| units * 2)
        .ok_or_else(|| corrupt("key has no separator"))
}

/// Splits a key back into its PartitionKey and RowKey.
pub fn decode_key(key: &[u8]) -> Result<(PartitionKey, RowKey), StorageError> {
    let sep = separator(key)?;
    let (mut pk, mut rk) = (String::new(), String::new());
    utf16_into(&key[..sep], &mut pk)?;
    utf16_into(&key[sep + 2..], &mut rk)?;
    Ok((PartitionKey::from_stored(pk), RowKey::from_stored(rk)))
}

const STRING: u8 = 1;
const BINARY: u8 = 2;
const BOOLEAN: u8 = 3;
const DATETIME: u8 = 4;
const DOUBLE: u8 = 5;
const GUID: u8 = 6;
const INT32: u8 = 7;
const INT64: u8 = 8;

/// Encodes an entity's Timestamp and properties.
#[cfg(test)]
pub fn encode_value(timestamp: &DateTime<Utc>, properties: &Properties) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    out.extend_from_slice(&to_ticks(timestamp).to_le_bytes());
    // At most 252 properties: validated before any write.
    out.extend_from_slice(&(properties.len() as u16).to_le_bytes());
    for (name, value) in properties {
        out.extend_from_slice(&(name.len() as u16).to_le_bytes());
        out.extend_from_slice(name.as_bytes());
        match value {
            EdmValue::String(s) => {
                out.push(STRING);
                out.extend_from_slice(&(s.len() as u32).to_le_bytes());
                out.extend_from_slice(s.as_bytes());
            }
            EdmValue::Binary(b) => {
                out.push(BINARY);
                out.extend_from_slice(&(b.len() as u32).to_le_bytes());
                out.extend_from_slice(b);
            }
            EdmValue::Boolean(b) => out.extend_from_slice(&[BOOLEAN, u8::from(*b)]),
            EdmValue::DateTime(t) => {
                out.push(DATETIME);
                out.extend_from_slice(&to_ticks(t).to_le_bytes());
            }
            EdmValue::Double(d) => {
                out.push(DOUBLE);
                out.extend_from_slice(&d.to_le_bytes());
            }
            EdmValue::Guid(g) => {
                out.push(GUID);
                out.extend_from_slice(g.as_bytes());
            }
            EdmValue::Int32(i) => {
                out.push(INT32);
                out.extend_from_slice(&i.to_le_bytes());
            }
            EdmValue::Int64(i) => {
                out.push(INT64);
                out.extend_from_slice(&i.to_le_bytes());
            }
        }
    }
    out
}

/// A cursor over value bytes that fails, rather than panics, on truncation.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], StorageError> {
        if self.0.len() < n {
            return Err(corrupt("value truncated"));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], StorageError> {
        let mut a = [0; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }
}

/// Skips one property's value of type `tag`.
fn skip_value(r: &mut Reader<'_>, tag: u8) -> Result<(), StorageError> {
    let n = match tag {
        STRING | BINARY => u32::from_le_bytes(r.array()?) as usize,
        BOOLEAN => 1,
        INT32 => 4,
        DATETIME | DOUBLE | INT64 => 8,
        GUID => 16,
        _ => return Err(corrupt("unknown type tag")),
    };
    r.take(n).map(|_| ())
}

fn read_ref<'a>(r: &mut Reader<'a>, tag: u8) -> Result<ValueRef<'a>, StorageError> {
    Ok(match tag {
        STRING => {
            let len = u32::from_le_bytes(r.array()?) as usize;
            ValueRef::String(
                std::str::from_utf8(r.take(len)?).map_err(|_| corrupt("text is not UTF-8"))?,
            )
        }
        BINARY => {
            let len = u32::from_le_bytes(r.array()?) as usize;
            ValueRef::Binary(r.take(len)?)
        }
        BOOLEAN => ValueRef::Boolean(r.array::<1>()?[0] != 0),
        DATETIME => ValueRef::DateTime(from_ticks(i64::from_le_bytes(r.array()?))),
        DOUBLE => ValueRef::Double(f64::from_le_bytes(r.array()?)),
        GUID => ValueRef::Guid(Uuid::from_bytes(r.array()?)),
        INT32 => ValueRef::Int32(i32::from_le_bytes(r.array()?)),
        INT64 => ValueRef::Int64(i64::from_le_bytes(r.array()?)),
        _ => return Err(corrupt("unknown type tag")),
    })
}

/// Decodes a stored value back into an entity with the given keys, keeping only
/// the properties in `wanted` (all when `None`): the others are skipped unread.
pub fn decode_value(
    pk: PartitionKey,
    rk: RowKey,
    bytes: &[u8],
    wanted: Option<&[String]>,
) -> Result<StoredEntity, StorageError> {
    let mut r = Reader(bytes);
    let timestamp = from_ticks(i64::from_le_bytes(r.array()?));
    let count = u16::from_le_bytes(r.array()?);
    let mut properties = Properties::new();
    // Keys only (a count): the properties are not walked at all.
    let count = if wanted.is_some_and(<[String]>::is_empty) {
        0
    } else {
        count
    };
    for _ in 0..count {
        let name_len = usize::from(u16::from_le_bytes(r.array()?));
        let name = r.take(name_len)?;
        let [tag] = r.array()?;
        if wanted.is_some_and(|w| !w.iter().any(|n| n.as_bytes() == name)) {
            skip_value(&mut r, tag)?;
            continue;
        }
        let name = std::str::from_utf8(name)
            .map_err(|_| corrupt("name is not UTF-8"))?
            .to_owned();
        properties.insert(name, read_ref(&mut r, tag)?.to_owned_value());
    }
    let etag = ETag::for_timestamp(&timestamp);
    Ok(StoredEntity {
        entity: Entity {
            partition_key: pk,
            row_key: rk,
            properties,
        },
        timestamp,
        etag,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_decode() {
        let k = encode_key(
            &PartitionKey::new("p\u{10000}").unwrap(),
            &RowKey::new("r\u{0fff}").unwrap(),
        );
        let (p, r) = decode_key(&k).unwrap();
        assert_eq!((p.as_str(), r.as_str()), ("p\u{10000}", "r\u{0fff}"));
    }

    #[test]
    fn value_round_trips_and_rejects_truncation() {
        let t = from_ticks(123_456_789);
        let props: Properties = [
            ("s".to_owned(), EdmValue::String("x".into())),
            ("b".to_owned(), EdmValue::Binary(vec![0, 255])),
            ("t".to_owned(), EdmValue::Boolean(true)),
            ("d".to_owned(), EdmValue::DateTime(from_ticks(-5))),
            ("f".to_owned(), EdmValue::Double(f64::NAN)),
            ("g".to_owned(), EdmValue::Guid(Uuid::from_u128(7))),
            ("i".to_owned(), EdmValue::Int32(-3)),
            ("l".to_owned(), EdmValue::Int64(i64::MIN)),
        ]
        .into_iter()
        .collect();
        let bytes = encode_value(&t, &props);
        let pk = PartitionKey::new("p").unwrap();
        let rk = RowKey::new("r").unwrap();
        let e = decode_value(pk.clone(), rk.clone(), &bytes, None).unwrap();
        assert_eq!(e.entity.properties, props);
        assert_eq!(e.timestamp, t);
        let wanted = ["l".to_owned(), "s".to_owned()];
        let some = decode_value(pk.clone(), rk.clone(), &bytes, Some(&wanted)).unwrap();
        assert_eq!(
            some.entity.properties.keys().collect::<Vec<_>>(),
            ["l", "s"]
        );
        for cut in 0..bytes.len() {
            assert!(decode_value(pk.clone(), rk.clone(), &bytes[..cut], None).is_err());
        }
    }
}
