//! Entity group transactions: all or nothing, the failing operation's index,
//! the limits of a batch, and outcomes.

use tablesql::storage::entity::MAX_ENTITY_BYTES;
use tablesql::storage::write::MAX_BATCH_BYTES;
use tablesql::storage::{IfMatch, InvalidInput, StorageError, WriteOp};

use super::*;

fn ins(p: &str, r: &str) -> WriteOp {
    WriteOp::Insert(entity(p, r, &[("V", int(1))]))
}

fn delete(p: &str, r: &str, if_match: IfMatch) -> WriteOp {
    WriteOp::Delete {
        partition_key: pk(p),
        row_key: rk(r),
        if_match,
    }
}

/// Every entity of a table, with its ETag, for before/after comparisons.
async fn snapshot(s: &dyn TableStore, t: &TableName) -> TestResult<Vec<(Entity, ETag)>> {
    Ok(all(s, t, &Query::all())
        .await?
        .into_iter()
        .map(|e| (e.entity, e.etag))
        .collect())
}

pub async fn failing_op_rolls_back_whole_batch(fx: &Fixture) -> TestResult {
    let s = fx.store();
    let t = table(s, "Batch").await?;
    seed(
        s,
        &t,
        vec![
            entity("p", "x", &[("A", int(1))]),
            entity("p", "y", &[("A", int(1))]),
        ],
    )
    .await?;
    let before = snapshot(s, &t).await?;
    let ops = vec![
        ins("p", "a"),
        WriteOp::InsertOrReplace(entity("p", "b", &[])),
        WriteOp::Merge(entity("p", "x", &[("A", int(2))]), IfMatch::Any),
        ins("p", "y"), // exists: fails
        ins("p", "c"),
    ];
    let e = expect_err!(
        s.execute_batch(&t, ops).await,
        StorageError::Batch { index: 3, .. }
    );
    assert_matches!(e.root(), StorageError::EntityAlreadyExists { partition_key, row_key }
        if partition_key == "p" && row_key == "y");
    assert_eq!(
        snapshot(s, &t).await?,
        before,
        "no operation of the batch was applied"
    );
    for r in ["a", "b", "c"] {
        assert_eq!(get(s, &t, "p", r).await?, None);
    }
    Ok(())
}

pub async fn failure_at_first_and_last_index(fx: &Fixture) -> TestResult {
    let s = fx.store();
    let t = table(s, "Batch").await?;
    let first = vec![
        WriteOp::Update(entity("p", "missing", &[]), IfMatch::Any),
        ins("p", "a"),
    ];
    let e = expect_err!(
        s.execute_batch(&t, first).await,
        StorageError::Batch { index: 0, .. }
    );
    assert_matches!(e.root(), StorageError::EntityNotFound { row_key, .. } if row_key == "missing");
    let mut last: Vec<WriteOp> = (0..99).map(|i| ins("p", &format!("{i:02}"))).collect();
    last.push(delete("p", "missing", IfMatch::Any));
    let e = expect_err!(
        s.execute_batch(&t, last).await,
        StorageError::Batch { index: 99, .. }
    );
    assert_matches!(e.root(), StorageError::EntityNotFound { .. });
    assert_count(s, &t, 0).await
}

pub async fn hundred_ops_ok_hundred_and_one_too_many(fx: &Fixture) -> TestResult {
    let s = fx.store();
    let t = table(s, "Batch").await?;
    let ops = |n: usize| {
        (0..n)
            .map(|i| ins("p", &format!("{i:03}")))
            .collect::<Vec<_>>()
    };
    expect_err!(
        s.execute_batch(&t, ops(101)).await,
        StorageError::Invalid(InvalidInput::TooManyOperations { count: 101 })
    );
    assert_count(s, &t, 0).await?;
    let outcomes = s.execute_batch(&t, ops(100)).await?;
    assert_eq!(outcomes.len(), 100);
    assert_count(s, &t, 100).await
}

pub async fn empty_batch_is_rejected(fx: &Fixture) -> TestResult {
    let s = fx.store();
    let t = table(s, "Batch").await?;
    expect_err!(
        s.execute_batch(&t, vec![]).await,
        StorageError::Invalid(InvalidInput::EmptyBatch)
    );
    assert_count(s, &t, 0).await
}

pub async fn cross_partition_batch_is_rejected(fx: &Fixture) -> TestResult {
    let s = fx.store();
    let t = table(s, "Batch").await?;
    let ops = vec![ins("p", "a"), ins("p", "b"), ins("q", "c"), ins("p", "d")];
    let e = expect_err!(
        s.execute_batch(&t, ops).await,
        StorageError::Batch { index: 2, .. }
    );
    assert_matches!(e.root(), StorageError::Invalid(InvalidInput::CrossPartition { expected, found })
        if expected == "p" && found == "q");
    // Keys that differ only in case are different partitions.
    let e = expect_err!(
        s.execute_batch(&t, vec![ins("p", "a"), ins("P", "a")])
            .await,
        StorageError::Batch { index: 1, .. }
    );
    assert_matches!(
        e.root(),
        StorageError::Invalid(InvalidInput::CrossPartition { .. })
    );
    assert_count(s, &t, 0).await
}

