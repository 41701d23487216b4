//! Queries: point gets, partition and row ranges, projection and `top`.

use std::ops::Bound::{self, Excluded, Included, Unbounded};

use tablesql::storage::{CmpOp, Filter, KeyRange};

use super::*;

/// Seeds one bare entity for every (partition, row) pair; returns the table.
async fn grid(s: &dyn TableStore, parts: &[&str], rows: &[&str]) -> TestResult<TableName> {
    let t = table(s, "Grid").await?;
    for p in parts {
        seed(
            s,
            &t,
            rows.iter()
                .map(|r| entity(p, r, &[("P", text(p)), ("R", text(r))]))
                .collect(),
        )
        .await?;
    }
    Ok(t)
}

fn parts(start: Bound<&str>, end: Bound<&str>) -> KeyRange<PartitionKey> {
    range(start, end, pk)
}

fn rows(start: Bound<&str>, end: Bound<&str>) -> KeyRange<RowKey> {
    range(start, end, rk)
}

/// The distinct PartitionKeys of entities, in order of first appearance.
fn partitions_of(entities: &[StoredEntity]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for e in entities {
        let p = e.partition_key().as_str();
        if out.last().is_none_or(|last| last != p) {
            out.push(p.to_owned());
        }
    }
    out
}

pub async fn point_get_and_missing_get(fx: &Fixture) -> TestResult {
    let s = fx.store();
    let t = grid(s, &["p", "q"], &["r", "s"]).await?;
    let got = must_get(s, &t, "q", "r").await?;
    assert_eq!(
        got.entity,
        entity("q", "r", &[("P", text("q")), ("R", text("r"))])
    );
    for (p, r) in [
        ("p", "x"),
        ("x", "r"),
        ("p", "r "),
        ("p", "R"),
        ("P", "r"),
        ("", ""),
        ("pq", ""),
        ("p", ""),
    ] {
        assert_eq!(get(s, &t, p, r).await?, None, "({p:?}, {r:?})");
    }
    Ok(())
}

