//! The six writes: success paths, missing and existing entities, ETags and
//! If-Match, Timestamps, and Merge versus Update semantics.

use std::collections::HashSet;

use tablesql::storage::{IfMatch, StorageError, WriteOp};

use super::*;

/// A table "Things" holding ("p", "r") with properties A=1, B="b"; returns its ETag.
async fn with_one(s: &dyn TableStore) -> TestResult<(TableName, ETag)> {
    let t = table(s, "Things").await?;
    let etag = insert(s, &t, entity("p", "r", &[("A", int(1)), ("B", text("b"))])).await?;
    Ok((t, etag))
}

fn delete(p: &str, r: &str, if_match: IfMatch) -> WriteOp {
    WriteOp::Delete {
        partition_key: pk(p),
        row_key: rk(r),
        if_match,
    }
}

/// Runs a write that must succeed and return an ETag.
async fn write(s: &dyn TableStore, t: &TableName, op: WriteOp) -> TestResult<ETag> {
    Ok(s.execute(t, op)
        .await?
        .etag
        .ok_or("write returned no ETag")?)
}

pub async fn insert_then_get(fx: &Fixture) -> TestResult {
    let s = fx.store();
    let (t, etag) = with_one(s).await?;
    let got = must_get(s, &t, "p", "r").await?;
    assert_eq!(
        got.entity,
        entity("p", "r", &[("A", int(1)), ("B", text("b"))])
    );
    assert_eq!(got.etag, etag);
    assert_eq!(get(s, &t, "p", "other").await?, None);
    assert_eq!(get(s, &t, "other", "r").await?, None);
    Ok(())
}

pub async fn insert_existing_is_already_exists(fx: &Fixture) -> TestResult {
    let s = fx.store();
    let (t, etag) = with_one(s).await?;
    let e = expect_err!(
        s.execute(&t, WriteOp::Insert(entity("p", "r", &[("A", int(2))])))
            .await,
        StorageError::EntityAlreadyExists { .. }
    );
    assert_matches!(e, StorageError::EntityAlreadyExists { partition_key, row_key }
        if partition_key == "p" && row_key == "r");
    let got = must_get(s, &t, "p", "r").await?;
    assert_eq!((got.get("A"), &got.etag), (Some(&int(1)), &etag));
    Ok(())
}

pub async fn update_replaces_all_properties(fx: &Fixture) -> TestResult {
    let s = fx.store();
    let (t, etag) = with_one(s).await?;
    let new = entity("p", "r", &[("C", text("c"))]);
    let etag2 = write(
        s,
        &t,
        WriteOp::Update(new.clone(), IfMatch::ETag(etag.clone())),
    )
    .await?;
    let got = must_get(s, &t, "p", "r").await?;
    assert_eq!(got.entity, new, "Update drops A and B");
    assert_eq!(got.etag, etag2);
    assert_ne!(etag2, etag);
    // Replacing with no properties at all leaves a bare entity.
    write(s, &t, WriteOp::Update(entity("p", "r", &[]), IfMatch::Any)).await?;
    assert!(
        must_get(s, &t, "p", "r")
            .await?
            .entity
            .properties
            .is_empty()
    );
    Ok(())
}

pub async fn update_missing_is_not_found(fx: &Fixture) -> TestResult {
    let s = fx.store();
    let (t, etag) = with_one(s).await?;
    for if_match in [IfMatch::Any, IfMatch::ETag(etag)] {
        let op = WriteOp::Update(entity("p", "nope", &[]), if_match);
        let e = expect_err!(s.execute(&t, op).await, StorageError::EntityNotFound { .. });
        assert_matches!(e, StorageError::EntityNotFound { partition_key, row_key }
            if partition_key == "p" && row_key == "nope");
    }
    assert_eq!(get(s, &t, "p", "nope").await?, None, "Update never inserts");
    assert_count(s, &t, 1).await
}

