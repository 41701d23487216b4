//! The protocol as drivers use it: prepared statements, SQLSTATEs,
//! settings and timeouts, cancel, cursors, the direct path, subqueries, and
//! the metadata queries of BI tools.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prepared_point_query_with_inferred_parameters() -> TestResult {
    let server = serve(1000, &[])?;
    let client = server.connect().await?;
    let statement = client.prepare(POINT).await?;
    assert_eq!(
        statement.params(),
        &[
            tokio_postgres::types::Type::TEXT,
            tokio_postgres::types::Type::TEXT,
            tokio_postgres::types::Type::INT4
        ]
    );
    for i in [0u64, 1, 17, 999] {
        let r = demo::registration(i);
        let rows = client
            .query(&statement, &[&r.event, &r.distance, &r.bib])
            .await?;
        assert_eq!(rows.len(), 1, "registration {i}");
        assert_eq!(rows[0].get::<_, &str>(0), r.name);
        assert_eq!(rows[0].get::<_, i32>(1), r.age);
    }
    let none = client
        .query(&statement, &[&"no such event", &"Full", &1i32])
        .await?;
    assert!(none.is_empty());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlstates_name_the_problem() -> TestResult {
    let server = serve(1000, &[])?;
    let client = server.connect().await?;
    let cases = [
        ("SELEC 1", "42601"),
        ("SELECT * FROM nope", "42P01"),
        ("SELECT nope FROM registrations", "42703"),
        (
            "SELECT name FROM registrations WHERE event = 'x' AND distance = 'Full' AND bib = 'seven'",
            "22P02",
        ),
        ("TRUNCATE registrations RESTART IDENTITY", "0A000"),
        (
            "DELETE FROM registrations WHERE bib IN (SELECT bib FROM registrations) LIMIT 1",
            "0A000",
        ),
        ("SHOW no_such_parameter", "42704"),
        ("FETCH 1 FROM no_such_cursor", "34000"),
        (
            "CREATE TABLE registrations (a INT NOT NULL, PRIMARY KEY (a)) WITH (partition_key = 'p', row_key = '{a}')",
            "42P07",
        ),
    ];
    for (sql, expected) in cases {
        let e = client.simple_query(sql).await.err().ok_or(sql)?;
        assert_eq!(code(&e), expected, "{sql}: {e:?}");
        // The extended protocol reports the same.
        if !sql.starts_with("CREATE") {
            let e = client.query(sql, &[]).await.err().ok_or(sql)?;
            assert_eq!(code(&e), expected, "extended {sql}: {e:?}");
        }
    }

    // The writes' SQLSTATEs: a row that exists (23505), a value over the
    // store's 64 KiB (54000), an ETag that is no longer the row's (40001), a
    // key column left NULL (23502).
    let r = demo::registration(0);
    let at = format!(
        "event = '{}' AND distance = '{}' AND bib = {}",
        r.event, r.distance, r.bib
    );
    let insert = "INSERT INTO registrations (event, distance, bib, name, gender, age";
    let writes = [
        (
            format!(
                "{insert}) VALUES ('{}', '{}', {}, '{}', '{}', {})",
                r.event, r.distance, r.bib, r.name, r.gender, r.age
            ),
            "23505",
        ),
        (
            format!("{insert}, club) VALUES ('Limits', '5K', 1, 'A', 'F', 30, repeat('x', 40000))"),
            "54000",
        ),
        (
            format!(
                "UPDATE registrations SET club = 'x' WHERE {at} AND _etag = 'W/\"datetime''2001-01-01T00%3A00%3A00Z''\"'"
            ),
            "40001",
        ),
        (
            "INSERT INTO registrations (event, distance, name, gender, age) VALUES ('Limits', '5K', 'A', 'F', 30)".to_owned(),
            "23502",
        ),
    ];
    for (sql, expected) in &writes {
        let e = client.simple_query(sql).await.err().ok_or(sql.clone())?;
        assert_eq!(code(&e), *expected, "{sql}: {e:?}");
        let e = client
            .execute(sql.as_str(), &[])
            .await
            .err()
            .ok_or(sql.clone())?;
        assert_eq!(code(&e), *expected, "extended {sql}: {e:?}");
    }
    let limits = client
        .query_one(
            "SELECT count(*) FROM registrations WHERE event = 'Limits'",
            &[],
        )
        .await?;
    assert_eq!(limits.get::<_, i64>(0), 0, "a refused write wrote nothing");

    // A failed transaction refuses everything until it ends.
    client.simple_query("BEGIN").await?;
    assert!(
        client
            .simple_query("SELECT nope FROM registrations")
            .await
            .is_err()
    );
    let e = client.simple_query("SELECT 1").await.err().ok_or("25P02")?;
    assert_eq!(code(&e), "25P02");
    client.simple_query("ROLLBACK").await?;
    client.simple_query("SELECT 1").await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_show_and_statement_timeout() -> TestResult {
    let server = serve(1000, &[])?;
    let client = server.connect().await?;
    client
        .simple_query("SET application_name = 'bi-tool'")
        .await?;
    let shown = client.query_one("SHOW application_name", &[]).await?;
    assert_eq!(shown.get::<_, &str>(0), "bi-tool");

    client.simple_query("SET statement_timeout = 300").await?;
    let started = Instant::now();
    let e = match client.simple_query(LONG).await {
        Ok(rows) => {
            return Err(format!(
                "no timeout (simple): {rows:?} after {:?}",
                started.elapsed()
            )
            .into());
        }
        Err(e) => e,
    };
    assert_eq!(code(&e), "57014", "{e:?}");
    assert!(e.to_string().contains("timeout") || format!("{e:?}").contains("timeout"));
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    // Prepared statements are bound by it too.
    let started = Instant::now();
    let e = match client.query(LONG, &[]).await {
        Ok(rows) => {
            return Err(format!(
                "no timeout (extended): {:?} after {:?}",
                rows.first().map(|r| r.get::<_, i64>(0)),
                started.elapsed()
            )
            .into());
        }
        Err(e) => e,
    };
    assert_eq!(code(&e), "57014");
    // Startup parameters set them too.
    let other = connect(&format!(
        "{} application_name=metabase options='-c statement_timeout=300'",
        server.conninfo("tablesql")
    ))
    .await?;
    let shown = other.query_one("SHOW application_name", &[]).await?;
    assert_eq!(shown.get::<_, &str>(0), "metabase");
    let e = other
        .simple_query(LONG)
        .await
        .err()
        .ok_or("no startup timeout")?;
    assert_eq!(code(&e), "57014", "{e:?}");
    // The connection goes on.
    client.simple_query("SET statement_timeout = 0").await?;
    let row = client.query_one("SELECT count(*) FROM events", &[]).await?;
    assert_eq!(row.get::<_, i64>(0), 12);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_request_stops_a_long_query() -> TestResult {
    let server = serve(1000, &[])?;
    let client = server.connect().await?;
    let token = client.cancel_token();
    // Cancelled once it runs: a cancel that lands after the statement is
    // counted running and before it takes its cancel signal is for no
    // statement, so it is sent again while the statement runs (the next
    // statement is sent only once this ends).
    let cancelling = async {
        server.until_running(1).await?;
        let mut deadline =
            crate::wait::Deadline::new(Duration::from_secs(60), "the long query cancelled");
        loop {
            server.cancel(&token).await?;
            let running = server.running()?;
            if running == 0.0 {
                return Ok::<(), Box<dyn std::error::Error>>(());
            }
            deadline.again_async(format!("{running} running")).await?;
        }
    };
    let started = Instant::now();
    let (answer, cancelled) = tokio::join!(client.simple_query(LONG), cancelling);
    cancelled?;
    let e = answer.err().ok_or("not cancelled")?;
    assert_eq!(code(&e), "57014", "{e:?}");
    assert!(started.elapsed() < Duration::from_secs(20));
    // A cancel is for the statement running when it arrives, not the next.
    let row = client.query_one("SELECT count(*) FROM events", &[]).await?;
    assert_eq!(row.get::<_, i64>(0), 12);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cursors_declare_fetch_close() -> TestResult {
    let server = serve(1000, &[])?;
    let client = server.connect().await?;
    client.simple_query("BEGIN").await?;
    client
        .simple_query("DECLARE c CURSOR FOR SELECT bib FROM registrations WHERE event = '2012 Boston Marathon' AND distance = 'Full' ORDER BY bib")
        .await?;
    let bibs = |messages: Vec<SimpleQueryMessage>| -> Vec<String> {
        messages
            .into_iter()
            .filter_map(|m| match m {
                SimpleQueryMessage::Row(r) => r.get(0).map(str::to_owned),
                _ => None,
            })
            .collect()
    };
    assert_eq!(
        bibs(client.simple_query("FETCH 5 FROM c").await?),
        ["1", "2", "3", "4", "5"]
    );
    assert_eq!(bibs(client.simple_query("FETCH NEXT FROM c").await?), ["6"]);
    let rest = bibs(client.simple_query("FETCH ALL FROM c").await?);
    assert_eq!(rest.len(), 84 - 6);
    assert!(bibs(client.simple_query("FETCH 5 FROM c").await?).is_empty());
    client.simple_query("CLOSE c").await?;
    let e = client
        .simple_query("FETCH 1 FROM c")
        .await
        .err()
        .ok_or("closed")?;
    assert_eq!(code(&e), "34000");
    client.simple_query("ROLLBACK").await?;

    // A cancel sent while the connection is idle, or while it ran another
    // statement, is not the cursor's: its next FETCH goes on. (The cursor's
    // stream has batches still to compute: a join of 12,000 rows.)
    client.simple_query("BEGIN").await?;
    client
        .simple_query("DECLARE d CURSOR FOR SELECT r.bib FROM registrations r CROSS JOIN events e")
        .await?;
    assert_eq!(bibs(client.simple_query("FETCH 5 FROM d").await?).len(), 5);
    for _ in 0..3 {
        server.cancel(&client.cancel_token()).await?;
        client.simple_query("SELECT 1").await?;
    }
    let rest = bibs(client.simple_query("FETCH ALL FROM d").await?);
    assert_eq!(rest.len(), 12_000 - 5);
    client.simple_query("COMMIT").await?;

    // The same for a protocol portal read with a row limit (a driver's fetch
    // size): each Execute that resumes it is a statement of its own.
    let mut client = client;
    let token = client.cancel_token();
    let tx = client.transaction().await?;
    let statement = tx
        .prepare("SELECT r.bib FROM registrations r CROSS JOIN events e")
        .await?;
    let portal = tx.bind(&statement, &[]).await?;
    assert_eq!(tx.query_portal(&portal, 5).await?.len(), 5);
    for _ in 0..3 {
        server.cancel(&token).await?;
        tx.simple_query("SET application_name = 'between'").await?;
    }
    assert_eq!(tx.query_portal(&portal, 0).await?.len(), 12_000 - 5);
    tx.commit().await?;
    Ok(())
}

/// The metadata queries BI tools send when they connect and browse (taken
/// from DBeaver's, Metabase's and Grafana's PostgreSQL drivers): each must
/// run, and the table listings must find the demo tables.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bi_tool_metadata_queries() -> TestResult {
    let server = serve(1000, &[])?;
    let client = server.connect().await?;
    let startup = [
        // DBeaver (pgjdbc) at connect
        "SET extra_float_digits = 3",
        "SET application_name = 'DBeaver 25.1.5 - Main <tablesql>'",
        "SELECT current_schema(), session_user",
        "SHOW search_path",
        "SELECT version()",
        "SELECT n.oid, n.*, d.description FROM pg_catalog.pg_namespace n LEFT OUTER JOIN pg_catalog.pg_description d ON d.objoid = n.oid AND d.objsubid = 0 AND d.classoid = 'pg_namespace'::regclass ORDER BY nspname",
        "SELECT db.oid, db.* FROM pg_catalog.pg_database db WHERE datname = 'datafusion'",
        "SELECT * FROM pg_catalog.pg_settings WHERE name = 'standard_conforming_strings'",
        // Metabase
        "SHOW TRANSACTION ISOLATION LEVEL",
        "SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL READ COMMITTED",
        "show timezone",
        // Grafana
        "SELECT current_setting('server_version_num')::int",
    ];
    for sql in startup {
        client
            .simple_query(sql)
            .await
            .map_err(|e| format!("{sql}: {e:?}"))?;
    }
    let listings = [
        // DBeaver's table list of a schema
        "SELECT c.oid, c.relname, c.relkind FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'public' AND c.relkind NOT IN ('i', 'I', 'c') ORDER BY c.relname",
        // Metabase's table list
        r#"SELECT "n"."nspname" AS "schema", "c"."relname" AS "name", CASE "c"."relkind" WHEN 'r' THEN 'TABLE' WHEN 'v' THEN 'VIEW' ELSE NULL END AS "type", "d"."description" AS "description" FROM "pg_catalog"."pg_class" AS "c" INNER JOIN "pg_catalog"."pg_namespace" AS "n" ON "c"."relnamespace" = "n"."oid" LEFT JOIN "pg_catalog"."pg_description" AS "d" ON ("c"."oid" = "d"."objoid") AND ("d"."objsubid" = 0) WHERE ("n"."nspname" !~ '^pg_') AND ("n"."nspname" <> 'information_schema') AND c.relkind IN ('r', 'p', 'v', 'f', 'm') AND ("n"."nspname" IN ('public')) ORDER BY "type" ASC, "schema" ASC, "name" ASC"#,
        // Grafana's table list
        "SELECT quote_ident(table_name) AS \"table\" FROM information_schema.tables WHERE quote_ident(table_schema) NOT IN ('information_schema', 'pg_catalog') ORDER BY 1",
    ];
    for sql in listings {
        let rows = client
            .simple_query(sql)
            .await
            .map_err(|e| format!("{sql}: {e:?}"))?;
        let found = rows.iter().any(|m| match m {
            SimpleQueryMessage::Row(r) => (0..r.len()).any(|i| r.get(i) == Some("registrations")),
            _ => false,
        });
        assert!(found, "registrations not listed by {sql}");
    }
    // Column metadata (DBeaver, Grafana).
    let columns = client
        .query(
            "SELECT column_name, data_type FROM information_schema.columns WHERE table_schema = 'public' AND table_name = 'registrations' ORDER BY ordinal_position",
            &[],
        )
        .await?;
    let names: Vec<&str> = columns.iter().map(|r| r.get(0)).collect();
    assert_eq!(
        names,
        [
            "event",
            "distance",
            "bib",
            "name",
            "gender",
            "age",
            "finish",
            "registered",
            // Not the storage columns every mapped table carries: as
            // PostgreSQL's system columns, they are not listed.
            "club"
        ]
    );
    Ok(())
}

/// Point and range queries take the direct path (no physical planner); the
/// same queries with a filter the scan cannot answer (`random() >= 0`) go
/// through DataFusion. Both must answer alike, over both protocols.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_path_answers_as_datafusion_does() -> TestResult {
    let server = serve(1000, &[])?;
    let client = server.connect().await?;
    let queries = [
        "SELECT name, age FROM registrations WHERE event = '2012 Boston Marathon' AND distance = 'Full' AND bib = 7",
        "SELECT * FROM registrations WHERE event = '2012 Boston Marathon' AND distance = 'Full' AND bib IN (3, 9, 400)",
        "SELECT club, bib FROM registrations WHERE event = '2013 Chicago Marathon' AND distance = 'Half' AND bib BETWEEN 10 AND 20",
        "SELECT bib FROM registrations WHERE event = '2014 Berlin Marathon' AND distance = '10K' AND bib > 80",
        "SELECT \"RowKey\", name FROM registrations WHERE event = '2011 New York City Marathon' AND distance = 'Full' AND bib = 1",
        "SELECT name FROM registrations WHERE event = 'nowhere' AND distance = 'Full' AND bib = 1",
    ];
    let rows = |messages: Vec<SimpleQueryMessage>| -> Vec<Vec<Option<String>>> {
        let mut rows: Vec<Vec<Option<String>>> = messages
            .into_iter()
            .filter_map(|m| match m {
                SimpleQueryMessage::Row(r) => {
                    Some((0..r.len()).map(|i| r.get(i).map(str::to_owned)).collect())
                }
                _ => None,
            })
            .collect();
        rows.sort();
        rows
    };
    for sql in queries {
        let direct = rows(client.simple_query(sql).await?);
        let planned = rows(
            client
                .simple_query(&format!("{sql} AND random() >= 0.0"))
                .await?,
        );
        assert_eq!(direct, planned, "{sql}");
        let explain = client.simple_query(&format!("EXPLAIN {sql}")).await?;
        let plan = format!("{:?}", rows(explain));
        assert!(
            !plan.contains("FilterExec"),
            "{sql} is not all pushed: {plan}"
        );
    }
    // Prepared, with parameters: the same rows as the literal query.
    let statement = client
        .prepare("SELECT bib, name FROM registrations WHERE event = $1 AND distance = $2 AND bib >= $3 AND bib < $4")
        .await?;
    let bound = client
        .query(
            &statement,
            &[&"2012 Boston Marathon", &"Full", &5i32, &9i32],
        )
        .await?;
    let literal = rows(
        client
            .simple_query("SELECT bib, name FROM registrations WHERE event = '2012 Boston Marathon' AND distance = 'Full' AND bib >= 5 AND bib < 9 AND random() >= 0.0")
            .await?,
    );
    let bound: Vec<Vec<Option<String>>> = bound
        .iter()
        .map(|r| {
            vec![
                Some(r.get::<_, i32>(0).to_string()),
                Some(r.get::<_, String>(1)),
            ]
        })
        .collect();
    assert_eq!(bound.len(), 4);
    assert_eq!(bound, literal);
    Ok(())
}

/// The statements of issue 13: over the wire a correlated subquery in a
/// SELECT list came back NULL (a compatibility rewrite meant for catalog
/// queries). Simple and extended protocol, tokio-postgres and the real psql.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn correlated_subqueries_answer_over_the_wire() -> TestResult {
    let server = serve(1000, &[])?;
    let client = server.connect().await?;
    client
        .batch_execute(
            "CREATE TABLE t1 (k INT NOT NULL, a INT, b INT) WITH (storage_table = 'WireT1', partition_key = 'P', row_key = '{k:03}'); \
             INSERT INTO t1 (k, a, b) VALUES (1, 1, 10), (2, 1, 20), (3, 2, 30), (4, NULL, NULL)",
        )
        .await?;
    let by_b = "SELECT b, (SELECT count(*) FROM t1 AS x WHERE x.b < t1.b) FROM t1 ORDER BY k";
    let by_a = "SELECT b, (SELECT count(*) FROM t1 AS x WHERE x.a = t1.a) FROM t1 ORDER BY k";
    let counts = |rows: Vec<tokio_postgres::Row>| -> Vec<i64> {
        rows.iter().map(|r| r.get::<_, i64>(1)).collect()
    };
    assert_eq!(counts(client.query(by_b, &[]).await?), [0, 1, 2, 0]);
    assert_eq!(counts(client.query(by_a, &[]).await?), [2, 2, 1, 0]);
    let simple = client.simple_query(by_b).await?;
    let texts: Vec<Option<String>> = simple
        .iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(r) => Some(r.get(1).map(str::to_owned)),
            _ => None,
        })
        .collect();
    assert_eq!(
        texts,
        [Some("0"), Some("1"), Some("2"), Some("0")].map(|v| v.map(String::from))
    );
    // Two in one list: both named, both counted.
    let both = client
        .query(
            "SELECT (SELECT count(*) FROM t1 AS x WHERE x.b < t1.b) AS lt, (SELECT count(*) FROM t1 AS x WHERE x.b > t1.b) AS gt FROM t1 ORDER BY k",
            &[],
        )
        .await?;
    let pairs: Vec<(i64, i64)> = both.iter().map(|r| (r.get("lt"), r.get("gt"))).collect();
    assert_eq!(pairs, [(0, 2), (1, 1), (2, 0), (0, 0)]);
    // A parameter inside a subquery evaluated per row is bound like any
    // other (the extended protocol plans before it binds).
    let bounded = client
        .query(
            "SELECT b, (SELECT count(*) FROM t1 AS x WHERE x.b < t1.b AND x.a = $1) FROM t1 ORDER BY k",
            &[&1i32],
        )
        .await?;
    assert_eq!(counts(bounded), [0, 1, 2, 0]);
    let out = server.psql("", &["-A", "-t", "-c", by_a])?;
    assert_eq!(text(&out), "10|2\n20|2\n30|1\n|0\n", "{}", text(&out));
    Ok(())
}

