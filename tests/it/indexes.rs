//! The index property: for random mapped tables with one or two index
//! templates (covering and keys-only, ascending and descending fields),
//! random rows written through SQL (which writes the index rows), random
//! predicates and ORDER BY, the plans over index rows return exactly what
//! the same statements return with index use off (`tablesql.use_indexes`),
//! on the memory, embedded and Azurite stores. A run also checks that
//! enough of its cases took an index path, so it cannot pass by never
//! reading one.

use std::sync::Arc;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use tablesql::storage::*;
use tablesql::{Engine, EngineOptions, Session};

use super::fanout::azurite_case;
use super::pushdown::answer;

/// Tables: columns a, b, c, d (key fields) and v (a property), with one or
/// two indexes each.
const SHAPES: [&str; 3] = [
    // A keys-only index led by c, a covering one led by free text d.
    "PRIMARY KEY (a, b)) WITH (partition_key = '{a}', row_key = 'R:{b:03}__{d}', \
     index_c = 'C:{c:02}__{b:03}', covering_c = false, index_d = 'D:{d}__{b:03}'",
    // A covering descending index, a keys-only one with a signed field.
    "PRIMARY KEY (a, b)) WITH (partition_key = '{a}', row_key = 'R:{b:03}', \
     index_c = 'C:{c:~02}__{b:03}', index_x = 'X:{c:+02}__{d}__{b}', covering_x = false",
    // A primary key of three fields; a keys-only descending index on b.
    "PRIMARY KEY (a, d, b)) WITH (partition_key = '{a}', row_key = 'K:{d}__{b:03}', \
     index_b = 'B:{b:~03}__{d}', covering_b = false",
];

/// The primary key's columns per shape, to keep generated rows unique.
const KEYS: [&[usize]; 3] = [&[0, 1], &[0, 1], &[0, 3, 1]];

/// The field the first index of each shape leads with.
const LEADS: [&str; 3] = ["c", "c", "b"];

const AS: [&str; 3] = ["x", "y", "zz"];
const DS: [&str; 4] = ["", "p", "pq", "q"];

#[derive(Debug, Clone)]
struct Row {
    a: &'static str,
    b: i64,
    c: i64,
    d: &'static str,
    v: Option<i64>,
}

impl Row {
    fn values(&self) -> String {
        let v = self.v.map_or("NULL".to_owned(), |v| v.to_string());
        format!("('{}', {}, {}, '{}', {v})", self.a, self.b, self.c, self.d)
    }

    fn key(&self, shape: usize) -> Vec<String> {
        let cells = [
            self.a.to_owned(),
            self.b.to_string(),
            self.c.to_string(),
            self.d.to_owned(),
        ];
        KEYS[shape].iter().map(|&i| cells[i].clone()).collect()
    }
}

fn row() -> impl Strategy<Value = Row> {
    (
        0..AS.len(),
        0i64..12,
        0i64..10,
        0..DS.len(),
        prop::option::of(0i64..5),
    )
        .prop_map(|(a, b, c, d, v)| Row {
            a: AS[a],
            b,
            c,
            d: DS[d],
            v,
        })
}

/// One condition, most often on a field some index leads with.
fn atom() -> impl Strategy<Value = String> {
    let columns = ["a", "a", "c", "c", "c", "b", "d", "d", "v"];
    (0..columns.len(), 0usize..8, 0usize..100, 0usize..100).prop_map(move |(i, kind, x, y)| {
        let col = columns[i];
        let lit = |n: usize| match col {
            "a" => format!("'{}'", AS[n % AS.len()]),
            "d" => format!("'{}'", DS[n % DS.len()]),
            "b" => (n % 13).to_string(),
            "c" => (n % 11).to_string(),
            _ => (n % 6).to_string(),
        };
        match kind {
            0 | 1 => format!("{col} = {}", lit(x)),
            2 => format!("{col} IN ({}, {})", lit(x), lit(y)),
            3 => format!("{col} > {}", lit(x)),
            4 => format!("{col} <= {}", lit(x)),
            5 => format!("{col} BETWEEN {} AND {}", lit(x), lit(y)),
            6 if col == "d" => format!(
                "d LIKE '{}%'",
                &DS[x % DS.len()][..(y % 2).min(DS[x % DS.len()].len())]
            ),
            _ => format!("{col} <> {}", lit(x)),
        }
    })
}

