//! Workload scripts in pgbench's syntax, so that what users know of pgbench
//! carries over: SQL statements ending in `;` (one may span lines), `--`
//! comments, `\set name expression` and `\sleep n [us|ms|s]`. An
//! expression is an integer, a `:variable`, `random(lo, hi)` (uniform,
//! both ends included), and `+ - * / %` with parentheses. In SQL, `:name`
//! stands for the value of a variable set before it, or of a built-in one
//! (`:table`, `:client_id`), as text; `::` casts are left alone.

use std::collections::HashMap;
use std::time::Duration;

use rand::Rng;

use super::StressError;

/// A parsed script.
#[derive(Debug, Clone, PartialEq)]
pub struct Script {
    commands: Vec<Command>,
}

/// One line (or statement) of a script.
#[derive(Debug, Clone, PartialEq)]
enum Command {
    Set { name: String, expr: Expr },
    Sleep(Duration),
    Sql(Vec<Piece>),
}

/// SQL text between the variables it names.
#[derive(Debug, Clone, PartialEq)]
enum Piece {
    Text(String),
    Var(String),
}

#[derive(Debug, Clone, PartialEq)]
enum Expr {
    Int(i64),
    Var(String),
    Random(Box<Expr>, Box<Expr>),
    Neg(Box<Expr>),
    Binary(char, Box<Expr>, Box<Expr>),
}

/// What one run of a script does, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Run this SQL.
    Sql(String),
    /// Wait this long.
    Sleep(Duration),
}

impl Script {
    /// Parses `text`; `builtins` are the variables set before it runs.
    pub fn parse(text: &str, builtins: &[&str]) -> Result<Script, StressError> {
        let mut known: Vec<String> = builtins.iter().map(|b| (*b).to_owned()).collect();
        let mut commands = Vec::new();
        let mut sql = String::new();
        for (i, line) in text.lines().enumerate() {
            let bad = |reason: String| StressError::Script {
                line: i + 1,
                reason,
            };
            let trimmed = line.trim();
            if sql.is_empty() && trimmed.starts_with('\\') {
                commands.push(meta(trimmed, &mut known).map_err(bad)?);
                continue;
            }
            if sql.is_empty() && (trimmed.is_empty() || trimmed.starts_with("--")) {
                continue;
            }
            sql.push_str(line);
            sql.push('\n');
            if trimmed.ends_with(';') {
                commands.push(Command::Sql(pieces(sql.trim(), &known)));
                sql.clear();
            }
        }
        if !sql.trim().is_empty() {
            commands.push(Command::Sql(pieces(sql.trim(), &known)));
        }
        if !commands.iter().any(|c| matches!(c, Command::Sql(_))) {
            return Err(StressError::Script {
                line: text.lines().count(),
                reason: "the script has no SQL statement".into(),
            });
        }
        Ok(Script { commands })
    }

    /// One run: its `\set`s drawn from `rng`, with `vars` holding the
    /// built-ins, its SQL with the values in place.
    pub fn steps(
        &self,
        vars: &mut HashMap<String, String>,
        rng: &mut impl Rng,
    ) -> Result<Vec<Step>, StressError> {
        let mut steps = Vec::with_capacity(self.commands.len());
        for c in &self.commands {
            match c {
                Command::Set { name, expr } => {
                    let v = eval(expr, vars, rng)?;
                    vars.insert(name.clone(), v.to_string());
                }
                Command::Sleep(d) => steps.push(Step::Sleep(*d)),
                Command::Sql(pieces) => {
                    let mut text = String::new();
                    for p in pieces {
                        match p {
                            Piece::Text(t) => text.push_str(t),
                            Piece::Var(v) => text.push_str(vars.get(v).map_or("", String::as_str)),
                        }
                    }
                    steps.push(Step::Sql(text));
                }
            }
        }
        Ok(steps)
    }
}

/// A `\` line.
fn meta(line: &str, known: &mut Vec<String>) -> Result<Command, String> {
    let (command, rest) = split_word(line);
    match command {
        "\\set" => {
            let (name, rest) = split_word(rest);
            if !is_name(name) {
                return Err("\\set needs a variable name".into());
            }
            let expr = Parser::new(rest, known).expression()?;
            known.push(name.to_owned());
            Ok(Command::Set {
                name: name.to_owned(),
                expr,
            })
        }
        "\\sleep" => {
            let (n, unit) = split_word(rest);
            let n: u64 = n.parse().map_err(|_| "\\sleep needs a whole number")?;
            let d = match if unit.is_empty() { "s" } else { unit } {
                "us" => Duration::from_micros(n),
                "ms" => Duration::from_millis(n),
                "s" => Duration::from_secs(n),
                unit => return Err(format!("\\sleep takes us, ms or s, not {unit:?}")),
            };
            Ok(Command::Sleep(d))
        }
        other => Err(format!(
            "{other} is not a command here (\\set and \\sleep are)"
        )),
    }
}

