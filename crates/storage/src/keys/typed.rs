//! Typed key fields: every SQL type a column may have, and NULL, written so
//! that the key order (UTF-16 code units, the store's) is the order
//! PostgreSQL gives the values, ascending or descending, NULLs first or last.
//!
//! The legacy formats (`{c}`, `{c:05}`, `{c:+05}`, `{c:~05}`) hold integers
//! and text that applications already write; they have no NULL and free
//! text has no order. A typed field is spelled `{c:[~]K[,nulls_first|,nulls_last]}`
//! with kind `K`:
//!
//! | kind   | type      | written as                                              |
//! |--------|-----------|---------------------------------------------------------|
//! | `iNN`  | integer   | `0` and NN digits, or `-` and the nines' complement     |
//! | `f`    | double    | 16 hex digits of the IEEE bits, sign-flipped            |
//! | `t`    | timestamp | `2024-05-01T09:30:00.000000Z` (µs, UTC)                 |
//! | `u`    | uuid      | its lower-case hyphenated text                          |
//! | `b`    | boolean   | `0` / `1`                                               |
//! | `s`    | text      | itself, with an order-keeping escape and a terminator   |
//!
//! `~` writes the descending form: the digits complemented for the fixed
//! widths, and for text the inverted UTF-8 bytes in hex, ended by `}`.
//! NULL is one token, [`NULL_LOW`] or [`NULL_HIGH`], placed as PostgreSQL
//! places NULL: last ascending, first descending, or as written.
//!
//! Ascending text keeps what keys may hold and is readable: a character is
//! itself, except the lowest character (space) and those keys may not hold.
//! Order survives because each escape sorts where its character would: a
//! space or a control character is a space and a higher mark (` _`,
//! ` "1F`), the terminator ` !` is below them all (so `Jo` < `JoA`), and a
//! forbidden character `f` is the allowed character just below it followed
//! by [`HIGH`], above anything that can follow a plain character. A
//! double's −0 is written as 0 and every NaN as one NaN (PostgreSQL's
//! `=` does not tell them apart; NaN sorts above +∞).

use std::fmt::Write;

use super::KeyError;
use super::field::KeyRef;

/// The mark of an escape, and the NULL of NULLS LAST: above every
/// character a typed field writes otherwise (U+FFFD; the three characters
/// from it up are escaped in text).
pub const HIGH: char = '\u{FFFD}';

/// NULL where NULLs sort last.
pub const NULL_HIGH: &str = "\u{FFFD}";

/// NULL where NULLs sort first: below every first character a typed field
/// writes otherwise (a text field's lowest is ` !`).
pub const NULL_LOW: &str = "  ";

/// Ends an ascending text value: below every character's encoding.
const TERMINATOR: &str = " !";

/// Ends a descending text value: above every hex digit.
const DESC_END: char = '}';

/// What a typed field holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TypedKind {
    /// An integer in `width` digits and a sign character.
    Int {
        /// Digits written (1 to 19).
        width: u8,
    },
    /// A double.
    Double,
    /// A timestamp in microseconds, UTC.
    Timestamp,
    /// A date, held as the microseconds of its midnight UTC.
    Date,
    /// A UUID.
    Uuid,
    /// A boolean.
    Bool,
    /// Text.
    Text,
}

/// A typed field's format: its kind, direction and place of NULL.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Typed {
    /// What it holds.
    pub kind: TypedKind,
    /// Written so that key order is descending value order.
    pub descending: bool,
    /// NULL sorts before every value (the default descending).
    pub nulls_first: bool,
}

/// A double as a key value: −0 is 0 and every NaN the same NaN, so that
/// equality and order are PostgreSQL's (`'NaN'` above `'Infinity'`).
#[derive(Debug, Clone, Copy)]
pub struct KeyFloat(f64);

impl KeyFloat {
    /// The key value of `v`.
    pub fn new(v: f64) -> Self {
        KeyFloat(if v.is_nan() {
            f64::NAN
        } else if v == 0.0 {
            0.0
        } else {
            v
        })
    }

    /// The double.
    pub fn get(self) -> f64 {
        self.0
    }

