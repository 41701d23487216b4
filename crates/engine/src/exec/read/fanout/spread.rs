//! Spread: a fan-out whose rows may come in any order reads several parts of
//! the key space at once.
//!
//! Azure Storage serves neighbouring PartitionKeys from one range server, at
//! about 2,000 entities a second, while the account takes 20,000. A fan-out
//! that starts its requests in key order keeps every request in flight on
//! partitions next to each other, so one range server sets the pace of the
//! whole scan: BENCHMARKS.md measured a full aggregate at a tenth of the
//! account's rate. Where the scan promises no key order (no key column
//! projected, as in `count(*)` or a sum of a property; a raw table), its
//! requests are drawn in turn from lanes, contiguous segments of the key
//! range, so that the requests in flight lie far apart.
//!
//! The segments are `ANALYZE`'s requests cut into equal runs, or, without
//! statistics, found by probing: once the listing has found more partitions
//! than a few per lane, and only then, the rest of the range is bisected at
//! keys halfway between known ones (`midpoint`), each probe one listing page
//! that names the first partition at or after its key. Each segment is then
//! read as one chain of pages where it reads whole partitions: on Azure a
//! page holds up to 1,000 entities of however many partitions, where a
//! request per partition would pay a listing request and a query for each
//! (20,000 requests for a million entities in 10,000 partitions, against
//! about 1,200). Chains are cut four to a lane and started far apart (the
//! first of each lane's, then the second), so that the scan does not wait
//! at its end on a few long ones. A segment that reads a RowKey range in each partition is
//! listed and read one partition at a time, as before, since the service
//! seeks a RowKey only within one partition. The segments tile the range
//! whatever the probes found, so every partition is read once.

use std::ops::Bound;

use datafusion::error::Result;
use futures::stream::{self, BoxStream, StreamExt, TryStreamExt};

use super::{ExactCount, KeyRequest, Split, State, split};
use crate::storage::{KeyRange, PartitionKey, key::is_forbidden_key_char};

/// Partitions per lane the listing finds before it probes for the others:
/// a smaller range is read as one fan-out, without a probe.
const HEAD_PER_LANE: usize = 2;

/// Segments a lane reads in chains, in turn with the other lanes'.
const SEGMENTS_PER_LANE: usize = 4;

/// Most probe rounds; each round probes every open gap at once.
const MAX_ROUNDS: usize = 48;

/// Most probes a lane wanted may cost, beyond a few to find where the keys
/// start to differ: a range with fewer partitions than lanes stops there.
const PROBES_PER_LANE: usize = 4;

/// The requests of `requests` (in key order) drawn in turn from `lanes`
/// equal runs of them (`strided`); in key order where they are no more
/// than a few per lane.
pub(super) fn runs(
    requests: Vec<KeyRequest>,
    lanes: usize,
    counted: &ExactCount,
) -> BoxStream<'static, Result<KeyRequest>> {
    if worth_spreading(requests.len(), lanes) {
        counted.add(requests.len().div_ceil(requests.len().div_ceil(lanes)));
        let requests = strided(requests, lanes);
        return stream::iter(requests.into_iter().map(Ok)).boxed();
    }
    stream::iter(requests.into_iter().map(Ok)).boxed()
}

/// Whether `known` requests are spread over `lanes`: only where there are
/// more than a few a lane.
pub(super) fn worth_spreading(known: usize, lanes: usize) -> bool {
    lanes > 1 && known > HEAD_PER_LANE * lanes
}

