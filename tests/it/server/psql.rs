//! Through the real `psql` binary: describing tables, command tags,
//! the scan policy, token paging, ANALYZE, index DDL, the version, DROP TABLE.

use super::*;

#[test]
fn psql_lists_and_describes_tables() -> TestResult {
    let server = serve(1000, &[])?;
    let dt = server.psql("", &["-c", "\\dt"])?;
    let shown = text(&dt);
    assert!(dt.status.success(), "{shown}");
    assert!(
        shown.contains("registrations") && shown.contains("events"),
        "{shown}"
    );

    let d = server.psql("", &["-c", "\\d registrations"])?;
    let shown = text(&d);
    assert!(d.status.success(), "{shown}");
    for (column, pg_type) in [
        ("event", "text"),
        ("bib", "integer"),
        ("finish", "bigint"),
        ("registered", "timestamp"),
    ] {
        assert!(
            shown
                .lines()
                .any(|l| l.trim_start().starts_with(column) && l.contains(pg_type)),
            "{column} {pg_type} in:\n{shown}"
        );
    }
    for meta in ["\\l", "\\dn"] {
        let out = server.psql("", &["-c", meta])?;
        assert!(out.status.success(), "{meta}: {}", text(&out));
    }
    assert!(text(&server.psql("", &["-c", "\\dn"])?).contains("public"));

    // EXPLAIN over the wire shows the access path.
    let explain = server.psql(
        "",
        &[
            "-c",
            "EXPLAIN SELECT name FROM registrations WHERE event = '2012 Boston Marathon' AND distance = 'Full' AND bib = 7",
        ],
    )?;
    assert!(
        text(&explain).contains("access=point"),
        "{}",
        text(&explain)
    );

    // psql's FETCH_COUNT reads through a cursor, FETCH_COUNT rows at a time.
    let fetched = server.psql(
        "",
        &[
            "-v",
            "FETCH_COUNT=100",
            "-A",
            "-t",
            "-c",
            "SELECT bib FROM registrations WHERE event = '2012 Boston Marathon' AND distance = 'Full' ORDER BY bib",
        ],
    )?;
    let bibs: Vec<&str> = std::str::from_utf8(&fetched.stdout)?.lines().collect();
    assert!(fetched.status.success(), "{}", text(&fetched));
    assert_eq!(bibs.len(), 84, "{}", text(&fetched));
    assert_eq!(bibs.first(), Some(&"1"));
    Ok(())
}

