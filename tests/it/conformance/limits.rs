//! Limits of the model: keys, property count and names, value and entity sizes,
//! DateTime range, `top`. Each shows the exact `InvalidInput` and that nothing
//! was written.

use chrono::{DateTime, Duration, TimeZone, Utc};
use tablesql::storage::entity::MAX_ENTITY_BYTES;
use tablesql::storage::{IfMatch, InvalidInput, KeyKind, StorageError, WriteOp};

use super::*;

/// Inserts one entity that must be rejected as invalid; returns the reason and
/// checks the entity was not stored.
async fn rejected(s: &dyn TableStore, t: &TableName, e: Entity) -> TestResult<InvalidInput> {
    let (p, r) = (e.partition_key.clone(), e.row_key.clone());
    let err = expect_err!(
        s.execute(t, WriteOp::Insert(e)).await,
        StorageError::Invalid(_)
    );
    assert_eq!(
        s.get(t, &p, &r).await?,
        None,
        "a rejected entity was stored"
    );
    match err {
        StorageError::Invalid(invalid) => Ok(invalid),
        other => Err(format!("not Invalid: {other:?}").into()),
    }
}

/// Inserts one entity that must be accepted, and reads it back unchanged.
async fn accepted(s: &dyn TableStore, t: &TableName, e: Entity) -> TestResult {
    insert(s, t, e.clone()).await?;
    let got = s
        .get(t, &e.partition_key, &e.row_key)
        .await?
        .ok_or("accepted entity missing")?;
    assert_eq!(got.entity, e);
    Ok(())
}

fn utc(y: i32, mo: u32, d: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(y, mo, d, 0, 0, 0)
        .single()
        .expect("valid test date")
}

pub async fn key_length_limit(fx: &Fixture) -> TestResult {
    let s = fx.store();
    let t = table(s, "Keys").await?;
    let astral = "\u{10000}"; // two UTF-16 code units
    let fits = [
        "x".repeat(512),
        "é".repeat(512),
        format!("{}{astral}", "x".repeat(510)),
    ];
    let too_long = [
        "x".repeat(513),
        "é".repeat(513),
        format!("{}{astral}", "x".repeat(511)),
        astral.repeat(257),
    ];
    for key in &too_long {
        let bytes = key.encode_utf16().count() * 2;
        assert_matches!(PartitionKey::new(key.as_str()),
            Err(InvalidInput::KeyTooLong { kind: KeyKind::PartitionKey, bytes: b }) if *b == bytes);
        assert_matches!(RowKey::new(key.as_str()),
            Err(InvalidInput::KeyTooLong { kind: KeyKind::RowKey, bytes: b }) if *b == bytes);
    }
    for (i, key) in fits.iter().enumerate() {
        let p = PartitionKey::new(key.as_str())?;
        let r = RowKey::new(key.as_str())?;
        accepted(
            s,
            &t,
            Entity::new(p.clone(), r.clone()).with("I", int(i as i32)),
        )
        .await?;
        let found = all(s, &t, &Query::partition(p)).await?;
        assert_eq!(row_keys(&found), std::slice::from_ref(key));
    }
    assert_count(s, &t, 3).await
}

pub async fn forbidden_key_characters(fx: &Fixture) -> TestResult {
    let s = fx.store();
    let t = table(s, "Keys").await?;
    let forbidden = [
        '/', '\\', '#', '?', '\u{0}', '\u{1}', '\t', '\n', '\u{1F}', '\u{7F}', '\u{80}', '\u{9F}',
    ];
    for c in forbidden {
        for key in [
            c.to_string(),
            format!("a{c}"),
            format!("{c}b"),
            format!("a{c}b"),
        ] {
            assert_matches!(PartitionKey::new(key.as_str()),
                Err(InvalidInput::KeyCharacter { kind: KeyKind::PartitionKey, ch, code })
                    if *ch == c && *code == c as u32);
            assert_matches!(RowKey::new(key.as_str()),
                Err(InvalidInput::KeyCharacter { kind: KeyKind::RowKey, ch, code })
                    if *ch == c && *code == c as u32);
        }
    }
    // The error is for the first bad character.
    assert_matches!(
        RowKey::new("ok#/"),
        Err(InvalidInput::KeyCharacter {
            ch: '#',
            code: 0x23,
            ..
        })
    );
    // Keys are checked before an entity exists, so nothing reached the table.
    assert_count(s, &t, 0).await
}

