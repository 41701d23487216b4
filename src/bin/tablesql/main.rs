//! The `tablesql` command line.

mod alloc;
mod clidoc;
mod ending;
mod load;
mod logging;
mod output;
mod run;
mod scan;
mod serve;
mod table_service;

use std::io::{IsTerminal, Write};
use std::ops::Bound;

use anyhow::Context;
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use tablesql::ScanPolicy;
use tablesql::datafusion::arrow::array::{Array, AsArray};
use tablesql::datafusion::sql::sqlparser::ast::Statement;
use tablesql::demo;
use tablesql::storage::location::DEFAULT_LOCATION;
use tablesql::storage::{
    KeyRange, PartitionKey, Query, RowKey, StoreLocation, TableName, TableStore,
};

/// SQL over partitioned table storage (PartitionKey/RowKey), embedded or on Azure Tables.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    /// Where the store lives: a directory for the embedded store (or `embedded:DIR`),
    /// or `azure:<connection string>` for Azure Tables (`azure:UseDevelopmentStorage=true`
    /// is Azurite on 127.0.0.1:10002).
    // A String, parsed after clap: clap would echo a bad connection string, secret and all.
    #[arg(long, global = true, env = "TABLESQL_STORE", default_value = DEFAULT_LOCATION, hide_env_values = true)]
    store: String,
    /// What a statement reading every partition of a table gets: allow, warn
    /// (a notice on stderr, or over the wire) or deny (an error naming the key
    /// columns). A session changes it with `SET tablesql.scan_policy`.
    #[arg(long, global = true, default_value = "warn", value_parser = scan_policy)]
    scan_policy: ScanPolicy,
    /// Seconds between stores of the workload statistics (tablesql_stat_statements,
    /// tablesql_stat_partitions, the advisor's) in the store, where every process
    /// over it reads them merged; they are also stored when the process ends.
    /// 0 keeps them in this process's memory only; otherwise from 0.05 to 3600.
    #[arg(long, global = true, env = "TABLESQL_STATS_FLUSH_INTERVAL", default_value = "10", value_parser = flush_interval)]
    stats_flush_interval: FlushEvery,
    /// Memory the embedded store keeps scans' decoded pages in, to answer
    /// the same scan again until a write lands in its partitions: a size
    /// with its unit, as PostgreSQL spells one (`256MB`, `1GB`, `512kB`),
    /// or 0 for none. Each process keeps its own.
    #[arg(long, global = true, env = "TABLESQL_DERIVED_CACHE", default_value = "256MB", value_parser = memory_size)]
    derived_cache: usize,
    /// Memory the embedded store keeps pages of its file in, as they are
    /// read (redb's read cache), a size as --derived-cache takes one: a
    /// scan grows the process by the pages it reads, up to this. Each
    /// process keeps its own.
    #[arg(long, global = true, env = "TABLESQL_PAGE_CACHE", default_value = "1GB", value_parser = memory_size)]
    page_cache: usize,
    /// Memory all statements together may hold (sorts, aggregates, joins),
    /// a size as --derived-cache takes one: past it sorts and aggregates
    /// spill to disk, and a statement that cannot fails with 53200. By
    /// default half the machine's memory (its cgroup's, in a container);
    /// 0 for no limit.
    #[arg(long, global = true, env = "TABLESQL_MEMORY_LIMIT", value_parser = memory_size)]
    memory_limit: Option<usize>,
    /// Memory one session may hold (its statement, and the cursors it keeps
    /// open), within --memory-limit. By default half of --memory-limit; 0
    /// for up to --memory-limit.
    #[arg(long, global = true, env = "TABLESQL_STATEMENT_MEMORY_LIMIT", value_parser = memory_size)]
    statement_memory_limit: Option<usize>,
    /// The log's level on stderr: error, warn, info, debug or trace (or a
    /// filter such as `info,tablesql=debug`). Default warn; info for
    /// serve. RUST_LOG, when set, is the whole filter instead.
    #[arg(long, global = true, env = "TABLESQL_LOG_LEVEL", value_name = "LEVEL")]
    log_level: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// List the tables with their entity counts.
    Tables,
    /// (Re)create the race registrations demo table and load it.
    Demo {
        /// Registrations to load; each is written as two entities (BIB: and AGE: rows).
        #[arg(long, default_value_t = 1000)]
        rows: u64,
        /// Print `committed B N` after each durable transaction (for crash tests).
        #[arg(long, hide = true)]
        print_commits: bool,
    },
    /// Run SQL as psql does with -c and -f: each -c's statements, each
    /// file's, in the order given; rows streamed as they come. Exit codes
    /// are psql's: 0 done, 1 a failed -c (or SQL) or an error of tablesql's
    /// own (a missing file, a bad option), 2 a store that cannot be opened
    /// (or is held by `tablesql serve`: connect through it), 3 a file
    /// stopped by ON_ERROR_STOP. Without SQL, -c or -f, reads statements
    /// from stdin as -f -.
    Query {
        /// Statements to run (and the shell's meta-commands, one per line),
        /// as a script: the first error ends it unless `-v ON_ERROR_STOP=off`.
        sql: Option<String>,
        /// Statements to run, separated by `;` (repeatable): the first
        /// error ends them, with exit code 1, as psql's -c.
        #[arg(short = 'c', long = "command", value_name = "SQL")]
        commands: Vec<String>,
        /// A file of statements and meta-commands to run (repeatable; `-`
        /// is stdin), as psql's -f: an error ends it only with
        /// `-v ON_ERROR_STOP=on`, and then with exit code 3.
        #[arg(short = 'f', long = "file", value_name = "FILE")]
        files: Vec<std::path::PathBuf>,
        /// Output format: table (psql's aligned, with `(N rows)`), csv
        /// (PostgreSQL's COPY CSV: NULL unquoted empty, '' as ""), tsv
        /// (COPY's text format with a header: NULL as \N), json (an array,
        /// a row per line) or ndjson (a row per line).
        #[arg(long, value_enum, default_value_t = output::Format::Table)]
        format: output::Format,
        /// A psql variable, NAME=VALUE: `VERBOSITY=verbose` shows errors'
        /// SQLSTATE, `ON_ERROR_STOP=on` ends a file at its first error.
        #[arg(short = 'v', long = "set", value_name = "NAME=VALUE")]
        set: Vec<String>,
        /// An output option, NAME=VALUE, as psql's -P: `pager=off|on|always`,
        /// `format=...`, `expanded=on`.
        #[arg(short = 'P', long = "pset", value_name = "NAME=VALUE")]
        pset: Vec<String>,
        /// Print `progress N` as CREATE INDEX reads base rows or TRUNCATE
        /// deletes rows (for tests).
        #[arg(long, hide = true)]
        print_progress: bool,
    },
    /// An interactive SQL shell (psql's habits: \dt, \d, \x, \timing, ...). With
    /// -f FILE, or statements on stdin, runs them and stops at the first error.
    Shell {
        /// Run the statements of FILE instead of reading from the terminal.
        #[arg(short = 'f', long)]
        file: Option<std::path::PathBuf>,
        /// Output format (csv, tsv, json and ndjson are for scripts).
        #[arg(long, value_enum, default_value_t = output::Format::Table)]
        format: output::Format,
        /// A psql variable, NAME=VALUE (as `\set`): `VERBOSITY=verbose`,
        /// `ON_ERROR_STOP=off`.
        #[arg(short = 'v', long = "set", value_name = "NAME=VALUE")]
        set: Vec<String>,
        /// An output option, NAME=VALUE (as `\pset`): `pager=off|on|always`,
        /// `format=...`, `expanded=on`.
        #[arg(short = 'P', long = "pset", value_name = "NAME=VALUE")]
        pset: Vec<String>,
    },
    /// Print a completion script for a shell: `tablesql completions bash >
    /// ~/.local/share/bash-completion/completions/tablesql`.
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
    /// Print the manual page (roff): `tablesql man | man -l -`.
    Man,
    /// Print the command line's reference in Markdown (docs/cli.md).
    #[command(hide = true)]
    CliDoc,
    /// A local Table service with Azure's limits: the Azure Table REST API
    /// over an embedded store of its own, with Azure Storage's (or, with
    /// --profile cosmos, Cosmos DB's) range servers, throttling, 5-second
    /// query budget and faults, to test a mapping's cost and behaviour
    /// before deploying. Point `--store azure:<connection string>` at it.
    TableService(table_service::TableServiceArgs),
    /// Serve SQL over the Postgres wire protocol (psql, drivers, BI tools).
    /// Every flag can also come from the environment (TABLESQL_LISTEN, ...).
    /// SIGTERM, SIGINT or SIGHUP stops it gracefully.
    Serve(serve::ServeArgs),
    /// Apply a directory of catalog files (`CREATE TABLE ... WITH (...)`
    /// mappings in `.sql` files, like the project's `catalog/`) to the store:
    /// each table created, or replaced where the stored definition differs.
    /// Every file is checked before anything is stored.
    Apply {
        /// The directory.
        dir: std::path::PathBuf,
    },
    /// Rewrite an embedded store of an older format (1) in this build's
    /// format (2), keeping every entity's Timestamp and ETag. Resumable: a
    /// run stopped part way continues where it stopped. The old file is
    /// kept beside the new one as tablesql.redb.format1.
    Migrate,
    /// Record a table's per-partition statistics (entities, bytes, guideposts)
    /// in the store, as SQL's `ANALYZE`: scans then fan out by them, one
    /// request per partition or per chunk of a big one.
    Analyze {
        /// The table (its SQL name, or a storage table's).
        table: String,
        /// Entities between guideposts.
        #[arg(long, default_value_t = 1000)]
        guidepost_every: u64,
        /// Entities to sample where the table has statistics to place the
        /// sample by (as `tablesql.analyze_sample`); 0 reads every entity.
        #[arg(long, default_value_t = 0)]
        sample: u64,
    },
    /// Load a CSV or TSV file (its first line names the columns) or JSON lines
    /// (an object per line) into a mapped table, in entity group
    /// transactions per partition; a bad row stops it with its line number,
    /// or with --reject goes to that file.
    Load {
        /// The table (its SQL name).
        table: String,
        /// The file.
        file: std::path::PathBuf,
        /// csv, tsv or jsonl (default: from the file's extension: .csv, .tsv, .jsonl).
        #[arg(long, value_enum)]
        format: Option<load::FileFormat>,
        /// A row whose primary key exists: insert (refuse it and stop),
        /// upsert (overwrite it) or skip (keep it): a load run again after
        /// a crash goes past the rows already written with skip or upsert.
        #[arg(long, value_enum, default_value = "insert")]
        mode: load::Mode,
        /// Write rows that cannot be loaded to this file and go on.
        #[arg(long)]
        reject: Option<std::path::PathBuf>,
    },
    /// Check a mapped table's index rows against its base rows (as SQL's
    /// `tablesql_check_index`): rows missing, orphaned and stale; with
    /// --repair, fix them (as `tablesql_repair_index`).
    CheckIndex {
        /// The table (its SQL name).
        table: String,
        /// Only this index.
        index: Option<String>,
        /// Fix what is found, each fix guarded by the ETags it read.
        #[arg(long)]
        repair: bool,
    },
    /// The partition advisor: ANALYZE a mapped table (or every one) and
    /// report what `tablesql_advise` finds, each finding with its evidence
    /// and remedy: from the partitions' sizes and their newest writes (an
    /// append-only key), and from the workload statistics every process
    /// over the store (`serve`, `query`, ...) stored there.
    Advise {
        /// The table (its SQL name); every mapped table when left out.
        table: Option<String>,
        /// Output format.
        #[arg(long, value_enum, default_value = "table")]
        format: output::Format,
        /// Also write the report, with its charts, as an HTML page to this
        /// file (as SQL's `tablesql_advise_report()`).
        #[arg(long)]
        html: Option<std::path::PathBuf>,
    },
    /// The storage guidance's partition stress test: copy one partition of
    /// a mapped table into a test table, run a workload script against it
    /// from several clients for a while, and report the GET and PUT
    /// entities/s that one partition served, the latencies, the service's
    /// busy answers, timeouts and retries, and the verdict against 2,000
    /// entities/s. The test table is removed at the end.
    Stress {
        /// The mapped table (its SQL name).
        table: String,
        /// The PartitionKey whose rows are copied and hammered.
        #[arg(long)]
        partition: String,
        /// The workload, in pgbench's syntax: SQL statements ending in `;`,
        /// `\set name random(lo, hi)`, `\sleep n ms`; `:name` in SQL is a
        /// variable's value, and `:table` the test table.
        #[arg(long)]
        script: std::path::PathBuf,
        /// Most rows copied into the test table.
        #[arg(long, default_value_t = 1000)]
        rows: u64,
        /// Clients running the script at once.
        #[arg(long, default_value_t = 8)]
        clients: usize,
        /// Seconds the clients run.
        #[arg(long, default_value_t = 10.0)]
        duration: f64,
        /// Entities/s the partition is judged against.
        #[arg(long, default_value_t = 2000)]
        target: u64,
    },
    /// Print raw entities in key order.
    Scan {
        /// The table.
        table: TableName,
        /// Only this partition.
        #[arg(long)]
        pk: Option<String>,
        /// First RowKey (inclusive).
        #[arg(long)]
        from: Option<String>,
        /// Last RowKey (exclusive).
        #[arg(long)]
        to: Option<String>,
        /// At most this many entities.
        #[arg(long)]
        limit: Option<usize>,
        /// Output format.
        #[arg(long, value_enum, default_value_t = output::Format::Table)]
        format: output::Format,
    },
}

