//! The partition advisor's findings, each with its evidence and its remedy
//! in the storage guidance's terms (`../shared/DOMAIN.md`): from `ANALYZE`'s
//! partition sizes and the workload statistics. Pure: the caller gathers
//! the figures.

use crate::catalog::stats::TableStats;

use super::key_order::KeyOrder;
use super::workload::{PartitionRow, StatementStats, TableRow};

/// What one partition serves per second, by the storage's targets.
pub const PARTITION_TARGET_PER_S: u64 = 2000;
/// Share of a table's entities in one partition past which it is flagged.
const CONCENTRATED: f64 = 0.5;
/// Share of point queries below which a workload is flagged.
const FEW_POINTS: f64 = 0.5;
/// Density (returned / scanned) below which a statement is flagged.
const SPARSE: f64 = 0.1;
/// Calls and entities below which the figures say too little to flag.
const ENOUGH_CALLS: u64 = 20;
const ENOUGH_SCANNED: u64 = 1000;
/// Entities below which a table's spread says too little to flag.
const ENOUGH_ENTITIES: u64 = 100;
/// Share of compared writes at the end of the key range past which the
/// writes are append-only (or prepend-only).
const AT_THE_END: f64 = 0.9;
/// Compared writes, and statements that made a new last (first) partition,
/// below which the order says too little to flag.
const ENOUGH_WRITES: u64 = 50;
const ENOUGH_NEW_ENDS: u64 = 5;

/// One finding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// The storage table it is about; empty for the workload as a whole.
    pub table: String,
    /// A short name (`one_partition`, `hot_partition`, ...).
    pub kind: &'static str,
    /// The figures that show it.
    pub evidence: String,
    /// What the guidance says to do.
    pub remedy: String,
}

/// What the advisor reads: `ANALYZE`'s statistics and the workload's.
#[derive(Debug, Default)]
pub struct Evidence<'a> {
    /// Analyzed storage tables.
    pub analyzed: Vec<(String, &'a TableStats)>,
    /// Each partition's traffic.
    pub partitions: Vec<PartitionRow>,
    /// Each statement's runs.
    pub statements: Vec<(String, StatementStats)>,
    /// Each storage table's traffic, its writes' key order among it.
    pub tables: Vec<TableRow>,
}

/// The findings `evidence` supports.
pub fn advise(evidence: &Evidence<'_>) -> Vec<Finding> {
    let mut out = Vec::new();
    for (table, s) in &evidence.analyzed {
        concentrated(table, s, &mut out);
        near_limits(table, s, &mut out);
        written_in_key_order(table, s, &mut out);
    }
    for t in &evidence.tables {
        at_the_end(&t.table, &t.order, &mut out);
        too_few_partitions(t, &evidence.analyzed, &mut out);
    }
    hot(&evidence.partitions, &mut out);
    unbatched(&evidence.partitions, &evidence.statements, &mut out);
    few_points(&evidence.statements, &mut out);
    wide_reads(&evidence.statements, &evidence.analyzed, &mut out);
    read_then_write(&evidence.statements, &mut out);
    sparse(&evidence.statements, &mut out);
    costly(&evidence.statements, &mut out);
    out
}

/// One partition holds most of an analyzed table.
fn concentrated(table: &str, stats: &TableStats, out: &mut Vec<Finding>) {
    let total = stats.entities();
    let Some(largest) = stats.partitions.iter().max_by_key(|p| p.entities) else {
        return;
    };
    if total < ENOUGH_ENTITIES || (largest.entities as f64) < CONCENTRATED * total as f64 {
        return;
    }
    let share = 100.0 * largest.entities as f64 / total as f64;
    let evidence = if stats.partitions.len() == 1 {
        format!(
            "all {total} entities are in one partition, {:?} (ANALYZE of {})",
            largest.partition.as_str(),
            stats.taken.format("%Y-%m-%d %H:%M UTC")
        )
    } else {
        format!(
            "partition {:?} holds {share:.0}% of the table ({} of {total} entities in {} partitions; ANALYZE of {})",
            largest.partition.as_str(),
            largest.entities,
            stats.partitions.len(),
            stats.taken.format("%Y-%m-%d %H:%M UTC")
        )
    };
    out.push(Finding {
        table: table.to_owned(),
        kind: "one_partition",
        evidence,
        remedy: format!(
            "choose a PartitionKey with more distinct values that queries still name, so that \
             the load spreads: one partition serves about {PARTITION_TARGET_PER_S} entities/s"
        ),
    });
}

