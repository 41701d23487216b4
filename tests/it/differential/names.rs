//! Output column names against PostgreSQL 15: random SELECT lists over one
//! table with a column of each common type, described by PostgreSQL and by
//! tablesql three ways (a prepared statement in-process, one over the wire,
//! and the RowDescription of a simple query over the wire). pandas, dict
//! cursors and BI tools read results by these names, so they must be
//! PostgreSQL's exactly, repeats included.

use rand::Rng;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use tokio_postgres::{Client, SimpleQueryMessage};

use super::{Systems, TestResult, env_number, postgres};

const COLUMNS: &str = "k INT PRIMARY KEY, g INT, a INT, b INT, c TEXT, d DOUBLE PRECISION, \
                       f BOOLEAN, ts TIMESTAMPTZ";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_names_are_postgresql_names() -> TestResult {
    let seed: u64 = env_number("TABLESQL_DIFF_SEED", 13);
    let total: usize = env_number("TABLESQL_NAMES_QUERIES", 400);
    let systems = Systems::start(&postgres()?).await?;
    systems
        .postgres
        .batch_execute(&format!(
            "DROP TABLE IF EXISTS names1; CREATE TABLE names1 ({COLUMNS})"
        ))
        .await?;
    systems
        .engine
        .collect(&format!("CREATE TABLE names1 ({COLUMNS})"))
        .await?;
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let (mut compared, mut refused) = (0, Vec::new());
    for _ in 0..total {
        let sql = select_list(&mut rng);
        // An expression PostgreSQL refuses (a type error) names nothing.
        let Ok(expected) = prepared_names(&systems.postgres, &sql).await else {
            continue;
        };
        let in_process = match systems.engine.prepare(&sql).await {
            Ok(p) => p
                .schema()
                .fields()
                .iter()
                .map(|f| f.name().clone())
                .collect::<Vec<_>>(),
            Err(e) => {
                refused.push(format!("{sql}: {e}"));
                continue;
            }
        };
        let wire = prepared_names(&systems.wire, &sql)
            .await
            .map_err(|e| format!("`{sql}` over the wire: {e}"))?;
        let simple = described_names(&systems.wire, &format!("{sql} LIMIT 0"))
            .await
            .map_err(|e| format!("`{sql} LIMIT 0` over the wire: {e}"))?;
        for (path, names) in [
            ("in-process", in_process),
            ("prepared", wire),
            ("simple", simple),
        ] {
            if names != expected {
                return Err(format!(
                    "seed {seed}, {path}: `{sql}`\n  tablesql   {names:?}\n  PostgreSQL {expected:?}"
                )
                .into());
            }
        }
        compared += 1;
    }
    eprintln!(
        "output names, seed {seed}: {compared} of {total} SELECT lists compared, {} refused by tablesql alone, e.g. {:?}",
        refused.len(),
        refused.first()
    );
    // The generator writes expressions both systems plan: a comparison of
    // few would prove little.
    assert!(
        compared >= 200 && refused.len() * 10 <= total,
        "{compared} compared, {} refused: {refused:#?}",
        refused.len()
    );
    Ok(())
}

async fn prepared_names(client: &Client, sql: &str) -> Result<Vec<String>, tokio_postgres::Error> {
    let statement = client.prepare(sql).await?;
    Ok(statement
        .columns()
        .iter()
        .map(|c| c.name().to_owned())
        .collect())
}

/// The names of a simple query's RowDescription.
async fn described_names(client: &Client, sql: &str) -> Result<Vec<String>, tokio_postgres::Error> {
    let messages = client.simple_query(sql).await?;
    Ok(messages
        .iter()
        .find_map(|m| match m {
            SimpleQueryMessage::RowDescription(columns) => {
                Some(columns.iter().map(|c| c.name().to_owned()).collect())
            }
            _ => None,
        })
        .unwrap_or_default())
}

/// `SELECT` of one to four items over `names1`: either row expressions, or
/// aggregates (some grouped by `g`).
fn select_list(rng: &mut ChaCha8Rng) -> String {
    let n = rng.random_range(1..=4);
    if rng.random_bool(0.2) {
        let items: Vec<String> = (0..n).map(|_| aggregate(rng)).collect();
        if rng.random_bool(0.5) {
            return format!("SELECT g, {} FROM names1 GROUP BY g", items.join(", "));
        }
        return format!("SELECT {} FROM names1", items.join(", "));
    }
    let items: Vec<String> = (0..n)
        .map(|_| {
            let e = any(rng, 2);
            if rng.random_bool(0.05) {
                format!("{e} AS x")
            } else {
                e
            }
        })
        .collect();
    format!("SELECT {} FROM names1 n", items.join(", "))
}

fn pick<'a>(rng: &mut ChaCha8Rng, options: &[&'a str]) -> &'a str {
    options[rng.random_range(0..options.len())]
}

fn any(rng: &mut ChaCha8Rng, depth: u32) -> String {
    match rng.random_range(0..6) {
        0 | 1 => int(rng, depth),
        2 => text(rng, depth),
        3 => double(rng, depth),
        4 => boolean(rng, depth),
        _ => time(rng, depth),
    }
}

fn aggregate(rng: &mut ChaCha8Rng) -> String {
    match rng.random_range(0..9) {
        0 => "count(*)".to_owned(),
        1 => format!("count({})", int(rng, 1)),
        2 => format!("sum({})", int(rng, 1)),
        3 => format!("max({})", text(rng, 1)),
        4 => format!("min({})", double(rng, 1)),
        5 => format!("avg({})", int(rng, 0)),
        6 => format!("count(DISTINCT {})", int(rng, 0)),
        7 => format!("sum({}) + 1", int(rng, 0)),
        _ => format!("coalesce(max({}), 0)", int(rng, 0)),
    }
}

