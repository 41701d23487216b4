//! PartitionKey and RowKey: validated key strings ordered as the service orders them,
//! ordinally by UTF-16 code unit.

use std::cmp::Ordering;
use std::fmt;

use super::error::InvalidInput;
use super::value::utf16_bytes;

/// Longest key, in bytes of UTF-16 (the service's 1 KiB).
pub const MAX_KEY_BYTES: usize = 1024;

/// Which of the two keys a message is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyKind {
    /// The PartitionKey.
    PartitionKey,
    /// The RowKey.
    RowKey,
}

impl fmt::Display for KeyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            KeyKind::PartitionKey => "PartitionKey",
            KeyKind::RowKey => "RowKey",
        })
    }
}

/// Checks a key string against the service's rules: at most 1 KiB as UTF-16, none of
/// `/ \ # ?` and no control character (U+0000–U+001F, U+007F–U+009F). Empty is allowed.
pub fn validate_key(kind: KeyKind, s: &str) -> Result<(), InvalidInput> {
    let bytes = utf16_bytes(s);
    if bytes > MAX_KEY_BYTES {
        return Err(InvalidInput::KeyTooLong { kind, bytes });
    }
    if let Some(ch) = s.chars().find(|&c| is_forbidden_key_char(c)) {
        return Err(InvalidInput::KeyCharacter {
            kind,
            ch,
            code: ch as u32,
        });
    }
    Ok(())
}

/// Whether keys may not hold this character.
pub fn is_forbidden_key_char(c: char) -> bool {
    matches!(c, '/' | '\\' | '#' | '?' | '\u{0}'..='\u{1f}' | '\u{7f}'..='\u{9f}')
}

/// Compares two strings ordinally by UTF-16 code unit, the service's key order.
///
/// This differs from Rust's `str` order (UTF-8 bytes = code points) only when a
/// character above U+FFFF (a surrogate pair, 0xD800..) meets one in U+E000–U+FFFF.
pub fn cmp_utf16(a: &str, b: &str) -> Ordering {
    // Skip the common prefix bytewise; compare the rest from a char boundary.
    let common = a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count();
    let mut start = common;
    while !a.is_char_boundary(start) {
        start -= 1;
    }
    a[start..].encode_utf16().cmp(b[start..].encode_utf16())
}

macro_rules! key_newtype {
    ($name:ident, $kind:expr, $doc:literal) => {
        #[doc = $doc]
        #[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
        pub struct $name(String);

        impl $name {
            /// Validates and wraps a key string.
            pub fn new(s: impl Into<String>) -> Result<Self, InvalidInput> {
                let s = s.into();
                validate_key($kind, &s)?;
                Ok(Self(s))
            }

            /// The key as text.
            pub fn as_str(&self) -> &str {
                &self.0
            }

            /// The key's text, owned.
            pub fn into_string(self) -> String {
                self.0
            }

            /// Wraps a string read back from a store, which validated it on
            /// write: for the engine's readers, not a way around validation.
            #[doc(hidden)]
            pub fn from_stored(s: String) -> Self {
                Self(s)
            }
        }

        impl Ord for $name {
            fn cmp(&self, other: &Self) -> Ordering {
                cmp_utf16(&self.0, &other.0)
            }
        }

        impl PartialOrd for $name {
            fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
                Some(self.cmp(other))
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl TryFrom<&str> for $name {
            type Error = InvalidInput;
            fn try_from(s: &str) -> Result<Self, InvalidInput> {
                Self::new(s)
            }
        }
    };
}

key_newtype!(
    PartitionKey,
    KeyKind::PartitionKey,
    "A validated PartitionKey."
);
key_newtype!(RowKey, KeyKind::RowKey, "A validated RowKey.");

/// The longest name a RowKey kind has, colon excluded.
const MAX_KIND: usize = 32;

/// The length of a RowKey's kind, the literal that tells base rows from
/// index rows: its leading name and colon (`BIB:`, `AGE:`, a plain
/// table's `r:`, an index's `BY_AGE:`), or 0 for none. Only a name of
/// ASCII letters, digits and `_` of at most 32 bytes makes a kind, so a
/// key without that shape has none rather than a kind of its own. Read
/// on bytes, as the embedded store keeps keys (a kind is ASCII, so the
/// same in UTF-8 and CESU-8).
pub fn kind_len(rk: &[u8]) -> usize {
    let name_len = rk
        .iter()
        .take(MAX_KIND + 1)
        .position(|b| !(b.is_ascii_alphanumeric() || *b == b'_'));
    match name_len {
        Some(n) if n > 0 && rk[n] == b':' => n + 1,
        _ => 0,
    }
}

/// A RowKey's kind (see [`kind_len`]), "" for none.
pub fn row_kind(rk: &str) -> &str {
    // The kind is ASCII, so it ends on a character boundary.
    &rk[..kind_len(rk.as_bytes())]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utf16_order_differs_from_utf8_above_bmp() {
        // U+10000 is a surrogate pair 0xD800 0xDC00 in UTF-16: below U+E000 there,
        // above it in UTF-8.
        let astral = "\u{10000}";
        let private = "\u{E000}";
        assert_eq!(cmp_utf16(astral, private), Ordering::Less);
        assert_eq!(astral.cmp(private), Ordering::Greater);
        assert_eq!(cmp_utf16("a\u{FFFF}", "a\u{10FFFF}"), Ordering::Greater);
    }

    #[test]
    fn utf16_order_is_ordinary_for_ascii_and_prefixes() {
        assert_eq!(cmp_utf16("111", "2"), Ordering::Less);
        assert_eq!(cmp_utf16("ab", "abc"), Ordering::Less);
        assert_eq!(cmp_utf16("", ""), Ordering::Equal);
        assert_eq!(cmp_utf16("é", "e"), Ordering::Greater);
    }

    #[test]
    fn key_rules() {
        assert!(PartitionKey::new("").is_ok());
        assert!(RowKey::new("x".repeat(512)).is_ok());
        assert!(matches!(
            RowKey::new("x".repeat(513)),
            Err(InvalidInput::KeyTooLong { bytes: 1026, .. })
        ));
        for bad in [
            "a/b", "a\\b", "a#b", "a?b", "a\u{0}", "\u{1f}", "\u{7f}", "\u{9f}",
        ] {
            assert!(PartitionKey::new(bad).is_err(), "{bad:?}");
        }
        assert!(PartitionKey::new("\u{a0}").is_ok());
    }

    #[test]
    fn a_kind_is_a_leading_name_and_colon() {
        assert_eq!(row_kind("BIB:01234__John"), "BIB:");
        assert_eq!(row_kind("r:abc"), "r:");
        assert_eq!(row_kind("BY_AGE:055"), "BY_AGE:");
        assert_eq!(row_kind("01234"), "");
        assert_eq!(row_kind(":x"), "");
        assert_eq!(row_kind("a b:x"), "");
        assert_eq!(row_kind(""), "");
        assert_eq!(row_kind(&format!("{}:", "A".repeat(32))).len(), 33);
        assert_eq!(row_kind(&format!("{}:", "A".repeat(33))), "");
    }
}
