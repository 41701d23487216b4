//! What a block's reads promise when its rivals are other processes: two
//! engines over one store share no row locks (`exec::write::locks` is one
//! engine's), so they meet only at COMMIT, where the rows a block kept are
//! checked (`exec::write::reads`). The isolation levels differ as
//! docs/writes.md states them: REPEATABLE READ allows write skew, as
//! PostgreSQL's does; SERIALIZABLE does not.

use std::sync::Arc;

use tablesql::datafusion::arrow::array::AsArray;
use tablesql::datafusion::arrow::datatypes::Int64Type;
use tablesql::storage::MemoryStore;
use tablesql::{Engine, EngineError, EngineOptions, Session};

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// Two sessions of two engines (two processes, as far as they can tell)
/// over one store holding rows 1 and 2, each with `flag` 1.
async fn two_processes() -> Result<(Session, Session), Box<dyn std::error::Error>> {
    let store = Arc::new(MemoryStore::new());
    let a = Engine::with_store(store.clone(), EngineOptions::default())
        .await?
        .session();
    a.collect(
        "CREATE TABLE shifts (id INT NOT NULL, flag BIGINT NOT NULL, PRIMARY KEY (id)) \
         WITH (storage_table = 'Shifts', partition_key = 'ward', row_key = '{id}')",
    )
    .await?;
    a.collect("INSERT INTO shifts (id, flag) VALUES (1, 1), (2, 1)")
        .await?;
    let b = Engine::with_store(store, EngineOptions::default())
        .await?
        .session();
    Ok((a, b))
}

async fn one(session: &Session, sql: &str) -> Result<i64, Box<dyn std::error::Error>> {
    let batches = session.collect(sql).await?;
    let batch = batches.first().ok_or("no rows")?;
    Ok(batch.column(0).as_primitive::<Int64Type>().value(0))
}

fn code(
    done: Result<Vec<tablesql::datafusion::arrow::record_batch::RecordBatch>, EngineError>,
) -> String {
    match done {
        Ok(_) => "ok".to_owned(),
        Err(e) => e.sqlstate().to_owned(),
    }
}

/// Both read row 1 `FOR UPDATE` (no lock is shared, so neither waits) and
/// both write it: the second writer fails with 40001, not at COMMIT but
/// at its write, which finds a version other than the one it read.
#[tokio::test]
async fn for_update_in_two_processes_meets_at_the_write() -> TestResult {
    let (a, b) = two_processes().await?;
    a.collect("BEGIN").await?;
    b.collect("BEGIN").await?;
    let read = "SELECT flag FROM shifts WHERE id = 1 FOR UPDATE";
    assert_eq!(one(&a, read).await?, 1);
    assert_eq!(one(&b, read).await?, 1);
    b.collect("UPDATE shifts SET flag = 10 WHERE id = 1")
        .await?;
    b.collect("COMMIT").await?;
    let lost = a.collect("UPDATE shifts SET flag = 20 WHERE id = 1").await;
    assert_eq!(code(lost), "40001");
    a.collect("ROLLBACK").await?;
    assert_eq!(one(&a, "SELECT flag FROM shifts WHERE id = 1").await?, 10);
    Ok(())
}

/// A row read `FOR UPDATE` and not written, in a block that writes, is
/// written back at COMMIT If-Match the version read: a block that read it
/// `FOR SHARE` in another process meanwhile fails its COMMIT; and a change
/// by another process before the COMMIT fails the reader's.
#[tokio::test]
async fn a_row_read_for_update_is_written_back_unchanged() -> TestResult {
    let (a, b) = two_processes().await?;
    let first = etag(&a).await?;
    a.collect("BEGIN").await?;
    b.collect("BEGIN").await?;
    assert_eq!(
        one(&a, "SELECT flag FROM shifts WHERE id = 1 FOR UPDATE").await?,
        1
    );
    assert_eq!(
        one(&b, "SELECT flag FROM shifts WHERE id = 1 FOR SHARE").await?,
        1
    );
    a.collect("UPDATE shifts SET flag = 0 WHERE id = 2").await?;
    a.collect("COMMIT").await?;
    assert_ne!(etag(&a).await?, first, "a new version of row 1");
    assert_eq!(
        one(&a, "SELECT flag FROM shifts WHERE id = 1").await?,
        1,
        "unchanged"
    );
    assert_eq!(code(b.collect("COMMIT").await), "40001");

    a.collect("BEGIN").await?;
    assert_eq!(
        one(&a, "SELECT flag FROM shifts WHERE id = 1 FOR UPDATE").await?,
        1
    );
    a.collect("UPDATE shifts SET flag = 1 WHERE id = 2").await?;
    b.collect("UPDATE shifts SET flag = 5 WHERE id = 1").await?;
    assert_eq!(code(a.collect("COMMIT").await), "40001");
    assert_eq!(one(&a, "SELECT flag FROM shifts WHERE id = 1").await?, 5);
    assert_eq!(
        one(&a, "SELECT flag FROM shifts WHERE id = 2").await?,
        0,
        "nothing of it"
    );
    Ok(())
}

async fn etag(session: &Session) -> Result<String, Box<dyn std::error::Error>> {
    let batches = session
        .collect("SELECT _etag FROM shifts WHERE id = 1")
        .await?;
    let batch = batches.first().ok_or("no row")?;
    Ok(batch.column(0).as_string::<i32>().value(0).to_owned())
}

