//! `tablesql load TABLE FILE`: a CSV file (its first line names the
//! columns) or JSON lines (an object per line, keyed by column) into a
//! mapped table, through the same chunked INSERT as COPY FROM
//! (`tablesql::load`). The file is read as it is written, so memory stays
//! flat; a progress bar shows rows, entities/s and the ETA on a terminal,
//! and a summary closes the run.

use std::fs::File;
use std::io::{BufReader, IsTerminal, Read, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, bail};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use tablesql::load::format::{CopyFormat, Scan};
use tablesql::load::{CHUNK_ROWS, LoadError, LoadMode, Loader};

/// The file's format.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum FileFormat {
    /// Comma-separated, with a header line of column names: PostgreSQL's
    /// COPY CSV (an unquoted empty field is NULL, `""` the empty string),
    /// as `tablesql query --format csv` writes it.
    Csv,
    /// Tab-separated with a header line: PostgreSQL's COPY text format
    /// (`\N` is NULL, backslash escapes), as `tablesql query --format tsv`
    /// writes it.
    Tsv,
    /// One JSON object per line, keyed by column name.
    Jsonl,
}

/// What to do with a row whose primary key exists.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum Mode {
    /// Refuse it: the load stops (23505).
    Insert,
    /// Overwrite it with the loaded row.
    Upsert,
    /// Keep it, and go on.
    Skip,
}

/// How a load is asked for.
pub struct Request {
    pub table: String,
    pub file: PathBuf,
    pub format: Option<FileFormat>,
    pub mode: Mode,
    pub reject: Option<PathBuf>,
}

pub async fn load(engine: &tablesql::Engine, request: Request) -> anyhow::Result<()> {
    let tables = engine.describe_tables().await?;
    let Some(table) = tables
        .iter()
        .find(|t| t.schema == "public" && t.name == request.table)
    else {
        bail!("no table {} (tablesql tables lists them)", request.table);
    };
    if table.insertable.is_empty() {
        bail!(
            "{} is not a mapped table: only mapped tables are written through SQL",
            table.name
        );
    }
    let format = match request.format {
        Some(f) => f,
        None => format_of(&request.file)?,
    };
    let size = std::fs::metadata(&request.file)
        .with_context(|| format!("cannot read {}", request.file.display()))?
        .len();
    let file = File::open(&request.file)
        .with_context(|| format!("cannot open {}", request.file.display()))?;
    let mut records = Records::new(BufReader::with_capacity(READ_SIZE, file), format);
    let columns = match format {
        FileFormat::Csv | FileFormat::Tsv => records.header()?,
        FileFormat::Jsonl => table.insertable.clone(),
    };
    for c in &columns {
        if !table.insertable.contains(c) {
            bail!(
                "column \"{c}\" of {} is not a column the table takes ({})",
                request.file.display(),
                table.insertable.join(", ")
            );
        }
    }
    let mode = match request.mode {
        Mode::Insert => LoadMode::Insert,
        Mode::Upsert => LoadMode::Upsert,
        Mode::Skip => LoadMode::Skip,
    };
    let session = engine.session();
    let mut loader = Loader::new(
        &session,
        &table.name,
        &columns,
        table.primary_key.clone(),
        mode,
    )
    .await?;
    let entities_per_row = 1 + table.indexes.len() as u64;
    if let Some(reject) = &request.reject
        && std::fs::canonicalize(reject).ok() == std::fs::canonicalize(&request.file).ok()
    {
        bail!("the reject file cannot be the file loaded");
    }
    let mut run = Run {
        bar: bar(size)?,
        rejects: match &request.reject {
            Some(path) => Some(
                File::create(path).with_context(|| format!("cannot create {}", path.display()))?,
            ),
            None => None,
        },
        rejected: 0,
        header: records.header_text.clone(),
        pending: Vec::new(),
        entities_per_row,
    };
    let started = Instant::now();
    let outcome = run.all(engine, &mut loader, &mut records, &columns).await;
    run.bar.finish_and_clear();
    let written = loader.written();
    if let Err(e) = outcome {
        bail!(
            "{e}; {written} rows were written before it (a run again with --mode skip or upsert passes over them)"
        );
    }
    let seconds = started.elapsed().as_secs_f64();
    let entities = written * entities_per_row;
    print!(
        "loaded {written} rows ({entities} entities) into {} in {seconds:.1} s ({:.0} entities/s)",
        table.name,
        entities as f64 / seconds.max(1e-9)
    );
    match (&request.reject, run.rejected) {
        (Some(path), n) if n > 0 => println!("; {n} rows rejected to {}", path.display()),
        _ => println!(),
    }
    Ok(())
}

fn format_of(path: &Path) -> anyhow::Result<FileFormat> {
    match path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase)
        .as_deref()
    {
        Some("csv") => Ok(FileFormat::Csv),
        Some("tsv" | "tab") => Ok(FileFormat::Tsv),
        Some("jsonl" | "ndjson" | "json") => Ok(FileFormat::Jsonl),
        _ => bail!(
            "cannot tell the format of {} from its extension: give --format csv, tsv or jsonl",
            path.display()
        ),
    }
}

