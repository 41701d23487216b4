//! Under load: 100,000 rows in flat memory, 64 clients, and a client that
//! leaves mid-query.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetch_size_streams_100k_rows_in_flat_memory() -> TestResult {
    let _cpu = crate::exclusive();
    let server = serve(100_000, &["--page-cache", "8MB"])?;
    let mut client = server.connect().await?;
    let tx = client.transaction().await?;
    // `finish > 0` (every row) is a condition the store applies, so the
    // scan's pages are not kept in the store's derived cache, which holds
    // decoded pages on purpose (up to its budget, docs/operations.md): what
    // must stay flat is what the stream itself holds.
    let statement = tx
        .prepare(
            "SELECT event, distance, bib, name, gender, age, finish, registered, club \
             FROM registrations WHERE finish > 0",
        )
        .await?;
    let portal = tx.bind(&statement, &[]).await?;
    let mut rows = 0usize;
    // The scan reads partitions side by side, each a few pages ahead of the
    // client: memory grows with that width, then must stay flat.
    let mut rss_start = 0;
    loop {
        let page = tx.query_portal(&portal, 1000).await?;
        if page.is_empty() {
            break;
        }
        assert!(page.len() <= 1000);
        rows += page.len();
        if rows == 10_000 {
            rss_start = server.rss_kib()?;
        }
    }
    let rss_paged = server.rss_kib()?;
    tx.commit().await?;
    assert_eq!(rows, 100_000);

    // One Execute without a row limit, read as a stream by the client.
    let stream = client
        .query_raw(&statement, std::iter::empty::<i32>())
        .await?;
    futures::pin_mut!(stream);
    let mut streamed = 0usize;
    while let Some(row) = futures::StreamExt::next(&mut stream).await {
        row?;
        streamed += 1;
    }
    let rss_streamed = server.rss_kib()?;
    assert_eq!(streamed, 100_000);
    eprintln!(
        "server RSS KiB: start {rss_start}, after pages {rss_paged}, after stream {rss_streamed}"
    );
    // The 100,000 rows encoded are about 20 MiB; a server that held them
    // would grow by that much at least.
    for (what, rss) in [
        ("pages of 1,000", rss_paged),
        ("an unlimited Execute", rss_streamed),
    ] {
        let grown = rss.saturating_sub(rss_start);
        assert!(grown < 12 * 1024, "server RSS grew {grown} KiB over {what}");
    }
    Ok(())
}

