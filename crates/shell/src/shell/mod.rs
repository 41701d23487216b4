//! `tablesql shell`: an interactive SQL shell over a store, with psql's habits.
//! A statement runs once it ends with `;` (it may span lines); lines starting
//! with `\` are meta-commands (`\dt`, `\d`, ...). Results are printed as they arrive,
//! paged on a terminal ([`render`]). Ctrl-C cancels the running statement, not
//! the shell. Without a terminal (`-f FILE`, a pipe) the statements run in
//! order and the first error ends the run (`\set ON_ERROR_STOP off` goes on,
//! as psql does by default). Statements run through the engine's
//! [`Session`], as over the wire: the same outcome, tag and error.
//!
//! - `split`: where statements end: quotes, comments, dollar quotes,
//!   meta-command lines; pure.
//! - `complete`: the line editor's helper (rustyline): completion, and whether
//!   a statement has ended.
//! - `meta`: psql's backslash commands (`\dt`, `\d`, ...).
//! - `copy`: `\copy`'s arguments; the data moves through `load::copy` as the
//!   server's COPY does.
//! - `render`: tables, expanded records, CSV, TSV, JSON and JSON lines, printed
//!   as rows arrive.
//! - `pager`: the pager (`$PSQL_PAGER`, `$PAGER`) once a result passes a
//!   screenful.
//! - `term`: terminal size, one key read without echo.

pub(crate) mod complete;
mod copy;
pub(crate) mod meta;
pub mod pager;
pub mod render;
pub(crate) mod split;
mod term;

use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Instant;

use futures::{FutureExt, StreamExt};
use rustyline::error::ReadlineError;
use rustyline::history::DefaultHistory;
use rustyline::{CompletionType, Config, Editor};
use tokio::signal::unix::{Signal, SignalKind, signal};

use crate::engine::{Engine, EngineError, Outcome, Session, StatementKind};
use complete::{Names, ShellHelper};
use datafusion::sql::sqlparser::ast::Statement;
use meta::Meta;
use pager::{Paged, PagerMode};
use render::{Format, Printer, RenderError};
use split::{Piece, split};

/// Rows per table when results are not paged (files, pipes): tables are
/// printed a chunk at a time, so a result is never held whole.
const CHUNK_ROWS: usize = 1000;