/// The first word of `text` and what follows it, both trimmed.
fn split_word(text: &str) -> (&str, &str) {
    let text = text.trim();
    match text.find(char::is_whitespace) {
        Some(i) => (&text[..i], text[i..].trim()),
        None => (text, ""),
    }
}

fn is_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// SQL text cut at each `:name` of a known variable.
fn pieces(sql: &str, known: &[String]) -> Vec<Piece> {
    let mut out = Vec::new();
    let mut text = String::new();
    let bytes = sql.as_bytes();
    let mut i = 0;
    while i < sql.len() {
        let after_colon =
            bytes[i] == b':' && bytes.get(i + 1) != Some(&b':') && (i == 0 || bytes[i - 1] != b':');
        if after_colon {
            let len = sql[i + 1..]
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(sql.len() - i - 1);
            let name = &sql[i + 1..i + 1 + len];
            if known.iter().any(|k| k == name) {
                out.push(Piece::Text(std::mem::take(&mut text)));
                out.push(Piece::Var(name.to_owned()));
                i += 1 + len;
                continue;
            }
        }
        let c = sql[i..].chars().next().unwrap_or_default();
        text.push(c);
        i += c.len_utf8();
    }
    out.push(Piece::Text(text));
    out
}

/// A recursive-descent parser of `\set` expressions.
struct Parser<'a> {
    rest: &'a str,
    known: &'a [String],
    /// Nesting so far: bounded, so that no expression overflows the stack.
    depth: usize,
}

/// The deepest nesting of parentheses and signs an expression may have.
const MOST_DEPTH: usize = 64;

impl<'a> Parser<'a> {
    fn new(text: &'a str, known: &'a [String]) -> Self {
        Self {
            rest: text,
            known,
            depth: 0,
        }
    }

    fn expression(mut self) -> Result<Expr, String> {
        let e = self.sum()?;
        if !self.rest.trim().is_empty() {
            return Err(format!(
                "unexpected {:?} in the expression",
                self.rest.trim()
            ));
        }
        Ok(e)
    }

    fn peek(&mut self) -> Option<char> {
        self.rest = self.rest.trim_start();
        self.rest.chars().next()
    }

    fn eat(&mut self, c: char) -> bool {
        if self.peek() == Some(c) {
            self.rest = &self.rest[c.len_utf8()..];
            true
        } else {
            false
        }
    }

    fn sum(&mut self) -> Result<Expr, String> {
        let mut left = self.product()?;
        while let Some(op @ ('+' | '-')) = self.peek() {
            self.eat(op);
            left = Expr::Binary(op, Box::new(left), Box::new(self.product()?));
        }
        Ok(left)
    }

    fn product(&mut self) -> Result<Expr, String> {
        let mut left = self.unary()?;
        while let Some(op @ ('*' | '/' | '%')) = self.peek() {
            self.eat(op);
            left = Expr::Binary(op, Box::new(left), Box::new(self.unary()?));
        }
        Ok(left)
    }

    fn unary(&mut self) -> Result<Expr, String> {
        self.depth += 1;
        if self.depth > MOST_DEPTH {
            return Err(format!("an expression nested more than {MOST_DEPTH} deep"));
        }
        let e = self.operand();
        self.depth -= 1;
        e
    }

    fn operand(&mut self) -> Result<Expr, String> {
        if self.eat('-') {
            return Ok(Expr::Neg(Box::new(self.unary()?)));
        }
        if self.eat('(') {
            let e = self.sum()?;
            return if self.eat(')') {
                Ok(e)
            } else {
                Err("a ( without its )".into())
            };
        }
        if self.eat(':') {
            let name = self.word();
            if !self.known.contains(&name) {
                return Err(format!(":{name} is not set before this line"));
            }
            return Ok(Expr::Var(name));
        }
        match self.peek() {
            Some(c) if c.is_ascii_digit() => {
                let digits = self.word();
                digits
                    .parse()
                    .map(Expr::Int)
                    .map_err(|_| format!("{digits:?} is not an integer"))
            }
            Some(c) if c.is_ascii_alphabetic() => {
                let f = self.word();
                if f != "random" {
                    return Err(format!("{f}() is not a function here (random(lo, hi) is)"));
                }
                if !self.eat('(') {
                    return Err("random needs (lo, hi)".into());
                }
                let lo = self.sum()?;
                if !self.eat(',') {
                    return Err("random needs (lo, hi)".into());
                }
                let hi = self.sum()?;
                if !self.eat(')') {
                    return Err("random needs (lo, hi)".into());
                }
                Ok(Expr::Random(Box::new(lo), Box::new(hi)))
            }
            _ => Err(format!("expected a value at {:?}", self.rest)),
        }
    }

