//! Loading the generated rows into tablesql (the embedded store, on disk
//! under the target directory) and into PostgreSQL (database `tpch`), each
//! kept for the next run: a store or a database whose fingerprint (the
//! scale, the DDL, the generator's version) matches is used as it is.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use futures::SinkExt;
use tablesql::load::{CHUNK_ROWS, LoadMode, Loader};
use tablesql::storage::{EmbeddedStore, TableStore};
use tablesql::{Engine, EngineOptions, ScanPolicy, Session};
use tokio_postgres::{Client, NoTls};

use crate::schema::{Layout, TABLES, fingerprint};

/// The generator crate's version, part of the caches' fingerprint.
const GENERATOR: &str = "tpchgen 4.0.0";

/// The generated rows of every table, made once and only if a load needs them.
pub struct Rows {
    sf: f64,
    tables: Vec<Option<Vec<String>>>,
}

impl Rows {
    pub fn new(sf: f64) -> Self {
        Rows {
            sf,
            tables: TABLES.iter().map(|_| None).collect(),
        }
    }

    fn of(&mut self, i: usize) -> &[String] {
        let sf = self.sf;
        self.tables[i].get_or_insert_with(|| {
            let started = Instant::now();
            let rows = TABLES[i].rows(sf);
            eprintln!(
                "generated {} rows of {} in {:.1} s",
                rows.len(),
                TABLES[i].name,
                started.elapsed().as_secs_f64()
            );
            rows
        })
    }
}

/// Where the bench keeps its stores, plans and report: `tpch/` in the
/// target directory (the bench binary is `<target>/<profile>/deps/tpch-*`).
pub fn work_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("bench binary path");
    let target = exe
        .ancestors()
        .nth(3)
        .map(Path::to_path_buf)
        .unwrap_or_else(std::env::temp_dir);
    let dir = target.join("tpch");
    std::fs::create_dir_all(&dir).expect("tpch work dir");
    dir
}

/// An engine over the embedded store holding every table at `sf` in
/// `layout`, loaded and analyzed unless a previous run left one.
pub async fn tablesql(rows: &mut Rows, sf: f64, layout: Layout, dir: &Path) -> Session {
    let ddl: Vec<String> = TABLES.iter().map(|t| t.create(Some(layout))).collect();
    let mut parts: Vec<&str> = vec![GENERATOR];
    let scale = sf.to_string();
    parts.push(&scale);
    parts.extend(ddl.iter().map(String::as_str));
    let store_dir = dir.join(format!(
        "store-sf{sf}-{}-{}",
        layout.name(),
        fingerprint(&parts)
    ));
    let ready = store_dir.join("ready");
    let fresh = !ready.exists();
    if fresh {
        // A load cut short leaves a partial store: start again.
        let _ = std::fs::remove_dir_all(&store_dir);
        std::fs::create_dir_all(&store_dir).expect("store dir");
    }
    let store: Arc<dyn TableStore> =
        Arc::new(EmbeddedStore::open(store_dir.join("data")).expect("embedded store"));
    let options = EngineOptions::default().with_scan_policy(ScanPolicy::Allow);
    let engine = Engine::with_store(store, options)
        .await
        .expect("engine")
        .session();
    if !fresh {
        eprintln!(
            "tablesql: using the store loaded before, {}",
            store_dir.display()
        );
        return engine;
    }
    for (i, (table, ddl)) in TABLES.iter().zip(&ddl).enumerate() {
        engine.collect(ddl).await.expect("create table");
        let started = Instant::now();
        let session = engine.session();
        let key: Vec<String> = table.key.iter().map(|k| k.to_string()).collect();
        let mut loader = Loader::new(
            &session,
            table.name,
            &table.column_names(),
            key,
            LoadMode::Insert,
        )
        .await
        .expect("loader");
        for (line, row) in rows.of(i).iter().enumerate() {
            let fields = row.split('|').map(|f| Some(f.to_owned())).collect();
            loader.push(line as u64 + 1, fields).expect("row");
            if loader.pending() >= CHUNK_ROWS {
                loader.write(&session).await.expect("write");
            }
        }
        loader.write(&session).await.expect("write");
        let loaded = started.elapsed().as_secs_f64();
        let started = Instant::now();
        engine
            .collect(&format!("ANALYZE {}", table.name))
            .await
            .expect("analyze");
        eprintln!(
            "tablesql: loaded {} rows into {} in {loaded:.1} s, analyzed in {:.1} s",
            loader.written(),
            table.name,
            started.elapsed().as_secs_f64()
        );
    }
    std::fs::write(&ready, parts.join("\n")).expect("ready marker");
    engine
}

