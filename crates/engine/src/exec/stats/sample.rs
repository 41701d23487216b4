//! Sampled `ANALYZE` (`tablesql.analyze_sample`): statistics refreshed from
//! a few runs of pages, so that a big table costs requests in proportion
//! to the sample, not to the table.
//!
//! Table Storage has no random access and no counts: a query starts at a
//! key and reads forward. A sample therefore needs start points in key
//! space, and the only map of it is the last statistics: the partitions,
//! their entities and their guideposts. So a sampled `ANALYZE` places
//! probes at evenly spaced entity positions of that map (from a random
//! phase, so that successive samples visit different places), reads a run
//! of entities forward from each (a chain of pages, as many entities as
//! the sample's share), and merges what the runs show into the map:
//! - a partition a run read from its first entity to its last is measured
//!   exactly;
//! - a partition read in part is estimated: its entities from the run's
//!   density against the old guideposts it passed (the Horvitz-Thompson
//!   way: growth even along a partition is measured wherever a run lands;
//!   growth in one place only where one does, as appends at a partition's
//!   end where a run reads to it), its bytes from the run's average size,
//!   its key-prefix counts scaled with its entities;
//! - a partition gone from a key span a run read whole is dropped;
//! - every other partition keeps its last statistics.
//!
//! Without last statistics there is no map to place probes on, and the
//! first `ANALYZE` reads the whole table (the caller's rule). Only the
//! partitions whose statistics changed are written back.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

use chrono::Utc;
use futures::stream::{self, StreamExt, TryStreamExt};

use super::analyze::{Analysis, Partition};
use crate::catalog::stats::{KeyPrefixes, PartitionStats, TableStats};
use crate::storage::{
    ContinuationToken, KeyRange, PartitionKey, Query, Result, RowKey, TableName, TableStore,
};

/// Entities in one page of the service's.
const PAGE: u64 = 1_000;

/// Where one probe starts in the last statistics, and how far it reads.
#[derive(Debug, Clone, PartialEq)]
pub struct Probe {
    /// Its partition, an index into the last statistics' partitions.
    pub at: usize,
    /// The guidepost it starts at (an index into the partition's), reading
    /// that partition only; `None`: at the partition's first entity,
    /// reading on into the partitions after it.
    pub from: Option<usize>,
    /// Entities it reads.
    pub entities: u64,
}

/// The probes of a sample of `sample` entities over `before`: runs at
/// evenly spaced entity positions, the first `phase` (0 to 1) of a spacing
/// in. A run is long enough to pass a few old guideposts (a density is
/// measured against them) and a page at least.
pub fn probes(before: &TableStats, sample: u64, phase: f64) -> Vec<Probe> {
    let total = before.entities();
    if total == 0 || sample == 0 {
        return Vec::new();
    }
    let per_probe = (4 * before.guidepost_every).max(PAGE).min(sample);
    let count = sample.div_ceil(per_probe);
    let spacing = total as f64 / count as f64;
    let phase = phase.clamp(0.0, 0.999);
    let mut out: Vec<Probe> = Vec::new();
    let (mut at, mut passed) = (0, 0u64);
    for i in 0..count {
        let x = ((i as f64 + phase) * spacing) as u64;
        while at + 1 < before.partitions.len() && passed + before.partitions[at].entities <= x {
            passed += before.partitions[at].entities;
            at += 1;
        }
        let Some(p) = before.partitions.get(at) else {
            break;
        };
        // A run near a big partition's end starts a run's length before
        // it, so that it spans enough old guideposts to measure a density.
        let mut offset = x.saturating_sub(passed);
        if p.entities > per_probe {
            offset = offset.min(p.entities - per_probe);
        }
        // A partition a run holds is read whole, from its start.
        let from = match p.entities <= per_probe {
            true => None,
            false => guidepost_before(p, before.guidepost_every, offset),
        };
        if out.last().is_none_or(|l| (l.at, l.from) != (at, from)) {
            out.push(Probe {
                at,
                from,
                entities: per_probe,
            });
        }
    }
    out
}

/// Entities between a partition's guideposts, taken one every `every`:
/// `ANALYZE` put one at entity `step`, `2 * step`, ... with the step
/// `every` doubled as often as they passed the most kept, so the step is
/// the one that many guideposts fit. Where none does (an estimated
/// partition, whose count moved and guideposts not), the average.
fn step(p: &PartitionStats, every: u64) -> u64 {
    let (last, n) = (p.entities.saturating_sub(1), p.guideposts.len() as u64);
    let mut step = every.max(1);
    while last / step > n {
        step *= 2;
    }
    if last / step == n {
        step
    } else {
        (p.entities / (n + 1)).max(1)
    }
}