/// `get_many`: the entities of the keys that exist, in RowKey order, none of
/// another partition, whatever the store's batch (Azure's 12 RowKeys a
/// request: 30 keys take three), with special characters in the keys.
pub async fn many_gets_of_one_partition(fx: &Fixture) -> TestResult {
    let s = fx.store();
    let names: Vec<String> = (0..30).map(|i| format!("r{i:02}'é")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let t = grid(s, &["p", "q"], &refs).await?;
    let mut asked: Vec<RowKey> = names.iter().step_by(2).map(|n| rk(n)).collect();
    asked.push(rk("r99 missing"));
    asked.sort();
    let got = s.get_many(&t, &pk("q"), &asked).await?;
    let keys: Vec<(&str, &str)> = got
        .iter()
        .map(|e| (e.partition_key().as_str(), e.row_key().as_str()))
        .collect();
    let want: Vec<(&str, &str)> = names.iter().step_by(2).map(|n| ("q", n.as_str())).collect();
    assert_eq!(keys, want);
    assert_eq!(
        got[0].entity,
        entity("q", &names[0], &[("P", text("q")), ("R", text(&names[0]))])
    );
    assert!(s.get_many(&t, &pk("x"), &asked).await?.is_empty());
    assert!(s.get_many(&t, &pk("p"), &[]).await?.is_empty());
    Ok(())
}

pub async fn partition_range_bounds(fx: &Fixture) -> TestResult {
    let s = fx.store();
    let t = grid(s, &["a", "b", "ba", "c", "d"], &["1", "2"]).await?;
    let cases: [(Bound<&str>, Bound<&str>, &[&str]); 11] = [
        (Unbounded, Unbounded, &["a", "b", "ba", "c", "d"]),
        (Included("b"), Included("c"), &["b", "ba", "c"]),
        (Excluded("b"), Unbounded, &["ba", "c", "d"]),
        (Unbounded, Excluded("c"), &["a", "b", "ba"]),
        (Excluded("a"), Excluded("d"), &["b", "ba", "c"]),
        (Included("b"), Included("b"), &["b"]),
        (Included("bb"), Unbounded, &["c", "d"]),
        (Unbounded, Included("b"), &["a", "b"]),
        (Excluded("d"), Unbounded, &[]),
        (Included("c"), Included("b"), &[]),
        (Included(""), Excluded("a"), &[]),
    ];
    for (start, end, want) in cases {
        let q = Query {
            partitions: parts(start, end),
            ..Query::all()
        };
        let found = all(s, &t, &q).await?;
        assert_eq!(partitions_of(&found), want, "partitions {start:?}..{end:?}");
        assert_eq!(found.len(), want.len() * 2, "both rows of each partition");
    }
    Ok(())
}

pub async fn row_range_within_one_partition(fx: &Fixture) -> TestResult {
    let s = fx.store();
    let t = grid(s, &["o", "p", "q"], &["a", "ab", "b", "ba", "c"]).await?;
    let cases: [(Bound<&str>, Bound<&str>, &[&str]); 8] = [
        (Included("ab"), Excluded("ba"), &["ab", "b"]),
        (Excluded("b"), Unbounded, &["ba", "c"]),
        (Unbounded, Included("ab"), &["a", "ab"]),
        (Included("b"), Excluded("c"), &["b", "ba"]), // prefix scan of "b"
        (Included("a"), Included("c"), &["a", "ab", "b", "ba", "c"]),
        (Excluded("a"), Excluded("ab"), &[]),
        (Included("bb"), Included("bz"), &[]),
        (Included("c"), Included("a"), &[]),
    ];
    for (start, end, want) in cases {
        let q = Query::partition(pk("p")).rows(rows(start, end));
        let found = all(s, &t, &q).await?;
        assert_eq!(partitions_of(&found).len(), usize::from(!want.is_empty()));
        assert_eq!(row_keys(&found), want, "rows {start:?}..{end:?}");
    }
    Ok(())
}

pub async fn row_range_across_partitions(fx: &Fixture) -> TestResult {
    let s = fx.store();
    let t = grid(s, &["p1", "p2", "p3"], &["a", "b", "c", "d"]).await?;
    let q = Query::all().rows(rows(Included("b"), Included("c")));
    let found = all(s, &t, &q).await?;
    let want = [
        ("p1", "b"),
        ("p1", "c"),
        ("p2", "b"),
        ("p2", "c"),
        ("p3", "b"),
        ("p3", "c"),
    ];
    assert_eq!(keys(&found), pairs(&want));
    let q = Query {
        partitions: parts(Excluded("p1"), Unbounded),
        ..Query::all()
    }
    .rows(rows(Excluded("c"), Unbounded));
    assert_eq!(
        keys(&all(s, &t, &q).await?),
        pairs(&[("p2", "d"), ("p3", "d")])
    );
    let q = Query::all().rows(rows(Unbounded, Excluded("b")));
    assert_eq!(
        keys(&all(s, &t, &q).await?),
        pairs(&[("p1", "a"), ("p2", "a"), ("p3", "a")])
    );
    Ok(())
}

pub async fn select_projects_named_properties(fx: &Fixture) -> TestResult {
    let s = fx.store();
    let t = table(s, "Wide").await?;
    let full = [
        entity("p", "1", &[("A", int(1)), ("B", int(2)), ("C", int(3))]),
        entity("p", "2", &[("B", int(20)), ("D", int(40))]),
        entity("p", "3", &[]),
    ];
    seed(s, &t, full.to_vec()).await?;
    let q = Query::all().select(["C", "A", "Nope", "D"]);
    let found = all(s, &t, &q).await?;
    let want = [
        entity("p", "1", &[("A", int(1)), ("C", int(3))]),
        entity("p", "2", &[("D", int(40))]),
        entity("p", "3", &[]),
    ];
    assert_eq!(
        found.iter().map(|e| e.entity.clone()).collect::<Vec<_>>(),
        want
    );
    // Projection leaves Timestamp and ETag as stored.
    for e in &found {
        let stored = must_get(s, &t, "p", e.row_key().as_str()).await?;
        assert_eq!((e.timestamp, &e.etag), (stored.timestamp, &stored.etag));
    }
    // Naming only missing properties returns every entity, bare.
    let found = all(s, &t, &Query::all().select(["Nope"])).await?;
    assert_eq!(row_keys(&found), ["1", "2", "3"]);
    assert!(found.iter().all(|e| e.entity.properties.is_empty()));
    // Projection applies after filtering: a filter may use an unselected property.
    let q = Query::all()
        .select(["A"])
        .filter(Filter::property("B", CmpOp::Eq, int(20)));
    let found = all(s, &t, &q).await?;
    assert_eq!(
        found.iter().map(|e| e.entity.clone()).collect::<Vec<_>>(),
        [entity("p", "2", &[])]
    );
    Ok(())
}

pub async fn select_empty_list_returns_bare_entities(fx: &Fixture) -> TestResult {
    let s = fx.store();
    let t = table(s, "Wide").await?;
    seed(
        s,
        &t,
        (0..5)
            .map(|i| entity("p", &i.to_string(), &[("A", int(i)), ("B", text("b"))]))
            .collect(),
    )
    .await?;
    let found = all(s, &t, &Query::all().select(Vec::<String>::new())).await?;
    assert_eq!(row_keys(&found), ["0", "1", "2", "3", "4"]);
    for e in &found {
        assert!(e.entity.properties.is_empty());
        assert_eq!(e.partition_key().as_str(), "p");
        assert_eq!(
            e.etag,
            must_get(s, &t, "p", e.row_key().as_str()).await?.etag
        );
    }
    // No select at all returns every property.
    let found = all(s, &t, &Query::all()).await?;
    assert!(found.iter().all(|e| e.entity.properties.len() == 2));
    Ok(())
}

pub async fn top_limits_page_size(fx: &Fixture) -> TestResult {
    let s = fx.store();
    let t = table(s, "Top").await?;
    seed(
        s,
        &t,
        (0..5)
            .map(|i| {
                entity(
                    "p",
                    &i.to_string(),
                    &[("Odd", EdmValue::Boolean(i % 2 == 1))],
                )
            })
            .collect(),
    )
    .await?;
    let q = Query::all().top(2);
    let first = s.query(&t, &q, None).await?;
    assert_eq!(row_keys(&first.entities), ["0", "1"]);
    let token = first.continuation.ok_or("top(2) of 5 must continue")?;
    let second = s.query(&t, &q, Some(&token)).await?;
    assert_eq!(row_keys(&second.entities), ["2", "3"]);
    let third = s.query(&t, &q, second.continuation.as_ref()).await?;
    assert_eq!(row_keys(&third.entities), ["4"]);
    assert_eq!(third.continuation, None);
    // `top` counts returned entities, not scanned ones.
    let q =
        Query::all()
            .top(2)
            .filter(Filter::property("Odd", CmpOp::Eq, EdmValue::Boolean(false)));
    let first = s.query(&t, &q, None).await?;
    assert_eq!(row_keys(&first.entities), ["0", "2"]);
    assert_eq!(row_keys(&all(s, &t, &q).await?), ["0", "2", "4"]);
    // A top of 1 over one entity is a single page.
    let page = s
        .query(
            &t,
            &Query::partition(pk("p"))
                .rows(KeyRange::exactly(rk("3")))
                .top(1),
            None,
        )
        .await?;
    assert_eq!(row_keys(&page.entities), ["3"]);
    Ok(())
}
