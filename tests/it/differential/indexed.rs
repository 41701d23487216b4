//! The index differential: random plain tables with nullable columns of
//! every type a key holds (INT, BIGINT, DOUBLE with NaN and ±Infinity,
//! TEXT with spaces, escapes and accents, TIMESTAMP, BOOLEAN, UUID), one to
//! three indexes (one or two columns, ascending or DESC, NULLS FIRST or
//! LAST, local or global, created before or after rows exist), random rows, updates that move
//! index keys and deletes; after every step, random predicates (`=`, `<`,
//! `>=`, BETWEEN, IN, IS [NOT] NULL, LIKE 'p%', ANDs and ORs of them) and
//! orders over the indexed columns. Each query answers on tablesql with
//! index use on, with it off, and on PostgreSQL: the three must agree, on
//! the memory store, the embedded store and Azurite. Pure functions of a
//! seeded RNG build the statements.

use std::sync::Arc;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tablesql::storage::{EmbeddedStore, MemoryStore, TableStore};
use tablesql::{Engine, EngineOptions};

use super::{Answer, TestResult, batch_rows, env_number, postgres, same_rows, simple_query};

/// A column's SQL type and the literals its values and bounds are drawn from.
#[derive(Debug, Clone, Copy)]
struct Type {
    sql: &'static str,
    values: &'static [&'static str],
}

const TYPES: [Type; 9] = [
    Type {
        sql: "INT",
        values: &["-3", "0", "1", "2", "5", "-1"],
    },
    Type {
        sql: "BIGINT",
        values: &["-3000000021", "0", "1000000007", "5000000035", "7"],
    },
    Type {
        sql: "DOUBLE PRECISION",
        values: &[
            "0",
            "1.5",
            "-2.25",
            "3",
            "CAST('NaN' AS DOUBLE PRECISION)",
            "CAST('Infinity' AS DOUBLE PRECISION)",
            "CAST('-Infinity' AS DOUBLE PRECISION)",
        ],
    },
    Type {
        sql: "TEXT",
        values: &["'a'", "'b'", "'B'", "''", "'a b'", "'a/b'", "'é'", "'ab'"],
    },
    Type {
        sql: "TIMESTAMP",
        values: &[
            "'2024-01-01 00:00:00'",
            "'1999-12-31 23:59:59'",
            "'2024-01-01 00:00:00.5'",
            "'1970-01-01 00:00:00'",
        ],
    },
    Type {
        sql: "NUMERIC(10, 2)",
        values: &[
            "'1.50'",
            "'-3.25'",
            "'0'",
            "'12345678.99'",
            "'0.01'",
            "'-0.01'",
        ],
    },
    Type {
        sql: "DATE",
        values: &[
            "'2024-01-01'",
            "'1999-12-31'",
            "'2024-02-29'",
            "'1970-01-01'",
        ],
    },
    Type {
        sql: "BOOLEAN",
        values: &["true", "false"],
    },
    Type {
        sql: "UUID",
        values: &[
            "'00000000-0000-0000-0000-000000000001'",
            "'7fffffff-0000-0000-0000-000000000000'",
            "'ffffffff-ffff-ffff-ffff-ffffffffffff'",
        ],
    },
];

/// One generated table.
struct Table {
    name: String,
    /// Keyed by `(grp, id)`, `grp` the PartitionKey; else by `id`.
    grouped: bool,
    columns: Vec<(String, Type)>,
}

