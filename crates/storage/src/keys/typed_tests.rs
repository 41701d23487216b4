//! Property tests of the typed fields: every value of every kind, NULL
//! included, round-trips in either direction and either place of NULL;
//! the order of the keys is PostgreSQL's order of the values, whatever
//! follows the field; and the ranges and prefixes the templates give hold
//! exactly the keys of the values they describe.

use std::cmp::Ordering;
use std::ops::Bound;

use proptest::prelude::*;

use super::*;
use crate::storage::key::cmp_utf16;

/// The kinds, with the spec letter each is written with.
fn kinds() -> impl Strategy<Value = TypedKind> {
    prop_oneof![
        (1u8..=19).prop_map(|width| TypedKind::Int { width }),
        Just(TypedKind::Double),
        Just(TypedKind::Timestamp),
        Just(TypedKind::Date),
        Just(TypedKind::Uuid),
        Just(TypedKind::Bool),
        Just(TypedKind::Text),
    ]
}

fn spec(t: Typed) -> String {
    let kind = match t.kind {
        TypedKind::Int { width } => format!("i{width}"),
        TypedKind::Double => "f".into(),
        TypedKind::Timestamp => "t".into(),
        TypedKind::Date => "d".into(),
        TypedKind::Uuid => "u".into(),
        TypedKind::Bool => "b".into(),
        TypedKind::Text => "s".into(),
    };
    let nulls = if t.nulls_first {
        "nulls_first"
    } else {
        "nulls_last"
    };
    format!("{}{kind},{nulls}", if t.descending { "~" } else { "" })
}

fn typed() -> impl Strategy<Value = Typed> {
    (kinds(), any::<bool>(), any::<bool>()).prop_map(|(kind, descending, nulls_first)| Typed {
        kind,
        descending,
        nulls_first,
    })
}

/// Text with the characters each escape is for, below U+D800 or at the
/// top of the BMP (where code point order is UTF-16 order).
fn text() -> impl Strategy<Value = String> {
    proptest::collection::vec(
        prop_oneof![
            Just(' '),
            Just('!'),
            Just('"'),
            Just('#'),
            Just('/'),
            Just('?'),
            Just('\\'),
            Just('~'),
            Just('\u{1}'),
            Just('\u{1f}'),
            Just('\u{7f}'),
            Just('\u{9f}'),
            Just('é'),
            Just('\u{FFFC}'),
            Just('\u{FFFD}'),
            Just('\u{FFFF}'),
            Just('_'),
            Just('%'),
            proptest::char::range('A', 'c'),
        ],
        0..6,
    )
    .prop_map(|cs| cs.into_iter().collect())
}

fn double() -> impl Strategy<Value = f64> {
    prop_oneof![
        Just(f64::NAN),
        Just(-f64::NAN),
        Just(f64::INFINITY),
        Just(f64::NEG_INFINITY),
        Just(0.0),
        Just(-0.0),
        Just(f64::MIN_POSITIVE),
        Just(-f64::MAX),
        any::<f64>(),
        (-1000i32..1000).prop_map(f64::from),
    ]
}

/// A value of the kind, or NULL (one in eight).
fn value(kind: TypedKind) -> BoxedStrategy<KeyValue> {
    let v: BoxedStrategy<KeyValue> = match kind {
        TypedKind::Int { width } => {
            let max = 10i128.pow(u32::from(width)) - 1;
            let max = i64::try_from(max).unwrap_or(i64::MAX);
            prop_oneof![Just(-max), Just(max), Just(0i64), -max..=max]
                .prop_map(KeyValue::Int)
                .boxed()
        }
        TypedKind::Double => double()
            .prop_map(|d| KeyValue::Double(KeyFloat::new(d)))
            .boxed(),
        // Years 0 to 9999.
        TypedKind::Timestamp => (-62_167_219_200_000_000i64..253_402_300_799_999_999)
            .prop_map(KeyValue::Timestamp)
            .boxed(),
        // Midnights of the years 0 to 9999.
        TypedKind::Date => (-719_528i64..2_932_897)
            .prop_map(|days| KeyValue::Timestamp(days * 86_400_000_000))
            .boxed(),
        TypedKind::Uuid => any::<u128>().prop_map(KeyValue::Uuid).boxed(),
        TypedKind::Bool => any::<bool>().prop_map(KeyValue::Bool).boxed(),
        TypedKind::Text => text().prop_map(KeyValue::Text).boxed(),
    };
    prop_oneof![1 => Just(KeyValue::Null), 7 => v].boxed()
}

