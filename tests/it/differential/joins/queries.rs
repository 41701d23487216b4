//! The join differential's queries: random equi-joins between the
//! scenario's tables (inner, left both ways round, right, semi joins as `IN`
//! and `EXISTS` both from the outer table and from a small subquery into
//! the outer table's key, anti joins as `NOT EXISTS` and `NOT IN`,
//! three-table chains) on the inner table's whole key, a leading part of
//! it, or an index's leading columns (mostly along a table's references,
//! so that rows meet; now and then on any column, or with the leading
//! column fixed by a value instead), with filters on either side, an outer
//! side made small (a key fixed or listed, a `LIMIT`ed derived table) in
//! many of them, and `ORDER BY` over every output column, with or without
//! `LIMIT` and `OFFSET`, or no order at all (compared as multisets). Pure
//! functions of a seeded RNG.

use rand::Rng;
use rand_chacha::ChaCha8Rng;

use super::tables::{Reference, Table, pick};

/// One query, and what it is (for the tally).
#[derive(Debug, Clone)]
pub struct Query {
    pub sql: String,
    /// `inner`, `left`, `semi (EXISTS)`, ...
    pub kind: &'static str,
    /// What the (first) join reads the inner table by: `whole key`, `key
    /// prefix`, `local index`, `global index` or `other column`.
    pub pattern: &'static str,
    /// Whether `ORDER BY` covers every output column: rows then compare in
    /// order, else as multisets.
    pub ordered: bool,
}

/// A relation of the query: a table under an alias.
#[derive(Clone, Copy)]
struct Rel<'a> {
    table: &'a Table,
    alias: &'static str,
}

impl Rel<'_> {
    fn col(&self, c: usize) -> String {
        format!("{}.{}", self.alias, self.table.columns[c].name)
    }
}

const KINDS: [&str; 11] = [
    "inner",
    "left",
    "left, small side right",
    "right",
    "semi (IN)",
    "semi (EXISTS)",
    "semi (IN), small subquery",
    "semi (EXISTS), small subquery",
    "anti (NOT EXISTS)",
    "anti (NOT IN)",
    "chain of three",
];

