//! A key template compiled for reading many keys: a scan reads the RowKey
//! of every row, and `split` then `read_fields` cost about 1,800
//! instructions a key of four fields (callgrind), as many as redb's walk
//! and the rest of the scan together. Most keys are ASCII text and
//! zero-padded digits between literals; for those one pass over the bytes
//! finds each field's end and checks its spelling together, with no value
//! built for a field nobody reads. Anything else (an escape, a character
//! beyond ASCII, a typed or signed field, a key that is not of the
//! template) is not decided here: the caller reads the key the general way,
//! which also names the problem.

use std::borrow::Cow;
use std::ops::Range;

use super::field::{FieldFormat, KeyRef, escaped_ascii};
use super::template::{KeyTemplate, Segment};

/// A template's reading plan (`KeyTemplate::reader`).
#[derive(Debug, Clone)]
pub struct KeyReader {
    steps: Vec<Step>,
    /// Per field, in order: `Some(inverted)` for digits (see
    /// `Step::Digits`), `None` for free text.
    fields: Vec<Option<Option<i64>>>,
}

#[derive(Debug, Clone)]
enum Step {
    /// Text written as is.
    Literal(Box<[u8]>),
    /// Free text without escapes: plain bytes up to `until` (the literal
    /// after it, which the step reads too) or, last, to the key's end.
    /// `stops` marks the ASCII bytes that are not plain (those free text
    /// escapes): one load a byte.
    Text {
        until: Option<Box<[u8]>>,
        stops: Box<[bool; 128]>,
    },
    /// `width` digits.
    Digits { width: usize },
}

/// `hay.starts_with(prefix)`, byte by byte: a key's literals are a few
/// bytes, shorter than the call to `memcmp` `starts_with` makes per key
/// read.
pub(super) fn starts_with(hay: &[u8], prefix: &[u8]) -> bool {
    hay.len() >= prefix.len() && hay.iter().zip(prefix).all(|(a, b)| a == b)
}

/// Where `text` ends if `b` holds it at `at`.
fn literal(b: &[u8], at: usize, text: &[u8]) -> Option<usize> {
    starts_with(b.get(at..)?, text).then_some(at + text.len())
}

impl KeyTemplate {
    /// This template's reading plan, for templates of literals, free text
    /// and zero-padded or inverted digits with an ASCII literal after
    /// every text field but the last; `None` for others.
    pub fn reader(&self) -> Option<KeyReader> {
        if self.segments().is_empty() {
            return None;
        }
        let mut steps = Vec::new();
        let mut fields = Vec::new();
        let mut segments = self.segments().iter().peekable();
        while let Some(segment) = segments.next() {
            steps.push(match segment {
                Segment::Literal(l) => Step::Literal(l.as_bytes().into()),
                Segment::Field { format, .. } => match format {
                    FieldFormat::Text => {
                        let until = match segments.peek() {
                            None => None,
                            Some(Segment::Literal(l)) if l.is_ascii() => Some(l.as_bytes()),
                            Some(_) => return None,
                        };
                        // The literal is read with the text.
                        if until.is_some() {
                            segments.next();
                        }
                        let escaped = escaped_ascii(until.unwrap_or_default());
                        let mut stops = Box::new([false; 128]);
                        for (b, stop) in stops.iter_mut().enumerate() {
                            *stop = escaped & (1u128 << b) != 0;
                        }
                        fields.push(None);
                        Step::Text {
                            until: until.map(Into::into),
                            stops,
                        }
                    }
                    FieldFormat::Padded { width } => {
                        fields.push(Some(None));
                        Step::Digits {
                            width: usize::from(*width),
                        }
                    }
                    FieldFormat::Inverted { width } => {
                        fields.push(Some(Some(10i64.checked_pow(u32::from(*width))? - 1)));
                        Step::Digits {
                            width: usize::from(*width),
                        }
                    }
                    FieldFormat::Signed { .. } | FieldFormat::Typed(_) => return None,
                },
            });
        }
        Some(KeyReader { steps, fields })
    }
}

