//! One process's workload statistics as text, for the store (`persist`):
//! JSON arrays rather than objects, so that 5,000 statements and their
//! partitions take little room. A version number first; a reader skips a
//! snapshot it cannot read (statistics, not data).

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use super::key_order::KeyOrder;
use super::workload::{Kept, PartitionTraffic, StatementStats, TableTraffic};
use crate::storage::bill::Transactions;

/// The version of the form below.
const VERSION: u64 = 1;

/// `kept` as text.
pub fn encode(kept: &Kept) -> String {
    let statements: Vec<Value> = kept
        .statements
        .iter()
        .map(|(q, s)| {
            json!([
                q,
                s.calls,
                micros(s.total),
                micros(s.min),
                micros(s.max),
                s.rows,
                s.scanned,
                s.returned,
                s.requests,
                s.retries,
                s.conflicts,
                s.path.as_ref(),
                s.whole,
                s.table.as_deref(),
                bill(&s.bill)
            ])
        })
        .collect();
    let tables: Vec<Value> = kept
        .tables
        .iter()
        .map(|(name, t)| {
            let o = &t.order;
            let (first, last) = o.range().unzip();
            let parts: Vec<Value> = t
                .partitions
                .iter()
                .map(|(pk, p)| json!([pk, traffic(p)]))
                .collect();
            json!([
                name,
                traffic(&t.totals),
                [
                    first,
                    last,
                    o.compared,
                    o.at_last,
                    o.at_first,
                    o.new_last,
                    o.new_first
                ],
                parts,
                bill(&t.bill)
            ])
        })
        .collect();
    json!({
        "v": VERSION,
        "since": kept.since.timestamp_micros(),
        "statements": statements,
        "tables": tables,
    })
    .to_string()
}

/// The statistics `text` holds; `None` for text of another version or
/// not whole.
pub fn decode(text: &str) -> Option<Kept> {
    let v: Value = serde_json::from_str(text).ok()?;
    if v.get("v")?.as_u64()? != VERSION {
        return None;
    }
    let since = DateTime::<Utc>::from_timestamp_micros(v.get("since")?.as_i64()?)?;
    let mut kept = Kept::empty(since);
    for s in v.get("statements")?.as_array()? {
        let s = s.as_array()?;
        let n = |i: usize| s.get(i).and_then(Value::as_u64);
        let text = |i: usize| s.get(i).and_then(Value::as_str).map(str::to_owned);
        let stats = StatementStats {
            calls: n(1)?,
            total: Duration::from_micros(n(2)?),
            min: Duration::from_micros(n(3)?),
            max: Duration::from_micros(n(4)?),
            rows: n(5)?,
            scanned: n(6)?,
            returned: n(7)?,
            requests: n(8)?,
            retries: n(9)?,
            conflicts: n(10)?,
            path: Cow::Owned(text(11)?),
            whole: text(12),
            table: text(13).map(Arc::from),
            // Absent from a snapshot stored before the bill was kept.
            bill: s.get(14).and_then(restore_bill).unwrap_or_default(),
        };
        kept.statements.insert(text(0)?, stats);
    }
    for t in v.get("tables")?.as_array()? {
        let t = t.as_array()?;
        let name = t.first()?.as_str()?.to_owned();
        let o = t.get(2)?.as_array()?;
        let key = |i: usize| o.get(i).and_then(Value::as_str).map(str::to_owned);
        let count = |i: usize| o.get(i).and_then(Value::as_u64);
        let range = key(0).zip(key(1));
        let order = KeyOrder::restored(
            range,
            [count(2)?, count(3)?, count(4)?, count(5)?, count(6)?],
        );
        let mut table = TableTraffic {
            totals: restore(t.get(1)?)?,
            order,
            // Absent from a snapshot stored before the bill was kept.
            bill: t.get(4).and_then(restore_bill).unwrap_or_default(),
            ..TableTraffic::default()
        };
        for p in t.get(3)?.as_array()? {
            let p = p.as_array()?;
            table
                .partitions
                .insert(p.first()?.as_str()?.to_owned(), restore(p.get(1)?)?);
        }
        kept.tables.insert(name, table);
    }
    Some(kept)
}

