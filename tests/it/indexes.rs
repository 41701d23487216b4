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
use tablesql::{Engine, EngineOptions};

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
        .map_err(fail)?;
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
        .map_err(fail)?;
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