#[test]
fn psql_command_tags_and_transactions() -> TestResult {
    let server = serve(1000, &[])?;
    let ddl = "CREATE TABLE runners (id INT NOT NULL, name TEXT, PRIMARY KEY (id)) WITH (partition_key = 'R', row_key = '{id:06}')";
    let out = server.psql("", &["-c", ddl, "-c", "DROP TABLE runners"])?;
    let shown = text(&out);
    assert!(out.status.success(), "{shown}");
    assert_eq!(
        std::str::from_utf8(&out.stdout)?
            .lines()
            .collect::<Vec<_>>(),
        ["CREATE TABLE", "DROP TABLE"],
        "{shown}"
    );

    // A block's DDL and its rows are one: after ROLLBACK neither the
    // table nor the row is there; after COMMIT (one query string, whose
    // status pgwire reports at its end) both are.
    let write = "INSERT INTO registrations (event, distance, bib, name, gender, age) VALUES ('Block', '5K', 1, 'N', 'F', 30)";
    let count =
        "SELECT count(*) AS blocked FROM registrations WHERE event = 'Block' AND distance = '5K'";
    let out = server.psql(
        "",
        &[
            "-c",
            "BEGIN",
            "-c",
            write,
            "-c",
            &ddl.replace("runners", "walkers"),
            "-c",
            "ROLLBACK",
            "-c",
            "\\dt",
            "-c",
            count,
        ],
    )?;
    let shown = text(&out);
    assert!(out.status.success(), "{shown}");
    assert!(!shown.contains("walkers"), "{shown}");
    assert!(shown.contains("blocked \n---------\n       0"), "{shown}");
    let out = server.psql(
        "",
        &[
            "-c",
            &format!(
                "BEGIN; {write}; {}; COMMIT",
                ddl.replace("runners", "walkers")
            ),
            "-c",
            "\\dt",
            "-c",
            count,
        ],
    )?;
    let shown = text(&out);
    assert!(out.status.success(), "{shown}");
    assert!(shown.contains("walkers"), "{shown}");
    assert!(shown.contains("blocked \n---------\n       1"), "{shown}");

    // A block's DDL, as ORMs and migration tools send it (SQLAlchemy's
    // create_all), is there after COMMIT.
    let out = server.psql(
        "",
        &[
            "-c",
            &format!("BEGIN; {}; COMMIT", ddl.replace("runners", "joggers")),
            "-c",
            "\\dt",
        ],
    )?;
    let shown = text(&out);
    assert!(out.status.success(), "{shown}");
    assert!(shown.contains("joggers"), "{shown}");

    // Writes answer with PostgreSQL's tags, not with a result set.
    let row = |bib: u32| format!("('Tags Test', '5K', {bib}, 'N{bib}', 'F', 30)");
    let out = server.psql(
        "",
        &[
            "-c",
            &format!(
                "INSERT INTO registrations (event, distance, bib, name, gender, age) VALUES {}, {}",
                row(1),
                row(2)
            ),
            "-c",
            "UPDATE registrations SET club = 'C' WHERE event = 'Tags Test' AND distance = '5K'",
            "-c",
            "DELETE FROM registrations WHERE event = 'Tags Test' AND distance = '5K' AND bib = 1",
            "-c",
            "SELECT bib, club FROM registrations WHERE event = 'Tags Test'",
        ],
    )?;
    let shown = text(&out);
    assert!(out.status.success(), "{shown}");
    let lines: Vec<&str> = std::str::from_utf8(&out.stdout)?.lines().collect();
    assert_eq!(
        lines[..3],
        ["INSERT 0 2", "UPDATE 2", "DELETE 1"],
        "{shown}"
    );
    assert!(shown.contains("2 | C"), "{shown}");

    // A write in a transaction block is buffered: ROLLBACK discards it.
    let out = server.psql(
        "",
        &[
            "-c",
            "BEGIN",
            "-c",
            &format!(
                "INSERT INTO registrations (event, distance, bib, name, gender, age) VALUES {}",
                row(3)
            ),
            "-c",
            "SELECT count(*) AS n FROM registrations WHERE event = 'Tags Test'",
            "-c",
            "ROLLBACK",
            "-c",
            "SELECT count(*) AS n FROM registrations WHERE event = 'Tags Test'",
        ],
    )?;
    let shown = text(&out);
    assert!(out.status.success(), "{shown}");
    let counts: Vec<&str> = std::str::from_utf8(&out.stdout)?
        .lines()
        .map(str::trim)
        .filter(|l| l.parse::<u32>().is_ok())
        .collect();
    // The transaction saw its own row; after ROLLBACK only bib 2 remains.
    assert_eq!(counts, ["2", "1"], "{shown}");

    // A block over two partitions commits both; a block failed by a
    // duplicate key (23505) ends in ROLLBACK, and nothing of it is written.
    let other = |bib: u32| format!("('Tags Test', '10K', {bib}, 'N{bib}', 'F', 30)");
    let insert = |values: String| {
        format!(
            "INSERT INTO registrations (event, distance, bib, name, gender, age) VALUES {values}"
        )
    };
    let out = server.psql(
        "",
        &[
            "-v",
            "ON_ERROR_STOP=0",
            "-v",
            "VERBOSITY=verbose",
            "-c",
            "BEGIN",
            "-c",
            &insert(row(4)),
            "-c",
            &insert(other(5)),
            "-c",
            "COMMIT",
            "-c",
            "BEGIN",
            "-c",
            &insert(other(6)),
            "-c",
            &insert(row(2)),
            "-c",
            "COMMIT",
            "-c",
            "SELECT count(*) AS n FROM registrations WHERE event = 'Tags Test'",
        ],
    )?;
    let shown = text(&out);
    assert!(shown.contains("23505"), "{shown}");
    assert!(
        shown.contains("ROLLBACK"),
        "the COMMIT of a failed block: {shown}"
    );
    assert!(
        std::str::from_utf8(&out.stdout)?
            .lines()
            .any(|l| l.trim() == "3"),
        "bibs 2, 4 and 5, and nothing of the failed block: {shown}"
    );

    // EXPLAIN ANALYZE runs its statement, so of a write it is a write: in a
    // block it is buffered, and ROLLBACK discards it.
    let out = server.psql(
        "",
        &[
            "-c",
            "BEGIN; EXPLAIN ANALYZE DELETE FROM registrations WHERE event = 'Tags Test'; ROLLBACK",
            "-c",
            "SELECT count(*) AS n FROM registrations WHERE event = 'Tags Test'",
        ],
    )?;
    let shown = text(&out);
    assert!(out.status.success(), "{shown}");
    assert!(shown.contains("DmlExec: op=delete"), "{shown}");
    assert!(
        std::str::from_utf8(&out.stdout)?
            .lines()
            .any(|l| l.trim() == "3"),
        "the rolled-back DELETE removed nothing: {shown}"
    );

    // A SELECT before a write in one query string shows the rows as they
    // were when it ran, though its rows are sent after the write.
    // (Enough rows that the SELECT's scan has pages left to read when the
    // DELETE runs.)
    let out = server.psql(
        "",
        &[
            "-c",
            "INSERT INTO registrations (event, distance, bib, name, gender, age) SELECT 'Many', '1K', value, 'N', 'F', 30 FROM generate_series(1, 6000)",
            "-c",
            "SELECT bib FROM registrations WHERE event = 'Many'; DELETE FROM registrations WHERE event = 'Many'",
        ],
    )?;
    let shown = text(&out);
    assert!(out.status.success(), "{shown}");
    let stdout = std::str::from_utf8(&out.stdout)?;
    assert!(stdout.contains("INSERT 0 6000"), "{shown}");
    assert!(
        stdout.contains("(6000 rows)"),
        "the SELECT saw every row: {shown}"
    );
    assert!(stdout.contains("DELETE 6000"), "{shown}");
    Ok(())
}

