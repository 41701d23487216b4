//! COPY over the wire with the real psql: `\copy` out and in, in text and
//! CSV, 100,000 rows; bad rows stopped with their line numbers.

use crate::server::serve;

type TestResult = Result<(), Box<dyn std::error::Error>>;

pub(crate) const REGS2: &str = "CREATE TABLE regs2 (event TEXT NOT NULL, distance TEXT NOT NULL, \
    bib INT NOT NULL, name TEXT NOT NULL, gender TEXT NOT NULL, age INT NOT NULL, \
    finish BIGINT, registered TIMESTAMP, club TEXT, PRIMARY KEY (event, distance, bib)) \
    WITH (storage_table = 'Regs2', partition_key = '{event}__{distance}', \
    row_key = 'BIB:{bib:05}__{name}__{gender}__{age}', \
    index_age = 'AGE:{age:03}__{bib}__{name}__{gender}')";

pub(crate) fn shown(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

pub(crate) fn sorted_lines(path: &std::path::Path) -> std::io::Result<Vec<String>> {
    let mut lines: Vec<String> = std::fs::read_to_string(path)?
        .lines()
        .map(str::to_owned)
        .collect();
    lines.sort();
    Ok(lines)
}

#[test]
fn psql_copies_100k_rows_out_and_back_in() -> TestResult {
    let _cpu = crate::exclusive();
    let server = serve(100_000, &[])?;
    let dir = tempfile::tempdir()?;
    let first = dir.path().join("first.txt");
    let second = dir.path().join("second.txt");
    let run = |args: &[&str]| -> Result<String, Box<dyn std::error::Error>> {
        let out = server.psql("", args)?;
        let text = shown(&out);
        if !out.status.success() {
            return Err(text.into());
        }
        Ok(text)
    };
    let out = run(&[
        "-c",
        &format!("\\copy registrations to '{}'", first.display()),
    ])?;
    assert!(out.contains("COPY 100000"), "{out}");
    run(&["-c", REGS2])?;
    let out = run(&["-c", &format!("\\copy regs2 from '{}'", first.display())])?;
    assert!(out.contains("COPY 100000"), "{out}");
    let out = run(&["-c", &format!("\\copy regs2 to '{}'", second.display())])?;
    assert!(out.contains("COPY 100000"), "{out}");
    let (a, b) = (sorted_lines(&first)?, sorted_lines(&second)?);
    assert_eq!(a.len(), 100_000);
    assert!(a == b, "the export differs from the import");
    // The index rows were written with their base rows: the index path
    // finds as many as the original table's.
    let counts = run(&[
        "-At",
        "-c",
        "SELECT (SELECT count(*) FROM regs2 WHERE age = 42) = (SELECT count(*) FROM registrations WHERE age = 42)",
    ])?;
    assert!(counts.starts_with("t"), "{counts}");
    Ok(())
}

#[test]
fn a_bad_csv_line_stops_the_copy_with_its_number() -> TestResult {
    let server = serve(1000, &[])?;
    let dir = tempfile::tempdir()?;
    let good = dir.path().join("good.csv");
    let bad = dir.path().join("bad.csv");
    let out = server.psql(
        "",
        &[
            "-c",
            &format!(
                "\\copy registrations to '{}' with (format csv, header)",
                good.display()
            ),
        ],
    )?;
    assert!(out.status.success(), "{}", shown(&out));
    let text = std::fs::read_to_string(&good)?;
    let mut lines: Vec<&str> = text.lines().collect();
    // Line 6 of the file (the header is line 1) cannot be a bib.
    lines.insert(5, "2099 Nowhere,Full,abc,X,M,30,,,");
    std::fs::write(&bad, lines.join("\n") + "\n")?;
    let partial = dir.path().join("partial.txt");
    std::fs::write(&partial, "2099 Nowhere\tFull\n")?;
    let out = server.psql(
        "",
        &[
            "-v",
            "ON_ERROR_STOP=0",
            "-c",
            REGS2,
            "-c",
            &format!(
                "\\copy regs2 from '{}' with (format csv, header)",
                bad.display()
            ),
            "-c",
            "SELECT count(*) AS written FROM regs2",
            "-c",
            &format!(
                "\\copy regs2 (event, distance) from '{}'",
                partial.display()
            ),
        ],
    )?;
    let text = shown(&out);
    assert!(
        text.contains("invalid input for column \"bib\"") && text.contains("line 6"),
        "{text}"
    );
    // The first chunk is checked whole before it is written: nothing.
    assert!(text.contains("written \n---------\n       0"), "{text}");
    // A NOT NULL column the data does not carry: refused before a row.
    assert!(
        text.contains("column \"bib\" of relation \"regs2\" is NOT NULL"),
        "{text}"
    );
    Ok(())
}

/// Every column type survives a COPY out and back in, in both formats:
/// bytea as PostgreSQL's hex, NULLs, and text with the characters each
/// format escapes.
#[test]
fn every_type_survives_a_round_trip() -> TestResult {
    let server = serve(1000, &[])?;
    let dir = tempfile::tempdir()?;
    let ddl = |name: &str| {
        format!(
            "CREATE TABLE {name} (k TEXT NOT NULL, id INT NOT NULL, big BIGINT, x DOUBLE, ok BOOLEAN, \
             at TIMESTAMP, raw BYTEA, u UUID, t TEXT, PRIMARY KEY (k, id)) \
             WITH (storage_table = '{}table', partition_key = '{{k}}', row_key = '{{id:05}}')",
            name.replace('_', "")
        )
    };
    let setup = [
        ddl("src"),
        "INSERT INTO src (k, id, big, x, ok, at, raw, u, t) VALUES \
         ('a', 1, 9007199254740993, 1.5, true, '2020-01-02T03:04:05Z', X'00ff5c0a', '67e55044-10b1-426f-9247-bb680e5fe0c8', 'tab\there, \"quoted\", back\\slash'), \
         ('a', 2, NULL, NULL, NULL, NULL, NULL, NULL, NULL), \
         ('a', 3, -1, -0.25, false, '1999-12-31T23:59:59Z', X'', '00000000-0000-0000-0000-000000000000', E'line\\nbreak')"
            .to_owned(),
        ddl("dst_text"),
        ddl("dst_csv"),
    ];
    for sql in &setup {
        let out = server.psql("", &["-c", sql])?;
        assert!(out.status.success(), "{sql}: {}", shown(&out));
    }
    let cols = "k, id, big, x, ok, at, raw, u, t";
    let select = format!("SELECT {cols} FROM {{}} ORDER BY id");
    for (table, options) in [("dst_text", ""), ("dst_csv", " with (format csv, header)")] {
        let file = dir.path().join(format!("{table}.data"));
        for step in [
            format!("\\copy src to '{}'{options}", file.display()),
            format!("\\copy {table} from '{}'{options}", file.display()),
        ] {
            let out = server.psql("", &["-c", &step])?;
            assert!(out.status.success(), "{step}: {}", shown(&out));
        }
        let a = server.psql("", &["-At", "-c", &select.replace("{}", "src")])?;
        let b = server.psql("", &["-At", "-c", &select.replace("{}", table)])?;
        // Standard output: the rows (the notices name their tables).
        let (a, b) = (
            String::from_utf8_lossy(&a.stdout),
            String::from_utf8_lossy(&b.stdout),
        );
        assert_eq!(a, b, "{table}");
        assert!(
            a.contains("\\x00ff5c0a") && a.contains("line\nbreak"),
            "{a}"
        );
    }
    Ok(())
}

/// Columns a COPY does not carry get their DEFAULT, as in PostgreSQL: an
/// identity column numbers the rows.
#[test]
fn copy_fills_defaults_of_columns_it_does_not_carry() -> TestResult {
    let server = serve(1000, &[])?;
    let dir = tempfile::tempdir()?;
    let data = dir.path().join("notes.csv");
    std::fs::write(&data, "body\nhello\nworld\n")?;
    let copy = format!("\\copy notes (body) FROM '{}' CSV HEADER", data.display());
    let out = server.psql(
        "",
        &[
            "-c",
            "CREATE TABLE notes (id BIGINT GENERATED BY DEFAULT AS IDENTITY, body TEXT, PRIMARY KEY (id)) WITH (storage_table = 'Notes', partition_key = 'n', row_key = '{id:010}')",
            "-c",
            &copy,
            "-At",
            "-c",
            "SELECT id, body FROM notes ORDER BY id",
        ],
    )?;
    let text = shown(&out);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("COPY 2"), "{text}");
    assert!(text.contains("1|hello\n2|world"), "{text}");
    Ok(())
}

