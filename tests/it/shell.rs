//! `tablesql shell` as people and scripts use it: in a real terminal (tmux,
//! driven with send-keys; the screen read back with capture-pane and
//! checked), and non-interactively with `-f` and on stdin.

use crate::terminal::Terminal;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// `tablesql --store STORE`, with no store from the environment.
pub(crate) fn tablesql(store: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tablesql"));
    cmd.arg("--store")
        .arg(store)
        .env_remove("TABLESQL_STORE")
        .env("RUST_BACKTRACE", "0");
    cmd
}

/// A copy of the demo store with 1,000 registrations (the wire server
/// tests' fixture) for one test: the embedded store belongs to one process
/// at a time, and tests write.
pub(crate) fn store_copy() -> Result<tempfile::TempDir, Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    super::server::copy_dir(super::server::fixture(1000)?, dir.path())?;
    Ok(dir)
}

fn run_with_stdin(cmd: &mut Command, input: &str) -> std::io::Result<Output> {
    use std::io::Write;
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(input.as_bytes())?;
    }
    child.wait_with_output()
}

#[test]
fn stdin_runs_statements_and_formats() -> TestResult {
    let store = store_copy()?;
    let out = run_with_stdin(tablesql(store.path()).arg("shell"), "SELECT 1 AS one;\n")?;
    let stdout = String::from_utf8(out.stdout)?;
    assert!(out.status.success(), "{stdout}");
    assert!(
        stdout.contains("│ one │") && stdout.contains("(1 row)"),
        "{stdout}"
    );

    // NULL and the empty string are told apart; csv and json are for scripts.
    let sql = "SELECT CAST(NULL AS TEXT) AS n, '' AS e, 2 AS two;";
    let out = run_with_stdin(tablesql(store.path()).arg("shell"), sql)?;
    let table = String::from_utf8(out.stdout)?;
    assert!(table.contains("│ NULL ┆   ┆ 2   │"), "{table}");
    let out = run_with_stdin(
        tablesql(store.path()).args(["shell", "--format", "csv"]),
        sql,
    )?;
    // COPY's CSV (and psql's --csv): NULL unquoted, '' quoted.
    assert_eq!(String::from_utf8(out.stdout)?, "n,e,two\n,\"\",2\n");
    let out = run_with_stdin(
        tablesql(store.path()).args(["shell", "--format", "json"]),
        sql,
    )?;
    assert_eq!(
        String::from_utf8(out.stdout)?,
        "[\n  {\"n\":null,\"e\":\"\",\"two\":2}\n]\n"
    );

    // Statements without rows answer with their command tags, comments or not.
    let script = "-- a table\nCREATE TABLE kvs (k TEXT NOT NULL, n INT NOT NULL, PRIMARY KEY (k)) \
                  WITH (partition_key = '{k}', row_key = 'K');\n\
                  /* rows */ INSERT INTO kvs (k, n) VALUES ('a', 1), ('b', 2);\n\
                  CREATE SEQUENCE s;\nDROP SEQUENCE s;\nANALYZE kvs;\nSET tablesql.page_size = 0;\n";
    let out = run_with_stdin(tablesql(store.path()).arg("shell"), script)?;
    let tags = String::from_utf8(out.stdout)?;
    assert!(
        out.status.success(),
        "{tags}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        tags.lines().collect::<Vec<_>>(),
        [
            "CREATE TABLE",
            "INSERT 0 2",
            "CREATE SEQUENCE",
            "DROP SEQUENCE",
            "ANALYZE",
            "SET"
        ],
        "{tags}"
    );
    Ok(())
}