pub async fn allowed_key_characters_work_end_to_end(fx: &Fixture) -> TestResult {
    let s = fx.store();
    let t = table(s, "Keys").await?;
    let allowed = [
        "\u{A0}",
        " ",
        "\u{20}x\u{20}",
        "%2F",
        "+",
        "'",
        "\"",
        "*",
        ":",
        ".",
        "~",
        "&",
        "=",
        "@",
        "|",
        "\u{FF}",
        "é",
        "日本",
        "\u{FFFD}",
        "\u{E000}",
        "\u{FFFF}",
        "\u{10000}",
        "\u{1F600}",
        "\u{10FFFF}",
    ];
    for key in allowed {
        accepted(
            s,
            &t,
            Entity::new(PartitionKey::new(key)?, RowKey::new(key)?).with("K", text(key)),
        )
        .await?;
    }
    for key in allowed {
        let found = all(s, &t, &Query::partition(pk(key))).await?;
        assert_eq!(keys(&found), pairs(&[(key, key)]), "partition {key:?}");
        let del = WriteOp::Delete {
            partition_key: pk(key),
            row_key: rk(key),
            if_match: IfMatch::Any,
        };
        s.execute(&t, del).await?;
        assert_eq!(get(s, &t, key, key).await?, None);
    }
    assert_count(s, &t, 0).await
}

pub async fn empty_keys_work_end_to_end(fx: &Fixture) -> TestResult {
    let s = fx.store();
    let t = table(s, "Empty").await?;
    seed_keys(s, &t, &[("a", ""), ("", "a"), ("", "")]).await?;
    assert_eq!(must_get(s, &t, "", "").await?.entity, entity("", "", &[]));
    s.execute(
        &t,
        WriteOp::Merge(entity("", "", &[("M", int(1))]), IfMatch::Any),
    )
    .await?;
    s.execute(
        &t,
        WriteOp::Update(entity("", "", &[("U", int(2))]), IfMatch::Any),
    )
    .await?;
    assert_eq!(
        must_get(s, &t, "", "").await?.entity,
        entity("", "", &[("U", int(2))])
    );
    let found = all(s, &t, &Query::partition(pk(""))).await?;
    assert_eq!(keys(&found), pairs(&[("", ""), ("", "a")]));
    let found = all(s, &t, &Query::all()).await?;
    assert_eq!(keys(&found), pairs(&[("", ""), ("", "a"), ("a", "")]));
    let del = WriteOp::Delete {
        partition_key: pk(""),
        row_key: rk(""),
        if_match: IfMatch::Any,
    };
    s.execute(&t, del).await?;
    assert_eq!(get(s, &t, "", "").await?, None);
    assert_count(s, &t, 2).await
}

pub async fn property_count_limit(fx: &Fixture) -> TestResult {
    let s = fx.store();
    let t = table(s, "Wide").await?;
    let wide = |n: usize| {
        (0..n).fold(entity("p", &n.to_string(), &[]), |e, i| {
            e.with(format!("P{i:03}"), int(i as i32))
        })
    };
    accepted(s, &t, wide(252)).await?;
    assert_eq!(
        must_get(s, &t, "p", "252").await?.entity.properties.len(),
        252
    );
    assert_eq!(
        rejected(s, &t, wide(253)).await?,
        InvalidInput::TooManyProperties { count: 253 }
    );
    assert_eq!(
        rejected(s, &t, wide(300)).await?,
        InvalidInput::TooManyProperties { count: 300 }
    );
    assert_count(s, &t, 1).await
}

pub async fn property_name_rules(fx: &Fixture) -> TestResult {
    let s = fx.store();
    let t = table(s, "Names").await?;
    let longest = "x".repeat(255);
    let good = [
        "a",
        "_",
        "_a",
        "Name1",
        "a_b_9",
        "été",
        "Ünïcödé",
        "名前",
        longest.as_str(),
    ];
    let e = good
        .iter()
        .fold(entity("p", "good", &[]), |e, n| e.with(*n, text(n)));
    accepted(s, &t, e).await?;
    let too_long = "x".repeat(256);
    let bad = [
        "",
        "1a",
        "9",
        "a-b",
        "a.b",
        "a b",
        "a$",
        "$a",
        "-",
        "é-",
        too_long.as_str(),
    ];
    for (i, name) in bad.into_iter().enumerate() {
        let e = entity("p", &format!("bad{i}"), &[("Fine", int(1)), (name, int(2))]);
        let why = rejected(s, &t, e).await?;
        assert_matches!(why, InvalidInput::PropertyName { name: n, .. } if n == name);
    }
    assert_count(s, &t, 1).await
}

