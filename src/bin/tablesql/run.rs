//! `tablesql query` as psql runs its -c and -f actions, and psql's exit
//! codes: 0 done; 1 a failed -c (or SQL argument) or an error of the tool's
//! own (a file that cannot be read); 2 a store that cannot be opened; 3 a
//! file that ON_ERROR_STOP ended.

use std::path::PathBuf;

use tablesql::shell::{ScriptEnd, Shell};

use crate::ending::Exit;
use tablesql::storage::{StorageError, StoreLocation, TableStore};

/// What `tablesql query` runs, in the order the command line gives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// The SQL argument: a script, ended by its first error unless
    /// ON_ERROR_STOP is off (as before -c and -f).
    Sql(String),
    /// `-c SQL`.
    Command(String),
    /// `-f FILE` (`-` is stdin).
    File(PathBuf),
}

/// The actions of `query`, in command-line order (clap keeps each
/// option's values apart; their indices say how they interleave).
pub fn actions(
    matches: &clap::ArgMatches,
    sql: Option<String>,
    commands: Vec<String>,
    files: Vec<PathBuf>,
) -> Vec<Action> {
    let Some(("query", m)) = matches.subcommand() else {
        return Vec::new();
    };
    let at =
        |id: &str| -> Vec<usize> { m.indices_of(id).map(Iterator::collect).unwrap_or_default() };
    let mut all: Vec<(usize, Action)> = Vec::new();
    if let Some(sql) = sql {
        all.push((at("sql").first().copied().unwrap_or(0), Action::Sql(sql)));
    }
    all.extend(
        at("commands")
            .into_iter()
            .zip(commands.into_iter().map(Action::Command)),
    );
    all.extend(
        at("files")
            .into_iter()
            .zip(files.into_iter().map(Action::File)),
    );
    all.sort_by_key(|(i, _)| *i);
    all.into_iter().map(|(_, a)| a).collect()
}

/// Runs the actions as psql does: each in turn, stopping after a failed
/// one only when ON_ERROR_STOP is on; the exit code is the last one's.
/// With no action, statements come from stdin (`-f -`).
pub async fn query(shell: &mut Shell, mut actions: Vec<Action>, set: &[String]) -> u8 {
    // psql's default for -f: run on after an error; the SQL argument keeps
    // stopping at its first one unless told otherwise.
    let explicit = set.iter().any(|a| a.starts_with("ON_ERROR_STOP="));
    if !explicit {
        shell.set("ON_ERROR_STOP", "off");
    }
    if actions.is_empty() {
        if std::io::IsTerminal::is_terminal(&std::io::stdin()) {
            eprintln!(
                "tablesql: error: nothing to run: give SQL, -c SQL or -f FILE (or run `tablesql shell`)"
            );
            return 1;
        }
        actions.push(Action::File(PathBuf::from("-")));
    }
    let mut code = 0;
    for action in actions {
        code = match action {
            Action::Command(text) => {
                if shell.run_command(&text).await {
                    0
                } else {
                    1
                }
            }
            Action::Sql(text) => {
                let before = shell.on_error_stop();
                if !explicit {
                    shell.set("ON_ERROR_STOP", "on");
                }
                let end = shell.run_file(&text).await;
                if !explicit {
                    shell.set("ON_ERROR_STOP", if before { "on" } else { "off" });
                }
                if end == ScriptEnd::Done { 0 } else { 1 }
            }
            Action::File(path) => match read(&path).await {
                Err(e) => {
                    eprintln!("tablesql: error: {}: {}", path.display(), io_text(&e));
                    1
                }
                Ok(text) => match shell.run_file(&text).await {
                    ScriptEnd::Stopped => 3,
                    ScriptEnd::Done | ScriptEnd::RanOn => 0,
                },
            },
        };
        if shell.quitting() || (code != 0 && shell.on_error_stop()) {
            break;
        }
    }
    code
}

async fn read(path: &std::path::Path) -> std::io::Result<String> {
    if path.as_os_str() == "-" {
        crate::ending::read_stdin().await
    } else {
        std::fs::read_to_string(path)
    }
}

/// A store that cannot be opened: psql's message for a connection that
/// failed, exit code 2, and for an embedded store another process holds
/// (redb locks its file) the way in: through that process's `serve`.
pub fn store_failed(location: &StoreLocation, e: &StorageError) -> anyhow::Error {
    eprintln!("tablesql: error: cannot open the store at {location}: {e}");
    if let Some(hint) = in_use_hint(e) {
        eprintln!("{hint}");
    }
    Exit(2).into()
}

/// The engine over `store`; a failure to read its catalog (an unreachable
/// account, a refused key) ends the process as a failed connection does.
pub async fn engine(
    store: std::sync::Arc<dyn TableStore>,
    options: tablesql::EngineOptions,
    location: &StoreLocation,
) -> anyhow::Result<tablesql::Engine> {
    tablesql::Engine::with_store(store, options)
        .await
        .map_err(|e| {
            eprintln!("tablesql: error: cannot open the store at {location}: {e}");
            Exit(2).into()
        })
}

/// The hint under an error that says another process holds the store.
pub fn in_use_hint(e: &StorageError) -> Option<&'static str> {
    matches!(e, StorageError::InUse(_)).then_some(
        "HINT:  An embedded store is open in one process at a time. If `tablesql serve` runs on it, \
         connect through that server instead (`psql -h 127.0.0.1 -p 5433` for its default \
         --listen), or stop it first.",
    )
}

/// An I/O error as psql words it: `No such file or directory`, without
/// Rust's `(os error 2)`.
pub fn io_text(e: &std::io::Error) -> String {
    let text = e.to_string();
    match text.split_once(" (os error") {
        Some((words, _)) => words.to_owned(),
        None => text,
    }
}