/// COPY FROM in a transaction block writes as an INSERT there does: its
/// rows are the block's, read by it, written at COMMIT and gone at
/// ROLLBACK (psql sends the block's statements in one session with `-c`s
/// over one connection).
#[test]
fn copy_in_a_block_waits_for_its_end() -> TestResult {
    let server = serve(1000, &[])?;
    let dir = tempfile::tempdir()?;
    let data = dir.path().join("kv.csv");
    std::fs::write(&data, "a,1\nb,2\nc,3\n")?;
    let copy = format!("\\copy kv FROM '{}' CSV", data.display());
    let out = server.psql(
        "",
        &[
            "-c",
            "CREATE TABLE kv (k TEXT NOT NULL, v INT, PRIMARY KEY (k))",
            "-c",
            "BEGIN",
            "-c",
            &copy,
            "-At",
            "-c",
            "SELECT count(*) FROM kv",
            "-c",
            "ROLLBACK",
            "-c",
            "SELECT 'after rollback', count(*) FROM kv",
            "-c",
            "BEGIN",
            "-c",
            &copy,
            "-c",
            "COMMIT",
            "-c",
            "SELECT 'after commit', count(*), sum(v) FROM kv",
        ],
    )?;
    let text = shown(&out);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains(
            "BEGIN\nCOPY 3\n3\nROLLBACK\nafter rollback|0\nBEGIN\nCOPY 3\nCOMMIT\nafter commit|3|6"
        ),
        "{text}"
    );
    Ok(())
}
