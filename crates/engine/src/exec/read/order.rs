//! The key order a scan's rows arrive in, as sort expressions: what lets
//! DataFusion plan no sort for an ORDER BY that the keys already give.

use std::sync::Arc;

use datafusion::arrow::compute::SortOptions;
use datafusion::physical_expr::PhysicalSortExpr;
use datafusion::physical_expr::expressions::Column;

use super::access::AccessPath;
use super::decode::{Layout, Source};

/// The order of the rows `path` reads, over the `projection` columns of
/// `rows` (the layout of the rows the path reads, base or index): the
/// order-preserving key fields in key order (row fields only when one
/// partition is read), up to the first that is not order-preserving or not
/// projected. A descending field (`{age:~03}`) orders descending.
pub fn key_ordering(
    rows: &Layout,
    path: &AccessPath,
    projection: &[usize],
) -> Vec<PhysicalSortExpr> {
    let (Some(def), Some(row_template)) = (&rows.def, rows.row_template()) else {
        return Vec::new();
    };
    let mut fields: Vec<(Source, crate::keys::FieldFormat)> = Vec::new();
    // Buckets (`{#N}`) come in bucket order, not in the RowKey's.
    if !path.single_partition() && def.partition_key.row_buckets().is_some() {
        return Vec::new();
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
    let mut ordering = Vec::new();
    for (source, format) in fields {
        let Some(ascending) = format.order() else {
            break;
        };
        // Ascending typed text is in UTF-16 order, which puts characters
        // past U+FFFF below U+E000..U+FFFC where SQL's code point order
        // does not: no order claimed (descending text is bytes, exact).
        if let crate::keys::FieldFormat::Typed(t) = format
            && t.kind == crate::keys::TypedKind::Text
            && !t.descending
        {
            break;
        }
        let Some(pos) = projection.iter().position(|&i| rows.columns[i].0 == source) else {
            break;
        };
        let name = rows.schema.field(projection[pos]).name();
        ordering.push(PhysicalSortExpr::new(
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
