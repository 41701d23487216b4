//! EDM values: every one of the eight types round-trips exactly, through get,
//! query and every write kind; DateTime keeps 100-ns precision.

use chrono::{DateTime, Duration, TimeZone, Utc};
use tablesql::storage::{IfMatch, WriteOp};
use uuid::Uuid;

use super::*;

/// Stores each value as property "V" of its own entity, reads all back by get
/// and by query, and asserts each is exactly what was written.
async fn round_trip(fx: &Fixture, values: &[EdmValue]) -> TestResult {
    let s = fx.store();
    let t = table(s, "Values").await?;
    let row = |i: usize| format!("{i:04}");
    for (i, v) in values.iter().enumerate() {
        insert(s, &t, entity("p", &row(i), &[("V", v.clone())])).await?;
    }
    for (i, v) in values.iter().enumerate() {
        let got = must_get(s, &t, "p", &row(i)).await?;
        assert_eq!(got.get("V"), Some(&fx.stored(v)), "get of value #{i}");
        assert_eq!(got.get("V").map(EdmValue::edm_type), Some(v.edm_type()));
    }
    let queried = all(s, &t, &Query::all()).await?;
    let got: Vec<&EdmValue> = queried.iter().filter_map(|e| e.get("V")).collect();
    assert_eq!(
        got,
        values
            .iter()
            .map(|v| fx.stored(v))
            .collect::<Vec<_>>()
            .iter()
            .collect::<Vec<_>>(),
        "values read by query"
    );
    Ok(())
}

fn utc(y: i32, mo: u32, d: u32, h: u32, mi: u32, s: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(y, mo, d, h, mi, s)
        .single()
        .expect("valid test date")
}

pub async fn strings_round_trip(fx: &Fixture) -> TestResult {
    let values = [
        "",
        "plain ascii",
        "été, Straße, Ελληνικά, 日本語",
        "emoji \u{1F600} and astral \u{10000}\u{10FFFF}",
        "controls \u{0}\u{1}\t\n\r\u{7f}\u{9f} and quotes ' \" and slashes / \\ # ?",
        "  leading and trailing spaces  ",
        "\u{FEFF}\u{FFFD}\u{E000}\u{FFFF}",
    ];
    let mut values: Vec<EdmValue> = values.iter().map(|s| text(s)).collect();
    values.push(EdmValue::String("x".repeat(32_768)));
    values.push(EdmValue::String("\u{10000}".repeat(16_384)));
    round_trip(fx, &values).await
}

pub async fn binaries_round_trip(fx: &Fixture) -> TestResult {
    let values = [
        Vec::new(),
        vec![0],
        vec![0xFF, 0x00, 0x7F, 0x80],
        (0..=255u8).collect(),
        vec![0xAB; 65_536],
    ];
    round_trip(fx, &values.map(EdmValue::Binary)).await
}

pub async fn booleans_round_trip(fx: &Fixture) -> TestResult {
    round_trip(fx, &[EdmValue::Boolean(true), EdmValue::Boolean(false)]).await
}

pub async fn datetimes_round_trip(fx: &Fixture) -> TestResult {
    let values = [
        utc(1601, 1, 1, 0, 0, 0),
        utc(1969, 12, 31, 23, 59, 59) + Duration::nanoseconds(999_999_900),
        utc(1970, 1, 1, 0, 0, 0),
        utc(2011, 11, 6, 9, 10, 0) + Duration::nanoseconds(100),
        utc(2024, 2, 29, 12, 0, 0) + Duration::nanoseconds(123_456_700),
        utc(9999, 12, 31, 23, 59, 59) + Duration::nanoseconds(999_999_900),
    ];
    round_trip(fx, &values.map(EdmValue::DateTime)).await
}

pub async fn datetime_drops_digits_below_100ns(fx: &Fixture) -> TestResult {
    let s = fx.store();
    let t = table(s, "Times").await?;
    let base = utc(2020, 5, 17, 8, 30, 15);
    let cases = [
        (123_456_789, 123_456_700),
        (99, 0),
        (999_999_999, 999_999_900),
        (100, 100),
        (1, 0),
    ];
    for (i, (written, kept)) in cases.into_iter().enumerate() {
        let r = i.to_string();
        let v = EdmValue::DateTime(base + Duration::nanoseconds(written));
        insert(s, &t, entity("p", &r, &[("T", v)])).await?;
        let want = EdmValue::DateTime(base + Duration::nanoseconds(kept));
        assert_eq!(
            must_get(s, &t, "p", &r).await?.get("T"),
            Some(&want),
            "{written} ns"
        );
    }
    // Before the epoch the truncation is toward the earlier tick.
    let before = utc(1900, 1, 1, 0, 0, 0) + Duration::nanoseconds(555);
    s.execute(
        &t,
        WriteOp::InsertOrMerge(entity("p", "old", &[("T", EdmValue::DateTime(before))])),
    )
    .await?;
    let want = EdmValue::DateTime(utc(1900, 1, 1, 0, 0, 0) + Duration::nanoseconds(500));
    assert_eq!(must_get(s, &t, "p", "old").await?.get("T"), Some(&want));
    Ok(())
}

