//! COPY's formats as a statement asks for them, and its two text formats
//! as PostgreSQL writes and reads them: `text` (tab-separated, `\N` for
//! NULL, backslash escapes) and `csv` (an unquoted empty field is NULL, a
//! quoted one is the empty string). Pure functions. The third, `binary`,
//! is `binary.rs`.
//!
//! The CSV reader is ours, not the `csv` crate's: that crate does not say
//! whether a field was quoted, and PostgreSQL's NULL depends on it.

use datafusion::sql::sqlparser::ast::{CopyLegacyCsvOption, CopyLegacyOption, CopyOption};

/// How far [`CopyFormat::record_end`] has looked into a record.
#[derive(Debug, Default, Clone, Copy)]
pub struct Scan {
    at: usize,
    quoted: bool,
}

/// How rows are written and read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyFormat {
    /// CSV; otherwise the text format (or binary).
    pub csv: bool,
    /// PostgreSQL's binary format (`binary.rs`): none of the text options
    /// below apply.
    pub binary: bool,
    /// The character between fields (tab in text, comma in CSV).
    pub delimiter: char,
    /// The text that stands for NULL (`\N` in text, empty in CSV).
    pub null: String,
    /// CSV only: the character that quotes a field.
    pub quote: char,
    /// CSV only: the character before a quote (or itself) inside a quoted field.
    pub escape: char,
    /// CSV only: a first line of column names (written, or skipped).
    pub header: bool,
}

impl CopyFormat {
    /// PostgreSQL's text format: tab-separated, `\N` for NULL.
    pub fn text() -> Self {
        Self {
            csv: false,
            binary: false,
            delimiter: '\t',
            null: "\\N".to_owned(),
            quote: '"',
            escape: '"',
            header: false,
        }
    }

    /// PostgreSQL's CSV format: comma-separated, an unquoted empty field NULL.
    pub fn csv() -> Self {
        Self {
            csv: true,
            delimiter: ',',
            null: String::new(),
            ..Self::text()
        }
    }

    /// The format a COPY statement's options ask for.
    pub fn of(options: &[CopyOption], legacy: &[CopyLegacyOption]) -> Result<Self, String> {
        let csv = options.iter().any(|o| match o {
            CopyOption::Format(name) => name.value.eq_ignore_ascii_case("csv"),
            _ => false,
        }) || legacy.iter().any(|o| matches!(o, CopyLegacyOption::Csv(_)));
        let binary = options.iter().any(|o| match o {
            CopyOption::Format(name) => name.value.eq_ignore_ascii_case("binary"),
            _ => false,
        }) || legacy.iter().any(|o| matches!(o, CopyLegacyOption::Binary));
        let mut f = if csv { Self::csv() } else { Self::text() };
        f.binary = binary;
        for o in options {
            match o {
                CopyOption::Format(name)
                    if !["csv", "text", "binary"]
                        .contains(&name.value.to_ascii_lowercase().as_str()) =>
                {
                    return Err(format!("COPY format \"{name}\" not recognized"));
                }
                CopyOption::Delimiter(_)
                | CopyOption::Null(_)
                | CopyOption::Header(true)
                | CopyOption::Quote(_)
                | CopyOption::Escape(_)
                    if binary =>
                {
                    return Err(format!("COPY option {o} is not valid in BINARY mode"));
                }
                CopyOption::Format(_) | CopyOption::Freeze(_) => {}
                CopyOption::Delimiter(c) => f.delimiter = *c,
                CopyOption::Null(s) => f.null = s.clone(),
                CopyOption::Header(h) => f.header = *h,
                CopyOption::Quote(c) => f.quote = *c,
                CopyOption::Escape(c) => f.escape = *c,
                CopyOption::Encoding(e) if e.eq_ignore_ascii_case("utf8") => {}
                other => return Err(format!("COPY option {other} is not supported")),
            }
        }
        for o in legacy {
            match o {
                CopyLegacyOption::Binary => {}
                CopyLegacyOption::Delimiter(_)
                | CopyLegacyOption::Null(_)
                | CopyLegacyOption::Csv(_)
                    if binary =>
                {
                    return Err(format!("COPY option {o} is not valid in BINARY mode"));
                }
                CopyLegacyOption::Delimiter(c) => f.delimiter = *c,
                CopyLegacyOption::Null(s) => f.null = s.clone(),
                CopyLegacyOption::Csv(csv_options) => {
                    for c in csv_options {
                        match c {
                            CopyLegacyCsvOption::Header => f.header = true,
                            CopyLegacyCsvOption::Quote(q) => f.quote = *q,
                            CopyLegacyCsvOption::Escape(e) => f.escape = *e,
                            other => return Err(format!("COPY option {other} is not supported")),
                        }
                    }
                }
                other => return Err(format!("COPY option {other} is not supported")),
            }
        }
        if f.header && !f.csv {
            return Err("COPY HEADER is available only in CSV mode".into());
        }
        f.check()?;
        Ok(f)
    }

