//! Key templates such as `BIB:{bib:05}__{name}__{gender}__{age}`: literal text
//! and typed fields, composed into keys, decomposed back into values, and
//! turned into key ranges for the predicates a field can answer.

use std::fmt;
use std::ops::Bound;
use std::ops::Range;
use std::str::FromStr;

use super::KeyError;
use super::field::{FieldFormat, KeyRef, KeyValue, MAX_WIDTH, escape_text_into};
use super::reader::starts_with;
use super::typed::{Typed, TypedKind};

/// A part of a template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Segment {
    /// Text written as is.
    Literal(String),
    /// A column's value in a format.
    Field {
        /// The column whose value is written.
        column: String,
        /// How it is written.
        format: FieldFormat,
    },
}

/// A parsed key template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyTemplate {
    segments: Vec<Segment>,
    /// `{#N}`: a PartitionKey that is the bucket of the row's RowKey among
    /// `N` (see [`bucket_of`]), and nothing else.
    row_buckets: Option<u8>,
}

/// Most buckets a `{#N}` PartitionKey spreads rows over (two digits).
pub const MAX_BUCKETS: u8 = 100;

/// The bucket of `row_key` among `buckets`, as a `{#N}` PartitionKey
/// writes it: FNV-1a (64 bits) of the RowKey's UTF-8 bytes, modulo
/// `buckets`, in two decimal digits. Any Azure SDK client computes the same
/// from a RowKey, so the rows stay reachable by a point query from outside.
pub fn bucket_of(row_key: &str, buckets: u8) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in row_key.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{:02}", h % u64::from(buckets.max(1)))
}

impl FromStr for KeyTemplate {
    type Err = KeyError;

    fn from_str(s: &str) -> Result<Self, KeyError> {
        let bad = |why: &str| KeyError::Template {
            template: s.to_owned(),
            reason: why.to_owned(),
        };
        if let Some(n) = s.strip_prefix("{#").and_then(|r| r.strip_suffix('}')) {
            return match n.parse::<u8>() {
                Ok(b) if (2..=MAX_BUCKETS).contains(&b) => Ok(KeyTemplate {
                    segments: Vec::new(),
                    row_buckets: Some(b),
                }),
                _ => Err(bad(&format!(
                    "{{#N}} spreads rows over 2 to {MAX_BUCKETS} buckets, not {n:?}"
                ))),
            };
        }
        let mut segments = Vec::new();
        let mut rest = s;
        while !rest.is_empty() {
            match rest.find(['{', '}']) {
                Some(0) if rest.starts_with('{') => {
                    let end = rest.find('}').ok_or_else(|| bad("a `{` is not closed"))?;
                    segments.push(parse_field(&rest[1..end]).map_err(|why| bad(&why))?);
                    rest = &rest[end + 1..];
                }
                Some(0) => return Err(bad("a `}` without its `{`")),
                Some(i) => {
                    segments.push(Segment::Literal(rest[..i].to_owned()));
                    rest = &rest[i..];
                }
                None => {
                    segments.push(Segment::Literal(rest.to_owned()));
                    rest = "";
                }
            }
        }
        let template = KeyTemplate {
            segments,
            row_buckets: None,
        };
        template.check().map_err(|why| bad(&why))?;
        Ok(template)
    }
}

fn parse_field(inner: &str) -> Result<Segment, String> {
    let (column, spec) = inner.split_once(':').unwrap_or((inner, ""));
    let column = column.trim();
    if column.is_empty() || !column.chars().all(|c| c.is_alphanumeric() || c == '_') {
        return Err(format!("field name {column:?} is not a column name"));
    }
    let width = |digits: &str| -> Result<u8, String> {
        match digits.parse::<u8>() {
            Ok(w) if (1..=MAX_WIDTH).contains(&w) => Ok(w),
            _ => Err(format!(
                "width {digits:?} of {column} must be 1 to {MAX_WIDTH} digits"
            )),
        }
    };
    if let Some(typed) = Typed::parse(spec) {
        return Ok(Segment::Field {
            column: column.to_owned(),
            format: FieldFormat::Typed(typed.map_err(|why| format!("{column}: {why}"))?),
        });
    }
    let format = match spec.as_bytes().first() {
        None => FieldFormat::Text,
        Some(b'+') => FieldFormat::Signed {
            width: width(&spec[1..])?,
        },
        Some(b'~') => FieldFormat::Inverted {
            width: width(&spec[1..])?,
        },
        Some(b'0'..=b'9') => FieldFormat::Padded {
            width: width(spec)?,
        },
        Some(_) => return Err(format!("unknown format {spec:?} of {column}")),
    };
    Ok(Segment::Field {
        column: column.to_owned(),
        format,
    })
}

