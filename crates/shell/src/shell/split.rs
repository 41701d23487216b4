//! Where statements end: the text of a shell session is split into SQL
//! statements (ended by `;` outside quotes and comments) and meta-commands
//! (a line that starts with `\`). The same function tells the line editor
//! whether the input is complete, so a statement is sent only once it ends,
//! however many lines it spans. Pure.

/// One unit of input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    /// A SQL statement, without its `;`.
    Sql(String),
    /// A meta-command line, without its backslash (`dt`, `d registrations`).
    Meta(String),
}

/// What `split` found: the complete pieces, and the text after them that
/// does not end yet (an open statement, quote or comment).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Split {
    pub pieces: Vec<Piece>,
    pub rest: String,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    Code,
    Single,
    /// `E'...'`: a backslash escapes the next character.
    Escaped,
    Double,
    Line,
    Block(u32),
    Dollar,
}

/// Splits `input` into complete statements and meta-commands. A statement
/// holding only whitespace and comments is dropped; `rest` is empty when
/// nothing is left open.
pub fn split(input: &str) -> Split {
    let chars: Vec<char> = input.chars().collect();
    let mut pieces = Vec::new();
    let mut state = State::Code;
    let mut tag = String::new();
    let mut start = 0;
    let mut i = 0;
    // Whether the current statement has anything but blanks and comments.
    let mut content = false;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        let before = state;
        match state {
            State::Code => match c {
                '\\' if !content => {
                    let end = chars[i..]
                        .iter()
                        .position(|&c| c == '\n')
                        .map_or(chars.len(), |p| i + p);
                    let line: String = chars[i + 1..end].iter().collect();
                    pieces.push(Piece::Meta(line.trim().to_owned()));
                    i = end;
                    start = end;
                    continue;
                }
                '\'' => {
                    let e = i > 0 && matches!(chars[i - 1], 'e' | 'E');
                    let standalone =
                        i < 2 || !(chars[i - 2].is_alphanumeric() || chars[i - 2] == '_');
                    state = if e && standalone {
                        State::Escaped
                    } else {
                        State::Single
                    };
                }
                '"' => state = State::Double,
                '-' if next == Some('-') => {
                    state = State::Line;
                    i += 1;
                }
                '/' if next == Some('*') => {
                    state = State::Block(1);
                    i += 1;
                }
                '$' => {
                    if let Some(t) = dollar_tag(&chars, i) {
                        tag = t;
                        state = State::Dollar;
                        i += tag.chars().count() + 1;
                    }
                }
                ';' => {
                    let text: String = chars[start..i].iter().collect();
                    if content {
                        pieces.push(Piece::Sql(text.trim().to_owned()));
                    }
                    content = false;
                    start = i + 1;
                }
                _ => {}
            },
            State::Single if c == '\'' => state = State::Code,
            State::Escaped if c == '\\' => i += 1,
            State::Escaped if c == '\'' => state = State::Code,
            State::Double if c == '"' => state = State::Code,
            State::Line if c == '\n' => state = State::Code,
            State::Block(depth) => {
                if c == '*' && next == Some('/') {
                    state = if depth == 1 {
                        State::Code
                    } else {
                        State::Block(depth - 1)
                    };
                    i += 1;
                } else if c == '/' && next == Some('*') {
                    state = State::Block(depth + 1);
                    i += 1;
                }
            }
            State::Dollar if c == '$' => {
                let close: String = std::iter::once('$')
                    .chain(tag.chars())
                    .chain(std::iter::once('$'))
                    .collect();
                let here: String = chars[i..].iter().take(close.chars().count()).collect();
                if here == close {
                    state = State::Code;
                    i += close.chars().count() - 1;
                }
            }
            _ => {}
        }
        let comment = |s: State| matches!(s, State::Line | State::Block(_));
        if !c.is_whitespace() && c != ';' && !comment(before) && !comment(state) {
            content = true;
        }
        i += 1;
    }
    let rest: String = chars[start.min(chars.len())..].iter().collect();
    let open = state != State::Code && state != State::Line;
    let rest = if content || open { rest } else { String::new() };
    Split { pieces, rest }
}

/// The tag of a dollar quote opening at `i` (`$$` or `$name$`), if one does:
/// `$1` is a placeholder, and a `$` inside an identifier opens nothing.
fn dollar_tag(chars: &[char], i: usize) -> Option<String> {
    if i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_') {
        return None;
    }
    let mut tag = String::new();
    for &c in &chars[i + 1..] {
        match c {
            '$' => return Some(tag),
            c if c.is_alphabetic() || c == '_' || (c.is_ascii_digit() && !tag.is_empty()) => {
                tag.push(c)
            }
            _ => return None,
        }
    }
    None
}

/// Whether the editor may hand `input` over: nothing left open.
pub fn is_complete(input: &str) -> bool {
    split(input).rest.trim().is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sql(s: &str) -> Piece {
        Piece::Sql(s.into())
    }

    #[test]
    fn statements_end_at_semicolons_outside_quotes_and_comments() {
        let s = split("SELECT ';' AS a; SELECT \"x;y\" FROM t -- c;\n; SELECT /* ; /* ; */ */ 1;");
        assert_eq!(
            s.pieces,
            [
                sql("SELECT ';' AS a"),
                sql("SELECT \"x;y\" FROM t -- c;"),
                sql("SELECT /* ; /* ; */ */ 1")
            ]
        );
        assert_eq!(s.rest, "");
    }

    #[test]
    fn open_statements_quotes_and_comments_are_incomplete() {
        for open in [
            "SELECT 1",
            "SELECT 'a;",
            "SELECT \"a;",
            "SELECT 1 /* ;",
            "SELECT $$ ; ",
            "SELECT $q$ ; $$ ; ",
        ] {
            assert!(!is_complete(open), "{open}");
        }
        for done in [
            "",
            "  \n",
            "SELECT 1;",
            "SELECT $$;$$;",
            "SELECT $tag$ ; $tag$ ;",
            "-- only a comment",
            "\\dt",
        ] {
            assert!(is_complete(done), "{done}");
        }
        // Placeholders are not dollar quotes.
        assert!(is_complete("SELECT $1, a$b FROM t;"));
        // In E'...' a backslash escapes the quote; elsewhere it is text.
        assert_eq!(split("SELECT E'it\\'s;'; SELECT 1;").pieces.len(), 2);
        assert!(!is_complete("SELECT E'it\\';"));
        assert!(is_complete("SELECT 'a\\';"));
        assert!(is_complete("SELECT type'x';"));
    }

    #[test]
    fn meta_commands_take_their_line() {
        let s = split("\\d registrations\nSELECT 1;\n\\timing\nSELECT\n2;");
        assert_eq!(
            s.pieces,
            [
                Piece::Meta("d registrations".into()),
                sql("SELECT 1"),
                Piece::Meta("timing".into()),
                sql("SELECT\n2"),
            ]
        );
        // Inside a statement a backslash is text.
        assert_eq!(split("SELECT '\\x';").pieces, [sql("SELECT '\\x'")]);
    }

    #[test]
    fn empty_statements_are_dropped() {
        assert_eq!(split(";;  ; -- x\n;").pieces, Vec::<Piece>::new());
    }
}
