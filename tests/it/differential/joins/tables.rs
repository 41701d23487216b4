//! The join differential's tables: random shapes of key (a plain table's
//! bucketed single key or composite key, mapped tables with explicit
//! PartitionKey and RowKey templates of free-text, zero-padded, signed,
//! inverted and typed fields), nullable columns outside the key that hold
//! other tables' key values (and NULLs, and values no key holds), local and
//! global indexes, and rows. Pure functions of a seeded RNG; each statement
//! comes in tablesql's spelling and PostgreSQL's (without the `WITH`).

use rand::Rng;
use rand_chacha::ChaCha8Rng;

/// A join column's type: integers of either width meet each other, text
/// meets text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ty {
    Int,
    Big,
    Text,
}

impl Ty {
    fn sql(self) -> &'static str {
        match self {
            Ty::Int => "INT",
            Ty::Big => "BIGINT",
            Ty::Text => "TEXT",
        }
    }

    /// Whether `a = b` compares the two in both systems.
    pub fn meets(self, other: Ty) -> bool {
        (self == Ty::Text) == (other == Ty::Text)
    }

    /// The values keys hold. Every column of the type draws from the same
    /// few, so that joins meet often (an INT's 0..6 are a BIGINT's too).
    pub fn keys(self) -> &'static [&'static str] {
        match self {
            Ty::Int => &["0", "1", "2", "3", "4", "5", "6", "7", "8", "9"],
            Ty::Big => &["0", "1", "2", "3", "4", "5", "6", "3000000021"],
            Ty::Text => &["'a'", "'b'", "'B'", "'c'", "'ab'", "'a b'", "'d'"],
        }
    }

    /// Values only columns outside the key hold: no key matches them, and
    /// some no key template can write (a negative number in a zero-padded
    /// field, a BIGINT past INT's range, an empty text).
    pub fn strays(self) -> &'static [&'static str] {
        match self {
            Ty::Int => &["-1", "11"],
            Ty::Big => &["-1", "5000000035"],
            Ty::Text => &["''", "'zz'", "'a%'"],
        }
    }
}

fn any_ty(rng: &mut ChaCha8Rng) -> Ty {
    [Ty::Int, Ty::Big, Ty::Text][rng.random_range(0..3)]
}

pub fn pick<'a, T>(rng: &mut ChaCha8Rng, xs: &'a [T]) -> &'a T {
    &xs[rng.random_range(0..xs.len())]
}

/// A column: the key's come first, in key order (`k1`, `k2`, `k3`), then
/// `x` (an integer), `y` (text) and `z` (any), nullable.
#[derive(Debug, Clone)]
pub struct Column {
    pub name: &'static str,
    pub ty: Ty,
    pub key: bool,
}

/// A `CREATE INDEX` on a table.
#[derive(Debug, Clone)]
pub struct Index {
    pub name: String,
    /// Positions in the table's columns, in the index's order.
    pub columns: Vec<usize>,
    pub global: bool,
    /// Created before the rows were inserted (written with them), else
    /// after (built from them).
    pub early: bool,
}

/// One generated table.
#[derive(Debug, Clone)]
pub struct Table {
    pub name: String,
    /// `plain single`, `plain composite` or the mapped templates.
    pub shape: &'static str,
    pub columns: Vec<Column>,
    /// How many leading columns are the primary key.
    pub keys: usize,
    /// The mapping's `WITH (...)`, for a mapped table.
    pub mapping: Option<String>,
    pub indexes: Vec<Index>,
    /// Each row's values as SQL literals, in column order.
    pub rows: Vec<Vec<String>>,
    /// `ANALYZE` after loading, so that `on` plans from estimates.
    pub analyze: bool,
    /// What its columns outside the key refer to (`link`).
    pub references: Vec<Reference>,
}