/// ORDER BY clauses, with the columns they name (projected, so that rows
/// tied on them print the same).
const ORDERS: [(&str, &str); 7] = [
    ("c", "c"),
    ("c DESC", "c"),
    ("b", "b"),
    ("b DESC", "b"),
    ("d", "d"),
    ("c, b", "c, b"),
    ("c DESC, b DESC", "c, b"),
];

type Case = (usize, Vec<Row>, Vec<String>, usize, usize);

fn case() -> impl Strategy<Value = Case> {
    (
        0..SHAPES.len(),
        prop::collection::vec(row(), 0..30),
        prop::collection::vec(atom(), 1..4),
        0..ORDERS.len(),
        1usize..6,
    )
}

/// Runs one case on `store` in table `name`; returns whether a statement
/// took an index path.
async fn check(store: Arc<dyn TableStore>, name: &str, case: &Case) -> Result<bool, TestCaseError> {
    let (shape, rows, atoms, order, _) = case;
    let fail = |e: tablesql::EngineError| TestCaseError::fail(e.to_string());
    let on = Engine::with_store(store.clone(), EngineOptions::default())
        .await
        .map_err(fail)?
        .session();
    // One catalog per store: on a shared Azurite account, a name per case.
    let t = name.to_lowercase();
    let sql = format!(
        "CREATE TABLE {t} (a TEXT NOT NULL, b INT NOT NULL, c INT NOT NULL, d TEXT NOT NULL, v INT, {}, storage_table = '{name}')",
        SHAPES[*shape]
    );
    on.collect(&sql).await.map_err(fail)?;
    let mut keys = std::collections::HashSet::new();
    let unique: Vec<String> = rows
        .iter()
        .filter(|r| keys.insert(r.key(*shape)))
        .map(Row::values)
        .collect();
    if !unique.is_empty() {
        on.collect(&format!(
            "INSERT INTO {t} (a, b, c, d, v) VALUES {}",
            unique.join(", ")
        ))
        .await
        .map_err(fail)?;
    }
    let off = Engine::with_store(store, EngineOptions::default())
        .await
        .map_err(fail)?
        .session();
    off.collect("SET tablesql.use_indexes = off")
        .await
        .map_err(fail)?;
    let pred = atoms.join(" AND ");
    let (by, shown) = ORDERS[*order];
    let mut used = false;
    // A condition the first index answers better than the base rows.
    let lead = LEADS[*shape];
    let value = rows
        .first()
        .map_or(3, |r| if lead == "c" { r.c } else { r.b });
    for sql in [
        format!("SELECT a, b, c, d, v FROM {t} WHERE {pred} ORDER BY a, b, c, d"),
        format!(
            "SELECT a, b, c, d, v FROM {t} WHERE {lead} = {value} AND {pred} ORDER BY a, b, c, d"
        ),
        format!("SELECT count(*), sum(c) FROM {t} WHERE {pred}"),
        format!("SELECT {shown} FROM {t} WHERE {pred} ORDER BY {by}"),
        format!("SELECT {shown} FROM {t} WHERE a = 'x' AND {pred} ORDER BY {by}"),
        format!("SELECT {shown} FROM {t} WHERE a = 'y' ORDER BY {by} LIMIT 3"),
        format!(
            "SELECT \"PartitionKey\", \"RowKey\", v FROM {t} WHERE {pred} ORDER BY \"PartitionKey\", \"RowKey\""
        ),
    ] {
        let (got, want) = (answer(&on, &sql).await, answer(&off, &sql).await);
        let plan = answer(&on, &format!("EXPLAIN {sql}")).await;
        prop_assert!(!want.starts_with("error"), "{}\n{}", sql, want);
        prop_assert_eq!(got, want, "{}\n{}", sql, plan);
        used |= plan.contains("access=index_");
    }
    Ok(used)
}

