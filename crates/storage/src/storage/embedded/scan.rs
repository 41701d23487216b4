//! One page of a query over the redb table of a store's table, seeking past rows
//! outside the RowKey range rather than reading them.

use redb::ReadableTable;

use std::borrow::Cow;
use std::cell::RefCell;
use std::ops::{Bound, ControlFlow};

use super::dict::Dict;
use super::key::{self, after_partition, partition_prefix};
use super::value::{self, RawEntity, Slots};
use crate::storage::query::MAX_PARTITION_PAGE;
use crate::storage::view::{PageEnd, RowSink};
use crate::storage::{
    ContinuationToken, KeyRange, Page, PartitionKey, PartitionPage, Query, Result, RowKey,
};

/// Reads one page. The page ends when it holds `top` entities, when `budget`
/// entities in range have been examined, or at the end of the range; when it ends
/// early the token names the next stored row, or none where that row shows
/// the range has no more (see `walk`).
pub fn page(
    rows: &impl ReadableTable<&'static [u8], &'static [u8]>,
    dict: &Dict,
    query: &Query,
    token: Option<&ContinuationToken>,
    budget: usize,
) -> Result<Page> {
    let wanted = query.needed_properties();
    let mut entities = Vec::with_capacity(query.page_size()?);
    let end = walk(rows, dict, query, token, budget, true, &mut |e| {
        let pk = PartitionKey::from_stored(e.partition_key.to_owned());
        let rk = RowKey::from_stored(e.row_key.to_owned());
        let mut e = value::decode(pk, rk, e.value, dict, wanted.as_deref())?;
        query.project(&mut e.entity.properties);
        entities.push(e);
        Ok(ControlFlow::Continue(()))
    })?;
    Ok(Page {
        entities,
        continuation: end.continuation,
        scanned: end.scanned,
    })
}

/// Reads one page into a sink: the entities `page` would return, lent in
/// place.
pub fn page_into(
    rows: &impl ReadableTable<&'static [u8], &'static [u8]>,
    dict: &Dict,
    query: &Query,
    token: Option<&ContinuationToken>,
    budget: usize,
    sink: &mut dyn RowSink,
) -> Result<PageEnd> {
    walk(rows, dict, query, token, budget, false, &mut |e| {
        Ok(sink.push(e))
    })
}

/// A key range as stored bytes, compared without decoding keys; lent
/// from the range's keys where their bytes are the stored ones.
struct ByteRange<'a> {
    start: Bound<Cow<'a, [u8]>>,
    end: Bound<Cow<'a, [u8]>>,
}

impl<'a> ByteRange<'a> {
    fn of<K: AsRef<str>>(range: &'a KeyRange<K>) -> Self {
        let bytes = |b: &'a Bound<K>| match b {
            Bound::Included(k) => Bound::Included(key::bytes_of(k.as_ref())),
            Bound::Excluded(k) => Bound::Excluded(key::bytes_of(k.as_ref())),
            Bound::Unbounded => Bound::Unbounded,
        };
        Self {
            start: bytes(&range.start),
            end: bytes(&range.end),
        }
    }

    /// Where this range starts in the partition whose key, in CESU-8, is
    /// `pk`.
    fn start_in(&self, pk: &[u8]) -> Vec<u8> {
        let start: &[u8] = match &self.start {
            Bound::Included(s) | Bound::Excluded(s) => s,
            Bound::Unbounded => &[],
        };
        let mut key = Vec::with_capacity(pk.len() + start.len() + 2);
        key.extend_from_slice(pk);
        key.push(0);
        key.extend_from_slice(start);
        if let Bound::Excluded(_) = self.start {
            key.push(0);
        }
        key
    }

    fn is_before(&self, k: &[u8]) -> bool {
        match &self.start {
            Bound::Included(s) => k < s.as_ref(),
            Bound::Excluded(s) => k <= s.as_ref(),
            Bound::Unbounded => false,
        }
    }

    fn is_after(&self, k: &[u8]) -> bool {
        match &self.end {
            Bound::Included(e) => k > e.as_ref(),
            Bound::Excluded(e) => k >= e.as_ref(),
            Bound::Unbounded => false,
        }
    }
}