#[test]
fn a_script_stops_at_its_first_error() -> TestResult {
    let store = store_copy()?;
    let script = store.path().join("script.sql");
    std::fs::write(
        &script,
        "-- two writes around a typo\n\
         INSERT INTO registrations (event, distance, bib, name, gender, age)\n\
             VALUES ('Script', '5K', 1, 'Ana', 'F', 30);\n\
         \\timing off\n\
         SELECT name FROM registrations WHERE event = 'Script';\n\
         SELECT bib\n  FROM registrations WHERE bib = 1 AND;\n\
         INSERT INTO registrations (event, distance, bib, name, gender, age)\n\
             VALUES ('Script', '5K', 2, 'Bo', 'M', 40);\n",
    )?;
    let out = tablesql(store.path())
        .arg("shell")
        .arg("-f")
        .arg(&script)
        .output()?;
    let (stdout, stderr) = (
        String::from_utf8(out.stdout)?,
        String::from_utf8(out.stderr)?,
    );
    // psql's exit code for a script ON_ERROR_STOP ended.
    assert_eq!(out.status.code(), Some(3), "{stdout}\n{stderr}");
    assert!(stdout.contains("INSERT 0 1"), "{stdout}");
    assert!(stdout.contains("│ Ana  │"), "{stdout}");
    // The error says what and where: the line of the statement, a caret
    // under the place.
    assert!(stderr.contains("ERROR:  syntax error"), "{stderr}");
    assert!(
        stderr.contains("LINE 2:   FROM registrations WHERE bib = 1 AND\n"),
        "{stderr}"
    );
    let caret = stderr.lines().last().unwrap_or_default();
    assert_eq!(
        caret.find('^'),
        Some("LINE 2:   FROM registrations WHERE bib = 1 AND".len()),
        "{stderr}"
    );

    // The statement after the error did not run.
    let out = run_with_stdin(
        tablesql(store.path()).args(["shell", "--format", "csv"]),
        "SELECT bib FROM registrations WHERE event = 'Script' ORDER BY bib",
    )?;
    assert!(out.status.success());
    assert_eq!(String::from_utf8(out.stdout)?, "bib\n1\n");

    // A missing file is an error too.
    let out = tablesql(store.path())
        .args(["shell", "-f", "/nonexistent.sql"])
        .output()?;
    assert!(!out.status.success());
    Ok(())
}

#[test]
fn meta_commands_in_a_script() -> TestResult {
    let store = store_copy()?;
    let out_file = store.path().join("out.txt");
    let included = store.path().join("included.sql");
    std::fs::write(&included, "SELECT 3 AS three;\n")?;
    let script = format!(
        "\\?\n\\x on\nSELECT 1 AS a, 'x' AS b;\n\\x off\n\\o {}\nSELECT 2 AS two;\n\\o\n\\i {}\n\\q\nSELECT 'not run' AS never_shown;\n",
        out_file.display(),
        included.display()
    );
    let out = run_with_stdin(tablesql(store.path()).arg("shell"), &script)?;
    let stdout = String::from_utf8(out.stdout)?;
    assert!(out.status.success(), "{stdout}");
    // \? lists the meta-commands.
    assert!(stdout.contains("\\d TABLE"), "{stdout}");
    // \x: one block per record.
    assert!(
        stdout.contains("-[ RECORD 1 ]-\na | 1\nb | x\n"),
        "{stdout}"
    );
    // \o: the result went to the file, and \o alone brought output back.
    assert!(!stdout.contains("two"), "{stdout}");
    let written = std::fs::read_to_string(&out_file)?;
    assert!(
        written.contains("│ two │") && written.contains("(1 row)"),
        "{written}"
    );
    // \i ran the file; \q ended the script.
    assert!(stdout.contains("│ three │"), "{stdout}");
    assert!(!stdout.contains("never_shown"), "{stdout}");

    // A meta-command that does not exist is an error, like a bad statement.
    let out = run_with_stdin(tablesql(store.path()).arg("shell"), "\\nope\nSELECT 1;\n")?;
    assert_eq!(out.status.code(), Some(3));
    assert!(String::from_utf8(out.stderr)?.contains("invalid command \\nope"));
    Ok(())
}

