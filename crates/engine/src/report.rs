//! The advisor's report as one self-contained HTML page: the findings, a
//! chart of the analyzed partitions' sizes, and a chart of each partition's
//! busiest second against the 2,000 entities/s a partition serves. Inline
//! CSS and SVG, no script and nothing fetched, so that the file opens
//! anywhere it is copied to. Pure: the caller gathers the figures.
//!
//! Presentation, so not part of the execution layer: it reads the
//! findings of `exec::stats::advise` and is served by the planner's
//! `tablesql_advise_report()` (`planner::workload_views`), so it sits
//! between the two and imports only downward.

use std::fmt::Write;

use chrono::{DateTime, Utc};

use crate::exec::stats::advise::{Evidence, Finding, PARTITION_TARGET_PER_S};

/// Partitions drawn per table in the sizes chart, and in all in the peaks
/// chart; the rest are summed in one line.
const MOST_BARS: usize = 40;
/// Width of the label column and of the bars, in pixels.
const LABEL_W: f64 = 300.0;
const BARS_W: f64 = 560.0;
const ROW_H: f64 = 20.0;

/// The page for `findings`, drawn from `evidence`, of statistics kept
/// since `since`.
pub fn html(findings: &[Finding], evidence: &Evidence<'_>, since: DateTime<Utc>) -> String {
    let mut page = String::with_capacity(16 * 1024);
    page.push_str(HEAD);
    let _ = write!(
        page,
        "<h1>tablesql partition advisor</h1>\n<p class=\"meta\">Generated {}; workload \
         statistics since {}.</p>\n",
        Utc::now().format("%Y-%m-%d %H:%M:%S UTC"),
        since.format("%Y-%m-%d %H:%M:%S UTC")
    );
    findings_table(&mut page, findings);
    page.push_str("<h2>Partition sizes (ANALYZE)</h2>\n");
    page.push_str(&bar_chart("partition-sizes", &size_rows(evidence), None));
    page.push_str("<h2>Busiest second per partition</h2>\n");
    let target = PARTITION_TARGET_PER_S as f64;
    page.push_str(&bar_chart(
        "partition-peaks",
        &peak_rows(evidence),
        Some(target),
    ));
    page.push_str(
        "<p class=\"legend\"><span class=\"key read\"></span> entities read \
         <span class=\"key written\"></span> entities written \
         <span class=\"key target\"></span> 2,000 entities/s, what one partition serves</p>\n",
    );
    page.push_str("</body>\n</html>\n");
    page
}

