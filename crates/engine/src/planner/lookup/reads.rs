//! `KeyedRead`: a batch of key tuples into reads of the inner table. The
//! pushdown enumerates keys from a value set per key field (`a IN (..) AND
//! b IN (..)` reads every pair), so tuples of several columns are grouped
//! by all columns but the one with the most distinct values: each group is
//! `a = x AND b IN (...)`, one scan, and the scans together read exactly
//! the tuples asked for.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::common::{Column, ScalarValue};
use datafusion::error::Result;
use datafusion::logical_expr::{Expr, in_list, lit};
use datafusion::physical_plan::ExecutionPlan;

use super::inner::{InnerScan, with_scan};
use crate::exec::read::lookup_join::KeyReads;

/// Reads of the inner side by its key columns.
#[derive(Debug)]
pub struct KeyedRead {
    scan: InnerScan,
    /// The inner side as planned: the chain over the scan.
    inner: Arc<dyn ExecutionPlan>,
    /// The access a batch's read takes, for EXPLAIN.
    access: String,
}

impl KeyedRead {
    /// Reads of `inner` (planned over `scan`) by `scan`'s key columns; a
    /// batch's read takes `access`.
    pub fn new(scan: InnerScan, inner: Arc<dyn ExecutionPlan>, access: String) -> Self {
        Self {
            scan,
            inner,
            access,
        }
    }
}

impl KeyReads for KeyedRead {
    fn reads(&self, keys: &[Vec<ScalarValue>]) -> Result<Vec<Arc<dyn ExecutionPlan>>> {
        groups(&self.scan.columns, keys)
            .into_iter()
            .map(|conditions| with_scan(&self.inner, self.scan.rescan.with(&conditions)?))
            .collect()
    }

    fn describe(&self) -> String {
        format!(
            "{}({}) access={}",
            self.scan.table,
            self.scan.columns.join(", "),
            self.access
        )
    }
}

/// The conditions of each group of `keys` (tuples over `columns`).
pub fn groups(columns: &[String], keys: &[Vec<ScalarValue>]) -> Vec<Vec<Expr>> {
    let column = |i: usize| Expr::Column(Column::new_unqualified(&columns[i]));
    let set = |i: usize, values: Vec<ScalarValue>| match values.as_slice() {
        [one] => column(i).eq(lit(one.clone())),
        _ => in_list(column(i), values.into_iter().map(lit).collect(), false),
    };
    let Some(width) = keys.first().map(Vec::len) else {
        return Vec::new();
    };
    // The column whose values vary most goes into the IN list.
    let varying = (0..width)
        .max_by_key(|c| {
            let mut distinct: Vec<&ScalarValue> = keys.iter().map(|k| &k[*c]).collect();
            distinct.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
            distinct.dedup();
            distinct.len()
        })
        .unwrap_or(0);
    let mut order: Vec<Vec<ScalarValue>> = Vec::new();
    let mut members: HashMap<Vec<ScalarValue>, Vec<ScalarValue>> = HashMap::new();
    for key in keys {
        let fixed: Vec<ScalarValue> = key
            .iter()
            .enumerate()
            .filter(|(c, _)| *c != varying)
            .map(|(_, v)| v.clone())
            .collect();
        let entry = members.entry(fixed.clone()).or_insert_with(|| {
            order.push(fixed);
            Vec::new()
        });
        entry.push(key[varying].clone());
    }
    order
        .into_iter()
        .map(|fixed| {
            let values = members.remove(&fixed).unwrap_or_default();
            let others = (0..width).filter(|c| *c != varying);
            let mut conditions: Vec<Expr> = others
                .zip(fixed)
                .map(|(c, v)| column(c).eq(lit(v)))
                .collect();
            conditions.push(set(varying, values));
            conditions
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn int(v: i64) -> ScalarValue {
        ScalarValue::Int64(Some(v))
    }

    fn text(v: &str) -> ScalarValue {
        ScalarValue::Utf8(Some(v.into()))
    }

    #[test]
    fn one_column_is_one_in_list() {
        let g = groups(&["id".into()], &[vec![int(3)], vec![int(1)]]);
        assert_eq!(g.len(), 1);
        assert_eq!(g[0][0].to_string(), "id IN ([Int64(3), Int64(1)])");
    }

    #[test]
    fn tuples_group_by_all_but_the_most_varied_column() {
        let keys = [
            vec![text("a"), int(1)],
            vec![text("a"), int(2)],
            vec![text("b"), int(3)],
        ];
        let g = groups(&["event".into(), "bib".into()], &keys);
        let shown: Vec<String> = g
            .iter()
            .map(|c| {
                c.iter()
                    .map(Expr::to_string)
                    .collect::<Vec<_>>()
                    .join(" AND ")
            })
            .collect();
        assert_eq!(
            shown,
            [
                "event = Utf8(\"a\") AND bib IN ([Int64(1), Int64(2)])",
                "event = Utf8(\"b\") AND bib = Int64(3)"
            ]
        );
    }
}