    /// PostgreSQL's rules for the special characters: one ASCII byte each,
    /// the delimiter unlike the quote, and in text no character an escape
    /// or a line end gives meaning to.
    fn check(&self) -> Result<(), String> {
        for (what, c) in [
            ("delimiter", self.delimiter),
            ("quote", self.quote),
            ("escape", self.escape),
        ] {
            if !c.is_ascii() {
                return Err(format!("COPY {what} must be a single one-byte character"));
            }
        }
        if matches!(self.delimiter, '\r' | '\n') {
            return Err("COPY delimiter cannot be newline or carriage return".into());
        }
        if self.csv && self.delimiter == self.quote {
            return Err("COPY delimiter and quote must be different".into());
        }
        if !self.csv && (self.delimiter == '\\' || self.delimiter.is_ascii_alphanumeric()) {
            return Err(format!("COPY delimiter cannot be \"{}\"", self.delimiter));
        }
        Ok(())
    }

    /// One row as a line, with its newline.
    pub fn write_row(&self, values: &[Option<&str>], out: &mut Vec<u8>) {
        for (i, v) in values.iter().enumerate() {
            self.write_field(i, *v, out);
        }
        out.push(b'\n');
    }

    /// Field `i` of a row (0 first), with the delimiter before it; the
    /// caller ends the row with a newline.
    pub fn write_field(&self, i: usize, v: Option<&str>, out: &mut Vec<u8>) {
        if i > 0 {
            push_char(out, self.delimiter);
        }
        match v {
            None => out.extend_from_slice(self.null.as_bytes()),
            Some(v) if self.csv => self.write_csv_field(v, out),
            Some(v) => self.write_text_field(v, out),
        }
    }

    fn write_text_field(&self, v: &str, out: &mut Vec<u8>) {
        // Most values need no escape: copied whole.
        if !v.contains(['\\', '\n', '\r', '\t', self.delimiter]) {
            out.extend_from_slice(v.as_bytes());
            return;
        }
        for c in v.chars() {
            match c {
                '\\' => out.extend_from_slice(b"\\\\"),
                '\n' => out.extend_from_slice(b"\\n"),
                '\r' => out.extend_from_slice(b"\\r"),
                '\t' => out.extend_from_slice(b"\\t"),
                c if c == self.delimiter => {
                    out.push(b'\\');
                    push_char(out, c);
                }
                c => push_char(out, c),
            }
        }
    }

    fn write_csv_field(&self, v: &str, out: &mut Vec<u8>) {
        // Quoted when it could be read otherwise: empty (NULL), the NULL
        // text, or holding a delimiter, quote, escape or line break.
        let quoted = v.is_empty()
            || v == self.null
            || v.contains([self.delimiter, self.quote, self.escape, '\n', '\r'])
            || v.starts_with("\\.");
        if !quoted {
            out.extend_from_slice(v.as_bytes());
            return;
        }
        push_char(out, self.quote);
        for c in v.chars() {
            if c == self.quote || c == self.escape {
                push_char(out, self.escape);
            }
            push_char(out, c);
        }
        push_char(out, self.quote);
    }