/// `--stats-flush-interval`: `None` for 0.
#[derive(Clone, Copy)]
struct FlushEvery(Option<std::time::Duration>);

/// A size as PostgreSQL's settings spell one: a whole number and a unit
/// (B, kB, MB, GB or TB, each 1024 of the one before; case aside), or 0.
fn memory_size(s: &str) -> Result<usize, String> {
    let t = s.trim();
    let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (number, unit) = t.split_at(digits);
    let n: u64 = number
        .parse()
        .map_err(|_| format!("{s:?} is not a size such as 256MB"))?;
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" if n == 0 => 0,
        "b" => 0,
        "kb" => 10,
        "mb" => 20,
        "gb" => 30,
        "tb" => 40,
        "" => return Err(format!("{s:?} needs a unit: B, kB, MB, GB or TB")),
        other => return Err(format!("{other:?} is not a unit: B, kB, MB, GB or TB")),
    };
    n.checked_mul(1 << shift)
        .and_then(|b| usize::try_from(b).ok())
        .ok_or_else(|| format!("{s:?} is more memory than this machine can address"))
}

fn flush_interval(s: &str) -> Result<FlushEvery, String> {
    let secs: f64 = s
        .parse()
        .map_err(|_| format!("{s:?} is not a number of seconds"))?;
    if secs == 0.0 {
        return Ok(FlushEvery(None));
    }
    let (shortest, longest) = (
        tablesql::EngineOptions::WORKLOAD_FLUSH_SHORTEST,
        tablesql::EngineOptions::WORKLOAD_FLUSH_LONGEST,
    );
    match std::time::Duration::try_from_secs_f64(secs) {
        Ok(d) if (shortest..=longest).contains(&d) => Ok(FlushEvery(Some(d))),
        _ => Err(format!(
            "{s} is not from {} to {} seconds (or 0)",
            shortest.as_secs_f64(),
            longest.as_secs_f64()
        )),
    }
}