fn bar(size: u64) -> anyhow::Result<ProgressBar> {
    let bar = ProgressBar::new(size);
    if !std::io::stderr().is_terminal() {
        bar.set_draw_target(ProgressDrawTarget::hidden());
    }
    bar.set_style(ProgressStyle::with_template(
        "{bar:40} {binary_bytes}/{binary_total_bytes} {msg} eta {eta}",
    )?);
    Ok(bar)
}

/// One load's state beside the loader: the progress bar, the reject file,
/// and the raw text of the rows waiting, to reject one that will not convert.
struct Run {
    bar: ProgressBar,
    rejects: Option<File>,
    rejected: u64,
    /// The CSV header, written before the first rejected row so that the
    /// reject file loads as it is once fixed.
    header: Option<String>,
    pending: Vec<(u64, String)>,
    entities_per_row: u64,
}

impl Run {
    async fn all(
        &mut self,
        engine: &tablesql::Engine,
        loader: &mut Loader,
        records: &mut Records,
        columns: &[String],
    ) -> anyhow::Result<()> {
        let started = Instant::now();
        while let Some((line, text)) = records.next()? {
            match records.fields(&text, columns) {
                Ok(fields) => {
                    if let Err(e) = loader.push(line, fields) {
                        self.reject(line, &text, &e)?;
                        continue;
                    }
                    self.pending.push((line, text));
                }
                Err(reason) => {
                    let e = LoadError::Line {
                        line,
                        fault: tablesql::load::LineFault::BadRecord,
                        reason,
                    };
                    self.reject(line, &text, &e)?;
                    continue;
                }
            }
            if loader.pending() >= CHUNK_ROWS {
                self.write(engine, loader).await?;
                let rate = (loader.written() * self.entities_per_row) as f64
                    / started.elapsed().as_secs_f64().max(1e-9);
                self.bar
                    .set_message(format!("{} rows, {rate:.0} entities/s", loader.written()));
                self.bar.set_position(records.read);
            }
        }
        self.write(engine, loader).await
    }

    /// Writes the waiting rows; a row that will not convert is rejected
    /// (or stops the load), and the rest written.
    async fn write(
        &mut self,
        engine: &tablesql::Engine,
        loader: &mut Loader,
    ) -> anyhow::Result<()> {
        loop {
            match loader.write(&engine.session()).await {
                Ok(_) => {
                    self.pending.clear();
                    return Ok(());
                }
                Err(e) => {
                    let Some(line) = e.line() else {
                        return Err(e.into());
                    };
                    let text = self
                        .pending
                        .iter()
                        .find(|(l, _)| *l == line)
                        .map(|(_, t)| t.clone())
                        .unwrap_or_default();
                    self.reject(line, &text, &e)?;
                    loader.drop_line(line);
                    self.pending.retain(|(l, _)| *l != line);
                }
            }
        }
    }

    /// Sends a bad row to the reject file, or stops the load with it.
    fn reject(&mut self, line: u64, text: &str, e: &LoadError) -> anyhow::Result<()> {
        let Some(file) = self.rejects.as_mut() else {
            bail!("line {line}: {}", reason(e));
        };
        if let Some(header) = self.header.take() {
            writeln!(file, "{}", header.trim_end_matches(['\n', '\r']))?;
        }
        // The line as it was, so the file can be fixed and loaded.
        writeln!(file, "{}", text.trim_end_matches(['\n', '\r']))?;
        self.bar
            .suspend(|| eprintln!("line {line} rejected: {}", reason(e)));
        self.rejected += 1;
        Ok(())
    }
}

fn reason(e: &LoadError) -> String {
    match e {
        LoadError::Line { reason, .. } => reason.clone(),
        other => other.to_string(),
    }
}

/// The file's records, with their line numbers.
struct Records {
    reader: BufReader<File>,
    format: FileFormat,
    csv: CopyFormat,
    /// Bytes read and not yet taken, from `start` on: records are taken by
    /// moving `start`, and the buffer is compacted only before a read.
    buffer: Vec<u8>,
    start: usize,
    scan: Scan,
    /// The line the next record starts on.
    line: u64,
    /// Bytes read so far, for the progress bar.
    read: u64,
    done: bool,
    /// The CSV header line as read.
    header_text: Option<String>,
}

/// The longest record taken: an entity holds at most 1 MiB, and an
/// unclosed quote would otherwise pull the rest of the file into one.
const MAX_RECORD: usize = 4 << 20;

/// Bytes read from the file at a time.
const READ_SIZE: usize = 1 << 16;