pub async fn doubles_round_trip(fx: &Fixture) -> TestResult {
    let values = [
        0.0,
        -0.0,
        1.5,
        -2.25,
        std::f64::consts::PI,
        f64::MAX,
        f64::MIN,
        f64::MIN_POSITIVE,
        f64::from_bits(1), // smallest subnormal
        f64::EPSILON,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
    ];
    round_trip(fx, &values.map(EdmValue::Double)).await?;
    // -0.0 stays negative and NaN stays NaN (checked bitwise, not by ==).
    let s = fx.store();
    let t = tn("Values");
    let neg_zero = must_get(s, &t, "p", "0001").await?;
    let negative =
        !matches!(fx.stored(&EdmValue::Double(-0.0)), EdmValue::Double(d) if d.is_sign_positive());
    assert_matches!(neg_zero.get("V"), Some(EdmValue::Double(d)) if d.is_sign_negative() == negative && *d == 0.0);
    let nan = must_get(s, &t, "p", "0012").await?;
    assert_matches!(nan.get("V"), Some(EdmValue::Double(d)) if d.is_nan());
    Ok(())
}

pub async fn guids_round_trip(fx: &Fixture) -> TestResult {
    let values = [
        Uuid::nil(),
        Uuid::max(),
        Uuid::from_u128(0x0123_4567_89AB_CDEF_FEDC_BA98_7654_3210),
        Uuid::parse_str("c9da6455-213d-42c9-9a79-3e9149a57833")?,
    ];
    round_trip(fx, &values.map(EdmValue::Guid)).await
}

pub async fn integers_round_trip(fx: &Fixture) -> TestResult {
    let values = [
        EdmValue::Int32(i32::MIN),
        EdmValue::Int32(-1),
        EdmValue::Int32(0),
        EdmValue::Int32(i32::MAX),
        EdmValue::Int64(i64::MIN),
        EdmValue::Int64(-1),
        EdmValue::Int64(0),
        EdmValue::Int64(i64::from(i32::MAX) + 1),
        EdmValue::Int64(i64::MAX),
    ];
    round_trip(fx, &values).await
}

pub async fn int32_and_int64_stay_distinct(fx: &Fixture) -> TestResult {
    let s = fx.store();
    let t = table(s, "Ints").await?;
    insert(
        s,
        &t,
        entity(
            "p",
            "r",
            &[("A", EdmValue::Int32(7)), ("B", EdmValue::Int64(7))],
        ),
    )
    .await?;
    let got = must_get(s, &t, "p", "r").await?;
    assert_matches!(got.get("A"), Some(EdmValue::Int32(7)));
    assert_matches!(got.get("B"), Some(EdmValue::Int64(7)));
    assert_ne!(got.get("A"), got.get("B"));
    Ok(())
}

/// One entity holding every type, written by each write kind in turn.
pub async fn every_type_round_trips_through_query_and_upserts(fx: &Fixture) -> TestResult {
    let s = fx.store();
    let t = table(s, "AllTypes").await?;
    let props = [
        ("S", text("ẞtring \u{1F980}")),
        ("Bin", EdmValue::Binary(vec![1, 2, 3, 0, 255])),
        ("Bool", EdmValue::Boolean(false)),
        (
            "When",
            EdmValue::DateTime(utc(2001, 2, 3, 4, 5, 6) + Duration::nanoseconds(700)),
        ),
        ("D", EdmValue::Double(-0.0)),
        ("G", EdmValue::Guid(Uuid::from_u128(42))),
        ("I", EdmValue::Int32(i32::MIN)),
        ("L", EdmValue::Int64(i64::MAX)),
    ];
    let e = entity("p", "r", &props);
    let mut want = e.clone();
    want.properties.values_mut().for_each(|v| *v = fx.stored(v));
    let ops = [
        WriteOp::Insert(e.clone()),
        WriteOp::Update(e.clone(), IfMatch::Any),
        WriteOp::Merge(e.clone(), IfMatch::Any),
        WriteOp::InsertOrReplace(e.clone()),
        WriteOp::InsertOrMerge(e.clone()),
    ];
    for op in ops {
        let kind = format!("{op:?}")
            .split('(')
            .next()
            .unwrap_or_default()
            .to_owned();
        s.execute(&t, op).await?;
        assert_eq!(
            must_get(s, &t, "p", "r").await?.entity,
            want,
            "get after {kind}"
        );
        let queried = all(s, &t, &Query::partition(pk("p"))).await?;
        assert_eq!(queried.len(), 1);
        assert_eq!(queried[0].entity, want, "query after {kind}");
    }
    Ok(())
}