/// Share of the storage's limits on one entity past which it is flagged.
const NEAR_LIMIT: f64 = 0.8;

/// Entities near the storage's 1 MiB or 252 properties: the next column or
/// a longer value will be refused.
fn near_limits(table: &str, stats: &TableStats, out: &mut Vec<Finding>) {
    use crate::storage::entity::{MAX_ENTITY_BYTES, MAX_PROPERTIES};
    let largest = stats.partitions.iter().max_by_key(|p| p.largest);
    let widest = stats.partitions.iter().max_by_key(|p| p.widest);
    let mut near = Vec::new();
    if let Some(p) = largest.filter(|p| p.largest as f64 >= NEAR_LIMIT * MAX_ENTITY_BYTES as f64) {
        near.push(format!(
            "an entity of {} KiB in partition {:?} (the limit is 1024 KiB)",
            p.largest / 1024,
            p.partition.as_str()
        ));
    }
    if let Some(p) = widest.filter(|p| p.widest as f64 >= NEAR_LIMIT * MAX_PROPERTIES as f64) {
        near.push(format!(
            "an entity with {} properties in partition {:?} (the limit is {MAX_PROPERTIES})",
            p.widest,
            p.partition.as_str()
        ));
    }
    if near.is_empty() {
        return;
    }
    out.push(Finding {
        table: table.to_owned(),
        kind: "near_entity_limits",
        evidence: format!("{} (ANALYZE)", near.join("; ")),
        remedy: "split what grows into entities of their own (a RowKey per part under the \
                 same PartitionKey, read together by a RowKey prefix), or keep large values \
                 in blob storage and their address in the entity"
            .into(),
    });
}

/// A table whose busiest second, spread over all its partitions, comes near
/// what they serve together: it needs more partitions, not other ones.
fn too_few_partitions(t: &TableRow, analyzed: &[(String, &TableStats)], out: &mut Vec<Finding>) {
    let partitions = analyzed
        .iter()
        .find(|(name, _)| *name == t.table)
        .map_or(t.partitions, |(_, s)| s.partitions.len())
        .max(1) as u64;
    let peak = t.totals.peak_read_per_s.max(t.totals.peak_written_per_s);
    if peak * 10 < PARTITION_TARGET_PER_S * partitions * 8 {
        return;
    }
    out.push(Finding {
        table: t.table.clone(),
        kind: "too_few_partitions",
        evidence: format!(
            "its busiest second served {peak} entities over {partitions} partitions, {} each \
             if spread evenly, against about {PARTITION_TARGET_PER_S}/s a partition serves",
            peak / partitions
        ),
        remedy: "a finer PartitionKey (add a column the queries name, or a bucket number) \
                 so that the peak spreads over enough partitions to stay under 2,000/s each"
            .into(),
    });
}

/// New writes always land at the end of the key range (or its start).
fn at_the_end(table: &str, o: &KeyOrder, out: &mut Vec<Finding>) {
    if o.compared < ENOUGH_WRITES {
        return;
    }
    let ends = [
        ("append_only", "last", o.at_last, o.new_last, o.last()),
        ("prepend_only", "first", o.at_first, o.new_first, o.first()),
    ];
    for (kind, end, at, new, key) in ends {
        if new < ENOUGH_NEW_ENDS || (at as f64) < AT_THE_END * o.compared as f64 {
            continue;
        }
        let evidence = format!(
            "{at} of {} entities written went to the {end} PartitionKey written before \
             or past it; {new} statements made a new {end} partition (now {:?})",
            o.compared,
            key.unwrap_or_default()
        );
        // The same finding from the data (`written_in_key_order`): one
        // finding, both evidences, the workload's first.
        if let Some(f) = out.iter_mut().find(|f| f.table == table && f.kind == kind) {
            f.evidence = format!("{evidence}; {}", f.evidence);
            continue;
        }
        out.push(Finding {
            table: table.to_owned(),
            kind,
            evidence,
            remedy: at_the_end_remedy(end),
        });
    }
}

