//! Random tables and random queries with subqueries, in the SQL both
//! PostgreSQL and tablesql read. Pure functions of a seeded RNG.

use rand::Rng;
use rand_chacha::ChaCha8Rng;

/// The tables every query reads: `t1` and `t2`, same columns.
pub const TABLES: [&str; 2] = ["t1", "t2"];

/// One row: the key columns `k` (unique) and `g` (the partition), then
/// `a`, `b` (integers with NULLs) and `c` (text with NULLs).
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub k: i32,
    pub g: i32,
    pub a: Option<i32>,
    pub b: Option<i32>,
    pub c: Option<String>,
}

impl Row {
    /// The row as a VALUES tuple.
    pub fn values(&self) -> String {
        let int = |v: Option<i32>| v.map_or("NULL".to_owned(), |v| v.to_string());
        let text = self.c.as_ref().map_or("NULL".to_owned(), |c| {
            format!("'{}'", c.replace('\'', "''"))
        });
        format!(
            "({}, {}, {}, {}, {})",
            self.k,
            self.g,
            int(self.a),
            int(self.b),
            text
        )
    }
}

/// The rows of `t1` and `t2`.
pub type Data = [Vec<Row>; 2];

const TEXTS: [&str; 6] = ["a", "b", "B", "ab", "", "a b"];

/// Up to 9 rows per table, small values so that comparisons meet; in one
/// partition (`g` = 0) or spread over three.
pub fn data(rng: &mut ChaCha8Rng) -> Data {
    let table = |rng: &mut ChaCha8Rng| {
        let n = rng.random_range(0..=9);
        let partitions = if rng.random_bool(0.3) { 1 } else { 3 };
        (0..n)
            .map(|k| Row {
                k,
                g: rng.random_range(0..partitions),
                a: maybe(rng, |r| r.random_range(-2..5)),
                b: maybe(rng, |r| r.random_range(-2..5)),
                c: maybe(rng, |r| TEXTS[r.random_range(0..TEXTS.len())].to_owned()),
            })
            .collect()
    };
    [table(rng), table(rng)]
}

fn maybe<T>(rng: &mut ChaCha8Rng, f: impl FnOnce(&mut ChaCha8Rng) -> T) -> Option<T> {
    if rng.random_bool(0.2) {
        None
    } else {
        Some(f(rng))
    }
}

/// Builds one query. `scope` holds the aliases a expression may name,
/// innermost first; in a HAVING only `g` of the outer query may be named.
pub struct Generator<'a> {
    rng: &'a mut ChaCha8Rng,
    aliases: usize,
    /// Composite expressions left to make; then only leaves.
    budget: u32,
}

#[derive(Clone)]
struct Scope {
    /// Aliases visible, innermost first, with the columns each may give.
    levels: Vec<(String, &'static [&'static str])>,
}

const ALL: &[&str] = &["k", "g", "a", "b"];
const GROUPED: &[&str] = &["g"];

impl<'a> Generator<'a> {
    pub fn new(rng: &'a mut ChaCha8Rng) -> Self {
        Self {
            rng,
            aliases: 0,
            budget: 10,
        }
    }