pub async fn system_property_names_are_rejected(fx: &Fixture) -> TestResult {
    let s = fx.store();
    let t = table(s, "Names").await?;
    insert(s, &t, entity("p", "r", &[("A", int(1))])).await?;
    for name in ["PartitionKey", "RowKey", "Timestamp"] {
        let e = entity("p", "new", &[(name, text("x"))]);
        let why = rejected(s, &t, e).await?;
        assert_eq!(
            why,
            InvalidInput::SystemProperty {
                name: name.to_owned()
            }
        );
        // The upserts and merges of an existing entity are checked the same way.
        let e = entity("p", "r", &[(name, text("x"))]);
        for op in [
            WriteOp::InsertOrMerge(e.clone()),
            WriteOp::Merge(e.clone(), IfMatch::Any),
            WriteOp::Update(e, IfMatch::Any),
        ] {
            expect_err!(s.execute(&t, op).await, StorageError::Invalid(InvalidInput::SystemProperty { name: n }) if n == name);
        }
    }
    assert_eq!(
        must_get(s, &t, "p", "r").await?.entity,
        entity("p", "r", &[("A", int(1))])
    );
    assert_count(s, &t, 1).await
}

pub async fn string_value_limit(fx: &Fixture) -> TestResult {
    let s = fx.store();
    let t = table(s, "Strings").await?;
    // The limit is 64 KiB of UTF-16: 32,768 code units, whatever their UTF-8 length.
    let fits = [
        "x".repeat(32_768),
        "日".repeat(32_768),
        "\u{10000}".repeat(16_384),
    ];
    for (i, v) in fits.iter().enumerate() {
        accepted(s, &t, entity("p", &format!("ok{i}"), &[("S", text(v))])).await?;
    }
    let too_big = [
        "x".repeat(32_769),
        "é".repeat(32_769),
        format!("{}x", "\u{10000}".repeat(16_384)),
    ];
    for (i, v) in too_big.iter().enumerate() {
        let why = rejected(s, &t, entity("p", &format!("bad{i}"), &[("S", text(v))])).await?;
        assert_eq!(
            why,
            InvalidInput::ValueTooLarge {
                name: "S".into(),
                bytes: 65_538
            }
        );
    }
    assert_count(s, &t, 3).await
}

pub async fn binary_value_limit(fx: &Fixture) -> TestResult {
    let s = fx.store();
    let t = table(s, "Blobs").await?;
    accepted(
        s,
        &t,
        entity("p", "ok", &[("B", EdmValue::Binary(vec![7; 65_536]))]),
    )
    .await?;
    let why = rejected(
        s,
        &t,
        entity("p", "bad", &[("B", EdmValue::Binary(vec![7; 65_537]))]),
    )
    .await?;
    assert_eq!(
        why,
        InvalidInput::ValueTooLarge {
            name: "B".into(),
            bytes: 65_537
        }
    );
    assert_count(s, &t, 1).await
}

pub async fn entity_size_limit(fx: &Fixture) -> TestResult {
    let s = fx.store();
    let t = table(s, "Big").await?;
    let chunk = "x".repeat(32_000);
    let big = |r: &str, n: usize| {
        (0..n).fold(entity("p", r, &[]), |e, i| {
            e.with(format!("S{i:02}"), text(&chunk))
        })
    };
    // 17 strings of 32,000 characters: each value is fine, the entity is not.
    let e = big("seventeen", 17);
    let bytes = e.stored_size();
    assert!(bytes > MAX_ENTITY_BYTES);
    assert_eq!(
        rejected(s, &t, e).await?,
        InvalidInput::EntityTooLarge { bytes }
    );
    // Pad 16 strings up to exactly 1 MiB: accepted; one character more is not.
    let padded = |r: &str, extra: usize| {
        let base = big(r, 16);
        let pad_chars = (MAX_ENTITY_BYTES - base.stored_size() - (8 + 2 * 3 + 4)) / 2;
        base.with("Pad", text(&"y".repeat(pad_chars + extra)))
    };
    let exact = padded("exact", 0);
    assert_eq!(exact.stored_size(), MAX_ENTITY_BYTES);
    accepted(s, &t, exact).await?;
    let over = padded("over", 1);
    assert_eq!(
        rejected(s, &t, over).await?,
        InvalidInput::EntityTooLarge {
            bytes: MAX_ENTITY_BYTES + 2
        }
    );
    assert_count(s, &t, 1).await
}