/// DROP TABLE as PostgreSQL answers it: IF EXISTS of a missing table is a
/// notice, a missing table 42P01, a storage table without a mapping 0A000.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drop_table_answers_as_postgresql() -> TestResult {
    let server = serve(1000, &[])?;
    let client = server.connect().await?;
    client.batch_execute("DROP TABLE IF EXISTS nosuch").await?;
    let e = client
        .batch_execute("DROP TABLE nosuch")
        .await
        .err()
        .ok_or("DROP TABLE of a missing table succeeded")?;
    assert_eq!(code(&e), "42P01", "{e}");
    let e = client
        .batch_execute("DROP TABLE raw.registrations")
        .await
        .err()
        .ok_or("DROP TABLE of a storage table succeeded")?;
    assert_eq!(code(&e), "0A000", "{e}");
    let out = server.psql("", &["-c", "DROP TABLE IF EXISTS nosuch"])?;
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("NOTICE:  table \"nosuch\" does not exist, skipping"),
        "{}",
        text(&out)
    );
    Ok(())
}

/// Notices carry PostgreSQL's SQLSTATE (psql shows it at VERBOSITY
/// verbose): IF NOT EXISTS of an existing relation is 42P07, IF EXISTS of a
/// missing one 00000.
#[test]
fn notices_carry_their_sqlstate() -> TestResult {
    let server = serve(1000, &[])?;
    let out = server.psql(
        "",
        &[
            "-v",
            "VERBOSITY=verbose",
            "-c",
            "CREATE SEQUENCE notice_seq",
            "-c",
            "CREATE SEQUENCE IF NOT EXISTS notice_seq",
            "-c",
            "DROP TABLE IF EXISTS nosuch",
        ],
    )?;
    let said = text(&out);
    assert!(out.status.success(), "{said}");
    assert!(
        said.contains("NOTICE:  42P07: relation \"notice_seq\" already exists, skipping"),
        "{said}"
    );
    assert!(
        said.contains("NOTICE:  00000: table \"nosuch\" does not exist, skipping"),
        "{said}"
    );
    Ok(())
}

