//! Property tests of the key codec: every value round-trips, text order of
//! encodings is value order where a format claims it, and the key ranges the
//! templates produce hold exactly the keys they describe.

use std::ops::Bound;

use proptest::prelude::*;

use super::*;
use crate::storage::key::cmp_utf16;

fn registrations_rk() -> KeyTemplate {
    "BIB:{bib:05}__{name}__{gender}__{age}".parse().unwrap()
}

#[test]
fn the_domains_example_keys() {
    let t = registrations_rk();
    let values = [
        KeyValue::Int(1234),
        KeyValue::Text("John".into()),
        KeyValue::Text("M".into()),
        KeyValue::Int(55),
    ];
    assert_eq!(t.compose(&values).unwrap(), "BIB:01234__John__M__55");
    assert_eq!(
        t.decompose("BIB:01234__John__M__55").unwrap(),
        [
            KeyValue::Int(1234),
            KeyValue::Text("John".into()),
            KeyValue::Text("M".into()),
            KeyValue::Text("55".into()),
        ]
    );
    let age: KeyTemplate = "AGE:{age:03}__{bib}__{name}__{gender}".parse().unwrap();
    assert_eq!(age.to_string(), "AGE:{age:03}__{bib}__{name}__{gender}");
    let (prefix, used) = age.compose_prefix(&[KeyValue::Int(55)]).unwrap();
    assert_eq!((prefix.as_str(), used), ("AGE:055__", 1));
}

#[test]
fn template_rules() {
    for bad in [
        "{a}{b}", "{a", "a}", "{}", "{a:x5}", "{a:00}", "{a:19}", "P/{a}", "{a b}", "é{a}",
    ] {
        assert!(bad.parse::<KeyTemplate>().is_err(), "{bad:?} parsed");
    }
    for good in ["{a:05}{b}", "{a}", "X", "{a:+3}_{b:~2}", "{a}__{b}"] {
        assert!(good.parse::<KeyTemplate>().is_ok(), "{good:?} refused");
    }
}

#[test]
fn mismatched_keys_name_the_column() {
    let t = registrations_rk();
    for key in [
        "AGE:055__1__a__M",
        "BIB:12a45__a__M__1",
        "BIB:01234",
        "BIB:01234__a__M",
    ] {
        assert!(
            matches!(t.decompose(key), Err(KeyError::Mismatch { .. })),
            "{key}"
        );
    }
}

#[test]
fn only_the_composed_spelling_decomposes() {
    let pk: KeyTemplate = "{event}__{distance}".parse().unwrap();
    // An unescaped separator inside a value, a needless escape, lower-case hex.
    for key in ["New_York__Full", "N%65w York__Full", "a%5f__b"] {
        assert!(
            matches!(pk.decompose(key), Err(KeyError::Mismatch { .. })),
            "{key}"
        );
    }
    assert!(pk.decompose("New%5FYork__Full").is_ok());
    let signed: KeyTemplate = "{c:+03}".parse().unwrap();
    assert!(signed.decompose("-999").is_err(), "-999 would read as 0");
    assert_eq!(signed.decompose("-998").unwrap(), [KeyValue::Int(-1)]);
}

#[test]
fn int_ranges_and_prefixes() {
    let t = registrations_rk();
    let r = t
        .int_range(&[], Bound::Excluded(10), Bound::Included(20))
        .unwrap();
    assert_eq!(
        r,
        Some(KeyBounds::Range {
            start: Bound::Included("BIB:00011".into()),
            end: Bound::Excluded("BIB:00021".into()),
        })
    );
    assert_eq!(
        t.int_range(&[], Bound::Included(5), Bound::Excluded(5))
            .unwrap(),
        Some(KeyBounds::Empty)
    );
    // The name field keeps no order.
    assert_eq!(
        t.int_range(&[KeyValue::Int(1)], Bound::Unbounded, Bound::Unbounded)
            .unwrap(),
        None
    );
    let p = t.prefix_range(&[KeyValue::Int(7)], Some("Jo")).unwrap();
    assert_eq!(
        p,
        KeyBounds::Range {
            start: Bound::Included("BIB:00007__Jo".into()),
            end: Bound::Excluded("BIB:00007__Jp".into()),
        }
    );
    let inv: KeyTemplate = "T{t:~03}".parse().unwrap();
    assert_eq!(
        inv.int_range(&[], Bound::Included(1), Bound::Included(3))
            .unwrap(),
        Some(KeyBounds::Range {
            start: Bound::Included("T996".into()),
            end: Bound::Excluded("T999".into()),
        })
    );
}

