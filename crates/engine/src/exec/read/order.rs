//! The key order a scan's rows arrive in, as sort expressions: what lets
//! DataFusion plan no sort for an ORDER BY that the keys already give.
//!
//! Keys compare as UTF-16, and SQL's text as code points: the two differ
//! where a character past U+FFFF (a surrogate pair, D800..DFFF) meets one
//! of U+E000..U+FFFF, which UTF-16 puts above it. An ascending typed text
//! field still claims its order: the scan puts the rare rows that hold such
//! characters in place as it streams ([`CodePointOrder`]).

use std::collections::BinaryHeap;
use std::sync::Arc;

use datafusion::arrow::array::{Array, AsArray, UInt32Array};
use datafusion::arrow::compute::{SortOptions, interleave_record_batch, take_record_batch};
use datafusion::arrow::datatypes::DataType;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::arrow::row::{OwnedRow, RowConverter, SortField};
use datafusion::error::Result;
use datafusion::physical_expr::PhysicalSortExpr;
use datafusion::physical_expr::expressions::Column;

use super::access::AccessPath;
use super::decode::{Layout, Source};

/// The order a scan's rows come in: its sort expressions, and the output
/// columns among them that are ascending typed text, whose UTF-16 order
/// [`CodePointOrder`] makes SQL's.
#[derive(Debug, Clone, Default)]
pub struct KeyOrder {
    pub sort: Vec<PhysicalSortExpr>,
    pub utf16_text: Vec<usize>,
}

/// The order of the rows `path` reads, over the `projection` columns of
/// `rows` (the layout of the rows the path reads, base or index): the
/// order-preserving key fields in key order (row fields only when one
/// partition is read), up to the first that is not order-preserving or not
/// projected. A descending field (`{age:~03}`) orders descending.
pub fn key_ordering(rows: &Layout, path: &AccessPath, projection: &[usize]) -> KeyOrder {
    let (Some(def), Some(row_template)) = (&rows.def, rows.row_template()) else {
        return KeyOrder::default();
    };
    let mut fields: Vec<(Source, crate::keys::FieldFormat)> = Vec::new();
    // Buckets (`{#N}`) come in bucket order, not in the RowKey's.
    if !path.single_partition() && def.partition_key.row_buckets().is_some() {
        return KeyOrder::default();
    }
    if !path.single_partition() {
        let pk_fields = def.partition_key.columns().count();
        fields.extend(
            (0..pk_fields)
                .filter_map(|i| Some((Source::PartitionField(i), def.partition_key.field(i)?.1))),
        );
    }
    let rk_fields = row_template.columns().count();
    fields.extend(
        (0..rk_fields).filter_map(|i| Some((Source::RowField(i), row_template.field(i)?.1))),
    );
    let mut ordering = KeyOrder::default();
    for (source, format) in fields {
        let Some(ascending) = format.order() else {
            break;
        };
        let Some(pos) = projection.iter().position(|&i| rows.columns[i].0 == source) else {
            break;
        };
        // Ascending typed text is in UTF-16 order (descending text is
        // bytes, exact).
        if let crate::keys::FieldFormat::Typed(t) = format
            && t.kind == crate::keys::TypedKind::Text
            && !t.descending
        {
            ordering.utf16_text.push(pos);
        }
        let name = rows.schema.field(projection[pos]).name();
        ordering.sort.push(PhysicalSortExpr::new(
            Arc::new(Column::new(name, pos)),
            SortOptions {
                descending: !ascending,
                // A typed field places NULL as declared; the others hold
                // none, and claim PostgreSQL's default for their direction.
                nulls_first: match format {
                    crate::keys::FieldFormat::Typed(t) => t.nulls_first,
                    _ => !ascending,
                },
            },
        ));
    }
    ordering
}

/// Whether rows in order `have` are in order `want` too: `want` is a
/// prefix of `have`, column by column, direction by direction and place
/// of NULL by place of NULL (an index's typed fields hold NULL).
pub fn satisfies(have: &[PhysicalSortExpr], want: &[PhysicalSortExpr]) -> bool {
    let column = |e: &PhysicalSortExpr| {
        e.expr
            .downcast_ref::<Column>()
            .map(|c| (c.name().to_owned(), c.index()))
    };
    want.len() <= have.len()
        && want
            .iter()
            .zip(have)
            .all(|(w, h)| column(w).is_some() && column(w) == column(h) && w.options == h.options)
}