fn scan_policy(s: &str) -> Result<ScanPolicy, String> {
    s.parse()
        .map_err(|e: tablesql::datafusion::error::DataFusionError| e.to_string())
}

fn main() -> std::process::ExitCode {
    alloc::purge_soon();
    // psql's exit codes: a bad command line is 1 (clap's own is 2, which
    // psql keeps for a connection that failed); --help and --version 0.
    let matches = match Cli::command().try_get_matches() {
        Ok(m) => m,
        Err(e) => {
            let _ = e.print();
            return (if e.use_stderr() { 1 } else { 0 }).into();
        }
    };
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return 1.into();
        }
    };
    let serving = matches!(cli.command, Command::Serve(_));
    if let Err(e) = logging::install(cli.log_level.as_deref(), serving) {
        return ending::code(Err(e)).into();
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_stack_size(tablesql::THREAD_STACK)
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => return ending::code(Err(e.into())).into(),
    };
    let watch = match &cli.command {
        Command::Serve(_) | Command::Completions { .. } | Command::Man | Command::CliDoc => {
            ending::Watch::Nothing
        }
        // Ctrl-C is theirs: it cancels the shell's statement, and ends a
        // stress test, whose copy of the partition is removed after it.
        Command::Shell { file: None, .. } if std::io::stdin().is_terminal() => {
            ending::Watch::TermAndHup
        }
        Command::Stress { .. } => ending::Watch::TermAndHup,
        _ => ending::Watch::All,
    };
    let opened = ending::Opened::default();
    let code = runtime.block_on(async {
        let mut signals = match ending::Signals::listen(watch) {
            Ok(s) => s,
            Err(e) => return ending::code(Err(e.into())),
        };
        tokio::select! {
            ended = run(cli, &matches, &opened) => ending::code(ended),
            stopped = signals.first() => {
                eprintln!("tablesql: {}: stopped", stopped.name());
                stopped.code()
            }
        }
    });
    // The command's future is gone; its tasks go with the runtime, and
    // with them the last handles on the store, which closes (a blocking
    // task, such as a commit under way, is waited for up to the bound).
    runtime.shutdown_timeout(std::time::Duration::from_secs(10));
    opened.check_closed();
    code.into()
}