/// `\copy` in the shell moves a file's rows in and out as psql's `\copy`
/// does over the wire (`copy.rs`): the same formats, tags and errors.
#[test]
fn backslash_copy_moves_files_both_ways() -> TestResult {
    let store = store_copy()?;
    let dir = store.path();
    let input = dir.join("in.csv");
    std::fs::write(&input, "k,n\na,1\nb,\n\"c,d\",3\n")?;
    let bad = dir.join("bad.csv");
    std::fs::write(&bad, "e\t5\nf\tnot a number\n")?;
    let more = dir.join("more.csv");
    std::fs::write(&more, "x\t7\ny\t8\n")?;
    let out_csv = dir.join("out.csv");
    let regs = dir.join("regs.txt");
    let script = format!(
        "CREATE TABLE kvs (k TEXT NOT NULL, n INT, PRIMARY KEY (k)) \
         WITH (partition_key = '{{k}}', row_key = 'K');\n\
         \\copy kvs from '{}' with (format csv, header)\n\
         \\copy (SELECT k, n FROM kvs ORDER BY k) to '{}' with (format csv)\n\
         SET tablesql.page_size = 2;\n\
         \\copy registrations (event, bib) to '{}'\n\
         SET tablesql.page_size = 0;\n\
         COPY (SELECT k FROM kvs WHERE n IS NULL) TO STDOUT;\n\
         \\set ON_ERROR_STOP off\n\
         \\copy kvs from '{}'\n\
         \\copy nowhere from '{}'\n\
         BEGIN;\n\\copy kvs from '{}'\nSELECT count(*) AS in_block FROM kvs;\nROLLBACK;\n\
         COPY kvs FROM STDIN;\n\
         SELECT count(*) AS rows FROM kvs;\n",
        input.display(),
        out_csv.display(),
        regs.display(),
        bad.display(),
        input.display(),
        more.display(),
    );
    let out = run_with_stdin(tablesql(dir).args(["shell", "--format", "csv"]), &script)?;
    let stdout = String::from_utf8(out.stdout)?;
    let stderr = String::from_utf8(out.stderr)?;
    // The tags psql prints, and COPY TO STDOUT's rows where results go; an
    // export is never one page (`tablesql.page_size`).
    assert!(
        stdout.starts_with("CREATE TABLE\nCOPY 3\nCOPY 3\nSET\nCOPY 1000\nSET\nb\nCOPY 1\n"),
        "{stdout}\n{stderr}"
    );
    // NULL is an unquoted empty field, a comma is quoted: as it came in.
    assert_eq!(std::fs::read_to_string(&out_csv)?, "a,1\nb,\n\"c,d\",3\n");
    let exported = std::fs::read_to_string(&regs)?;
    assert_eq!(exported.lines().count(), 1000);
    assert!(
        exported.lines().all(|l| l.split('\t').count() == 2),
        "{exported}"
    );
    // A bad line: its number, and nothing of its chunk written; the rest
    // of the script runs.
    assert!(
        stderr.contains("invalid input for column \"n\"") && stderr.contains("line 2"),
        "{stderr}"
    );
    assert!(
        stderr.contains("relation \"nowhere\" does not exist"),
        "{stderr}"
    );
    // In a block its rows wait for COMMIT, seen by the block's reads
    // (5) and gone at ROLLBACK (3 at the end).
    assert!(
        stdout.contains("BEGIN\nCOPY 2\nin_block\n5\nROLLBACK\n"),
        "{stdout}\n{stderr}"
    );
    assert!(stderr.contains("use \\copy TABLE from 'FILE'"), "{stderr}");
    assert!(stdout.ends_with("rows\n3\n"), "{stdout}");
    Ok(())
}

const LONG: &str = "SELECT count(*) FROM registrations a JOIN registrations b ON a.age = b.age \
    JOIN registrations c ON b.age = c.age JOIN registrations d ON c.age = d.age \
    JOIN registrations e ON d.age = e.age JOIN registrations f ON e.age = f.age \
    JOIN registrations g ON f.age = g.age;";

