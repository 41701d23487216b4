//! Partition listing: the distinct PartitionKeys of a table within a range,
//! page by page, never a partition whose entities were all deleted.

use std::ops::Bound::{Excluded, Included, Unbounded};

use tablesql::storage::{PartitionPage, StorageError};

use super::*;

/// Every PartitionKey the listing gives, following its pages; the requests it
/// took as well. Checks that pages ascend and that each page starts after the
/// previous one's `after`.
async fn list(
    s: &dyn TableStore,
    t: &TableName,
    r: &KeyRange<PartitionKey>,
) -> TestResult<(Vec<String>, usize)> {
    let mut out: Vec<PartitionKey> = Vec::new();
    let mut requests = 0;
    let mut after: Option<PartitionKey> = None;
    for _ in 0..10_000 {
        let PartitionPage {
            partitions,
            after: next,
            requests: n,
        } = s.partitions(t, r, after.as_ref()).await?;
        assert!(n >= 1, "a page costs at least one request");
        requests += n;
        for p in partitions {
            assert!(
                after.as_ref().is_none_or(|a| p > *a),
                "{p:?} came out of order"
            );
            assert!(
                out.last().is_none_or(|l| p > *l),
                "{p:?} came twice or out of order"
            );
            out.push(p);
        }
        match next {
            None => {
                return Ok((
                    out.iter().map(|p| p.as_str().to_owned()).collect(),
                    requests,
                ));
            }
            Some(n) => after = Some(n),
        }
    }
    Err("the partition listing never ends".into())
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| (*s).to_owned()).collect()
}

pub async fn partitions_are_listed_once_in_key_order(fx: &Fixture) -> TestResult {
    let s = fx.store();
    let t = table(s, "parts").await?;
    assert_eq!(list(s, &t, &KeyRange::all()).await?.0, Vec::<String>::new());
    // A partition with many rows is still listed once, and cheaply.
    let big: Vec<Entity> = (0..250)
        .map(|i| entity("b", &format!("{i:04}"), &[]))
        .collect();
    seed(s, &t, big).await?;
    seed_keys(
        s,
        &t,
        &[("a", "1"), ("a", "2"), ("c", "1"), ("", "x"), ("b0", "1")],
    )
    .await?;
    let (all, requests) = list(s, &t, &KeyRange::all()).await?;
    assert_eq!(all, strings(&["", "a", "b", "b0", "c"]));
    assert!(
        requests <= all.len() + 1,
        "{requests} requests for {} partitions",
        all.len()
    );
    Ok(())
}

pub async fn partition_listing_keeps_to_its_range(fx: &Fixture) -> TestResult {
    let s = fx.store();
    let t = table(s, "partrange").await?;
    seed_keys(
        s,
        &t,
        &[("a", "1"), ("b", "1"), ("b", "2"), ("c", "1"), ("d", "1")],
    )
    .await?;
    let cases: [(_, _, &[&str]); 5] = [
        (Included("b"), Included("c"), &["b", "c"]),
        (Excluded("b"), Unbounded, &["c", "d"]),
        (Unbounded, Excluded("c"), &["a", "b"]),
        (Included("bb"), Excluded("d"), &["c"]),
        (Excluded("d"), Unbounded, &[]),
    ];
    for (start, end, want) in cases {
        let r = range(start, end, pk);
        assert_eq!(list(s, &t, &r).await?.0, strings(want), "range {r:?}");
    }
    // Resuming after a key lists only what follows it, inside the range.
    let page = s.partitions(&t, &KeyRange::all(), Some(&pk("b"))).await?;
    assert!(page.partitions.first().is_some_and(|p| p.as_str() == "c"));
    let page = s
        .partitions(&t, &range(Included("c"), Unbounded, pk), Some(&pk("a")))
        .await?;
    assert!(page.partitions.first().is_some_and(|p| p.as_str() == "c"));
    Ok(())
}

pub async fn emptied_partitions_are_not_listed(fx: &Fixture) -> TestResult {
    let s = fx.store();
    let t = table(s, "partempty").await?;
    seed_keys(s, &t, &[("a", "1"), ("b", "1"), ("b", "2"), ("c", "1")]).await?;
    for r in ["1", "2"] {
        s.execute(
            &t,
            WriteOp::Delete {
                partition_key: pk("b"),
                row_key: rk(r),
                if_match: tablesql::storage::IfMatch::Any,
            },
        )
        .await?;
    }
    assert_eq!(list(s, &t, &KeyRange::all()).await?.0, strings(&["a", "c"]));
    s.execute(
        &t,
        WriteOp::Delete {
            partition_key: pk("c"),
            row_key: rk("1"),
            if_match: tablesql::storage::IfMatch::Any,
        },
    )
    .await?;
    assert_eq!(list(s, &t, &KeyRange::all()).await?.0, strings(&["a"]));
    Ok(())
}

pub async fn many_partitions_page_in_order(fx: &Fixture) -> TestResult {
    let s = fx.store();
    let t = table(s, "partmany").await?;
    let names: Vec<String> = (0..40).map(|i| format!("p{i:03}")).collect();
    let keys: Vec<(&str, &str)> = names.iter().map(|n| (n.as_str(), "r")).collect();
    seed_keys(s, &t, &keys).await?;
    assert_eq!(list(s, &t, &KeyRange::all()).await?.0, names);
    Ok(())
}

pub async fn listing_a_missing_table_is_not_found(fx: &Fixture) -> TestResult {
    let s = fx.store();
    let missing = tn("nopartitions");
    let e = s.partitions(&missing, &KeyRange::all(), None).await;
    expect_err!(e, StorageError::TableNotFound(_));
    Ok(())
}