/// The requests of one split request, listed as `split` lists them, but
/// from `lanes` segments in turn once the range proves to hold more than a
/// few partitions per lane.
pub(super) fn listed(this: Split, lanes: usize) -> BoxStream<'static, Result<KeyRequest>> {
    stream::once(async move {
        let mut state = State::default();
        loop {
            let page = this.list(state.after.as_ref()).await?;
            for pk in page.partitions {
                this.listed(&mut state, pk);
            }
            match page.after {
                Some(after) => state.after = Some(after),
                // Listed whole (a store that lists many to a page): the
                // requests are known, and cut into runs.
                None => {
                    this.finish(&mut state);
                    let known = state.ready.drain(..).collect();
                    return Ok(runs(known, lanes, &this.counters.lanes));
                }
            }
            if state.ready.len() >= HEAD_PER_LANE * lanes {
                break;
            }
        }
        let Some(after) = state.after.clone() else {
            return Ok(split(this, state));
        };
        // A segment is one chain of pages, which reads many small
        // partitions to a page and lists none, unless its partitions must
        // be read one by one: under a row-value bound, where each holds at
        // most one row of the request, or where the request reads a RowKey
        // range (the service seeks a RowKey only within one partition: a
        // chain would walk every row between); then it is listed and split
        // as `split` does, and its lanes are taken in turn.
        let one_by_one = this.bound.is_some() || this.at_most_one || this.rows != KeyRange::all();
        // Chains are cut finer than the lanes, and started far apart, so
        // that the last to finish are short: the ones started first end
        // at different times, and what is left is taken by the lanes free.
        let wanted = if one_by_one {
            lanes
        } else {
            SEGMENTS_PER_LANE * lanes
        };
        let points = this.split_points(after, wanted - 1).await?;
        let Some(first) = points.first() else {
            return Ok(split(this, state));
        };
        // The first segment goes on from the head up to the first point;
        // each of the others reads from its point to the next.
        let head = this.over(KeyRange {
            start: this.range.start.clone(),
            end: Bound::Excluded(first.clone()),
        });
        let ranges = points.iter().enumerate().map(|(i, p)| KeyRange {
            start: Bound::Included(p.clone()),
            end: points
                .get(i + 1)
                .map_or_else(|| this.range.end.clone(), |n| Bound::Excluded(n.clone())),
        });
        this.counters.lanes.add(points.len() + 1);
        if one_by_one {
            let mut segments = vec![split(head, state)];
            segments.extend(ranges.map(|r| split(this.over(r), State::default())));
            return Ok(stream::select_all(segments).boxed());
        }
        head.finish(&mut state);
        let mut segments: Vec<Vec<KeyRequest>> = vec![state.ready.drain(..).collect()];
        segments.extend(ranges.map(|partitions| {
            vec![KeyRequest::Scan {
                partitions,
                rows: this.rows.clone(),
                at_most_one: false,
            }]
        }));
        let requests: Vec<KeyRequest> = strided(segments, lanes).into_iter().flatten().collect();
        Ok::<_, datafusion::error::DataFusionError>(
            stream::iter(requests.into_iter().map(Ok)).boxed(),
        )
    })
    .try_flatten()
    .boxed()
}

/// `items` in the order that starts `lanes` of them far apart: the first
/// of each of `lanes` equal blocks, then the second of each, and so on.
fn strided<T>(items: Vec<T>, lanes: usize) -> Vec<T> {
    let per_block = items.len().div_ceil(lanes.max(1)).max(1);
    let mut slots: Vec<Option<T>> = items.into_iter().map(Some).collect();
    let mut out = Vec::with_capacity(slots.len());
    for offset in 0..per_block {
        for block in 0..lanes.max(1) {
            if let Some(item) = slots
                .get_mut(block * per_block + offset)
                .and_then(Option::take)
            {
                out.push(item);
            }
        }
    }
    out
}

/// A gap between a known partition `lo` and `end`, where probes look for
/// the next one.
struct Gap {
    lo: PartitionKey,
    end: Bound<PartitionKey>,
    /// No key between `lo` and `end` can be made to probe at.
    closed: bool,
}

impl Gap {
    /// Whether `pk` lies strictly inside the gap: a probe's answer that
    /// does not (a store answering outside the range asked) is not used.
    fn holds(&self, pk: &PartitionKey) -> bool {
        pk > &self.lo
            && match &self.end {
                Bound::Unbounded => true,
                Bound::Included(e) => pk <= e,
                Bound::Excluded(e) => pk < e,
            }
    }
}

impl Split {
    /// The same split over `range`, within its own.
    fn over(&self, range: KeyRange<PartitionKey>) -> Split {
        Split {
            store: self.store.clone(),
            table: self.table.clone(),
            range,
            rows: self.rows.clone(),
            at_most_one: self.at_most_one,
            bound: self.bound.clone(),
            counters: self.counters.clone(),
        }
    }

    /// The first partition of `range` (within the split's), following
    /// listing pages that come back empty.
    async fn first_in(&self, range: KeyRange<PartitionKey>) -> Result<Option<PartitionKey>> {
        let probe = self.over(range);
        let mut after = None;
        loop {
            let page = probe.list(after.as_ref()).await?;
            if let Some(pk) = page.partitions.into_iter().next() {
                return Ok(Some(pk));
            }
            match page.after {
                Some(a) => after = Some(a),
                None => return Ok(None),
            }
        }
    }