impl KeyTemplate {
    /// Rules that make decomposition unambiguous: a free-text field is the
    /// last segment or is followed by literal text, which it escapes; literals
    /// hold only ASCII that keys may hold.
    fn check(&self) -> Result<(), String> {
        for (i, seg) in self.segments.iter().enumerate() {
            match seg {
                Segment::Literal(l) => {
                    if let Some(c) = l.chars().find(|c| {
                        !c.is_ascii() || crate::storage::key::is_forbidden_key_char(*c) || *c == '%'
                    }) {
                        return Err(format!("literal {l:?} holds {c:?}"));
                    }
                }
                Segment::Field {
                    column,
                    format: FieldFormat::Text,
                } => {
                    if let Some(Segment::Field { .. }) = self.segments.get(i + 1) {
                        return Err(format!(
                            "free-text field {column} must be followed by a separator"
                        ));
                    }
                }
                Segment::Field { .. } => {}
            }
        }
        Ok(())
    }

    /// `Some(N)` for `{#N}`: the PartitionKey is the RowKey's bucket.
    pub fn row_buckets(&self) -> Option<u8> {
        self.row_buckets
    }

    /// Every key a `{#N}` template writes, in key order; empty for others.
    pub fn buckets(&self) -> Vec<String> {
        (0..self.row_buckets.unwrap_or(0))
            .map(|b| format!("{b:02}"))
            .collect()
    }

    /// The PartitionKey of a row: composed from `values` (as [`Self::compose`]),
    /// or for `{#N}` the bucket of the row's `row_key`.
    pub fn compose_partition(
        &self,
        values: &[KeyValue],
        row_key: &str,
    ) -> Result<String, KeyError> {
        match self.row_buckets {
            Some(n) => Ok(bucket_of(row_key, n)),
            None => self.compose(values),
        }
    }

    /// A composed key's likely length, to make room for it once: its
    /// literals and 16 bytes a field.
    fn length_guess(&self) -> usize {
        self.segments
            .iter()
            .map(|s| match s {
                Segment::Literal(l) => l.len(),
                Segment::Field { .. } => 16,
            })
            .sum()
    }

    /// The segments in order.
    pub fn segments(&self) -> &[Segment] {
        &self.segments
    }

    /// The columns of the fields, in order.
    pub fn columns(&self) -> impl Iterator<Item = &str> {
        self.segments.iter().filter_map(|s| match s {
            Segment::Field { column, .. } => Some(column.as_str()),
            Segment::Literal(_) => None,
        })
    }

    /// Whether segment `i` ends the key.
    fn is_last(&self, i: usize) -> bool {
        i + 1 == self.segments.len()
    }

    /// The literal text after segment `i` (what a free-text field there escapes).
    fn separator_after(&self, i: usize) -> &str {
        match self.segments.get(i + 1) {
            Some(Segment::Literal(l)) => l,
            _ => "",
        }
    }

    /// Writes a key from the values of the fields, in field order.
    pub fn compose(&self, values: &[KeyValue]) -> Result<String, KeyError> {
        let (key, used) = self.compose_prefix(values)?;
        if used < self.columns().count() {
            return Err(KeyError::MissingValue {
                column: self.columns().nth(used).unwrap_or_default().to_owned(),
            });
        }
        Ok(key)
    }