impl Records {
    fn new(reader: BufReader<File>, format: FileFormat) -> Self {
        Self {
            reader,
            format,
            csv: match format {
                FileFormat::Tsv => CopyFormat::text(),
                _ => CopyFormat::csv(),
            },
            buffer: Vec::new(),
            start: 0,
            scan: Scan::default(),
            line: 1,
            read: 0,
            done: false,
            header_text: None,
        }
    }

    /// The CSV header: the loaded columns, in the file's order.
    fn header(&mut self) -> anyhow::Result<Vec<String>> {
        let Some((line, text)) = self.next()? else {
            bail!("the file is empty: a CSV file starts with a line of column names");
        };
        let names = self
            .csv
            .read_row(&text)
            .map_err(|e| anyhow::anyhow!("line {line}: {e}"))?;
        let names: Vec<String> = names
            .into_iter()
            .map(|n| {
                n.map(|n| n.trim().to_owned())
                    .ok_or_else(|| anyhow::anyhow!("line {line}: an empty column name"))
            })
            .collect::<anyhow::Result<_>>()?;
        let twice = names
            .iter()
            .enumerate()
            .find(|(i, n)| names.get(..*i).is_some_and(|before| before.contains(n)));
        if let Some((_, name)) = twice {
            bail!("line {line}: column \"{name}\" is named twice");
        }
        self.header_text = Some(text);
        Ok(names)
    }

    /// The next record (a CSV record may span lines inside quotes) and the
    /// line it starts on.
    fn next(&mut self) -> anyhow::Result<Option<(u64, String)>> {
        loop {
            let rest = &self.buffer[self.start..];
            let end = match self.format {
                FileFormat::Csv | FileFormat::Tsv => self.csv.record_end(rest, &mut self.scan),
                FileFormat::Jsonl => rest.iter().position(|b| *b == b'\n').map(|i| i + 1),
            };
            let end = match end {
                Some(end) => end,
                None if self.done && rest.is_empty() => return Ok(None),
                None if self.done => {
                    self.scan = Scan::default();
                    rest.len()
                }
                None if rest.len() > MAX_RECORD => {
                    bail!(
                        "line {}: a record longer than {} MiB (an unclosed quote?)",
                        self.line,
                        MAX_RECORD >> 20
                    );
                }
                None => {
                    self.fill()?;
                    continue;
                }
            };
            let record = rest[..end].to_vec();
            self.start += end;
            let line = self.line;
            self.line += record.iter().filter(|b| **b == b'\n').count() as u64;
            let text = String::from_utf8(record)
                .map_err(|_| anyhow::anyhow!("line {line}: invalid UTF-8"))?;
            let text = match (line, text.strip_prefix('\u{feff}')) {
                (1, Some(rest)) => rest.to_owned(),
                _ => text,
            };
            if text.trim().is_empty() {
                continue;
            }
            return Ok(Some((line, text)));
        }
    }

    /// Reads the next piece of the file, after dropping the bytes taken.
    fn fill(&mut self) -> anyhow::Result<()> {
        self.buffer.drain(..self.start);
        self.start = 0;
        let len = self.buffer.len();
        self.buffer.resize(len + READ_SIZE, 0);
        let n = self.reader.read(&mut self.buffer[len..])?;
        self.buffer.truncate(len + n);
        self.read += n as u64;
        self.done = n == 0;
        Ok(())
    }

    /// A record's fields, in `columns`' order.
    fn fields(&self, text: &str, columns: &[String]) -> Result<Vec<Option<String>>, String> {
        match self.format {
            FileFormat::Csv | FileFormat::Tsv => self.csv.read_row(text),
            FileFormat::Jsonl => json_fields(text, columns),
        }
    }
}

/// A JSON number as text a column converts: an integral value written
/// with an exponent (`1e3`) as the integer it is, within f64's exact range.
fn number_text(n: &serde_json::Number) -> String {
    match n.as_f64() {
        Some(f) if !n.is_i64() && !n.is_u64() && f.fract() == 0.0 && f.abs() < 9.0e15 => {
            format!("{}", f as i64)
        }
        _ => n.to_string(),
    }
}

/// A JSON line's values for `columns`: a missing key is NULL, an unknown
/// one refused (a misspelt column would otherwise be lost silently).
fn json_fields(text: &str, columns: &[String]) -> Result<Vec<Option<String>>, String> {
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    let serde_json::Value::Object(object) = value else {
        return Err("a JSON line must be an object keyed by column".into());
    };
    if let Some(unknown) = object.keys().find(|k| !columns.contains(k)) {
        return Err(format!("\"{unknown}\" is not a column of the table"));
    }
    columns
        .iter()
        .map(|c| match object.get(c) {
            None | Some(serde_json::Value::Null) => Ok(None),
            Some(serde_json::Value::String(s)) => Ok(Some(s.clone())),
            Some(serde_json::Value::Bool(b)) => Ok(Some(b.to_string())),
            Some(serde_json::Value::Number(n)) => Ok(Some(number_text(n))),
            Some(_) => Err(format!("column \"{c}\": a nested value cannot be stored")),
        })
        .collect()
}