#[test]
fn the_shell_in_a_terminal() -> TestResult {
    let store = store_copy()?;
    let history = store.path().join("history");
    let binary = env!("CARGO_BIN_EXE_tablesql");
    let command = format!(
        // The shell's own pager, not one the environment names.
        "unset PAGER PSQL_PAGER; RUST_BACKTRACE=0 TABLESQL_HISTORY='{}' '{binary}' --store '{}' shell",
        history.display(),
        store.path().display()
    );
    let term = Terminal::start(&["sh", "-c", &command], 100, 30)?;
    let wait = Duration::from_secs(20);
    term.wait_for("tablesql=>", wait)?;

    // A statement over three lines runs once it ends with ';'.
    term.type_text("SELECT event, count(*) AS n")?;
    term.keys(&["Enter"])?;
    term.type_text("FROM registrations")?;
    term.keys(&["Enter"])?;
    let screen = term.screen()?;
    assert!(
        !screen.contains("(4 rows)"),
        "ran before its end:\n{screen}"
    );
    term.type_text("GROUP BY event ORDER BY event;")?;
    term.keys(&["Enter"])?;
    let screen = term.wait_for("(4 rows)", wait)?;
    assert!(screen.contains("│ 2012 Boston Marathon "), "{screen}");
    assert!(screen.contains("Time: "), "{screen}");

    // Completion of a table name, in \d, which shows the key templates and
    // the index rows.
    term.clear()?;
    term.type_text("\\d registr")?;
    term.keys(&["Tab"])?;
    term.wait_for("\\d registrations", wait)?;
    term.keys(&["Enter"])?;
    let screen = term.wait_for("Index rows:", wait)?;
    assert!(
        screen.contains("PartitionKey: {event}__{distance}"),
        "{screen}"
    );
    assert!(
        screen.contains("RowKey:       BIB:{bib:05}__{name}__{gender}__{age}"),
        "{screen}"
    );
    assert!(
        screen.contains("age: AGE:{age:03}__{bib}__{name}__{gender}"),
        "{screen}"
    );
    assert!(screen.contains("│ bib          ┆ INT"), "{screen}");

    term.clear()?;
    term.type_text("\\dt")?;
    term.keys(&["Enter"])?;
    let screen = term.wait_for("(2 tables)", wait)?;
    assert!(
        screen.contains("│ registrations ┆ mapped ┆ Registrations"),
        "{screen}"
    );

    // An error names the place, and the shell goes on.
    term.clear()?;
    term.type_text("SELECT bib FORM registrations;")?;
    term.keys(&["Enter"])?;
    // The caret line comes last: wait for it, not for the line above (a
    // screen read between the two writes would miss it).
    let caret_line = format!("{}^", " ".repeat("LINE 1: SELECT bib FORM ".len()));
    let screen = term.wait_for(&caret_line, wait)?;
    assert!(screen.contains("ERROR:  syntax error"), "{screen}");
    assert!(
        screen.contains("LINE 1: SELECT bib FORM registrations\n"),
        "{screen}"
    );
    let caret = screen.lines().find(|l| l.trim() == "^").ok_or("no caret")?;
    assert_eq!(
        caret.find('^'),
        Some("LINE 1: SELECT bib FORM ".len()),
        "{screen}"
    );

    // Ctrl-C stops a long query (minutes of work), not the shell.
    term.clear()?;
    term.type_text(LONG)?;
    term.keys(&["Enter"])?;
    // Nothing shows that it runs: Ctrl-C until it is cancelled (one that
    // comes first is dropped with the signals from before the statement;
    // one after, at the empty prompt, clears nothing).
    term.keys_until(&["C-c"], "the long query cancelled", |screen| {
        screen.contains("canceling statement due to user request")
    })?;
    term.clear()?;
    term.type_text("SELECT 41 + 1 AS alive;")?;
    term.keys(&["Enter"])?;
    term.wait_for("│ 42    │", wait)?;

    // A large result comes a screenful at a time.
    term.clear()?;
    term.type_text("SELECT bib, name, club FROM registrations;")?;
    term.keys(&["Enter"])?;
    let first = term.wait_for("-- more:", wait)?;
    // The page fits the terminal: its header has not scrolled away.
    assert!(first.contains("│ bib ┆ name"), "{first}");
    assert!(!first.contains("rows)"), "{first}");
    term.keys(&["Space"])?;
    term.wait_screen(wait, "the second page", |screen| {
        screen != first && screen.contains("-- more:")
    })?;
    term.keys(&["q"])?;
    let screen = term.wait_for("rows shown; stopped)", wait)?;
    let shown: usize = screen
        .lines()
        .find_map(|l| l.strip_prefix('(')?.split(' ').next()?.parse().ok())
        .ok_or("no row count")?;
    assert!(
        shown < 100,
        "two pages, not the whole result: {shown}\n{screen}"
    );

    // Ctrl-D leaves; the statements are in the history file. On a loaded
    // machine the key can arrive before the line editor reads the terminal
    // again (and is lost), so it is sent again every 2 s until the shell
    // ends, within `wait`.
    term.keys(&["C-d"])?;
    let mut deadline = crate::wait::Deadline::new(wait, "Ctrl-D to end the shell");
    let mut sent = Instant::now();
    while term.alive() {
        if sent.elapsed() > Duration::from_secs(2) {
            term.keys(&["C-d"])?;
            sent = Instant::now();
        }
        deadline.again(format!("\n{}", term.screen().unwrap_or_default()))?;
    }
    let saved = std::fs::read_to_string(&history)?;
    assert!(saved.contains("GROUP BY event ORDER BY event;"), "{saved}");
    Ok(())
}