/// Runs the command; its exit code (psql's, where psql has one).
async fn run(cli: Cli, matches: &clap::ArgMatches, opened: &ending::Opened) -> anyhow::Result<u8> {
    match &cli.command {
        Command::Completions { shell } => {
            clap_complete::generate(
                *shell,
                &mut Cli::command(),
                "tablesql",
                &mut std::io::stdout(),
            );
            return Ok(0);
        }
        Command::Man => {
            clap_mangen::Man::new(Cli::command()).render(&mut std::io::stdout())?;
            return Ok(0);
        }
        Command::CliDoc => {
            print!("{}", clidoc::markdown(&Cli::command()));
            return Ok(0);
        }
        Command::TableService(args) => return table_service::run(args).await,
        _ => {}
    }
    let mut memory = match cli.memory_limit {
        Some(total) => tablesql::MemoryLimits::with_total((total > 0).then_some(total)),
        None => tablesql::MemoryLimits::default(),
    };
    if let Some(one) = cli.statement_memory_limit {
        memory = memory.with_statement((one > 0).then_some(one));
    }
    let options = tablesql::EngineOptions::default()
        .with_scan_policy(cli.scan_policy)
        .with_workload_flush(cli.stats_flush_interval.0)
        .with_memory(memory);
    let location: StoreLocation = cli
        .store
        .parse()
        .map_err(|e| anyhow::anyhow!("invalid --store: {e}"))?;
    // Migrating and opening (a repair reads the whole file) are long and
    // synchronous: on a thread of their own, so that the runtime's thread
    // still hears a signal meanwhile. One stops the process; the migration
    // resumes where it stopped, the repair starts again.
    if let Command::Migrate = cli.command {
        let location = location.clone();
        return tokio::task::spawn_blocking(move || migrate(&location))
            .await?
            .map(|()| 0);
    }
    // `serve` counts its signals from here: one that comes while the store
    // opens (a repair may take seconds) stops it as soon as it serves.
    let signals = match cli.command {
        Command::Serve(_) => Some(serve::Signals::watch()?),
        _ => None,
    };
    let memory = tablesql::storage::location::StoreMemory {
        derived_cache: cli.derived_cache,
        page_cache: cli.page_cache,
    };
    let opening = location.clone();
    let store = match tokio::task::spawn_blocking(move || opening.open_with(memory)).await? {
        Ok(store) => store,
        Err(e) => return Err(run::store_failed(&location, &e)),
    };
    opened.note(&store);
    let done = match cli.command {
        Command::Tables => tables(store.as_ref()).await,
        Command::Demo {
            rows,
            print_commits,
        } => run_demo(store.as_ref(), rows, print_commits).await,
        Command::Query {
            sql,
            commands,
            files,
            format,
            set,
            pset,
            print_progress,
        } => {
            let engine = run::engine(store, options, &location).await?;
            let actions = run::actions(matches, sql, commands, files);
            // One CREATE INDEX or TRUNCATE, with its progress.
            if let [run::Action::Sql(text) | run::Action::Command(text)] = actions.as_slice() {
                match engine.parse(text).as_deref() {
                    Ok([Statement::CreateIndex(create)]) => {
                        let done = create_index(&engine, create, print_progress).await;
                        close(&engine).await;
                        return done.map(|()| 0);
                    }
                    Ok([Statement::Truncate(t)]) => {
                        let done = truncate_table(&engine, t, print_progress).await;
                        close(&engine).await;
                        return done.map(|()| 0);
                    }
                    _ => {}
                }
            }
            // The shell's statement path, so that a statement prints here as it
            // does there: its tag or its rows with psql's footer, notices and
            // errors as psql prints them (`ERROR:  ...`).
            let closing = engine.clone();
            let mut shell = tablesql::shell::Shell::new(engine, format, false).await;
            shell.set_paging(std::io::stdout().is_terminal());
            shell.set_conninfo(&location.to_string());
            set_variables(&mut shell, &set)?;
            set_psets(&mut shell, &pset)?;
            let code = run::query(&mut shell, actions, &set).await;
            close(&closing).await;
            return Ok(code);
        }
        Command::Completions { .. }
        | Command::Man
        | Command::CliDoc
        | Command::Migrate
        | Command::TableService(_) => Ok(()),
        Command::Shell {
            file,
            format,
            set,
            pset,
        } => {
            let engine = run::engine(store, options, &location).await?;
            return shell(engine, &location, file, format, &set, &pset).await;
        }
        Command::Load {
            table,
            file,
            format,
            mode,
            reject,
        } => {
            let engine = tablesql::Engine::with_store(store, options).await?;
            let request = load::Request {
                table,
                file,
                format,
                mode,
                reject,
            };
            let loaded = load::load(&engine, request).await;
            close(&engine).await;
            loaded
        }
        Command::CheckIndex {
            table,
            index,
            repair,
        } => {
            let engine = tablesql::Engine::with_store(store, options).await?;
            let checked = check_index(&engine, &table, index.as_deref(), repair).await;
            close(&engine).await;
            checked
        }
        Command::Advise {
            table,
            format,
            html,
        } => {
            // Its own reading (ANALYZE's) is not the users' workload: it
            // counts none, and advises from what other processes stored.
            let options = options.with_statistics(false);
            let engine = tablesql::Engine::with_store(store, options).await?;
            advise(&engine, table, format, html.as_deref()).await
        }
        Command::Stress {
            table,
            partition,
            script,
            rows,
            clients,
            duration,
            target,
        } => {
            let text = std::fs::read_to_string(&script)
                .with_context(|| format!("reading {}", script.display()))?;
            let script = tablesql::stress::Script::parse(&text, &tablesql::stress::BUILTINS)
                .with_context(|| format!("in {}", script.display()))?;
            let mut test = tablesql::stress::StressOptions::new(table, partition, script);
            test.rows = rows;
            test.clients = clients;
            test.duration = std::time::Duration::try_from_secs_f64(duration)
                .context("--duration is a number of seconds")?;
            test.target_per_s = target;
            let engine = tablesql::Engine::with_store(store, options).await?;
            let stressed = stress(&engine, &test).await;
            close(&engine).await;
            stressed
        }
        Command::Apply { dir } => {
            let engine = tablesql::Engine::with_store(store, options).await?;
            // Each as it is done: a failure part way shows what was applied.
            engine
                .apply_catalog(&dir, |applied| println!("{applied}"))
                .await?;
            Ok(())
        }
        Command::Analyze {
            table,
            guidepost_every,
            sample,
        } => {
            let engine = tablesql::Engine::with_store(store, options).await?;
            let how = tablesql::Reading {
                every: guidepost_every,
                sample,
            };
            for notice in engine.analyze_tables(Some(&table), how).await? {
                println!("{}", notice.text);
            }
            Ok(())
        }
        Command::Serve(args) => {
            let signals =
                signals.ok_or_else(|| anyhow::anyhow!("serve's signals are not watched"))?;
            return serve::serve(store, options, args, signals).await;
        }
        Command::Scan {
            table,
            pk,
            from,
            to,
            limit,
            format,
        } => {
            let mut query = match pk {
                Some(pk) => Query::partition(PartitionKey::new(pk)?),
                None => Query::all(),
            };
            query.rows = KeyRange {
                start: from
                    .map(RowKey::new)
                    .transpose()?
                    .map_or(Bound::Unbounded, Bound::Included),
                end: to
                    .map(RowKey::new)
                    .transpose()?
                    .map_or(Bound::Unbounded, Bound::Excluded),
            };
            scan::scan(store.as_ref(), &table, &query, limit, format).await
        }
    };
    done.map(|()| 0)
}

