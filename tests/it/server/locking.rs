//! Reads that count, between two clients of one server: the lost update
//! of a read-then-write block fails with 40001 (under `FOR UPDATE`, and
//! under REPEATABLE READ without it), and `FOR UPDATE` waits, fails at
//! once (`NOWAIT`) or passes over (`SKIP LOCKED`) a row another session
//! holds, as PostgreSQL's clients expect (`exec::write::locks`, `reads`).

use super::*;

const TABLE: &str = "CREATE TABLE accounts (id INT NOT NULL, balance BIGINT NOT NULL, \
    PRIMARY KEY (id)) WITH (storage_table = 'Accounts', partition_key = 'acct', row_key = '{id:05}')";

/// A server (over the 1,000-row fixture) with accounts 1, 2 and 3 at
/// balance 100, and two clients.
async fn accounts() -> Result<(Served, Client, Client), Box<dyn std::error::Error>> {
    let server = serve(1000, &[])?;
    let (a, b) = (server.connect().await?, server.connect().await?);
    a.batch_execute(TABLE).await?;
    a.batch_execute("INSERT INTO accounts (id, balance) VALUES (1, 100), (2, 100), (3, 100)")
        .await?;
    Ok((server, a, b))
}

async fn balance(client: &Client, id: i32) -> Result<i64, tokio_postgres::Error> {
    Ok(client
        .query_one("SELECT balance FROM accounts WHERE id = $1", &[&id])
        .await?
        .get(0))
}

/// The example of issue 70: read, another client commits, write what the
/// read decided. Without a lock or a level that keeps reads, PostgreSQL's
/// READ COMMITTED would also commit 70 here (its FOR UPDATE would make B
/// wait instead); tablesql fails the block, so B's 50 stands.
#[tokio::test]
async fn a_read_then_write_block_does_not_lose_an_update() -> TestResult {
    let (_server, a, b) = accounts().await?;
    for begin in ["BEGIN", "BEGIN ISOLATION LEVEL REPEATABLE READ"] {
        let lock = if begin == "BEGIN" { " FOR UPDATE" } else { "" };
        b.batch_execute("UPDATE accounts SET balance = 100 WHERE id = 1")
            .await?;
        a.batch_execute(begin).await?;
        let read = a
            .query_one(
                &format!("SELECT balance FROM accounts WHERE id = 1{lock}"),
                &[],
            )
            .await?;
        assert_eq!(read.get::<_, i64>(0), 100);
        // Another client commits between the read and the write (a plain
        // write takes no lock: it is not kept waiting).
        b.batch_execute("UPDATE accounts SET balance = 50 WHERE id = 1")
            .await?;
        let e = a
            .batch_execute("UPDATE accounts SET balance = 100 - 30 WHERE id = 1")
            .await
            .err()
            .ok_or_else(|| format!("{begin}{lock}: the write over B's change ran"))?;
        assert_eq!(code(&e), "40001", "{begin}{lock}: {e:?}");
        // The block failed: its COMMIT rolls back.
        let end = a.simple_query("COMMIT").await?;
        assert!(
            matches!(end.first(), Some(SimpleQueryMessage::CommandComplete(0))),
            "{end:?}"
        );
        assert_eq!(
            balance(&a, 1).await?,
            50,
            "{begin}{lock}: B's change stands"
        );
    }
    Ok(())
}

/// A row the block read and did not write is checked at COMMIT: under
/// REPEATABLE READ a change to it fails the COMMIT (40001) and nothing of
/// the block is written; under READ COMMITTED the same block commits.
#[tokio::test]
async fn commit_checks_the_rows_the_block_only_read() -> TestResult {
    let (_server, a, b) = accounts().await?;
    for (begin, fails) in [
        ("BEGIN ISOLATION LEVEL REPEATABLE READ", true),
        ("BEGIN", false),
    ] {
        a.batch_execute(begin).await?;
        let total: i64 = a
            .query_one("SELECT balance FROM accounts WHERE id = 1", &[])
            .await?
            .get(0);
        a.batch_execute(&format!(
            "UPDATE accounts SET balance = {} WHERE id = 2",
            total + 1000
        ))
        .await?;
        b.batch_execute("UPDATE accounts SET balance = balance + 1 WHERE id = 1")
            .await?;
        let before = balance(&b, 2).await?;
        match (a.batch_execute("COMMIT").await, fails) {
            (Err(e), true) => {
                assert_eq!(code(&e), "40001", "{e:?}");
                assert_eq!(balance(&a, 2).await?, before, "nothing of the block");
            }
            (Ok(()), false) => assert_eq!(balance(&a, 2).await?, total + 1000),
            (done, _) => return Err(format!("{begin}: COMMIT gave {done:?}").into()),
        }
    }
    Ok(())
}

