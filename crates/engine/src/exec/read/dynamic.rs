//! DataFusion's dynamic filters as key conditions.
//!
//! A hash join reads its build side whole before it reads a row of its
//! probe side, and then knows what no probe row outside the build side's
//! keys can match: DataFusion hands the probe side's scan a dynamic filter
//! which, once the build side is read, holds `key >= min AND key <= max`,
//! and for a small build side `key IN (...)` as well. A scan that applied
//! it only to the rows it read would still read the whole table; read as
//! conditions on the key columns, it becomes the access path's business:
//! points for a list of primary keys, a range of partitions for bounds on
//! the PartitionKey. So the scan takes the filter's value when its rows are
//! first asked for (the build side is read by then) and, where the
//! pushdown finds a narrower path for its conditions with these added, reads
//! that path instead. The filter is an optimisation: a part of it that does
//! not read as a key condition is left out, which only reads more rows,
//! and the join still compares every key.

use std::sync::Arc;

use datafusion::arrow::datatypes::Schema;
use datafusion::common::Column as ColumnRef;
use datafusion::common::ScalarValue;
use datafusion::error::Result;
use datafusion::logical_expr::{Expr, Operator, lit};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::ScalarFunctionExpr;
use datafusion::physical_expr::expressions::{BinaryExpr, Column, InListExpr, Literal};
use datafusion::physical_expr_common::physical_expr::snapshot_physical_expr;

use super::access::{Access, AccessPath};

/// The dynamic filter's conditions now, as conditions on `schema`'s
/// columns (the scan's output) that the pushdown reads: comparisons of a
/// column with a value, and lists of values, under ANDs.
pub fn key_conditions(filter: &Arc<dyn PhysicalExpr>, schema: &Schema) -> Result<Vec<Expr>> {
    let now = snapshot_physical_expr(Arc::clone(filter))?;
    let mut out = Vec::new();
    conjuncts(&now, schema, &mut out);
    Ok(equalities(out))
}

/// `c >= v AND c <= v` as `c = v`, which the pushdown reads as a key
/// field fixed (one build row's bounds are its value).
fn equalities(conditions: Vec<Expr>) -> Vec<Expr> {
    let bound = |e: &Expr, op: Operator| match e {
        Expr::BinaryExpr(b) if b.op == op => {
            Some((b.left.as_ref().clone(), b.right.as_ref().clone()))
        }
        _ => None,
    };
    let mut out: Vec<Expr> = Vec::with_capacity(conditions.len());
    for c in &conditions {
        if let Some((column, value)) = bound(c, Operator::LtEq)
            && let Some(i) = out
                .iter()
                .position(|o| bound(o, Operator::GtEq) == Some((column.clone(), value.clone())))
        {
            out[i] = column.eq(value);
            continue;
        }
        out.push(c.clone());
    }
    out
}

/// The scan's column `name` as it is spelled: `col` would fold its case
/// and split it at dots.
fn col(name: String) -> Expr {
    Expr::Column(ColumnRef::new_unqualified(name))
}

fn conjuncts(e: &Arc<dyn PhysicalExpr>, schema: &Schema, out: &mut Vec<Expr>) {
    let any = e.as_ref() as &dyn std::any::Any;
    if let Some(b) = any.downcast_ref::<BinaryExpr>() {
        if *b.op() == Operator::And {
            conjuncts(b.left(), schema, out);
            conjuncts(b.right(), schema, out);
            return;
        }
        let compared = matches!(
            b.op(),
            Operator::Eq | Operator::Lt | Operator::LtEq | Operator::Gt | Operator::GtEq
        );
        if let (true, Some(name), Some(value)) =
            (compared, column(b.left(), schema), literal(b.right()))
        {
            out.push(Expr::BinaryExpr(datafusion::logical_expr::BinaryExpr::new(
                Box::new(col(name)),
                *b.op(),
                Box::new(lit(value)),
            )));
        }
        return;
    }
    if let Some(list) = any.downcast_ref::<InListExpr>()
        && !list.negated()
    {
        let columns = match column(list.expr(), schema) {
            Some(name) => vec![name],
            None => match struct_of_columns(list.expr(), schema) {
                Some(names) => names,
                None => return,
            },
        };
        // A value of a column that holds no NULL (a key's) with a NULL in
        // it matches no row: left out. Of a nullable column the list is no
        // condition (the bounds still are).
        if columns
            .iter()
            .any(|c| schema.field_with_name(c).map_or(true, |f| f.is_nullable()))
        {
            return;
        }
        // Every element read, or no list: one left out would narrow it.
        let decoded: Option<Vec<Vec<ScalarValue>>> = list
            .list()
            .iter()
            .map(|v| {
                let value = literal_or_null(v)?;
                match columns.len() {
                    1 => Some(vec![value]),
                    n => (0..n).map(|i| field_of(&value, i)).collect(),
                }
            })
            .collect();
        let Some(decoded) = decoded else {
            return;
        };
        let tuples: Vec<Vec<ScalarValue>> = decoded
            .into_iter()
            .filter(|t| t.iter().all(|v| !v.is_null()))
            .collect();
        // Each column in its values, whose combinations hold every tuple
        // (and may hold more).
        for (i, name) in columns.into_iter().enumerate() {
            let mut values: Vec<ScalarValue> = Vec::new();
            for t in &tuples {
                if !values.contains(&t[i]) {
                    values.push(t[i].clone());
                }
            }
            out.push(col(name).in_list(values.into_iter().map(lit).collect(), false));
        }
    }
}