#[test]
fn psycopg_named_cursor_over_100k_rows() -> TestResult {
    let _cpu = crate::exclusive();
    let Ok(python) = std::env::var("TABLESQL_TEST_PYTHON") else {
        return Err("TABLESQL_TEST_PYTHON is not set (scripts/python-env makes it)".into());
    };
    let server = serve(100_000, &[])?;
    let script = r#"
import sys, psycopg
assert psycopg.pq.__impl__ == "binary", psycopg.pq.__impl__
with psycopg.connect(sys.argv[1]) as conn:
    with conn.cursor(name="regs") as cur:
        cur.itersize = 1000
        # A parameter, bound to the DECLARE that psycopg sends.
        cur.execute("SELECT bib, name, age FROM registrations WHERE age >= %s", (18,))
        names = [d.name for d in cur.description]
        n = 0
        for bib, name, age in cur:
            assert isinstance(bib, int) and isinstance(name, str)
            n += 1
    print(n, ",".join(names))
"#;
    let out = Command::new(python)
        .args(["-c", script, &server.conninfo("tablesql")])
        .output()?;
    let shown = text(&out);
    assert!(out.status.success(), "{shown}");
    assert_eq!(
        std::str::from_utf8(&out.stdout)?.trim(),
        "100000 bib,name,age",
        "{shown}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_64_clients_1000_prepared_points_each() -> TestResult {
    let _cpu = crate::exclusive();
    let server = serve(1000, &[])?;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..64u64 {
        let conninfo = server.conninfo("tablesql");
        tasks.push(tokio::spawn(async move {
            let client = connect(&conninfo).await?;
            let statement = client.prepare(POINT).await?;
            for q in 0..1000u64 {
                let r = demo::registration((c * 1000 + q * 7) % 1000);
                let row = client
                    .query_one(&statement, &[&r.event, &r.distance, &r.bib])
                    .await?;
                if row.get::<_, &str>(0) != r.name {
                    return Err::<usize, Box<dyn std::error::Error + Send + Sync>>(
                        format!("wrong row for {c}/{q}").into(),
                    );
                }
            }
            Ok(1000)
        }));
    }
    let mut done = 0;
    for t in tasks {
        done += tokio::time::timeout(Duration::from_secs(600), t)
            .await??
            .map_err(|e| e.to_string())?;
    }
    assert_eq!(done, 64_000);
    eprintln!("64 x 1000 prepared points in {:?}", started.elapsed());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_disconnects_mid_query_frees_its_work() -> TestResult {
    let server = serve(1000, &[])?;
    for _ in 0..8 {
        let (client, connection) =
            tokio_postgres::connect(&server.conninfo("tablesql"), NoTls).await?;
        let socket = tokio::spawn(connection);
        let running = tokio::spawn(async move { client.simple_query(LONG).await });
        server.until_running(1).await?;
        // Dropping the connection closes the socket mid-query.
        socket.abort();
        running.abort();
        // The server sees its client gone, and drops the statement.
        server.until_running(0).await?;
    }
    // The abandoned cross joins do not go on eating the server's CPU: a
    // scan still answers promptly. (Eight live ones would each hold a core
    // for minutes.) A step of one that does not yield (a hash table's
    // build) ends before it sees its statement dropped, so the server is
    // looked at second by second until it rests.
    let mut deadline = crate::wait::Deadline::new(
        Duration::from_secs(30),
        "the server at rest (< 50 ticks of CPU a second)",
    );
    loop {
        let cpu_before = cpu_ticks(server.child.id())?;
        tokio::time::sleep(Duration::from_secs(1)).await;
        let busy = cpu_ticks(server.child.id())?.saturating_sub(cpu_before);
        if busy < 50 {
            break;
        }
        deadline.again_async(format!("{busy} ticks in 1 s")).await?;
    }
    let client = server.connect().await?;
    let row = client
        .query_one("SELECT count(*) FROM registrations", &[])
        .await?;
    assert_eq!(row.get::<_, i64>(0), 1000);
    Ok(())
}

/// utime + stime of a process, in clock ticks (100 per second).
fn cpu_ticks(pid: u32) -> Result<u64, String> {
    let path = format!("/proc/{pid}/stat");
    let stat = std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?;
    // Fields after the command name, which is in parentheses.
    let rest = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .ok_or_else(|| format!("{path}: no command name"))?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<u64>().ok())
            .ok_or_else(|| format!("{path}: no field {} in {rest:?}", i + 3))
    };
    // utime and stime are fields 14 and 15 of stat, 12 and 13 after ')'.
    Ok(field(11)? + field(12)?)
}

/// The server's peak resident memory while `work` runs, sampled every
/// 20 ms, with what `work` gave.
async fn peak_while<T>(
    server: &Served,
    work: impl std::future::Future<Output = T>,
) -> Result<(T, u64), String> {
    tokio::pin!(work);
    let mut peak = server.rss_kib()?;
    let mut tick = tokio::time::interval(Duration::from_millis(20));
    loop {
        tokio::select! {
            out = &mut work => return Ok((out, peak.max(server.rss_kib()?))),
            _ = tick.tick() => peak = peak.max(server.rss_kib()?),
        }
    }
}

