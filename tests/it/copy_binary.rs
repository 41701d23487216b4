//! Binary COPY with the real psql, checked against PostgreSQL 15: the
//! bytes tablesql writes are the bytes PostgreSQL writes of the same rows,
//! each side loads the other's file, and 100,000 rows go out and back in
//! as they were. A bad binary field is refused with its row and column.

use std::path::Path;
use std::process::{Command, Output};

use crate::copy::shown;
use crate::server::{psql, serve};

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// psql's answer, or its output as the error.
pub(crate) fn ok(out: Output) -> Result<String, Box<dyn std::error::Error>> {
    let text = shown(&out);
    if !out.status.success() {
        return Err(text.into());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// psql against the PostgreSQL the tests compare with.
pub(crate) fn postgres(args: &[&str]) -> Result<String, Box<dyn std::error::Error>> {
    let conninfo = std::env::var("TABLESQL_TEST_POSTGRES").map_err(|_| {
        "TABLESQL_TEST_POSTGRES is not set: run the tests with ./scripts/test (scripts/postgres starts one)"
    })?;
    ok(Command::new(psql())
        .args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", &conninfo])
        .args(args)
        .env("PGTZ", "UTC")
        .output()?)
}

const COLUMNS: &str = "k, id, big, x, ok, at, d, n, raw, u, t";

/// The same rows on both sides: every column type, NULLs, text with the
/// characters the text formats escape, numbers either side of zero, dates
/// before 2000 (PostgreSQL's epoch) and after.
const ROWS: &str = "('a', 1, 9007199254740993, 1.5, true, '2020-01-02 03:04:05+00', '2024-02-29', 1234.5, decode('00ff5c0a', 'hex'), '67e55044-10b1-426f-9247-bb680e5fe0c8', E'tab\\there, \"quoted\", back\\\\slash, ünï'), \
    ('a', 2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL), \
    ('a', 3, -1, -0.25, false, '1999-12-31 23:59:59.123456+00', '1970-01-01', -0.001, decode('', 'hex'), '00000000-0000-0000-0000-000000000000', E'line\\nbreak'), \
    ('b', 4, 0, 1e300, true, '1601-01-01 00:00:00+00', '1601-01-01', 0, decode('0a', 'hex'), NULL, ''), \
    ('b', 5, -9223372036854775808, 2.5e-10, false, '9999-12-31 23:59:59+00', '9999-12-31', 999999999.999, decode('deadbeef', 'hex'), NULL, 'z')";

fn tablesql_ddl(name: &str) -> String {
    format!(
        "CREATE TABLE {name} (k TEXT NOT NULL, id INT NOT NULL, big BIGINT, x DOUBLE PRECISION, \
         ok BOOLEAN, at TIMESTAMP, d DATE, n NUMERIC(12, 3), raw BYTEA, u UUID, t TEXT, \
         PRIMARY KEY (k, id)) \
         WITH (storage_table = '{}', partition_key = '{{k}}', row_key = '{{id:05}}')",
        name.replace('_', "")
    )
}

/// PostgreSQL's table of the same rows, in the types tablesql's wire
/// describes its columns as (a timestamp is `timestamptz`, a uuid `text`).
fn postgres_ddl(name: &str) -> String {
    format!(
        "CREATE TABLE {name} (k TEXT NOT NULL, id INT NOT NULL, big BIGINT, x DOUBLE PRECISION, \
         ok BOOLEAN, at TIMESTAMPTZ, d DATE, n NUMERIC(12, 3), raw BYTEA, u TEXT, t TEXT, \
         PRIMARY KEY (k, id))"
    )
}

fn copy_to(table: &str, file: &Path) -> String {
    format!(
        "\\copy (SELECT {COLUMNS} FROM {table} ORDER BY id) to '{}' with (format binary)",
        file.display()
    )
}

fn copy_from(table: &str, file: &Path) -> String {
    format!(
        "\\copy {table} ({COLUMNS}) from '{}' with (format binary)",
        file.display()
    )
}

fn select(table: &str) -> String {
    format!("SELECT {COLUMNS} FROM {table} ORDER BY id")
}

#[test]
fn binary_copy_writes_and_reads_what_postgresql_does() -> TestResult {
    let server = serve(1000, &[])?;
    let dir = tempfile::tempdir()?;
    let ours = dir.path().join("tablesql.bin");
    let theirs = dir.path().join("postgres.bin");
    let pg_src = format!("binary_copy_src_{}", std::process::id());
    let pg_dst = format!("binary_copy_dst_{}", std::process::id());
    let on_tablesql = |args: &[&str]| ok(server.psql("", args)?);
    on_tablesql(&["-c", &tablesql_ddl("src")])?;
    on_tablesql(&["-c", &tablesql_ddl("from_ours")])?;
    on_tablesql(&["-c", &tablesql_ddl("from_theirs")])?;
    on_tablesql(&["-c", &format!("INSERT INTO src ({COLUMNS}) VALUES {ROWS}")])?;
    postgres(&["-c", &format!("DROP TABLE IF EXISTS {pg_src}, {pg_dst}")])?;
    postgres(&["-c", &postgres_ddl(&pg_src)])?;
    postgres(&["-c", &postgres_ddl(&pg_dst)])?;
    postgres(&[
        "-c",
        &format!("INSERT INTO {pg_src} ({COLUMNS}) VALUES {ROWS}"),
    ])?;

    let out = on_tablesql(&["-c", &copy_to("src", &ours)])?;
    assert!(out.contains("COPY 5"), "{out}");
    postgres(&["-c", &copy_to(&pg_src, &theirs)])?;
    let (a, b) = (std::fs::read(&ours)?, std::fs::read(&theirs)?);
    assert!(a.starts_with(b"PGCOPY\n\xff\r\n\0"), "{a:?}");
    assert!(
        a == b,
        "tablesql's binary COPY differs from PostgreSQL's:\n{a:?}\n{b:?}"
    );

    // Each side reads the other's file as the rows it was written from.
    on_tablesql(&["-c", &copy_from("from_theirs", &theirs)])?;
    postgres(&["-c", &copy_from(&pg_dst, &ours)])?;
    let want = on_tablesql(&["-At", "-c", &select("src")])?;
    assert_eq!(on_tablesql(&["-At", "-c", &select("from_theirs")])?, want);
    assert_eq!(
        postgres(&["-At", "-c", &select(&pg_dst)])?,
        postgres(&["-At", "-c", &select(&pg_src)])?
    );
    postgres(&["-c", &format!("DROP TABLE {pg_src}, {pg_dst}")])?;

    // And tablesql reads its own.
    on_tablesql(&["-c", &copy_from("from_ours", &ours)])?;
    assert_eq!(on_tablesql(&["-At", "-c", &select("from_ours")])?, want);
    Ok(())
}

#[test]
fn bad_binary_data_is_refused_with_its_row_and_column() -> TestResult {
    let server = serve(1000, &[])?;
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("bad.bin");
    // Two rows of (k text, id): the second's id an int8, where id is int4.
    let mut data = b"PGCOPY\n\xff\r\n\0\0\0\0\0\0\0\0\0".to_vec();
    data.extend_from_slice(&[0, 2, 0, 0, 0, 1, b'a', 0, 0, 0, 4, 0, 0, 0, 1]);
    data.extend_from_slice(&[0, 2, 0, 0, 0, 1, b'a', 0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0, 2]);
    data.extend_from_slice(&[0xff, 0xff]);
    std::fs::write(&file, &data)?;
    let out = server.psql(
        "",
        &[
            "-v",
            "ON_ERROR_STOP=0",
            "-v",
            "VERBOSITY=verbose",
            "-c",
            &tablesql_ddl("dst"),
            "-c",
            &format!(
                "\\copy dst (k, id) from '{}' (format binary)",
                file.display()
            ),
            "-At",
            "-c",
            "SELECT count(*) FROM dst",
        ],
    )?;
    let text = shown(&out);
    assert!(
        text.contains("22P03")
            && text.contains("integer takes 4 bytes, the field has 8 (column \"id\")")
            && text.contains("line 2"),
        "{text}"
    );
    // The chunk is checked whole before it is written: nothing.
    assert!(
        String::from_utf8_lossy(&out.stdout).ends_with("\n0\n"),
        "{text}"
    );
    // A type binary COPY has no form for is refused before a row is sent.
    let out = server.psql(
        "",
        &[
            "-v",
            "ON_ERROR_STOP=0",
            "-c",
            &format!(
                "\\copy (SELECT make_array(1, 2) AS a) to '{}' (format binary)",
                file.display()
            ),
        ],
    )?;
    let text = shown(&out);
    assert!(text.contains("no binary form for column \"a\""), "{text}");
    Ok(())
}

/// 100,000 rows out in binary and back in: the same rows, as text COPY
/// writes them.
#[test]
fn psql_copies_100k_rows_out_and_in_as_binary() -> TestResult {
    let _cpu = crate::exclusive();
    let server = serve(100_000, &[])?;
    let dir = tempfile::tempdir()?;
    let binary = dir.path().join("regs.bin");
    let (first, second) = (dir.path().join("first.txt"), dir.path().join("second.txt"));
    let run = |args: &[&str]| ok(server.psql("", args)?);
    let columns = "event, distance, bib, name, gender, age, finish, registered, club";
    let out = run(&[
        "-c",
        &format!(
            "\\copy registrations ({columns}) to '{}' with (format binary)",
            binary.display()
        ),
    ])?;
    assert!(out.contains("COPY 100000"), "{out}");
    run(&[
        "-c",
        &crate::copy::REGS2
            .replace("regs2", "regs3")
            .replace("Regs2", "Regs3"),
    ])?;
    let out = run(&[
        "-c",
        &format!("\\copy regs3 from '{}' with binary", binary.display()),
    ])?;
    assert!(out.contains("COPY 100000"), "{out}");
    for (table, file) in [("registrations", &first), ("regs3", &second)] {
        run(&[
            "-c",
            &format!("\\copy {table} ({columns}) to '{}'", file.display()),
        ])?;
    }
    let (a, b) = (
        crate::copy::sorted_lines(&first)?,
        crate::copy::sorted_lines(&second)?,
    );
    assert_eq!(a.len(), 100_000);
    assert!(a == b, "the binary import differs from the export");
    Ok(())
}