/// PostgreSQL's order of two values of one kind under the field's
/// direction and place of NULL.
fn sql_order(t: Typed, a: &KeyValue, b: &KeyValue) -> Ordering {
    match (a, b) {
        (KeyValue::Null, KeyValue::Null) => Ordering::Equal,
        (KeyValue::Null, _) if t.nulls_first => Ordering::Less,
        (KeyValue::Null, _) => Ordering::Greater,
        (_, KeyValue::Null) if t.nulls_first => Ordering::Greater,
        (_, KeyValue::Null) => Ordering::Less,
        _ if t.descending => b.cmp(a),
        _ => a.cmp(b),
    }
}

/// `K:{c:spec}__{d}` (the field followed by more), or `K:{c:spec}` (last).
fn template(t: Typed, last: bool) -> KeyTemplate {
    let text = if last {
        format!("K:{{c:{}}}", spec(t))
    } else {
        format!("K:{{c:{}}}__{{d}}", spec(t))
    };
    text.parse().expect("a typed template parses")
}

fn within(key: &str, b: &KeyBounds) -> bool {
    match b {
        KeyBounds::Empty => false,
        KeyBounds::All => true,
        KeyBounds::Range { start, end } => {
            let after = match start {
                Bound::Included(s) => cmp_utf16(key, s).is_ge(),
                Bound::Excluded(s) => cmp_utf16(key, s).is_gt(),
                Bound::Unbounded => true,
            };
            let before = match end {
                Bound::Included(e) => cmp_utf16(key, e).is_le(),
                Bound::Excluded(e) => cmp_utf16(key, e).is_lt(),
                Bound::Unbounded => true,
            };
            after && before
        }
    }
}

fn bound(b: u8, v: &KeyValue) -> Bound<&KeyValue> {
    match b % 3 {
        0 => Bound::Unbounded,
        1 => Bound::Included(v),
        _ => Bound::Excluded(v),
    }
}

/// Whether a non-NULL `v` satisfies `lo <= v <= hi` (or `<`), as SQL.
fn in_bounds(v: &KeyValue, lo: Bound<&KeyValue>, hi: Bound<&KeyValue>) -> bool {
    let above = match lo {
        Bound::Unbounded => true,
        Bound::Included(l) => v >= l,
        Bound::Excluded(l) => v > l,
    };
    let below = match hi {
        Bound::Unbounded => true,
        Bound::Included(h) => v <= h,
        Bound::Excluded(h) => v < h,
    };
    *v != KeyValue::Null && above && below
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    #[test]
    fn typed_fields_round_trip_and_are_valid_keys(
        (t, v) in typed().prop_flat_map(|t| (Just(t), value(t.kind))),
        d in text(),
        last in any::<bool>(),
    ) {
        let tpl = template(t, last);
        let values = if last { vec![v.clone()] } else { vec![v.clone(), KeyValue::Text(d)] };
        let key = tpl.compose(&values).unwrap();
        prop_assert!(crate::storage::RowKey::new(key.clone()).is_ok(), "{:?}", key);
        prop_assert_eq!(tpl.decompose(&key).unwrap(), values, "{:?}", key);
        prop_assert_eq!(tpl.to_string().parse::<KeyTemplate>().unwrap(), tpl);
    }

    #[test]
    fn key_order_is_sql_order_whatever_follows(
        (t, a, b) in typed().prop_flat_map(|t| (Just(t), value(t.kind), value(t.kind))),
        da in text(),
        db in text(),
        last in any::<bool>(),
    ) {
        let tpl = template(t, last);
        let compose = |v: &KeyValue, d: &str| {
            let mut vs = vec![v.clone()];
            if !last {
                vs.push(KeyValue::Text(d.to_owned()));
            }
            tpl.compose(&vs).unwrap()
        };
        let (ka, kb) = (compose(&a, &da), compose(&b, &db));
        let want = sql_order(t, &a, &b);
        if want != Ordering::Equal {
            prop_assert_eq!(cmp_utf16(&ka, &kb), want, "{:?} {:?}", ka, kb);
        } else {
            prop_assert_eq!(tpl.compose_prefix(std::slice::from_ref(&a)).unwrap(), tpl.compose_prefix(std::slice::from_ref(&b)).unwrap());
        }
    }

    #[test]
    fn typed_ranges_hold_exactly_the_keys_of_values_in_range(
        (t, v, lo, hi) in typed().prop_flat_map(|t| (Just(t), value(t.kind), value(t.kind), value(t.kind))),
        (bl, bh) in (0u8..3, 0u8..3),
        d in text(),
        last in any::<bool>(),
    ) {
        prop_assume!(lo != KeyValue::Null && hi != KeyValue::Null);
        let tpl = template(t, last);
        let mut vs = vec![v.clone()];
        if !last {
            vs.push(KeyValue::Text(d));
        }
        let key = tpl.compose(&vs).unwrap();
        let (lo, hi) = (bound(bl, &lo), bound(bh, &hi));
        let range = tpl.typed_range(&[], lo, hi).unwrap().unwrap();
        prop_assert_eq!(within(&key, &range), in_bounds(&v, lo, hi), "{:?} in {:?}", key, range);
    }

    #[test]
    fn text_prefix_ranges_hold_exactly_the_values_with_the_prefix(
        descending in any::<bool>(),
        nulls_first in any::<bool>(),
        v in prop_oneof![1 => Just(None), 7 => text().prop_map(Some)],
        other in text(),
        cut in 0usize..4,
        d in text(),
        last in any::<bool>(),
    ) {
        let t = Typed { kind: TypedKind::Text, descending, nulls_first };
        let tpl = template(t, last);
        // A prefix of the value half the time, of another text the rest.
        let prefix: String = if cut % 2 == 0 { v.clone().unwrap_or_default() } else { other }
            .chars().take(cut).collect();
        let value = v.clone().map_or(KeyValue::Null, KeyValue::Text);
        let mut vs = vec![value];
        if !last {
            vs.push(KeyValue::Text(d));
        }
        let key = tpl.compose(&vs).unwrap();
        let range = tpl.prefix_range(&[], Some(&prefix)).unwrap();
        let want = v.as_ref().is_some_and(|s| s.starts_with(&prefix));
        prop_assert_eq!(within(&key, &range), want, "{:?} in {:?}", key, range);
    }
}