#[test]
fn scan_policy_in_psql() -> TestResult {
    let server = serve(1000, &[])?;
    // warn, the default, is quiet over a table this small, as PostgreSQL
    // is: the rows and nothing on psql's stderr.
    let out = server.psql("", &["-c", "SELECT count(name) FROM registrations"])?;
    let shown = text(&out);
    assert!(out.status.success() && out.stderr.is_empty(), "{shown}");
    assert!(
        std::str::from_utf8(&out.stdout)?.contains("1000"),
        "{shown}"
    );
    // Where the kept counts pass tablesql.scan_warn_entities: a notice.
    let out = server.psql(
        "",
        &[
            "-c",
            "SET tablesql.scan_warn_entities = 1000",
            "-c",
            "SELECT count(name) FROM registrations",
        ],
    )?;
    let shown = text(&out);
    assert!(out.status.success(), "{shown}");
    let stderr = std::str::from_utf8(&out.stderr)?;
    assert!(
        stderr.contains("NOTICE:  the statement reads every partition of table registrations: a condition on event, distance reads one partition, and on bib as well one row (tablesql.scan_policy = warn)"),
        "{shown}"
    );
    // A query that fixes its partition has nothing to say.
    let out = server.psql(
        "",
        &["-c", "SELECT count(name) FROM registrations WHERE event = '2014 Berlin Marathon' AND distance = 'Full'"],
    )?;
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "{}",
        text(&out)
    );

    // deny: refused with 54000, naming the key columns; a point still runs.
    let out = server.psql(
        "",
        &[
            "-v",
            "ON_ERROR_STOP=0",
            "-v",
            "VERBOSITY=verbose",
            "-c",
            "SET tablesql.scan_policy = deny",
            "-c",
            "SHOW tablesql.scan_policy",
            "-c",
            "SELECT name FROM registrations WHERE bib = 7",
            "-c",
            "SELECT name FROM registrations WHERE event = '2012 Boston Marathon' AND distance = 'Half' AND bib = 7",
        ],
    )?;
    let shown = text(&out);
    assert!(shown.contains("deny"), "{shown}");
    assert!(
        shown.contains("ERROR:  54000: the statement reads every partition of table registrations: a condition on event, distance reads one partition, and on bib as well one row; tablesql.scan_policy = deny refuses it"),
        "{shown}"
    );
    assert!(shown.contains("(1 row)"), "{shown}");
    // A bad value is refused.
    let out = server.psql("", &["-c", "SET tablesql.scan_policy = never"])?;
    assert!(!out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("allow, warn or deny"), "{}", text(&out));
    Ok(())
}

/// psql's options for pages of 7 rows, unaligned, with full scans allowed.
const PAGED_7: [&str; 5] = [
    "-At",
    "-c",
    "SET tablesql.scan_policy = allow",
    "-c",
    "SET tablesql.page_size = 7",
];

