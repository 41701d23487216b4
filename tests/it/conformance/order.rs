//! Key order: results come back by (PartitionKey, RowKey), each compared
//! ordinally by UTF-16 code unit, in every query path.

use std::ops::Bound::{Excluded, Included, Unbounded};

use tablesql::storage::{CmpOp, Filter, Operand};

use super::*;

/// Inserts `keys` in the order given (scrambled), then asserts a full query, a
/// query through pages of two, and each partition's query return `sorted`.
async fn assert_sorted(
    fx: &Fixture,
    scrambled: &[(&str, &str)],
    sorted: &[(&str, &str)],
) -> TestResult {
    let s = fx.store();
    let t = table(s, "Ordered").await?;
    seed_keys(s, &t, scrambled).await?;
    let want = pairs(sorted);
    assert_eq!(keys(&all(s, &t, &Query::all()).await?), want, "full scan");
    assert_eq!(
        keys(&all(s, &t, &Query::all().top(2)).await?),
        want,
        "pages of two"
    );
    for (p, _) in sorted {
        let part: Vec<_> = want.iter().filter(|(wp, _)| wp == p).cloned().collect();
        assert_eq!(
            keys(&all(s, &t, &Query::partition(pk(p))).await?),
            part,
            "partition {p:?}"
        );
    }
    Ok(())
}

/// The keys as RowKeys of partition "p".
fn as_rows<'a>(ks: &[&'a str]) -> Vec<(&'a str, &'a str)> {
    ks.iter().map(|k| ("p", *k)).collect()
}

/// The keys as PartitionKeys, each with RowKey "r".
fn as_parts<'a>(ks: &[&'a str]) -> Vec<(&'a str, &'a str)> {
    ks.iter().map(|k| (*k, "r")).collect()
}

/// The same keys as RowKeys of one partition "p" and as PartitionKeys of their own.
async fn assert_sorted_both_ways(fx: &Fixture, scrambled: &[&str], sorted: &[&str]) -> TestResult {
    assert!(
        !sorted.contains(&"p"),
        "\"p\" is the partition that holds the rows"
    );
    let mut both = as_rows(scrambled);
    both.extend(as_parts(scrambled));
    // Partition "p" takes its place among the others.
    let mut want = as_parts(sorted);
    let at = want
        .iter()
        .position(|(k, _)| cmp_units(k, "p").is_gt())
        .unwrap_or(want.len());
    want.splice(at..at, as_rows(sorted));
    assert_sorted(fx, &both, &want).await
}

/// Ordinal UTF-16 comparison, written out here so the suite does not trust the
/// library's own.
fn cmp_units(a: &str, b: &str) -> std::cmp::Ordering {
    a.encode_utf16().cmp(b.encode_utf16())
}

pub async fn numeric_text_sorts_lexically(fx: &Fixture) -> TestResult {
    assert_sorted_both_ways(
        fx,
        &["2", "111", "10", "1", "002", "20"],
        &["002", "1", "10", "111", "2", "20"],
    )
    .await
}

pub async fn prefix_sorts_first(fx: &Fixture) -> TestResult {
    assert_sorted_both_ways(
        fx,
        &["ab", "abc", "a", "b", "aa", "a "],
        &["a", "a ", "aa", "ab", "abc", "b"],
    )
    .await
}

pub async fn non_bmp_sorts_before_private_use(fx: &Fixture) -> TestResult {
    let scrambled = [
        "\u{FFFF}",
        "\u{E000}",
        "\u{10000}",
        "\u{D7FF}",
        "\u{10FFFF}",
        "z",
        "\u{1F600}",
    ];
    // U+10000.. are surrogate pairs starting 0xD800..0xDBFF: below U+E000 in UTF-16.
    let sorted = [
        "z",
        "\u{D7FF}",
        "\u{10000}",
        "\u{1F600}",
        "\u{10FFFF}",
        "\u{E000}",
        "\u{FFFF}",
    ];
    let mut by_str = sorted;
    by_str.sort();
    assert_ne!(
        by_str, sorted,
        "Rust's str order differs here; the store must not use it"
    );
    assert_sorted_both_ways(fx, &scrambled, &sorted).await
}