pub async fn duplicate_row_in_batch_is_rejected(fx: &Fixture) -> TestResult {
    let s = fx.store();
    let t = table(s, "Batch").await?;
    let ops = vec![
        ins("p", "a"),
        ins("p", "b"),
        WriteOp::Merge(entity("p", "a", &[]), IfMatch::Any),
    ];
    let e = expect_err!(
        s.execute_batch(&t, ops).await,
        StorageError::Batch { index: 2, .. }
    );
    assert_matches!(e.root(), StorageError::Invalid(InvalidInput::DuplicateRow { row_key }) if row_key == "a");
    let ops = vec![delete("p", "a", IfMatch::Any), ins("p", "a")];
    let e = expect_err!(
        s.execute_batch(&t, ops).await,
        StorageError::Batch { index: 1, .. }
    );
    assert_matches!(
        e.root(),
        StorageError::Invalid(InvalidInput::DuplicateRow { .. })
    );
    assert_count(s, &t, 0).await
}

pub async fn invalid_entity_in_batch_names_its_index(fx: &Fixture) -> TestResult {
    let s = fx.store();
    let t = table(s, "Batch").await?;
    let ops = vec![
        ins("p", "a"),
        ins("p", "b"),
        WriteOp::InsertOrMerge(entity(
            "p",
            "c",
            &[("Big", EdmValue::Binary(vec![0; 65_537]))],
        )),
    ];
    let e = expect_err!(
        s.execute_batch(&t, ops).await,
        StorageError::Batch { index: 2, .. }
    );
    assert_matches!(e.root(), StorageError::Invalid(InvalidInput::ValueTooLarge { name, bytes: 65_537 }) if name == "Big");
    let ops = vec![
        ins("p", "a"),
        WriteOp::Update(entity("p", "b", &[("RowKey", text("x"))]), IfMatch::Any),
    ];
    let e = expect_err!(
        s.execute_batch(&t, ops).await,
        StorageError::Batch { index: 1, .. }
    );
    assert_matches!(e.root(), StorageError::Invalid(InvalidInput::SystemProperty { name }) if name == "RowKey");
    // A single write reports the plain error, without the batch wrapper.
    let op = WriteOp::Insert(entity("p", "d", &[("1x", int(1))]));
    expect_err!(s.execute(&t, op).await, StorageError::Invalid(InvalidInput::PropertyName { name, .. }) if name == "1x");
    assert_count(s, &t, 0).await
}

pub async fn batch_over_4_mib_is_rejected(fx: &Fixture) -> TestResult {
    let s = fx.store();
    let t = table(s, "Batch").await?;
    // 100 entities of about 42 KB each: every one fine, together over 4 MiB.
    let ops: Vec<WriteOp> = (0..100)
        .map(|i| WriteOp::Insert(entity_of_size("p", &format!("{i:03}"), 42_000)))
        .collect();
    let bytes: usize = ops.iter().map(WriteOp::stored_size).sum();
    assert_eq!(bytes, 4_200_000);
    assert!(bytes > MAX_BATCH_BYTES);
    expect_err!(s.execute_batch(&t, ops).await, StorageError::Invalid(InvalidInput::BatchTooLarge { bytes: b }) if *b == bytes);
    assert_count(s, &t, 0).await
}

pub async fn batch_just_under_4_mib_is_accepted(fx: &Fixture) -> TestResult {
    let s = fx.store();
    let t = table(s, "Batch").await?;
    // Four entities of exactly 1 MiB: exactly 4 MiB, the largest batch allowed.
    let ops = || {
        (0..4)
            .map(|i| WriteOp::Insert(entity_of_size("p", &i.to_string(), MAX_ENTITY_BYTES)))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        ops().iter().map(WriteOp::stored_size).sum::<usize>(),
        MAX_BATCH_BYTES
    );
    // One small operation more tips it over.
    let mut over = ops();
    over.push(delete("p", "x", IfMatch::Any));
    let bytes = MAX_BATCH_BYTES + over[4].stored_size();
    expect_err!(s.execute_batch(&t, over).await, StorageError::Invalid(InvalidInput::BatchTooLarge { bytes: b }) if *b == bytes);
    assert_count(s, &t, 0).await?;
    assert_eq!(s.execute_batch(&t, ops()).await?.len(), 4);
    assert_count(s, &t, 4).await?;
    let got = must_get(s, &t, "p", "3").await?;
    assert_eq!(got.entity.stored_size(), MAX_ENTITY_BYTES);
    Ok(())
}