/// Token paging in psql: `SET tablesql.page_size`, a query, the next
/// page's token from `SHOW tablesql.next_page_token`, resumed in another
/// connection; every row comes once. Bad tokens get their SQLSTATEs.
#[test]
fn token_paging_in_psql() -> TestResult {
    let server = serve(1000, &[])?;
    let query = "SELECT event, distance, bib, age FROM registrations WHERE age BETWEEN 40 AND 44";
    // One connection: pages of 7, resumed from `token`, then SHOW of the next token.
    let paged = |options: &[&str], token: &str, sql: &str, show: bool| {
        let resume = format!("SET tablesql.page_token = '{token}'");
        let mut args = options.to_vec();
        args.extend([
            "-c",
            "SET tablesql.scan_policy = allow",
            "-c",
            "SET tablesql.page_size = 7",
            "-c",
            &resume,
            "-c",
            sql,
        ]);
        if show {
            args.extend(["-c", "SHOW tablesql.next_page_token"]);
        }
        server.psql("", &args)
    };
    let lines = |out: &std::process::Output| -> Vec<String> {
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| !l.is_empty())
            .map(str::to_owned)
            .collect()
    };
    let whole = server.psql(
        "",
        &["-At", "-c", "SET tablesql.scan_policy = allow", "-c", query],
    )?;
    assert!(whole.status.success(), "{}", text(&whole));
    let mut want = lines(&whole);
    want.retain(|l| l != "SET");
    assert!(want.len() > 20, "{}", text(&whole));

    let mut got: Vec<String> = Vec::new();
    let mut token = String::new();
    let mut pages = 0;
    // Each page in a new connection: the token alone carries the position.
    loop {
        let out = paged(&["-At"], &token, query, true)?;
        assert!(out.status.success(), "{}", text(&out));
        let mut rows = lines(&out);
        rows.retain(|l| l != "SET");
        let next = rows.pop().unwrap_or_default();
        assert!(rows.len() <= 7, "{}", text(&out));
        got.extend(rows);
        pages += 1;
        if next.contains('|') || next.is_empty() {
            // The last page: SHOW printed an empty token, and psql an empty line.
            if next.contains('|') {
                got.push(next);
            }
            break;
        }
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(&format!("SET tablesql.page_token = '{next}'")),
            "{stderr}"
        );
        token = next;
        assert!(pages <= want.len(), "more pages than rows");
    }
    got.sort();
    want.sort();
    assert_eq!(got, want);
    assert!(pages >= 3, "{pages} pages");

    // A cursor is never paged: FETCH takes its rows in its own steps.
    let declare = format!("DECLARE c CURSOR FOR {query}");
    let fetch = format!("BEGIN; {declare}; FETCH 20 FROM c; COMMIT");
    let out = server.psql("", &[&PAGED_7[..], &["-c", &fetch]].concat())?;
    let fetched: Vec<String> = lines(&out)
        .into_iter()
        .filter(|l| l.contains('|'))
        .collect();
    assert_eq!(fetched.len(), 20, "{}", text(&out));

    // Bad tokens, each with its SQLSTATE.
    let first = paged(&["-At"], "", query, true)?;
    let token = lines(&first).pop().unwrap_or_default();
    let mut tampered = token.clone().into_bytes();
    let i = tampered.len() / 2;
    tampered[i] = if tampered[i] == b'A' { b'B' } else { b'A' };
    let tampered = String::from_utf8(tampered)?;
    let truncated = &token[..token.len() - 4];
    // Another server over a copy of the data, but a store of its own.
    let other = serve(1000, &[])?;
    let show = ["-c", query, "-c", "SHOW tablesql.next_page_token"];
    let out = other.psql("", &[&PAGED_7[..], &show].concat())?;
    let foreign = lines(&out).pop().unwrap_or_default();
    assert!(!foreign.is_empty() && foreign != token, "{}", text(&out));
    for (bad, sql, expected) in [
        (
            foreign.as_str(),
            query,
            "ERROR:  22023: page token was issued by another store",
        ),
        (
            tampered.as_str(),
            query,
            "ERROR:  22023: page token has been altered",
        ),
        (truncated, query, "ERROR:  22P02: invalid page token"),
        (
            token.as_str(),
            "SELECT bib FROM registrations WHERE age > 80",
            "ERROR:  22023: page token belongs to another statement",
        ),
    ] {
        let out = paged(&["-v", "VERBOSITY=verbose"], bad, sql, false)?;
        assert!(!out.status.success(), "{}", text(&out));
        assert!(text(&out).contains(expected), "{}", text(&out));
    }
    Ok(())
}