/// The last guidepost at or before entity `offset` of partition `p`.
fn guidepost_before(p: &PartitionStats, every: u64, offset: u64) -> Option<usize> {
    let passed = (offset / step(p, every)).min(p.guideposts.len() as u64) as usize;
    passed.checked_sub(1)
}

/// What a sampled `ANALYZE` did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SampleReport {
    /// Queries sent.
    pub requests: u64,
    /// Entities read.
    pub entities: u64,
    /// Partitions read whole, so measured exactly.
    pub measured: usize,
    /// Partitions read in part, so estimated.
    pub estimated: usize,
    /// Partitions found gone.
    pub gone: usize,
}

impl std::fmt::Display for SampleReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "sampled {} entities in {} requests: {} partitions measured, {} estimated, {} gone, the others as last analyzed",
            self.entities, self.requests, self.measured, self.estimated, self.gone
        )
    }
}

/// A sampled `ANALYZE`'s result: the statistics, and what to write back.
#[derive(Debug, Clone)]
pub struct Sampled {
    /// The table's statistics now, as well as the sample tells them.
    pub stats: TableStats,
    /// The partitions whose statistics changed (new ones included).
    pub changed: Vec<PartitionStats>,
    /// The partitions found gone.
    pub gone: Vec<PartitionKey>,
    /// What it did.
    pub report: SampleReport,
}

/// The statistics of `table`, refreshed from a sample of `how.sample`
/// entities placed by `before` (which must hold entities: see the module).
pub async fn analyze_sampled(
    store: &Arc<dyn TableStore>,
    table: &TableName,
    how: &Analysis<'_>,
    before: &TableStats,
) -> Result<Sampled> {
    let taken = Utc::now();
    // Guideposts as the kept partitions have them, so that every
    // partition's are spaced alike.
    let how = Analysis {
        every: before.guidepost_every.max(1),
        ..how.clone()
    };
    let plan = probes(before, how.sample, rand::random::<f64>());
    let runs: Vec<Run> = stream::iter(plan)
        .map(|probe| read_probe(store, table, before, probe, &how))
        .buffered(how.width.max(1))
        .try_collect()
        .await?;
    Ok(merge(before, runs, how.every, taken))
}

/// What one probe read.
#[derive(Debug)]
struct Run {
    probe: Probe,
    /// The partitions it passed, in key order.
    seen: Vec<Seen>,
    /// Whether it read to the end of its range.
    exhausted: bool,
    requests: u64,
}

/// One partition as a run saw it.
#[derive(Debug)]
struct Seen {
    /// The statistics of what was read of it.
    stats: PartitionStats,
    /// The last RowKey read.
    last: RowKey,
    /// Every RowKey read, in order: where the old guideposts fall among
    /// them measures the density.
    keys: Vec<RowKey>,
    /// The guidepost of its last statistics the reading began at; `None`:
    /// its first entity.
    from: Option<usize>,
    /// Whether the run read on past its last entity.
    to_end: bool,
}