const HEAD: &str = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
<title>tablesql partition advisor</title>\n<style>\n\
body { font: 14px/1.4 system-ui, sans-serif; margin: 2em; color: #222; background: #fff; }\n\
table { border-collapse: collapse; margin-bottom: 1.5em; }\n\
th, td { border: 1px solid #ccc; padding: 4px 8px; text-align: left; vertical-align: top; }\n\
th { background: #eef; }\n\
.meta, .none { color: #666; }\n\
svg text { font: 12px system-ui, sans-serif; fill: #222; }\n\
svg .heading { font-weight: bold; }\n\
rect.size, .key.size { fill: #4a7bd0; background: #4a7bd0; }\n\
rect.read, .key.read { fill: #2a9d8f; background: #2a9d8f; }\n\
rect.written, .key.written { fill: #e08a2c; background: #e08a2c; }\n\
line.target { stroke: #c0392b; stroke-width: 2; stroke-dasharray: 6 4; }\n\
.key { display: inline-block; width: 12px; height: 12px; margin: 0 4px 0 12px; }\n\
.key.target { background: #c0392b; height: 3px; vertical-align: middle; }\n\
</style>\n</head>\n<body>\n";

fn findings_table(page: &mut String, findings: &[Finding]) {
    page.push_str("<h2>Findings</h2>\n");
    if findings.is_empty() {
        page.push_str("<p class=\"none\">No findings: nothing in the statistics breaks the storage's guidance.</p>\n");
        return;
    }
    page.push_str(
        "<table id=\"findings\">\n<tr><th>Table</th><th>Finding</th><th>Evidence</th><th>Remedy</th></tr>\n",
    );
    for f in findings {
        let _ = writeln!(
            page,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            escape(&f.table),
            escape(f.kind),
            escape(&f.evidence),
            escape(&f.remedy)
        );
    }
    page.push_str("</table>\n");
}

/// One line of a chart.
enum Row {
    /// A table's name over its partitions.
    Heading(String),
    /// A partition: its label, its bars (value, CSS class) one under the
    /// other, and the text after them.
    Bars {
        label: String,
        bars: Vec<(f64, &'static str)>,
        text: String,
    },
    /// A line of text (what was left out, or that there is nothing).
    Note(String),
}

/// Each analyzed table's largest partitions, by entities.
fn size_rows(evidence: &Evidence<'_>) -> Vec<Row> {
    let mut rows = Vec::new();
    for (table, stats) in &evidence.analyzed {
        rows.push(Row::Heading(format!(
            "{table}: {} partitions, {} entities",
            stats.partitions.len(),
            stats.entities()
        )));
        let mut parts: Vec<_> = stats.partitions.iter().collect();
        parts.sort_by_key(|p| std::cmp::Reverse(p.entities));
        for p in parts.iter().take(MOST_BARS) {
            rows.push(Row::Bars {
                label: p.partition.as_str().to_owned(),
                bars: vec![(p.entities as f64, "size")],
                text: format!("{} entities, {} KiB", p.entities, p.bytes / 1024),
            });
        }
        if parts.len() > MOST_BARS {
            let rest = &parts[MOST_BARS..];
            rows.push(Row::Note(format!(
                "and {} smaller partitions, {} entities",
                rest.len(),
                rest.iter().map(|p| p.entities).sum::<u64>()
            )));
        }
    }
    if rows.is_empty() {
        rows.push(Row::Note(
            "No table analyzed: run ANALYZE to measure partition sizes.".into(),
        ));
    }
    rows
}

/// The partitions with the busiest seconds, read and written.
fn peak_rows(evidence: &Evidence<'_>) -> Vec<Row> {
    let mut parts: Vec<_> = evidence.partitions.iter().collect();
    let peak = |p: &&crate::exec::stats::workload::PartitionRow| {
        p.traffic.peak_read_per_s.max(p.traffic.peak_written_per_s)
    };
    parts.sort_by(|a, b| {
        peak(b)
            .cmp(&peak(a))
            .then_with(|| a.partition.cmp(&b.partition))
    });
    let mut rows: Vec<Row> = parts
        .iter()
        .take(MOST_BARS)
        .map(|p| {
            let t = &p.traffic;
            Row::Bars {
                label: format!("{} / {}", p.table, p.partition),
                bars: vec![
                    (t.peak_read_per_s as f64, "read"),
                    (t.peak_written_per_s as f64, "written"),
                ],
                text: format!(
                    "{} read/s, {} written/s",
                    t.peak_read_per_s, t.peak_written_per_s
                ),
            }
        })
        .collect();
    if parts.len() > MOST_BARS {
        rows.push(Row::Note(format!(
            "and {} quieter partitions",
            parts.len() - MOST_BARS
        )));
    }
    if rows.is_empty() {
        rows.push(Row::Note(
            "No traffic recorded since the statistics started.".into(),
        ));
    }
    rows
}

/// A horizontal bar chart as an SVG element with id `id`, scaled to its
/// largest value or to `target`, which is drawn as a dashed line.
fn bar_chart(id: &str, rows: &[Row], target: Option<f64>) -> String {
    let largest = rows
        .iter()
        .flat_map(|r| match r {
            Row::Bars { bars, .. } => bars.iter().map(|b| b.0).collect(),
            _ => Vec::new(),
        })
        .fold(target.unwrap_or(0.0), f64::max);
    let scale = if largest > 0.0 {
        BARS_W / (largest * 1.1)
    } else {
        0.0
    };
    let width = LABEL_W + BARS_W + 220.0;
    let height = ROW_H * rows.len() as f64 + 24.0;
    let mut svg = format!(
        "<svg id=\"{id}\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" \
         height=\"{height}\" viewBox=\"0 0 {width} {height}\">\n"
    );
    for (i, row) in rows.iter().enumerate() {
        let y = ROW_H * i as f64;
        let text_y = y + 14.0;
        match row {
            Row::Heading(h) => {
                let _ = writeln!(
                    svg,
                    "<text class=\"heading\" x=\"0\" y=\"{text_y}\">{}</text>",
                    escape(h)
                );
            }
            Row::Note(n) => {
                let _ = writeln!(svg, "<text x=\"8\" y=\"{text_y}\">{}</text>", escape(n));
            }
            Row::Bars { label, bars, text } => {
                let _ = writeln!(
                    svg,
                    "<text x=\"8\" y=\"{text_y}\">{}</text>",
                    escape(&shorten(label))
                );
                let h = (ROW_H - 4.0) / bars.len() as f64;
                let mut end: f64 = 0.0;
                for (j, (value, class)) in bars.iter().enumerate() {
                    let w = (value * scale).max(if *value > 0.0 { 1.0 } else { 0.0 });
                    end = end.max(w);
                    let _ = writeln!(
                        svg,
                        "<rect class=\"{class}\" x=\"{LABEL_W}\" y=\"{:.1}\" width=\"{w:.1}\" \
                         height=\"{h:.1}\"><title>{}</title></rect>",
                        y + 2.0 + h * j as f64,
                        escape(text)
                    );
                }
                let _ = writeln!(
                    svg,
                    "<text x=\"{:.1}\" y=\"{text_y}\">{}</text>",
                    LABEL_W + end + 6.0,
                    escape(text)
                );
            }
        }
    }
    if let Some(t) = target {
        let x = LABEL_W + t * scale;
        let bottom = height - 20.0;
        let _ = writeln!(
            svg,
            "<line class=\"target\" x1=\"{x:.1}\" y1=\"0\" x2=\"{x:.1}\" y2=\"{bottom:.1}\"/>\n\
             <text x=\"{:.1}\" y=\"{:.1}\">{t:.0} entities/s</text>",
            x - 40.0,
            height - 6.0
        );
    }
    svg.push_str("</svg>\n");
    svg
}

/// A label cut to fit its column.
fn shorten(label: &str) -> String {
    const MOST: usize = 44;
    if label.chars().count() <= MOST {
        return label.to_owned();
    }
    let mut s: String = label.chars().take(MOST - 1).collect();
    s.push('…');
    s
}

/// Text as HTML (and SVG) character data or attribute value: keys and
/// statements are the user's, and may hold markup.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::stats::{PartitionStats, TableStats};
    use crate::exec::stats::workload::{PartitionRow, PartitionTraffic};
    use crate::storage::PartitionKey;

    #[test]
    fn the_page_draws_both_charts_and_escapes_keys() {
        let stats = TableStats {
            taken: Utc::now(),
            guidepost_every: 100,
            counted: false,
            partitions: (0..50)
                .map(|i| PartitionStats {
                    partition: PartitionKey::new(format!("<p{i}>")).expect("key"),
                    entities: 10 + i,
                    bytes: 1000,
                    largest: 100,
                    widest: 3,
                    guideposts: Vec::new(),
                    oldest: None,
                    newest: None,
                    prefixes: Default::default(),
                })
                .collect(),
        };
        let mut traffic = PartitionTraffic::default();
        traffic.peak_read_per_s = 3000;
        let evidence = Evidence {
            analyzed: vec![("T".into(), &stats)],
            partitions: vec![PartitionRow {
                table: "T".into(),
                partition: "hot".into(),
                traffic,
            }],
            ..Evidence::default()
        };
        let page = html(&[], &evidence, Utc::now());
        assert!(page.contains("<svg id=\"partition-sizes\""));
        assert!(page.contains("<svg id=\"partition-peaks\""));
        assert!(page.contains("<line class=\"target\""));
        assert!(page.contains("&lt;p49&gt;") && !page.contains("<p49>"));
        assert!(page.contains("and 10 smaller partitions, 145 entities"));
        assert_eq!(page.matches("<rect class=\"size\"").count(), MOST_BARS);
    }
}
