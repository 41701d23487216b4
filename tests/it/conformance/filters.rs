//! Filters: every comparison operator on every EDM type, and/or/not, the key and
//! Timestamp operands, missing properties and type mismatches.

use chrono::{Duration, TimeZone, Utc};
use tablesql::storage::{CmpOp, Filter, Operand};
use uuid::Uuid;

use super::*;

const OPS: [CmpOp; 6] = [
    CmpOp::Eq,
    CmpOp::Ne,
    CmpOp::Gt,
    CmpOp::Ge,
    CmpOp::Lt,
    CmpOp::Le,
];

/// Whether `i op pivot` holds for positions in an ascending list.
fn holds(op: CmpOp, i: usize, pivot: usize) -> bool {
    match op {
        CmpOp::Eq => i == pivot,
        CmpOp::Ne => i != pivot,
        CmpOp::Gt => i > pivot,
        CmpOp::Ge => i >= pivot,
        CmpOp::Lt => i < pivot,
        CmpOp::Le => i <= pivot,
    }
}

/// The RowKeys a filter returns from a table.
async fn matching(s: &dyn TableStore, t: &TableName, f: Filter) -> TestResult<Vec<String>> {
    Ok(row_keys(&all(s, t, &Query::all().filter(f)).await?))
}

/// Stores `ascending` (strictly increasing values of one type) as property "V" of
/// rows "0", "1", ..., plus a row "none" without "V"; then for every operator and
/// every pivot asserts exactly the rows whose value stands in that relation.
async fn check_operators(fx: &Fixture, ascending: &[EdmValue]) -> TestResult {
    let s = fx.store();
    let t = table(s, "Ops").await?;
    let mut rows: Vec<Entity> = ascending
        .iter()
        .enumerate()
        .map(|(i, v)| entity("p", &i.to_string(), &[("V", v.clone())]))
        .collect();
    rows.push(entity("p", "none", &[("Other", ascending[0].clone())]));
    seed(s, &t, rows).await?;
    for (pivot, literal) in ascending.iter().enumerate() {
        for op in OPS {
            let want: Vec<String> = (0..ascending.len())
                .filter(|&i| holds(op, i, pivot))
                .map(|i| i.to_string())
                .collect();
            let got = matching(s, &t, Filter::property("V", op, literal.clone())).await?;
            assert_eq!(got, want, "V {op:?} {literal:?}");
        }
    }
    Ok(())
}

pub async fn filter_int32_operators(fx: &Fixture) -> TestResult {
    check_operators(fx, &[i32::MIN, -1, 0, 5, i32::MAX].map(EdmValue::Int32)).await
}

pub async fn filter_int64_operators(fx: &Fixture) -> TestResult {
    check_operators(
        fx,
        &[i64::MIN, -5, 0, 1 << 40, i64::MAX].map(EdmValue::Int64),
    )
    .await
}

pub async fn filter_string_operators(fx: &Fixture) -> TestResult {
    // Ordinal UTF-16 order: uppercase before lowercase, prefixes first, and an
    // astral character (a surrogate pair) before U+E000.
    let values = [
        "",
        "A",
        "B",
        "a",
        "ab",
        "b",
        "é",
        "\u{10000}",
        "\u{E000}",
        "\u{FFFF}",
    ];
    check_operators(fx, &values.map(text)).await
}

pub async fn filter_double_operators(fx: &Fixture) -> TestResult {
    let values = [f64::NEG_INFINITY, -1.5, 0.0, 2.5, 1e300, f64::INFINITY];
    check_operators(fx, &values.map(EdmValue::Double)).await
}

pub async fn filter_datetime_operators(fx: &Fixture) -> TestResult {
    let y2k = Utc
        .with_ymd_and_hms(2000, 1, 1, 0, 0, 0)
        .single()
        .ok_or("date")?;
    let values = [
        Utc.with_ymd_and_hms(1601, 1, 1, 0, 0, 0)
            .single()
            .ok_or("date")?,
        y2k,
        y2k + Duration::nanoseconds(100),
        y2k + Duration::nanoseconds(200),
        Utc.with_ymd_and_hms(9999, 12, 31, 0, 0, 0)
            .single()
            .ok_or("date")?,
    ];
    check_operators(fx, &values.map(EdmValue::DateTime)).await
}

pub async fn filter_boolean_operators(fx: &Fixture) -> TestResult {
    check_operators(fx, &[false, true].map(EdmValue::Boolean)).await
}

