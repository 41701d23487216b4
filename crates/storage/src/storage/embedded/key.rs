//! Format 2 keys: CESU-8 of the PartitionKey, a zero byte, CESU-8 of the
//! RowKey.
//!
//! Table Storage orders keys by UTF-16 code unit. UTF-8 orders by code
//! point, which differs above U+FFFF: a supplementary character's
//! surrogates (D800-DFFF) sort below U+E000-U+FFFF in UTF-16 but above them
//! in UTF-8. CESU-8 writes each surrogate as its own three-byte sequence, so
//! its bytes sort as UTF-16 code units do, and for the Basic Multilingual
//! Plane (every ASCII key among it) it is UTF-8: the key reads as a `&str`
//! in place, at half the bytes of the UTF-16 that format 1 stored. U+0000
//! cannot occur in a key, so the zero separator sorts below every
//! character. (Hand-written rather than the `cesu8` crate: a scan needs
//! the in-place reading and the appending into a reused buffer, which are
//! the whole of the code.)

use std::borrow::Cow;

use crate::storage::{PartitionKey, RowKey, StorageError};

/// Appends `s` in CESU-8.
pub fn push(out: &mut Vec<u8>, s: &str) {
    // Below U+10000 (every key but those with supplementary characters)
    // CESU-8 is UTF-8.
    if is_utf8_cesu(s) {
        out.extend_from_slice(s.as_bytes());
        return;
    }
    for c in s.chars() {
        if (c as u32) < 0x10000 {
            let mut buf = [0; 4];
            out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
        } else {
            let mut units = [0; 2];
            for &unit in c.encode_utf16(&mut units).iter() {
                push_surrogate(out, unit);
            }
        }
    }
}

/// A surrogate code unit as the three bytes UTF-8 would give it if it
/// were a character.
fn push_surrogate(out: &mut Vec<u8>, unit: u16) {
    out.extend_from_slice(&[
        0xE0 | (unit >> 12) as u8,
        0x80 | ((unit >> 6) & 0x3F) as u8,
        0x80 | (unit & 0x3F) as u8,
    ]);
}

/// A key's CESU-8 bytes, as compared in the store's order.
pub fn bytes(s: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len());
    push(&mut out, s);
    out
}

/// As `bytes`, but lent from `s` where they are its UTF-8 (no
/// supplementary character): a point read's bounds then cost no copy.
pub fn bytes_of(s: &str) -> Cow<'_, [u8]> {
    if is_utf8_cesu(s) {
        Cow::Borrowed(s.as_bytes())
    } else {
        Cow::Owned(bytes(s))
    }
}

/// Whether `s`'s UTF-8 is its CESU-8: four-byte UTF-8 sequences (the
/// supplementary characters) start with 0xF0-0xF4.
fn is_utf8_cesu(s: &str) -> bool {
    !s.bytes().any(|b| b >= 0xF0)
}

/// The bytes that every key of a partition starts with.
pub fn partition_prefix(pk: &PartitionKey) -> Vec<u8> {
    let mut out = Vec::with_capacity(pk.as_str().len() + 1);
    push(&mut out, pk.as_str());
    out.push(0);
    out
}

/// `partition_prefix` of a PartitionKey already in CESU-8, as a scan
/// holds it.
pub fn partition_prefix_bytes(pk: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(pk.len() + 1);
    out.extend_from_slice(pk);
    out.push(0);
    out
}

/// The smallest key above every key of a partition: its prefix with the
/// separator raised to 1, below every character a key may hold.
pub fn after_partition(pk: &PartitionKey) -> Vec<u8> {
    raise_separator(partition_prefix(pk))
}

/// `after_partition` of a PartitionKey already in CESU-8.
pub fn after_partition_bytes(pk: &[u8]) -> Vec<u8> {
    raise_separator(partition_prefix_bytes(pk))
}

fn raise_separator(mut prefix: Vec<u8>) -> Vec<u8> {
    if let Some(last) = prefix.last_mut() {
        *last = 1;
    }
    prefix
}

/// The key of an entity.
pub fn encode(pk: &PartitionKey, rk: &RowKey) -> Vec<u8> {
    let mut out = partition_prefix(pk);
    push(&mut out, rk.as_str());
    out
}

/// The smallest key above an entity's key and below every key that
/// extends it.
#[cfg(test)]
pub fn after(pk: &PartitionKey, rk: &RowKey) -> Vec<u8> {
    let mut out = encode(pk, rk);
    out.push(0);
    out
}

fn corrupt(what: &str) -> StorageError {
    StorageError::Corrupt(what.to_owned())
}

/// Where the separator of a key's PartitionKey and RowKey is.
pub fn separator(key: &[u8]) -> Result<usize, StorageError> {
    key.iter()
        .position(|&b| b == 0)
        .ok_or_else(|| corrupt("key has no separator"))
}

/// Reads CESU-8 key bytes as text: in place where they are UTF-8 (no
/// supplementary character), else decoded into `wide`.
pub fn read<'b>(bytes: &'b [u8], wide: &'b mut String) -> Result<&'b str, StorageError> {
    match std::str::from_utf8(bytes) {
        // A four-byte sequence is valid UTF-8 but never CESU-8. (ASCII,
        // nearly every key, is told word by word.)
        Ok(s) if s.is_ascii() || !bytes.iter().any(|&b| b >= 0xF0) => Ok(s),
        _ => {
            decode_into(bytes, wide)?;
            Ok(wide.as_str())
        }
    }
}