#[test]
fn typed_encodings_read_as_their_values() {
    let enc = |spec: &str, v: KeyValue| {
        let t: KeyTemplate = format!("{{c:{spec}}}").parse().unwrap();
        t.compose(&[v]).unwrap()
    };
    assert_eq!(enc("i3", KeyValue::Int(7)), "0007");
    assert_eq!(enc("i3", KeyValue::Int(-1)), "-998");
    assert_eq!(enc("~i3", KeyValue::Int(7)), "-992");
    assert_eq!(enc("i3", KeyValue::Null), "\u{FFFD}");
    assert_eq!(enc("~i3", KeyValue::Null), "  ");
    assert_eq!(
        enc("f", KeyValue::Double(KeyFloat::new(1.0))),
        "BFF0000000000000"
    );
    assert_eq!(
        enc("f", KeyValue::Double(KeyFloat::new(-0.0))),
        enc("f", KeyValue::Double(KeyFloat::new(0.0)))
    );
    assert_eq!(
        enc("t", KeyValue::Timestamp(1_714_555_800_000_001)),
        "2024-05-01T09:30:00.000001Z"
    );
    assert_eq!(
        enc(
            "u",
            KeyValue::Uuid(0x0123_4567_89ab_cdef_0123_4567_89ab_cdef)
        ),
        "01234567-89ab-cdef-0123-456789abcdef"
    );
    assert_eq!(enc("b", KeyValue::Bool(true)), "1");
    assert_eq!(enc("~b", KeyValue::Bool(true)), "0");
    // Readable text: a space and a forbidden character escaped in place.
    assert_eq!(enc("s", KeyValue::Text("John Smith".into())), "John _Smith");
    assert_eq!(enc("s", KeyValue::Text("a/b".into())), "a.\u{FFFD}2Fb");
    let t: KeyTemplate = "N:{name:s}__{id:i10}".parse().unwrap();
    assert_eq!(
        t.compose(&[KeyValue::Text("Jo".into()), KeyValue::Int(5)])
            .unwrap(),
        "N:Jo !__00000000005"
    );
    assert_eq!(t.to_string(), "N:{name:s}__{id:i10}");
    assert_eq!(
        "{a:~s}".parse::<KeyTemplate>().unwrap().to_string(),
        "{a:~s}"
    );
    assert_eq!(
        "{a:f,nulls_first}"
            .parse::<KeyTemplate>()
            .unwrap()
            .to_string(),
        "{a:f,nulls_first}"
    );
    for bad in ["{a:i0}", "{a:i20}", "{a:f,nulls}", "{a:fx}"] {
        assert!(bad.parse::<KeyTemplate>().is_err(), "{bad:?} parsed");
    }
}