fn pick<'a>(rng: &mut ChaCha8Rng, xs: &'a [&'a str]) -> &'a str {
    xs[rng.random_range(0..xs.len())]
}

fn value(rng: &mut ChaCha8Rng, t: Type) -> String {
    if rng.random_bool(0.2) {
        "NULL".into()
    } else {
        pick(rng, t.values).to_owned()
    }
}

impl Table {
    fn create(&self) -> String {
        let mut parts = Vec::new();
        if self.grouped {
            parts.push("grp INT NOT NULL, id INT NOT NULL".to_owned());
        } else {
            parts.push("id INT PRIMARY KEY".to_owned());
        }
        for (c, t) in &self.columns {
            parts.push(format!("{c} {}", t.sql));
        }
        if self.grouped {
            parts.push("PRIMARY KEY (grp, id)".to_owned());
        }
        format!("CREATE TABLE {} ({})", self.name, parts.join(", "))
    }

    fn insert(&self, rng: &mut ChaCha8Rng, next_id: &mut i32) -> String {
        let rows: Vec<String> = (0..rng.random_range(1..=6))
            .map(|_| {
                let mut vs = Vec::new();
                if self.grouped {
                    vs.push(rng.random_range(0..3).to_string());
                }
                vs.push(next_id.to_string());
                *next_id += 1;
                vs.extend(self.columns.iter().map(|(_, t)| value(rng, *t)));
                format!("({})", vs.join(", "))
            })
            .collect();
        let mut names: Vec<&str> = Vec::new();
        if self.grouped {
            names.push("grp");
        }
        names.push("id");
        names.extend(self.columns.iter().map(|(c, _)| c.as_str()));
        format!(
            "INSERT INTO {} ({}) VALUES {}",
            self.name,
            names.join(", "),
            rows.join(", ")
        )
    }

    fn index(&self, rng: &mut ChaCha8Rng, n: usize) -> String {
        let mut cols: Vec<String> = Vec::new();
        for _ in 0..rng.random_range(1..=2) {
            let (c, _) = &self.columns[rng.random_range(0..self.columns.len())];
            if cols
                .iter()
                .any(|x| x.starts_with(&format!("{c} ")) || x == c)
            {
                continue;
            }
            let dir = pick(rng, &["", " DESC", " ASC"]);
            let nulls = pick(rng, &["", "", " NULLS FIRST", " NULLS LAST"]);
            cols.push(format!("{c}{dir}{nulls}"));
        }
        // A global index half the time, and a third of those with a
        // declared layout (an application's table and templates):
        // PostgreSQL reads the statement without its WITH.
        let global = if !rng.random_bool(0.5) {
            String::new()
        } else if rng.random_bool(0.35) {
            // A declared layout's order is its templates': bare columns.
            for c in &mut cols {
                c.truncate(c.find(' ').unwrap_or(c.len()));
            }
            let spec = |c: &str| {
                let t = self
                    .columns
                    .iter()
                    .find(|(n, _)| n == c)
                    .map(|(_, t)| t.sql);
                match t {
                    Some("INT") => "i10",
                    Some("BIGINT") => "i19",
                    Some("DOUBLE PRECISION") => "f",
                    Some("TIMESTAMP") => "t",
                    Some("DATE") => "d",
                    Some("NUMERIC(10, 2)") => "i10",
                    Some("BOOLEAN") => "b",
                    Some("UUID") => "u",
                    _ => "s",
                }
            };
            let mut fields: Vec<String> = cols[1..]
                .iter()
                .map(|c| format!("{{{c}:{}}}", spec(c)))
                .collect();
            if self.grouped {
                fields.push("{grp:i10}".into());
            }
            fields.push("{id:i10}".into());
            format!(
                " WITH (global = true, table = '{}app{n}', partition_key = '{{{}:{}}}', row_key = 'A:{}')",
                self.name.replace('_', ""),
                cols[0],
                spec(&cols[0]),
                fields.join("__")
            )
        } else {
            " WITH (global = true)".to_owned()
        };
        // UNIQUE a fifth of the time (on PostgreSQL too, so both refuse
        // the same repeated values, and the same writes that would repeat
        // one); not with a declared layout.
        let unique = if !global.contains("table =") && rng.random_bool(0.2) {
            "UNIQUE "
        } else {
            ""
        };
        format!(
            "CREATE {unique}INDEX {}_ix{n} ON {} ({}){global}",
            self.name,
            self.name,
            cols.join(", ")
        )
    }

    /// One condition on one column.
    fn atom(&self, rng: &mut ChaCha8Rng) -> String {
        let (c, t) = &self.columns[rng.random_range(0..self.columns.len())];
        let v = |rng: &mut ChaCha8Rng| pick(rng, t.values).to_owned();
        match rng.random_range(0..9) {
            0 => format!("{c} IS NULL"),
            1 => format!("{c} IS NOT NULL"),
            2 => format!("{c} < {}", v(rng)),
            3 => format!("{c} >= {}", v(rng)),
            4 => format!("{c} BETWEEN {} AND {}", v(rng), v(rng)),
            5 => format!("{c} IN ({}, {})", v(rng), v(rng)),
            6 if t.sql == "TEXT" => format!("{c} LIKE '{}%'", pick(rng, &["a", "", "B", "a "])),
            7 => format!("({c} = {} OR {c} IS NULL)", v(rng)),
            _ => format!("{c} = {}", v(rng)),
        }
    }

    fn query(&self, rng: &mut ChaCha8Rng) -> String {
        let mut atoms = vec![self.atom(rng)];
        if rng.random_bool(0.3) {
            atoms.push(self.atom(rng));
        }
        if self.grouped && rng.random_bool(0.5) {
            atoms.push(format!("grp = {}", rng.random_range(0..3)));
        }
        let key = if self.grouped { "grp, id" } else { "id" };
        format!(
            "SELECT {key} FROM {} WHERE {} ORDER BY {key}",
            self.name,
            atoms.join(" AND ")
        )
    }

    /// A query ordered by an indexed column: the key order an index path
    /// claims must be PostgreSQL's, NULLs included.
    fn ordered(&self, rng: &mut ChaCha8Rng) -> String {
        let (c, _) = &self.columns[rng.random_range(0..self.columns.len())];
        let dir = pick(rng, &["", " DESC", " NULLS FIRST", " DESC NULLS LAST"]);
        let key = if self.grouped { "grp, id" } else { "id" };
        let fix = if self.grouped { " WHERE grp = 1" } else { "" };
        format!(
            "SELECT {key} FROM {}{fix} ORDER BY {c}{dir}, {key}",
            self.name
        )
    }

    fn write(&self, rng: &mut ChaCha8Rng, next_id: &mut i32) -> String {
        match rng.random_range(0..5) {
            0 | 1 => self.insert(rng, next_id),
            2 | 3 => {
                let (c, t) = &self.columns[rng.random_range(0..self.columns.len())];
                format!(
                    "UPDATE {} SET {c} = {} WHERE {}",
                    self.name,
                    value(rng, *t),
                    self.atom(rng)
                )
            }
            _ => format!("DELETE FROM {} WHERE {}", self.name, self.atom(rng)),
        }
    }
}

fn table(rng: &mut ChaCha8Rng, name: &str) -> Table {
    Table {
        name: name.to_owned(),
        grouped: rng.random_bool(0.4),
        columns: (0..rng.random_range(1..=3))
            .map(|i| (format!("c{i}"), TYPES[rng.random_range(0..TYPES.len())]))
            .collect(),
    }
}

/// Runs `scenarios` scenarios on `store`; returns the queries run, how
/// many of them read an index, and how many a global one.
async fn run(
    label: &str,
    store: Arc<dyn TableStore>,
    scenarios: usize,
    seed: u64,
) -> Result<Counts, Box<dyn std::error::Error>> {
    let (pg, connection) = tokio_postgres::connect(&postgres()?, tokio_postgres::NoTls).await?;
    tokio::spawn(connection);
    let on = Engine::with_store(store.clone(), EngineOptions::default())
        .await?
        .session();
    let off = Engine::with_store(store, EngineOptions::default())
        .await?
        .session();
    off.collect("SET tablesql.use_indexes = off").await?;
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut counts = Counts::default();
    for n in 0..scenarios {
        let t = table(&mut rng, &format!("ix_{label}_{n}"));
        let mut next_id = 1;
        let mut steps = vec![t.create()];
        let mut made = 0;
        for _ in 0..rng.random_range(6..10) {
            let step = if made < 3 && rng.random_bool(0.35) {
                made += 1;
                t.index(&mut rng, made)
            } else if rng.random_bool(0.15) {
                // Statistics, so that paths are chosen by their cost too.
                format!("ANALYZE {}", t.name)
            } else {
                t.write(&mut rng, &mut next_id)
            };
            steps.push(step);
        }
        if made == 0 {
            steps.insert(2.min(steps.len()), t.index(&mut rng, 1));
        }
        let fail = |what: String, i: usize| -> Box<dyn std::error::Error> {
            format!(
                "{label}, seed {seed}, scenario {n}: {what}\n  steps: {}",
                steps[..=i].join(";\n    ")
            )
            .into()
        };
        for (i, step) in steps.iter().enumerate() {
            let for_pg = step.split(" WITH (global").next().unwrap_or(step);
            let expected = simple_query(&pg, for_pg).await;
            let answer = match on.collect(step).await {
                Ok(_) => Answer::Rows(Vec::new()),
                Err(e) => Answer::Error {
                    code: e.sqlstate().to_owned(),
                    message: e.to_string(),
                },
            };
            // Both answer, or both refuse; a unique violation as one
            // (except a CREATE UNIQUE INDEX over repeats, a failed build).
            let same = match (&answer, &expected) {
                (Answer::Error { code, .. }, Answer::Error { code: pg, .. }) => {
                    pg != "23505" || code == "23505" || step.starts_with("CREATE")
                }
                (Answer::Rows(_), Answer::Rows(_)) => true,
                (Answer::Error { code, message }, Answer::Rows(_)) => {
                    super::answer_lost(code, message)
                }
                _ => false,
            };
            if !same {
                return Err(fail(
                    format!("`{step}`: tablesql {answer:?}, PostgreSQL {expected:?}"),
                    i,
                ));
            }
            // Off reads the catalog the other engine changed.
            if step.starts_with("CREATE") {
                off.refresh().await?;
            }
            if step.starts_with("CREATE UNIQUE") && matches!(answer, Answer::Rows(_)) {
                counts.unique += 1;
            }
            for q in 0..4 {
                let sql = if q == 3 {
                    t.ordered(&mut rng)
                } else {
                    t.query(&mut rng)
                };
                counts.queries += 1;
                let expected = simple_query(&pg, &sql).await;
                let Answer::Rows(expected) = expected else {
                    return Err(fail(format!("PostgreSQL refused `{sql}`: {expected:?}"), i));
                };
                for (which, engine) in [("on", &on), ("off", &off)] {
                    let rows = engine
                        .collect(&sql)
                        .await
                        .map_err(|e| fail(format!("index use {which}: `{sql}`: {e}"), i))?;
                    let rows: Vec<_> = rows.iter().flat_map(batch_rows).collect();
                    if !same_rows(&expected, &rows) {
                        return Err(fail(
                            format!(
                                "index use {which}: `{sql}`\n  tablesql {rows:?}\n  PostgreSQL {expected:?}"
                            ),
                            i,
                        ));
                    }
                }
                let plan = on.collect(&format!("EXPLAIN {sql}")).await?;
                let shown: Vec<_> = plan
                    .iter()
                    .flat_map(batch_rows)
                    .flatten()
                    .flatten()
                    .collect();
                if shown
                    .iter()
                    .any(|l| l.contains("access=index_") || l.contains("access=global_index_"))
                {
                    counts.indexed += 1;
                }
                if shown.iter().any(|l| l.contains("access=global_index_")) {
                    counts.global += 1;
                }
                if shown.iter().any(|l| l.contains("cost=[")) {
                    counts.costed += 1;
                }
                if shown
                    .iter()
                    .any(|l| l.contains("access=global_index_") && l.contains("app"))
                {
                    counts.declared += 1;
                }
            }
        }
        let drop = format!("DROP TABLE {}", t.name);
        simple_query(&pg, &drop).await;
        on.collect(&drop).await?;
    }
    Ok(counts)
}

/// What a run's queries did.
#[derive(Debug, Default)]
struct Counts {
    queries: usize,
    /// Read an index.
    indexed: usize,
    /// Read a global index.
    global: usize,
    /// Planned by cost, from statistics.
    costed: usize,
    /// Read a global index of a declared layout.
    declared: usize,
    /// Unique indexes created.
    unique: usize,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn indexes_answer_as_with_index_use_off_and_as_postgresql() -> TestResult {
    let seed: u64 = env_number("TABLESQL_DIFF_SEED", 13);
    let scenarios: usize = env_number("TABLESQL_DIFF_INDEX_SCENARIOS", 30);
    let mut stores: Vec<(&str, Arc<dyn TableStore>, usize)> = vec![
        ("memory", Arc::new(MemoryStore::new()), scenarios),
        ("embedded", Arc::new(EmbeddedStore::in_memory()?), scenarios),
    ];
    // Azurite: fewer scenarios, each request a round trip.
    if std::env::var_os("TABLESQL_TEST_AZURITE").is_some() {
        let account = crate::azurite::fresh_account()?;
        let store = tablesql::storage::AzureStore::new(account)?;
        stores.push(("azurite", Arc::new(store), scenarios.div_ceil(3)));
    }
    for (label, store, n) in stores {
        let Counts {
            queries,
            indexed,
            global,
            costed,
            declared,
            unique,
        } = run(label, store, n, seed).await?;
        eprintln!(
            "index differential on {label}, seed {seed}: {n} scenarios, {queries} queries, {indexed} read an index, {global} of them a global one ({declared} declared), {costed} planned by cost, {unique} unique indexes made"
        );
        assert!(unique > 0, "{label}: no unique index was made");
        assert!(global > 0, "{label}: no query read a global index");
        assert!(
            declared > 0,
            "{label}: no query read a declared global index"
        );
        assert!(costed > 0, "{label}: no query was planned by cost");
        // Queries run before the first index too, and on columns no index
        // leads; still, a good share must read one (about a quarter do).
        assert!(
            indexed * 5 >= queries,
            "{label}: only {indexed} of {queries} queries read an index"
        );
    }
    Ok(())
}

/// The index differential over the Azure client on the local Table service,
/// both profiles, with its faults on: fewer scenarios, each a round trip.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn indexes_answer_as_postgresql_on_the_local_table_service() -> TestResult {
    use tablesql::tableservice::Profile;
    let seed: u64 = env_number("TABLESQL_DIFF_SEED", 13);
    let (pg, connection) = tokio_postgres::connect(&postgres()?, tokio_postgres::NoTls).await?;
    tokio::spawn(connection);
    for (label, profile) in [
        ("svcstorage", Profile::Storage),
        ("svccosmos", Profile::Cosmos),
    ] {
        // A run stopped part way leaves its tables on PostgreSQL.
        for n in 0..4 {
            pg.batch_execute(&format!("DROP TABLE IF EXISTS ix_{label}_{n} CASCADE"))
                .await?;
        }
        let local = crate::local_service::Local::start(profile, super::SERVICE_FAULTS)
            .map_err(|e| e.to_string())?;
        let store: Arc<dyn TableStore> = Arc::new(local.store().map_err(|e| e.to_string())?);
        let Counts {
            queries, indexed, ..
        } = run(label, store, 4, seed).await?;
        eprintln!("index differential on {label}: {queries} queries, {indexed} read an index");
        assert!(indexed > 0, "{label}: no query read an index");
    }
    Ok(())
}

/// The `CREATE INDEX` forms PostgreSQL accepts on a table of nullable
/// INTEGER, DOUBLE, TEXT and TIMESTAMP columns, each with what tablesql
/// does: `None` accepts it; `Some(reason)` refuses it with an error saying
/// so (each reason is one docs/indexes.md, "Index upkeep", lists).
const FORMS: &[(&str, Option<&str>)] = &[
    ("CREATE INDEX f_i ON forms (i)", None),
    ("CREATE INDEX f_d ON forms (d)", None),
    ("CREATE INDEX f_t ON forms (t)", None),
    ("CREATE INDEX f_ts ON forms (ts)", None),
    ("CREATE INDEX f_id ON forms (i DESC)", None),
    ("CREATE INDEX f_dn ON forms (d ASC NULLS FIRST)", None),
    ("CREATE INDEX f_tn ON forms (t DESC NULLS LAST)", None),
    ("CREATE INDEX f_tsi ON forms (ts, i)", None),
    (
        "CREATE INDEX f_all ON forms (i, d DESC, t NULLS FIRST, ts)",
        None,
    ),
    ("CREATE INDEX ON forms (t)", None),
    ("CREATE INDEX ON forms (t, ts)", None),
    ("CREATE INDEX IF NOT EXISTS f_i ON forms (i)", None),
    ("CREATE INDEX IF NOT EXISTS f_new ON forms (d)", None),
    ("CREATE INDEX CONCURRENTLY f_c ON forms (ts DESC)", None),
    ("CREATE INDEX f_b ON forms USING btree (i)", None),
    ("CREATE INDEX f_inc ON forms (i) INCLUDE (t, d)", None),
    (
        "CREATE INDEX f_ff ON forms (t) WITH (fillfactor = 70)",
        None,
    ),
    ("CREATE INDEX f_pat ON forms (t text_pattern_ops)", None),
    ("CREATE INDEX f_coll ON forms (t COLLATE \"C\")", None),
    ("CREATE UNIQUE INDEX f_u ON forms (i)", None),
    ("CREATE UNIQUE INDEX f_u2 ON forms (t, ts DESC)", None),
    ("CREATE UNIQUE INDEX IF NOT EXISTS f_u ON forms (i)", None),
    (
        "CREATE UNIQUE INDEX f_u3 ON forms (d) NULLS NOT DISTINCT",
        Some("NULLS NOT DISTINCT"),
    ),
    (
        "CREATE INDEX f_p ON forms (i) WHERE i > 0",
        Some("partial indexes"),
    ),
    (
        "CREATE INDEX f_e ON forms ((i + 1))",
        Some("is an expression"),
    ),
    (
        "CREATE INDEX f_l ON forms (lower(t))",
        Some("is an expression"),
    ),
    (
        "CREATE INDEX f_h ON forms USING hash (i)",
        Some("access method"),
    ),
    (
        "CREATE INDEX f_g ON forms USING brin (ts)",
        Some("access method"),
    ),
    (
        "CREATE INDEX f_o ON forms (d float8_ops)",
        Some("operator class"),
    ),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_create_index_form_postgresql_accepts_is_accepted_or_refused_as_documented()
-> TestResult {
    let (pg, connection) = tokio_postgres::connect(&postgres()?, tokio_postgres::NoTls).await?;
    tokio::spawn(connection);
    let engine = Engine::with_store(Arc::new(MemoryStore::new()), EngineOptions::default())
        .await?
        .session();
    let create = "CREATE TABLE forms (id INT PRIMARY KEY, i INTEGER, d DOUBLE PRECISION, t TEXT, ts TIMESTAMP)";
    let rows = "INSERT INTO forms VALUES (1, 1, 1.5, 'a', '2024-01-01'), (2, NULL, NULL, NULL, NULL), (3, -4, 'NaN', 'b c', '1999-01-01')";
    simple_query(&pg, "DROP TABLE IF EXISTS forms").await;
    for sql in [create, rows] {
        assert!(matches!(simple_query(&pg, sql).await, Answer::Rows(_)));
        engine.collect(sql).await?;
    }
    let readme = include_str!("../../../docs/indexes.md");
    for (sql, refused) in FORMS {
        let pg_answer = simple_query(&pg, sql).await;
        assert!(
            matches!(pg_answer, Answer::Rows(_)),
            "PostgreSQL refuses {sql}: {pg_answer:?}"
        );
        match (engine.collect(sql).await, refused) {
            (Ok(_), None) => {}
            (Err(e), Some(reason)) => {
                let e = e.to_string();
                assert!(e.contains(reason), "{sql}: {e}");
            }
            (Ok(_), Some(reason)) => panic!("{sql} was accepted; expected {reason}"),
            (Err(e), None) => panic!("{sql}: {e}"),
        }
        if let Some(reason) = refused {
            let listed = match *reason {
                "is an expression" => "expressions",
                other => other,
            };
            assert!(
                readme.contains(listed),
                "docs/indexes.md does not list {listed}"
            );
        }
    }
    // Every accepted index holds every row, NULLs included.
    let health = engine
        .collect("SELECT count(*) FROM tablesql_check_index('forms') WHERE base_rows = 3 AND index_rows = 3")
        .await?;
    // Two IF NOT EXISTS of existing indexes build nothing.
    let built = FORMS.iter().filter(|(_, r)| r.is_none()).count() - 2;
    assert_eq!(
        batch_rows(&health[0]),
        [[Some(built.to_string())]],
        "an index without a row per base row"
    );
    simple_query(&pg, "DROP TABLE forms").await;
    Ok(())
}