pub async fn order_is_case_sensitive(fx: &Fixture) -> TestResult {
    assert_sorted_both_ways(
        fx,
        &["b", "B", "a", "A", "_", "ba", "Ba"],
        &["A", "B", "Ba", "_", "a", "b", "ba"],
    )
    .await
}

pub async fn empty_key_sorts_first(fx: &Fixture) -> TestResult {
    let scrambled = [
        ("a", ""),
        (" ", ""),
        ("", "z"),
        ("a", "a"),
        ("", ""),
        ("", " "),
    ];
    let sorted = [
        ("", ""),
        ("", " "),
        ("", "z"),
        (" ", ""),
        ("a", ""),
        ("a", "a"),
    ];
    assert_sorted(fx, &scrambled, &sorted).await
}

pub async fn partition_then_row_order(fx: &Fixture) -> TestResult {
    // The PartitionKey decides first, even against a RowKey that would sort higher.
    let scrambled = [
        ("ab", ""),
        ("a", "\u{FFFF}"),
        ("a ", ""),
        ("a", "\u{10000}"),
        ("a", "zzz"),
        ("b", "a"),
        ("a\u{10000}", "a"),
        ("a\u{E000}", "a"),
    ];
    let sorted = [
        ("a", "zzz"),
        ("a", "\u{10000}"),
        ("a", "\u{FFFF}"),
        ("a ", ""),
        ("ab", ""),
        ("a\u{10000}", "a"),
        ("a\u{E000}", "a"),
        ("b", "a"),
    ];
    assert_sorted(fx, &scrambled, &sorted).await
}

pub async fn ranges_use_utf16_order(fx: &Fixture) -> TestResult {
    let s = fx.store();
    let t = table(s, "Ordered").await?;
    let ks = ["z", "\u{10000}", "\u{E000}", "\u{FFFF}"];
    for k in ks {
        seed_keys(s, &t, &[("p", k), (k, "r")]).await?;
    }
    let rows_from = |start| Query::partition(pk("p")).rows(range(start, Unbounded, rk));
    let found = all(s, &t, &rows_from(Included("\u{E000}"))).await?;
    assert_eq!(row_keys(&found), ["\u{E000}", "\u{FFFF}"]);
    let found = all(s, &t, &rows_from(Excluded("\u{10000}"))).await?;
    assert_eq!(row_keys(&found), ["\u{E000}", "\u{FFFF}"]);
    let q = Query::partition(pk("p")).rows(range(Unbounded, Excluded("\u{E000}"), rk));
    assert_eq!(row_keys(&all(s, &t, &q).await?), ["z", "\u{10000}"]);
    let q = Query {
        partitions: range(Excluded("z"), Excluded("\u{FFFF}"), pk),
        ..Query::all()
    };
    assert_eq!(
        keys(&all(s, &t, &q).await?),
        pairs(&[("\u{10000}", "r"), ("\u{E000}", "r")])
    );
    let f = Filter::Compare {
        operand: Operand::RowKey,
        op: CmpOp::Lt,
        value: text("\u{E000}"),
    };
    let q = Query::partition(pk("p")).filter(f);
    assert_eq!(row_keys(&all(s, &t, &q).await?), ["z", "\u{10000}"]);
    Ok(())
}

pub async fn order_holds_across_pages(fx: &Fixture) -> TestResult {
    let s = fx.store();
    let t = table(s, "Ordered").await?;
    let parts = ["\u{E000}", "", "B", "a", "\u{10000}", "10", "9"];
    let rows = ["\u{FFFF}", "\u{10FFFF}", "", "b", "A", "x y"];
    for p in parts {
        seed(s, &t, rows.iter().map(|r| entity(p, r, &[])).collect()).await?;
    }
    let mut want: Vec<(String, String)> = parts
        .iter()
        .flat_map(|p| rows.iter().map(|r| ((*p).to_owned(), (*r).to_owned())))
        .collect();
    want.sort_by(|(p1, r1), (p2, r2)| cmp_units(p1, p2).then_with(|| cmp_units(r1, r2)));
    for top in [1, 3, 5, 1000] {
        assert_eq!(
            keys(&all(s, &t, &Query::all().top(top)).await?),
            want,
            "top {top}"
        );
    }
    Ok(())
}
