//! Random scenarios of DDL and DML on plain tables, in the SQL both
//! PostgreSQL and tablesql read: a table created as an application creates
//! it (nullable columns, with or without a primary key, a SERIAL key),
//! then writes (INSERT with and without RETURNING, INSERT ... SELECT *,
//! UPDATE and DELETE by their own columns or by a subquery, with and
//! without RETURNING, ALTER TABLE ADD COLUMN (nullable, or NOT NULL with a
//! default) and RENAME COLUMN then writes of it, a view, TRUNCATE). Pure
//! functions of a seeded RNG.

use rand::Rng;
use rand_chacha::ChaCha8Rng;

/// A column of a generated table.
#[derive(Debug, Clone)]
pub struct Column {
    pub name: String,
    /// `INT`, `BIGINT`, `TEXT` or `BOOLEAN`.
    pub sql_type: &'static str,
    pub not_null: bool,
}

/// How a generated table is keyed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Key {
    /// No primary key (tablesql's hidden row key).
    None,
    /// `id SERIAL PRIMARY KEY`.
    Serial,
    /// `id INT PRIMARY KEY`, the ids given.
    Given,
    /// `PRIMARY KEY (grp, id)`, both INT.
    Composite,
}

/// One scenario: its table, and the statements that follow its creation,
/// each with the query of every row that checks it (the table's columns
/// as they are after that step).
#[derive(Debug, Clone)]
pub struct Scenario {
    pub table: String,
    pub key: Key,
    pub columns: Vec<Column>,
    /// The columns it is created with (ALTER adds and renames).
    pub initial: Vec<Column>,
    pub steps: Vec<(String, String)>,
}

const TEXTS: [&str; 5] = ["a", "b", "B", "", "a b"];

impl Scenario {
    /// Its `CREATE TABLE`, in PostgreSQL's words.
    pub fn create(&self) -> String {
        let mut parts = Vec::new();
        let columns = &self.initial;
        match self.key {
            Key::None => {}
            Key::Serial => parts.push("id SERIAL PRIMARY KEY".to_owned()),
            Key::Given => parts.push("id INT PRIMARY KEY".to_owned()),
            Key::Composite => parts.push("grp INT NOT NULL, id INT NOT NULL".to_owned()),
        }
        for c in columns {
            let null = if c.not_null { " NOT NULL" } else { "" };
            parts.push(format!("{} {}{null}", c.name, c.sql_type));
        }
        if self.key == Key::Composite {
            parts.push("PRIMARY KEY (grp, id)".to_owned());
        }
        format!("CREATE TABLE {} ({})", self.table, parts.join(", "))
    }

    /// A query of every row in one order, whatever the columns are now:
    /// what each step is checked by.
    pub fn read_all(&self) -> String {
        format!("SELECT * FROM {} ORDER BY {}", self.table, self.order_by())
    }

    fn order_by(&self) -> String {
        let mut keys: Vec<String> = match self.key {
            Key::None => Vec::new(),
            Key::Serial | Key::Given => vec!["id".into()],
            Key::Composite => vec!["grp".into(), "id".into()],
        };
        keys.extend(
            self.columns
                .iter()
                .map(|c| format!("{} NULLS FIRST", c.name)),
        );
        keys.join(", ")
    }
}

fn value(rng: &mut ChaCha8Rng, c: &Column) -> String {
    if !c.not_null && rng.random_bool(0.25) {
        return "NULL".into();
    }
    match c.sql_type {
        "INT" => rng.random_range(-3..6).to_string(),
        "BIGINT" => (rng.random_range(-3i64..6) * 1_000_000_007).to_string(),
        "BOOLEAN" => if rng.random_bool(0.5) {
            "true"
        } else {
            "false"
        }
        .into(),
        _ => format!("'{}'", TEXTS[rng.random_range(0..TEXTS.len())]),
    }
}

/// A condition on the table's own columns.
fn condition(rng: &mut ChaCha8Rng, s: &Scenario) -> String {
    let c = &s.columns[rng.random_range(0..s.columns.len())];
    match c.sql_type {
        "BOOLEAN" => format!(
            "{} = {}",
            c.name,
            value(
                rng,
                &Column {
                    not_null: true,
                    ..c.clone()
                }
            )
        ),
        "TEXT" => match rng.random_range(0..3) {
            0 => format!("{} IS NULL", c.name),
            1 => format!("{} < 'b'", c.name),
            _ => format!(
                "{} = {}",
                c.name,
                value(
                    rng,
                    &Column {
                        not_null: true,
                        ..c.clone()
                    }
                )
            ),
        },
        _ => match rng.random_range(0..3) {
            0 => format!("{} IS NOT NULL", c.name),
            1 => format!("{} > 0", c.name),
            _ => format!("{} BETWEEN -1 AND 2", c.name),
        },
    }
}