fn at_the_end_remedy(end: &str) -> String {
    format!(
        "a date or a counter as PartitionKey sends every insert to the {end} range \
         partition, one server at about {PARTITION_TARGET_PER_S} entities/s: put a hash \
         or a bucket number before it (\"07_2026-11-23\"), or key by what is written \
         concurrently, and keep the time in the RowKey"
    )
}

/// Partitions with a Timestamp below which their order says too little.
const ENOUGH_PARTITIONS_IN_TIME: usize = 8;
/// Rank correlation between PartitionKey order and the newest write of each
/// partition past which writes follow the keys' order.
const FOLLOWS_KEYS: f64 = 0.9;
/// Time over which those newest writes must spread: a table loaded once in
/// key order, within seconds (`tablesql demo`, a sorted `tablesql load`),
/// is no workload that keeps writing at its end.
const IN_TIME_SPAN: chrono::TimeDelta = chrono::TimeDelta::seconds(2);

/// From `ANALYZE`'s data alone: each partition's newest Timestamp rises
/// with its PartitionKey (the newest writes all at the last partitions:
/// append-only) or falls (prepend-only), by Spearman's rank correlation
/// over the partitions.
fn written_in_key_order(table: &str, stats: &TableStats, out: &mut Vec<Finding>) {
    let timed: Vec<_> = stats
        .partitions
        .iter()
        .filter_map(|p| p.newest.map(|at| (p, at)))
        .collect();
    if timed.len() < ENOUGH_PARTITIONS_IN_TIME {
        return;
    }
    let newest: Vec<i64> = timed
        .iter()
        .map(|(_, at)| at.timestamp_nanos_opt().unwrap_or(i64::MAX))
        .collect();
    let (Some(earliest), Some(latest)) = (
        timed.iter().map(|(_, at)| *at).min(),
        timed.iter().map(|(_, at)| *at).max(),
    ) else {
        return;
    };
    let span = latest - earliest;
    if span < IN_TIME_SPAN {
        return;
    }
    let Some(rho) = rank_correlation(&newest) else {
        return;
    };
    let (kind, end, rises) = if rho >= FOLLOWS_KEYS {
        ("append_only", "last", "rises")
    } else if rho <= -FOLLOWS_KEYS {
        ("prepend_only", "first", "falls")
    } else {
        return;
    };
    let at = |i: usize| {
        let (p, at) = timed[i];
        format!(
            "{:?} at {}",
            p.partition.as_str(),
            at.format("%Y-%m-%d %H:%M:%S%.3f UTC")
        )
    };
    let (first, last) = (at(0), at(timed.len() - 1));
    out.push(Finding {
        table: table.to_owned(),
        kind,
        evidence: format!(
            "the newest write (Timestamp) of each of its {} partitions {rises} with the \
             PartitionKey (rank correlation {rho:.2} over {}; ANALYZE of {}): the first, \
             {first}, the last, {last}",
            timed.len(),
            duration(span),
            stats.taken.format("%Y-%m-%d %H:%M UTC")
        ),
        remedy: at_the_end_remedy(end),
    });
}

/// A time span as a person says it: `2.8 s`, `14 min`, `3.5 h`, `12 days`.
fn duration(span: chrono::TimeDelta) -> String {
    let secs = span.as_seconds_f64();
    match secs {
        s if s < 120.0 => format!("{s:.1} s"),
        s if s < 7200.0 => format!("{:.0} min", s / 60.0),
        s if s < 172_800.0 => format!("{:.1} h", s / 3600.0),
        s => format!("{:.0} days", s / 86_400.0),
    }
}

/// Spearman's rank correlation between the positions `0..n` of `values`
/// and their ranks (ties share their mean rank); `None` when the values
/// are all equal.
fn rank_correlation(values: &[i64]) -> Option<f64> {
    let n = values.len();
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by_key(|&i| values[i]);
    let mut ranks = vec![0.0; n];
    let mut i = 0;
    while i < n {
        let mut j = i;
        while j + 1 < n && values[order[j + 1]] == values[order[i]] {
            j += 1;
        }
        let mean = (i + j) as f64 / 2.0;
        for &k in &order[i..=j] {
            ranks[k] = mean;
        }
        i = j + 1;
    }
    let centre = (n as f64 - 1.0) / 2.0;
    let (mut cov, mut var_x, mut var_y) = (0.0, 0.0, 0.0);
    for (x, y) in ranks.iter().enumerate() {
        let (dx, dy) = (x as f64 - centre, y - centre);
        cov += dx * dy;
        var_x += dx * dx;
        var_y += dy * dy;
    }
    (var_y > 0.0).then(|| cov / (var_x * var_y).sqrt())
}

