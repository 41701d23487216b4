//! One field of a key template: how a value is written into a key and read
//! back, and whether the text order of the encodings is the order of the values.

use std::fmt;

use super::KeyError;
use super::typed::{KeyFloat, Typed};

/// A value of one key field.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum KeyValue {
    /// An integer (fixed-width formats, or decimal text in a free-text field).
    Int(i64),
    /// Text.
    Text(String),
    /// A double (typed fields).
    Double(KeyFloat),
    /// Microseconds since 1970, UTC (typed fields).
    Timestamp(i64),
    /// A UUID (typed fields).
    Uuid(u128),
    /// A boolean (typed fields).
    Bool(bool),
    /// NULL (typed fields): above every value in `Ord`, as PostgreSQL
    /// sorts it ascending.
    Null,
}

impl KeyValue {
    /// The value as a [`KeyRef`] that owns its text.
    pub fn into_ref(self) -> KeyRef<'static> {
        match self {
            KeyValue::Text(t) => KeyRef::Text(t.into()),
            KeyValue::Int(i) => KeyRef::Int(i),
            KeyValue::Double(d) => KeyRef::Double(d),
            KeyValue::Timestamp(t) => KeyRef::Timestamp(t),
            KeyValue::Uuid(u) => KeyRef::Uuid(u),
            KeyValue::Bool(b) => KeyRef::Bool(b),
            KeyValue::Null => KeyRef::Null,
        }
    }

    /// The value borrowed.
    pub fn as_ref(&self) -> KeyRef<'_> {
        match self {
            KeyValue::Int(i) => KeyRef::Int(*i),
            KeyValue::Text(t) => KeyRef::Text(t.as_str().into()),
            KeyValue::Double(d) => KeyRef::Double(*d),
            KeyValue::Timestamp(t) => KeyRef::Timestamp(*t),
            KeyValue::Uuid(u) => KeyRef::Uuid(*u),
            KeyValue::Bool(b) => KeyRef::Bool(*b),
            KeyValue::Null => KeyRef::Null,
        }
    }
}

impl fmt::Display for KeyValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyValue::Int(i) => write!(f, "{i}"),
            KeyValue::Text(s) => f.write_str(s),
            KeyValue::Double(d) => write!(f, "{}", d.get()),
            KeyValue::Timestamp(t) => match chrono::DateTime::from_timestamp_micros(*t) {
                Some(t) => write!(f, "{}", t.format("%Y-%m-%d %H:%M:%S%.6f+00")),
                None => write!(f, "{t}µs"),
            },
            KeyValue::Uuid(u) => write!(f, "{}", uuid::Uuid::from_u128(*u).hyphenated()),
            KeyValue::Bool(b) => write!(f, "{b}"),
            KeyValue::Null => f.write_str("NULL"),
        }
    }
}

/// A value of one key field as read from a key, borrowing its text where
/// the key spells it unescaped.
#[derive(Debug, Clone, PartialEq)]
pub enum KeyRef<'a> {
    /// An integer.
    Int(i64),
    /// Text.
    Text(std::borrow::Cow<'a, str>),
    /// A double.
    Double(KeyFloat),
    /// Microseconds since 1970, UTC.
    Timestamp(i64),
    /// A UUID.
    Uuid(u128),
    /// A boolean.
    Bool(bool),
    /// NULL.
    Null,
}

impl KeyRef<'_> {
    /// The owned value.
    pub fn into_owned(self) -> KeyValue {
        match self {
            KeyRef::Int(i) => KeyValue::Int(i),
            KeyRef::Text(t) => KeyValue::Text(t.into_owned()),
            KeyRef::Double(d) => KeyValue::Double(d),
            KeyRef::Timestamp(t) => KeyValue::Timestamp(t),
            KeyRef::Uuid(u) => KeyValue::Uuid(u),
            KeyRef::Bool(b) => KeyValue::Bool(b),
            KeyRef::Null => KeyValue::Null,
        }
    }
}

/// How a field is written: `{col}`, `{col:05}`, `{col:+05}` or `{col:~05}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldFormat {
    /// Free text, escaped: supports equality and prefix, not order.
    Text,
    /// A non-negative integer zero-padded to `width` digits: order-preserving.
    Padded {
        /// Digits written.
        width: u8,
    },
    /// Any integer in `width` digits plus a sign character: `-` and the nines'
    /// complement for negatives, `0` and the digits otherwise, so that text
    /// order is numeric order across the sign.
    Signed {
        /// Digits written, after the sign character.
        width: u8,
    },
    /// A non-negative integer stored as `10^width − 1 − v`, zero-padded: text
    /// order is descending numeric order (newest-first keys).
    Inverted {
        /// Digits written.
        width: u8,
    },
    /// A typed field (`{c:f}`, `{c:~s,nulls_last}`, ...): any SQL type and
    /// NULL, in either order (see `keys::typed`).
    Typed(Typed),
}