/// Stores the engine's workload statistics for every process over the
/// store (the advisor's, `tablesql_stat_statements`'). A failure is the
/// statistics' loss, not the command's: warned, never its exit code.
async fn close(engine: &tablesql::Engine) {
    if let Err(e) = engine.close().await {
        tracing::warn!(error = %e, "the workload statistics could not be stored");
    }
}

async fn shell(
    engine: tablesql::Engine,
    location: &StoreLocation,
    file: Option<std::path::PathBuf>,
    format: output::Format,
    set: &[String],
    pset: &[String],
) -> anyhow::Result<u8> {
    use tablesql::shell::{ScriptEnd, Shell};
    // The session's workload statistics, stored for every process at the end.
    let closing = engine.clone();
    let interactive = file.is_none() && std::io::stdin().is_terminal();
    let terminal = interactive && std::io::stdout().is_terminal();
    let mut shell = Shell::new(engine, format, terminal).await;
    shell.set_conninfo(&location.to_string());
    set_variables(&mut shell, set)?;
    set_psets(&mut shell, pset)?;
    if interactive {
        let history = std::env::var_os("TABLESQL_HISTORY")
            .map(std::path::PathBuf::from)
            .or_else(|| std::env::home_dir().map(|h| h.join(".tablesql_history")));
        let ended = shell.interactive(history).await;
        close(&closing).await;
        return Ok(ended.map(|()| 0)?);
    }
    let text = match &file {
        Some(path) => match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) => {
                eprintln!("tablesql: error: {}: {}", path.display(), run::io_text(&e));
                return Ok(1);
            }
        },
        None => ending::read_stdin().await?,
    };
    // Errors are already reported, psql's way, by the shell; the exit
    // code is psql's: 3 when ON_ERROR_STOP ended the script.
    let end = shell.run_file(&text).await;
    close(&closing).await;
    Ok(if end == ScriptEnd::Stopped { 3 } else { 0 })
}