/// The catalog listings, `\conninfo`, `\e`, `\watch` and the pager the
/// environment names, in a real terminal.
#[test]
fn psql_meta_commands_and_the_pager_in_a_terminal() -> TestResult {
    let store = store_copy()?;
    let dir = store.path();
    let binary = env!("CARGO_BIN_EXE_tablesql");
    // An "editor" that keeps what it was given and writes a new query.
    let editor = dir.join("editor.sh");
    let seen = dir.join("seen.sql");
    std::fs::write(
        &editor,
        format!(
            "#!/bin/sh\ncp \"$1\" '{}'\nprintf 'SELECT 40 + 2 AS edited;\\nSELECT 7 AS left_over' > \"$1\"\n",
            seen.display()
        ),
    )?;
    std::fs::set_permissions(&editor, std::os::unix::fs::PermissionsExt::from_mode(0o755))?;
    // A "pager" that keeps what it is given.
    let paged = dir.join("paged.txt");
    let command = format!(
        "unset PSQL_PAGER; PAGER=\"cat > '{}'\" EDITOR='{}' RUST_BACKTRACE=0 TABLESQL_HISTORY='{}' '{binary}' --store '{}' shell",
        paged.display(),
        editor.display(),
        dir.join("history").display(),
        dir.display()
    );
    let term = Terminal::start(&["sh", "-c", &command], 120, 30)?;
    let wait = Duration::from_secs(20);
    term.wait_for("tablesql=>", wait)?;

    term.type_text("\\conninfo")?;
    term.keys(&["Enter"])?;
    let screen = term.wait_for("You are connected to the store", wait)?;
    assert!(screen.contains(&dir.display().to_string()), "{screen}");

    term.clear()?;
    term.type_text("CREATE SEQUENCE tmux_seq START WITH 5;")?;
    term.keys(&["Enter"])?;
    term.wait_for("CREATE SEQUENCE", wait)?;
    term.type_text("CREATE VIEW tmux_view AS SELECT 1 AS one;")?;
    term.keys(&["Enter"])?;
    term.wait_for("CREATE VIEW", wait)?;
    term.clear()?;
    term.type_text("\\ds tmux*")?;
    term.keys(&["Enter"])?;
    let screen = term.wait_for("List of sequences", wait)?;
    assert!(screen.contains("│ tmux_seq ┆ 5"), "{screen}");
    term.clear()?;
    term.type_text("\\dv")?;
    term.keys(&["Enter"])?;
    let screen = term.wait_for("List of views", wait)?;
    assert!(screen.contains("tmux_view"), "{screen}");
    term.clear()?;
    term.type_text("\\di")?;
    term.keys(&["Enter"])?;
    let screen = term.wait_for("List of index rows", wait)?;
    assert!(
        screen.contains("│ public ┆ age   ┆ registrations ┆ age, bib, name, gender ┆ local"),
        "{screen}"
    );
    term.clear()?;
    term.type_text("\\df tablesql_check*")?;
    term.keys(&["Enter"])?;
    let screen = term.wait_for("List of functions", wait)?;
    assert!(screen.contains("tablesql_check_index"), "{screen}");
    assert!(!screen.contains("tablesql_advise"), "{screen}");

    // \watch runs the last query again, c= times.
    term.clear()?;
    term.type_text("SELECT 'tick' AS t;")?;
    term.keys(&["Enter"])?;
    term.wait_for("(1 row)", wait)?;
    term.clear()?;
    term.type_text("\\watch i=0.2 c=3")?;
    term.keys(&["Enter"])?;
    term.wait_screen(wait, "\\watch to run three times", |screen| {
        screen.matches("(every 0.2s)").count() == 3 && screen.matches("(1 row)").count() == 3
    })?;

    // \e: the last query in the editor; what ends with ';' runs, the rest
    // waits on the next line.
    term.clear()?;
    term.type_text("\\e")?;
    term.keys(&["Enter"])?;
    term.wait_for("│ 42     │", wait)?;
    // The left-over line is drawn at the next prompt, after the result:
    // waited for, not read off the screen that showed the result.
    let screen = term.wait_for("tablesql=> SELECT 7 AS left_over", wait)?;
    assert!(screen.contains("│ 42     │"), "{screen}");
    assert_eq!(
        std::fs::read_to_string(&seen)?.trim(),
        "SELECT 'tick' AS t;"
    );
    term.keys(&["C-u"])?;

    // A result longer than the screen goes to $PAGER; a short one does not.
    term.clear()?;
    term.type_text("SELECT value FROM generate_series(1, 200) ORDER BY value;")?;
    term.keys(&["Enter"])?;
    term.wait_for("Time: ", wait)?;
    crate::wait::until(wait, "the pager to get the result", || {
        Ok(std::fs::read_to_string(&paged)
            .unwrap_or_default()
            .contains("(200 rows)")
            .then_some(()))
    })?;
    assert!(!term.screen()?.contains("(200 rows)"));
    term.clear()?;
    term.type_text("SELECT 'short' AS small;")?;
    term.keys(&["Enter"])?;
    term.wait_for("│ short │", wait)?;
    assert!(!std::fs::read_to_string(&paged)?.contains("short"));
    // \pset pager off: everything on the screen.
    term.clear()?;
    term.type_text("\\pset pager off")?;
    term.keys(&["Enter"])?;
    term.wait_for("Pager usage is off.", wait)?;
    std::fs::remove_file(&paged)?;
    term.type_text("SELECT value FROM generate_series(1, 200);")?;
    term.keys(&["Enter"])?;
    term.wait_for("(200 rows)", wait)?;
    assert!(!paged.exists());
    Ok(())
}

