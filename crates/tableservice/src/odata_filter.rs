//! `$filter` text as the service reads it: comparisons of a property (or
//! `PartitionKey`, `RowKey`, `Timestamp`) with a typed literal, joined by
//! `and`, `or`, `not` and parentheses; at most 15 comparisons. Literals as
//! the Azure SDKs write them: `'text'` (quotes doubled), `true`, `12` (Int32),
//! `12L` (Int64), `1.5` (Double), `datetime'…'`, `guid'…'`, `X'…'` or
//! `binary'…'`.

use tablesql_storage::storage::odata::parse_datetime;
use tablesql_storage::storage::{CmpOp, EdmValue, Filter, Operand};

/// Most comparisons the service evaluates in one `$filter`.
pub const MAX_COMPARISONS: usize = 15;
/// Deepest nesting of `not` and parentheses: a filter is parsed by
/// recursion, and a deep one must not overflow the stack.
const MAX_DEPTH: usize = 64;

/// Parses a `$filter`; the error says what is wrong at which offset.
pub fn parse(text: &str) -> Result<Filter, String> {
    let tokens = tokens(text)?;
    let mut p = Parser {
        tokens,
        at: 0,
        comparisons: 0,
        depth: 0,
    };
    let f = p.or()?;
    match p.tokens.get(p.at) {
        None => Ok(f),
        Some(t) => Err(format!("unexpected {t:?} after a whole filter")),
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Word(String),
    Text(String),
    Typed(String, String),
    Open,
    Close,
}

fn tokens(text: &str) -> Result<Vec<Token>, String> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if c == '(' {
            out.push(Token::Open);
            i += 1;
        } else if c == ')' {
            out.push(Token::Close);
            i += 1;
        } else if c == '\'' {
            let (s, next) = quoted(&chars, i)?;
            out.push(Token::Text(s));
            i = next;
        } else {
            let start = i;
            while i < chars.len()
                && !chars[i].is_whitespace()
                && !matches!(chars[i], '(' | ')' | '\'')
            {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            // A typed literal: a prefix glued to a quoted text.
            if i < chars.len() && chars[i] == '\'' {
                let (s, next) = quoted(&chars, i)?;
                out.push(Token::Typed(word, s));
                i = next;
            } else {
                out.push(Token::Word(word));
            }
        }
    }
    Ok(out)
}

/// The text of a quoted literal starting at `open`, and the index after it.
fn quoted(chars: &[char], open: usize) -> Result<(String, usize), String> {
    let mut s = String::new();
    let mut i = open + 1;
    loop {
        match chars.get(i) {
            None => return Err(format!("a quote opened at {open} is not closed")),
            Some('\'') if chars.get(i + 1) == Some(&'\'') => {
                s.push('\'');
                i += 2;
            }
            Some('\'') => return Ok((s, i + 1)),
            Some(c) => {
                s.push(*c);
                i += 1;
            }
        }
    }
}

struct Parser {
    tokens: Vec<Token>,
    at: usize,
    comparisons: usize,
    depth: usize,
}