/// `-P NAME=VALUE` options, as psql's `\pset`.
fn set_psets(shell: &mut tablesql::shell::Shell, pset: &[String]) -> anyhow::Result<()> {
    for assignment in pset {
        let (name, value) = match assignment.split_once('=') {
            Some((name, value)) => (name, Some(value)),
            None => (assignment.as_str(), None),
        };
        shell.pset(name, value)?;
    }
    Ok(())
}

/// `-v NAME=VALUE` options, as psql's.
fn set_variables(shell: &mut tablesql::shell::Shell, set: &[String]) -> anyhow::Result<()> {
    for assignment in set {
        let Some((name, value)) = assignment.split_once('=') else {
            anyhow::bail!("-v {assignment}: expected NAME=VALUE");
        };
        shell.set(name, value);
    }
    Ok(())
}

/// `tablesql stress`: see `Command::Stress`.
async fn stress(
    engine: &tablesql::Engine,
    test: &tablesql::stress::StressOptions,
) -> anyhow::Result<()> {
    let report = tablesql::stress::run(engine, test, |p| eprintln!("{p}")).await?;
    println!("{report}");
    Ok(())
}

/// `tablesql advise`: see `Command::Advise`.
async fn advise(
    engine: &tablesql::Engine,
    table: Option<String>,
    format: output::Format,
    html: Option<&std::path::Path>,
) -> anyhow::Result<()> {
    let session = engine.session();
    // Every mapped table when none is named, as `ANALYZE` alone does.
    let (analyze, advise) = match &table {
        Some(t) => {
            let storage = engine.storage_table(t).await?;
            (
                format!("ANALYZE \"{}\"", t.replace('"', "\"\"")),
                format!(
                    "tablesql_advise('{}')",
                    storage.as_str().replace('\'', "''")
                ),
            )
        }
        None => ("ANALYZE".to_owned(), "tablesql_advise()".to_owned()),
    };
    session.collect(&analyze).await?;
    for notice in session.take_notices() {
        eprintln!("NOTICE:  {notice}");
    }
    if let Some(path) = html {
        let report = advise.replacen("tablesql_advise", "tablesql_advise_report", 1);
        let page = session
            .collect(&format!("SELECT html FROM {report}"))
            .await?;
        let text = page
            .first()
            .and_then(|b| b.column(0).as_string_opt::<i32>())
            .filter(|c| !c.is_empty())
            .map(|c| c.value(0).to_owned())
            .ok_or_else(|| anyhow::anyhow!("{report} answered no page"))?;
        std::fs::write(path, text)
            .with_context(|| format!("writing the report to {}", path.display()))?;
    }
    let sql = format!(
        "SELECT table_name, finding, evidence, remedy FROM {advise} ORDER BY table_name, finding"
    );
    output::print_stream(session.execute_stream(&sql).await?, format).await
}