/// `NOWAIT` fails at once on a row another session holds (55P03), `SKIP
/// LOCKED` passes over it (a job queue's next job), and when the holder's
/// block ends the row is free again.
#[tokio::test]
async fn nowait_and_skip_locked_meet_a_row_another_session_holds() -> TestResult {
    let (_server, a, b) = accounts().await?;
    a.batch_execute("BEGIN").await?;
    let mine = a
        .query(
            "SELECT id FROM accounts WHERE id = 1 FOR UPDATE SKIP LOCKED",
            &[],
        )
        .await?;
    assert_eq!(mine.first().map(|r| r.get::<_, i32>(0)), Some(1));

    let e = b
        .query(
            "SELECT id FROM accounts WHERE id = 1 FOR UPDATE NOWAIT",
            &[],
        )
        .await
        .err()
        .ok_or("NOWAIT took a held row")?;
    assert_eq!(code(&e), "55P03", "{e:?}");
    let next = b
        .query(
            "SELECT id FROM accounts ORDER BY id FOR UPDATE SKIP LOCKED",
            &[],
        )
        .await?;
    let ids: Vec<i32> = next.iter().map(|r| r.get(0)).collect();
    assert_eq!(ids, [2, 3], "the held row is passed over");
    // A plain read is never kept waiting.
    assert_eq!(balance(&b, 1).await?, 100);

    a.batch_execute("COMMIT").await?;
    let free = b
        .query(
            "SELECT id FROM accounts WHERE id = 1 FOR UPDATE NOWAIT",
            &[],
        )
        .await?;
    assert_eq!(free.len(), 1);

    // EXPLAIN ANALYZE runs the query, and takes its locks as PostgreSQL's
    // does; a plain EXPLAIN reads no row and takes none.
    a.batch_execute("BEGIN").await?;
    a.query(
        "EXPLAIN SELECT id FROM accounts WHERE id = 2 FOR UPDATE",
        &[],
    )
    .await?;
    b.query(
        "SELECT id FROM accounts WHERE id = 2 FOR UPDATE NOWAIT",
        &[],
    )
    .await?;
    a.query(
        "EXPLAIN ANALYZE SELECT id FROM accounts WHERE id = 2 FOR UPDATE",
        &[],
    )
    .await?;
    let e = b
        .query(
            "SELECT id FROM accounts WHERE id = 2 FOR UPDATE NOWAIT",
            &[],
        )
        .await
        .err()
        .ok_or("NOWAIT took a row EXPLAIN ANALYZE locked")?;
    assert_eq!(code(&e), "55P03", "{e:?}");
    a.batch_execute("ROLLBACK").await?;
    Ok(())
}

/// `FOR UPDATE` waits for the holder's block to end, and then answers with
/// the row as the holder left it (PostgreSQL's READ COMMITTED reads it
/// again), so the waiter's own write builds on it and commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_reads_what_the_holder_committed() -> TestResult {
    let (_server, a, b) = accounts().await?;
    a.batch_execute("BEGIN").await?;
    let held: i64 = a
        .query_one("SELECT balance FROM accounts WHERE id = 1 FOR UPDATE", &[])
        .await?
        .get(0);
    let waiter = tokio::spawn(async move {
        b.batch_execute("BEGIN").await?;
        let seen: i64 = b
            .query_one("SELECT balance FROM accounts WHERE id = 1 FOR UPDATE", &[])
            .await?
            .get(0);
        b.batch_execute(&format!(
            "UPDATE accounts SET balance = {} WHERE id = 1; COMMIT",
            seen - 10
        ))
        .await?;
        Ok::<i64, tokio_postgres::Error>(seen)
    });
    a.batch_execute(&format!(
        "UPDATE accounts SET balance = {} WHERE id = 1; COMMIT",
        held - 30
    ))
    .await?;
    // Whether B waited or came after A's COMMIT, it read A's 70.
    let seen = waiter.await??;
    assert_eq!(seen, 70);
    assert_eq!(balance(&a, 1).await?, 60, "both withdrawals stand");
    Ok(())
}

/// Two blocks that each hold a row and wait for the other's: one of them
/// fails with 40P01 (whichever closed the cycle), and once it has rolled
/// back the other goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cycle_of_waits_is_a_deadlock_for_one_of_them() -> TestResult {
    let (_server, a, b) = accounts().await?;
    a.batch_execute("BEGIN; SELECT 1 FROM accounts WHERE id = 1 FOR UPDATE")
        .await?;
    b.batch_execute("BEGIN; SELECT 1 FROM accounts WHERE id = 2 FOR UPDATE")
        .await?;
    let cross = |client: Client, id: i32| {
        tokio::spawn(async move {
            let got = client
                .batch_execute(&format!(
                    "SELECT 1 FROM accounts WHERE id = {id} FOR UPDATE"
                ))
                .await;
            // The one refused ends its block, which lets the other go on.
            client.batch_execute("ROLLBACK").await?;
            Ok::<_, tokio_postgres::Error>(got.err().map(|e| code(&e)))
        })
    };
    let (first, second) = (cross(a, 2), cross(b, 1));
    let (first, second) = (first.await??, second.await??);
    let mut codes = [first, second];
    codes.sort();
    assert_eq!(codes, [None, Some("40P01".to_owned())]);
    Ok(())
}