/// Under a small memory limit (48 MB in all, 16 MB a statement): a sort and
/// a GROUP BY of 3,000,000 rows, each bigger than the limit, spill to disk
/// and answer right; a hash join whose build side cannot fit (a hash join
/// does not spill) fails with 53200; another connection's point queries
/// answer all the while; and the server's resident memory stays under its
/// size before plus the limit plus a margin of 64 MiB (what the operators
/// hold between them: batches in flight, the allocator's slack).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statements_past_the_memory_limit_spill_or_fail_with_53200_while_others_answer()
-> TestResult {
    let _cpu = crate::exclusive();
    let server = serve(
        1000,
        &["--memory-limit", "48MB", "--statement-memory-limit", "16MB"],
    )?;
    let client = server.connect().await?;
    let before = server.rss_kib()?;
    // Point queries on a connection of their own until the big ones end.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let counted = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let so_far = || counted.load(std::sync::atomic::Ordering::SeqCst);
    let points = {
        let conninfo = server.conninfo("tablesql");
        let stop = stop.clone();
        let counted = counted.clone();
        tokio::spawn(async move {
            let client = connect(&conninfo).await?;
            let statement = client.prepare(POINT).await?;
            let mut answered = 0u64;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) && answered < 1_000_000 {
                let r = demo::registration(answered % 1000);
                let row = client
                    .query_one(&statement, &[&r.event, &r.distance, &r.bib])
                    .await?;
                if row.get::<_, &str>(0) != r.name {
                    return Err::<u64, Box<dyn std::error::Error + Send + Sync>>(
                        format!("wrong row for {answered}").into(),
                    );
                }
                answered += 1;
                counted.store(answered, std::sync::atomic::Ordering::SeqCst);
            }
            Ok(answered)
        })
    };
    let mut peak = before;
    let sort = "SELECT count(*), min(r)::BIGINT, max(r)::BIGINT FROM (SELECT x, row_number() OVER (ORDER BY x DESC) AS r \
                FROM generate_series(1, 3000000) AS t(x)) s";
    // Keys in no order (an odd multiplier modulo 2^32 is one to one), so
    // that the aggregate hashes rather than streams.
    let group = "SELECT count(*), sum(c)::BIGINT FROM (SELECT x * 2654435761 % 4294967296 AS k, \
                 count(*) AS c FROM generate_series(1, 3000000) AS t(x) GROUP BY 1) s";
    for (sql, expected) in [
        (sort, (3_000_000i64, 1i64, 3_000_000i64)),
        (group, (3_000_000, 3_000_000, 0)),
    ] {
        let at = so_far();
        let (row, rss) = peak_while(&server, client.query_one(sql, &[])).await?;
        assert!(so_far() > at, "no point query answered during {sql}");
        let row = row?;
        let got = match sql == sort {
            true => (
                row.get::<_, i64>(0),
                row.get::<_, i64>(1),
                row.get::<_, i64>(2),
            ),
            false => (row.get::<_, i64>(0), row.get::<_, i64>(1), 0),
        };
        assert_eq!(got, expected, "{sql}");
        peak = peak.max(rss);
        // It answered because it spilled: EXPLAIN ANALYZE counts the spills.
        let mut spills = 0u64;
        for message in client
            .simple_query(&format!("EXPLAIN ANALYZE {sql}"))
            .await?
        {
            if let SimpleQueryMessage::Row(row) = message {
                let text = row.get(1).unwrap_or_default();
                for (_, rest) in text
                    .match_indices("spill_count=")
                    .map(|(i, _)| text.split_at(i + 12))
                {
                    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
                    spills += digits.parse::<u64>().unwrap_or(0);
                }
            }
        }
        assert!(spills > 0, "{sql}: nothing spilled");
    }
    let join = "SELECT count(*) FROM generate_series(1, 3000000) AS a(x) \
                JOIN generate_series(1, 3000000) AS b(y) ON x = y";
    let at = so_far();
    let (refused, rss) = peak_while(&server, client.query_one(join, &[])).await?;
    let refused = refused.err().ok_or("the join fit under the limit")?;
    assert_eq!(code(&refused), "53200", "{refused:?}");
    // The session's limit refused it, before the total's.
    let said = refused.as_db_error().map(|e| e.message().to_owned());
    assert!(
        said.as_deref()
            .is_some_and(|m| m.contains("--statement-memory-limit")),
        "{refused:?}"
    );
    assert!(so_far() > at, "no point query answered during the join");
    peak = peak.max(rss);
    // The connection that was refused goes on.
    let one: i32 = client.query_one("SELECT 1::INT", &[]).await?.get(0);
    assert_eq!(one, 1);
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let answered = tokio::time::timeout(Duration::from_secs(60), points)
        .await??
        .map_err(|e| e.to_string())?;
    assert!(answered > 0, "no point query answered meanwhile");
    eprintln!("server RSS KiB: before {before}, peak {peak}; {answered} point queries meanwhile");
    let grown = peak.saturating_sub(before);
    assert!(
        grown < (48 + 64) * 1024,
        "server RSS grew {grown} KiB, past the limit and the margin"
    );
    assert!(!server.log().contains("panicked"), "{}", server.log());
    Ok(())
}