async fn read_probe(
    store: &Arc<dyn TableStore>,
    table: &TableName,
    before: &TableStats,
    probe: Probe,
    how: &Analysis<'_>,
) -> Result<Run> {
    let mut query = Query::all();
    if let Some(p) = before.partitions.get(probe.at) {
        match probe.from.and_then(|g| p.guideposts.get(g)) {
            Some(guidepost) => {
                query.partitions = KeyRange::exactly(p.partition.clone());
                query.rows = KeyRange {
                    start: Bound::Included(guidepost.clone()),
                    end: Bound::Unbounded,
                };
            }
            None => {
                query.partitions = KeyRange {
                    start: Bound::Included(p.partition.clone()),
                    end: Bound::Unbounded,
                };
            }
        }
    }
    if !how.sizes {
        query = query.select(Vec::<String>::new());
    }
    // A bound on requests: the service may return short or empty pages
    // with a continuation; the run then ends short of its entities.
    let most = 2 * probe.entities.div_ceil(PAGE) + 1;
    let mut left = probe.entities;
    let mut token: Option<ContinuationToken> = None;
    let mut parts: Vec<(Partition<'_>, Vec<RowKey>)> = Vec::new();
    let mut requests = 0;
    let exhausted = loop {
        query.top = Some(left.min(PAGE) as u32);
        let page = store.query(table, &query, token.as_ref()).await?;
        requests += 1;
        for e in &page.entities {
            match parts.last_mut() {
                Some((p, keys)) if p.stats.partition == *e.partition_key() => {
                    p.add(e, how.sizes);
                    keys.push(e.row_key().clone());
                }
                _ => {
                    let mut p = Partition::new(e.partition_key().clone(), how);
                    p.add(e, how.sizes);
                    parts.push((p, vec![e.row_key().clone()]));
                }
            }
        }
        left = left.saturating_sub(page.entities.len() as u64);
        match page.continuation {
            None => break true,
            Some(_) if left == 0 || requests >= most => break false,
            Some(next) => token = Some(next),
        }
    };
    // Read to the end from a guidepost and found nothing: the partition
    // ends before it now.
    if parts.is_empty()
        && exhausted
        && let Some(p) = before.partitions.get(probe.at)
        && let Some(guidepost) = probe.from.and_then(|g| p.guideposts.get(g))
    {
        let mut empty = Partition::new(p.partition.clone(), how).finish();
        empty.entities = 0;
        return Ok(Run {
            seen: vec![Seen {
                stats: empty,
                last: guidepost.clone(),
                keys: Vec::new(),
                from: probe.from,
                to_end: true,
            }],
            probe,
            exhausted,
            requests,
        });
    }
    let n = parts.len();
    let seen = parts
        .into_iter()
        .enumerate()
        .filter_map(|(i, (p, keys))| {
            Some(Seen {
                stats: p.finish(),
                last: keys.last()?.clone(),
                keys,
                from: if i == 0 { probe.from } else { None },
                to_end: i + 1 < n || exhausted,
            })
        })
        .collect();
    Ok(Run {
        probe,
        seen,
        exhausted,
        requests,
    })
}

/// How much a partition's new statistics are worth: a whole reading over
/// a tail over a density.
fn confidence(seen: &Seen) -> u8 {
    match (seen.from, seen.to_end) {
        (None, true) => 2,
        (Some(_), true) => 1,
        _ => 0,
    }
}

/// The last statistics with the runs' findings merged in (the module's rules).
fn merge(before: &TableStats, runs: Vec<Run>, every: u64, taken: chrono::DateTime<Utc>) -> Sampled {
    let old: BTreeMap<&PartitionKey, &PartitionStats> = before
        .partitions
        .iter()
        .map(|p| (&p.partition, p))
        .collect();
    let mut report = SampleReport::default();
    let mut best: BTreeMap<PartitionKey, (u8, u64, PartitionStats)> = BTreeMap::new();
    let mut gone: Vec<PartitionKey> = Vec::new();
    for run in runs {
        report.requests += run.requests;
        report.entities += run.seen.iter().map(|s| s.stats.entities).sum::<u64>();
        // A run from a partition's start read every partition between it
        // and the last one it reached (or the table's end): the old ones
        // it did not meet are gone.
        if run.probe.from.is_none()
            && let Some(start) = before.partitions.get(run.probe.at)
        {
            let end = match (run.exhausted, run.seen.last()) {
                (false, Some(last)) => Bound::Excluded(&last.stats.partition),
                (false, None) => Bound::Excluded(&start.partition),
                (true, _) => Bound::Unbounded,
            };
            let span = old.range::<PartitionKey, _>((Bound::Included(&start.partition), end));
            for (key, _) in span {
                if !run.seen.iter().any(|s| s.stats.partition == **key) && !gone.contains(key) {
                    gone.push((*key).clone());
                }
            }
        }
        for seen in run.seen {
            let rank = (confidence(&seen), seen.stats.entities);
            let stats = match confidence(&seen) {
                2 => seen.stats.clone(),
                _ => estimate(
                    old.get(&seen.stats.partition).copied(),
                    &seen,
                    before.guidepost_every,
                ),
            };
            let key = stats.partition.clone();
            if best.get(&key).is_none_or(|(c, n, _)| (*c, *n) < rank) {
                best.insert(key, (rank.0, rank.1, stats));
            }
        }
    }
    // Another run may have met what one found missing (made since).
    gone.retain(|k| !best.contains_key(k));
    let mut partitions: BTreeMap<PartitionKey, PartitionStats> = before
        .partitions
        .iter()
        .filter(|p| !gone.contains(&p.partition))
        .map(|p| (p.partition.clone(), p.clone()))
        .collect();
    let mut changed = Vec::new();
    for (key, (rank, _, stats)) in best {
        match rank {
            2 => report.measured += 1,
            _ => report.estimated += 1,
        }
        if old.get(&key).is_none_or(|o| **o != stats) {
            changed.push(stats.clone());
        }
        partitions.insert(key, stats);
    }
    report.gone = gone.len();
    Sampled {
        stats: TableStats {
            taken,
            guidepost_every: every,
            counted: false,
            partitions: partitions.into_values().collect(),
        },
        changed,
        gone,
        report,
    }
}

/// A partition's statistics from its last ones (guideposts one every
/// `every`) and a run that read part of it (a new partition read in part:
/// what was read, a lower bound).
fn estimate(old: Option<&PartitionStats>, seen: &Seen, every: u64) -> PartitionStats {
    let read = &seen.stats;
    let Some(old) = old else {
        return read.clone();
    };
    let step = step(old, every);
    // Old entities before the run's start.
    let head = seen.from.map_or(0, |g| (g as u64 + 1) * step);
    // The run's entities against the old ones over the same keys: the
    // rest of the partition where it read to the end, else up to the last
    // old guidepost it passed (counting the run's keys before it).
    let spans = if seen.to_end {
        Some((read.entities, old.entities.saturating_sub(head)))
    } else {
        let first = seen.from.map_or(0, |g| g + 1);
        let passed = old.guideposts.partition_point(|k| *k <= seen.last);
        (passed > first).then(|| {
            let at = &old.guideposts[passed - 1];
            let new = seen.keys.partition_point(|k| k < at) as u64;
            (new, (passed as u64 * step).saturating_sub(head))
        })
    };
    // The span's density, where it is long enough to measure one, scales
    // the whole partition (growth even along it); a short tail read to
    // the end adds to the head (growth at the end, appends).
    let entities = match spans {
        Some((new, span)) if span >= 2 * step => {
            (old.entities as f64 * new as f64 / span as f64).round() as u64
        }
        _ if seen.to_end => head + read.entities,
        _ => old.entities,
    }
    .max(head + read.entities);
    // Sizes by the run's average, or the old one where it read nothing.
    let (sample_bytes, sample_entities) = match read.entities {
        0 => (old.bytes, old.entities),
        n => (read.bytes, n),
    };
    let bytes = match sample_entities {
        0 => 0,
        n => (sample_bytes as f64 * entities as f64 / n as f64).round() as u64,
    };
    let mut prefixes = BTreeMap::new();
    for (path, counts) in &old.prefixes.0 {
        prefixes.insert(path.clone(), scale(counts, entities, old.entities));
    }
    for (path, counts) in &read.prefixes.0 {
        if !prefixes.contains_key(path) {
            prefixes.insert(path.clone(), scale(counts, entities, read.entities));
        }
    }
    PartitionStats {
        partition: old.partition.clone(),
        entities,
        bytes,
        largest: old.largest.max(read.largest),
        widest: old.widest.max(read.widest),
        guideposts: old.guideposts.clone(),
        oldest: [old.oldest, read.oldest].into_iter().flatten().min(),
        newest: [old.newest, read.newest].into_iter().flatten().max(),
        prefixes: KeyPrefixes(prefixes),
    }
}

/// A path's counts (its entities, then distinct prefixes) scaled from
/// `of` entities to `to`. In key order a prefix's distinct values are the
/// boundaries between its runs, plus one: the boundaries scale, the one
/// does not (a field that never changes stays one value).
fn scale(counts: &[u64], to: u64, of: u64) -> Vec<u64> {
    if of == 0 {
        return counts.to_vec();
    }
    let f = to as f64 / of as f64;
    let entities = counts.first().map_or(0, |n| (*n as f64 * f).round() as u64);
    let mut out = vec![entities];
    out.extend(counts.iter().skip(1).map(|&n| match n {
        0 => 0,
        n => (((n - 1) as f64 * f).round() as u64 + 1).min(entities.max(1)),
    }));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(s: &str) -> PartitionKey {
        PartitionKey::new(s).expect("a key")
    }

    fn partition(name: &str, entities: u64, guideposts: &[&str]) -> PartitionStats {
        PartitionStats {
            partition: key(name),
            entities,
            bytes: entities * 100,
            largest: 100,
            widest: 3,
            guideposts: guideposts
                .iter()
                .map(|g| RowKey::new(*g).expect("a key"))
                .collect(),
            oldest: None,
            newest: None,
            prefixes: KeyPrefixes::default(),
        }
    }

    fn stats(partitions: Vec<PartitionStats>) -> TableStats {
        TableStats {
            taken: Utc::now(),
            guidepost_every: 100,
            counted: false,
            partitions,
        }
    }

    #[test]
    fn probes_fall_at_even_entity_positions_and_start_at_the_guidepost_before_them() {
        // 100 small partitions of 10, then one of 9,000 with a guidepost
        // every 1,000: 10,000 entities.
        let mut parts: Vec<PartitionStats> = (0..100)
            .map(|i| partition(&format!("a{i:03}"), 10, &[]))
            .collect();
        let gps: Vec<String> = (1..9).map(|i| format!("r{i}")).collect();
        let gps: Vec<&str> = gps.iter().map(String::as_str).collect();
        parts.push(partition("b", 9_000, &gps));
        let before = stats(parts);
        // 5,000 entities: runs of 1,000 (four guideposts of 100 is less
        // than a page), at 0, 2,000, 4,000, 6,000, 8,000.
        let probes = probes(&before, 5_000, 0.0);
        let at: Vec<(usize, Option<usize>)> = probes.iter().map(|p| (p.at, p.from)).collect();
        // Position 0: the first small partition, from its start; the rest
        // in "b" at offsets 1,000 (its first guidepost), 3,000, 5,000, 7,000.
        assert_eq!(
            at,
            vec![
                (0, None),
                (100, Some(0)),
                (100, Some(2)),
                (100, Some(4)),
                (100, Some(6))
            ]
        );
        assert!(probes.iter().all(|p| p.entities == 1_000));
        // A sample as big as the table is every page of it, placed.
        assert_eq!(probes_total(&before, 10_000), 10_000);
        assert!(super::probes(&stats(Vec::new()), 1_000, 0.5).is_empty());
    }

    fn probes_total(before: &TableStats, sample: u64) -> u64 {
        probes(before, sample, 0.5).iter().map(|p| p.entities).sum()
    }

    fn seen(name: &str, entities: u64, last: &str, from: Option<usize>, to_end: bool) -> Seen {
        seen_keys(name, entities, vec![last.to_owned()], from, to_end)
    }

    fn seen_keys(
        name: &str,
        entities: u64,
        keys: Vec<String>,
        from: Option<usize>,
        to_end: bool,
    ) -> Seen {
        let keys: Vec<RowKey> = keys
            .iter()
            .map(|k| RowKey::new(k.as_str()).expect("a key"))
            .collect();
        Seen {
            stats: partition(name, entities, &[]),
            last: keys.last().cloned().expect("a key read"),
            keys,
            from,
            to_end,
        }
    }

    #[test]
    fn a_partition_read_in_part_is_estimated_from_the_guideposts_the_run_passed() {
        // Guideposts every 1,000 of 10,000: "k01" .. "k09".
        let gps: Vec<String> = (1..10).map(|i| format!("k{i:02}")).collect();
        let gps: Vec<&str> = gps.iter().map(String::as_str).collect();
        let old = partition("p", 10_000, &gps);
        // From "k02" (2,000 in), 3,750 entities: 1,500 before "k03", 1,500
        // more before "k04", 750 after it. The 2,000 old entities from
        // "k02" to "k04" are 3,000 now: half again as dense.
        let keys: Vec<String> = ["k02", "k03", "k04"]
            .iter()
            .zip([1_500, 1_500, 750])
            .flat_map(|(g, n)| (0..n).map(move |i| format!("{g}_{i:04}")))
            .collect();
        let e = estimate(
            Some(&old),
            &seen_keys("p", 3_750, keys, Some(1), false),
            1_000,
        );
        assert_eq!(e.entities, 15_000);
        assert_eq!(e.bytes, 1_500_000);
        // Unchanged, a run that ends just short of a guidepost measures
        // the same density it read: 3,000 entities from "k02" to "k05x".
        let keys: Vec<String> = ["k02", "k03", "k04"]
            .iter()
            .flat_map(|g| (0..1_000).map(move |i| format!("{g}_{i:04}")))
            .collect();
        let e = estimate(
            Some(&old),
            &seen_keys("p", 3_000, keys, Some(1), false),
            1_000,
        );
        assert_eq!(e.entities, 10_000);
        assert_eq!(e.guideposts, old.guideposts);
        // Passing fewer than two guideposts measures nothing: the old count.
        let e = estimate(Some(&old), &seen("p", 1_000, "k03x", Some(1), false), 1_000);
        assert_eq!(e.entities, 10_000);
        // Read to its end from "k08": the old tail of 2,000 is now 2,500.
        let e = estimate(Some(&old), &seen("p", 2_500, "k99", Some(7), true), 1_000);
        assert_eq!(e.entities, 12_500);
        // A tail too short to measure (from "k09", 1,000): added to the head.
        let e = estimate(Some(&old), &seen("p", 1_500, "k99", Some(8), true), 1_000);
        assert_eq!(e.entities, 9_000 + 1_500);
        // Nothing from "k05" on: the old head alone.
        let mut nothing = seen("p", 0, "k05", Some(4), true);
        nothing.keys.clear();
        let e = estimate(Some(&old), &nothing, 1_000);
        assert_eq!((e.entities, e.bytes), (5_000, 500_000));
        // A new partition read in part: what was read.
        let e = estimate(None, &seen("q", 700, "x", None, false), 1_000);
        assert_eq!(e.entities, 700);
    }

    #[test]
    fn the_step_is_the_one_the_guideposts_were_taken_at() {
        // 33,333 entities, one every 1,000: 33 guideposts, the last 333
        // entities after them.
        let gps: Vec<String> = (1..=33).map(|i| format!("g{i:02}")).collect();
        let gps: Vec<&str> = gps.iter().map(String::as_str).collect();
        assert_eq!(step(&partition("p", 33_333, &gps), 1_000), 1_000);
        // Doubled: 40,000 entities with 19 guideposts of a 1,000 asked.
        let gps: Vec<&str> = gps[..19].to_vec();
        assert_eq!(step(&partition("p", 40_000, &gps), 1_000), 2_000);
        // A count that no longer fits its guideposts: the average.
        let gps: Vec<&str> = vec!["a", "b", "c"];
        assert_eq!(step(&partition("p", 10_000, &gps), 1_000), 2_500);
    }

    #[test]
    fn scaled_distinct_counts_keep_a_constant_field_at_one() {
        // 1,000 entities; 1 value of the first field, 1,000 of both.
        assert_eq!(
            scale(&[1_000, 1, 1_000], 1_500, 1_000),
            vec![1_500, 1, 1_500]
        );
        assert_eq!(scale(&[10, 0, 0], 20, 10), vec![20, 0, 0]);
        assert_eq!(scale(&[10, 2, 5], 0, 0), vec![10, 2, 5]);
    }

    #[test]
    fn a_run_from_a_partition_start_measures_what_it_read_whole_and_finds_the_gone() {
        let before = stats(vec![
            partition("a", 10, &[]),
            partition("b", 10, &[]),
            partition("c", 10, &[]),
            partition("d", 5_000, &[]),
        ]);
        // From "a": "a" read whole (12 now), "b" gone, "bb" new and whole,
        // "c" whole, "d" reached and read in part.
        let run = Run {
            probe: Probe {
                at: 0,
                from: None,
                entities: 1_000,
            },
            seen: vec![
                seen("a", 12, "z", None, true),
                seen("bb", 3, "z", None, true),
                seen("c", 10, "z", None, true),
                seen("d", 975, "m", None, false),
            ],
            exhausted: false,
            requests: 1,
        };
        let merged = merge(&before, vec![run], 100, Utc::now());
        let names: Vec<(&str, u64)> = merged
            .stats
            .partitions
            .iter()
            .map(|p| (p.partition.as_str(), p.entities))
            .collect();
        assert_eq!(names, vec![("a", 12), ("bb", 3), ("c", 10), ("d", 5_000)]);
        assert_eq!(merged.gone, vec![key("b")]);
        assert_eq!(
            (
                merged.report.measured,
                merged.report.estimated,
                merged.report.gone
            ),
            (3, 1, 1)
        );
        // "c" read as it was, and "d" estimated as it was (it passed no
        // guidepost; the run's average size is the old one), are not
        // written again.
        let changed: Vec<&str> = merged
            .changed
            .iter()
            .map(|p| p.partition.as_str())
            .collect();
        assert_eq!(changed, vec!["a", "bb"]);
    }
}