pub async fn filter_guid_operators(fx: &Fixture) -> TestResult {
    let values = [
        Uuid::nil(),
        Uuid::from_u128(0x1000_0000_0000_0000_0000_0000_0000_0001),
        Uuid::from_u128(0x2000_0000_0000_0000_0000_0000_0000_0000),
        Uuid::from_u128(0x7FFF_FFFF_FFFF_FFFF_FFFF_FFFF_FFFF_FFFF),
    ];
    check_operators(fx, &values.map(EdmValue::Guid)).await
}

pub async fn filter_binary_operators(fx: &Fixture) -> TestResult {
    let values: [Vec<u8>; 5] = [vec![], vec![0], vec![0, 1], vec![1], vec![255]];
    check_operators(fx, &values.map(EdmValue::Binary)).await
}

pub async fn filter_and_or_not(fx: &Fixture) -> TestResult {
    let s = fx.store();
    let t = table(s, "Logic").await?;
    let parity = |i: i32| text(if i % 2 == 0 { "even" } else { "odd" });
    seed(
        s,
        &t,
        (0..6)
            .map(|i| entity("p", &i.to_string(), &[("A", int(i)), ("B", parity(i))]))
            .collect(),
    )
    .await?;
    let a = |op, v| Filter::property("A", op, int(v));
    let b = |v: &str| Filter::property("B", CmpOp::Eq, text(v));
    let cases: [(Filter, &[&str]); 8] = [
        (a(CmpOp::Ge, 2).and(b("even")), &["2", "4"]),
        (a(CmpOp::Lt, 1).or(a(CmpOp::Gt, 4)), &["0", "5"]),
        (a(CmpOp::Eq, 3).negate(), &["0", "1", "2", "4", "5"]),
        (
            a(CmpOp::Ge, 2).and(b("odd")).negate(),
            &["0", "1", "2", "4"],
        ),
        (
            a(CmpOp::Lt, 2).or(a(CmpOp::Gt, 3)).and(b("odd").negate()),
            &["0", "4"],
        ),
        (b("odd").negate().negate(), &["1", "3", "5"]),
        (a(CmpOp::Gt, 9).and(b("odd")).or(a(CmpOp::Eq, 0)), &["0"]),
        (
            Filter::property("Missing", CmpOp::Eq, int(1)).negate(),
            &["0", "1", "2", "3", "4", "5"],
        ),
    ];
    for (f, want) in cases {
        assert_eq!(matching(s, &t, f.clone()).await?, want, "{f:?}");
    }
    Ok(())
}

pub async fn filter_on_key_operands(fx: &Fixture) -> TestResult {
    let s = fx.store();
    let t = table(s, "Keys").await?;
    for p in ["p1", "p2", "p3"] {
        seed(s, &t, ["a", "b", "c"].map(|r| entity(p, r, &[])).to_vec()).await?;
    }
    let on = |operand: Operand, op, v: EdmValue| Filter::Compare {
        operand,
        op,
        value: v,
    };
    let q = |f: Filter| Query::all().filter(f);
    let found = all(s, &t, &q(on(Operand::PartitionKey, CmpOp::Eq, text("p2")))).await?;
    assert_eq!(
        keys(&found),
        pairs(&[("p2", "a"), ("p2", "b"), ("p2", "c")])
    );
    let f = on(Operand::PartitionKey, CmpOp::Ne, text("p2")).and(on(
        Operand::RowKey,
        CmpOp::Ge,
        text("c"),
    ));
    assert_eq!(
        keys(&all(s, &t, &q(f)).await?),
        pairs(&[("p1", "c"), ("p3", "c")])
    );
    let f = on(Operand::PartitionKey, CmpOp::Gt, text("p2")).or(on(
        Operand::RowKey,
        CmpOp::Lt,
        text("b"),
    ));
    let want = [
        ("p1", "a"),
        ("p2", "a"),
        ("p3", "a"),
        ("p3", "b"),
        ("p3", "c"),
    ];
    assert_eq!(keys(&all(s, &t, &q(f)).await?), pairs(&want));
    let f = on(Operand::RowKey, CmpOp::Le, text("a")).and(on(
        Operand::PartitionKey,
        CmpOp::Lt,
        text("p3"),
    ));
    assert_eq!(
        keys(&all(s, &t, &q(f)).await?),
        pairs(&[("p1", "a"), ("p2", "a")])
    );
    // Keys are Strings: another literal type matches nothing, whatever the operator.
    for op in OPS {
        for operand in [Operand::PartitionKey, Operand::RowKey] {
            let f = on(operand.clone(), op, int(1));
            assert_eq!(
                all(s, &t, &q(f)).await?.len(),
                0,
                "{operand:?} {op:?} Int32"
            );
        }
    }
    Ok(())
}