/// A random query over `tables` (two or three).
pub fn query(rng: &mut ChaCha8Rng, tables: &[Table]) -> Query {
    let kinds = if tables.len() > 2 {
        &KINDS[..]
    } else {
        &KINDS[..KINDS.len() - 1]
    };
    let kind = *pick(rng, kinds);
    // Distinct tables mostly; a self-join now and then.
    let ai = rng.random_range(0..tables.len());
    let mut bi = rng.random_range(0..tables.len());
    if bi == ai && rng.random_bool(0.85) {
        bi = (ai + 1) % tables.len();
    }
    let a = Rel {
        table: &tables[ai],
        alias: "a",
    };
    let b = Rel {
        table: &tables[bi],
        alias: "b",
    };
    let single = matches!(
        kind,
        "semi (IN)" | "anti (NOT IN)" | "semi (IN), small subquery"
    );
    // The side a lookup would read is the one a join does not preserve, or
    // the one a small side's rows find: `b`, but `a` in a LEFT JOIN with
    // `a` on the right and in a semi join by a small subquery.
    let (outer, inner) = if matches!(
        kind,
        "left, small side right" | "semi (IN), small subquery" | "semi (EXISTS), small subquery"
    ) {
        (b, a)
    } else {
        (a, b)
    };
    let ordered = rng.random_bool(0.5);
    let join = join_columns(rng, outer, inner, single);
    let (pattern, pairs) = (join.pattern, join.pairs.clone());
    let on = condition(rng, outer, inner, &join, !single);
    // The outer joins' NULL-extended sides, each with its ON clause.
    let mut extended: Vec<(&str, String)> = Vec::new();
    let small = rng.random_bool(0.6);
    let (from_a, mut a_atoms) = source(rng, a, small);
    let b_atom = rng.random_bool(0.3).then(|| atom(rng, b));
    let mut select: Vec<String>;
    let body = match kind {
        "inner" => {
            select = columns(rng, &[a, b]);
            a_atoms.extend(b_atom);
            format!(
                "FROM {from_a} JOIN {} b ON {on}{}",
                b.table.name,
                and_where(&a_atoms)
            )
        }
        "left" => {
            select = columns(rng, &[a, b]);
            let extra = b_atom.map(|x| format!(" AND {x}")).unwrap_or_default();
            // `WHERE b.col IS NULL` keeps the rows without a match.
            if rng.random_bool(0.15) {
                let c = pick(rng, &pairs).1;
                a_atoms.push(format!("{} IS NULL", b.col(c)));
            }
            extended.push(("b", format!("{on}{extra}")));
            format!(
                "FROM {from_a} LEFT JOIN {} b ON {on}{extra}{}",
                b.table.name,
                and_where(&a_atoms)
            )
        }
        "left, small side right" => {
            // The small side is the one read by key (where it is a table):
            // its conditions go in ON, the preserved side's in WHERE.
            select = columns(rng, &[b, a]);
            let extra: String = a_atoms.iter().map(|x| format!(" AND {x}")).collect();
            let b_where: Vec<String> = b_atom.into_iter().collect();
            extended.push(("a", format!("{on}{extra}")));
            format!(
                "FROM {} b LEFT JOIN {from_a} ON {on}{extra}{}",
                b.table.name,
                and_where(&b_where)
            )
        }
        "right" => {
            select = columns(rng, &[a, b]);
            let extra = b_atom.map(|x| format!(" AND {x}")).unwrap_or_default();
            extended.push(("b", format!("{on}{extra}")));
            format!(
                "FROM {} b RIGHT JOIN {from_a} ON {on}{extra}{}",
                b.table.name,
                and_where(&a_atoms)
            )
        }
        "semi (IN)" | "anti (NOT IN)" => {
            select = columns(rng, &[a]);
            let (outer, inner) = pairs[0];
            let not = if kind == "semi (IN)" { "" } else { "NOT " };
            let b_where: Vec<String> = b_atom.into_iter().collect();
            a_atoms.insert(
                0,
                format!(
                    "{} {not}IN (SELECT {} FROM {} b{})",
                    a.col(outer),
                    b.col(inner),
                    b.table.name,
                    and_where(&b_where)
                ),
            );
            format!("FROM {from_a}{}", and_where(&a_atoms))
        }
        "semi (EXISTS)" | "anti (NOT EXISTS)" => {
            select = columns(rng, &[a]);
            let not = if kind == "semi (EXISTS)" { "" } else { "NOT " };
            let extra = b_atom.map(|x| format!(" AND {x}")).unwrap_or_default();
            a_atoms.insert(
                0,
                format!(
                    "{not}EXISTS (SELECT 1 FROM {} b WHERE {on}{extra})",
                    b.table.name
                ),
            );
            format!("FROM {from_a}{}", and_where(&a_atoms))
        }
        "semi (IN), small subquery" | "semi (EXISTS), small subquery" => {
            // `a`'s rows whose key (or indexed column) a few of `b`'s hold.
            select = columns(rng, &[a]);
            let (from_b, mut b_atoms) = source(rng, b, true);
            b_atoms.extend(b_atom);
            let test = if kind == "semi (IN), small subquery" {
                let (outer, inner) = pairs[0];
                format!(
                    "{} IN (SELECT {} FROM {from_b}{})",
                    a.col(inner),
                    b.col(outer),
                    and_where(&b_atoms)
                )
            } else {
                b_atoms.insert(0, on);
                format!("EXISTS (SELECT 1 FROM {from_b}{})", and_where(&b_atoms))
            };
            let mut atoms = vec![test];
            if rng.random_bool(0.3) {
                atoms.push(atom(rng, a));
            }
            format!("FROM {} a{}", a.table.name, and_where(&atoms))
        }
        _ => {
            // a, b, and c joined to a or to b.
            let c = Rel {
                table: &tables[rng.random_range(0..tables.len())],
                alias: "c",
            };
            let via = if rng.random_bool(0.5) { a } else { b };
            let join2 = join_columns(rng, via, c, false);
            let on2 = condition(rng, via, c, &join2, true);
            select = columns(rng, &[a, b, c]);
            let join = |rng: &mut ChaCha8Rng| *pick(rng, &["JOIN", "JOIN", "LEFT JOIN"]);
            let (j1, j2) = (join(rng), join(rng));
            // A condition on b or c in WHERE would undo a LEFT JOIN: only
            // where the joins are inner.
            if j1 == "JOIN" && j2 == "JOIN" {
                a_atoms.extend(b_atom);
            }
            if j1 == "LEFT JOIN" {
                extended.push(("b", on.clone()));
            }
            if j2 == "LEFT JOIN" {
                extended.push(("c", on2.clone()));
            }
            format!(
                "FROM {from_a} {j1} {} b ON {on} {j2} {} c ON {on2}{}",
                b.table.name,
                c.table.name,
                and_where(&a_atoms)
            )
        }
    };
    // DataFusion 55.2 takes a column that an outer join's ON clause fixes
    // (`LEFT JOIN b ON ... AND b.y = 'a'`, or `b.k = a.x` with `a.x`
    // fixed) for a constant, though the join extends it with NULLs, and
    // leaves it out of the sort: `ORDER BY` it puts NULLs anywhere
    // (with lookup joins off too). Ordered queries leave such columns out
    // of their output; unordered ones still compare their values.
    if ordered {
        select.retain(|col| {
            !extended.iter().any(|(alias, on)| {
                col.starts_with(&format!("{alias}.")) && on.contains(col.as_str())
            })
        });
        if select.is_empty() {
            let preserved = if kind == "left, small side right" {
                b
            } else {
                a
            };
            select.push(preserved.col(0));
        }
    }
    // A count now and then, of rows and of an inner side's matches.
    if rng.random_bool(0.1) {
        let counted = select[rng.random_range(0..select.len())].clone();
        select = vec!["count(*)".to_owned(), format!("count({counted})")];
    }
    let outputs: Vec<String> = select
        .iter()
        .enumerate()
        .map(|(i, e)| format!("{e} AS o{i}"))
        .collect();
    let mut sql = format!("SELECT {} {body}", outputs.join(", "));
    if ordered {
        let keys: Vec<String> = (0..select.len())
            .map(|i| format!("o{i}{}", pick(rng, &["", "", " DESC"])))
            .collect();
        sql += &format!(" ORDER BY {}", keys.join(", "));
        if rng.random_bool(0.6) {
            sql += &format!(" LIMIT {}", rng.random_range(1..=8));
            if rng.random_bool(0.2) {
                sql += &format!(" OFFSET {}", rng.random_range(1..=3));
            }
        }
    }
    Query {
        sql,
        kind,
        pattern,
        ordered,
    }
}