/// Rows in UTF-16 key order, put in code point order as they stream.
///
/// Where two keys first differ, UTF-16 and code points disagree only if the
/// earlier (in UTF-16) has a surrogate there and the later a unit of
/// U+E000..U+FFFF. So a row with no character past U+FFFF in its text
/// fields ("plain") comes, in code point order too, before every row after
/// it: plain rows pass in their place. A row with one is held until a plain
/// row above it comes, or the rows end. Such characters are rare in keys,
/// so a page without them passes untouched. A request under a LIMIT counts
/// only plain rows toward it ([`CodePointOrder::counted`]): past the Nth
/// plain row no row comes before it.
pub struct CodePointOrder {
    sort: Vec<(usize, SortOptions)>,
    text: Arc<[usize]>,
    converter: Option<RowConverter>,
    /// Held rows, least first, each as a one-row batch.
    held: BinaryHeap<std::cmp::Reverse<Held>>,
}

struct Held {
    key: OwnedRow,
    row: RecordBatch,
}

impl PartialEq for Held {
    fn eq(&self, other: &Self) -> bool {
        self.key == other.key
    }
}

impl Eq for Held {}

impl PartialOrd for Held {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Held {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.key.cmp(&other.key)
    }
}

impl CodePointOrder {
    /// For rows in `order` (over the scan's output columns).
    pub fn new(order: &KeyOrder) -> Self {
        let sort = order
            .sort
            .iter()
            .filter_map(|e| {
                let column = e.expr.downcast_ref::<Column>()?;
                Some((column.index(), e.options))
            })
            .collect();
        Self {
            sort,
            text: order.utf16_text.clone().into(),
            converter: None,
            held: BinaryHeap::new(),
        }
    }

    /// Rows of `batch` that count toward a request's LIMIT: the plain ones.
    pub fn counted(text: &[usize], batch: &RecordBatch) -> usize {
        match astral_rows(text, batch) {
            None => batch.num_rows(),
            Some(astral) => astral.iter().filter(|a| !**a).count(),
        }
    }

    /// The rows of `batch` that can go now, in code point order.
    pub fn push(&mut self, batch: RecordBatch) -> Result<Option<RecordBatch>> {
        let astral = match astral_rows(&self.text, &batch) {
            None if self.held.is_empty() => return Ok(Some(batch)),
            None => vec![false; batch.num_rows()],
            Some(astral) => astral,
        };
        let keys = self.keys(&batch)?;
        // Sources: 0 is `batch`, the others rows released from the heap.
        let mut sources = vec![batch.clone()];
        let mut order = Vec::with_capacity(batch.num_rows());
        for (i, is_astral) in astral.iter().enumerate() {
            let key = keys.row(i);
            if *is_astral {
                // Copied: a slice would keep its whole page alive.
                let index = UInt32Array::from(vec![i as u32]);
                self.held.push(std::cmp::Reverse(Held {
                    key: key.owned(),
                    row: take_record_batch(&batch, &index)?,
                }));
                continue;
            }
            while self.held.peek().is_some_and(|h| h.0.key.row() < key) {
                if let Some(std::cmp::Reverse(h)) = self.held.pop() {
                    sources.push(h.row);
                    order.push((sources.len() - 1, 0));
                }
            }
            order.push((0, i));
        }
        if order.is_empty() {
            return Ok(None);
        }
        let refs: Vec<&RecordBatch> = sources.iter().collect();
        Ok(Some(interleave_record_batch(&refs, &order)?))
    }

    /// The rows still held, in order, once the rows end.
    pub fn finish(&mut self) -> Result<Option<RecordBatch>> {
        let mut rows = Vec::with_capacity(self.held.len());
        while let Some(std::cmp::Reverse(h)) = self.held.pop() {
            rows.push(h.row);
        }
        let Some(first) = rows.first() else {
            return Ok(None);
        };
        let schema = first.schema();
        Ok(Some(datafusion::arrow::compute::concat_batches(
            &schema, &rows,
        )?))
    }