/// Widest fixed-width field: 10^18 − 1 still fits an i64.
pub const MAX_WIDTH: u8 = 18;

impl FieldFormat {
    /// Characters every encoding of the format takes; `None` for free text
    /// and typed fields (their NULL token has its own length).
    pub fn fixed_len(self) -> Option<usize> {
        match self {
            FieldFormat::Text | FieldFormat::Typed(_) => None,
            FieldFormat::Padded { width } | FieldFormat::Inverted { width } => Some(width as usize),
            FieldFormat::Signed { width } => Some(width as usize + 1),
        }
    }

    /// Whether text order of encodings follows value order: `Some(true)`
    /// ascending, `Some(false)` descending, `None` for free text.
    pub fn order(self) -> Option<bool> {
        match self {
            FieldFormat::Text => None,
            FieldFormat::Padded { .. } | FieldFormat::Signed { .. } => Some(true),
            FieldFormat::Inverted { .. } => Some(false),
            FieldFormat::Typed(t) => Some(!t.descending),
        }
    }

    /// The smallest and largest integers the format can hold.
    pub fn int_range(self) -> Option<(i64, i64)> {
        let max = |w: u8| 10i64.pow(u32::from(w)) - 1;
        match self {
            FieldFormat::Text | FieldFormat::Typed(_) => None,
            FieldFormat::Padded { width } | FieldFormat::Inverted { width } => {
                Some((0, max(width)))
            }
            FieldFormat::Signed { width } => Some((-max(width), max(width))),
        }
    }

    /// Writes `value` for column `column`; `escape` lists the characters a
    /// free-text value must escape besides `%` and those keys may not hold.
    /// A typed field is written as one followed by more of the key (text
    /// with its terminator); templates pass where it stands.
    pub fn encode(self, column: &str, value: &KeyValue, escape: &str) -> Result<String, KeyError> {
        let mut out = String::new();
        self.encode_into(column, value, escape, false, &mut out)?;
        Ok(out)
    }

    /// Whether the format can write NULL (typed fields only).
    pub fn holds_null(self) -> bool {
        matches!(self, FieldFormat::Typed(_))
    }

    /// `encode`, appended to `out` (keys are composed into one buffer).
    /// On an error `out` is unchanged.
    pub fn encode_into(
        self,
        column: &str,
        value: &KeyValue,
        escape: &str,
        last: bool,
        out: &mut String,
    ) -> Result<(), KeyError> {
        if let FieldFormat::Typed(t) = self {
            return t.encode_into(column, &value.as_ref(), last, out);
        }
        let int = |v: &KeyValue| match v {
            KeyValue::Int(i) => Ok(*i),
            _ => Err(KeyError::NotAnInteger {
                column: column.to_owned(),
            }),
        };
        if let Some((lo, hi)) = self.int_range() {
            let v = int(value)?;
            if v < lo || v > hi {
                return Err(KeyError::OutOfRange {
                    column: column.to_owned(),
                    value: v,
                    min: lo,
                    max: hi,
                });
            }
        }
        // Writing into a String cannot fail.
        let _ = match self {
            FieldFormat::Text => {
                match value {
                    KeyValue::Text(s) => escape_text_into(s, escape, out),
                    KeyValue::Int(i) => escape_text_into(&i.to_string(), escape, out),
                    other => {
                        return Err(KeyError::WrongType {
                            column: column.to_owned(),
                            expected: if matches!(other, KeyValue::Null) {
                                "non-NULL text (a free-text field has no NULL)"
                            } else {
                                "text or integer"
                            },
                        });
                    }
                }
                Ok(())
            }
            // Returned above.
            FieldFormat::Typed(_) => Ok(()),
            FieldFormat::Padded { width } => push_padded(out, int(value)?, width),
            FieldFormat::Inverted { width } => {
                let max = 10i64.pow(u32::from(width)) - 1;
                push_padded(out, max - int(value)?, width)
            }
            FieldFormat::Signed { width } => {
                let v = int(value)?;
                if v < 0 {
                    let max = 10i64.pow(u32::from(width)) - 1;
                    out.push('-');
                    push_padded(out, max + v, width)
                } else {
                    out.push('0');
                    push_padded(out, v, width)
                }
            }
        };
        Ok(())
    }