    /// About `want` partitions after `after`, in key order, that cut the
    /// rest of the range into parts of about equal width in key space.
    async fn split_points(&self, after: PartitionKey, want: usize) -> Result<Vec<PartitionKey>> {
        let mut gaps = vec![Gap {
            lo: after,
            end: self.range.end.clone(),
            closed: false,
        }];
        let mut found = 0;
        let mut budget = PROBES_PER_LANE * want + MAX_ROUNDS;
        for _ in 0..MAX_ROUNDS {
            if found >= want || budget == 0 {
                break;
            }
            let open: Vec<usize> = (0..gaps.len())
                .filter(|&i| !gaps[i].closed)
                .take(budget)
                .collect();
            if open.is_empty() {
                break;
            }
            budget -= open.len();
            let probes = open.iter().map(|&i| {
                let gap = &gaps[i];
                let at = probe_key(gap);
                async move {
                    match at {
                        None => Ok((i, None)),
                        Some(at) => {
                            let range = KeyRange {
                                start: Bound::Included(at.clone()),
                                end: gap.end.clone(),
                            };
                            let pk = self.first_in(range).await?;
                            Ok::<_, datafusion::error::DataFusionError>((i, Some((at, pk))))
                        }
                    }
                }
            });
            let answers = futures::future::try_join_all(probes).await?;
            let mut next = Vec::with_capacity(gaps.len() * 2);
            let mut answers = answers.into_iter().peekable();
            for (i, gap) in gaps.into_iter().enumerate() {
                let Some((_, answer)) = answers.next_if(|(j, _)| *j == i) else {
                    next.push(gap);
                    continue;
                };
                match answer {
                    None => next.push(Gap {
                        closed: true,
                        ..gap
                    }),
                    // Nothing from the probe's key on: the gap ends there.
                    Some((at, None)) => next.push(Gap {
                        end: Bound::Excluded(at),
                        ..gap
                    }),
                    Some((_, Some(pk))) if self.range.contains(&pk) && gap.holds(&pk) => {
                        found += 1;
                        next.push(Gap {
                            lo: gap.lo,
                            end: Bound::Excluded(pk.clone()),
                            closed: false,
                        });
                        next.push(Gap {
                            lo: pk,
                            end: gap.end,
                            closed: false,
                        });
                    }
                    Some(_) => next.push(Gap {
                        closed: true,
                        ..gap
                    }),
                }
            }
            gaps = next;
        }
        Ok(gaps.into_iter().skip(1).map(|g| g.lo).collect())
    }
}

/// The key to probe a gap at: halfway between its ends, strictly inside.
fn probe_key(gap: &Gap) -> Option<PartitionKey> {
    let hi = match &gap.end {
        Bound::Unbounded => None,
        Bound::Included(k) | Bound::Excluded(k) => Some(k.as_str()),
    };
    let at = PartitionKey::new(midpoint(gap.lo.as_str(), hi)?).ok()?;
    let inside = at > gap.lo
        && match &gap.end {
            Bound::Unbounded => true,
            Bound::Included(k) | Bound::Excluded(k) => &at < k,
        };
    inside.then_some(at)
}

/// A key between `lo` and `hi` (above every key for `None`), about halfway
/// in the space of characters, made of characters a key may hold: the
/// probe point of a bisection. With no upper end it is the successor of
/// `lo`'s first character, so that each probe finds the next group of keys
/// that differ there. `None` where no such key is found.
pub fn midpoint(lo: &str, hi: Option<&str>) -> Option<String> {
    let a: Vec<char> = lo.chars().collect();
    let Some(hi) = hi else {
        let first = u32::from(*a.first()?);
        return (first + 1..TOP).take(64).find_map(usable).map(String::from);
    };
    let b: Vec<char> = hi.chars().collect();
    let i = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let cb = u32::from(*b.get(i)?);
    let mut out: String = a[..i].iter().collect();
    match a.get(i) {
        // `lo` is a prefix of `hi`: `lo` and one character below `hi`'s next.
        None => out.push(between(u32::from(' ') - 1, cb)?),
        // `hi` below `lo`: nothing between.
        Some(&ca) if u32::from(ca) > cb => return None,
        Some(&ca) => match between(u32::from(ca), cb) {
            Some(c) => out.push(c),
            // Adjacent characters: keep `lo`'s and go above the rest of it.
            None => {
                out.push(ca);
                out.push_str(&above(&a[i + 1..])?);
            }
        },
    }
    Some(out)
}

/// The highest character a probe uses: below the surrogates, where UTF-16
/// order (the service's) and character order agree.
const TOP: u32 = 0xD800;