/// What a join fixes of its inner table.
struct Join {
    /// What the columns are (`whole key`, `key prefix`, ...).
    pattern: &'static str,
    /// Outer and inner columns, by position, equal.
    pairs: Vec<(usize, usize)>,
    /// Conditions fixing the inner table's leading column by a value.
    fixed: Vec<String>,
}

/// The inner table's columns a join fixes (an access pattern, or now and
/// then any one column), each with an outer column of a type it meets
/// (mostly outside the outer's key: a reference, NULLs and all); now and
/// then the leading one of several by a value instead (`b.k1 = 'c' AND
/// b.k2 = a.x`), the join fixing the rest.
fn join_columns(rng: &mut ChaCha8Rng, outer: Rel, inner: Rel, single: bool) -> Join {
    let mut patterns = inner.table.access_patterns();
    if single {
        patterns.retain(|(_, cols)| cols.len() == 1);
    }
    // Mostly along a reference, where the outer table has one to
    // the inner (whole, or its leading column for IN): its rows meet.
    let references: Vec<&Reference> = outer
        .table
        .references
        .iter()
        .filter(|r| r.table == inner.table.name)
        .collect();
    if !references.is_empty() && rng.random_bool(0.6) {
        let mut columns = pick(rng, &references).columns.clone();
        if single {
            columns.truncate(1);
        }
        let cols: Vec<usize> = columns.iter().map(|&(_, their)| their).collect();
        let pattern = inner
            .table
            .access_patterns()
            .into_iter()
            .find(|(_, p)| *p == cols)
            .map_or("other column", |(name, _)| name);
        return Join {
            pattern,
            pairs: columns,
            fixed: Vec::new(),
        };
    }
    let (mut pattern, mut cols) = if patterns.is_empty() || rng.random_bool(0.1) {
        let c = rng.random_range(0..inner.table.columns.len());
        ("other column", vec![c])
    } else {
        pick(rng, &patterns).clone()
    };
    let mut fixed = Vec::new();
    if cols.len() > 1 && rng.random_bool(0.3) {
        let first = cols.remove(0);
        let value = inner.table.value(rng, first);
        fixed.push(format!("{} = {value}", inner.col(first)));
        pattern = match pattern {
            "whole key" => "whole key, first by a value",
            "key prefix" => "key prefix, first by a value",
            "local index" => "local index, first by a value",
            _ => "global index, first by a value",
        };
    }
    let pairs = cols
        .into_iter()
        .map(|c| {
            let ty = inner.table.columns[c].ty;
            let meeting = outer.table.meeting(ty);
            let outside: Vec<usize> = meeting
                .iter()
                .copied()
                .filter(|&o| !outer.table.columns[o].key)
                .collect();
            // Every table has an integer and a text column outside its key.
            let o = if rng.random_bool(0.7) {
                *pick(rng, &outside)
            } else {
                *pick(rng, &meeting)
            };
            (o, c)
        })
        .collect();
    Join {
        pattern,
        pairs,
        fixed,
    }
}