    /// The sort columns of `batch` as rows that compare as SQL does.
    fn keys(&mut self, batch: &RecordBatch) -> Result<datafusion::arrow::row::Rows> {
        let converter = match &mut self.converter {
            Some(c) => c,
            None => {
                let fields = self
                    .sort
                    .iter()
                    .map(|(i, o)| {
                        SortField::new_with_options(batch.column(*i).data_type().clone(), *o)
                    })
                    .collect();
                self.converter.insert(RowConverter::new(fields)?)
            }
        };
        let columns: Vec<_> = self
            .sort
            .iter()
            .map(|(i, _)| batch.column(*i).clone())
            .collect();
        Ok(converter.convert_columns(&columns)?)
    }
}

/// Which rows of `batch` have a character past U+FFFF (four bytes in
/// UTF-8) in a column of `text`; `None` where none has, told for the usual
/// `Utf8` column by one pass over its bytes.
fn astral_rows(text: &[usize], batch: &RecordBatch) -> Option<Vec<bool>> {
    let astral = |s: &str| s.bytes().any(|b| b >= 0xF0);
    let mut rows: Option<Vec<bool>> = None;
    for &c in text {
        let column = batch.column(c);
        let values: Vec<Option<&str>> = match column.data_type() {
            DataType::Utf8 => {
                let strings = column.as_string::<i32>();
                if !strings.values().iter().any(|b| *b >= 0xF0) {
                    continue;
                }
                strings.iter().collect()
            }
            DataType::LargeUtf8 => column.as_string::<i64>().iter().collect(),
            DataType::Utf8View => column.as_string_view().iter().collect(),
            // Not text: no character to misplace.
            _ => continue,
        };
        let rows = rows.get_or_insert_with(|| vec![false; batch.num_rows()]);
        for (row, value) in rows.iter_mut().zip(values) {
            *row |= value.is_some_and(astral);
        }
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::StringArray;
    use datafusion::arrow::datatypes::{DataType, Field, Schema};

    fn batch(keys: &[&str]) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![Field::new("k", DataType::Utf8, false)]));
        let column = Arc::new(StringArray::from(keys.to_vec()));
        RecordBatch::try_new(schema, vec![column]).unwrap()
    }

    fn keys(batches: &[RecordBatch]) -> Vec<String> {
        batches
            .iter()
            .flat_map(|b| {
                let c = b.column(0).as_string::<i32>();
                (0..b.num_rows())
                    .map(|i| c.value(i).to_owned())
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    fn utf16_sorted(mut keys: Vec<&'static str>) -> Vec<&'static str> {
        keys.sort_by(|a, b| a.encode_utf16().cmp(b.encode_utf16()));
        keys
    }

    #[test]
    fn rows_in_utf16_key_order_come_out_in_code_point_order() {
        let order = KeyOrder {
            sort: vec![PhysicalSortExpr::new(
                Arc::new(Column::new("k", 0)),
                SortOptions::default(),
            )],
            utf16_text: vec![0],
        };
        let all = vec![
            "a",
            "a\u{E000}",
            "a\u{1F600}",
            "a\u{1F600}b",
            "a\u{FFFC}",
            "b",
            "b\u{10000}",
            "c",
            "\u{1F600}",
            "\u{E001}",
        ];
        let input = utf16_sorted(all.clone());
        let mut want: Vec<String> = all.iter().map(|s| (*s).to_owned()).collect();
        want.sort();
        assert_ne!(
            input.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>(),
            want
        );
        // Every way of cutting the rows into two pages.
        for cut in 0..=input.len() {
            let mut reorder = CodePointOrder::new(&order);
            let mut out = Vec::new();
            for page in [&input[..cut], &input[cut..]] {
                out.extend(reorder.push(batch(page)).unwrap());
            }
            out.extend(reorder.finish().unwrap());
            assert_eq!(keys(&out), want, "cut at {cut}");
        }
        // A page with no character past U+FFFF passes as it is.
        let mut reorder = CodePointOrder::new(&order);
        let plain = batch(&["a", "a\u{E000}", "b"]);
        assert_eq!(reorder.push(plain.clone()).unwrap(), Some(plain));
        assert_eq!(CodePointOrder::counted(&[0], &batch(&input)), 6);
    }
}