/// A failure of one statement or meta-command.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ShellError {
    /// Planning or running a statement failed.
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// Printing its rows failed (or the statement failed while they streamed).
    #[error(transparent)]
    Render(#[from] RenderError),
    /// A `\copy` that cannot run, or stopped.
    #[error(transparent)]
    Copy(#[from] crate::load::copy::CopyError),
    /// A meta-command that cannot run.
    #[error("{0}")]
    Meta(String),
    /// A file that cannot be read or written.
    #[error("{path}: {source}")]
    File {
        /// The file's path.
        path: PathBuf,
        /// Why it cannot be read or written.
        source: std::io::Error,
    },
    /// The terminal or output failed.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// The line editor failed.
    #[error(transparent)]
    Editor(#[from] ReadlineError),
    /// Ctrl-C.
    #[error("canceling statement due to user request")]
    Cancelled,
    /// A failure inside `\i FILE`, reported already where it happened.
    #[error("in an included file")]
    Reported,
}

/// How deep `\i` may nest (a file that includes itself stops here).
const MAX_INCLUDE_DEPTH: usize = 16;

enum Flow {
    Continue,
    Quit,
}

/// How a script ended ([`Shell::run_file`]), for psql's exit codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScriptEnd {
    /// Every statement ran.
    Done,
    /// Statements failed and the script ran on (`ON_ERROR_STOP` off).
    RanOn,
    /// A statement failed and `ON_ERROR_STOP` ended the script.
    Stopped,
}

/// One shell session over an engine.
pub struct Shell {
    /// What the statements run in; the engine's shared parts (the
    /// catalog's descriptions) through it.
    session: Session,
    /// `\set ON_ERROR_STOP`: a script ends at its first error.
    stop_on_error: bool,
    /// `\set VERBOSITY verbose`: errors show their SQLSTATE.
    verbose: bool,
    format: Format,
    expanded: bool,
    timing: bool,
    /// `\o FILE`.
    output: Option<(PathBuf, File)>,
    names: Arc<RwLock<Names>>,
    /// Whether stdout is a terminal to page and fit tables to.
    terminal: bool,
    /// Whether the line editor completes names (an interactive session), so
    /// that they are read, at the start and after DDL.
    completing: bool,
    /// Files `\i` is running, innermost last.
    including: usize,
    /// Whether stdout is a terminal a long result may be paged on.
    paging: bool,
    /// `\pset pager`.
    pager: PagerMode,
    /// The last statement sent: what `\e` edits and `\watch` runs again.
    last_query: Option<String>,
    /// Text `\e` left without its `;`: the next prompt starts with it.
    pending: String,
    /// What `\conninfo` says.
    conninfo: String,
    /// `\q` was run: whoever runs scripts stops.
    quit: bool,
    /// Rows per table when not paging (`\set FETCH_COUNT`).
    chunk: usize,
    /// `\watch` is running its query: never paged, as psql.
    watching: bool,
}

impl Shell {
    /// A session printing in `format`; `terminal` pages results and fits
    /// tables to the terminal's width.
    pub async fn new(engine: Engine, format: Format, terminal: bool) -> Self {
        Self {
            session: engine.session(),
            stop_on_error: true,
            verbose: false,
            format,
            expanded: false,
            timing: terminal,
            output: None,
            names: Arc::new(RwLock::new(Names::default())),
            terminal,
            completing: false,
            including: 0,
            paging: terminal,
            pager: PagerMode::default(),
            last_query: None,
            pending: String::new(),
            conninfo: "You are connected to an engine embedded in this process.".to_owned(),
            quit: false,
            chunk: CHUNK_ROWS,
            watching: false,
        }
    }

    /// Whether a long result may be paged (stdout is a terminal), apart
    /// from `terminal` (for `tablesql query`, which fits no width and
    /// times nothing).
    pub fn set_paging(&mut self, on: bool) {
        self.paging = on;
    }

    /// What `\conninfo` says: the store, as `--store` names it.
    pub fn set_conninfo(&mut self, store: &str) {
        self.conninfo = format!("You are connected to the store \"{store}\".");
    }

    /// Whether `ON_ERROR_STOP` is on now.
    pub fn on_error_stop(&self) -> bool {
        self.stop_on_error
    }

    /// Whether `\q` ended a script.
    pub fn quitting(&self) -> bool {
        self.quit
    }

    /// `\pset NAME [VALUE]` (or `-P NAME=VALUE`): `pager`, `format`,
    /// `expanded`; the answer psql prints.
    pub fn pset(&mut self, name: &str, value: Option<&str>) -> Result<String, ShellError> {
        match name {
            "pager" => {
                self.pager = PagerMode::parse(value, self.pager).map_err(ShellError::Meta)?;
                Ok(self.pager.describe().to_owned())
            }
            "format" => {
                if let Some(v) = value {
                    self.format = match v.to_lowercase().as_str() {
                        "table" | "aligned" => Format::Table,
                        "csv" => Format::Csv,
                        "tsv" => Format::Tsv,
                        "json" => Format::Json,
                        "ndjson" => Format::Ndjson,
                        other => {
                            return Err(ShellError::Meta(format!(
                                "\\pset: allowed formats are table, csv, tsv, json, ndjson (not \"{other}\")"
                            )));
                        }
                    };
                }
                Ok(format!("Output format is {:?}.", self.format).to_lowercase())
            }
            "expanded" | "x" => {
                self.expanded = match value {
                    None => !self.expanded,
                    Some(v) => !matches!(v.to_lowercase().as_str(), "off" | "0" | "false"),
                };
                Ok(format!(
                    "Expanded display is {}.",
                    if self.expanded { "on" } else { "off" }
                ))
            }
            other => Err(ShellError::Meta(format!(
                "\\pset: unknown option: {other} (pager, format, expanded)"
            ))),
        }
    }

    /// Sets one of psql's variables (`\set NAME VALUE`, or `-v NAME=VALUE`
    /// on the command line): `ON_ERROR_STOP` and `VERBOSITY` mean what
    /// they mean in psql; others are accepted and mean nothing here.
    pub fn set(&mut self, name: &str, value: &str) {
        let on = !matches!(value.to_lowercase().as_str(), "off" | "0" | "false");
        match name {
            "ON_ERROR_STOP" => self.stop_on_error = on,
            "VERBOSITY" => self.verbose = value.eq_ignore_ascii_case("verbose"),
            // psql's FETCH_COUNT: rows per printed table. 0 (psql: the
            // whole result at once) keeps the default: never held whole.
            "FETCH_COUNT" => {
                self.chunk = value
                    .parse::<usize>()
                    .ok()
                    .filter(|n| *n > 0)
                    .unwrap_or(CHUNK_ROWS);
            }
            _ => {}
        }
    }

    /// Runs a script's statements and meta-commands in order, a trailing
    /// statement without `;` included; reports each error on stderr. Stops
    /// at the first error and returns it, unless `\set ON_ERROR_STOP off`
    /// said to go on; then the run fails at its end if a statement failed.
    pub async fn run_script(&mut self, text: &str) -> Result<(), ShellError> {
        match self.run_pieces(text, false).await {
            Ok(ScriptEnd::Done) => Ok(()),
            Ok(_) => Err(ShellError::Reported),
            Err(e) => Err(e),
        }
    }

    /// Runs a script as psql runs `-f FILE`: each error reported, the run
    /// ended by the first one only when `ON_ERROR_STOP` is on.
    pub async fn run_file(&mut self, text: &str) -> ScriptEnd {
        match self.run_pieces(text, false).await {
            Ok(end) => end,
            Err(_) => ScriptEnd::Stopped,
        }
    }

    /// Runs a command string as psql runs `-c`: its statements in order,
    /// the first error (reported) ends it whatever `ON_ERROR_STOP` says, as
    /// a server ends a multi-statement query. `false` if one failed.
    pub async fn run_command(&mut self, text: &str) -> bool {
        self.run_pieces(text, true).await.is_ok()
    }

    async fn run_pieces(&mut self, text: &str, always_stop: bool) -> Result<ScriptEnd, ShellError> {
        let mut s = split(text);
        if !s.rest.trim().is_empty() {
            s.pieces.push(Piece::Sql(s.rest.trim().to_owned()));
        }
        let mut failed = false;
        for piece in &s.pieces {
            match self.piece(piece).await {
                Ok(Flow::Continue) => {}
                Ok(Flow::Quit) => {
                    self.quit = true;
                    break;
                }
                Err(e) => {
                    report(piece, &e, self.verbose);
                    if always_stop || self.stop_on_error {
                        return Err(e);
                    }
                    failed = true;
                }
            }
            if self.quit {
                break;
            }
        }
        Ok(if failed {
            ScriptEnd::RanOn
        } else {
            ScriptEnd::Done
        })
    }

    /// The interactive loop, until `\q` or Ctrl-D. `history` is the file the
    /// line history is read from and saved to.
    pub async fn interactive(mut self, history: Option<PathBuf>) -> Result<(), ShellError> {
        let config = Config::builder()
            .completion_type(CompletionType::List)
            .max_history_size(5000)?
            .build();
        let mut editor: Editor<ShellHelper, DefaultHistory> = Editor::with_config(config)?;
        editor.set_helper(Some(ShellHelper::new(self.names.clone())));
        self.completing = true;
        self.refresh_names().await;
        if let Some(path) = &history {
            // A missing history file is a first session.
            let _ = editor.load_history(path);
        }
        // From here on Ctrl-C during a statement reaches `interrupt`, not the
        // default handler that would end the process.
        let mut interrupt = signal(SignalKind::interrupt())?;
        println!(
            "tablesql {} shell. Statements end with ';'. \\? for help, \\q to quit.",
            env!("CARGO_PKG_VERSION")
        );
        loop {
            // What `\e` left without its `;` is on the next line, as psql
            // shows its query buffer.
            let pending = std::mem::take(&mut self.pending);
            // On a thread of its own, not the runtime's blocking pool: a
            // process stopped at the prompt (SIGTERM) closes its store as
            // its runtime shuts down, which waits for the pool's threads.
            let (tx, rx) = tokio::sync::oneshot::channel();
            std::thread::Builder::new()
                .name("tablesql-readline".into())
                .spawn(move || {
                    let line = editor.readline_with_initial("tablesql=> ", (&pending, ""));
                    let _ = tx.send((editor, line));
                })?;
            let (back, line) = rx.await.map_err(std::io::Error::other)?;
            editor = back;
            let text = match line {
                Ok(text) => text,
                // Ctrl-C at the prompt drops the line, as in psql.
                Err(ReadlineError::Interrupted) => continue,
                Err(ReadlineError::Eof) => break,
                Err(e) => return Err(e.into()),
            };
            if text.trim().is_empty() {
                continue;
            }
            editor.add_history_entry(text.as_str())?;
            if let Some(path) = &history {
                let _ = editor.save_history(path);
            }
            for piece in split(&text).pieces {
                match self.interruptible(&piece, &mut interrupt).await {
                    Ok(Flow::Continue) => {}
                    Ok(Flow::Quit) => return Ok(()),
                    // Ctrl-C is how a `\watch` without a count ends.
                    Err(ShellError::Cancelled) if is_watch(&piece) => {}
                    Err(e) => report(&piece, &e, self.verbose),
                }
                if self.quit {
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    /// Runs a piece unless Ctrl-C comes first; dropping the statement's
    /// future drops its stream, which stops its scans.
    async fn interruptible(
        &mut self,
        piece: &Piece,
        interrupt: &mut Signal,
    ) -> Result<Flow, ShellError> {
        // A Ctrl-C from before this statement is not for it.
        while interrupt.recv().now_or_never().is_some() {}
        tokio::select! {
            r = self.piece(piece) => r,
            _ = interrupt.recv() => Err(ShellError::Cancelled),
        }
    }

    async fn piece(&mut self, piece: &Piece) -> Result<Flow, ShellError> {
        match piece {
            Piece::Sql(sql) => self.statement(sql).await.map(|()| Flow::Continue),
            Piece::Meta(line) => self.meta(line).await,
        }
    }

    fn width(&self) -> Option<u16> {
        if self.terminal && self.output.is_none() {
            term::size().map(|(w, _)| w)
        } else {
            None
        }
    }

    async fn statement(&mut self, sql: &str) -> Result<(), ShellError> {
        self.last_query = Some(sql.to_owned());
        let started = Instant::now();
        if let Some(statement) = self.copy_to_stdout(sql)? {
            let rows = self
                .copy_statement(&statement, &copy::Place::Standard)
                .await?;
            let mut stdout = std::io::stdout();
            let out: &mut dyn Write = match &mut self.output {
                Some((_, file)) => file,
                None => &mut stdout,
            };
            writeln!(out, "COPY {rows}")?;
            return self.after(StatementKind::Other, started).await;
        }
        let outcome = self.session.execute_sql(sql).await;
        // psql's form: notices go to stderr, before the rows.
        for notice in self.session.take_notices() {
            eprintln!("NOTICE:  {notice}");
        }
        let outcome = outcome?;
        let kind = match &outcome {
            Outcome::Done(kind) | Outcome::Written { kind, .. } => *kind,
            _ => StatementKind::Other,
        };
        let stream = match outcome {
            Outcome::Rows(stream) => stream,
            // Writes, DDL, transaction control: their tag.
            other => {
                let mut stdout = std::io::stdout();
                let out: &mut dyn Write = match &mut self.output {
                    Some((_, file)) => file,
                    None => &mut stdout,
                };
                writeln!(out, "{}", other.tag().unwrap_or_default())?;
                return self.after(kind, started).await;
            }
        };
        let schema = stream.schema();
        let paging = self.paging && self.output.is_none() && !self.watching;
        let paging = paging && self.pager != PagerMode::Off;
        // psql's pager: `$PSQL_PAGER` or `$PAGER` when set; the shell's own
        // "more" prompt otherwise (it reads keys, so needs a terminal on
        // stdin, and pages tables only).
        let external = match pager::from_env() {
            Some(command) if paging => command,
            _ => None,
        };
        let builtin = paging
            && pager::from_env().is_none()
            && self.format == Format::Table
            && std::io::IsTerminal::is_terminal(&std::io::stdin());
        let page = match (builtin, term::size()) {
            // Room for the table's borders and header, the footer and the prompt.
            (true, Some((_, rows))) if self.expanded => {
                Some((usize::from(rows).saturating_sub(2) / (schema.fields().len() + 1)).max(1))
            }
            (true, Some((_, rows))) => Some(usize::from(rows).saturating_sub(7).max(1)),
            _ => None,
        };
        let width = self.width();
        let mut stdout = std::io::stdout();
        let mut paged = external.map(|command| {
            let lines = match self.pager {
                PagerMode::Always => 0,
                _ => term::size().map_or(24, |(_, rows)| usize::from(rows).saturating_sub(1)),
            };
            Paged::new(command, lines)
        });
        let out: &mut dyn Write = match (&mut self.output, &mut paged) {
            (Some((_, file)), _) => file,
            (None, Some(paged)) => paged,
            (None, None) => &mut stdout,
        };
        let printed = print_rows(
            out,
            stream,
            self.format,
            self.expanded,
            width,
            page,
            self.chunk,
        )
        .await;
        let quit = paged.as_ref().is_some_and(|p| p.quit);
        if let Some(paged) = paged {
            paged.finish()?;
        }
        match printed {
            // The reader quit the pager: the statement stops, no error.
            Err(_) if quit => {}
            other => other?,
        }
        self.after(kind, started).await
    }

    /// `\watch`: the last query again every `interval` seconds, under a
    /// title line with the time, `count` times or until Ctrl-C.
    async fn watch(&mut self, interval: f64, count: Option<u64>) -> Result<(), ShellError> {
        let Some(sql) = self.last_query.clone() else {
            return Err(ShellError::Meta(
                "\\watch cannot be used with an empty query".into(),
            ));
        };
        let mut runs = 0;
        loop {
            let title = chrono::Local::now().format("%c");
            let mut stdout = std::io::stdout();
            let out: &mut dyn Write = match &mut self.output {
                Some((_, file)) => file,
                None => &mut stdout,
            };
            writeln!(out, "{title} (every {interval}s)\n")?;
            self.watching = true;
            let ran = self.statement(&sql).await;
            self.watching = false;
            ran?;
            runs += 1;
            if count.is_some_and(|c| runs >= c) {
                return Ok(());
            }
            tokio::time::sleep(std::time::Duration::from_secs_f64(interval)).await;
        }
    }

    /// `\e`: the last query (or `file`) in the user's editor; then what
    /// ends with `;` runs, and the rest waits at the next prompt.
    async fn edit(&mut self, file: Option<PathBuf>) -> Result<(), ShellError> {
        let editor = ["PSQL_EDITOR", "EDITOR", "VISUAL"]
            .iter()
            .find_map(|v| std::env::var(v).ok().filter(|e| !e.trim().is_empty()))
            .unwrap_or_else(|| "vi".to_owned());
        let (path, temporary) = match file {
            Some(path) => (path, false),
            None => {
                // A name no other user can guess, created new and readable
                // by its owner only (as psql): the query may hold secrets,
                // and a planted symlink must not be followed.
                let path = std::env::temp_dir().join(format!(
                    "tablesql.edit.{}.{:016x}.sql",
                    std::process::id(),
                    rand::random::<u64>()
                ));
                let mut text = self.last_query.clone().unwrap_or_default();
                if !text.is_empty() && !text.trim_end().ends_with(';') {
                    text.push(';');
                }
                text.push('\n');
                let written = {
                    use std::os::unix::fs::OpenOptionsExt;
                    std::fs::OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .mode(0o600)
                        .open(&path)
                        .and_then(|mut f| f.write_all(text.as_bytes()))
                };
                written.map_err(|source| ShellError::File {
                    path: path.clone(),
                    source,
                })?;
                (path, true)
            }
        };
        // As psql: the editor's command line, then the file's name, by a shell.
        let command = format!(
            "{editor} '{}'",
            path.display().to_string().replace('\'', "'\\''")
        );
        let status = tokio::task::spawn_blocking(move || {
            std::process::Command::new("sh")
                .arg("-c")
                .arg(command)
                .status()
        })
        .await
        .map_err(std::io::Error::other)??;
        let text = read(&path);
        if temporary {
            let _ = std::fs::remove_file(&path);
        }
        if !status.success() {
            return Err(ShellError::Meta(format!(
                "\\e: the editor {editor} failed: {status}"
            )));
        }
        let text = text?;
        let s = split(&text);
        self.pending = s.rest.trim().to_owned();
        for piece in &s.pieces {
            let ran = Box::pin(self.piece(piece)).await;
            match ran {
                Ok(Flow::Continue) => {}
                Ok(Flow::Quit) => {
                    self.quit = true;
                    break;
                }
                Err(e) => {
                    report(piece, &e, self.verbose);
                    return Err(ShellError::Reported);
                }
            }
        }
        Ok(())
    }

    /// `COPY ... TO STDOUT` typed as SQL, which the shell answers as psql
    /// does (its rows where results go); `COPY ... FROM STDIN` is refused
    /// with what to use instead. `None` for every other statement.
    fn copy_to_stdout(&self, sql: &str) -> Result<Option<Statement>, ShellError> {
        let looks = sql
            .trim_start()
            .get(..4)
            .is_some_and(|w| w.eq_ignore_ascii_case("copy"));
        if !looks {
            return Ok(None);
        }
        let Ok(mut statements) = self.session.parse(sql) else {
            return Ok(None);
        };
        match statements.first() {
            Some(Statement::Copy { to: true, .. }) if statements.len() == 1 => {
                Ok(Some(statements.remove(0)))
            }
            Some(Statement::Copy { to: false, .. }) => Err(ShellError::Copy(
                crate::load::copy::CopyError::NotSupported(
                    "COPY ... FROM STDIN: in the shell, use \\copy TABLE from 'FILE' (or pstdin)"
                        .into(),
                ),
            )),
            _ => Ok(None),
        }
    }

    /// What follows every statement: its time, and the names completion
    /// offers read again after DDL.
    async fn after(&mut self, kind: StatementKind, started: Instant) -> Result<(), ShellError> {
        let mut stdout = std::io::stdout();
        let out: &mut dyn Write = match &mut self.output {
            Some((_, file)) => file,
            None => &mut stdout,
        };
        if self.timing {
            writeln!(
                out,
                "Time: {:.3} ms",
                started.elapsed().as_secs_f64() * 1000.0
            )?;
        }
        out.flush()?;
        if self.completing
            && matches!(
                kind,
                StatementKind::CreateTable
                    | StatementKind::DropTable
                    | StatementKind::CreateView
                    | StatementKind::DropView
            )
        {
            self.refresh_names().await;
        }
        Ok(())
    }

    async fn meta(&mut self, line: &str) -> Result<Flow, ShellError> {
        let meta = meta::parse(line).map_err(ShellError::Meta)?;
        let width = self.width();
        let text = match meta {
            Meta::Quit => return Ok(Flow::Quit),
            Meta::Set(name, value) => {
                self.set(&name, &value);
                String::new()
            }
            Meta::Echo(text) => format!("{text}\n"),
            Meta::Copy(args) => {
                let rows = self.copy(&args).await?;
                // psql prints the tag where results go.
                let mut stdout = std::io::stdout();
                let out: &mut dyn Write = match &mut self.output {
                    Some((_, file)) => file,
                    None => &mut stdout,
                };
                writeln!(out, "COPY {rows}")?;
                out.flush()?;
                String::new()
            }
            Meta::Help => meta::HELP.to_owned(),
            Meta::ListIndexes(p) => meta::list_indexes(&self.session, p.as_deref(), width).await?,
            Meta::ListSequences(p) => {
                meta::list_sequences(&self.session, p.as_deref(), width).await?
            }
            Meta::ListViews(p) => meta::list_views(&self.session, p.as_deref(), width).await?,
            Meta::ListFunctions(p) => {
                meta::list_functions(&self.session, p.as_deref(), width).await?
            }
            Meta::ConnInfo => format!("{}\n", self.conninfo),
            Meta::Pset(name, value) => self.pset(&name, value.as_deref())? + "\n",
            Meta::Watch { interval, count } => {
                Box::pin(self.watch(interval, count)).await?;
                String::new()
            }
            Meta::Edit(file) => {
                Box::pin(self.edit(file)).await?;
                String::new()
            }
            Meta::ListTables => meta::list_tables(&self.session, width).await? + "\n",
            Meta::Describe(name) => meta::describe(&self.session, &name, width)
                .await
                .map_err(ShellError::Meta)?,
            Meta::Timing(on) => {
                self.timing = on.unwrap_or(!self.timing);
                format!("Timing is {}.\n", if self.timing { "on" } else { "off" })
            }
            Meta::Expanded(on) => {
                self.expanded = on.unwrap_or(!self.expanded);
                format!(
                    "Expanded display is {}.\n",
                    if self.expanded { "on" } else { "off" }
                )
            }
            Meta::Output(None) => {
                self.output = None;
                String::new()
            }
            Meta::Output(Some(path)) => {
                let file = File::create(&path).map_err(|source| ShellError::File {
                    path: path.clone(),
                    source,
                })?;
                self.output = Some((path, file));
                String::new()
            }
            Meta::Include(path) => {
                if self.including >= MAX_INCLUDE_DEPTH {
                    return Err(ShellError::Meta(format!(
                        "\\i {}: files nest more than {MAX_INCLUDE_DEPTH} deep",
                        path.display()
                    )));
                }
                let text = read(&path)?;
                self.including += 1;
                let ran = Box::pin(self.run_script(&text)).await;
                self.including -= 1;
                // Reported inside, with its own statement.
                ran.map_err(|_| ShellError::Reported)?;
                String::new()
            }
        };
        // Meta-commands answer on the terminal, as psql's do.
        print!("{text}");
        std::io::stdout().flush()?;
        Ok(Flow::Continue)
    }

    /// Runs a `\copy` (`shell::copy`): the rows it moved.
    async fn copy(&mut self, args: &str) -> Result<u64, ShellError> {
        let shell_copy = copy::parse(args).map_err(ShellError::Meta)?;
        let mut statements = self
            .session
            .parse(&shell_copy.sql)
            .map_err(|e| ShellError::Meta(format!("\\copy: {e}")))?;
        let statement = match statements.len() {
            1 => statements.remove(0),
            _ => return Err(ShellError::Meta("\\copy: one COPY at a time".into())),
        };
        self.copy_statement(&statement, &shell_copy.place).await
    }

    /// Runs a COPY statement whose data is at `place`: the rows it moved.
    /// A failure fails the session's open block, as any statement's does.
    async fn copy_statement(
        &mut self,
        statement: &Statement,
        place: &copy::Place,
    ) -> Result<u64, ShellError> {
        let copied = self.copy_data(statement, place).await;
        if copied.is_err() {
            self.session.statement_failed();
        }
        copied
    }

    async fn copy_data(
        &mut self,
        statement: &Statement,
        place: &copy::Place,
    ) -> Result<u64, ShellError> {
        let file_error = |path: &Path| {
            let path = path.to_owned();
            move |source| ShellError::File { path, source }
        };
        match crate::load::copy::plan(&self.session, statement).await? {
            crate::load::copy::Copy::Out { query, format } => {
                let stream = self.session.query_whole(query).await?;
                crate::load::copy::check_out(&stream.schema(), &format)?;
                let mut stdout = std::io::stdout();
                let mut file;
                let out: &mut dyn Write = match (place, &mut self.output) {
                    (copy::Place::File(path), _) => {
                        file = File::create(path).map_err(file_error(path))?;
                        &mut file
                    }
                    (copy::Place::Standard, Some((_, output))) => output,
                    (copy::Place::Standard, None) => &mut stdout,
                };
                copy_out(stream, &format, out).await
            }
            crate::load::copy::Copy::In(mut state) => {
                let mut input: Box<dyn std::io::Read> = match place {
                    copy::Place::File(path) => {
                        Box::new(File::open(path).map_err(file_error(path))?)
                    }
                    copy::Place::Standard => Box::new(std::io::stdin()),
                };
                let mut buffer = vec![0u8; 64 * 1024];
                loop {
                    let n = input.read(&mut buffer)?;
                    if n == 0 {
                        break;
                    }
                    state.take(&self.session, &buffer[..n]).await?;
                }
                Ok(state.finish(&self.session).await?)
            }
        }
    }

    /// Re-reads the table and column names completion offers.
    async fn refresh_names(&self) {
        let mut names = Names::default();
        if let Some(schema) = self
            .session
            .context()
            .catalog("datafusion")
            .and_then(|c| c.schema("public"))
        {
            for table in schema.table_names() {
                if let Ok(Some(t)) = schema.table(&table).await {
                    names
                        .columns
                        .extend(t.schema().fields().iter().map(|f| f.name().clone()));
                }
                names.tables.push(table);
            }
        }
        names.tables.sort();
        names.columns.sort();
        names.columns.dedup();
        if let Ok(mut n) = self.names.write() {
            *n = names;
        }
    }
}

/// Reads a script file.
pub fn read(path: &Path) -> Result<String, ShellError> {
    std::fs::read_to_string(path).map_err(|source| ShellError::File {
        path: path.to_owned(),
        source,
    })
}

/// Writes a query's rows as COPY lines: the rows written.
async fn copy_out(
    mut stream: datafusion::execution::SendableRecordBatchStream,
    format: &crate::load::format::CopyFormat,
    out: &mut dyn Write,
) -> Result<u64, ShellError> {
    if let Some(header) = crate::load::copy::header(&stream.schema(), format) {
        out.write_all(&header)?;
    }
    let mut rows = 0;
    let (mut text, mut ends) = (Vec::new(), Vec::new());
    while let Some(batch) = stream.next().await {
        let batch = batch.map_err(RenderError::from)?;
        text.clear();
        crate::load::copy::encode_into(&batch, format, &mut text, &mut ends)
            .map_err(RenderError::from)?;
        out.write_all(&text)?;
        rows += batch.num_rows() as u64;
    }
    out.write_all(crate::load::copy::trailer(format))?;
    out.flush()?;
    Ok(rows)
}

/// A statement's rows in `format`, with psql's `(N rows)` footer under a
/// table.
async fn print_rows(
    out: &mut dyn Write,
    stream: datafusion::execution::SendableRecordBatchStream,
    format: Format,
    expanded: bool,
    width: Option<u16>,
    page: Option<usize>,
    chunk: usize,
) -> Result<(), ShellError> {
    if stream.schema().fields().is_empty() {
        // A statement of DataFusion's without rows or a tag of its own.
        drain(stream).await?;
        writeln!(out, "OK")?;
    } else {
        let mut printer = Printer {
            out: &mut *out,
            format,
            expanded,
            width,
            page,
            chunk,
        };
        let printed = printer.print(stream).await?;
        if format == Format::Table {
            let s = if printed.rows == 1 { "" } else { "s" };
            if printed.stopped {
                writeln!(out, "({} row{s} shown; stopped)", printed.rows)?;
            } else {
                writeln!(out, "({} row{s})", printed.rows)?;
            }
        }
    }
    out.flush()?;
    Ok(())
}

/// Whether a piece is a `\watch`.
fn is_watch(piece: &Piece) -> bool {
    matches!(piece, Piece::Meta(line) if line.trim_start().starts_with("watch"))
}

async fn drain(
    mut stream: datafusion::execution::SendableRecordBatchStream,
) -> Result<(), ShellError> {
    while let Some(batch) = stream.next().await {
        batch.map_err(RenderError::from)?;
    }
    Ok(())
}

/// Prints an error on stderr as psql does: `ERROR:  message` (with
/// `verbose`, `ERROR:  SQLSTATE: message`, as psql's `VERBOSITY verbose`),
/// and for a syntax error the line it is on with a caret under the place.
pub(crate) fn report(piece: &Piece, e: &ShellError, verbose: bool) {
    if matches!(e, ShellError::Reported) {
        return;
    }
    let message = e.to_string();
    // sqlparser's errors come wrapped: `SQL error: ParserError("...")`.
    let shown = match message.split_once("ParserError(\"") {
        Some((_, inner)) => format!("syntax error: {}", inner.trim_end_matches("\")")),
        None => message.clone(),
    };
    let code = match (verbose, e) {
        (true, ShellError::Engine(e)) => Some(e.sqlstate()),
        (true, ShellError::Render(RenderError::Query(e))) => {
            Some(crate::engine::datafusion_sqlstate(e))
        }
        (true, ShellError::Copy(e)) => Some(e.sqlstate()),
        (true, _) => Some(crate::sqlstate::INTERNAL_ERROR),
        (false, _) => None,
    };
    match code {
        Some(code) => eprintln!("ERROR:  {code}: {}", shown.trim_end()),
        None => eprintln!("ERROR:  {}", shown.trim_end()),
    }
    let place = match piece {
        Piece::Sql(sql) => position(&message).or_else(|| {
            // "found: EOF": the statement ended too soon; point past its end.
            message.contains("found: EOF").then(|| {
                let lines: Vec<&str> = sql.lines().collect();
                (
                    lines.len(),
                    lines.last().map_or(0, |l| l.chars().count()) + 1,
                )
            })
        }),
        Piece::Meta(_) => None,
    };
    if let (Piece::Sql(sql), Some((line, column))) = (piece, place)
        && let Some(text) = sql.lines().nth(line.saturating_sub(1))
    {
        let label = format!("LINE {line}: ");
        eprintln!("{label}{text}");
        let pad = label.chars().count() + column.saturating_sub(1);
        eprintln!("{}^", " ".repeat(pad));
    }
}

/// The `Line: L, Column: C` sqlparser puts in its errors.
pub(crate) fn position(message: &str) -> Option<(usize, usize)> {
    let at = message.rfind("Line: ")?;
    let rest = &message[at + "Line: ".len()..];
    let (line, rest) = rest.split_once(", Column: ")?;
    let column: String = rest.chars().take_while(char::is_ascii_digit).collect();
    Some((line.trim().parse().ok()?, column.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn syntax_errors_name_their_place() {
        let m = "SQL error: ParserError(\"Expected: an expression, found: FROM at Line: 2, Column: 8\")";
        assert_eq!(position(m), Some((2, 8)));
        assert_eq!(position("no place"), None);
    }
}
