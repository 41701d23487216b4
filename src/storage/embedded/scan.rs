//! One page of a query over the redb table of a store's table, seeking past rows
//! outside the RowKey range rather than reading them.

use redb::ReadableTable;

use super::codec::{
    after_key, after_partition, decode_key, decode_value, encode_key, partition_prefix,
};
use crate::storage::query::MAX_PARTITION_PAGE;
use crate::storage::{
    ContinuationToken, KeyRange, Page, PartitionKey, PartitionPage, Query, Result,
};
use std::ops::Bound;

/// Reads one page. The page ends when it holds `top` entities, when `budget`
/// entities in range have been examined, or at the end of the range; when it ends
/// early the token names the next stored entity of the partition range.
pub fn page(
    rows: &impl ReadableTable<&'static [u8], &'static [u8]>,
    query: &Query,
    token: Option<&ContinuationToken>,
    budget: usize,
) -> Result<Page> {
    let limit = query.page_size()?;
    let mut lower = match (token, &query.partitions.start) {
        (Some(t), _) => encode_key(&t.next_partition_key, &t.next_row_key),
        (None, Bound::Unbounded) => Vec::new(),
        (None, Bound::Included(pk)) => partition_prefix(pk),
        (None, Bound::Excluded(pk)) => after_partition(pk),
    };
    let wanted = query.needed_properties();
    let mut page = Page {
        entities: Vec::with_capacity(limit),
        continuation: None,
        scanned: 0,
    };
    let mut scanned = 0;
    let mut full = false;
    'seek: loop {
        for item in rows.range::<&[u8]>(lower.as_slice()..)? {
            let (key, value) = item?;
            let (pk, rk) = decode_key(key.value())?;
            if query.partitions.is_before(&pk) {
                continue;
            }
            if query.partitions.is_after(&pk) {
                break 'seek;
            }
            if full {
                page.continuation = Some(ContinuationToken::at(pk, rk));
                break 'seek;
            }
            match &query.rows.start {
                Bound::Included(start) if rk < *start => {
                    lower = encode_key(&pk, start);
                    continue 'seek;
                }
                Bound::Excluded(start) if rk <= *start => {
                    lower = after_key(&pk, start);
                    continue 'seek;
                }
                _ => {}
            }
            if query.rows.is_after(&rk) {
                lower = after_partition(&pk);
                continue 'seek;
            }
            scanned += 1;
            let mut e = decode_value(pk, rk, value.value(), wanted.as_deref())?;
            if query.passes(&e) {
                query.project(&mut e.entity.properties);
                page.entities.push(e);
            }
            full = page.entities.len() == limit || scanned == budget;
        }
        break;
    }
    page.scanned = scanned;
    Ok(page)
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
        let (pk, _) = decode_key(key.value())?;
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