/// A client of database `tpch` of the PostgreSQL at `conninfo` (created if
/// missing), holding every table at `sf`, loaded and analyzed unless a
/// previous run did so.
pub async fn postgres(rows: &mut Rows, sf: f64, conninfo: &str) -> Client {
    let admin = connect(conninfo).await;
    let exists = admin
        .query_opt("SELECT 1 FROM pg_database WHERE datname = 'tpch'", &[])
        .await
        .expect("pg_database");
    if exists.is_none() {
        admin
            .batch_execute("CREATE DATABASE tpch")
            .await
            .expect("create database tpch");
    }
    // A later keyword overrides an earlier one in a connection string.
    let client = connect(&format!("{conninfo} dbname=tpch")).await;
    let ddl: Vec<String> = TABLES.iter().map(|t| t.create(None)).collect();
    let scale = sf.to_string();
    let mut parts: Vec<&str> = vec![GENERATOR, &scale];
    parts.extend(ddl.iter().map(String::as_str));
    let wanted = fingerprint(&parts);
    let held = client
        .query_opt("SELECT fingerprint FROM tpch_ready", &[])
        .await
        .ok()
        .flatten()
        .map(|r| r.get::<_, String>(0));
    if held.as_deref() == Some(wanted.as_str()) {
        eprintln!("postgres: using the tables loaded before (database tpch)");
        return client;
    }
    let drop: Vec<&str> = TABLES.iter().map(|t| t.name).collect();
    client
        .batch_execute(&format!(
            "DROP TABLE IF EXISTS tpch_ready, {}",
            drop.join(", ")
        ))
        .await
        .expect("drop tables");
    for (i, (table, ddl)) in TABLES.iter().zip(&ddl).enumerate() {
        let started = Instant::now();
        client.batch_execute(ddl).await.expect("create table");
        let sink = client
            .copy_in(&format!("COPY {} FROM STDIN (DELIMITER '|')", table.name))
            .await
            .expect("copy in");
        let mut sink = Box::pin(sink);
        for chunk in rows.of(i).chunks(10_000) {
            let mut text = String::new();
            for row in chunk {
                text.push_str(row);
                text.push('\n');
            }
            sink.send(bytes::Bytes::from(text))
                .await
                .expect("copy data");
        }
        let n = sink.as_mut().finish().await.expect("copy end");
        eprintln!(
            "postgres: loaded {n} rows into {} in {:.1} s",
            table.name,
            started.elapsed().as_secs_f64()
        );
    }
    // VACUUM as well: the visibility map lets PostgreSQL read its indexes only.
    client
        .batch_execute("VACUUM ANALYZE")
        .await
        .expect("analyze");
    client
        .batch_execute("CREATE TABLE tpch_ready (fingerprint TEXT)")
        .await
        .expect("marker");
    client
        .execute("INSERT INTO tpch_ready VALUES ($1)", &[&wanted])
        .await
        .expect("marker");
    client
}

async fn connect(conninfo: &str) -> Client {
    let (client, connection) = tokio_postgres::connect(conninfo, NoTls)
        .await
        .unwrap_or_else(|e| {
            panic!(
                "cannot connect to PostgreSQL at {conninfo:?} ({e}): set TABLESQL_TEST_POSTGRES, \
                 or run `./scripts/postgres start`"
            )
        });
    tokio::spawn(connection);
    client
}