    /// Where the first whole record of `data` ends (after its newline), if
    /// it holds one: a newline inside CSV quotes does not end a record.
    /// `scan` carries how far an earlier call looked into the same record,
    /// so a long record is scanned once however many messages bring it.
    pub fn record_end(&self, data: &[u8], scan: &mut Scan) -> Option<usize> {
        // One-byte characters (checked in `of`).
        let (quote, escape) = (self.quote as u8, self.escape as u8);
        let mut i = scan.at;
        while i < data.len() {
            let b = data[i];
            if self.csv && scan.quoted && b == escape && escape != quote {
                if i + 1 >= data.len() {
                    break;
                }
                i += 2;
                continue;
            }
            if self.csv && b == quote {
                scan.quoted = !scan.quoted;
            } else if b == b'\n' && !scan.quoted {
                *scan = Scan::default();
                return Some(i + 1);
            }
            i += 1;
        }
        scan.at = i;
        None
    }

    /// The fields of one record (without its line end).
    pub fn read_row(&self, line: &str) -> Result<Vec<Option<String>>, String> {
        let line = line.strip_suffix('\n').unwrap_or(line);
        let line = line.strip_suffix('\r').unwrap_or(line);
        if self.csv {
            self.read_csv(line)
        } else {
            self.read_text(line)
        }
    }

    /// Text format, split and unescaped in one pass (an escaped delimiter
    /// is data), as PostgreSQL reads it: a field whose raw text is the NULL
    /// string is NULL.
    fn read_text(&self, line: &str) -> Result<Vec<Option<String>>, String> {
        let mut fields = Vec::new();
        let (mut field, mut raw) = (String::new(), String::new());
        let mut chars = line.chars().peekable();
        while let Some(c) = chars.next() {
            if c == self.delimiter {
                fields.push((raw != self.null).then(|| std::mem::take(&mut field)));
                field.clear();
                raw.clear();
                continue;
            }
            raw.push(c);
            if c != '\\' {
                field.push(c);
                continue;
            }
            let Some(next) = chars.next() else {
                return Err("a field ends with a lone backslash".into());
            };
            raw.push(next);
            match next {
                'n' => field.push('\n'),
                'r' => field.push('\r'),
                't' => field.push('\t'),
                'b' => field.push('\u{8}'),
                'f' => field.push('\u{c}'),
                'v' => field.push('\u{b}'),
                '0'..='7' => {
                    let mut n = next.to_digit(8).unwrap_or(0);
                    for _ in 0..2 {
                        match chars.peek().and_then(|d| d.to_digit(8)) {
                            Some(d) => {
                                n = n * 8 + d;
                                chars.next();
                            }
                            None => break,
                        }
                    }
                    field.push(char::from_u32(n).ok_or("invalid octal escape")?);
                }
                'x' if chars.peek().is_some_and(char::is_ascii_hexdigit) => {
                    let mut n = 0;
                    for _ in 0..2 {
                        match chars.peek().and_then(|d| d.to_digit(16)) {
                            Some(d) => {
                                n = n * 16 + d;
                                chars.next();
                            }
                            None => break,
                        }
                    }
                    field.push(char::from_u32(n).ok_or("invalid hex escape")?);
                }
                other => field.push(other),
            }
        }
        fields.push((raw != self.null).then_some(field));
        Ok(fields)
    }

    fn read_csv(&self, line: &str) -> Result<Vec<Option<String>>, String> {
        let mut fields = Vec::new();
        let mut field = String::new();
        let (mut quoted, mut was_quoted) = (false, false);
        let mut chars = line.chars().peekable();
        while let Some(c) = chars.next() {
            if quoted {
                if c == self.escape && chars.peek() == Some(&self.quote) {
                    field.push(self.quote);
                    chars.next();
                } else if c == self.escape
                    && self.escape != self.quote
                    && chars.peek() == Some(&self.escape)
                {
                    field.push(self.escape);
                    chars.next();
                } else if c == self.quote {
                    quoted = false;
                } else {
                    field.push(c);
                }
            } else if c == self.quote {
                quoted = true;
                was_quoted = true;
            } else if c == self.delimiter {
                fields.push(self.csv_value(std::mem::take(&mut field), was_quoted));
                was_quoted = false;
            } else {
                field.push(c);
            }
        }
        if quoted {
            return Err("unterminated CSV quoted field".into());
        }
        fields.push(self.csv_value(field, was_quoted));
        Ok(fields)
    }