/// A partition whose peak second came near the target.
fn hot(partitions: &[PartitionRow], out: &mut Vec<Finding>) {
    for p in partitions {
        let t = &p.traffic;
        let peak = t.peak_read_per_s.max(t.peak_written_per_s);
        if peak * 10 < PARTITION_TARGET_PER_S * 8 {
            continue;
        }
        out.push(Finding {
            table: p.table.clone(),
            kind: "hot_partition",
            evidence: format!(
                "partition {:?} served {} entities read and {} written in its busiest second, \
                 against about {PARTITION_TARGET_PER_S}/s a partition serves",
                p.partition, t.peak_read_per_s, t.peak_written_per_s
            ),
            remedy: "spread the keys that are read or written together over more partitions \
                     (a hash or a bucket number in the PartitionKey), or serve repeated reads \
                     from a cache"
                .into(),
        });
    }
}

/// Writes, and writes in one second, past which a partition's small writes
/// are worth batching; entities per write below which they are small.
const MANY_WRITES: u64 = 100;
const WRITES_TOGETHER: u64 = 10;
const SMALL_WRITE: f64 = 5.0;

/// A partition written many times, a few entities at a time, close together,
/// by an INSERT run again and again for a row or two: rows one client could
/// send together. (Updates of single rows by many users cannot be batched.)
fn unbatched(
    partitions: &[PartitionRow],
    statements: &[(String, StatementStats)],
    out: &mut Vec<Finding>,
) {
    for p in partitions {
        let t = &p.traffic;
        let per_write = t.written as f64 / t.writes.max(1) as f64;
        if t.writes < MANY_WRITES
            || t.peak_writes_per_s < WRITES_TOGETHER
            || per_write >= SMALL_WRITE
        {
            continue;
        }
        let insert = statements.iter().find(|(q, s)| {
            starts_with_word(q, "INSERT")
                && s.table.as_deref() == Some(p.table.as_str())
                && s.calls >= MANY_WRITES
                && (s.rows as f64) < SMALL_WRITE * s.calls as f64
        });
        let Some((insert, s)) = insert else {
            continue;
        };
        out.push(Finding {
            table: p.table.clone(),
            kind: "unbatched_writes",
            evidence: format!(
                "partition {:?} took {} writes of {} entities ({per_write:.1} a write, index rows \
                 included), up to {} writes in one second; {insert:?} ran {} times for {} rows",
                p.partition, t.writes, t.written, t.peak_writes_per_s, s.calls, s.rows
            ),
            remedy: "writes to one partition can go together in one entity group transaction \
                     of up to 100 operations: one INSERT of many rows, COPY or tablesql load, \
                     instead of a statement a row"
                .into(),
        });
    }
}

/// Few of the workload's reads are point queries.
fn few_points(statements: &[(String, StatementStats)], out: &mut Vec<Finding>) {
    let reads = statements.iter().filter(|(_, s)| s.path != "none");
    let (calls, points) = reads.fold((0, 0), |(c, p), (_, s)| {
        let point = s.path == "point" || s.path == "index_point";
        (c + s.calls, p + if point { s.calls } else { 0 })
    });
    if calls < ENOUGH_CALLS || points as f64 >= FEW_POINTS * calls as f64 {
        return;
    }
    out.push(Finding {
        table: String::new(),
        kind: "few_point_queries",
        evidence: format!(
            "{points} of {calls} reads ({:.0}%) were point queries",
            100.0 * points as f64 / calls as f64
        ),
        remedy: "name the PartitionKey and RowKey in the queries that run most, or keep \
                 index rows whose RowKey starts with what they filter on"
            .into(),
    });
}

/// Mean entity size, and properties, from which a table's entities are wide.
const WIDE_BYTES: u64 = 1024;
const WIDE_PROPERTIES: u64 = 30;