fn format() -> impl Strategy<Value = FieldFormat> {
    prop_oneof![
        (1u8..=6).prop_map(|width| FieldFormat::Padded { width }),
        (1u8..=6).prop_map(|width| FieldFormat::Signed { width }),
        (1u8..=6).prop_map(|width| FieldFormat::Inverted { width }),
    ]
}

fn value_in(format: FieldFormat) -> impl Strategy<Value = i64> {
    let (lo, hi) = format.int_range().unwrap_or((0, 0));
    lo..=hi
}

/// Text with separators, escapes, forbidden and non-BMP characters.
fn text() -> impl Strategy<Value = String> {
    proptest::collection::vec(
        prop_oneof![
            Just('_'),
            Just('%'),
            Just('/'),
            Just('#'),
            Just('\u{1}'),
            Just('é'),
            Just('\u{10000}'),
            proptest::char::range('a', 'z'),
        ],
        0..8,
    )
    .prop_map(|cs| cs.into_iter().collect())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn fixed_width_round_trips_and_keeps_order(
        (f, a, b) in format().prop_flat_map(|f| (Just(f), value_in(f), value_in(f)))
    ) {
        let ea = f.encode("c", &KeyValue::Int(a), "").unwrap();
        let eb = f.encode("c", &KeyValue::Int(b), "").unwrap();
        prop_assert_eq!(Some(ea.len()), f.fixed_len());
        prop_assert_eq!(f.decode("c", &ea).unwrap(), KeyValue::Int(a));
        let by_text = cmp_utf16(&ea, &eb);
        let by_value = if f.order() == Some(true) { a.cmp(&b) } else { b.cmp(&a) };
        prop_assert_eq!(by_text, by_value);
    }

    #[test]
    fn padding_writes_what_the_formatter_writes(v in any::<i64>(), width in 0u8..=20) {
        let mut out = String::from("BIB:");
        field::push_padded(&mut out, v, width).unwrap();
        prop_assert_eq!(out, format!("BIB:{v:0w$}", w = usize::from(width)));
    }

    #[test]
    fn the_scan_check_accepts_exactly_what_decomposes(
        parts in proptest::collection::vec(
            prop_oneof![
                Just("BIB:".to_owned()),
                Just("__".to_owned()),
                Just("%5F".to_owned()),
                Just("%zz".to_owned()),
                Just("00042".to_owned()),
                Just("-1".to_owned()),
                text(),
            ],
            0..9,
        )
    ) {
        let t = registrations_rk();
        let key: String = parts.concat();
        let mut spans = Vec::new();
        let checked = t.split(&key, &mut spans).and_then(|()| t.check_fields(&key, &spans));
        prop_assert_eq!(checked.is_ok(), t.decompose(&key).is_ok(), "{:?}", key);
    }

    #[test]
    fn composed_keys_round_trip_and_are_valid_keys(
        bib in 0i64..100_000, name in text(), gender in text(), age in text()
    ) {
        let t = registrations_rk();
        let values = [KeyValue::Int(bib), KeyValue::Text(name), KeyValue::Text(gender), KeyValue::Text(age)];
        let key = t.compose(&values).unwrap();
        prop_assert!(crate::storage::RowKey::new(key.clone()).is_ok(), "{:?}", key);
        prop_assert_eq!(t.decompose(&key).unwrap(), values.to_vec());
    }

    #[test]
    fn ranges_hold_exactly_the_keys_in_range(
        (f, v, lo, hi) in format().prop_flat_map(|f| (Just(f), value_in(f), value_in(f), value_in(f))),
        name in text(),
    ) {
        let t: KeyTemplate = match f {
            FieldFormat::Padded { width } => format!("K:{{k:{width:02}}}__{{n}}"),
            FieldFormat::Signed { width } => format!("K:{{k:+{width:02}}}__{{n}}"),
            FieldFormat::Inverted { width } => format!("K:{{k:~{width:02}}}__{{n}}"),
            _ => unreachable!(),
        }.parse().unwrap();
        let key = t.compose(&[KeyValue::Int(v), KeyValue::Text(name)]).unwrap();
        let bounds = t.int_range(&[], Bound::Included(lo), Bound::Included(hi)).unwrap().unwrap();
        let inside = match &bounds {
            KeyBounds::Empty => false,
            KeyBounds::All => true,
            KeyBounds::Range { start, end } => {
                let after_start = match start {
                    Bound::Included(s) => cmp_utf16(&key, s).is_ge(),
                    Bound::Excluded(s) => cmp_utf16(&key, s).is_gt(),
                    Bound::Unbounded => true,
                };
                let before_end = match end {
                    Bound::Included(e) => cmp_utf16(&key, e).is_le(),
                    Bound::Excluded(e) => cmp_utf16(&key, e).is_lt(),
                    Bound::Unbounded => true,
                };
                after_start && before_end
            }
        };
        prop_assert_eq!(inside, lo <= v && v <= hi, "{:?} in {:?}", key, bounds);
    }

    #[test]
    fn text_prefixes_are_key_prefixes(value in text(), cut in 0usize..8) {
        let prefix: String = value.chars().take(cut).collect();
        let e = escape_text(&value, "_");
        prop_assert!(e.starts_with(&escape_text(&prefix, "_")));
        prop_assert_eq!(unescape_text(&e).unwrap(), value);
    }
}