/// The equalities of a join's pairs (either way round) and its fixed
/// values, and now and then a comparison of two other columns as well (a
/// join filter).
fn condition(rng: &mut ChaCha8Rng, outer: Rel, inner: Rel, join: &Join, extra: bool) -> String {
    let mut parts: Vec<String> = join
        .pairs
        .iter()
        .map(|&(o, i)| {
            if rng.random_bool(0.5) {
                format!("{} = {}", outer.col(o), inner.col(i))
            } else {
                format!("{} = {}", inner.col(i), outer.col(o))
            }
        })
        .collect();
    parts.extend(join.fixed.iter().cloned());
    if extra && rng.random_bool(0.12) {
        let i = rng.random_range(0..inner.table.columns.len());
        let o = *pick(rng, &outer.table.meeting(inner.table.columns[i].ty));
        let op = pick(rng, &["<", ">=", "<>"]);
        parts.push(format!("{} {op} {}", outer.col(o), inner.col(i)));
    }
    parts.join(" AND ")
}

/// The outer relation as a FROM item, and conditions on it for WHERE. A
/// small one fixes or lists its leading key column, fixes its whole key, or
/// is a derived table of its first few rows in key order.
fn source(rng: &mut ChaCha8Rng, rel: Rel, small: bool) -> (String, Vec<String>) {
    let t = rel.table;
    let plain = format!("{} {}", t.name, rel.alias);
    if !small {
        let atoms = if rng.random_bool(0.3) {
            vec![atom(rng, rel)]
        } else {
            Vec::new()
        };
        return (plain, atoms);
    }
    let key = |rng: &mut ChaCha8Rng, c: usize| t.value(rng, c);
    match rng.random_range(0..4) {
        0 => (plain, vec![format!("{} = {}", rel.col(0), key(rng, 0))]),
        1 => {
            let list: Vec<String> = (0..rng.random_range(2..=4)).map(|_| key(rng, 0)).collect();
            (
                plain,
                vec![format!("{} IN ({})", rel.col(0), list.join(", "))],
            )
        }
        2 => {
            // Mostly a row's whole key, so that a row has it.
            let row = (!t.rows.is_empty() && rng.random_bool(0.85))
                .then(|| t.rows[rng.random_range(0..t.rows.len())].clone());
            let atoms = (0..t.keys)
                .map(|c| {
                    let v = row.as_ref().map_or_else(|| key(rng, c), |r| r[c].clone());
                    format!("{} = {v}", rel.col(c))
                })
                .collect();
            (plain, atoms)
        }
        _ => {
            let names: Vec<&str> = t.columns[..t.keys].iter().map(|c| c.name).collect();
            let dir = if rng.random_bool(0.3) { " DESC" } else { "" };
            let order: Vec<String> = names.iter().map(|n| format!("{n}{dir}")).collect();
            (
                format!(
                    "(SELECT * FROM {} ORDER BY {} LIMIT {}) {}",
                    t.name,
                    order.join(", "),
                    rng.random_range(1..=6),
                    rel.alias
                ),
                Vec::new(),
            )
        }
    }
}

/// One condition on one column of `rel`: `=`, `<>`, an IN list, a range,
/// IS [NOT] NULL; values drawn from the keys' and the strays'.
fn atom(rng: &mut ChaCha8Rng, rel: Rel) -> String {
    let c = rng.random_range(0..rel.table.columns.len());
    let col = rel.col(c);
    let v = |rng: &mut ChaCha8Rng| rel.table.value(rng, c);
    match rng.random_range(0..9) {
        0 => format!("{col} IS NULL"),
        1 => format!("{col} IS NOT NULL"),
        2 => format!("{col} < {}", v(rng)),
        3 => format!("{col} >= {}", v(rng)),
        4 => format!("{col} BETWEEN {} AND {}", v(rng), v(rng)),
        5 => format!("{col} IN ({}, {}, {})", v(rng), v(rng), v(rng)),
        6 => format!("{col} <> {}", v(rng)),
        _ => format!("{col} = {}", v(rng)),
    }
}

/// One to four distinct columns of the relations, qualified.
fn columns(rng: &mut ChaCha8Rng, rels: &[Rel]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for _ in 0..rng.random_range(1..=4) {
        let rel = *pick(rng, rels);
        let c = rng.random_range(0..rel.table.columns.len());
        let col = rel.col(c);
        if !out.contains(&col) {
            out.push(col);
        }
    }
    out
}

fn and_where(atoms: &[String]) -> String {
    if atoms.is_empty() {
        String::new()
    } else {
        format!(" WHERE {}", atoms.join(" AND "))
    }
}
