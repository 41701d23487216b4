//! Databases by name, as dbt and most tools meet them: the database a
//! client connects to is what `current_database()` and `current_catalog`
//! say, its three-part names resolve, another database's are refused with
//! 0A000, and, where `--database` names the databases, another is refused
//! at connect with 3D000.

use super::{TestResult, connect, serve};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_is_in_the_database_it_connects_to() -> TestResult {
    let server = serve(1000, &[])?;
    let conninfo = |db: &str| {
        format!(
            "host={} port={} user=tablesql dbname={db}",
            server.addr.ip(),
            server.addr.port()
        )
    };
    for db in ["postgres", "tablesql"] {
        let client = connect(&conninfo(db)).await?;
        let row = client
            .query_one("SELECT current_database(), current_catalog", &[])
            .await?;
        assert_eq!(row.get::<_, String>(0), db);
        assert_eq!(row.get::<_, String>(1), db);
        // As dbt names a relation, in a query and in DDL.
        let n: i64 = client
            .query_one(
                &format!(
                    r#"SELECT count(*) FROM "{db}"."public"."registrations" WHERE event = '2012 Boston Marathon' AND distance = 'Full'"#
                ),
                &[],
            )
            .await
            .map_err(|e| format!("{db}: the count: {e:?}"))?
            .get(0);
        assert!(n > 0, "{n}");
        client
            .batch_execute(&format!(
                r#"CREATE TABLE "{db}"."public"."t_{db}" (k INT PRIMARY KEY); INSERT INTO {db}.public.t_{db} VALUES (1)"#
            ))
            .await
            .map_err(|e| format!("{db}: the DDL: {e:?}"))?;
        let rows = client.query(&format!("SELECT k FROM t_{db}"), &[]).await?;
        assert_eq!(rows.len(), 1);
    }
    // The other name's tables are this database's: the store is one.
    let client = connect(&conninfo("postgres")).await?;
    assert_eq!(
        client.query("SELECT k FROM t_tablesql", &[]).await?.len(),
        1
    );
    let e = client
        .query("SELECT * FROM other.public.registrations", &[])
        .await
        .expect_err("another database's table");
    let db = e.as_db_error().ok_or("a server error")?;
    assert_eq!(db.code().code(), "0A000", "{db:?}");
    assert_eq!(
        db.message(),
        "cross-database references are not implemented: other.public.registrations"
    );

    // Without --database every name is let in: psql without -d names the
    // user's.
    let unnamed = format!(
        "host={} port={} user=someone",
        server.addr.ip(),
        server.addr.port()
    );
    let client = connect(&unnamed).await?;
    let row = client.query_one("SELECT current_database()", &[]).await?;
    assert_eq!(row.get::<_, String>(0), "someone");

    // --database names the only databases: another, named or taken from
    // the user's name, is refused.
    let named = serve(1000, &["--database", "analytics,postgres"])?;
    let conninfo = |db: &str| {
        format!(
            "host={} port={} user=tablesql dbname={db}",
            named.addr.ip(),
            named.addr.port()
        )
    };
    let client = connect(&conninfo("analytics")).await?;
    let row = client.query_one("SELECT current_database()", &[]).await?;
    assert_eq!(row.get::<_, String>(0), "analytics");
    let unnamed = format!(
        "host={} port={} user=someone",
        named.addr.ip(),
        named.addr.port()
    );
    for (conn, name) in [(conninfo("tablesql"), "tablesql"), (unnamed, "someone")] {
        let e = connect(&conn).await.err().ok_or("connected")?;
        let db = e.as_db_error().ok_or("a server error")?;
        assert_eq!(db.code().code(), "3D000", "{db:?}");
        assert_eq!(db.message(), format!("database \"{name}\" does not exist"));
    }
    Ok(())
}