pub async fn update_with_stale_etag_fails(fx: &Fixture) -> TestResult {
    let s = fx.store();
    let (t, stale) = with_one(s).await?;
    let current = write(
        s,
        &t,
        WriteOp::Update(entity("p", "r", &[("A", int(2))]), IfMatch::Any),
    )
    .await?;
    let op = WriteOp::Update(entity("p", "r", &[("A", int(3))]), IfMatch::ETag(stale));
    expect_err!(s.execute(&t, op).await, StorageError::PreconditionFailed { partition_key, row_key }
        if partition_key == "p" && row_key == "r");
    let got = must_get(s, &t, "p", "r").await?;
    assert_eq!((got.get("A"), &got.etag), (Some(&int(2)), &current));
    // The current ETag works.
    write(
        s,
        &t,
        WriteOp::Update(entity("p", "r", &[("A", int(4))]), IfMatch::ETag(current)),
    )
    .await?;
    assert_eq!(must_get(s, &t, "p", "r").await?.get("A"), Some(&int(4)));
    Ok(())
}

pub async fn merge_keeps_other_properties(fx: &Fixture) -> TestResult {
    let s = fx.store();
    let (t, etag) = with_one(s).await?;
    let op = WriteOp::Merge(
        entity("p", "r", &[("B", text("B2")), ("C", int(3))]),
        IfMatch::ETag(etag.clone()),
    );
    let etag2 = write(s, &t, op).await?;
    let got = must_get(s, &t, "p", "r").await?;
    assert_eq!(
        got.entity,
        entity("p", "r", &[("A", int(1)), ("B", text("B2")), ("C", int(3))])
    );
    assert_eq!(got.etag, etag2);
    assert_ne!(etag2, etag);
    // A merge with no properties changes only the version.
    let etag3 = write(s, &t, WriteOp::Merge(entity("p", "r", &[]), IfMatch::Any)).await?;
    let got = must_get(s, &t, "p", "r").await?;
    assert_eq!(got.entity.properties.len(), 3);
    assert_eq!(got.etag, etag3);
    assert_ne!(etag3, etag2);
    Ok(())
}

pub async fn merge_missing_is_not_found(fx: &Fixture) -> TestResult {
    let s = fx.store();
    let (t, etag) = with_one(s).await?;
    for if_match in [IfMatch::Any, IfMatch::ETag(etag)] {
        let op = WriteOp::Merge(entity("q", "r", &[("A", int(9))]), if_match);
        expect_err!(s.execute(&t, op).await, StorageError::EntityNotFound { partition_key, row_key }
            if partition_key == "q" && row_key == "r");
    }
    assert_eq!(get(s, &t, "q", "r").await?, None, "Merge never inserts");
    Ok(())
}

pub async fn merge_with_stale_etag_fails(fx: &Fixture) -> TestResult {
    let s = fx.store();
    let (t, stale) = with_one(s).await?;
    let current = write(
        s,
        &t,
        WriteOp::Merge(entity("p", "r", &[("A", int(2))]), IfMatch::Any),
    )
    .await?;
    let op = WriteOp::Merge(entity("p", "r", &[("Z", int(0))]), IfMatch::ETag(stale));
    expect_err!(
        s.execute(&t, op).await,
        StorageError::PreconditionFailed { .. }
    );
    let got = must_get(s, &t, "p", "r").await?;
    assert_eq!(got.get("Z"), None);
    assert_eq!((got.get("A"), &got.etag), (Some(&int(2)), &current));
    Ok(())
}

pub async fn merge_can_change_a_property_type(fx: &Fixture) -> TestResult {
    let s = fx.store();
    let (t, _) = with_one(s).await?;
    write(
        s,
        &t,
        WriteOp::Merge(entity("p", "r", &[("A", text("one"))]), IfMatch::Any),
    )
    .await?;
    let got = must_get(s, &t, "p", "r").await?;
    assert_eq!(
        got.entity,
        entity("p", "r", &[("A", text("one")), ("B", text("b"))])
    );
    Ok(())
}