/// The scan's columns a `struct(a, b, ...)` of columns is made of.
fn struct_of_columns(e: &Arc<dyn PhysicalExpr>, schema: &Schema) -> Option<Vec<String>> {
    let f = (e.as_ref() as &dyn std::any::Any).downcast_ref::<ScalarFunctionExpr>()?;
    if f.name() != "struct" {
        return None;
    }
    f.args().iter().map(|a| column(a, schema)).collect()
}

/// Field `i` of a struct value.
fn field_of(value: &ScalarValue, i: usize) -> Option<ScalarValue> {
    let ScalarValue::Struct(array) = value else {
        return None;
    };
    ScalarValue::try_from_array(array.columns().get(i)?, 0).ok()
}

/// The name of the scan's column `e` is, where it is one (by name and
/// position: a filter pushed through projections names the scan's own).
fn column(e: &Arc<dyn PhysicalExpr>, schema: &Schema) -> Option<String> {
    let c = (e.as_ref() as &dyn std::any::Any).downcast_ref::<Column>()?;
    let field = schema.fields().get(c.index())?;
    (field.name() == c.name()).then(|| c.name().to_owned())
}

fn literal(e: &Arc<dyn PhysicalExpr>) -> Option<ScalarValue> {
    literal_or_null(e).filter(|v| !v.is_null())
}

fn literal_or_null(e: &Arc<dyn PhysicalExpr>) -> Option<ScalarValue> {
    let l = (e.as_ref() as &dyn std::any::Any).downcast_ref::<Literal>()?;
    Some(l.value().clone())
}

/// Whether `new` reads less than `old` by the kind of its requests: points
/// before ranges within partitions before ranges of partitions before
/// every partition.
pub fn narrower(new: &AccessPath, old: &AccessPath) -> bool {
    rank(&new.access) < rank(&old.access)
}

fn rank(access: &Access) -> u8 {
    match access {
        Access::Points => 0,
        Access::FullScan => 3,
        Access::PartitionRange => 2,
        _ => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::datatypes::{DataType, Field};
    use datafusion::physical_expr::expressions::{DynamicFilterPhysicalExpr, lit as plit};

    fn schema() -> Schema {
        Schema::new(vec![
            Field::new("event", DataType::Utf8, false),
            Field::new("bib", DataType::Int32, false),
        ])
    }

    #[test]
    fn a_filled_dynamic_filter_reads_as_bounds_and_a_list_on_the_scan_columns() -> Result<()> {
        let bib: Arc<dyn PhysicalExpr> = Arc::new(Column::new("bib", 1));
        let filter = Arc::new(DynamicFilterPhysicalExpr::new(
            vec![Arc::clone(&bib)],
            plit(true),
        ));
        let dynamic: Arc<dyn PhysicalExpr> = filter.clone();
        // Before the build side is read: nothing to read by.
        assert!(key_conditions(&dynamic, &schema())?.is_empty());
        let bounds = Arc::new(BinaryExpr::new(
            Arc::new(BinaryExpr::new(Arc::clone(&bib), Operator::GtEq, plit(3))),
            Operator::And,
            Arc::new(BinaryExpr::new(Arc::clone(&bib), Operator::LtEq, plit(9))),
        ));
        let list = Arc::new(InListExpr::try_new(
            Arc::clone(&bib),
            vec![plit(3), plit(9)],
            false,
            &schema(),
        )?);
        filter.update(Arc::new(BinaryExpr::new(bounds, Operator::And, list)))?;
        let got: Vec<String> = key_conditions(&dynamic, &schema())?
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            got,
            vec![
                "bib >= Int32(3)",
                "bib <= Int32(9)",
                "bib IN ([Int32(3), Int32(9)])"
            ]
        );
        // One build row: its bounds are its value.
        filter.update(Arc::new(BinaryExpr::new(
            Arc::new(BinaryExpr::new(Arc::clone(&bib), Operator::GtEq, plit(4))),
            Operator::And,
            Arc::new(BinaryExpr::new(Arc::clone(&bib), Operator::LtEq, plit(4))),
        )))?;
        let got: Vec<String> = key_conditions(&dynamic, &schema())?
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(got, vec!["bib = Int32(4)"]);
        // A column the scan does not have at that position is no condition.
        let other = Arc::new(BinaryExpr::new(
            Arc::new(Column::new("age", 1)),
            Operator::Eq,
            plit(3),
        )) as Arc<dyn PhysicalExpr>;
        assert!(key_conditions(&other, &schema())?.is_empty());
        Ok(())
    }

    #[test]
    fn a_column_keeps_its_spelling_and_a_list_with_an_unreadable_element_is_none() -> Result<()> {
        let schema = Schema::new(vec![Field::new("PartitionKey", DataType::Utf8, false)]);
        let pk: Arc<dyn PhysicalExpr> = Arc::new(Column::new("PartitionKey", 0));
        let list: Arc<dyn PhysicalExpr> = Arc::new(InListExpr::try_new(
            Arc::clone(&pk),
            vec![plit("a"), plit("b")],
            false,
            &schema,
        )?);
        let got: Vec<String> = key_conditions(&list, &schema)?
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(got, vec![r#"PartitionKey IN ([Utf8("a"), Utf8("b")])"#]);
        // An element that is not a value: no list at all, not a shorter one.
        let odd: Arc<dyn PhysicalExpr> = Arc::new(InListExpr::try_new(
            Arc::clone(&pk),
            vec![plit("a"), Arc::clone(&pk)],
            false,
            &schema,
        )?);
        assert!(key_conditions(&odd, &schema)?.is_empty());
        Ok(())
    }
}