    /// Bits whose unsigned order is the value order.
    fn ordered_bits(self) -> u64 {
        let bits = self.0.to_bits();
        if bits >> 63 == 0 {
            bits | (1 << 63)
        } else {
            !bits
        }
    }

    fn from_ordered_bits(k: u64) -> f64 {
        f64::from_bits(if k >> 63 == 1 { k & !(1 << 63) } else { !k })
    }
}

impl PartialEq for KeyFloat {
    fn eq(&self, other: &Self) -> bool {
        self.ordered_bits() == other.ordered_bits()
    }
}
impl Eq for KeyFloat {}
impl PartialOrd for KeyFloat {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for KeyFloat {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.ordered_bits().cmp(&other.ordered_bits())
    }
}
impl std::hash::Hash for KeyFloat {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.ordered_bits().hash(state);
    }
}

/// The largest magnitude `width` digits hold (i128: 19 digits hold any i64).
fn int_max(width: u8) -> i128 {
    10i128.pow(u32::from(width)) - 1
}

impl Typed {
    /// Parses a spec after `:` such as `~f,nulls_last` or `i10`; `None`
    /// if it is not a typed spec.
    pub fn parse(spec: &str) -> Option<Result<Typed, String>> {
        let (body, nulls) = match spec.split_once(',') {
            Some((b, n)) => (b, Some(n.trim())),
            None => (spec, None),
        };
        let (descending, letters) = match body.strip_prefix('~') {
            Some(rest) => (true, rest),
            None => (false, body),
        };
        let kind = match letters.as_bytes().first()? {
            b'i' => match letters[1..].parse::<u8>() {
                Ok(w) if (1..=19).contains(&w) => TypedKind::Int { width: w },
                _ => return Some(Err(format!("width of {letters:?} must be 1 to 19 digits"))),
            },
            b'f' if letters.len() == 1 => TypedKind::Double,
            b't' if letters.len() == 1 => TypedKind::Timestamp,
            b'd' if letters.len() == 1 => TypedKind::Date,
            b'u' if letters.len() == 1 => TypedKind::Uuid,
            b'b' if letters.len() == 1 => TypedKind::Bool,
            b's' if letters.len() == 1 => TypedKind::Text,
            _ => return None,
        };
        let nulls_first = match nulls {
            None => descending,
            Some("nulls_first") => true,
            Some("nulls_last") => false,
            Some(other) => {
                return Some(Err(format!("{other:?} is not nulls_first or nulls_last")));
            }
        };
        Some(Ok(Typed {
            kind,
            descending,
            nulls_first,
        }))
    }

    /// Whether a text value is followed by its terminator: unless it ends
    /// the key, where a shorter value already sorts first (a NULLS FIRST
    /// field keeps it, so that NULL sorts below the empty text).
    fn terminated(self, last: bool) -> bool {
        !last || self.nulls_first
    }

