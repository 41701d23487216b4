//! The advisor's HTML report, rendered by a real browser: headless Chromium
//! (Debian's, installed by `scripts/chromium`, named in
//! `TABLESQL_TEST_CHROMIUM`) loads the page a workload produced, and the
//! test reads back the DOM it built and a screenshot of it.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use tablesql::datafusion::arrow::array::AsArray;
use tablesql::datafusion::scalar::ScalarValue;

use crate::sql::demo_engine;

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn chromium() -> String {
    std::env::var("TABLESQL_TEST_CHROMIUM").unwrap_or_else(|_| "chromium".into())
}

/// Runs headless Chromium on `page` with `args` and returns its stdout;
/// killed, and the test failed, past a minute.
fn headless(
    page: &Path,
    profile: &Path,
    args: &[&str],
) -> Result<String, Box<dyn std::error::Error>> {
    let mut child = Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            "--window-size=1280,2400",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .arg(format!("file://{}", page.display()))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    // Read while it runs: a DOM past the pipe's buffer would block it.
    let mut stdout = child.stdout.take().ok_or("chromium's stdout")?;
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut stdout, &mut text).map(|_| text)
    });
    let status = match crate::wait::exit_of(&mut child, Duration::from_secs(120), "chromium to end")
    {
        Ok(status) => status,
        Err(e) => {
            child.kill()?;
            return Err(e.into());
        }
    };
    let text = reader.join().map_err(|_| "the reading thread panicked")??;
    if !status.success() {
        return Err(format!("chromium failed: {status}").into());
    }
    Ok(text)
}

/// The part of `dom` from `<svg id="{id}"` to its `</svg>`.
fn svg<'a>(dom: &'a str, id: &str) -> Result<&'a str, String> {
    let start = dom
        .find(&format!("<svg id=\"{id}\""))
        .ok_or_else(|| format!("no chart {id} in the DOM"))?;
    let len = dom[start..].find("</svg>").ok_or("an unclosed svg")?;
    Ok(&dom[start..start + len])
}

/// Pixels of each colour the charts draw with, in an RGBA screenshot.
fn colours(png_file: &Path) -> Result<[usize; 4], Box<dyn std::error::Error>> {
    let mut decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(png_file)?));
    decoder.set_transformations(png::Transformations::EXPAND);
    let mut reader = decoder.read_info()?;
    let mut buf = vec![0; reader.output_buffer_size().ok_or("a screenshot too big")?];
    let info = reader.next_frame(&mut buf)?;
    let channels = info.color_type.samples();
    assert!(channels >= 3, "{info:?}");
    // Bars of sizes, bars read, bars written, the 2,000/s line.
    let mut counts = [0; 4];
    for px in buf[..info.buffer_size()].chunks_exact(channels) {
        let near = |c: [u8; 3]| (0..3).all(|i| px[i].abs_diff(c[i]) <= 8);
        counts[0] += usize::from(near([0x4a, 0x7b, 0xd0]));
        counts[1] += usize::from(near([0x2a, 0x9d, 0x8f]));
        counts[2] += usize::from(near([0xe0, 0x8a, 0x2c]));
        counts[3] += usize::from(near([0xc0, 0x39, 0x2b]));
    }
    Ok(counts)
}

/// A workload with reads, writes and an append-only table; its report
/// opened in Chromium shows the findings and both charts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_report_renders_in_chromium() -> TestResult {
    let engine = demo_engine(1200).await;
    engine.collect("ANALYZE registrations").await?;
    engine.collect("SELECT tablesql_stat_reset()").await?;
    let by_bib = engine
        .prepare("SELECT name FROM registrations WHERE event = $1 AND distance = $2 AND bib = $3")
        .await?;
    for i in 0..20 {
        let r = tablesql::demo::registration(i * 11);
        let args = vec![
            ScalarValue::from(r.event),
            ScalarValue::from(r.distance),
            ScalarValue::Int32(Some(r.bib)),
        ];
        by_bib.query(args).await?;
    }
    engine.collect("SET tablesql.scan_policy = allow").await?;
    engine
        .collect("SELECT count(name) FROM registrations")
        .await?;
    engine
        .collect(
            "CREATE TABLE readings (at TEXT NOT NULL, seq INT NOT NULL, PRIMARY KEY (at, seq)) \
             WITH (partition_key = '{at}', row_key = '{seq:06}')",
        )
        .await?;
    let burst: Vec<String> = (0..400)
        .map(|i| format!("('2026-11-23T09:59', {i})"))
        .collect();
    engine
        .collect(&format!(
            "INSERT INTO readings (at, seq) VALUES {}",
            burst.join(", ")
        ))
        .await?;
    for i in 0..60 {
        engine
            .collect(&format!(
                "INSERT INTO readings (at, seq) VALUES ('2026-11-23T10:{i:02}', 0)"
            ))
            .await?;
    }
    let batches = engine
        .collect("SELECT html FROM tablesql_advise_report()")
        .await?;
    let page = batches
        .first()
        .map(|b| b.column(0).as_string::<i32>().value(0).to_owned())
        .ok_or("no report")?;

    let dir = tempfile::tempdir()?;
    let file = dir.path().join("report.html");
    std::fs::write(&file, &page)?;
    let profile = dir.path().join("profile");
    let dom = headless(&file, &profile, &["--dump-dom"])?;
    assert!(dom.contains("<td>append_only</td>"), "the finding: {dom}");
    let sizes = svg(&dom, "partition-sizes")?;
    assert_eq!(sizes.matches("<rect class=\"size\"").count(), 12, "{sizes}");
    let peaks = svg(&dom, "partition-peaks")?;
    assert!(peaks.contains("<line class=\"target\""), "{peaks}");
    assert_eq!(peaks.matches("<rect class=\"read\"").count(), 40, "{peaks}");
    assert!(peaks.contains("readings / 2026-11-23T09:59"), "{peaks}");

    let shot = dir.path().join("report.png");
    headless(
        &file,
        &profile,
        &[&format!("--screenshot={}", shot.display())],
    )?;
    let [sizes, read, written, target] = colours(&shot)?;
    // The sizes' twelve bars are the chart's full width; the scan's reads
    // are twelve bars of about 100/s, a twentieth of the 2,000/s line's
    // length; the burst of 400 writes one bar a fifth of it; the line is
    // dashed from top to bottom of its chart.
    assert!(sizes > 20_000, "size bars: {sizes} pixels");
    assert!(read > 1_000, "read bars: {read} pixels");
    assert!(written > 500, "write bars: {written} pixels");
    assert!(target > 300, "the 2,000/s line: {target} pixels");
    Ok(())
}