fn int(rng: &mut ChaCha8Rng, depth: u32) -> String {
    let leaf = |rng: &mut ChaCha8Rng| {
        pick(rng, &["a", "b", "k", "n.a", "1", "42", "NULL::int"]).to_owned()
    };
    if depth == 0 {
        return leaf(rng);
    }
    let d = depth - 1;
    match rng.random_range(0..17) {
        0 | 1 => leaf(rng),
        15 => format!("position('a' in {})", text(rng, d)),
        16 => format!("{}::numeric(10, 2)::int", double(rng, d)),
        2 => format!("{} + {}", int(rng, d), int(rng, d)),
        // Not `--`, which starts a comment.
        3 => format!("- {}", int(rng, d)),
        4 => format!("abs({})", int(rng, d)),
        5 => format!("length({})", text(rng, d)),
        6 => format!("coalesce({}, {})", int(rng, d), int(rng, d)),
        7 => format!("nullif({}, {})", int(rng, d), int(rng, d)),
        8 => format!("greatest({}, {})", int(rng, d), int(rng, d)),
        9 => format!("CAST({} AS int)", double(rng, d)),
        10 => format!("({})", int(rng, d)),
        11 => format!(
            "CASE WHEN {} THEN {} ELSE {} END",
            boolean(rng, d),
            int(rng, d),
            int(rng, d)
        ),
        12 => format!("CASE WHEN {} THEN {} END", boolean(rng, d), int(rng, d)),
        13 => "(SELECT max(a) FROM names1)".to_owned(),
        _ => format!("{}::bigint", int(rng, d)),
    }
}

fn text(rng: &mut ChaCha8Rng, depth: u32) -> String {
    let leaf = |rng: &mut ChaCha8Rng| pick(rng, &["c", "n.c", "'x'", "'a b'"]).to_owned();
    if depth == 0 {
        return leaf(rng);
    }
    let d = depth - 1;
    match rng.random_range(0..17) {
        0 | 1 => leaf(rng),
        14 => format!("trim(leading 'a' from {})", text(rng, d)),
        15 => format!("{}::varchar(3)", text(rng, d)),
        16 => "(SELECT c FROM names1 LIMIT 1)".to_owned(),
        2 => format!("upper({})", text(rng, d)),
        3 => format!("lower({})", text(rng, d)),
        4 => format!("{} || {}", text(rng, d), text(rng, d)),
        5 => format!("substring({} from 1 for 2)", text(rng, d)),
        6 => format!("trim({})", text(rng, d)),
        7 => format!("{}::text", int(rng, d)),
        8 => format!("CAST({} AS varchar)", int(rng, d)),
        9 => format!("coalesce({}, 'z')", text(rng, d)),
        10 => format!("replace({}, 'a', 'b')", text(rng, d)),
        11 => format!("concat({}, {})", text(rng, d), int(rng, d)),
        12 => "(SELECT max(c) FROM names1)".to_owned(),
        _ => format!("left({}, 1)", text(rng, d)),
    }
}

fn double(rng: &mut ChaCha8Rng, depth: u32) -> String {
    let leaf = |rng: &mut ChaCha8Rng| pick(rng, &["d", "n.d", "1.5"]).to_owned();
    if depth == 0 {
        return leaf(rng);
    }
    let d = depth - 1;
    match rng.random_range(0..9) {
        0 | 1 => leaf(rng),
        2 => format!("{} * 2", double(rng, d)),
        3 => format!("round({})", double(rng, d)),
        4 => format!("ceil({})", double(rng, d)),
        5 => format!("floor({})", double(rng, d)),
        6 => format!("{}::float8", int(rng, d)),
        7 => format!("CAST({} AS double precision)", int(rng, d)),
        _ => format!("sqrt(abs({}))", double(rng, d)),
    }
}

fn boolean(rng: &mut ChaCha8Rng, depth: u32) -> String {
    let leaf = |rng: &mut ChaCha8Rng| pick(rng, &["f", "n.f", "true", "false"]).to_owned();
    if depth == 0 {
        return leaf(rng);
    }
    let d = depth - 1;
    match rng.random_range(0..10) {
        0 | 1 => leaf(rng),
        2 => format!("{} > {}", int(rng, d), int(rng, d)),
        3 => format!("{} LIKE 'a%'", text(rng, d)),
        4 => format!("{} IS NULL", int(rng, d)),
        5 => format!("NOT {}", boolean(rng, d)),
        6 => format!("{} AND {}", boolean(rng, d), boolean(rng, d)),
        7 => format!("{} IN (1, 2)", int(rng, d)),
        8 => format!("{} BETWEEN 1 AND 3", int(rng, d)),
        _ => "EXISTS (SELECT 1 FROM names1 WHERE a > 1)".to_owned(),
    }
}

fn time(rng: &mut ChaCha8Rng, depth: u32) -> String {
    let leaf = |rng: &mut ChaCha8Rng| {
        pick(
            rng,
            &[
                "ts",
                "n.ts",
                "now()",
                "current_timestamp",
                "current_date",
                "timestamp '2020-01-01 00:00:00'",
                "date '2020-01-01'",
            ],
        )
        .to_owned()
    };
    if depth == 0 {
        return leaf(rng);
    }
    match rng.random_range(0..5) {
        0 | 1 => leaf(rng),
        2 => format!("{} + interval '1 day'", time(rng, depth - 1)),
        3 => format!("date_trunc('day', {})", time(rng, depth - 1)),
        _ => format!("extract(year from {})", time(rng, depth - 1)),
    }
}