/// A bill as `[query_pages, point_reads, batches, writes, other]`.
fn bill(t: &Transactions) -> Value {
    json!(t.by_kind().map(|(_, n)| n))
}

fn restore_bill(v: &Value) -> Option<Transactions> {
    let a = v.as_array()?;
    let n = |i: usize| a.get(i).and_then(Value::as_u64);
    Some(Transactions {
        query_pages: n(0)?,
        point_reads: n(1)?,
        batches: n(2)?,
        writes: n(3)?,
        other: n(4)?,
    })
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

fn traffic(p: &PartitionTraffic) -> Value {
    json!([
        p.read,
        p.written,
        p.requests,
        p.conflicts,
        p.peak_read_per_s,
        p.peak_written_per_s,
        p.writes,
        p.peak_writes_per_s
    ])
}

fn restore(v: &Value) -> Option<PartitionTraffic> {
    let a = v.as_array()?;
    let n = |i: usize| a.get(i).and_then(Value::as_u64);
    let mut p = PartitionTraffic::default();
    p.read = n(0)?;
    p.written = n(1)?;
    p.requests = n(2)?;
    p.conflicts = n(3)?;
    p.peak_read_per_s = n(4)?;
    p.peak_written_per_s = n(5)?;
    p.writes = n(6)?;
    p.peak_writes_per_s = n(7)?;
    Some(p)
}

#[cfg(test)]
mod tests {
    use super::super::workload::{Run, Workload};
    use super::*;

    #[test]
    fn a_snapshot_reads_back_as_it_was_written() {
        let w = Workload::default();
        let pages = Transactions {
            query_pages: 2,
            ..Transactions::default()
        };
        w.read("T", [("a", 2), ("b\"\n", 0)], pages);
        let batch = Transactions {
            batches: 1,
            ..Transactions::default()
        };
        w.wrote("T", ("a", 3), false, batch);
        let run = Run {
            elapsed: Duration::from_micros(1500),
            rows: 4,
            bill: batch,
            path: Cow::Borrowed("point"),
            table: Some(Arc::from("T")),
            span: Some(("a".into(), "c".into(), 4)),
            ..Run::default()
        };
        w.ran("SELECT 'é' \u{1F600}", run.clone());
        w.ran("SELECT 'é' \u{1F600}", run);
        let own = w.own();
        let back = decode(&encode(&own)).expect("reads back");
        let again = Workload::default();
        again.set_others(back);
        assert_eq!(again.statements(), w.statements());
        assert_eq!(again.partitions(), w.partitions());
        assert_eq!(again.tables(), w.tables());
        let billed = again.tables().first().map(|t| t.bill);
        assert_eq!(
            billed.map(|b| b.to_string()).as_deref(),
            Some("3 (query_pages=2 batches=1)")
        );
        assert_eq!(decode("{\"v\":2}").map(|k| k.is_empty()), None);
    }

    #[test]
    fn merged_counts_add_and_peaks_take_the_higher() {
        let (a, b) = (Workload::default(), Workload::default());
        a.wrote("T", ("p", 5), false, Transactions::default());
        b.wrote("T", ("p", 2), false, Transactions::default());
        b.wrote("T", ("p", 2), false, Transactions::default());
        let run = |ms| Run {
            elapsed: Duration::from_millis(ms),
            path: Cow::Borrowed("point"),
            ..Run::default()
        };
        a.ran("q", run(5));
        b.ran("q", run(1));
        b.ran("q", run(9));
        a.set_others(b.own());
        let p = &a.partitions()[0].traffic;
        assert_eq!((p.written, p.writes, p.requests), (9, 3, 3));
        assert_eq!(p.peak_written_per_s, 5);
        let (_, q) = &a.statements()[0];
        assert_eq!((q.calls, q.min, q.max), (3, run(1).elapsed, run(9).elapsed));
        assert_eq!(q.total, Duration::from_millis(15));
    }
}