#[test]
fn a_bucket_template_is_the_rowkeys_bucket_in_two_digits() {
    let t: KeyTemplate = "{#16}".parse().unwrap();
    assert_eq!(
        (t.row_buckets(), t.to_string()),
        (Some(16), "{#16}".to_owned())
    );
    assert_eq!(t.columns().count(), 0);
    assert_eq!(t.buckets().len(), 16);
    // FNV-1a 64 of the RowKey's bytes, modulo 16 (pinned: Azure SDK
    // clients compute the same).
    assert_eq!(
        crate::keys::bucket_of("", 16),
        format!("{:02}", 0xcbf2_9ce4_8422_2325u64 % 16)
    );
    assert_eq!(
        t.compose_partition(&[], "r:0000000000000000007")
            .unwrap()
            .len(),
        2
    );
    // Its keys read back with no values; nothing else fits.
    assert_eq!(t.decompose("07").unwrap(), Vec::<KeyValue>::new());
    assert!(t.decompose("16").is_err() && t.decompose("7").is_err());
    // Without the RowKey it writes nothing, loudly.
    assert!(t.compose(&[]).is_err());
    for bad in ["{#1}", "{#101}", "{#x}"] {
        assert!(bad.parse::<KeyTemplate>().is_err(), "{bad}");
    }
}

proptest! {
    #[test]
    fn sequential_ids_spread_over_every_bucket(start in 0i64..1_000_000) {
        let t: KeyTemplate = "r:{id:+18}".parse().unwrap();
        let mut seen = std::collections::BTreeSet::new();
        for id in start..start + 200 {
            let rk = t.compose(&[KeyValue::Int(id)]).unwrap();
            seen.insert(crate::keys::bucket_of(&rk, 16));
        }
        prop_assert_eq!(seen.len(), 16);
    }
}