    /// The key text fixed by values of the first fields: the literals and
    /// fields up to the first field without a value, and the literal right
    /// after the last given free-text field (so that a prefix scan cannot
    /// catch a longer value). Returns the text and the values used.
    pub fn compose_prefix(&self, values: &[KeyValue]) -> Result<(String, usize), KeyError> {
        if self.row_buckets.is_some() {
            // Loudly: a bucket read as an empty key would find nothing.
            return Err(KeyError::MissingValue {
                column: "RowKey (a {#N} PartitionKey is the bucket of the RowKey)".into(),
            });
        }
        let mut key = String::with_capacity(self.length_guess());
        let mut used = 0;
        for (i, seg) in self.segments.iter().enumerate() {
            match seg {
                Segment::Literal(l) => key.push_str(l),
                Segment::Field { column, format } => {
                    let Some(value) = values.get(used) else {
                        break;
                    };
                    format.encode_into(
                        column,
                        value,
                        self.separator_after(i),
                        self.is_last(i),
                        &mut key,
                    )?;
                    used += 1;
                }
            }
        }
        Ok((key, used))
    }

    /// Reads the field values back from a key; an error names the column
    /// whose text does not fit (a key this template did not write, or did not
    /// write in that spelling).
    pub fn decompose(&self, key: &str) -> Result<Vec<KeyValue>, KeyError> {
        if let Some(n) = self.row_buckets {
            // No column values; only a bucket's spelling fits.
            return match key.parse::<u8>() {
                Ok(b) if b < n && key.len() == 2 => Ok(Vec::new()),
                _ => Err(KeyError::Mismatch {
                    column: format!("{{#{n}}}"),
                    text: key.to_owned(),
                }),
            };
        }
        let mut spans = Vec::new();
        self.split(key, &mut spans)?;
        spans
            .iter()
            .enumerate()
            .map(|(n, span)| {
                self.read_field(key, n, span.clone())
                    .map(KeyRef::into_owned)
            })
            .collect()
    }

    /// Where each field's text lies in `key`, in field order, checking the
    /// literals and the end of the key but not the fields' spelling (that is
    /// `read_fields`' and `read_field`'s).
    pub fn split(&self, key: &str, spans: &mut Vec<Range<usize>>) -> Result<(), KeyError> {
        let mismatch = |column: &str| KeyError::Mismatch {
            column: column.to_owned(),
            text: key.to_owned(),
        };
        spans.clear();
        let mut at = 0;
        for (i, seg) in self.segments.iter().enumerate() {
            let rest = &key[at..];
            match seg {
                Segment::Literal(l) => {
                    if !starts_with(rest.as_bytes(), l.as_bytes()) {
                        return Err(mismatch(l));
                    }
                    at += l.len();
                }
                Segment::Field {
                    column,
                    format: FieldFormat::Typed(t),
                } => {
                    let len = t
                        .span(rest, self.is_last(i))
                        .ok_or_else(|| mismatch(column))?;
                    spans.push(at..at + len);
                    at += len;
                }
                Segment::Field { column, format } => {
                    let len = match format.fixed_len() {
                        Some(n) => n,
                        None => match self.separator_after(i) {
                            "" => rest.len(),
                            sep => find(rest, sep).ok_or_else(|| mismatch(column))?,
                        },
                    };
                    if !rest.is_char_boundary(len) || rest.len() < len {
                        return Err(mismatch(column));
                    }
                    spans.push(at..at + len);
                    at += len;
                }
            }
        }
        if at != key.len() {
            return Err(mismatch("the end of the key"));
        }
        Ok(())
    }

    /// Checks the spelling of every field of `key` (its `spans` from
    /// `split`) without keeping their values: an error names the first
    /// field that does not read back as `compose` writes it.
    pub fn check_fields(&self, key: &str, spans: &[Range<usize>]) -> Result<(), KeyError> {
        self.read_fields(key, spans, &mut |_, _| {})
    }