    /// The NULL token.
    pub fn null_token(self) -> &'static str {
        if self.nulls_first {
            NULL_LOW
        } else {
            NULL_HIGH
        }
    }

    /// Appends `v`'s encoding to `out`; `last` when the field ends the key.
    /// On an error `out` is unchanged.
    pub fn encode_into(
        self,
        column: &str,
        v: &KeyRef<'_>,
        last: bool,
        out: &mut String,
    ) -> Result<(), KeyError> {
        let wrong = || KeyError::WrongType {
            column: column.to_owned(),
            expected: self.kind_name(),
        };
        let start = out.len();
        match (self.kind, v) {
            (_, KeyRef::Null) => {
                out.push_str(self.null_token());
                return Ok(());
            }
            (TypedKind::Int { width }, KeyRef::Int(i)) => {
                let max = int_max(width);
                let i = i128::from(*i);
                if i.abs() > max {
                    return Err(KeyError::OutOfRange {
                        column: column.to_owned(),
                        value: i as i64,
                        min: (-max).max(i128::from(i64::MIN)) as i64,
                        max: max.min(i128::from(i64::MAX)) as i64,
                    });
                }
                let i = if self.descending { -i } else { i };
                let w = usize::from(width);
                let _ = if i < 0 {
                    write!(out, "-{:0w$}", max + i)
                } else {
                    write!(out, "0{i:0w$}")
                };
                return Ok(());
            }
            (TypedKind::Double, KeyRef::Double(d)) => {
                let bits = d.ordered_bits();
                let _ = write!(out, "{:016X}", if self.descending { !bits } else { bits });
                return Ok(());
            }
            (TypedKind::Timestamp, KeyRef::Timestamp(micros)) => {
                let t = chrono::DateTime::from_timestamp_micros(*micros)
                    .filter(|t| (0..=9999).contains(&chrono::Datelike::year(t)))
                    .ok_or_else(|| KeyError::Mismatch {
                        column: column.to_owned(),
                        text: format!("{micros} µs is outside the years 0 to 9999 a key holds"),
                    })?;
                let _ = write!(out, "{}", t.format("%Y-%m-%dT%H:%M:%S%.6fZ"));
            }
            (TypedKind::Date, KeyRef::Timestamp(micros)) => {
                // A date is its midnight; any other instant is no date.
                let t = chrono::DateTime::from_timestamp_micros(*micros)
                    .filter(|t| (0..=9999).contains(&chrono::Datelike::year(t)))
                    .filter(|t| t.timestamp_micros().rem_euclid(86_400_000_000) == 0)
                    .ok_or_else(|| KeyError::Mismatch {
                        column: column.to_owned(),
                        text: format!("{micros} µs is not a midnight in the years 0 to 9999"),
                    })?;
                let _ = write!(out, "{}", t.format("%Y-%m-%d"));
            }
            (TypedKind::Uuid, KeyRef::Uuid(u)) => {
                let _ = write!(out, "{}", uuid::Uuid::from_u128(*u).hyphenated());
            }
            (TypedKind::Bool, KeyRef::Bool(b)) => {
                out.push(if *b != self.descending { '1' } else { '0' });
                return Ok(());
            }
            (TypedKind::Text, KeyRef::Text(s)) if self.descending => {
                for b in s.bytes() {
                    let _ = write!(out, "{:02X}", 255 - b);
                }
                out.push(DESC_END);
                return Ok(());
            }
            (TypedKind::Text, KeyRef::Text(s)) => {
                escape_ordered(s, out);
                if self.terminated(last) {
                    out.push_str(TERMINATOR);
                }
                return Ok(());
            }
            _ => {
                out.truncate(start);
                return Err(wrong());
            }
        }
        if self.descending {
            // Timestamps and UUIDs: every digit complemented in its alphabet.
            let written: String = out[start..]
                .chars()
                .map(|c| complement(self.kind, c))
                .collect();
            out.truncate(start);
            out.push_str(&written);
        }
        Ok(())
    }

    /// How many bytes at the start of `rest` this field's encoding takes
    /// (`last`: it ends the key); `None` if `rest` does not start with one.
    pub fn span(self, rest: &str, last: bool) -> Option<usize> {
        for token in [NULL_LOW, NULL_HIGH] {
            if rest.starts_with(token) && token == self.null_token() {
                return Some(token.len());
            }
        }
        let fixed = match self.kind {
            TypedKind::Int { width } => usize::from(width) + 1,
            TypedKind::Double => 16,
            TypedKind::Timestamp => 27,
            TypedKind::Date => 10,
            TypedKind::Uuid => 36,
            TypedKind::Bool => 1,
            TypedKind::Text if self.descending => {
                return rest.find(DESC_END).map(|i| i + 1);
            }
            TypedKind::Text if !self.terminated(last) => return Some(rest.len()),
            TypedKind::Text => return find_terminator(rest).map(|i| i + TERMINATOR.len()),
        };
        (rest.len() >= fixed && rest.is_char_boundary(fixed)).then_some(fixed)
    }

    /// Reads back exactly what `encode_into` writes (the field's span).
    pub fn decode<'a>(
        self,
        column: &str,
        text: &'a str,
        last: bool,
    ) -> Result<KeyRef<'a>, KeyError> {
        let bad = || KeyError::Mismatch {
            column: column.to_owned(),
            text: text.to_owned(),
        };
        if text == self.null_token() {
            return Ok(KeyRef::Null);
        }
        // A fixed-width encoding in its ascending spelling.
        let plain: std::borrow::Cow<'a, str> = match self.kind {
            TypedKind::Timestamp | TypedKind::Date | TypedKind::Uuid if self.descending => text
                .chars()
                .map(|c| complement(self.kind, c))
                .collect::<String>()
                .into(),
            _ => text.into(),
        };
        let v = match self.kind {
            TypedKind::Int { width } => {
                let max = int_max(width);
                let digits = plain.get(1..).ok_or_else(bad)?;
                if digits.len() != usize::from(width) || !digits.bytes().all(|b| b.is_ascii_digit())
                {
                    return Err(bad());
                }
                let n: i128 = digits.parse().map_err(|_| bad())?;
                let i = match &plain[..1] {
                    "0" => n,
                    "-" => n - max,
                    _ => return Err(bad()),
                };
                let i = if self.descending { -i } else { i };
                KeyRef::Int(i64::try_from(i).map_err(|_| bad())?)
            }
            TypedKind::Double => {
                let bits = u64::from_str_radix(&plain, 16).map_err(|_| bad())?;
                let bits = if self.descending { !bits } else { bits };
                KeyRef::Double(KeyFloat::new(KeyFloat::from_ordered_bits(bits)))
            }
            TypedKind::Timestamp => {
                let t = chrono::NaiveDateTime::parse_from_str(&plain, "%Y-%m-%dT%H:%M:%S%.6fZ")
                    .map_err(|_| bad())?;
                KeyRef::Timestamp(t.and_utc().timestamp_micros())
            }
            TypedKind::Date => {
                let d = chrono::NaiveDate::parse_from_str(&plain, "%Y-%m-%d").map_err(|_| bad())?;
                if plain.len() != 10 {
                    return Err(bad());
                }
                KeyRef::Timestamp(
                    d.and_time(chrono::NaiveTime::MIN)
                        .and_utc()
                        .timestamp_micros(),
                )
            }
            TypedKind::Uuid => {
                KeyRef::Uuid(uuid::Uuid::try_parse(&plain).map_err(|_| bad())?.as_u128())
            }
            TypedKind::Bool => match plain.as_ref() {
                "0" => KeyRef::Bool(self.descending),
                "1" => KeyRef::Bool(!self.descending),
                _ => return Err(bad()),
            },
            TypedKind::Text if self.descending => {
                let hex = text.strip_suffix(DESC_END).ok_or_else(bad)?;
                let bytes: Vec<u8> = hex_bytes(hex)
                    .ok_or_else(bad)?
                    .into_iter()
                    .map(|b| 255 - b)
                    .collect();
                KeyRef::Text(String::from_utf8(bytes).map_err(|_| bad())?.into())
            }
            TypedKind::Text => {
                let body = if self.terminated(last) {
                    text.strip_suffix(TERMINATOR).ok_or_else(bad)?
                } else {
                    text
                };
                KeyRef::Text(unescape_ordered(body).ok_or_else(bad)?)
            }
        };
        self.check(column, text, v, last)
    }

    /// Only the spelling `encode_into` writes reads back (a lookup composes
    /// keys, so another spelling would be found by scans only).
    fn check<'a>(
        self,
        column: &str,
        text: &str,
        v: KeyRef<'a>,
        last: bool,
    ) -> Result<KeyRef<'a>, KeyError> {
        let mut again = String::with_capacity(text.len());
        self.encode_into(column, &v, last, &mut again)?;
        if again != text {
            return Err(KeyError::Mismatch {
                column: column.to_owned(),
                text: text.to_owned(),
            });
        }
        Ok(v)
    }

    /// The kind's name in errors.
    pub fn kind_name(self) -> &'static str {
        match self.kind {
            TypedKind::Int { .. } => "integer",
            TypedKind::Double => "double",
            TypedKind::Timestamp => "timestamp",
            TypedKind::Date => "date",
            TypedKind::Uuid => "uuid",
            TypedKind::Bool => "boolean",
            TypedKind::Text => "text",
        }
    }

    /// The least text above every key whose field `n` starts with an
    /// encoding of text starting with `prefix`, and the first such key:
    /// `(start, end)` after the key's text before the field.
    pub fn text_prefix(self, prefix: &str, last: bool) -> (String, String) {
        if self.descending {
            let mut hex = String::new();
            for b in prefix.bytes() {
                let _ = write!(hex, "{:02X}", 255 - b);
            }
            if hex.is_empty() {
                // Every value, no NULL: from the first hex digit to just
                // past the empty text (`}`).
                return ("0".into(), "~".into());
            }
            let end = super::successor(&hex).unwrap_or_else(|| hex.clone() + "\u{FFFF}");
            (hex, end)
        } else {
            let mut start = String::new();
            escape_ordered(prefix, &mut start);
            let end = format!("{start}{HIGH}");
            if start.is_empty() && self.terminated(last) {
                // Every value: from the lowest encoding, the empty text's
                // (a NULLS FIRST token sorts below it).
                return (TERMINATOR.into(), end);
            }
            (start, end)
        }
    }
}