/// RETURNING as drivers use it: rows and the write's tag by the simple
/// protocol, a prepared INSERT's new key by the extended one (described
/// before it runs), and the ETag a write returns taken by the next
/// conditional write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn returning_answers_rows_under_the_writes_tag() -> TestResult {
    use tokio_postgres::SimpleQueryMessage;
    let server = serve(1000, &[])?;
    let client = server.connect().await?;
    client
        .batch_execute("CREATE TABLE notes (id SERIAL PRIMARY KEY, body TEXT)")
        .await?;
    let answered = client
        .simple_query("INSERT INTO notes (body) VALUES ('a'), ('b') RETURNING id")
        .await?;
    let mut ids = Vec::new();
    let mut tag = None;
    for m in answered {
        match m {
            SimpleQueryMessage::Row(r) => ids.push(r.get(0).map(str::to_owned)),
            SimpleQueryMessage::CommandComplete(n) => tag = Some(n),
            _ => {}
        }
    }
    assert_eq!(ids, [Some("1".to_owned()), Some("2".to_owned())]);
    assert_eq!(tag, Some(2));

    let insert = client
        .prepare("INSERT INTO notes (body) VALUES ($1) RETURNING id, body, _etag")
        .await?;
    assert_eq!(
        insert
            .columns()
            .iter()
            .map(|c| c.name())
            .collect::<Vec<_>>(),
        ["id", "body", "_etag"]
    );
    let row = client.query_one(&insert, &[&"c"]).await?;
    assert_eq!(row.get::<_, i32>(0), 3);
    let etag: String = row.get(2);
    // The ETag returned is the stored row's: a write conditional on it lands.
    let updated = client
        .execute(
            "UPDATE notes SET body = 'c2' WHERE id = 3 AND _etag = $1",
            &[&etag],
        )
        .await?;
    assert_eq!(updated, 1);
    let stale = client
        .execute(
            "UPDATE notes SET body = 'c3' WHERE id = 3 AND _etag = $1",
            &[&etag],
        )
        .await;
    assert!(stale.is_err(), "a stale ETag must not write");

    let deleted = client
        .query("DELETE FROM notes WHERE id <= $1 RETURNING body", &[&2i32])
        .await?;
    let mut bodies: Vec<String> = deleted.iter().map(|r| r.get(0)).collect();
    bodies.sort();
    assert_eq!(bodies, ["a", "b"]);
    let left = client.query_one("SELECT count(*) FROM notes", &[]).await?;
    assert_eq!(left.get::<_, i64>(0), 1);
    Ok(())
}
