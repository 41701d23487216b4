//! Concurrency: parallel writes all land, queries run beside writes, and
//! optimistic concurrency lets exactly one of racing conditional writes win.

use std::collections::HashSet;
use std::sync::Arc;

use tablesql::storage::{IfMatch, StorageError, WriteOp};
use tokio::task::JoinSet;

use super::*;

/// Runs one task per item at once; returns every task's result.
async fn race<T, F, Fut>(
    store: &Arc<dyn TableStore>,
    n: usize,
    task: F,
) -> TestResult<Vec<Result<T, StorageError>>>
where
    T: Send + 'static,
    F: Fn(Arc<dyn TableStore>, usize) -> Fut,
    Fut: std::future::Future<Output = Result<T, StorageError>> + Send + 'static,
{
    let mut set = JoinSet::new();
    for i in 0..n {
        set.spawn(task(store.clone(), i));
    }
    let mut out = Vec::with_capacity(n);
    while let Some(joined) = set.join_next().await {
        out.push(joined?);
    }
    Ok(out)
}

pub async fn concurrent_inserts_all_land(fx: &Fixture) -> TestResult {
    let t = table(fx.store(), "Parallel").await?;
    let results = race(&fx.store, 50, |s, i| {
        let t = t.clone();
        async move {
            let e = entity(
                &format!("p{}", i % 5),
                &format!("{i:02}"),
                &[("I", int(i as i32))],
            );
            s.execute(&t, WriteOp::Insert(e)).await
        }
    })
    .await?;
    let mut etags = HashSet::new();
    for r in results {
        etags.insert(r?.etag.ok_or("an insert returned no ETag")?.to_string());
    }
    assert_eq!(etags.len(), 50, "every write got its own ETag");
    assert_count(fx.store(), &t, 50).await?;
    for i in 0..50 {
        let got = must_get(fx.store(), &t, &format!("p{}", i % 5), &format!("{i:02}")).await?;
        assert_eq!(got.get("I"), Some(&int(i)));
    }
    Ok(())
}

pub async fn concurrent_batches_all_land(fx: &Fixture) -> TestResult {
    let t = table(fx.store(), "Parallel").await?;
    let results = race(&fx.store, 10, |s, i| {
        let t = t.clone();
        async move {
            let ops = (0..100)
                .map(|r| WriteOp::Insert(entity(&format!("p{i}"), &format!("{r:03}"), &[])))
                .collect();
            s.execute_batch(&t, ops).await
        }
    })
    .await?;
    for r in results {
        assert_eq!(r?.len(), 100);
    }
    assert_count(fx.store(), &t, 1000).await
}

pub async fn queries_while_writing_succeed(fx: &Fixture) -> TestResult {
    let t = table(fx.store(), "Busy").await?;
    let writer = {
        let (s, t) = (fx.store.clone(), t.clone());
        tokio::spawn(async move {
            for b in 0..30 {
                let ops = (0..10)
                    .map(|r| WriteOp::Insert(entity("p", &format!("{b:02}-{r}"), &[])))
                    .collect();
                s.execute_batch(&t, ops).await?;
            }
            Ok::<_, StorageError>(())
        })
    };
    let mut reads = 0;
    let mut last_len = 0;
    loop {
        let done = writer.is_finished();
        let found = fx.store().query_all(&t, &Query::all().top(7)).await?;
        let ks = keys(&found);
        assert!(
            ks.windows(2).all(|w| w[0] < w[1]),
            "in key order, no duplicates"
        );
        assert!(
            found.len() >= last_len,
            "entities never disappear: {} after {last_len}",
            found.len()
        );
        last_len = found.len();
        reads += 1;
        if done {
            break;
        }
    }
    writer.await??;
    assert!(reads >= 1);
    assert_eq!(last_len, 300);
    assert_count(fx.store(), &t, 300).await
}

pub async fn one_of_racing_conditional_updates_wins(fx: &Fixture) -> TestResult {
    let t = table(fx.store(), "Race").await?;
    let etag = insert(fx.store(), &t, entity("p", "r", &[("Winner", int(-1))])).await?;
    let results = race(&fx.store, 20, |s, i| {
        let (t, etag) = (t.clone(), etag.clone());
        async move {
            let op = WriteOp::Update(
                entity("p", "r", &[("Winner", int(i as i32))]),
                IfMatch::ETag(etag),
            );
            s.execute(&t, op).await.map(|o| (i, o.etag))
        }
    })
    .await?;
    let mut winners = Vec::new();
    for r in results {
        match r {
            Ok(won) => winners.push(won),
            Err(e) => assert_matches!(e, StorageError::PreconditionFailed { .. }),
        }
    }
    assert_eq!(winners.len(), 1, "exactly one conditional update wins");
    let (i, won_etag) = winners.remove(0);
    let got = must_get(fx.store(), &t, "p", "r").await?;
    assert_eq!(
        (got.get("Winner"), Some(&got.etag)),
        (Some(&int(i as i32)), won_etag.as_ref())
    );
    Ok(())
}

pub async fn one_of_racing_inserts_wins(fx: &Fixture) -> TestResult {
    let t = table(fx.store(), "Race").await?;
    let results = race(&fx.store, 20, |s, i| {
        let t = t.clone();
        async move {
            s.execute(
                &t,
                WriteOp::Insert(entity("p", "r", &[("I", int(i as i32))])),
            )
            .await
        }
    })
    .await?;
    let wins = results.iter().filter(|r| r.is_ok()).count();
    assert_eq!(wins, 1);
    for r in &results {
        if let Err(e) = r {
            assert_matches!(e, StorageError::EntityAlreadyExists { .. });
        }
    }
    assert_count(fx.store(), &t, 1).await
}

/// The sequential-id pattern: read, add one, write back on the ETag, retry on 412.
pub async fn optimistic_counter_never_loses_an_increment(fx: &Fixture) -> TestResult {
    let t = table(fx.store(), "Counter").await?;
    insert(
        fx.store(),
        &t,
        entity("app", "counter", &[("Next", EdmValue::Int64(0))]),
    )
    .await?;
    let results = race(&fx.store, 8, |s, _| {
        let t = t.clone();
        async move {
            let mut retries = 0;
            for _ in 0..5 {
                loop {
                    let current = s
                        .get(&t, &pk("app"), &rk("counter"))
                        .await?
                        .expect("counter exists");
                    let Some(EdmValue::Int64(n)) = current.get("Next").cloned() else {
                        panic!("counter type")
                    };
                    let op = WriteOp::Update(
                        entity("app", "counter", &[("Next", EdmValue::Int64(n + 1))]),
                        IfMatch::ETag(current.etag),
                    );
                    match s.execute(&t, op).await {
                        Ok(_) => break,
                        Err(StorageError::PreconditionFailed { .. }) => retries += 1,
                        Err(e) => return Err(e),
                    }
                    assert!(retries < 10_000, "no progress");
                }
            }
            Ok(retries)
        }
    })
    .await?;
    for r in results {
        r?;
    }
    let got = must_get(fx.store(), &t, "app", "counter").await?;
    assert_eq!(got.get("Next"), Some(&EdmValue::Int64(40)));
    Ok(())
}