pub async fn delete_removes_entity(fx: &Fixture) -> TestResult {
    let s = fx.store();
    let (t, etag) = with_one(s).await?;
    insert(s, &t, entity("p", "r2", &[])).await?;
    let out = s.execute(&t, delete("p", "r", IfMatch::ETag(etag))).await?;
    assert_eq!(out.etag, None, "a delete returns no ETag");
    assert_eq!(get(s, &t, "p", "r").await?, None);
    s.execute(&t, delete("p", "r2", IfMatch::Any)).await?;
    assert_count(s, &t, 0).await?;
    // The key can be inserted again.
    insert(s, &t, entity("p", "r", &[("New", int(1))])).await?;
    assert_eq!(must_get(s, &t, "p", "r").await?.entity.properties.len(), 1);
    Ok(())
}

pub async fn delete_missing_is_not_found(fx: &Fixture) -> TestResult {
    let s = fx.store();
    let (t, etag) = with_one(s).await?;
    expect_err!(s.execute(&t, delete("p", "x", IfMatch::Any)).await,
        StorageError::EntityNotFound { partition_key, row_key } if partition_key == "p" && row_key == "x");
    s.execute(&t, delete("p", "r", IfMatch::Any)).await?;
    expect_err!(
        s.execute(&t, delete("p", "r", IfMatch::ETag(etag))).await,
        StorageError::EntityNotFound { .. }
    );
    expect_err!(
        s.execute(&t, delete("p", "r", IfMatch::Any)).await,
        StorageError::EntityNotFound { .. }
    );
    Ok(())
}

pub async fn delete_with_stale_etag_fails(fx: &Fixture) -> TestResult {
    let s = fx.store();
    let (t, stale) = with_one(s).await?;
    let current = write(s, &t, WriteOp::InsertOrMerge(entity("p", "r", &[]))).await?;
    expect_err!(
        s.execute(&t, delete("p", "r", IfMatch::ETag(stale))).await,
        StorageError::PreconditionFailed { .. }
    );
    assert_eq!(
        must_get(s, &t, "p", "r").await?.etag,
        current,
        "still there, unchanged"
    );
    s.execute(&t, delete("p", "r", IfMatch::ETag(current)))
        .await?;
    assert_eq!(get(s, &t, "p", "r").await?, None);
    Ok(())
}

pub async fn insert_or_replace_inserts_then_replaces(fx: &Fixture) -> TestResult {
    let s = fx.store();
    let t = table(s, "Upserts").await?;
    let first = entity("p", "r", &[("A", int(1)), ("B", int(2))]);
    let etag1 = write(s, &t, WriteOp::InsertOrReplace(first.clone())).await?;
    let got = must_get(s, &t, "p", "r").await?;
    assert_eq!((&got.entity, &got.etag), (&first, &etag1));
    let second = entity("p", "r", &[("C", int(3))]);
    let etag2 = write(s, &t, WriteOp::InsertOrReplace(second.clone())).await?;
    let got = must_get(s, &t, "p", "r").await?;
    assert_eq!(
        (&got.entity, &got.etag),
        (&second, &etag2),
        "A and B are gone"
    );
    assert_ne!(etag1, etag2);
    assert_count(s, &t, 1).await
}

pub async fn insert_or_merge_inserts_then_merges(fx: &Fixture) -> TestResult {
    let s = fx.store();
    let t = table(s, "Upserts").await?;
    let first = entity("p", "r", &[("A", int(1)), ("B", int(2))]);
    let etag1 = write(s, &t, WriteOp::InsertOrMerge(first.clone())).await?;
    let got = must_get(s, &t, "p", "r").await?;
    assert_eq!(
        (&got.entity, &got.etag),
        (&first, &etag1),
        "InsertOrMerge on a missing entity inserts"
    );
    let etag2 = write(
        s,
        &t,
        WriteOp::InsertOrMerge(entity("p", "r", &[("B", int(20)), ("C", int(3))])),
    )
    .await?;
    let got = must_get(s, &t, "p", "r").await?;
    assert_eq!(
        got.entity,
        entity("p", "r", &[("A", int(1)), ("B", int(20)), ("C", int(3))])
    );
    assert_eq!(got.etag, etag2);
    assert_ne!(etag1, etag2);
    Ok(())
}