/// The descending form of a character of a timestamp (decimal digits) or
/// a UUID (lower-case hex digits): the digit complemented in its alphabet;
/// the rest (`-`, `:`, `T`, `Z`) kept. Applied twice it is the identity.
fn complement(kind: TypedKind, c: char) -> char {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    match (
        kind,
        c.to_digit(if kind == TypedKind::Uuid { 16 } else { 10 }),
    ) {
        (TypedKind::Uuid, Some(d)) if !c.is_ascii_uppercase() => char::from(HEX[15 - d as usize]),
        (TypedKind::Timestamp | TypedKind::Date, Some(d)) => char::from(b'9' - d as u8),
        _ => c,
    }
}

/// Where the terminator of an ascending text value starts in `rest`.
fn find_terminator(rest: &str) -> Option<usize> {
    let b = rest.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b' ' {
            match b.get(i + 1) {
                Some(b'!') => return Some(i),
                Some(b'_') => i += 2,
                Some(b'"') => i += 4,
                _ => return None,
            }
        } else {
            i += 1;
        }
    }
    None
}

/// The allowed character just below a forbidden one, which leads its escape.
fn below(c: char) -> Option<char> {
    Some(match c {
        '#' => '"',
        '/' => '.',
        '?' => '>',
        '\\' => '[',
        '\u{7f}'..='\u{9f}' => '~',
        '\u{FFFD}'..='\u{FFFF}' => '\u{FFFC}',
        _ => return None,
    })
}