/// A string above `rest`, halfway up the space of printable ASCII (or of
/// the characters below `TOP` for a character above it).
fn above(rest: &[char]) -> Option<String> {
    let Some((&first, tail)) = rest.split_first() else {
        return between(u32::from(' '), 0x7F).map(String::from);
    };
    let first_u = u32::from(first);
    let top = if first_u < 0x7E { 0x7F } else { TOP };
    match between(first_u, top) {
        Some(c) => Some(c.to_string()),
        None => Some(format!("{first}{}", above(tail)?)),
    }
}

/// `c` as a character a key may hold.
fn usable(c: u32) -> Option<char> {
    char::from_u32(c).filter(|&ch| !is_forbidden_key_char(ch))
}

/// A character a key may hold strictly between `x` and `y`, as near their
/// middle as one is.
fn between(x: u32, y: u32) -> Option<char> {
    let y = y.min(TOP);
    if y <= x + 1 {
        return None;
    }
    let mid = x + (y - x) / 2;
    (mid..y).chain((x + 1..mid).rev()).take(64).find_map(usable)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mid(lo: &str, hi: Option<&str>) -> String {
        let m = midpoint(lo, hi).expect("a midpoint");
        assert!(m.as_str() > lo, "{m:?} above {lo:?}");
        if let Some(hi) = hi {
            assert!(m.as_str() < hi, "{m:?} below {hi:?}");
        }
        assert!(PartitionKey::new(m.as_str()).is_ok(), "{m:?} a key");
        m
    }

    #[test]
    fn a_midpoint_lies_strictly_between_its_ends_and_is_a_key() {
        assert_eq!(mid("a", Some("z")), "m");
        assert_eq!(mid("p00000", None), "q");
        // Adjacent characters: above the rest of the lower end.
        assert_eq!(mid("p00063", Some("q")), "pW");
        assert_eq!(mid("p00063", Some("p1")), "p0W");
        // The lower end a prefix of the upper.
        assert_eq!(mid("ab", Some("abc")), "abA");
        // Never a character a key may not hold: halfway is '/' here.
        assert_eq!(mid("-", Some("1")), "0");
        assert_eq!(mid(".", None), "0");
        for (lo, hi) in [
            ("a", "b"),
            ("a~", "b"),
            ("x", "x0"),
            ("é", "ü"),
            ("k", "k!"),
        ] {
            mid(lo, Some(hi));
        }
    }

    #[test]
    fn no_midpoint_where_no_key_lies_between() {
        assert_eq!(midpoint("b", Some("b")), None);
        assert_eq!(midpoint("b", Some("a")), None);
        assert_eq!(midpoint("a", Some("a ")), None);
        assert_eq!(midpoint("", None), None);
    }

    #[tokio::test]
    async fn runs_take_requests_from_every_run_in_turn() {
        let request = |p: &str| KeyRequest::Scan {
            partitions: KeyRange::exactly(PartitionKey::new(p).expect("key")),
            rows: KeyRange::all(),
            at_most_one: false,
        };
        let all: Vec<KeyRequest> = ["a", "b", "c", "d", "e", "f"].map(request).into();
        let lanes = ExactCount::default();
        let got: Vec<String> = runs(all.clone(), 2, &lanes)
            .map(|r| r.expect("request").to_string())
            .collect()
            .await;
        assert_eq!(lanes.value(), 2);
        // Two lanes of six requests: each run (a b c, d e f) is drawn from
        // before either gives a second request; every request comes once.
        let firsts: std::collections::BTreeSet<&str> =
            got[..2].iter().map(String::as_str).collect();
        let want = [request("a").to_string(), request("d").to_string()];
        assert_eq!(firsts, want.iter().map(String::as_str).collect());
        let mut sorted = got.clone();
        sorted.sort();
        let mut all: Vec<String> = all.iter().map(ToString::to_string).collect();
        all.sort();
        assert_eq!(sorted, all);
        // No more than a few per lane: in key order, uncounted.
        let few = ExactCount::default();
        let got: Vec<String> = runs(all_requests(4, request), 2, &few)
            .map(|r| r.expect("request").to_string())
            .collect()
            .await;
        assert_eq!(few.value(), 0);
        assert_eq!(
            got,
            all_requests(4, request)
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
        );
    }

    #[test]
    fn strided_order_starts_lanes_far_apart() {
        let order: Vec<usize> = strided((0..10).collect(), 3);
        // Blocks of four: 0-3, 4-7, 8-9.
        assert_eq!(order, [0, 4, 8, 1, 5, 9, 2, 6, 3, 7]);
        assert_eq!(strided(vec![1, 2], 4), [1, 2]);
    }

    fn all_requests(n: usize, request: impl Fn(&str) -> KeyRequest) -> Vec<KeyRequest> {
        (0..n).map(|i| request(&format!("p{i}"))).collect()
    }
}