    /// Reads back what `encode` wrote (the exact slice of the key).
    pub fn decode(self, column: &str, text: &str) -> Result<KeyValue, KeyError> {
        let bad = || KeyError::Mismatch {
            column: column.to_owned(),
            text: text.to_owned(),
        };
        let digits = |s: &str| -> Result<i64, KeyError> {
            if s.is_empty() {
                return Err(bad());
            }
            s.bytes()
                .try_fold(0i64, |n, b| match b {
                    b'0'..=b'9' => n.checked_mul(10)?.checked_add(i64::from(b - b'0')),
                    _ => None,
                })
                .ok_or_else(bad)
        };
        if self.fixed_len().is_some_and(|n| n != text.len()) {
            return Err(bad());
        }
        Ok(match self {
            FieldFormat::Typed(t) => t.decode(column, text, false)?.into_owned(),
            FieldFormat::Text => KeyValue::Text(unescape_text(text).ok_or_else(bad)?),
            FieldFormat::Padded { .. } => KeyValue::Int(digits(text)?),
            FieldFormat::Inverted { width } => {
                KeyValue::Int(10i64.pow(u32::from(width)) - 1 - digits(text)?)
            }
            FieldFormat::Signed { width } => {
                // Split on a byte boundary only: a multi-byte first
                // character is a mismatch, not a panic.
                let (Some(sign), Some(rest)) = (text.get(..1), text.get(1..)) else {
                    return Err(bad());
                };
                let v = digits(rest)?;
                match sign {
                    "0" => KeyValue::Int(v),
                    "-" => KeyValue::Int(v - (10i64.pow(u32::from(width)) - 1)),
                    _ => return Err(bad()),
                }
            }
        })
    }
}

impl FieldFormat {
    /// Reads the text `encode` writes for this format, and nothing else: a
    /// text in another spelling of the same value is a mismatch. Free text
    /// without escapes is borrowed.
    pub fn read<'a>(
        self,
        column: &str,
        text: &'a str,
        escape: &str,
        last: bool,
    ) -> Result<KeyRef<'a>, KeyError> {
        match self {
            FieldFormat::Typed(t) => return t.decode(column, text, last),
            FieldFormat::Text => {
                let plain = if text.is_ascii() && escape.is_ascii() {
                    // One bit per ASCII byte: the common case, and a scan's
                    // hot path (every field of every key it reads).
                    let mask = escaped_ascii(escape.as_bytes());
                    text.bytes().all(|b| mask & (1u128 << b) == 0)
                } else {
                    !text
                        .chars()
                        .any(|c| always_escaped(c) || escape.contains(c))
                };
                if plain {
                    return Ok(KeyRef::Text(std::borrow::Cow::Borrowed(text)));
                }
            }
            FieldFormat::Padded { .. } | FieldFormat::Inverted { .. } => {
                // Fixed width, digits only: the one spelling of its value.
                return self.decode(column, text).map(KeyValue::into_ref);
            }
            FieldFormat::Signed { .. } => {}
        }
        let value = self.decode(column, text)?;
        if self.encode(column, &value, escape)? != text {
            return Err(KeyError::Mismatch {
                column: column.to_owned(),
                text: text.to_owned(),
            });
        }
        Ok(value.into_ref())
    }
}

/// The ASCII bytes free text always escapes, one bit each: `%`, the
/// control characters and DEL, and `/ \\ # ?` (`always_escaped`).
const ESCAPED_ASCII: u128 = {
    let mut mask = (1u128 << 0x20) - 1;
    let mut i = 0;
    let also = b"%\x7f/\\#?";
    while i < also.len() {
        mask |= 1u128 << also[i];
        i += 1;
    }
    mask
};

/// The ASCII bytes free text escapes before the separator `also` (ASCII),
/// one bit each.
pub(super) fn escaped_ascii(also: &[u8]) -> u128 {
    also.iter().fold(ESCAPED_ASCII, |m, &b| m | (1u128 << b))
}

/// Whether a character must be escaped in any key: `%` (the escape itself)
/// and the characters keys may not hold.
fn always_escaped(c: char) -> bool {
    c == '%' || crate::storage::key::is_forbidden_key_char(c)
}

/// Free text with `%`, forbidden characters and those of `also` as `%XX`.
/// Escaping maps each character on its own, so a prefix of a value encodes to
/// a prefix of its encoding (prefix scans stay prefix scans).
pub fn escape_text(s: &str, also: &str) -> String {
    let mut out = String::with_capacity(s.len());
    escape_text_into(s, also, &mut out);
    out
}