    fn csv_value(&self, field: String, quoted: bool) -> Option<String> {
        (quoted || field != self.null).then_some(field)
    }
}

/// A character's UTF-8 bytes.
fn push_char(out: &mut Vec<u8>, c: char) {
    out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(f: &CopyFormat, values: &[Option<&str>]) {
        let mut line = Vec::new();
        f.write_row(values, &mut line);
        let line = String::from_utf8(line).unwrap_or_else(|e| panic!("{e}"));
        let mut scan = Scan::default();
        assert_eq!(
            f.record_end(line.as_bytes(), &mut scan),
            Some(line.len()),
            "{line:?}"
        );
        let read = f
            .read_row(&line)
            .unwrap_or_else(|e| panic!("{e}: {line:?}"));
        let want: Vec<Option<String>> = values.iter().map(|v| v.map(str::to_owned)).collect();
        assert_eq!(read, want, "{line:?}");
    }

    #[test]
    fn text_and_csv_read_what_they_write() {
        let rows: [&[Option<&str>]; 4] = [
            &[Some("a"), None, Some("")],
            &[Some("tab\there"), Some("line\nbreak"), Some("back\\slash")],
            &[Some("comma, \"quoted\""), Some("\\N"), Some("\r")],
            &[Some("ünï"), Some("\\."), None],
        ];
        for f in [CopyFormat::text(), CopyFormat::csv()] {
            for row in rows {
                round_trip(&f, row);
            }
        }
    }

    #[test]
    fn csv_nulls_are_unquoted_empty_fields() {
        let f = CopyFormat::csv();
        assert_eq!(
            f.read_row("1,,\"\",x\n"),
            Ok(vec![
                Some("1".into()),
                None,
                Some(String::new()),
                Some("x".into())
            ])
        );
        assert!(f.read_row("1,\"open").is_err());
        // A quoted newline does not end the record.
        let mut scan = Scan::default();
        assert_eq!(f.record_end(b"1,\"a\nb\"\n2", &mut scan), Some(8));
        // Brought in pieces, the record is found where it ends.
        let mut scan = Scan::default();
        assert_eq!(f.record_end(b"1,\"a\n", &mut scan), None);
        assert_eq!(f.record_end(b"1,\"a\nb\"\n", &mut scan), Some(8));
    }

    #[test]
    fn an_escaped_delimiter_is_data() {
        let f = CopyFormat {
            delimiter: ',',
            ..CopyFormat::text()
        };
        round_trip(&f, &[Some("a,b"), Some("c")]);
        assert_eq!(
            CopyFormat::text().read_row("\\101\\x42\t\\N\n"),
            Ok(vec![Some("AB".into()), None])
        );
    }

    #[test]
    fn special_characters_are_checked() {
        use datafusion::sql::sqlparser::ast::CopyOption;
        assert!(CopyFormat::of(&[CopyOption::Delimiter('n')], &[]).is_err());
        assert!(CopyFormat::of(&[CopyOption::Delimiter('é')], &[]).is_err());
        let csv = CopyOption::Format(datafusion::sql::sqlparser::ast::Ident::new("csv"));
        assert!(CopyFormat::of(&[csv.clone(), CopyOption::Quote(',')], &[]).is_err());
        assert!(CopyFormat::of(&[csv, CopyOption::Delimiter(';')], &[]).is_ok());
    }

    #[test]
    fn text_escapes_are_postgresqls() {
        let f = CopyFormat::text();
        assert_eq!(
            f.read_row("a\\tb\t\\N\tc\\\\d\n"),
            Ok(vec![Some("a\tb".into()), None, Some("c\\d".into())])
        );
    }
}