/// The shapes of key: a plain table's (tablesql chooses the mapping) or a
/// mapped one's templates, with the key columns' types.
const MAPPED: [(&str, &str, &[Ty]); 7] = [
    ("P", "{k1:05}", &[Ty::Int]),
    ("T", "{k1:s}", &[Ty::Text]),
    ("{k1}", "{k2:05}", &[Ty::Text, Ty::Int]),
    ("{k1:i10}", "{k2:s}", &[Ty::Int, Ty::Text]),
    ("{k1}", "R:{k2:i19}__{k3}", &[Ty::Text, Ty::Big, Ty::Text]),
    ("{k1:+18}", "{k2:~03}", &[Ty::Big, Ty::Int]),
    (
        "G{k1:02}",
        "K{k2:+10}__{k3:s}",
        &[Ty::Int, Ty::Int, Ty::Text],
    ),
];

const KEY_NAMES: [&str; 3] = ["k1", "k2", "k3"];

/// A random table named `name`, stored (if mapped) in `storage`.
pub fn table(rng: &mut ChaCha8Rng, name: &str, storage: &str) -> Table {
    let (shape, keys, mapping): (&'static str, Vec<Ty>, Option<String>) = match rng
        .random_range(0..10)
    {
        0 | 1 => ("plain single", vec![any_ty(rng)], None),
        2 | 3 => ("plain composite", vec![any_ty(rng), any_ty(rng)], None),
        _ => {
            let i = rng.random_range(0..MAPPED.len());
            let (pk, rk, tys) = MAPPED[i];
            let shape = [
                "mapped P/{k1:05}",
                "mapped T/{k1:s}",
                "mapped {k1}/{k2:05}",
                "mapped {k1:i10}/{k2:s}",
                "mapped {k1}/R:{k2:i19}__{k3}",
                "mapped {k1:+18}/{k2:~03}",
                "mapped G{k1:02}/K{k2:+10}__{k3:s}",
            ][i];
            let with = format!(
                "storage_table = '{storage}', owned = true, partition_key = '{pk}', row_key = '{rk}'"
            );
            (shape, tys.to_vec(), Some(with))
        }
    };
    let mut columns: Vec<Column> = keys
        .iter()
        .zip(KEY_NAMES)
        .map(|(&ty, name)| Column {
            name,
            ty,
            key: true,
        })
        .collect();
    let x = if rng.random_bool(0.6) {
        Ty::Int
    } else {
        Ty::Big
    };
    for (name, ty) in [("x", x), ("y", Ty::Text), ("z", any_ty(rng))] {
        columns.push(Column {
            name,
            ty,
            key: false,
        });
    }
    let mut t = Table {
        name: name.to_owned(),
        shape,
        keys: keys.len(),
        columns,
        mapping,
        indexes: Vec::new(),
        rows: Vec::new(),
        analyze: rng.random_bool(0.5),
        references: Vec::new(),
    };
    t.rows = rows(rng, &t);
    let indexes = *pick(rng, &[0, 1, 1, 1, 2, 2]);
    for n in 1..=indexes {
        let index = index(rng, &t, n);
        if !t.indexes.iter().any(|i| i.columns == index.columns) {
            t.indexes.push(index);
        }
    }
    t
}

/// Up to 24 rows with distinct keys (none, now and then); outside the key,
/// three in five values a key holds, one a stray, one NULL.
fn rows(rng: &mut ChaCha8Rng, t: &Table) -> Vec<Vec<String>> {
    let wanted = if rng.random_bool(0.05) {
        0
    } else {
        rng.random_range(3..=24)
    };
    let mut rows: Vec<Vec<String>> = Vec::new();
    for _ in 0..wanted * 2 {
        if rows.len() == wanted {
            break;
        }
        let key: Vec<String> = t.columns[..t.keys]
            .iter()
            .map(|c| pick(rng, c.ty.keys()).to_string())
            .collect();
        if rows.iter().any(|r| r[..t.keys] == key[..]) {
            continue;
        }
        let mut row = key;
        for c in &t.columns[t.keys..] {
            row.push(match rng.random_range(0..5) {
                0 => "NULL".to_owned(),
                1 => pick(rng, c.ty.strays()).to_string(),
                _ => pick(rng, c.ty.keys()).to_string(),
            });
        }
        rows.push(row);
    }
    rows
}

/// Columns of one table that refer to an access pattern of another (or
/// of itself), as a foreign key does: many rows hold a row's values there.
#[derive(Debug, Clone)]
pub struct Reference {
    /// The table referred to.
    pub table: String,
    /// Own column and the column it refers to, by position, in the
    /// pattern's order.
    pub columns: Vec<(usize, usize)>,
}

/// Makes joins meet, on several columns too: each table gets a reference
/// to a whole key, a key prefix or an index's columns of every other
/// table (and now and then of itself), held by columns outside its key of
/// types that meet, and most rows take a row's values along one of them.
pub fn link(rng: &mut ChaCha8Rng, tables: &mut [Table]) {
    for t in 0..tables.len() {
        for u in 0..tables.len() {
            if u == t && rng.random_bool(0.7) {
                continue;
            }
            let patterns = tables[u].access_patterns();
            let (_, cols) = pick(rng, &patterns).clone();
            let mut columns: Vec<(usize, usize)> = Vec::new();
            for their in cols {
                let ty = tables[u].columns[their].ty;
                let free: Vec<usize> = (tables[t].keys..tables[t].columns.len())
                    .filter(|&c| tables[t].columns[c].ty.meets(ty))
                    .filter(|&c| !columns.iter().any(|(own, _)| *own == c))
                    .collect();
                if free.is_empty() {
                    break;
                }
                columns.push((*pick(rng, &free), their));
            }
            if !columns.is_empty() {
                let table = tables[u].name.clone();
                tables[t].references.push(Reference { table, columns });
            }
        }
        if tables[t].references.is_empty() {
            continue;
        }
        for r in 0..tables[t].rows.len() {
            if rng.random_bool(0.3) {
                continue;
            }
            let reference = pick(rng, &tables[t].references).clone();
            let Some(u) = tables.iter().position(|u| u.name == reference.table) else {
                continue;
            };
            if tables[u].rows.is_empty() {
                continue;
            }
            let from = tables[u].rows[rng.random_range(0..tables[u].rows.len())].clone();
            for &(own, their) in &reference.columns {
                let value = &from[their];
                // An INT column cannot hold a BIGINT past its range.
                let fits = tables[t].columns[own].ty != Ty::Int || value.parse::<i32>().is_ok();
                if value != "NULL" && fits {
                    tables[t].rows[r][own] = value.clone();
                }
            }
        }
    }
}

/// An index of one or two columns outside the key, or of a key column
/// other than the first (so that a join on it alone has an index to read).
fn index(rng: &mut ChaCha8Rng, t: &Table, n: usize) -> Index {
    let candidates: Vec<usize> = (1..t.columns.len()).collect();
    let mut columns = vec![*pick(rng, &candidates)];
    if rng.random_bool(0.35) {
        let second = *pick(rng, &candidates);
        if !columns.contains(&second) {
            columns.push(second);
        }
    }
    Index {
        name: format!("{}_ix{n}", t.name),
        columns,
        global: rng.random_bool(0.5),
        early: rng.random_bool(0.3),
    }
}

/// A statement in tablesql's spelling and in PostgreSQL's.
#[derive(Debug, Clone)]
pub struct Statement {
    pub tablesql: String,
    pub postgres: String,
}

impl Statement {
    fn both(sql: String) -> Self {
        Self {
            tablesql: sql.clone(),
            postgres: sql,
        }
    }
}

impl Table {
    fn create(&self) -> Statement {
        let mut parts: Vec<String> = self
            .columns
            .iter()
            .map(|c| {
                let null = if c.key { " NOT NULL" } else { "" };
                format!("{} {}{null}", c.name, c.ty.sql())
            })
            .collect();
        let key: Vec<&str> = self.columns[..self.keys].iter().map(|c| c.name).collect();
        parts.push(format!("PRIMARY KEY ({})", key.join(", ")));
        let postgres = format!("CREATE TABLE {} ({})", self.name, parts.join(", "));
        let tablesql = match &self.mapping {
            Some(with) => format!("{postgres} WITH ({with})"),
            None => postgres.clone(),
        };
        Statement { tablesql, postgres }
    }

    fn create_index(&self, index: &Index) -> Statement {
        let columns: Vec<&str> = index
            .columns
            .iter()
            .map(|&c| self.columns[c].name)
            .collect();
        let postgres = format!(
            "CREATE INDEX {} ON {} ({})",
            index.name,
            self.name,
            columns.join(", ")
        );
        let tablesql = if index.global {
            format!("{postgres} WITH (global = true)")
        } else {
            postgres.clone()
        };
        Statement { tablesql, postgres }
    }

    /// The `INSERT` of `rows`, or none for no rows.
    pub fn insert(&self, rows: &[Vec<String>]) -> Option<Statement> {
        if rows.is_empty() {
            return None;
        }
        let names: Vec<&str> = self.columns.iter().map(|c| c.name).collect();
        let values: Vec<String> = rows.iter().map(|r| format!("({})", r.join(", "))).collect();
        Some(Statement::both(format!(
            "INSERT INTO {} ({}) VALUES {}",
            self.name,
            names.join(", "),
            values.join(", ")
        )))
    }

    /// Every statement that makes the table and its rows: the table, the
    /// indexes made before the rows, the rows, the other indexes, and
    /// `ANALYZE` (tablesql's statistics; PostgreSQL's are harmless).
    pub fn setup(&self) -> Vec<Statement> {
        let mut steps = vec![self.create()];
        let (early, late): (Vec<&Index>, Vec<&Index>) = self.indexes.iter().partition(|i| i.early);
        steps.extend(early.iter().map(|i| self.create_index(i)));
        steps.extend(self.insert(&self.rows));
        steps.extend(late.iter().map(|i| self.create_index(i)));
        if self.analyze {
            steps.push(Statement::both(format!("ANALYZE {}", self.name)));
        }
        steps
    }

    /// A value for a condition on column `c`: mostly one a row holds, else
    /// one of the type's (a stray a fifth of the time).
    pub fn value(&self, rng: &mut ChaCha8Rng, c: usize) -> String {
        if rng.random_bool(0.6) {
            let held: Vec<&String> = self
                .rows
                .iter()
                .map(|r| &r[c])
                .filter(|v| *v != "NULL")
                .collect();
            if !held.is_empty() {
                return pick(rng, &held).to_string();
            }
        }
        let ty = self.columns[c].ty;
        if rng.random_bool(0.8) {
            pick(rng, ty.keys()).to_string()
        } else {
            pick(rng, ty.strays()).to_string()
        }
    }

    /// The columns, by position, holding a type that meets `ty`.
    pub fn meeting(&self, ty: Ty) -> Vec<usize> {
        (0..self.columns.len())
            .filter(|&c| self.columns[c].ty.meets(ty))
            .collect()
    }

    /// The column lists a lookup could read this table by: the whole key,
    /// each leading part of it, each leading part of each index; with what
    /// each is.
    pub fn access_patterns(&self) -> Vec<(&'static str, Vec<usize>)> {
        let mut patterns = vec![("whole key", (0..self.keys).collect())];
        for n in 1..self.keys {
            patterns.push(("key prefix", (0..n).collect()));
        }
        for index in &self.indexes {
            let kind = if index.global {
                "global index"
            } else {
                "local index"
            };
            for n in 1..=index.columns.len() {
                patterns.push((kind, index.columns[..n].to_vec()));
            }
        }
        patterns
    }
}