    /// `check_fields`, handing each field's value to `take` with its
    /// number as it is checked: a scan that reads some fields gets them
    /// from the one check every key needs, not from a second reading.
    pub fn read_fields<'k>(
        &self,
        key: &'k str,
        spans: &[Range<usize>],
        take: &mut dyn FnMut(usize, KeyRef<'k>),
    ) -> Result<(), KeyError> {
        let fields = self
            .segments
            .iter()
            .enumerate()
            .filter_map(|(i, s)| match s {
                Segment::Field { column, format } => Some((i, column, *format)),
                Segment::Literal(_) => None,
            });
        for (n, ((i, column, format), span)) in fields.zip(spans).enumerate() {
            let text = key.get(span.clone()).ok_or_else(|| KeyError::Mismatch {
                column: column.clone(),
                text: key.to_owned(),
            })?;
            take(
                n,
                format.read(column, text, self.separator_after(i), self.is_last(i))?,
            );
        }
        Ok(())
    }

    /// Field `n`'s value from its span in `key` (from `split`). Only the
    /// encoding compose writes is accepted: lookups compose keys, so a key in
    /// another spelling of the same value (an unescaped separator, `%41`,
    /// `-999` for zero) would be found by a scan but never by a lookup.
    pub fn read_field<'k>(
        &self,
        key: &'k str,
        n: usize,
        span: Range<usize>,
    ) -> Result<KeyRef<'k>, KeyError> {
        let Some((i, column, format)) = self
            .segments
            .iter()
            .enumerate()
            .filter_map(|(i, s)| match s {
                Segment::Field { column, format } => Some((i, column, *format)),
                Segment::Literal(_) => None,
            })
            .nth(n)
        else {
            return Err(KeyError::MissingValue {
                column: format!("field {n}"),
            });
        };
        let text = key.get(span).ok_or_else(|| KeyError::Mismatch {
            column: column.clone(),
            text: key.to_owned(),
        })?;
        format.read(column, text, self.separator_after(i), self.is_last(i))
    }

    /// The keys whose field after `leading` lies between `lo` and `hi` (an
    /// order-preserving integer field), the leading fields fixed. `None` if
    /// that field does not preserve order.
    pub fn int_range(
        &self,
        leading: &[KeyValue],
        lo: Bound<i64>,
        hi: Bound<i64>,
    ) -> Result<Option<KeyBounds>, KeyError> {
        let Some((column, format)) = self.field(leading.len()) else {
            return Ok(None);
        };
        let (Some(ascending), Some((min, max))) = (format.order(), format.int_range()) else {
            return Ok(None);
        };
        let lo = match lo {
            Bound::Included(v) => v.max(min),
            Bound::Excluded(v) => v.saturating_add(1).max(min),
            Bound::Unbounded => min,
        };
        let hi = match hi {
            Bound::Included(v) => v.min(max),
            Bound::Excluded(v) => v.saturating_sub(1).min(max),
            Bound::Unbounded => max,
        };
        // Every literal before field `n` and no more: the text before it.
        let (prefix, _) = self.compose_prefix(leading)?;
        if lo > hi {
            return Ok(Some(KeyBounds::Empty));
        }
        // Descending fields swap the ends.
        let (first, last) = if ascending { (lo, hi) } else { (hi, lo) };
        let enc = |v| format.encode(column, &KeyValue::Int(v), "");
        let start = format!("{prefix}{}", enc(first)?);
        let end = successor(&format!("{prefix}{}", enc(last)?));
        Ok(Some(KeyBounds::Range {
            start: Bound::Included(start),
            end: end.map_or(Bound::Unbounded, Bound::Excluded),
        }))
    }

    /// The keys whose field after `leading` (a typed field) lies between
    /// `lo` and `hi`, never NULL, the leading fields fixed; `None` if that
    /// field is not typed. The bounds are values of the field's type.
    pub fn typed_range(
        &self,
        leading: &[KeyValue],
        lo: Bound<&KeyValue>,
        hi: Bound<&KeyValue>,
    ) -> Result<Option<KeyBounds>, KeyError> {
        let Some(i) = self.field_index(leading.len()) else {
            return Ok(None);
        };
        let Some(Segment::Field {
            column,
            format: FieldFormat::Typed(t),
        }) = self.segments.get(i)
        else {
            return Ok(None);
        };
        let last = self.is_last(i);
        let (prefix, _) = self.compose_prefix(leading)?;
        let text = t.kind == TypedKind::Text && !t.descending;
        let unterminated = text && last && !t.nulls_first;
        // Where the keys of one value `v` lie: from `at(v)` up to (not
        // including) `past(v)`.
        let at = |v: &KeyValue| -> Result<String, KeyError> {
            let mut k = prefix.clone();
            t.encode_into(column, &v.as_ref(), last, &mut k)?;
            Ok(k)
        };
        let past = |v: &KeyValue| -> Result<Bound<String>, KeyError> {
            let k = at(v)?;
            Ok(if unterminated {
                // The value ends the key: only the key itself.
                Bound::Excluded(k)
            } else if text {
                // Just above the terminator: the first key of `v` + U+0000.
                Bound::Included(format!("{}\"", k.strip_suffix('!').unwrap_or(&k)))
            } else {
                successor(&k).map_or(Bound::Unbounded, Bound::Included)
            })
        };
        // Key bounds of the values' first and last keys, in key order.
        let (first, last_value) = if t.descending { (hi, lo) } else { (lo, hi) };
        let start = match first {
            Bound::Unbounded => {
                // Every value from the lowest key, NULL excluded.
                if t.nulls_first {
                    // Just above the NULL token (`  `): ` !`, below any value.
                    Bound::Included(format!("{prefix} !"))
                } else {
                    Bound::Included(prefix.clone())
                }
            }
            // Ascending, `first` is the lower value bound; descending the
            // upper one: either way its keys start the range when it is
            // included and are skipped when it is not.
            Bound::Included(v) => Bound::Included(at(v)?),
            Bound::Excluded(v) => match past(v)? {
                Bound::Included(k) => Bound::Included(k),
                Bound::Excluded(k) => Bound::Excluded(k),
                Bound::Unbounded => return Ok(Some(KeyBounds::Empty)),
            },
        };
        let end = match last_value {
            Bound::Unbounded => {
                if t.nulls_first {
                    successor(&prefix).map_or(Bound::Unbounded, Bound::Excluded)
                } else {
                    Bound::Excluded(format!("{prefix}{}", super::typed::NULL_HIGH))
                }
            }
            Bound::Included(v) => match past(v)? {
                Bound::Included(k) => Bound::Excluded(k),
                Bound::Excluded(k) => Bound::Included(k),
                Bound::Unbounded => successor(&prefix).map_or(Bound::Unbounded, Bound::Excluded),
            },
            Bound::Excluded(v) => Bound::Excluded(at(v)?),
        };
        if let (Bound::Included(s) | Bound::Excluded(s), Bound::Included(e) | Bound::Excluded(e)) =
            (&start, &end)
        {
            let ord = crate::storage::key::cmp_utf16(s, e);
            let both = matches!(start, Bound::Included(_)) && matches!(end, Bound::Included(_));
            if ord.is_gt() || (ord.is_eq() && !both) {
                return Ok(Some(KeyBounds::Empty));
            }
        }
        Ok(Some(KeyBounds::Range { start, end }))
    }

    /// The keys whose leading fields equal `leading` (all of them given fixes a
    /// prefix; a free-text field's value must be whole, so its separator is in
    /// the prefix) or whose next free-text field starts with `text_prefix`.
    pub fn prefix_range(
        &self,
        leading: &[KeyValue],
        text_prefix: Option<&str>,
    ) -> Result<KeyBounds, KeyError> {
        if self.row_buckets.is_some() && leading.is_empty() && text_prefix.is_none() {
            return Ok(KeyBounds::All);
        }
        let (mut prefix, _) = self.compose_prefix(leading)?;
        if let Some(p) = text_prefix {
            let i = self
                .field_index(leading.len())
                .ok_or(KeyError::MissingValue {
                    column: "a field after the given ones".into(),
                })?;
            if let Some(Segment::Field {
                format: FieldFormat::Typed(t),
                ..
            }) = self.segments.get(i)
            {
                let (start, end) = t.text_prefix(p, self.is_last(i));
                return Ok(KeyBounds::Range {
                    start: Bound::Included(format!("{prefix}{start}")),
                    end: Bound::Excluded(format!("{prefix}{end}")),
                });
            }
            escape_text_into(p, self.separator_after(i), &mut prefix);
        }
        Ok(match successor(&prefix) {
            _ if prefix.is_empty() => KeyBounds::All,
            end => KeyBounds::Range {
                start: Bound::Included(prefix),
                end: end.map_or(Bound::Unbounded, Bound::Excluded),
            },
        })
    }

    /// The segment index of field `n`.
    fn field_index(&self, n: usize) -> Option<usize> {
        self.segments
            .iter()
            .enumerate()
            .filter(|(_, s)| matches!(s, Segment::Field { .. }))
            .nth(n)
            .map(|(i, _)| i)
    }

    /// Field `n`'s column and format.
    pub fn field(&self, n: usize) -> Option<(&str, FieldFormat)> {
        match self.segments.get(self.field_index(n)?) {
            Some(Segment::Field { column, format }) => Some((column, *format)),
            _ => None,
        }
    }
}