/// A random scenario over table `table`.
pub fn scenario(rng: &mut ChaCha8Rng, table: &str) -> Scenario {
    let key = match rng.random_range(0..4) {
        0 => Key::None,
        1 => Key::Serial,
        2 => Key::Given,
        _ => Key::Composite,
    };
    let types = ["INT", "BIGINT", "TEXT", "BOOLEAN"];
    let columns: Vec<Column> = (0..rng.random_range(1..=3))
        .map(|i| Column {
            name: format!("c{i}"),
            sql_type: types[rng.random_range(0..types.len())],
            not_null: rng.random_bool(0.2),
        })
        .collect();
    let mut s = Scenario {
        table: table.to_owned(),
        key,
        initial: columns.clone(),
        columns,
        steps: Vec::new(),
    };
    let mut next_id = 1;
    let copy = format!("{table}_copy");
    for _ in 0..rng.random_range(6..12) {
        let step = match rng.random_range(0..11) {
            0..=2 => {
                // New rows; their keys never repeat, so every insert lands.
                let n = rng.random_range(1..=4);
                let mut rows = Vec::new();
                for _ in 0..n {
                    let mut values = Vec::new();
                    match s.key {
                        Key::None | Key::Serial => {}
                        Key::Given => values.push(next_id.to_string()),
                        Key::Composite => {
                            values.push(rng.random_range(0..3).to_string());
                            values.push(next_id.to_string());
                        }
                    }
                    next_id += 1;
                    for c in &s.columns {
                        values.push(value(rng, c));
                    }
                    rows.push(format!("({})", values.join(", ")));
                }
                let mut names: Vec<String> = match s.key {
                    Key::None | Key::Serial => Vec::new(),
                    Key::Given => vec!["id".into()],
                    Key::Composite => vec!["grp".into(), "id".into()],
                };
                names.extend(s.columns.iter().map(|c| c.name.clone()));
                let returning = match (rng.random_range(0..3), s.key) {
                    (0, Key::None) => " RETURNING *".to_owned(),
                    (0, _) => format!(" RETURNING id, {}", s.columns[0].name),
                    _ => String::new(),
                };
                format!(
                    "INSERT INTO {table} ({}) VALUES {}{returning}",
                    names.join(", "),
                    rows.join(", ")
                )
            }
            3 => {
                let c = &s.columns[rng.random_range(0..s.columns.len())];
                let v = value(rng, c);
                let returning = if rng.random_bool(0.4) {
                    format!(" RETURNING {}", c.name)
                } else {
                    String::new()
                };
                format!(
                    "UPDATE {table} SET {} = {v} WHERE {}{returning}",
                    c.name,
                    condition(rng, &s)
                )
            }
            4 => {
                let returning = if rng.random_bool(0.4) {
                    " RETURNING *"
                } else {
                    ""
                };
                format!(
                    "DELETE FROM {table} WHERE {}{returning}",
                    condition(rng, &s)
                )
            }
            5 => {
                // Rows chosen by a subquery over the table itself.
                let c = &s.columns[0];
                format!(
                    "DELETE FROM {table} WHERE {0} IN (SELECT {0} FROM {table} WHERE {1})",
                    c.name,
                    condition(rng, &s)
                )
            }
            6 if s.columns.len() < 5 => {
                let name = format!("c{}", s.columns.len());
                let sql_type = types[rng.random_range(0..types.len())];
                let not_null = rng.random_bool(0.4);
                let column = Column {
                    name: name.clone(),
                    sql_type,
                    not_null,
                };
                let some = Column {
                    not_null: true,
                    ..column.clone()
                };
                let set = value(rng, &some);
                // NOT NULL needs a default for the rows already there.
                let default = if not_null {
                    format!(" NOT NULL DEFAULT {}", value(rng, &some))
                } else {
                    String::new()
                };
                s.columns.push(column);
                format!(
                    "ALTER TABLE {table} ADD COLUMN {name} {sql_type}{default}; UPDATE {table} SET {name} = {set} WHERE {}",
                    condition(rng, &s)
                )
            }
            7 => {
                // A copy of its rows through `*`, into a table of the same
                // columns without a key; read back, then dropped.
                let columns: Vec<String> = s
                    .columns
                    .iter()
                    .map(|c| format!("{} {}", c.name, c.sql_type))
                    .collect();
                let keys = match s.key {
                    Key::None => "",
                    Key::Serial | Key::Given => "id INT, ",
                    Key::Composite => "grp INT, id INT, ",
                };
                format!(
                    "CREATE TABLE {copy} ({keys}{}); INSERT INTO {copy} SELECT * FROM {table}",
                    columns.join(", ")
                )
            }
            8 => {
                let view = format!("{table}_view");
                format!(
                    "CREATE VIEW {view} AS SELECT * FROM {table} WHERE {}",
                    condition(rng, &s)
                )
            }
            9 => {
                // A column renamed, and a write of it by its new name.
                let at = rng.random_range(0..s.columns.len());
                let old = s.columns[at].name.clone();
                let new = format!("r{}_{old}", s.steps.len());
                s.columns[at].name = new.clone();
                let set = value(
                    rng,
                    &Column {
                        not_null: true,
                        ..s.columns[at].clone()
                    },
                );
                format!(
                    "ALTER TABLE {table} RENAME COLUMN {old} TO {new}; UPDATE {table} SET {new} = {set} WHERE {}",
                    condition(rng, &s)
                )
            }
            _ => format!("TRUNCATE {table}"),
        };
        // A statement that made a copy or a view reads it, then drops it.
        let then = if step.starts_with(&format!("CREATE TABLE {copy}")) {
            Some(format!(
                "SELECT count(*) AS n FROM {copy}; DROP TABLE {copy}"
            ))
        } else if step.starts_with("CREATE VIEW") {
            Some(format!(
                "SELECT count(*) AS n FROM {table}_view; DROP VIEW {table}_view"
            ))
        } else {
            None
        };
        let read = s.read_all();
        s.steps.push((step, read.clone()));
        if let Some(then) = then {
            s.steps.push((then, read));
        }
    }
    s
}