    fn pick<'s>(&mut self, items: &'s [&'s str]) -> &'s str {
        items[self.rng.random_range(0..items.len())]
    }

    fn alias(&mut self) -> String {
        self.aliases += 1;
        format!("x{}", self.aliases)
    }

    /// A whole query, its rows in a fixed order. With `TABLESQL_DIFF_VERBOSE`
    /// set the test prints each one.
    pub fn query(&mut self) -> String {
        if self.rng.random_bool(0.2) {
            self.grouped()
        } else {
            self.plain()
        }
    }

    fn plain(&mut self) -> String {
        let table = self.pick(&TABLES);
        let scope = Scope {
            levels: vec![("t".to_owned(), ALL)],
        };
        let n = self.rng.random_range(1..=2);
        let mut columns = vec!["t.k".to_owned()];
        for _ in 0..n {
            columns.push(self.int_expr(&scope, 2));
        }
        if self.rng.random_bool(0.2) {
            columns.push(self.cond(&scope, 1));
        }
        if self.rng.random_bool(0.05) {
            // Past the range of BIGINT for any value but 0 or NULL: an error
            // in both (DataFusion alone would wrap around). In the SELECT
            // list, evaluated for every row in both: inside an OR or a CASE
            // the order of evaluation, which SQL leaves open, would decide.
            columns.push(format!(
                "({} * 3037000500 * 3037000500)",
                self.column(&scope)
            ));
        }
        // Named, so that two equal expressions do not collide (DataFusion
        // refuses duplicate names where PostgreSQL does not).
        let named: Vec<String> = columns
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{c} AS c{i}"))
            .collect();
        let mut sql = format!("SELECT {} FROM {table} t", named.join(", "));
        if self.rng.random_bool(0.6) {
            sql += &format!(" WHERE {}", self.cond(&scope, 2));
        }
        sql += &order_by(columns.len());
        if self.rng.random_bool(0.2) {
            sql += &format!(" LIMIT {}", self.rng.random_range(0..4));
        }
        sql
    }

    fn grouped(&mut self) -> String {
        let table = self.pick(&TABLES);
        let scope = Scope {
            levels: vec![("t".to_owned(), GROUPED)],
        };
        let agg = self.pick(&["count(*)", "sum(t.a)", "max(t.b)", "count(t.c)"]);
        let having = self.cond(&scope, 2);
        format!(
            "SELECT t.g, {agg} FROM {table} t GROUP BY t.g HAVING {having}{}",
            order_by(2)
        )
    }

    /// An integer expression.
    fn int_expr(&mut self, scope: &Scope, depth: u32) -> String {
        let choices = match (self.budget, depth) {
            (0, _) => 3,
            (_, 0) => 6,
            _ => 10,
        };
        self.budget = self.budget.saturating_sub(1);
        let choice = self.rng.random_range(0..choices);
        match choice {
            0 | 1 => self.column(scope),
            2 => self.rng.random_range(-2..5).to_string(),
            3 => {
                let op = self.pick(&["+", "-", "*"]);
                format!(
                    "({} {op} {})",
                    self.int_expr(scope, 0),
                    self.int_expr(scope, 0)
                )
            }
            // Integer division truncates toward zero in both.
            4 => format!(
                "({} / {})",
                self.int_expr(scope, 0),
                self.pick(&["2", "3", "-2"])
            ),
            5 => format!(
                "CASE WHEN {} THEN {} ELSE {} END",
                self.cond(scope, 0),
                self.int_expr(scope, 0),
                self.int_expr(scope, 0)
            ),
            _ => self.scalar_subquery(scope, depth - 1),
        }
    }

    fn column(&mut self, scope: &Scope) -> String {
        let level = self.rng.random_range(0..scope.levels.len());
        let (alias, columns) = &scope.levels[level];
        format!(
            "{alias}.{}",
            columns[self.rng.random_range(0..columns.len())]
        )
    }

    /// `(SELECT agg(x.col) FROM t x WHERE <correlated>)`, or a subquery
    /// without an aggregate: by the unique `k` (at most one row), the first
    /// row in an order, or any correlation (two rows are an error in both).
    fn scalar_subquery(&mut self, scope: &Scope, depth: u32) -> String {
        let (from, inner) = self.from(scope);
        if self.rng.random_bool(0.25) {
            let own = inner.levels[0].0.clone();
            let value = self.own_column(&inner);
            return match self.rng.random_range(0..3) {
                0 => format!(
                    "(SELECT {value} FROM {from} WHERE {own}.k = {})",
                    self.int_expr(scope, 0)
                ),
                1 => format!(
                    "(SELECT {value} FROM {from} WHERE {} ORDER BY {own}.k DESC LIMIT 1)",
                    self.correlation(&inner, depth)
                ),
                _ => format!(
                    "(SELECT {value} FROM {from} WHERE {})",
                    self.correlation(&inner, depth)
                ),
            };
        }
        let agg = match self.rng.random_range(0..7) {
            0 => "count(*)".to_owned(),
            1 => format!("count({})", self.own_column(&inner)),
            2 => format!("sum({})", self.own_column(&inner)),
            3 => format!("min({})", self.own_column(&inner)),
            4 => format!("max({})", self.own_column(&inner)),
            5 => format!("avg({})", self.own_column(&inner)),
            // The argument names the subquery's own column: an aggregate of
            // outer columns alone belongs to the outer query in SQL.
            _ => format!(
                "max({} + {})",
                self.own_column(&inner),
                self.int_expr(&inner, depth.min(1))
            ),
        };
        format!(
            "(SELECT {agg} FROM {from} WHERE {})",
            self.correlation(&inner, depth)
        )
    }

    /// A new alias over a table, and the scope inside it.
    fn from(&mut self, scope: &Scope) -> (String, Scope) {
        let table = self.pick(&TABLES);
        let alias = self.alias();
        let mut inner = scope.clone();
        inner.levels.insert(0, (alias.clone(), ALL));
        (format!("{table} {alias}"), inner)
    }

    fn own_column(&mut self, inner: &Scope) -> String {
        let col = self.pick(&["a", "b", "k"]);
        format!("{}.{col}", inner.levels[0].0)
    }

    /// A subquery's WHERE: one or two comparisons with outer columns (by
    /// equality or another operator), maybe with a condition of its own.
    fn correlation(&mut self, inner: &Scope, depth: u32) -> String {
        let own = &inner.levels[0].0.clone();
        let mut parts = Vec::new();
        for _ in 0..self.rng.random_range(1..=2) {
            let outer_level = self.rng.random_range(1..inner.levels.len());
            let (outer_alias, outer_columns) = &inner.levels[outer_level];
            let outer_col = outer_columns[self.rng.random_range(0..outer_columns.len())];
            let op = self.pick(&["=", "=", "<", ">", "<=", "<>"]);
            let own_col = self.pick(&["a", "b", "g", "k"]);
            parts.push(format!("{own}.{own_col} {op} {outer_alias}.{outer_col}"));
        }
        if self.rng.random_bool(0.3) {
            parts.push(self.cond(inner, depth.min(1)));
        }
        parts.join(" AND ")
    }

    /// A condition.
    fn cond(&mut self, scope: &Scope, depth: u32) -> String {
        let choices = match (self.budget, depth) {
            (0, _) => 6,
            (_, 0) => 7,
            _ => 14,
        };
        self.budget = self.budget.saturating_sub(1);
        let choice = self.rng.random_range(0..choices);
        match choice {
            0 | 1 => {
                let op = self.pick(&["=", "<>", "<", "<=", ">", ">="]);
                format!(
                    "{} {op} {}",
                    self.int_expr(scope, depth.min(1)),
                    self.int_expr(scope, 0)
                )
            }
            2 => format!(
                "{} BETWEEN {} AND {}",
                self.int_expr(scope, 0),
                self.rng.random_range(-2..2),
                self.rng.random_range(1..5)
            ),
            3 => format!(
                "{} {}IN ({}, {})",
                self.int_expr(scope, 0),
                if self.rng.random_bool(0.3) {
                    "NOT "
                } else {
                    ""
                },
                self.rng.random_range(-2..5),
                self.rng.random_range(-2..5)
            ),
            4 => format!(
                "{} IS {}NULL",
                self.column(scope),
                if self.rng.random_bool(0.5) {
                    "NOT "
                } else {
                    ""
                }
            ),
            5 => self.text_cond(scope),
            6 => {
                let op = self.pick(&["AND", "OR"]);
                format!("({} {op} {})", self.cond(scope, 0), self.cond(scope, 0))
            }
            7 | 8 => {
                let (from, inner) = self.from(scope);
                format!(
                    "{}EXISTS (SELECT 1 FROM {from} WHERE {})",
                    if self.rng.random_bool(0.4) {
                        "NOT "
                    } else {
                        ""
                    },
                    self.correlation(&inner, depth - 1)
                )
            }
            9 | 10 => {
                let probe = self.int_expr(scope, 0);
                let (from, inner) = self.from(scope);
                format!(
                    "{probe} {}IN (SELECT {} FROM {from} WHERE {})",
                    if self.rng.random_bool(0.4) {
                        "NOT "
                    } else {
                        ""
                    },
                    self.own_column(&inner),
                    self.correlation(&inner, depth - 1)
                )
            }
            11 => {
                let probe = self.int_expr(scope, 0);
                let op = self.pick(&["=", "<", ">", "<=", ">=", "<>"]);
                let quantifier = self.pick(&["ANY", "ALL"]);
                let (from, inner) = self.from(scope);
                format!(
                    "{probe} {op} {quantifier} (SELECT {} FROM {from} WHERE {})",
                    self.own_column(&inner),
                    self.correlation(&inner, depth - 1)
                )
            }
            12 => {
                let op = self.pick(&["AND", "OR"]);
                format!(
                    "({} {op} {})",
                    self.cond(scope, depth - 1),
                    self.cond(scope, depth - 1)
                )
            }
            _ => format!("NOT ({})", self.cond(scope, depth - 1)),
        }
    }

    fn text_cond(&mut self, scope: &Scope) -> String {
        // Only `t` and subquery aliases carry `c` (a HAVING sees `g` alone).
        let Some((alias, _)) = scope.levels.iter().find(|(_, c)| c.len() > 1) else {
            return "TRUE".to_owned();
        };
        let alias = alias.clone();
        match self.rng.random_range(0..3) {
            0 => format!(
                "{alias}.c {} '{}'",
                self.pick(&["=", "<", ">=", "<>"]),
                TEXTS[self.rng.random_range(0..TEXTS.len())]
            ),
            1 => format!("{alias}.c LIKE '{}%'", self.pick(&["a", "b", "B"])),
            _ => format!("{alias}.c IS NULL"),
        }
    }
}

fn order_by(columns: usize) -> String {
    let positions: Vec<String> = (1..=columns).map(|i| i.to_string()).collect();
    format!(" ORDER BY {}", positions.join(", "))
}