/// Runs `cases` cases on the stores `backend` makes, and checks that at
/// least half of them read index rows.
fn property(
    cases: u32,
    backend: impl Fn(usize) -> Result<(Arc<dyn TableStore>, String), TestCaseError>,
) {
    let mut runner = TestRunner::new(Config {
        cases,
        ..Config::default()
    });
    let used = std::sync::atomic::AtomicU32::new(0);
    let result = runner.run(&case(), |case| {
        let (store, name) = backend(case.4)?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        if runtime.block_on(check(store, &name, &case))? {
            used.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    let used = used.into_inner();
    assert!(
        used * 2 >= cases,
        "only {used} of {cases} cases read index rows: the property tests too little"
    );
}

#[test]
fn index_paths_return_what_base_rows_return_memory() {
    property(64, |budget| {
        Ok((
            Arc::new(MemoryStore::new().with_scan_budget(budget)) as Arc<dyn TableStore>,
            "Things".into(),
        ))
    });
}

#[test]
fn index_paths_return_what_base_rows_return_embedded() {
    property(32, |budget| {
        let store = EmbeddedStore::in_memory().map_err(|e| TestCaseError::fail(e.to_string()))?;
        Ok((
            Arc::new(store.with_scan_budget(budget)) as Arc<dyn TableStore>,
            "Things".into(),
        ))
    });
}

#[test]
fn index_paths_return_what_base_rows_return_azurite() {
    property(12, |budget| azurite_case("Indexed", budget));
}

/// The counts `tablesql_check_index` (or `_repair_index`) reports, per
/// index: (index, missing, orphaned, stale, repaired).
async fn health(
    engine: &Session,
    function: &str,
    table: &str,
) -> Vec<(String, i64, i64, i64, i64)> {
    use tablesql::datafusion::arrow::array::{AsArray, Int64Array};
    let batches = engine
        .collect(&format!(
            "SELECT index, missing, orphaned, stale, repaired FROM {function}('{table}') ORDER BY index"
        ))
        .await
        .expect("check");
    let mut out = Vec::new();
    for b in &batches {
        let int = |i: usize| {
            b.column(i)
                .as_any()
                .downcast_ref::<Int64Array>()
                .cloned()
                .expect("int")
        };
        let names = b.column(0).as_string::<i32>();
        for r in 0..b.num_rows() {
            out.push((
                names.value(r).to_owned(),
                int(1).value(r),
                int(2).value(r),
                int(3).value(r),
                int(4).value(r),
            ));
        }
    }
    out
}

/// Rows in three partitions, then index rows damaged by raw writes:
/// missing, orphaned and stale rows of a covering and a keys-only index.
/// CHECK finds each, REPAIR fixes them, CHECK then finds none, and the
/// index paths answer as the base rows do.
async fn damaged_indexes_are_found_and_repaired(store: Arc<dyn TableStore>, name: &str) {
    let engine = Engine::with_store(store.clone(), EngineOptions::default())
        .await
        .expect("engine")
        .session();
    let t = name.to_lowercase();
    engine
        .collect(&format!(
            "CREATE TABLE {t} (a TEXT NOT NULL, b INT NOT NULL, c INT NOT NULL, v INT, PRIMARY KEY (a, b)) \
             WITH (storage_table = '{name}', partition_key = '{{a}}', row_key = 'R:{{b:03}}', \
             index_c = 'C:{{c:02}}__{{b:03}}', index_k = 'K:{{c:02}}__{{b}}', covering_k = false)"
        ))
        .await
        .expect("create");
    let values: Vec<String> = ["x", "y", "z"]
        .iter()
        .flat_map(|a| (0..20).map(move |b| format!("('{a}', {b}, {}, {b})", b % 7)))
        .collect();
    engine
        .collect(&format!(
            "INSERT INTO {t} (a, b, c, v) VALUES {}",
            values.join(", ")
        ))
        .await
        .expect("insert");
    assert_eq!(
        health(&engine, "tablesql_check_index", &t).await,
        [("c".into(), 0, 0, 0, 0), ("k".into(), 0, 0, 0, 0)]
    );
    let table = TableName::new(name).expect("name");
    let pk = |a: &str| PartitionKey::new(a).expect("pk");
    let rk = |k: &str| RowKey::new(k).expect("rk");
    let delete = |a: &str, k: &str| WriteOp::Delete {
        partition_key: pk(a),
        row_key: rk(k),
        if_match: IfMatch::Any,
    };
    // Missing: two of c's rows and two of k's, in three partitions; base
    // row x/3 lacks both (one repair writes both under one guard).
    for op in [
        delete("x", "C:03__003"),
        delete("x", "K:03__3"),
        delete("y", "C:05__005"),
        delete("z", "K:01__1"),
    ] {
        store.execute(&table, op).await.expect("delete");
    }
    // Orphaned: index rows no base row composes.
    for (a, k) in [("x", "C:06__099"), ("z", "K:02__77"), ("y", "K:04__5")] {
        let e = Entity::new(pk(a), rk(k)).with("v", EdmValue::Int32(1));
        store
            .execute(&table, WriteOp::InsertOrReplace(e))
            .await
            .expect("orphan");
    }
    // Stale: a covering row carrying another v than its base row.
    let stale = Entity::new(pk("z"), rk("C:04__011"))
        .with("a", EdmValue::String("z".into()))
        .with("b", EdmValue::Int32(11))
        .with("c", EdmValue::Int32(4))
        .with("v", EdmValue::Int32(500));
    store
        .execute(&table, WriteOp::InsertOrReplace(stale))
        .await
        .expect("stale");
    assert_eq!(
        health(&engine, "tablesql_check_index", &t).await,
        [("c".into(), 2, 1, 1, 0), ("k".into(), 2, 2, 0, 0)]
    );
    assert_eq!(
        health(&engine, "tablesql_repair_index", &t).await,
        [("c".into(), 2, 1, 1, 4), ("k".into(), 2, 2, 0, 4)]
    );
    assert_eq!(
        health(&engine, "tablesql_check_index", &t).await,
        [("c".into(), 0, 0, 0, 0), ("k".into(), 0, 0, 0, 0)]
    );
    let off = Engine::with_store(store, EngineOptions::default())
        .await
        .expect("engine")
        .session();
    off.collect("SET tablesql.use_indexes = off")
        .await
        .expect("set");
    for sql in [
        format!("SELECT a, b, v FROM {t} WHERE c = 4 ORDER BY a, b"),
        format!("SELECT a, b FROM {t} WHERE a = 'y' AND c IN (1, 2) ORDER BY a, b"),
    ] {
        let plan = answer(&engine, &format!("EXPLAIN {sql}")).await;
        assert!(plan.contains("access=index_"), "{plan}");
        assert_eq!(
            answer(&engine, &sql).await,
            answer(&off, &sql).await,
            "{sql}"
        );
    }
}

/// `CREATE INDEX` writes the rows of the base rows there are, so the new
/// index answers at once and CHECK finds it whole; `DROP INDEX ... CASCADE`
/// removes the declaration and the rows.
async fn created_indexes_are_backfilled(store: Arc<dyn TableStore>, name: &str) {
    let engine = Engine::with_store(store.clone(), EngineOptions::default())
        .await
        .expect("engine")
        .session();
    let t = name.to_lowercase();
    engine
        .collect(&format!(
            "CREATE TABLE {t} (a TEXT NOT NULL, b INT NOT NULL, c INT NOT NULL, d TEXT NOT NULL, v INT, PRIMARY KEY (a, b)) \
             WITH (storage_table = '{name}', partition_key = '{{a}}', row_key = 'R:{{b:03}}')"
        ))
        .await
        .expect("create");
    let values: Vec<String> = ["x", "y"]
        .iter()
        .flat_map(|a| (0..30).map(move |b| format!("('{a}', {b}, {}, 'd{}', {b})", b % 5, b % 3)))
        .collect();
    engine
        .collect(&format!(
            "INSERT INTO {t} (a, b, c, d, v) VALUES {}",
            values.join(", ")
        ))
        .await
        .expect("insert");
    engine
        .collect(&format!(
            "CREATE INDEX by_c ON {t} (c) WITH (covering = false)"
        ))
        .await
        .expect("create index");
    engine
        .collect(&format!("CREATE INDEX by_d ON {t} (d, c)"))
        .await
        .expect("create index");
    assert_eq!(
        health(&engine, "tablesql_check_index", &t).await,
        [("by_c".into(), 0, 0, 0, 0), ("by_d".into(), 0, 0, 0, 0)]
    );
    let sql = format!("SELECT a, b, v FROM {t} WHERE c = 3 ORDER BY a, b");
    let plan = answer(&engine, &format!("EXPLAIN {sql}")).await;
    assert!(
        plan.contains("access=index_point(by_c)") && plan.contains("lookup=base_rows"),
        "{plan}"
    );
    assert!(
        answer(&engine, &sql).await.lines().count() == 12 + 4,
        "{}",
        answer(&engine, &sql).await
    );
    let sql = format!("SELECT a, b FROM {t} WHERE d = 'd1' AND c > 2 ORDER BY a, b");
    let plan = answer(&engine, &format!("EXPLAIN {sql}")).await;
    assert!(plan.contains("access=index_range(by_d)"), "{plan}");
    // Creating it again is refused; IF NOT EXISTS passes.
    let again = answer(&engine, &format!("CREATE INDEX by_c ON {t} (c)")).await;
    assert!(again.contains("already exists"), "{again}");
    engine
        .collect(&format!("CREATE INDEX IF NOT EXISTS by_c ON {t} (c)"))
        .await
        .expect("if not exists");
    // DROP INDEX with CASCADE takes its rows along.
    engine
        .collect("DROP INDEX by_c CASCADE")
        .await
        .expect("drop");
    engine
        .collect(&format!("DROP INDEX {t}.by_d"))
        .await
        .expect("drop");
    let left = store
        .query(&TableName::new(name).expect("name"), &Query::all(), None)
        .await
        .expect("scan");
    let prefixes: std::collections::BTreeSet<&str> = left
        .entities
        .iter()
        .map(|e| e.row_key().as_str().split(':').next().unwrap_or_default())
        .collect();
    // by_d's rows stay (no CASCADE): the application may still read them.
    assert_eq!(prefixes.into_iter().collect::<Vec<_>>(), ["BY_D", "R"]);
    let gone = answer(&engine, "DROP INDEX by_c").await;
    assert!(gone.contains("does not exist"), "{gone}");
}

/// A base row whose value an index template cannot write (a BIGINT past
/// the 18 digits of `{c:+18}`; the default template's `{c:i19}` holds any) keeps a new index unused, with the reason;
/// the table's other index keeps its rows, and REPAIR deletes none of them.
#[tokio::test]
async fn an_unindexable_row_keeps_a_new_index_unused() {
    let store: Arc<dyn TableStore> = Arc::new(MemoryStore::new());
    let engine = Engine::with_store(store, EngineOptions::default())
        .await
        .expect("engine")
        .session();
    engine
        .collect(
            "CREATE TABLE uu (p TEXT NOT NULL, id INT NOT NULL, a INT NOT NULL, big BIGINT NOT NULL, PRIMARY KEY (p, id)) \
             WITH (storage_table = 'Unindexable', partition_key = '{p}', row_key = 'R:{id:03}', index_a = 'A:{a:03}__{id}')",
        )
        .await
        .expect("create");
    engine
        .collect("INSERT INTO uu (p, id, a, big) VALUES ('x', 1, 5, 2000000000000000000), ('x', 2, 55, 7)")
        .await
        .expect("insert");
    let refused = answer(
        &engine,
        "CREATE INDEX bg ON uu (big) WITH (row_key = 'BG:{big:+18}__{id:03}')",
    )
    .await;
    assert!(
        refused.contains("stays unused (building): 1 base rows"),
        "{refused}"
    );
    let plan = answer(
        &engine,
        "EXPLAIN SELECT id FROM uu WHERE p = 'x' ORDER BY big",
    )
    .await;
    assert!(!plan.contains("bg"), "{plan}");
    assert_eq!(
        health(&engine, "tablesql_repair_index", "uu").await,
        [("a".into(), 0, 0, 0, 0), ("bg".into(), 1, 0, 0, 0)]
    );
    assert!(
        answer(&engine, "SELECT id FROM uu WHERE p = 'x' AND a = 5")
            .await
            .contains("| 1  |")
    );
    // Two indexes may not share a RowKey prefix.
    let clash = answer(
        &engine,
        "CREATE INDEX a2 ON uu (a) WITH (row_key = 'A:{a:03}__{id}')",
    )
    .await;
    assert!(clash.contains("starts like a"), "{clash}");
}

#[tokio::test]
async fn damaged_indexes_are_found_and_repaired_memory() {
    damaged_indexes_are_found_and_repaired(
        Arc::new(MemoryStore::new().with_scan_budget(4)),
        "Damaged",
    )
    .await;
    created_indexes_are_backfilled(Arc::new(MemoryStore::new()), "Backfilled").await;
}

#[tokio::test]
async fn damaged_indexes_are_found_and_repaired_embedded() {
    let store = EmbeddedStore::in_memory().expect("store");
    damaged_indexes_are_found_and_repaired(Arc::new(store), "Damaged").await;
    let store = EmbeddedStore::in_memory().expect("store");
    created_indexes_are_backfilled(Arc::new(store), "Backfilled").await;
}

#[tokio::test]
async fn damaged_indexes_are_found_and_repaired_azurite() {
    let (store, name) = azurite_case("Damaged", 1000).expect("azurite");
    damaged_indexes_are_found_and_repaired(store, &name).await;
    let (store, name) = azurite_case("Backfilled", 1000).expect("azurite");
    created_indexes_are_backfilled(store, &name).await;
}