/// Statements that read whole wide entities: every property of every
/// entity in a range, with nothing filtered or left out by the store.
fn wide_reads(
    statements: &[(String, StatementStats)],
    analyzed: &[(String, &TableStats)],
    out: &mut Vec<Finding>,
) {
    for (query, s) in statements {
        let Some(table) = &s.whole else {
            continue;
        };
        let Some((_, stats)) = analyzed.iter().find(|(t, _)| t == table) else {
            continue;
        };
        let entities = stats.entities().max(1);
        let mean = stats.partitions.iter().map(|p| p.bytes).sum::<u64>() / entities;
        let widest = stats.partitions.iter().map(|p| p.widest).max().unwrap_or(0);
        if s.scanned < ENOUGH_SCANNED || (mean < WIDE_BYTES && widest < WIDE_PROPERTIES) {
            continue;
        }
        out.push(Finding {
            table: table.clone(),
            kind: "wide_reads",
            evidence: format!(
                "{query:?} read {} whole entities in {} calls, without a filter or a projection; \
                 the table's entities average {mean} bytes, up to {widest} properties (ANALYZE)",
                s.scanned, s.calls
            ),
            remedy: "name the columns the statement needs instead of *, so that the store sends \
                     only them ($select), and filter on the keys or on what the store can filter"
                .into(),
        });
    }
}

/// Whether a normalized statement starts with `word` (any case).
fn starts_with_word(query: &str, word: &str) -> bool {
    query
        .get(..word.len())
        .is_some_and(|w| w.eq_ignore_ascii_case(word))
        && query[word.len()..].starts_with(char::is_whitespace)
}

/// A point read of a table that an UPDATE of it by key follows about as often: the
/// workload reads a row by its key to decide how to write it, two round
/// trips and a conditional write where one upsert would do.
fn read_then_write(statements: &[(String, StatementStats)], out: &mut Vec<Finding>) {
    let is_point = |s: &StatementStats| s.path == "point" || s.path == "index_point";
    for (read, r) in statements {
        if !starts_with_word(read, "SELECT") || !is_point(r) || r.calls < ENOUGH_CALLS {
            continue;
        }
        let Some(table) = &r.table else {
            continue;
        };
        // An UPDATE by key: the row read is the row written.
        let write = statements.iter().find(|(q, w)| {
            starts_with_word(q, "UPDATE")
                && is_point(w)
                && w.table.as_ref() == Some(table)
                && w.calls * 2 >= r.calls
                && w.calls <= r.calls * 2
        });
        let Some((write, w)) = write else {
            continue;
        };
        out.push(Finding {
            table: table.to_string(),
            kind: "read_then_write",
            evidence: format!(
                "{read:?} ({} calls) reads by key the rows {write:?} ({} calls) then writes",
                r.calls, w.calls
            ),
            remedy: "write in one statement: INSERT ... ON CONFLICT (key) DO UPDATE (an upsert, \
                     one InsertOrMerge or InsertOrReplace), or an UPDATE that computes the new \
                     value itself (SET n = n + 1), instead of reading first"
                .into(),
        });
    }
}

/// Statements that examine far more than they return.
fn sparse(statements: &[(String, StatementStats)], out: &mut Vec<Finding>) {
    for (query, s) in statements {
        if s.scanned < ENOUGH_SCANNED || s.returned as f64 >= SPARSE * s.scanned as f64 {
            continue;
        }
        out.push(Finding {
            table: String::new(),
            kind: "low_density",
            evidence: format!(
                "{query:?} examined {} entities and returned {} in {} calls (density {:.3}, {})",
                s.scanned,
                s.returned,
                s.calls,
                s.returned as f64 / s.scanned as f64,
                s.path
            ),
            remedy: "filter on the keys so that the store reads what it returns: a PartitionKey \
                     and a RowKey range, or an index row for the column filtered on"
                .into(),
        });
    }
}

/// The most statements `costly` names.
const MOST_COSTLY: usize = 3;
/// Share of the workload's transactions below which a statement is not
/// named among the costliest, and transactions below which the bill says
/// too little to name any.
const COSTLY_SHARE: f64 = 0.1;
const ENOUGH_TRANSACTIONS: u64 = 1000;