/// Keys a predicate allows, as one range (start inclusive).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyBounds {
    /// No key: the predicate is a contradiction.
    Empty,
    /// Every key.
    All,
    /// The keys from `start` to `end`.
    Range {
        /// The least key allowed.
        start: Bound<String>,
        /// The greatest key allowed.
        end: Bound<String>,
    },
}

/// Where `needle` first occurs in `hay`: a byte scan for its first byte,
/// which for a key's short separators beats building a substring searcher
/// per field (`perf` showed `StrSearcher::new` in every row of a scan).
fn find(hay: &str, needle: &str) -> Option<usize> {
    let (h, n) = (hay.as_bytes(), needle.as_bytes());
    let first = *n.first()?;
    let mut at = 0;
    while let Some(i) = h.get(at..)?.iter().position(|&b| b == first) {
        if starts_with(&h[at + i..], n) {
            return Some(at + i);
        }
        at += i + 1;
    }
    None
}

/// The least string above every string that starts with `s`, in UTF-16
/// order: `s` with its last character incremented. `None` where that is not a
/// plain increment (an empty string, or a last character of U+D7FF, U+FFFF or
/// beyond the BMP), and the caller uses an open end instead.
pub fn successor(s: &str) -> Option<String> {
    let last = s.chars().next_back()?;
    let code = u32::from(last);
    if code >= 0xFFFF || (0xD7FF..0xE000).contains(&code) {
        return None;
    }
    let next = char::from_u32(code + 1)?;
    let kept = &s[..s.len() - last.len_utf8()];
    let mut out = String::with_capacity(kept.len() + next.len_utf8());
    out.push_str(kept);
    out.push(next);
    Some(out)
}