async fn tables(store: &dyn TableStore) -> anyhow::Result<()> {
    let mut rows = Vec::new();
    for table in store.list_tables().await? {
        let count = store.count(&table).await?;
        rows.push((table, count));
    }
    output::print_tables(&rows);
    Ok(())
}

/// A spinner counting `what` on stderr when it is a terminal; hidden when
/// the progress is printed as lines instead (`--print-progress`).
fn spinner(what: &str, print_progress: bool) -> anyhow::Result<ProgressBar> {
    let bar = ProgressBar::new_spinner();
    if !std::io::stderr().is_terminal() || print_progress {
        bar.set_draw_target(ProgressDrawTarget::hidden());
    }
    bar.set_style(ProgressStyle::with_template(&format!(
        "{{spinner}} {{pos}} {what} ({{per_sec}}) {{elapsed}}"
    ))?);
    Ok(bar)
}

/// Index upkeep with a progress bar on a terminal, then the counts.
async fn check_index(
    engine: &tablesql::Engine,
    table: &str,
    index: Option<&str>,
    repair: bool,
) -> anyhow::Result<()> {
    let bar = spinner("base rows checked", false)?;
    let health = engine
        .index_upkeep(table, index, repair, |rows| bar.set_position(rows))
        .await?;
    bar.finish_and_clear();
    for h in health {
        println!(
            "index {}: {} partitions, {} base rows, {} index rows; {} missing ({} unindexable), {} orphaned, {} stale; {} repaired, {} conflicts",
            h.index,
            h.partitions,
            h.base_rows,
            h.index_rows,
            h.missing,
            h.unindexable,
            h.orphaned,
            h.stale,
            h.repaired,
            h.conflicts
        );
        for e in &h.examples {
            println!("    {e}");
        }
    }
    Ok(())
}

