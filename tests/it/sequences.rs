//! Sequences across processes: values come from one counter entity, a block
//! per If-Match write, so that processes sharing a store never hand out a
//! value twice (`catalog::sequence`). The SQL behaviour is pinned in
//! `tests/slt/sequences.slt`.

use std::collections::BTreeSet;
use std::process::Command;

type TestResult<T = ()> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

const PROCESSES: usize = 8;
const CALLS: usize = 1000;

/// The integers a command printed one per line (psql -At), or its error.
fn values_of(output: std::process::Output) -> TestResult<Vec<i64>> {
    if !output.status.success() {
        return Err(format!(
            "exited with {}: {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        )
        .into());
    }
    let text = String::from_utf8(output.stdout)?;
    Ok(text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::parse)
        .collect::<Result<_, _>>()?)
}

fn assert_all_distinct(values: &[i64], expected: usize) {
    let distinct: BTreeSet<i64> = values.iter().copied().collect();
    assert_eq!(values.len(), expected, "every nextval answered");
    assert_eq!(distinct.len(), expected, "no value handed out twice");
}

/// Eight psql processes, each sending 1,000 `SELECT nextval(...)`
/// statements to one server over the embedded store, at once.
#[test]
fn eight_psql_processes_draw_distinct_values_through_one_server() -> TestResult {
    let served = crate::server::serve(1000, &[]).map_err(|e| e.to_string())?;
    let created = served.psql("", &["-c", "CREATE SEQUENCE ids"])?;
    assert!(created.status.success(), "{created:?}");
    let dir = tempfile::tempdir()?;
    let script = dir.path().join("nextval.sql");
    std::fs::write(&script, "SELECT nextval('ids');\n".repeat(CALLS))?;
    let script = script.to_string_lossy().into_owned();
    let outputs: Vec<std::io::Result<std::process::Output>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..PROCESSES)
            .map(|_| scope.spawn(|| served.psql("", &["-At", "-f", &script])))
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(std::io::Error::other("psql thread panicked")))
            })
            .collect()
    });
    let mut all = Vec::new();
    for output in outputs {
        let values = values_of(output?)?;
        // One session's values ascend.
        assert!(values.windows(2).all(|w| w[0] < w[1]), "{values:?}");
        all.extend(values);
    }
    assert_all_distinct(&all, PROCESSES * CALLS);
    // CACHE 1 in one server: no value is skipped either.
    let max = all.iter().copied().max().unwrap_or(0);
    assert_eq!(max, (PROCESSES * CALLS) as i64);
    Ok(())
}

/// Eight `tablesql` processes on one Azurite account, each drawing 1,000
/// values from a sequence with blocks of one value: every value is one
/// If-Match write raced by the other seven processes.
#[test]
fn eight_processes_draw_distinct_values_from_one_azurite_account() -> TestResult {
    let store = crate::azurite::store_argument(&crate::azurite::fresh_account()?);
    let tablesql = |sql: &str| {
        Command::new(env!("CARGO_BIN_EXE_tablesql"))
            .args(["--store", &store, "query", sql])
            .env_remove("TABLESQL_STORE")
            .env("RUST_BACKTRACE", "0")
            .output()
    };
    let created = tablesql("CREATE SEQUENCE ids CACHE 1")?;
    assert!(created.status.success(), "{created:?}");
    let query = format!("SELECT nextval('ids') AS v FROM generate_series(1, {CALLS})");
    let children: Vec<_> = (0..PROCESSES)
        .map(|_| {
            Command::new(env!("CARGO_BIN_EXE_tablesql"))
                .args(["--store", &store, "query", "--format", "csv", &query])
                .env_remove("TABLESQL_STORE")
                .env("RUST_BACKTRACE", "0")
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
        })
        .collect::<Result<_, _>>()?;
    let mut all = Vec::new();
    for child in children {
        let mut output = child.wait_with_output()?;
        // The CSV header.
        let text = String::from_utf8(std::mem::take(&mut output.stdout))?;
        output.stdout = text
            .lines()
            .skip(1)
            .collect::<Vec<_>>()
            .join("\n")
            .into_bytes();
        all.extend(values_of(output)?);
    }
    assert_all_distinct(&all, PROCESSES * CALLS);
    // No write's answer was lost, so no value was skipped: the values are
    // exactly 1..=8000.
    assert_eq!(
        all.iter().copied().collect::<BTreeSet<_>>(),
        (1..=(PROCESSES * CALLS) as i64).collect()
    );
    Ok(())
}

/// `currval` belongs to the session: another connection has none, and
/// `DISCARD ALL` (a pooler handing the connection on) forgets it, and the
/// session's temporary tables.
#[tokio::test]
async fn currval_is_per_session_and_discard_all_forgets_it() -> TestResult {
    let served = crate::server::serve(1000, &[]).map_err(|e| e.to_string())?;
    let a = served.connect().await?;
    let b = served.connect().await?;
    a.batch_execute("CREATE SEQUENCE per_session").await?;
    let v: i64 = a
        .query_one("SELECT nextval('per_session')", &[])
        .await?
        .get(0);
    let current: i64 = a
        .query_one("SELECT currval('per_session')", &[])
        .await?
        .get(0);
    assert_eq!(current, v);
    for (client, what) in [(&b, "another session"), (&a, "after DISCARD ALL")] {
        if what.starts_with("after") {
            a.batch_execute("DISCARD ALL").await?;
        }
        let e = client
            .query_one("SELECT currval('per_session')", &[])
            .await
            .err()
            .ok_or(format!("{what} saw a currval"))?;
        assert_eq!(e.code().map(|c| c.code()), Some("55000"), "{what}: {e:?}");
    }
    // Its temporary tables go too, as PostgreSQL's DISCARD ALL drops them.
    a.batch_execute("CREATE TEMP TABLE pad AS SELECT 1 AS one")
        .await?;
    assert_eq!(a.query("SELECT one FROM pad", &[]).await?.len(), 1);
    a.batch_execute("DISCARD ALL").await?;
    let e = a
        .query("SELECT one FROM pad", &[])
        .await
        .err()
        .ok_or("a temporary table outlived DISCARD ALL")?;
    assert_eq!(e.code().map(|c| c.code()), Some("42P01"), "{e:?}");
    Ok(())
}