impl KeyReader {
    /// Reads `key` as `split` and `read_fields` would: each field's span
    /// into `spans`, and the value of each field whose bit is set in
    /// `wanted` (bit `n` for field `n`) to `take`, in field order. `None`,
    /// with nothing taken, where this plan does not decide the key.
    pub fn read<'k>(
        &self,
        key: &'k str,
        wanted: u64,
        spans: &mut Vec<Range<usize>>,
        take: &mut dyn FnMut(usize, KeyRef<'k>),
    ) -> Option<()> {
        let b = key.as_bytes();
        // Beyond ASCII is not decided here; checked first, a word at a
        // time, so that every byte below is one of 128.
        if !b.is_ascii() {
            return None;
        }
        spans.clear();
        let mut at = 0;
        for step in &self.steps {
            match step {
                Step::Literal(l) => at = literal(b, at, l)?,
                Step::Digits { width } => {
                    let end = at + width;
                    if !b.get(at..end)?.iter().all(u8::is_ascii_digit) {
                        return None;
                    }
                    spans.push(at..end);
                    at = end;
                }
                Step::Text { until, stops } => {
                    // The first byte that is not plain ends the text where
                    // it starts the literal after; anywhere else it is an
                    // escape or a misspelling, not decided here.
                    let rest = b.get(at..)?;
                    let len = rest
                        .iter()
                        .position(|&c| stops[usize::from(c & 0x7f)])
                        .unwrap_or(rest.len());
                    spans.push(at..at + len);
                    at += len;
                    match until {
                        Some(u) => at = literal(b, at, u)?,
                        None if at == b.len() => {}
                        None => return None,
                    }
                }
            }
        }
        if at != b.len() {
            return None;
        }
        // Every byte is ASCII: each span is on characters.
        let mut wanted = wanted;
        while wanted != 0 {
            let n = wanted.trailing_zeros() as usize;
            wanted &= wanted - 1;
            let (Some(span), Some(field)) = (spans.get(n), self.fields.get(n)) else {
                break;
            };
            let text = key.get(span.clone())?;
            take(
                n,
                match field {
                    Some(inverted) => {
                        // At most 18 digits (`MAX_WIDTH`): no overflow.
                        let v = text.bytes().fold(0i64, |v, d| v * 10 + i64::from(d - b'0'));
                        KeyRef::Int(inverted.map_or(v, |max| max - v))
                    }
                    None => KeyRef::Text(Cow::Borrowed(text)),
                },
            );
        }
        Some(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::KeyValue;
    use super::*;
    use proptest::prelude::*;

    /// `split` then `read_fields`: every field's span and value, or `None`
    /// where they refuse the key.
    fn general(t: &KeyTemplate, key: &str) -> Option<(Vec<Range<usize>>, Vec<KeyValue>)> {
        let mut spans = Vec::new();
        t.split(key, &mut spans).ok()?;
        let mut values = Vec::new();
        t.read_fields(key, &spans, &mut |_, v| values.push(v.into_owned()))
            .ok()?;
        Some((spans, values))
    }

    fn fast(t: &KeyTemplate, key: &str) -> Option<(Vec<Range<usize>>, Vec<KeyValue>)> {
        let mut spans = Vec::new();
        let mut values = Vec::new();
        t.reader()?.read(key, u64::MAX, &mut spans, &mut |_, v| {
            values.push(v.into_owned())
        })?;
        Some((spans, values))
    }

    const TEMPLATES: &[&str] = &[
        "BIB:{bib:05}__{name}__{gender}__{age}",
        "AGE:{age:03}__{bib}__{name}__{gender}",
        "{name}",
        "{a}_{b:~02}",
        "x{n:02}{m:~01}-{t}-",
        "{a}::{b}",
    ];

    #[test]
    fn a_key_of_the_demo_is_read_in_one_pass_with_its_fields() {
        let t: KeyTemplate = TEMPLATES[0].parse().expect("template");
        let key = "BIB:01234__John__M__55";
        let mut got = Vec::new();
        let mut spans = Vec::new();
        let read = t
            .reader()
            .expect("a reader")
            .read(key, 0b1001, &mut spans, &mut |n, v| {
                got.push((n, v.into_owned()))
            });
        assert_eq!(read, Some(()));
        assert_eq!(spans, vec![4..9, 11..15, 17..18, 20..22]);
        assert_eq!(
            got,
            vec![
                (0, KeyValue::Int(1234)),
                (3, KeyValue::Text("55".to_owned()))
            ]
        );
        assert_eq!(fast(&t, key), general(&t, key));
    }

    #[test]
    fn escapes_other_scripts_and_typed_fields_are_left_to_the_general_reading() {
        let t: KeyTemplate = TEMPLATES[0].parse().expect("template");
        for key in ["BIB:01234__Jo%5F__M__55", "BIB:01234__Zoë__M__55"] {
            assert_eq!(fast(&t, key), None, "{key}");
            assert!(general(&t, key).is_some(), "{key}");
        }
        let typed: KeyTemplate = "{a:s}__{b}".parse().expect("template");
        assert!(typed.reader().is_none());
        let signed: KeyTemplate = "{a:+03}__{b}".parse().expect("template");
        assert!(signed.reader().is_none());
    }

    proptest! {
        /// Whatever the plan reads, the general reading reads the same:
        /// spans and values. Keys from bytes the templates' literals and
        /// escapes are made of, so that near misses are common.
        #[test]
        fn the_plan_reads_what_the_general_reading_reads(
            which in 0..TEMPLATES.len(),
            key in "[BIAGE:_x{}~%5F0-9a-zé/#?\\\\\\x00\\x1f\\x7f-]{0,24}",
        ) {
            let t: KeyTemplate = TEMPLATES[which].parse().expect("template");
            if let Some(read) = fast(&t, &key) {
                prop_assert_eq!(Some(read), general(&t, &key));
            }
        }

        /// Keys composed from plain values are read by the plan.
        #[test]
        fn composed_plain_keys_are_read_by_the_plan(
            n in 0i64..1000,
            a in "[a-zA-Z0-9 .]{0,8}",
            b in "[a-zA-Z0-9 .]{0,8}",
        ) {
            let t: KeyTemplate = TEMPLATES[0].parse().expect("template");
            let key = t
                .compose(&[KeyValue::Int(n), KeyValue::Text(a), KeyValue::Text(b), KeyValue::Int(n)])
                .expect("compose");
            prop_assert!(fast(&t, &key).is_some(), "{}", key);
            prop_assert_eq!(fast(&t, &key), general(&t, &key));
        }
    }
}