/// `escape_text`, appended to `out`.
pub fn escape_text_into(s: &str, also: &str, out: &mut String) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    // Runs of characters kept as they are are copied whole: most text has
    // nothing to escape, and a key is composed for every point read.
    let mut kept = 0;
    for (at, c) in s.char_indices() {
        let escaped = if c.is_ascii() {
            always_escaped(c)
                || also.as_bytes().contains(&(c as u8))
                || (!also.is_ascii() && also.contains(c))
        } else {
            always_escaped(c) || also.contains(c)
        };
        if !escaped {
            continue;
        }
        out.push_str(&s[kept..at]);
        let mut buf = [0u8; 4];
        for b in c.encode_utf8(&mut buf).bytes() {
            out.push('%');
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 0xf)]));
        }
        kept = at + c.len_utf8();
    }
    out.push_str(&s[kept..]);
}

/// Appends `v` zero-padded to `width` digits, as `{:0width$}` writes it,
/// without the formatting machinery: a point read composes its key at
/// every run. The formats' range checks leave `v` not negative here.
pub(super) fn push_padded(out: &mut String, v: i64, width: u8) -> std::fmt::Result {
    if v < 0 {
        use std::fmt::Write;
        return write!(out, "{v:0w$}", w = usize::from(width));
    }
    let mut digits = [0u8; 20];
    let mut n = v.unsigned_abs();
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    let len = digits.len() - at;
    out.extend(std::iter::repeat_n(
        '0',
        usize::from(width).saturating_sub(len),
    ));
    out.extend(digits[at..].iter().map(|&d| char::from(d)));
    Ok(())
}

/// Undoes `escape_text`; `None` for a malformed escape.
pub fn unescape_text(s: &str) -> Option<String> {
    if !s.contains('%') {
        return Some(s.to_owned());
    }
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ascii_mask_escapes_exactly_what_every_key_escapes() {
        for b in 0u8..128 {
            let in_mask = ESCAPED_ASCII & (1u128 << b) != 0;
            assert_eq!(in_mask, always_escaped(char::from(b)), "byte {b:#04x}");
        }
    }

    #[test]
    fn escapes_are_upper_case_hex_of_each_utf8_byte() {
        assert_eq!(
            escape_text("a/b%c_é\u{1}\u{85}ü_", "_ü"),
            "a%2Fb%25c%5Fé%01%C2%85%C3%BC%5F"
        );
        assert_eq!(escape_text("plain", "_"), "plain");
        assert_eq!(escape_text("", "_"), "");
        let mut out = String::from("K:");
        escape_text_into("x_y", "_", &mut out);
        assert_eq!(out, "K:x%5Fy");
    }

    #[test]
    fn fixed_width_encodings() {
        let enc = |f: FieldFormat, v: i64| f.encode("c", &KeyValue::Int(v), "").unwrap();
        assert_eq!(enc(FieldFormat::Padded { width: 5 }, 1234), "01234");
        assert_eq!(enc(FieldFormat::Inverted { width: 3 }, 55), "944");
        assert_eq!(enc(FieldFormat::Signed { width: 3 }, 7), "0007");
        assert_eq!(enc(FieldFormat::Signed { width: 3 }, -1), "-998");
        assert_eq!(enc(FieldFormat::Signed { width: 3 }, -999), "-000");
        assert!(matches!(
            FieldFormat::Padded { width: 2 }.encode("age", &KeyValue::Int(100), ""),
            Err(KeyError::OutOfRange { .. })
        ));
        assert!(matches!(
            FieldFormat::Padded { width: 2 }.encode("age", &KeyValue::Int(-1), ""),
            Err(KeyError::OutOfRange { .. })
        ));
    }

    #[test]
    fn text_escapes_percent_forbidden_and_separator_characters() {
        assert_eq!(escape_text("a_b/c%d#e", "_"), "a%5Fb%2Fc%25d%23e");
        assert_eq!(unescape_text("a%5Fb%2Fc%25d%23e").unwrap(), "a_b/c%d#e");
        assert_eq!(escape_text("\u{7f}é", ""), "%7Fé");
        assert_eq!(escape_text("\u{85}", ""), "%C2%85");
        assert_eq!(unescape_text("%C2%85").unwrap(), "\u{85}");
        assert_eq!(unescape_text("%G1"), None);
        assert_eq!(unescape_text("%4"), None);
    }
}