/// `ANALYZE` over the wire: its tag, its notice, and the plans after it.
#[test]
fn analyze_in_psql() -> TestResult {
    let server = serve(1000, &[])?;
    let out = server.psql(
        "",
        &[
            "-c",
            "SET tablesql.guidepost_every = 50",
            "-c",
            "ANALYZE registrations",
            "-c",
            "SET tablesql.scan_policy = allow",
            "-c",
            "EXPLAIN SELECT count(*) FROM registrations",
        ],
    )?;
    let shown = text(&out);
    assert!(out.status.success(), "{shown}");
    assert!(shown.contains("ANALYZE"), "{shown}");
    assert!(
        shown.contains("NOTICE:  analyzed registrations: 12 partitions, 2000 entities"),
        "{shown}"
    );
    assert!(shown.contains("fanout=chunks("), "{shown}");
    assert!(
        shown.contains("estimate=[partitions=12 entities="),
        "{shown}"
    );
    let out = server.psql("", &["-v", "VERBOSITY=verbose", "-c", "ANALYZE nosuch"])?;
    assert!(
        text(&out).contains("ERROR:  42P01: table nosuch is not in the catalog"),
        "{}",
        text(&out)
    );
    Ok(())
}

/// Index DDL and upkeep from psql: `CREATE INDEX` answers with its tag and
/// the counts as a notice, the planner reads the new index at once,
/// `tablesql_check_index` reports it whole, and `DROP INDEX ... CASCADE`
/// takes its rows along.
#[test]
fn index_ddl_in_psql() -> TestResult {
    let server = serve(1000, &[])?;
    let out = server.psql(
        "",
        &[
            "-c",
            "CREATE INDEX by_name ON registrations (name)",
            "-c",
            "EXPLAIN SELECT bib FROM registrations WHERE event = '2012 Boston Marathon' AND distance = 'Full' AND name = 'Pedro'",
            "-c",
            "SELECT index, missing, orphaned, stale FROM tablesql_check_index('registrations') ORDER BY index",
            "-c",
            "DROP INDEX by_name CASCADE",
        ],
    )?;
    let shown = text(&out);
    assert!(out.status.success(), "{shown}");
    assert!(shown.contains("CREATE INDEX"), "{shown}");
    assert!(
        shown.contains("NOTICE:  index by_name on registrations: 1000 base rows in 12 partitions, 1000 index rows written"),
        "{shown}"
    );
    assert!(shown.contains("access=index_point(by_name)"), "{shown}");
    assert!(
        shown.contains(" age     |       0 |        0 |     0"),
        "{shown}"
    );
    assert!(
        shown.contains(" by_name |       0 |        0 |     0"),
        "{shown}"
    );
    assert!(
        shown.contains("NOTICE:  deleted 1000 rows of index by_name on registrations"),
        "{shown}"
    );
    assert!(shown.contains("DROP INDEX"), "{shown}");
    let out = server.psql("", &["-v", "VERBOSITY=verbose", "-c", "DROP INDEX by_name"])?;
    assert!(
        text(&out).contains("index \"by_name\" does not exist"),
        "{}",
        text(&out)
    );
    Ok(())
}