pub async fn every_write_returns_a_new_etag_that_is_stored(fx: &Fixture) -> TestResult {
    let s = fx.store();
    let (t, first) = with_one(s).await?;
    let mut seen = HashSet::from([first.to_string()]);
    let mut current = first;
    for round in 0..3 {
        let ops = [
            WriteOp::Update(
                entity("p", "r", &[("A", int(round))]),
                IfMatch::ETag(current.clone()),
            ),
            WriteOp::Merge(entity("p", "r", &[("B", int(round))]), IfMatch::Any),
            WriteOp::InsertOrReplace(entity("p", "r", &[("C", int(round))])),
            WriteOp::InsertOrMerge(entity("p", "r", &[("D", int(round))])),
        ];
        for op in ops {
            let etag = write(s, &t, op).await?;
            assert!(
                seen.insert(etag.to_string()),
                "ETag {etag} was given out before"
            );
            assert_eq!(
                must_get(s, &t, "p", "r").await?.etag,
                etag,
                "stored ETag is the returned one"
            );
            current = etag;
        }
    }
    assert_eq!(seen.len(), 13);
    Ok(())
}

pub async fn timestamp_increases_on_every_write(fx: &Fixture) -> TestResult {
    let s = fx.store();
    let t = table(s, "Stamps").await?;
    let ops = [
        WriteOp::Insert(entity("p", "r", &[])),
        WriteOp::Update(entity("p", "r", &[]), IfMatch::Any),
        WriteOp::Merge(entity("p", "r", &[]), IfMatch::Any),
        WriteOp::InsertOrReplace(entity("p", "r", &[])),
        WriteOp::InsertOrMerge(entity("p", "r", &[])),
        WriteOp::InsertOrMerge(entity("p", "r", &[])),
    ];
    let mut last = None;
    for op in ops {
        s.execute(&t, op).await?;
        let stamp = must_get(s, &t, "p", "r").await?.timestamp;
        if let Some(prev) = last {
            assert!(stamp > prev, "{stamp} is not after {prev}");
        }
        last = Some(stamp);
    }
    // Writes to other entities advance the clock too.
    insert(s, &t, entity("p", "other", &[])).await?;
    assert!(must_get(s, &t, "p", "other").await?.timestamp > last.ok_or("no writes")?);
    Ok(())
}

pub async fn if_match_any_ignores_version(fx: &Fixture) -> TestResult {
    let s = fx.store();
    let (t, _) = with_one(s).await?;
    for round in 0..3 {
        write(
            s,
            &t,
            WriteOp::Update(entity("p", "r", &[("A", int(round))]), IfMatch::Any),
        )
        .await?;
        write(
            s,
            &t,
            WriteOp::Merge(entity("p", "r", &[("M", int(round))]), IfMatch::Any),
        )
        .await?;
    }
    let got = must_get(s, &t, "p", "r").await?;
    assert_eq!(
        got.entity,
        entity("p", "r", &[("A", int(2)), ("M", int(2))])
    );
    s.execute(&t, delete("p", "r", IfMatch::Any)).await?;
    assert_eq!(get(s, &t, "p", "r").await?, None);
    Ok(())
}

pub async fn entities_are_schemaless(fx: &Fixture) -> TestResult {
    let s = fx.store();
    let t = table(s, "Mixed").await?;
    let a = entity("p", "a", &[("X", int(1))]);
    let b = entity(
        "p",
        "b",
        &[("X", text("one")), ("Y", EdmValue::Boolean(true))],
    );
    let c = entity("p", "c", &[]);
    for e in [&a, &b, &c] {
        insert(s, &t, e.clone()).await?;
    }
    let got: Vec<Entity> = all(s, &t, &Query::all())
        .await?
        .into_iter()
        .map(|e| e.entity)
        .collect();
    assert_eq!(got, vec![a, b, c]);
    Ok(())
}