/// Decodes CESU-8 into `out` (cleared first): surrogate pairs, each
/// written as three bytes, become one character.
pub fn decode_into(bytes: &[u8], out: &mut String) -> Result<(), StorageError> {
    out.clear();
    let mut units = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        let (cp, len) = match b {
            0x00..=0x7F => (u32::from(b), 1),
            0xC0..=0xDF => (u32::from(b & 0x1F), 2),
            0xE0..=0xEF => (u32::from(b & 0x0F), 3),
            _ => return Err(corrupt("key is not CESU-8")),
        };
        let tail = bytes
            .get(i + 1..i + len)
            .ok_or_else(|| corrupt("key is not CESU-8"))?;
        let mut cp = cp;
        for &t in tail {
            if t & 0xC0 != 0x80 {
                return Err(corrupt("key is not CESU-8"));
            }
            cp = (cp << 6) | u32::from(t & 0x3F);
        }
        // Three bytes hold at most 0xFFFF.
        units.push(u16::try_from(cp).map_err(|_| corrupt("key is not CESU-8"))?);
        i += len;
    }
    for c in char::decode_utf16(units) {
        out.push(c.map_err(|_| corrupt("key is not CESU-8"))?);
    }
    Ok(())
}

/// Splits a key back into its PartitionKey and RowKey.
pub fn decode(key: &[u8]) -> Result<(PartitionKey, RowKey), StorageError> {
    let sep = separator(key)?;
    let (mut pk, mut rk) = (String::new(), String::new());
    decode_into(&key[..sep], &mut pk)?;
    decode_into(&key[sep + 1..], &mut rk)?;
    Ok((PartitionKey::from_stored(pk), RowKey::from_stored(rk)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn k(p: &str, r: &str) -> Vec<u8> {
        encode(
            &PartitionKey::from_stored(p.to_owned()),
            &RowKey::from_stored(r.to_owned()),
        )
    }

    #[test]
    fn ascii_keys_are_their_own_bytes() {
        assert_eq!(k("p", "BIB:01"), b"p\0BIB:01");
    }

    #[test]
    fn ends_of_a_partition_and_of_a_key_bound_what_they_should() {
        let (a, b) = (
            PartitionKey::from_stored("a".into()),
            RowKey::from_stored("b".into()),
        );
        assert!(k("a", "\u{FFFF}") < after_partition(&a));
        assert!(after_partition(&a) < k("a ", ""));
        assert!(k("a", "b") < after(&a, &b));
        assert!(after(&a, &b) < k("a", "b "));
    }

    #[test]
    fn supplementary_characters_sort_below_the_private_use_area_as_in_utf16() {
        assert!(k("\u{10000}", "") < k("\u{E000}", ""));
        assert!(k("p", "\u{1F600}") < k("p", "\u{FFFF}"));
        let (p, r) = decode(&k("p\u{10000}", "r\u{0fff}\u{1F600}")).expect("decodes");
        assert_eq!(
            (p.as_str(), r.as_str()),
            ("p\u{10000}", "r\u{0fff}\u{1F600}")
        );
    }

    /// Key characters: anything but the ones Table Storage refuses in keys
    /// (`/ \ # ?` and control characters), weighted towards the planes'
    /// edges where UTF-8 and UTF-16 orders part.
    fn key_text() -> impl Strategy<Value = String> {
        let c = prop_oneof![
            proptest::char::range(' ', '~'),
            proptest::char::range('\u{A0}', '\u{7FF}'),
            proptest::char::range('\u{800}', '\u{D7FF}'),
            proptest::char::range('\u{E000}', '\u{FFFF}'),
            proptest::char::range('\u{10000}', '\u{10FFFF}'),
        ]
        .prop_filter("a key character", |c| !matches!(c, '/' | '\\' | '#' | '?'));
        proptest::collection::vec(c, 0..6).prop_map(|v| v.into_iter().collect())
    }

    proptest! {
        /// Format 2's byte order of (PartitionKey, RowKey) is Table
        /// Storage's: by PartitionKey, then RowKey, each by UTF-16 code unit.
        #[test]
        fn byte_order_is_table_storage_order(
            a in (key_text(), key_text()),
            b in (key_text(), key_text()),
        ) {
            let utf16 = |s: &str| s.encode_utf16().collect::<Vec<_>>();
            let service = utf16(&a.0).cmp(&utf16(&b.0)).then(utf16(&a.1).cmp(&utf16(&b.1)));
            prop_assert_eq!(k(&a.0, &a.1).cmp(&k(&b.0, &b.1)), service);
            let (p, r) = decode(&k(&a.0, &a.1)).expect("decodes");
            prop_assert_eq!((p.as_str(), r.as_str()), (a.0.as_str(), a.1.as_str()));
            let (stored, mut wide) = (bytes(&a.1), String::new());
            prop_assert_eq!(read(&stored, &mut wide).expect("reads"), a.1.as_str());
        }
    }
}