    fn word(&mut self) -> String {
        self.rest = self.rest.trim_start();
        let len = self
            .rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(self.rest.len());
        let (w, rest) = self.rest.split_at(len);
        self.rest = rest;
        w.to_owned()
    }
}

fn eval(e: &Expr, vars: &HashMap<String, String>, rng: &mut impl Rng) -> Result<i64, StressError> {
    let overflow = || StressError::Evaluation("an integer overflow".into());
    Ok(match e {
        Expr::Int(i) => *i,
        Expr::Var(v) => vars
            .get(v)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| StressError::Evaluation(format!(":{v} is not an integer")))?,
        Expr::Neg(x) => eval(x, vars, rng)?.checked_neg().ok_or_else(overflow)?,
        Expr::Random(lo, hi) => {
            let (lo, hi) = (eval(lo, vars, rng)?, eval(hi, vars, rng)?);
            if lo > hi {
                return Err(StressError::Evaluation(format!(
                    "random({lo}, {hi}): the low end is above the high end"
                )));
            }
            rng.random_range(lo..=hi)
        }
        Expr::Binary(op, a, b) => {
            let (a, b) = (eval(a, vars, rng)?, eval(b, vars, rng)?);
            let r = match op {
                '+' => a.checked_add(b),
                '-' => a.checked_sub(b),
                '*' => a.checked_mul(b),
                '/' if b == 0 => return Err(StressError::Evaluation("division by zero".into())),
                '/' => a.checked_div(b),
                _ if b == 0 => return Err(StressError::Evaluation("division by zero".into())),
                _ => a.checked_rem(b),
            };
            r.ok_or_else(overflow)?
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn run(text: &str) -> Vec<Step> {
        let script = Script::parse(text, &["table"]).expect("parses");
        let mut vars = HashMap::from([("table".to_owned(), "t".to_owned())]);
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        script.steps(&mut vars, &mut rng).expect("runs")
    }

    #[test]
    fn variables_are_drawn_and_put_in_place() {
        let steps = run("\\set id random(1, 3)\n\\set next :id * 10 + (2 - 1)\n\
             -- a comment\nSELECT x::text\n  FROM :table WHERE id = :id AND n = :next;\n\
             \\sleep 5 ms\nUPDATE :table SET n = :unknown;\n");
        let [Step::Sql(select), Step::Sleep(d), Step::Sql(update)] = steps.as_slice() else {
            panic!("{steps:?}");
        };
        let id: i64 = select
            .split("id = ")
            .nth(1)
            .and_then(|s| s.split(' ').next())
            .and_then(|s| s.parse().ok())
            .expect("an id");
        assert!((1..=3).contains(&id), "{select}");
        assert!(
            select.starts_with("SELECT x::text\n  FROM t WHERE"),
            "{select}"
        );
        assert!(
            select.ends_with(&format!("n = {};", id * 10 + 1)),
            "{select}"
        );
        assert_eq!(*d, Duration::from_millis(5));
        assert_eq!(update, "UPDATE t SET n = :unknown;");
    }

    #[test]
    fn mistakes_name_their_line() {
        let err = |text: &str| Script::parse(text, &[]).expect_err(text).to_string();
        assert!(err("SELECT 1;\n\\set x random(1)").contains("line 2"));
        assert!(err("\\set x :y + 1\nSELECT 1;").contains(":y is not set"));
        assert!(err("\\setshell x\nSELECT 1;").contains("not a command here"));
        assert!(err("\\set x 1").contains("no SQL statement"));
        let deep = format!("\\set x {}1\nSELECT 1;", "-".repeat(10_000));
        assert!(err(&deep).contains("nested more than 64"));
        assert!(Script::parse("\\set  x   random(1, 2)\nSELECT :x;", &[]).is_ok());
    }

    #[test]
    fn a_bad_draw_is_an_error_not_a_panic() {
        let script = Script::parse("\\set x random(5, 1)\nSELECT :x;", &[]).expect("parses");
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
        let e = script
            .steps(&mut HashMap::new(), &mut rng)
            .expect_err("5 > 1");
        assert!(e.to_string().contains("low end"), "{e}");
    }
}
