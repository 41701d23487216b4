//! psql's `\copy`: a COPY whose data is a file on the client's side.
//! `\copy table [(cols)] from 'file' [with (...)]` and `\copy {table |
//! (query)} to 'file' [with (...)]` become `COPY ... FROM STDIN` and
//! `COPY ... TO STDOUT`, read by `load::copy` as the wire server reads
//! them; the shell moves the file's bytes. `stdout` and `pstdout` write to
//! the shell's output, `pstdin` reads the shell's standard input to its
//! end.

use std::path::PathBuf;

/// Where a `\copy`'s data is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Place {
    /// A file on this machine.
    File(PathBuf),
    /// The shell's standard input (`pstdin`) or output (`stdout`, `pstdout`).
    Standard,
}

/// A `\copy`, as the COPY statement it stands for and where its data is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShellCopy {
    /// `COPY ... FROM STDIN` or `COPY ... TO STDOUT`.
    pub sql: String,
    /// Whether the data goes into the table (`from`).
    pub from: bool,
    /// Where the data is read from or written to.
    pub place: Place,
}

/// Reads `\copy`'s arguments (the line after `\copy`).
pub fn parse(args: &str) -> Result<ShellCopy, String> {
    let usage =
        "\\copy: arguments required: table [(columns)] from 'file', or table | (query) to 'file'";
    let (at, from) = direction(args).ok_or_else(|| usage.to_owned())?;
    let head = args[..at].trim();
    let keyword = if from { "from" } else { "to" };
    let rest = args[at + keyword.len()..].trim_start();
    let (target, options) = file_word(rest).ok_or_else(|| usage.to_owned())?;
    if head.is_empty() {
        return Err(usage.to_owned());
    }
    let place = match target.to_ascii_lowercase().as_str() {
        "program" => return Err("\\copy: PROGRAM is not supported".to_owned()),
        "stdin" => {
            return Err(
                "\\copy ... from stdin: name a file, or pstdin for the shell's standard input"
                    .to_owned(),
            );
        }
        "pstdin" if from => Place::Standard,
        "stdout" | "pstdout" if !from => Place::Standard,
        word @ ("pstdin" | "stdout" | "pstdout") => {
            return Err(format!(
                "\\copy: {keyword} {word}: the data cannot go that way"
            ));
        }
        _ => Place::File(PathBuf::from(target)),
    };
    let client = if from { "FROM STDIN" } else { "TO STDOUT" };
    Ok(ShellCopy {
        sql: format!("COPY {head} {client} {}", options.trim()),
        from,
        place,
    })
}

/// Where the first `from` or `to` outside parentheses and quotes starts,
/// and whether it is `from`.
fn direction(args: &str) -> Option<(usize, bool)> {
    let bytes = args.as_bytes();
    let mut depth = 0usize;
    let mut quote: Option<u8> = None;
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        match (quote, b) {
            (Some(q), _) if b == q => quote = None,
            (Some(_), _) => {}
            (None, b'\'' | b'"') => quote = Some(b),
            (None, b'(') => depth += 1,
            (None, b')') => depth = depth.saturating_sub(1),
            (None, _) if depth == 0 && (i == 0 || is_gap(bytes[i - 1])) => {
                for (word, from) in [("from", true), ("to", false)] {
                    let end = i + word.len();
                    if args
                        .get(i..end)
                        .is_some_and(|w| w.eq_ignore_ascii_case(word))
                        && bytes.get(end).is_none_or(|&c| is_gap(c))
                    {
                        return Some((i, from));
                    }
                }
            }
            _ => {}
        }
        i += 1;
    }
    None
}

fn is_gap(b: u8) -> bool {
    b.is_ascii_whitespace() || b == b'(' || b == b')'
}

/// The file word (quoted with `'`, `''` for a quote, or bare) and what
/// follows it.
fn file_word(rest: &str) -> Option<(String, &str)> {
    if let Some(quoted) = rest.strip_prefix('\'') {
        let mut name = String::new();
        let mut chars = quoted.char_indices().peekable();
        while let Some((i, c)) = chars.next() {
            if c == '\'' {
                if chars.peek().is_some_and(|(_, n)| *n == '\'') {
                    chars.next();
                    name.push('\'');
                    continue;
                }
                return Some((name, &quoted[i + 1..]));
            }
            name.push(c);
        }
        return None;
    }
    let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
    let word = &rest[..end];
    (!word.is_empty()).then(|| (word.to_owned(), &rest[end..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_becomes_the_statement_of_the_client_side() {
        let c = parse("members (id, name) from '/tmp/m.csv' with (format csv, header)")
            .expect("parses");
        assert_eq!(
            c.sql,
            "COPY members (id, name) FROM STDIN with (format csv, header)"
        );
        assert!(c.from);
        assert_eq!(c.place, Place::File("/tmp/m.csv".into()));

        let c = parse("(SELECT a FROM t WHERE b = 'to') TO out.txt").expect("parses");
        assert_eq!(c.sql, "COPY (SELECT a FROM t WHERE b = 'to') TO STDOUT ");
        assert!(!c.from);
        assert_eq!(c.place, Place::File("out.txt".into()));

        let c = parse("t to stdout csv").expect("parses");
        assert_eq!(c.place, Place::Standard);
        assert_eq!(c.sql, "COPY t TO STDOUT csv");

        let c = parse("t from 'it''s.csv'").expect("parses");
        assert_eq!(c.place, Place::File("it's.csv".into()));

        assert!(parse("t").is_err());
        assert!(parse("from 'x'").is_err());
        assert!(parse("t from stdin").unwrap_err().contains("pstdin"));
        assert!(
            parse("t to program 'gzip'")
                .unwrap_err()
                .contains("PROGRAM")
        );
    }
}