/// Write skew (Adya's G2-item): two blocks each read both rows, see the
/// other's flag set, and clear their own. Committed one after the other,
/// the second fails (40001) at both levels, since its COMMIT reads again
/// the row the first wrote; so one flag stays.
#[tokio::test]
async fn a_write_skew_committed_in_turn_fails_the_second() -> TestResult {
    for level in ["REPEATABLE READ", "SERIALIZABLE"] {
        let (a, b) = two_processes().await?;
        for (session, own) in [(&a, 1), (&b, 2)] {
            session
                .collect(&format!("BEGIN ISOLATION LEVEL {level}"))
                .await?;
            let other = 3 - own;
            let set = one(
                session,
                &format!("SELECT flag FROM shifts WHERE id = {other}"),
            )
            .await?;
            assert_eq!(set, 1);
            assert_eq!(
                one(
                    session,
                    &format!("SELECT flag FROM shifts WHERE id = {own}")
                )
                .await?,
                1
            );
            session
                .collect(&format!("UPDATE shifts SET flag = 0 WHERE id = {own}"))
                .await?;
        }
        a.collect("COMMIT").await?;
        assert_eq!(code(b.collect("COMMIT").await), "40001", "{level}");
        assert_eq!(
            one(&a, "SELECT count(*) FROM shifts WHERE flag = 1").await?,
            1,
            "{level}"
        );
    }
    Ok(())
}

/// What SERIALIZABLE adds: a block that writes also writes back every row
/// it read, so its check and its writes are one step. Seen from another
/// process, a REPEATABLE READ block that read row 1 and committed after
/// the writer did still commits when the writer was REPEATABLE READ (row 1
/// was not written), and fails when it was SERIALIZABLE (row 1 has a new
/// version).
#[tokio::test]
async fn serializable_writes_back_what_it_read() -> TestResult {
    for (level, reader) in [("REPEATABLE READ", "ok"), ("SERIALIZABLE", "40001")] {
        let (a, b) = two_processes().await?;
        a.collect(&format!("BEGIN ISOLATION LEVEL {level}")).await?;
        b.collect("BEGIN ISOLATION LEVEL REPEATABLE READ").await?;
        assert_eq!(one(&a, "SELECT flag FROM shifts WHERE id = 1").await?, 1);
        assert_eq!(one(&b, "SELECT flag FROM shifts WHERE id = 1").await?, 1);
        a.collect("UPDATE shifts SET flag = 0 WHERE id = 2").await?;
        a.collect("COMMIT").await?;
        assert_eq!(code(b.collect("COMMIT").await), reader, "{level}");
    }
    Ok(())
}

/// DDL in a block reaches another process at COMMIT, all of it at once:
/// dbt's swap (a new table under a temporary name, the old one renamed
/// aside, the new one renamed into place) shows the other engine the old
/// table until COMMIT and the new one after it, never neither; a name the
/// other engine took meanwhile fails the COMMIT whole (42P07).
#[tokio::test]
async fn a_blocks_ddl_reaches_another_process_at_commit_whole() -> TestResult {
    let store = Arc::new(MemoryStore::new());
    // Each statement checks the catalog's version: nothing waits for time.
    let options = EngineOptions::default().with_catalog_check(std::time::Duration::ZERO);
    let a = Engine::with_store(store.clone(), options).await?.session();
    let b = Engine::with_store(store, options).await?.session();
    a.collect("CREATE TABLE model AS SELECT 1 AS v").await?;
    assert_eq!(
        one(&b, "SELECT CAST(sum(v) AS BIGINT) FROM model").await?,
        1
    );

    a.collect("BEGIN").await?;
    a.collect("CREATE TABLE model__tmp AS SELECT 2 AS v UNION ALL SELECT 3")
        .await?;
    a.collect("ALTER TABLE model RENAME TO model__backup")
        .await?;
    a.collect("ALTER TABLE model__tmp RENAME TO model").await?;
    assert_eq!(
        one(&a, "SELECT CAST(sum(v) AS BIGINT) FROM model").await?,
        5
    );
    assert_eq!(
        one(&b, "SELECT CAST(sum(v) AS BIGINT) FROM model").await?,
        1
    );
    assert_eq!(code(b.collect("SELECT * FROM model__tmp").await), "42P01");
    a.collect("COMMIT").await?;
    assert_eq!(
        one(&b, "SELECT CAST(sum(v) AS BIGINT) FROM model").await?,
        5
    );
    assert_eq!(
        one(&b, "SELECT CAST(sum(v) AS BIGINT) FROM model__backup").await?,
        1
    );

    // The name the block made, taken by the other process first.
    a.collect("BEGIN").await?;
    a.collect("CREATE TABLE raced AS SELECT 1 AS v").await?;
    a.collect("DROP TABLE model__backup").await?;
    b.collect("CREATE TABLE raced (v INT PRIMARY KEY)").await?;
    assert_eq!(code(a.collect("COMMIT").await), "42P07");
    // Nothing of the block: the backup is still there, the raced table b's.
    assert_eq!(
        one(&b, "SELECT CAST(sum(v) AS BIGINT) FROM model__backup").await?,
        1
    );
    assert_eq!(one(&a, "SELECT count(*) FROM raced").await?, 0);
    Ok(())
}