impl Parser {
    fn keyword(&mut self, k: &str) -> bool {
        if matches!(self.tokens.get(self.at), Some(Token::Word(w)) if w == k) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    fn or(&mut self) -> Result<Filter, String> {
        let mut f = self.and()?;
        while self.keyword("or") {
            f = f.or(self.and()?);
        }
        Ok(f)
    }

    fn and(&mut self) -> Result<Filter, String> {
        let mut f = self.unary()?;
        while self.keyword("and") {
            f = f.and(self.unary()?);
        }
        Ok(f)
    }

    fn unary(&mut self) -> Result<Filter, String> {
        self.depth += 1;
        let f = self.nested();
        self.depth -= 1;
        f
    }

    fn nested(&mut self) -> Result<Filter, String> {
        if self.depth > MAX_DEPTH {
            return Err(format!("nested deeper than {MAX_DEPTH}"));
        }
        if self.keyword("not") {
            return Ok(self.unary()?.negate());
        }
        if self.tokens.get(self.at) == Some(&Token::Open) {
            self.at += 1;
            let f = self.or()?;
            if self.tokens.get(self.at) != Some(&Token::Close) {
                return Err("a parenthesis is not closed".into());
            }
            self.at += 1;
            return Ok(f);
        }
        self.comparison()
    }

    fn comparison(&mut self) -> Result<Filter, String> {
        let name = match self.tokens.get(self.at) {
            Some(Token::Word(w)) => w.clone(),
            other => return Err(format!("expected a property name, found {other:?}")),
        };
        let op = match self.tokens.get(self.at + 1) {
            Some(Token::Word(w)) => match w.as_str() {
                "eq" => CmpOp::Eq,
                "ne" => CmpOp::Ne,
                "gt" => CmpOp::Gt,
                "ge" => CmpOp::Ge,
                "lt" => CmpOp::Lt,
                "le" => CmpOp::Le,
                other => return Err(format!("unknown operator {other:?}")),
            },
            other => {
                return Err(format!(
                    "expected an operator after {name}, found {other:?}"
                ));
            }
        };
        let value = match self.tokens.get(self.at + 2) {
            Some(t) => literal(t)?,
            None => return Err(format!("{name} {} lacks its value", op.odata_name())),
        };
        self.at += 3;
        self.comparisons += 1;
        if self.comparisons > MAX_COMPARISONS {
            return Err(format!("more than {MAX_COMPARISONS} comparisons"));
        }
        let operand = match name.as_str() {
            "PartitionKey" => Operand::PartitionKey,
            "RowKey" => Operand::RowKey,
            "Timestamp" => Operand::Timestamp,
            _ => Operand::Property(name),
        };
        Ok(Filter::Compare { operand, op, value })
    }
}

fn literal(t: &Token) -> Result<EdmValue, String> {
    Ok(match t {
        Token::Text(s) => EdmValue::String(s.clone()),
        Token::Typed(kind, s) => match kind.as_str() {
            "datetime" => EdmValue::DateTime(parse_datetime(s).map_err(|e| e.0)?),
            "guid" => EdmValue::Guid(s.parse().map_err(|_| format!("{s:?} is not a guid"))?),
            "X" | "binary" => EdmValue::Binary(hex(s)?),
            other => return Err(format!("unknown literal type {other:?}")),
        },
        Token::Word(w) => match w.as_str() {
            "true" => EdmValue::Boolean(true),
            "false" => EdmValue::Boolean(false),
            _ => number(w)?,
        },
        other => return Err(format!("expected a value, found {other:?}")),
    })
}

fn number(w: &str) -> Result<EdmValue, String> {
    let bad = || format!("{w:?} is not a value");
    if let Some(digits) = w.strip_suffix('L') {
        return digits.parse().map(EdmValue::Int64).map_err(|_| bad());
    }
    if w.contains(['.', 'e', 'E']) {
        return w.parse().map(EdmValue::Double).map_err(|_| bad());
    }
    w.parse().map(EdmValue::Int32).map_err(|_| bad())
}

fn hex(s: &str) -> Result<Vec<u8>, String> {
    if !s.len().is_multiple_of(2) || !s.is_ascii() {
        return Err(format!("{s:?} is not hexadecimal bytes"));
    }
    (0..s.len())
        .step_by(2)
        .map(|i| {
            u8::from_str_radix(&s[i..i + 2], 16).map_err(|_| format!("{s:?} is not hexadecimal"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_the_client_writes() {
        let f = parse(
            "PartitionKey eq 'it''s' and (RowKey ge 'a' or not (Age lt 5L)) and \
             D eq 1.5 and T gt datetime'2026-01-01T00:00:00.0000001Z' and B eq X'00ff' and ok eq true",
        )
        .unwrap();
        let text = f.to_string();
        assert!(
            text.starts_with("PartitionKey eq 'it''s' and (RowKey ge 'a' or not (Age lt 5L))"),
            "{text}"
        );
        let mut names = Vec::new();
        f.visit_properties(&mut |n| names.push(n.to_owned()));
        assert_eq!(names, ["Age", "D", "T", "B", "ok"]);
    }

    #[test]
    fn refuses_what_the_service_refuses() {
        assert!(parse("A eq").is_err());
        assert!(parse("A like 'x'").is_err());
        assert!(parse("(A eq 1").is_err());
        assert!(parse("A eq 'open").is_err());
        let sixteen = (0..16)
            .map(|i| format!("A eq {i}"))
            .collect::<Vec<_>>()
            .join(" or ");
        assert!(parse(&sixteen).unwrap_err().contains("15"));
        assert_eq!(
            parse("A eq 2147483648").unwrap_err(),
            "\"2147483648\" is not a value"
        );
        let deep = format!("{}A eq 1{}", "(".repeat(100_000), ")".repeat(100_000));
        assert!(parse(&deep).unwrap_err().contains("nested deeper"));
    }
}