pub async fn filter_on_timestamp(fx: &Fixture) -> TestResult {
    let s = fx.store();
    let t = table(s, "Stamps").await?;
    for r in ["a", "b", "c"] {
        insert(s, &t, entity("p", r, &[])).await?;
        // Distinct Timestamps: two writes in one millisecond may share one
        // (Azurite's clock), and the cases below need them ordered.
        tokio::time::sleep(std::time::Duration::from_millis(3)).await;
    }
    let stamp = must_get(s, &t, "p", "b").await?.timestamp;
    let cases: [(CmpOp, &[&str]); 6] = [
        (CmpOp::Eq, &["b"]),
        (CmpOp::Ne, &["a", "c"]),
        (CmpOp::Gt, &["c"]),
        (CmpOp::Ge, &["b", "c"]),
        (CmpOp::Lt, &["a"]),
        (CmpOp::Le, &["a", "b"]),
    ];
    for (op, want) in cases {
        let f = Filter::Compare {
            operand: Operand::Timestamp,
            op,
            value: EdmValue::DateTime(stamp),
        };
        assert_eq!(matching(s, &t, f).await?, want, "Timestamp {op:?}");
        // A literal of another type matches nothing.
        let f = Filter::Compare {
            operand: Operand::Timestamp,
            op,
            value: text("x"),
        };
        assert_eq!(matching(s, &t, f).await?, Vec::<String>::new());
    }
    // A custom property named like the system one is not the Timestamp operand.
    let f = Filter::property("Timestamp", CmpOp::Eq, EdmValue::DateTime(stamp));
    assert_eq!(matching(s, &t, f).await?, Vec::<String>::new());
    Ok(())
}

pub async fn missing_property_compares_false(fx: &Fixture) -> TestResult {
    let s = fx.store();
    let t = table(s, "Sparse").await?;
    seed(
        s,
        &t,
        vec![
            entity("p", "has", &[("A", int(1))]),
            entity("p", "lacks", &[("B", int(1))]),
        ],
    )
    .await?;
    for op in OPS {
        let f = Filter::property("A", op, int(1));
        let want: &[&str] = if holds(op, 0, 0) { &["has"] } else { &[] };
        assert_eq!(matching(s, &t, f.clone()).await?, want, "A {op:?} 1");
        // `not` flips the comparison, so the entity without "A" passes every negation.
        let want: &[&str] = if holds(op, 0, 0) {
            &["lacks"]
        } else {
            &["has", "lacks"]
        };
        assert_eq!(matching(s, &t, f.negate()).await?, want, "not (A {op:?} 1)");
    }
    Ok(())
}

pub async fn type_mismatch_compares_false(fx: &Fixture) -> TestResult {
    let s = fx.store();
    let t = table(s, "Types").await?;
    seed(
        s,
        &t,
        vec![
            entity("p", "i32", &[("N", EdmValue::Int32(5))]),
            entity("p", "i64", &[("N", EdmValue::Int64(5))]),
        ],
    )
    .await?;
    // No coercion: an Int32 property against Int64, Double or String literals (and
    // an Int64 property against Int32 ones) is false under every operator.
    let literals = [
        EdmValue::Int64(4),
        EdmValue::Int64(5),
        EdmValue::Int64(6),
        EdmValue::Double(5.0),
        text("5"),
    ];
    for lit in literals {
        for op in OPS {
            let got = matching(s, &t, Filter::property("N", op, lit.clone())).await?;
            let want: Vec<String> = match &lit {
                EdmValue::Int64(v) if holds(op, 5, *v as usize) => vec!["i64".into()],
                _ => vec![],
            };
            assert_eq!(got, want, "N {op:?} {lit:?}");
        }
    }
    for op in OPS {
        let got = matching(s, &t, Filter::property("N", op, EdmValue::Int32(5))).await?;
        let want: &[&str] = if holds(op, 0, 0) { &["i32"] } else { &[] };
        assert_eq!(got, want, "N {op:?} Int32(5)");
    }
    Ok(())
}