pub async fn datetime_range_limit(fx: &Fixture) -> TestResult {
    let s = fx.store();
    let t = table(s, "Dates").await?;
    let min = utc(1601, 1, 1);
    let max = utc(9999, 12, 31) + Duration::nanoseconds(86_399_999_999_900);
    for (i, ok) in [min, max].into_iter().enumerate() {
        accepted(
            s,
            &t,
            entity("p", &format!("ok{i}"), &[("T", EdmValue::DateTime(ok))]),
        )
        .await?;
    }
    let out = [
        min - Duration::nanoseconds(100),
        utc(1600, 6, 1),
        utc(1, 1, 1),
        utc(10_000, 1, 1),
        max + Duration::nanoseconds(100),
    ];
    for (i, bad) in out.into_iter().enumerate() {
        let e = entity(
            "p",
            &format!("bad{i}"),
            &[("Fine", int(1)), ("T", EdmValue::DateTime(bad))],
        );
        assert_eq!(
            rejected(s, &t, e).await?,
            InvalidInput::DateTimeOutOfRange { name: "T".into() },
            "{bad}"
        );
    }
    assert_count(s, &t, 2).await
}

/// Dates far outside the range must be rejected like any other out-of-range date.
pub async fn datetime_far_beyond_range_is_rejected(fx: &Fixture) -> TestResult {
    let s = fx.store();
    let t = table(s, "Dates").await?;
    let far = [
        DateTime::<Utc>::MIN_UTC,
        utc(-200_000, 1, 1),
        utc(100_000, 1, 1),
        utc(100_000, 1, 1) + Duration::nanoseconds(500),
        DateTime::<Utc>::MAX_UTC,
    ];
    for (i, bad) in far.into_iter().enumerate() {
        let e = entity("p", &format!("far{i}"), &[("T", EdmValue::DateTime(bad))]);
        assert_eq!(
            rejected(s, &t, e).await?,
            InvalidInput::DateTimeOutOfRange { name: "T".into() },
            "{bad}"
        );
    }
    assert_count(s, &t, 0).await
}

pub async fn limits_apply_to_every_write_kind(fx: &Fixture) -> TestResult {
    let s = fx.store();
    let t = table(s, "Kinds").await?;
    let etag = insert(s, &t, entity("p", "r", &[("A", int(1))])).await?;
    let huge = entity("p", "r", &[("B", EdmValue::Binary(vec![0; 65_537]))]);
    let ops = [
        WriteOp::Update(huge.clone(), IfMatch::Any),
        WriteOp::Update(huge.clone(), IfMatch::ETag(etag.clone())),
        WriteOp::Merge(huge.clone(), IfMatch::Any),
        WriteOp::InsertOrReplace(huge.clone()),
        WriteOp::InsertOrMerge(huge),
    ];
    for op in ops {
        expect_err!(s.execute(&t, op).await,
            StorageError::Invalid(InvalidInput::ValueTooLarge { name, bytes: 65_537 }) if name == "B");
    }
    let got = must_get(s, &t, "p", "r").await?;
    assert_eq!(
        (&got.entity, &got.etag),
        (&entity("p", "r", &[("A", int(1))]), &etag),
        "unchanged"
    );
    assert_count(s, &t, 1).await
}

pub async fn top_limits(fx: &Fixture) -> TestResult {
    let s = fx.store();
    let t = table(s, "Top").await?;
    seed_keys(s, &t, &[("p", "a"), ("p", "b")]).await?;
    for bad in [0, 1001, 5000, u32::MAX] {
        expect_err!(s.query(&t, &Query::all().top(bad), None).await,
            StorageError::Invalid(InvalidInput::Top(n)) if *n == bad);
        expect_err!(
            s.query_all(&t, &Query::all().top(bad)).await,
            StorageError::Invalid(InvalidInput::Top(_))
        );
    }
    for good in [1, 2, 999, 1000] {
        let page = s.query(&t, &Query::all().top(good), None).await?;
        assert_eq!(page.entities.len(), good.min(2) as usize);
    }
    Ok(())
}