/// The statements that cost the most billable transactions (on Azure,
/// money): each of the few costliest that makes a good part of the
/// workload's bill, with a remedy for the kind it spent most on.
fn costly(statements: &[(String, StatementStats)], out: &mut Vec<Finding>) {
    let all: u64 = statements.iter().map(|(_, s)| s.bill.total()).sum();
    if all < ENOUGH_TRANSACTIONS {
        return;
    }
    let mut ranked: Vec<&(String, StatementStats)> = statements.iter().collect();
    ranked.sort_by(|(qa, a), (qb, b)| b.bill.total().cmp(&a.bill.total()).then(qa.cmp(qb)));
    for (query, s) in ranked.into_iter().take(MOST_COSTLY) {
        let total = s.bill.total();
        if (total as f64) < COSTLY_SHARE * all as f64 {
            break;
        }
        let most = s
            .bill
            .by_kind()
            .into_iter()
            .max_by_key(|(_, n)| *n)
            .map_or("", |(kind, _)| kind);
        let remedy = match most {
            "point_reads" => {
                "read the keys of a partition together (a join or IN list on the key, which \
                 reads a run of keys a request) rather than a statement a key"
            }
            "batches" | "writes" => {
                "write the rows of a partition together, up to 100 to a batch: one INSERT of \
                 many rows, COPY or tablesql load, instead of a statement a row"
            }
            _ => {
                "read fewer pages: filter on the keys (a PartitionKey and a RowKey range), \
                 page with a LIMIT and a key bound, or keep index rows for the column filtered \
                 on; EXPLAIN shows a plan's estimated bill"
            }
        };
        out.push(Finding {
            table: s.table.as_deref().unwrap_or_default().to_owned(),
            kind: "costly_statement",
            evidence: format!(
                "{query:?} cost {} billable transactions in {} calls ({:.1} a call), {:.0}% of \
                 the workload's {all}",
                s.bill,
                s.calls,
                total as f64 / s.calls.max(1) as f64,
                100.0 * total as f64 / all as f64
            ),
            remedy: remedy.into(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::stats::PartitionStats;
    use crate::storage::PartitionKey;

    fn stats(sizes: &[u64]) -> TableStats {
        TableStats {
            taken: chrono::Utc::now(),
            guidepost_every: 100,
            counted: false,
            partitions: sizes
                .iter()
                .enumerate()
                .map(|(i, &n)| PartitionStats {
                    partition: PartitionKey::new(format!("p{i}")).expect("key"),
                    entities: n,
                    bytes: n * 100,
                    largest: 100,
                    widest: 3,
                    guideposts: Vec::new(),
                    oldest: None,
                    newest: None,
                    prefixes: Default::default(),
                })
                .collect(),
        }
    }

    #[test]
    fn the_costliest_statements_are_named_with_a_remedy_for_what_they_spent_most_on() {
        use crate::storage::bill::Transactions;
        let run = |calls, query_pages, point_reads, batches| StatementStats {
            calls,
            bill: Transactions {
                query_pages,
                point_reads,
                batches,
                ..Transactions::default()
            },
            ..StatementStats::default()
        };
        let statements = vec![
            ("SELECT * FROM a".to_owned(), run(10, 9000, 0, 0)),
            (
                "SELECT x FROM b WHERE k = $1".to_owned(),
                run(3000, 0, 3000, 0),
            ),
            (
                "INSERT INTO c VALUES ($1)".to_owned(),
                run(2000, 0, 0, 2000),
            ),
            ("SELECT 1".to_owned(), run(50, 50, 0, 0)),
        ];
        let mut out = Vec::new();
        costly(&statements, &mut out);
        let named: Vec<(&str, &str)> = out
            .iter()
            .map(|f| (f.evidence.split('"').nth(1).unwrap_or(""), &f.remedy[..10]))
            .collect();
        assert_eq!(
            named,
            [
                ("SELECT * FROM a", "read fewer"),
                ("SELECT x FROM b WHERE k = $1", "read the k"),
                ("INSERT INTO c VALUES ($1)", "write the "),
            ]
        );
        assert!(
            out[0].evidence.contains(
                "cost 9000 (query_pages=9000) billable transactions in 10 \
                                      calls (900.0 a call), 64% of the workload's 14050"
            ),
            "{}",
            out[0].evidence
        );
        // Too small a bill to say anything.
        let mut none = Vec::new();
        costly(&statements[3..], &mut none);
        assert!(none.is_empty());
    }

    #[test]
    fn a_partition_with_most_of_the_table_is_flagged_and_an_even_spread_is_not() {
        let even = stats(&[100, 100, 100, 100]);
        let skewed = stats(&[10, 900, 90]);
        let found = advise(&Evidence {
            analyzed: vec![("T".into(), &even), ("U".into(), &skewed)],
            ..Evidence::default()
        });
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(
            (found[0].table.as_str(), found[0].kind),
            ("U", "one_partition")
        );
        assert!(found[0].evidence.contains("90%"), "{}", found[0].evidence);
    }

    #[test]
    fn entities_near_the_limits_are_flagged() {
        let mut big = stats(&[10, 10]);
        big.partitions[1].largest = 900 * 1024;
        let mut wide = stats(&[10]);
        wide.partitions[0].widest = 240;
        let found = advise(&Evidence {
            analyzed: vec![
                ("Big".into(), &big),
                ("Wide".into(), &wide),
                ("T".into(), &stats(&[10])),
            ],
            ..Evidence::default()
        });
        let kinds: Vec<_> = found.iter().map(|f| (f.table.as_str(), f.kind)).collect();
        assert_eq!(
            kinds,
            [
                ("Big", "near_entity_limits"),
                ("Wide", "near_entity_limits")
            ]
        );
        assert!(
            found[0].evidence.contains("900 KiB in partition \"p1\""),
            "{found:?}"
        );
        assert!(found[1].evidence.contains("240 properties"), "{found:?}");
    }

    #[test]
    fn partitions_written_in_key_order_are_append_only_from_the_data() {
        let start = chrono::Utc::now();
        let timed_by = |order: &dyn Fn(i64) -> i64, unit_ms: i64| {
            let mut s = stats(&[10; 12]);
            for (i, p) in s.partitions.iter_mut().enumerate() {
                let at = start + chrono::Duration::milliseconds(order(i as i64) * unit_ms);
                (p.oldest, p.newest) = (Some(at), Some(at));
            }
            s
        };
        let timed = |order: &dyn Fn(i64) -> i64| timed_by(order, 1000);
        // Loaded once, in key order, within a second: not flagged.
        let quick = timed_by(&|i| i, 50);
        let up = timed(&|i| i);
        let down = timed(&|i| 100 - i);
        let spread = timed(&|i| (i * 5) % 12);
        let same = timed(&|_| 0);
        let found = advise(&Evidence {
            analyzed: vec![
                ("Up".into(), &up),
                ("Down".into(), &down),
                ("Spread".into(), &spread),
                ("Same".into(), &same),
                ("Quick".into(), &quick),
                ("Old".into(), &stats(&[10; 12])),
            ],
            ..Evidence::default()
        });
        let kinds: Vec<_> = found.iter().map(|f| (f.table.as_str(), f.kind)).collect();
        assert_eq!(kinds, [("Up", "append_only"), ("Down", "prepend_only")]);
        assert!(
            found[0]
                .evidence
                .contains("rank correlation 1.00 over 11.0 s")
                && found[0].evidence.contains("the last, \"p11\""),
            "{found:?}"
        );
        assert!(found[1].evidence.contains("-1.00"), "{found:?}");
        assert_eq!(rank_correlation(&[1, 1, 2, 2]).map(|r| r > 0.8), Some(true));
        assert_eq!(rank_correlation(&[3, 3, 3]), None);
    }

    #[test]
    fn writes_at_the_end_of_the_key_range_are_append_only() {
        let mut up = KeyOrder::default();
        let mut spread = KeyOrder::default();
        for i in 0..100u64 {
            let (k, s) = (format!("{i:04}"), format!("{:04}", (i * 37) % 100));
            up.statement(&k, &k, 1);
            spread.statement(&s, &s, 1);
        }
        let found = advise(&Evidence {
            tables: [("Up", up), ("Spread", spread)]
                .into_iter()
                .map(|(table, order)| TableRow {
                    table: table.into(),
                    order,
                    ..TableRow::default()
                })
                .collect(),
            ..Evidence::default()
        });
        let kinds: Vec<_> = found.iter().map(|f| (f.table.as_str(), f.kind)).collect();
        assert_eq!(kinds, [("Up", "append_only")], "{found:?}");
        assert!(found[0].evidence.starts_with("99 of 99"), "{found:?}");
    }
}