impl fmt::Display for KeyTemplate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(n) = self.row_buckets {
            return write!(f, "{{#{n}}}");
        }
        for seg in &self.segments {
            match seg {
                Segment::Literal(l) => f.write_str(l)?,
                Segment::Field { column, format } => match format {
                    FieldFormat::Text => write!(f, "{{{column}}}")?,
                    FieldFormat::Padded { width } => write!(f, "{{{column}:{width:02}}}")?,
                    FieldFormat::Signed { width } => write!(f, "{{{column}:+{width:02}}}")?,
                    FieldFormat::Inverted { width } => write!(f, "{{{column}:~{width:02}}}")?,
                    FieldFormat::Typed(t) => {
                        let kind = match t.kind {
                            TypedKind::Int { width } => format!("i{width}"),
                            TypedKind::Double => "f".into(),
                            TypedKind::Timestamp => "t".into(),
                            TypedKind::Date => "d".into(),
                            TypedKind::Uuid => "u".into(),
                            TypedKind::Bool => "b".into(),
                            TypedKind::Text => "s".into(),
                        };
                        let dir = if t.descending { "~" } else { "" };
                        let nulls = match (t.descending, t.nulls_first) {
                            (false, true) => ",nulls_first",
                            (true, false) => ",nulls_last",
                            _ => "",
                        };
                        write!(f, "{{{column}:{dir}{kind}{nulls}}}")?
                    }
                },
            }
        }
        Ok(())
    }
}