/// Global and unique indexes over the wire: created, described by `\d`
/// (from `pg_index` and `pg_get_indexdef`) and by `pg_indexes`, read by a
/// lookup, enforced with SQLSTATE 23505, dropped with their table.
#[test]
fn global_indexes_in_psql() -> TestResult {
    let server = serve(1000, &[])?;
    let out = server.psql(
        "",
        &[
            "-c",
            "CREATE TABLE members (id INT PRIMARY KEY, email TEXT, city TEXT)",
            "-c",
            "INSERT INTO members VALUES (1, 'a@x.org', 'Oslo'), (2, 'b@x.org', 'Rome'), (3, NULL, 'Oslo')",
            "-c",
            "CREATE UNIQUE INDEX members_email ON members (email)",
            "-c",
            "CREATE INDEX members_city ON members (city) WITH (global = true)",
            "-c",
            "\\d members",
            "-c",
            "EXPLAIN SELECT id FROM members WHERE email = 'b@x.org'",
            "-c",
            "SELECT id FROM members WHERE city = 'Oslo' ORDER BY id",
        ],
    )?;
    let shown = text(&out);
    assert!(out.status.success(), "{shown}");
    assert!(
        shown.contains("\"members_email\" UNIQUE, btree (email) WITH (global='true')"),
        "{shown}"
    );
    assert!(
        shown.contains("\"members_city\" btree (city) WITH (global='true')"),
        "{shown}"
    );
    assert!(
        shown.contains("access=global_index_point(members_email)"),
        "{shown}"
    );
    assert!(shown.contains("  1\n  3\n(2 rows)"), "{shown}");
    // The pg_indexes view, as PostgreSQL's (DuckDB loads a catalog from
    // it), and psqlODBC's primary-key query with its untyped 't'.
    let out = server.psql(
        "",
        &[
            "-At",
            "-c",
            "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'public' \
             AND tablename = 'members' ORDER BY indexname",
            "-c",
            "SELECT a.attname FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid \
             JOIN pg_namespace n ON n.oid = c.relnamespace \
             JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = ANY (i.indkey) \
             WHERE n.nspname = 'public' AND c.relname = 'members' AND i.indisprimary = 't'",
        ],
    )?;
    let shown = text(&out);
    assert!(out.status.success(), "{shown}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "members_city|CREATE INDEX members_city ON public.members USING btree (city) WITH (global='true')\n\
         members_email|CREATE UNIQUE INDEX members_email ON public.members USING btree (email) WITH (global='true')\n\
         members_pkey|CREATE UNIQUE INDEX members_pkey ON public.members USING btree (id)\n\
         id\n",
        "{shown}"
    );
    let out = server.psql(
        "",
        &[
            "-v",
            "VERBOSITY=verbose",
            "-c",
            "INSERT INTO members VALUES (4, 'a@x.org', NULL)",
        ],
    )?;
    assert!(!out.status.success());
    assert!(
        text(&out)
            .contains("23505: duplicate key value violates unique constraint \"members_email\""),
        "{}",
        text(&out)
    );
    // DATE and NUMERIC over the wire: described, read and compared as
    // PostgreSQL's.
    let out = server.psql(
        "",
        &[
            "-c",
            "CREATE TABLE trips (day DATE PRIMARY KEY, km NUMERIC(6, 1))",
            "-c",
            "INSERT INTO trips VALUES ('2024-02-29', 3), ('2024-03-01', '5.5')",
            "-c",
            "\\d trips",
            "-A",
            "-c",
            "SELECT day, km FROM trips WHERE day > DATE '2024-02-29'",
        ],
    )?;
    let shown = text(&out);
    assert!(out.status.success(), "{shown}");
    assert!(shown.contains("day|date||not null|"), "{shown}");
    // With its typmod, from pg_attribute.atttypmod.
    assert!(shown.contains("km|numeric(6,1)|||"), "{shown}");
    assert!(shown.contains("2024-03-01|5.5"), "{shown}");
    let out = server.psql("", &["-c", "DROP INDEX members_city", "-c", "\\d members"])?;
    let shown = text(&out);
    assert!(out.status.success(), "{shown}");
    assert!(shown.contains("deleted storage table"), "{shown}");
    assert!(!shown.contains("\"members_city\""), "{shown}");
    Ok(())
}

/// One PostgreSQL version everywhere a client reads it: the startup
/// parameter (psql's `SERVER_VERSION_NAME`), `SHOW server_version`,
/// `server_version_num` and `version()`, which reads as PostgreSQL's for
/// drivers that parse it (SQLAlchemy's dialect matches `PostgreSQL (\d+)\.(\d+)`).
#[test]
fn one_postgresql_version_everywhere() -> TestResult {
    let server = serve(1000, &[])?;
    let out = server.psql(
        "",
        &[
            "-At",
            "-c",
            "SELECT version()",
            "-c",
            "SHOW server_version",
            "-c",
            "SHOW server_version_num",
            "-c",
            r"\echo :SERVER_VERSION_NAME :SERVER_VERSION_NUM",
        ],
    )?;
    let shown = text(&out);
    assert!(out.status.success(), "{shown}");
    let lines: Vec<&str> = shown.lines().collect();
    let v = tablesql::PG_VERSION;
    let num = tablesql::PG_VERSION_NUM;
    assert!(
        lines[0].starts_with(&format!("PostgreSQL {v} (tablesql ")),
        "{shown}"
    );
    assert_eq!(lines[1..], [v, num, &format!("{v} {num}")], "{shown}");
    Ok(())
}