pub async fn stale_etag_in_batch_changes_nothing(fx: &Fixture) -> TestResult {
    let s = fx.store();
    let t = table(s, "Batch").await?;
    seed(
        s,
        &t,
        ["a", "b", "c"]
            .map(|r| entity("p", r, &[("V", int(0))]))
            .to_vec(),
    )
    .await?;
    let stale = must_get(s, &t, "p", "c").await?.etag;
    s.execute(
        &t,
        WriteOp::Merge(entity("p", "c", &[("W", int(0))]), IfMatch::Any),
    )
    .await?;
    let current_b = must_get(s, &t, "p", "b").await?.etag;
    let before = snapshot(s, &t).await?;
    let ops = vec![
        WriteOp::Merge(entity("p", "a", &[("V", int(1))]), IfMatch::Any),
        WriteOp::Update(entity("p", "b", &[("V", int(1))]), IfMatch::ETag(current_b)),
        WriteOp::Update(entity("p", "c", &[("V", int(1))]), IfMatch::ETag(stale)),
        WriteOp::InsertOrReplace(entity("p", "d", &[("V", int(1))])),
    ];
    let e = expect_err!(
        s.execute_batch(&t, ops).await,
        StorageError::Batch { index: 2, .. }
    );
    assert_matches!(e.root(), StorageError::PreconditionFailed { partition_key, row_key }
        if partition_key == "p" && row_key == "c");
    assert_eq!(snapshot(s, &t).await?, before);
    assert_eq!(get(s, &t, "p", "d").await?, None);
    Ok(())
}

pub async fn batch_mixing_all_six_kinds(fx: &Fixture) -> TestResult {
    let s = fx.store();
    let t = table(s, "Batch").await?;
    let old = |r: &str| entity("p", r, &[("Old", int(0)), ("V", int(0))]);
    seed(s, &t, ["upd", "mrg", "del", "rep", "om"].map(old).to_vec()).await?;
    let del_etag = must_get(s, &t, "p", "del").await?.etag;
    let ops = vec![
        WriteOp::Insert(entity("p", "new", &[("V", int(1))])),
        WriteOp::Update(entity("p", "upd", &[("V", int(2))]), IfMatch::Any),
        WriteOp::Merge(entity("p", "mrg", &[("V", int(3))]), IfMatch::Any),
        delete("p", "del", IfMatch::ETag(del_etag)),
        WriteOp::InsertOrReplace(entity("p", "rep", &[("V", int(5))])),
        WriteOp::InsertOrMerge(entity("p", "om", &[("V", int(6))])),
        WriteOp::InsertOrReplace(entity("p", "rep2", &[("V", int(7))])),
        WriteOp::InsertOrMerge(entity("p", "om2", &[("V", int(8))])),
    ];
    let outcomes = s.execute_batch(&t, ops).await?;
    assert_eq!(outcomes.len(), 8);
    let got: Vec<Entity> = all(s, &t, &Query::all())
        .await?
        .into_iter()
        .map(|e| e.entity)
        .collect();
    let want = vec![
        entity("p", "mrg", &[("Old", int(0)), ("V", int(3))]),
        entity("p", "new", &[("V", int(1))]),
        entity("p", "om", &[("Old", int(0)), ("V", int(6))]),
        entity("p", "om2", &[("V", int(8))]),
        entity("p", "rep", &[("V", int(5))]),
        entity("p", "rep2", &[("V", int(7))]),
        entity("p", "upd", &[("V", int(2))]),
    ];
    assert_eq!(got, want);
    Ok(())
}

pub async fn batch_outcomes_have_one_etag_per_op(fx: &Fixture) -> TestResult {
    let s = fx.store();
    let t = table(s, "Batch").await?;
    seed(s, &t, vec![entity("p", "b", &[]), entity("p", "d", &[])]).await?;
    let rows = ["a", "b", "c", "d", "e"];
    let ops = vec![
        ins("p", "a"),
        WriteOp::Merge(entity("p", "b", &[("V", int(1))]), IfMatch::Any),
        WriteOp::InsertOrMerge(entity("p", "c", &[])),
        delete("p", "d", IfMatch::Any),
        WriteOp::InsertOrReplace(entity("p", "e", &[])),
    ];
    let outcomes = s.execute_batch(&t, ops).await?;
    assert_eq!(outcomes.len(), rows.len());
    for (r, outcome) in rows.iter().zip(&outcomes) {
        match get(s, &t, "p", r).await? {
            Some(stored) => assert_eq!(outcome.etag.as_ref(), Some(&stored.etag), "row {r}"),
            None => assert_eq!(
                (*r, &outcome.etag),
                ("d", &None),
                "only the delete has no ETag"
            ),
        }
    }
    Ok(())
}

pub async fn batch_stamps_follow_earlier_writes(fx: &Fixture) -> TestResult {
    let s = fx.store();
    let t = table(s, "Batch").await?;
    insert(s, &t, entity("p", "before", &[])).await?;
    let before = must_get(s, &t, "p", "before").await?;
    s.execute_batch(
        &t,
        vec![
            ins("p", "x"),
            ins("p", "y"),
            WriteOp::Merge(entity("p", "before", &[]), IfMatch::Any),
        ],
    )
    .await?;
    let batch = all(s, &t, &Query::all()).await?;
    for e in &batch {
        assert!(
            e.timestamp > before.timestamp,
            "{} not after {}",
            e.timestamp,
            before.timestamp
        );
        assert_ne!(e.etag, before.etag);
    }
    insert(s, &t, entity("p", "z", &[])).await?;
    let after = must_get(s, &t, "p", "z").await?;
    assert!(batch.iter().all(|e| after.timestamp > e.timestamp));
    Ok(())
}