/// `CREATE INDEX` with a progress bar on a terminal (base rows read as
/// the index rows are written), then what it wrote.
async fn create_index(
    engine: &tablesql::Engine,
    create: &tablesql::datafusion::sql::sqlparser::ast::CreateIndex,
    print_progress: bool,
) -> anyhow::Result<()> {
    let bar = spinner("base rows indexed", print_progress)?;
    let outcome = engine
        .create_index(create, |rows| {
            bar.set_position(rows);
            if print_progress {
                println!("progress {rows}");
            }
        })
        .await?;
    bar.finish_and_clear();
    for notice in outcome.notices {
        println!("{notice}");
    }
    Ok(())
}

/// `TRUNCATE` with a progress bar on a terminal (rows deleted, partition
/// by partition), then its tag.
async fn truncate_table(
    engine: &tablesql::Engine,
    truncate: &tablesql::datafusion::sql::sqlparser::ast::Truncate,
    print_progress: bool,
) -> anyhow::Result<()> {
    let bar = spinner("rows deleted", print_progress)?;
    engine
        .session()
        .truncate(truncate, |rows| {
            bar.set_position(rows);
            if print_progress {
                println!("progress {rows}");
            }
        })
        .await?;
    bar.finish_and_clear();
    println!("TRUNCATE TABLE");
    Ok(())
}

async fn run_demo(store: &dyn TableStore, rows: u64, print_commits: bool) -> anyhow::Result<()> {
    let bar = ProgressBar::new(rows * 2);
    if !std::io::stderr().is_terminal() || print_commits {
        bar.set_draw_target(ProgressDrawTarget::hidden());
    }
    bar.set_style(ProgressStyle::with_template(
        "{bar:40} {pos}/{len} entities {per_sec} eta {eta}",
    )?);
    let started = std::time::Instant::now();
    let mut stdout = std::io::stdout().lock();
    let loaded = demo::load(store, rows, |b, n| {
        bar.inc(n as u64);
        if print_commits {
            // The line goes out only after the commit is durable.
            let _ = writeln!(stdout, "committed {b} {n}").and_then(|_| stdout.flush());
        }
    })
    .await?;
    bar.finish_and_clear();
    let secs = started.elapsed().as_secs_f64();
    eprintln!(
        "loaded {loaded} entities ({rows} registrations) into {} in {secs:.1} s ({:.0} entities/s)",
        demo::TABLE,
        loaded as f64 / secs.max(1e-9)
    );
    Ok(())
}

/// `tablesql migrate`: the embedded store rewritten in this build's format.
fn migrate(location: &StoreLocation) -> anyhow::Result<()> {
    use tablesql::storage::embedded::migrate;
    let StoreLocation::Embedded(dir) = location else {
        anyhow::bail!("only the embedded store has a file format to migrate ({location})");
    };
    let done = migrate::migrate(dir, &migrate::Options::default(), &mut |table, n| {
        eprintln!("{table}: {n} entities copied");
    })?;
    match done.kept {
        None if done.finished => println!("the store is in format {} already", done.from),
        None => println!(
            "stopped after {} entities; run again to continue",
            done.entities
        ),
        Some(kept) => println!(
            "migrated {} tables from format {} ({} entities copied in this run); the old file is kept as {}",
            done.tables,
            done.from,
            done.entities,
            kept.display()
        ),
    }
    Ok(())
}