/// Ascending text's escape (see the module doc).
fn escape_ordered(s: &str, out: &mut String) {
    for c in s.chars() {
        match c {
            ' ' => out.push_str(" _"),
            '\u{0}'..='\u{1f}' => {
                let _ = write!(out, " \"{:02X}", c as u32);
            }
            _ => match below(c) {
                Some(lead) => {
                    out.push(lead);
                    out.push(HIGH);
                    let _ = write!(out, "{:02X}", (c as u32) & 0xff);
                }
                None => out.push(c),
            },
        }
    }
}

/// Undoes `escape_ordered`; `None` for text it does not write.
fn unescape_ordered(s: &str) -> Option<std::borrow::Cow<'_, str>> {
    if !s.contains([' ', HIGH]) {
        return Some(s.into());
    }
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    let hex2 = |chars: &mut std::iter::Peekable<std::str::Chars<'_>>| -> Option<u32> {
        let h: String = [chars.next()?, chars.next()?].iter().collect();
        u32::from_str_radix(&h, 16).ok()
    };
    while let Some(c) = chars.next() {
        if c == ' ' {
            match chars.next()? {
                '_' => out.push(' '),
                '"' => out.push(char::from_u32(hex2(&mut chars)?)?),
                _ => return None,
            }
        } else if chars.peek() == Some(&HIGH) {
            chars.next();
            let low = hex2(&mut chars)?;
            let full = char::from_u32((c as u32 & !0xff) | low)?;
            if below(full) != Some(c) {
                return None;
            }
            out.push(full);
        } else {
            out.push(c);
        }
    }
    Some(out.into())
}

fn hex_bytes(hex: &str) -> Option<Vec<u8>> {
    if !hex.len().is_multiple_of(2) {
        return None;
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect()
}