/// `tablesql query` in a terminal pages a long result through `$PAGER`
/// (psql's rule), and `-P pager=off` prints it all.
#[test]
fn query_pages_through_the_environments_pager_in_a_terminal() -> TestResult {
    let store = store_copy()?;
    let dir = store.path();
    let binary = env!("CARGO_BIN_EXE_tablesql");
    let paged = dir.join("paged.txt");
    let done = dir.join("done");
    let sql = "SELECT value FROM generate_series(1, 300)";
    let command = format!(
        "unset PSQL_PAGER; export PAGER=\"cat > '{paged}'\" RUST_BACKTRACE=0; \
         '{binary}' --store '{store}' query -c '{sql}'; \
         '{binary}' --store '{store}' query -P pager=off -c 'SELECT 1 AS unpaged UNION ALL {sql}'; \
         touch '{done}'; sleep 60",
        paged = paged.display(),
        store = dir.display(),
        done = done.display(),
    );
    let term = Terminal::start(&["sh", "-c", &command], 100, 30)?;
    if let Err(e) = crate::wait::until(Duration::from_secs(60), "the queries to end", || {
        Ok(done.exists().then_some(()))
    }) {
        return Err(format!("{e}:\n{}", term.screen()?).into());
    }
    let through = std::fs::read_to_string(&paged)?;
    assert!(through.contains("(300 rows)"), "{through}");
    assert!(!through.contains("unpaged"), "{through}");
    let screen = term.screen()?;
    assert!(screen.contains("(301 rows)"), "{screen}");
    Ok(())
}