/// The page loop: seeks past rows outside the RowKey range, compares keys as
/// bytes, reads a PartitionKey only when it changes, and lends each entity
/// in range that passes the filter to `take`. `Break` ends the page without
/// a token. `whole` reads every value before the filter, so that a fault
/// anywhere in an entity fails the page as decoding it whole would; a sink
/// meets the faults of what it reads.
fn walk(
    rows: &impl ReadableTable<&'static [u8], &'static [u8]>,
    dict: &Dict,
    query: &Query,
    token: Option<&ContinuationToken>,
    budget: usize,
    whole: bool,
    take: &mut dyn FnMut(&RawEntity<'_>) -> Result<ControlFlow<()>>,
) -> Result<PageEnd> {
    let limit = query.page_size()?;
    let partitions = ByteRange::of(&query.partitions);
    let row_range = ByteRange::of(&query.rows);
    // Each seek descends redb's tree from its root: a point read by a
    // RowKey prefix seeked three times (the partition, its range, the next
    // partition) where one does.
    let mut lower = match (token, &query.partitions.start) {
        (Some(t), _) => key::encode(&t.next_partition_key, &t.next_row_key),
        (None, Bound::Unbounded) => Vec::new(),
        (None, Bound::Included(pk)) => row_range.start_in(&key::bytes_of(pk.as_str())),
        (None, Bound::Excluded(pk)) => after_partition(pk),
    };
    let mut end = PageEnd::default();
    let (mut pk_bytes, mut pk, mut pk_wide) = (Vec::new(), String::new(), String::new());
    let mut rk_wide = String::new();
    let slots = RefCell::new(Slots::default());
    let mut full = false;
    // A partition's first entity in this page is still to be counted.
    let mut met_partition = false;
    'seek: loop {
        for item in rows.range::<&[u8]>(lower.as_slice()..)? {
            let (key, value) = item?;
            let key = key.value();
            // Rows of one partition follow each other: its key bytes and
            // separator come first again (a PartitionKey holds no 00). The
            // last partition met in range needs no range check again.
            let same_partition = !pk_bytes.is_empty()
                && key.get(pk_bytes.len()) == Some(&0)
                && key.starts_with(&pk_bytes);
            let sep = match same_partition {
                true => pk_bytes.len(),
                false => key::separator(key)?,
            };
            let (this_pk, this_rk) = (&key[..sep], &key[sep + 1..]);
            if !same_partition && partitions.is_before(this_pk) {
                continue;
            }
            if !same_partition && partitions.is_after(this_pk) {
                break 'seek;
            }
            // A full page ends at the next entity in range, so a page that
            // ends with its range has no token, and a point read (`top` 1)
            // decodes no key past its row. It seeks no further than the next
            // partition's first row to find that entity, so a narrow RowKey
            // range over many partitions costs a full page one step, not a
            // seek per partition: the token then names the row it stopped at.
            let seek_to = if !same_partition && row_range.is_before(this_rk) {
                // A row of the partition of the row before is past the
                // range's start already: keys ascend, and that row was in
                // range.
                Some(row_range.start_in(this_pk))
            } else if row_range.is_after(this_rk) {
                // On to the next partition, if the range holds one.
                let next = key::after_partition_bytes(this_pk);
                if partitions.is_after(&next) {
                    break 'seek;
                }
                Some(next)
            } else {
                None
            };
            if full {
                let (pk, rk) = key::decode(key)?;
                end.continuation = Some(ContinuationToken::at(pk, rk));
                break 'seek;
            }
            if let Some(next) = seek_to {
                lower = next;
                continue 'seek;
            }
            end.scanned += 1;
            if !same_partition {
                pk.clear();
                pk.push_str(key::read(this_pk, &mut pk_wide)?);
                met_partition = true;
                pk_bytes.clear();
                pk_bytes.extend_from_slice(this_pk);
            }
            let rk = key::read(this_rk, &mut rk_wide)?;
            let e = RawEntity {
                partition_key: &pk,
                row_key: rk,
                value: value.value(),
                dict,
                slots: &slots,
                fault: RefCell::new(None),
            };
            if whole {
                e.check();
            }
            let passes = query.passes(&e);
            if let Some(fault) = e.take_fault() {
                return Err(fault);
            }
            if passes {
                // `count`, without comparing the key at every entity.
                if met_partition {
                    end.partitions.push((pk.clone(), 0));
                    met_partition = false;
                }
                end.returned += 1;
                if let Some((_, n)) = end.partitions.last_mut() {
                    *n += 1;
                }
                let flow = take(&e)?;
                if let Some(fault) = e.take_fault() {
                    return Err(fault);
                }
                if flow.is_break() {
                    break 'seek;
                }
            }
            full = end.returned == limit || end.scanned == budget;
        }
        break;
    }
    Ok(end)
}

/// One page of the distinct PartitionKeys in `range` after `after`: one seek
/// per partition, past its rows, so the cost is the number of partitions and
/// not of entities.
pub fn partitions(
    rows: &impl ReadableTable<&'static [u8], &'static [u8]>,
    range: &KeyRange<PartitionKey>,
    after: Option<&PartitionKey>,
) -> Result<PartitionPage> {
    let range = range.after(after);
    let mut lower = match &range.start {
        Bound::Unbounded => Vec::new(),
        Bound::Included(pk) => partition_prefix(pk),
        Bound::Excluded(pk) => after_partition(pk),
    };
    let mut page = PartitionPage {
        requests: 1,
        ..PartitionPage::default()
    };
    while let Some(item) = rows.range::<&[u8]>(lower.as_slice()..)?.next() {
        let (key, _) = item?;
        let (pk, _) = key::decode(key.value())?;
        if range.is_after(&pk) {
            return Ok(page);
        }
        if page.partitions.len() == MAX_PARTITION_PAGE {
            page.after = page.partitions.last().cloned();
            return Ok(page);
        }
        lower = after_partition(&pk);
        page.partitions.push(pk);
    }
    Ok(page)
}
