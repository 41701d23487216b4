//! Tables: create, list, delete, case-insensitive names, and every operation on a
//! table that does not exist.

use tablesql::storage::{IfMatch, InvalidInput, Query, StorageError, TableName, WriteOp};

use super::*;

pub async fn create_then_list_keeps_names_as_created(fx: &Fixture) -> TestResult {
    let s = fx.store();
    assert!(s.list_tables().await?.is_empty());
    for name in ["Zeta", "alpha", "Races", "bIrDs"] {
        table(s, name).await?;
    }
    let names = table_names(s).await?;
    // Names as created, in case-insensitive order.
    assert_eq!(names, ["alpha", "bIrDs", "Races", "Zeta"]);
    Ok(())
}

pub async fn names_are_unique_ignoring_case(fx: &Fixture) -> TestResult {
    let s = fx.store();
    let races = table(s, "Races").await?;
    insert(s, &races, entity("p", "r", &[])).await?;
    for again in ["races", "RACES", "Races"] {
        expect_err!(
            s.create_table(&tn(again)).await,
            StorageError::TableAlreadyExists(_)
        );
    }
    let names = table_names(s).await?;
    assert_eq!(names, ["Races"]);
    // The failed creates left the existing table and its entity alone.
    assert_count(s, &races, 1).await
}

pub async fn names_resolve_ignoring_case(fx: &Fixture) -> TestResult {
    let s = fx.store();
    table(s, "Races").await?;
    insert(s, &tn("RACES"), entity("p", "r", &[("N", int(1))])).await?;
    let found = must_get(s, &tn("races"), "p", "r").await?;
    assert_eq!(found.get("N"), Some(&int(1)));
    assert_eq!(all(s, &tn("rAcEs"), &Query::all()).await?.len(), 1);
    s.delete_table(&tn("RaCeS")).await?;
    assert!(s.list_tables().await?.is_empty());
    Ok(())
}

pub async fn delete_table_removes_it(fx: &Fixture) -> TestResult {
    let s = fx.store();
    let keep = table(s, "Keep").await?;
    let gone = table(s, "Gone").await?;
    s.delete_table(&gone).await?;
    assert_eq!(s.list_tables().await?, vec![keep]);
    expect_err!(
        s.get(&gone, &pk("p"), &rk("r")).await,
        StorageError::TableNotFound(_)
    );
    Ok(())
}

pub async fn delete_missing_table_is_not_found(fx: &Fixture) -> TestResult {
    let s = fx.store();
    expect_err!(
        s.delete_table(&tn("Nothing")).await,
        StorageError::TableNotFound(_)
    );
    let t = table(s, "Once").await?;
    s.delete_table(&t).await?;
    expect_err!(s.delete_table(&t).await, StorageError::TableNotFound(_));
    Ok(())
}

pub async fn recreated_table_is_empty(fx: &Fixture) -> TestResult {
    let s = fx.store();
    let t = table(s, "Cycle").await?;
    seed(
        s,
        &t,
        (0..150)
            .map(|i| entity("p", &format!("{i:03}"), &[("I", int(i))]))
            .collect(),
    )
    .await?;
    assert_count(s, &t, 150).await?;
    s.delete_table(&t).await?;
    // Recreate under another case: same table identity, no entities.
    let t = table(s, "CYCLE").await?;
    assert_count(s, &t, 0).await?;
    assert_eq!(get(s, &t, "p", "000").await?, None);
    let page = s.query(&t, &Query::all(), None).await?;
    assert!(page.entities.is_empty() && page.continuation.is_none());
    // The old keys are free again.
    insert(s, &t, entity("p", "000", &[])).await?;
    assert_count(s, &t, 1).await
}

pub async fn reads_of_missing_table_are_not_found(fx: &Fixture) -> TestResult {
    let s = fx.store();
    let t = tn("Missing");
    expect_err!(
        s.get(&t, &pk("p"), &rk("r")).await,
        StorageError::TableNotFound(_)
    );
    expect_err!(
        s.query(&t, &Query::all(), None).await,
        StorageError::TableNotFound(_)
    );
    expect_err!(
        s.query(&t, &Query::partition(pk("p")), None).await,
        StorageError::TableNotFound(_)
    );
    expect_err!(
        s.query_all(&t, &Query::all()).await,
        StorageError::TableNotFound(_)
    );
    expect_err!(s.count(&t).await, StorageError::TableNotFound(_));
    Ok(())
}

pub async fn writes_to_missing_table_are_not_found(fx: &Fixture) -> TestResult {
    let s = fx.store();
    let t = tn("Missing");
    let e = || entity("p", "r", &[("N", int(1))]);
    let ops = [
        WriteOp::Insert(e()),
        WriteOp::Update(e(), IfMatch::Any),
        WriteOp::Merge(e(), IfMatch::Any),
        WriteOp::Delete {
            partition_key: pk("p"),
            row_key: rk("r"),
            if_match: IfMatch::Any,
        },
        WriteOp::InsertOrReplace(e()),
        WriteOp::InsertOrMerge(e()),
    ];
    for op in ops {
        expect_err!(
            s.execute(&t, op.clone()).await,
            StorageError::TableNotFound(_)
        );
        expect_err!(
            s.execute_batch(&t, vec![op]).await,
            StorageError::TableNotFound(_)
        );
    }
    // None of them created the table.
    assert!(s.list_tables().await?.is_empty());
    Ok(())
}

pub async fn table_name_rules(fx: &Fixture) -> TestResult {
    let s = fx.store();
    let (long, longest) = ("a".repeat(64), "Z".repeat(63));
    let bad = [
        ("ab", "must be 3 to 63 characters long"),
        ("", "must be 3 to 63 characters long"),
        (long.as_str(), "must be 3 to 63 characters long"),
        ("1abc", "must start with a letter"),
        ("ab_c", "may hold only the letters A-Z, a-z and digits"),
        ("ab-c", "may hold only the letters A-Z, a-z and digits"),
        ("abé", "may hold only the letters A-Z, a-z and digits"),
        ("tables", "\"tables\" is reserved"),
        ("Tables", "\"tables\" is reserved"),
    ];
    for (name, why) in bad {
        let e = expect_err!(TableName::new(name), InvalidInput::TableName { .. });
        assert_matches!(e, InvalidInput::TableName { name: n, reason } if n == name && *reason == why);
    }
    // The edges of the rules are valid and usable.
    for name in ["abc", "A12", longest.as_str(), "tables2", "Tables0"] {
        let t = table(s, name).await?;
        insert(s, &t, entity("p", "r", &[])).await?;
        assert_count(s, &t, 1).await?;
    }
    assert_eq!(s.list_tables().await?.len(), 5);
    Ok(())
}

pub async fn tables_are_independent(fx: &Fixture) -> TestResult {
    let s = fx.store();
    let a = table(s, "Alpha").await?;
    let b = table(s, "Beta").await?;
    insert(s, &a, entity("p", "r", &[("From", text("a"))])).await?;
    insert(s, &b, entity("p", "r", &[("From", text("b"))])).await?;
    assert_eq!(
        must_get(s, &a, "p", "r").await?.get("From"),
        Some(&text("a"))
    );
    assert_eq!(
        must_get(s, &b, "p", "r").await?.get("From"),
        Some(&text("b"))
    );
    s.delete_table(&a).await?;
    assert_eq!(
        must_get(s, &b, "p", "r").await?.get("From"),
        Some(&text("b"))
    );
    assert_count(s, &b, 1).await
}
