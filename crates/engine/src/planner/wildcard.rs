//! `SELECT *` as PostgreSQL expands it.
//!
//! A mapped table exposes its system columns (`PartitionKey`, `RowKey`,
//! `Timestamp`, `_etag`) beside its own, so that a query can name them. But
//! if `*` expanded to them, `INSERT INTO copy SELECT * FROM t` would not fit
//! `copy`, and every tool that reads `SELECT *` would see four columns it
//! did not create. PostgreSQL keeps its own system columns (`ctid`, `xmin`)
//! out of `*` the same way. DataFusion 55 has no hidden columns, so before
//! it plans a statement, each wildcard over a mapped table is rewritten:
//! `t.*` becomes `t.* EXCLUDE (<system columns>)`, and a bare `*` becomes
//! the same per relation of its FROM (`a.* EXCLUDE (...), b.*`), in FROM
//! order, which is the order DataFusion expands `*` in. Where a bare `*`
//! cannot be split (a join with USING or NATURAL, which merges columns, or
//! a relation without a name), it excludes the system columns itself when
//! one mapped table is in scope, and is left alone otherwise.

use std::collections::{HashMap, HashSet};
use std::ops::ControlFlow;

use datafusion::common::TableReference;
use datafusion::error::Result;
use datafusion::execution::session_state::SessionState;
use datafusion::sql::sqlparser::ast::{
    ExcludeSelectItem, Ident, JoinConstraint, JoinOperator, ObjectName, Select, SelectItem,
    SelectItemQualifiedWildcardKind, Statement, TableFactor, TableWithJoins, Visit, VisitMut,
    Visitor, VisitorMut, WildcardAdditionalOptions,
};

use super::StoreTable;
use crate::catalog::normalize_ident;

/// Rewrites every wildcard of `statement` over a mapped table (see the
/// module doc). Statements without a wildcard are left alone unread.
pub async fn hide_system_columns(state: &SessionState, statement: &mut Statement) -> Result<()> {
    let mut names = Names::default();
    let _ = Visit::visit(&*statement, &mut names);
    if !names.wildcard {
        return Ok(());
    }
    let mut mapped = HashMap::new();
    for name in names.relations {
        if let [one] = name.as_slice()
            && names.ctes.contains(one)
        {
            continue;
        }
        if let Some(hidden) = hidden_of(state, &name).await {
            mapped.insert(name, hidden);
        }
    }
    if mapped.is_empty() {
        return Ok(());
    }
    let _ = VisitMut::visit(statement, &mut Rewrite { mapped: &mapped });
    Ok(())
}

/// The columns `*` leaves out of `name`, if it is a mapped table (raw
/// storage tables keep their keys in `*`: they are the only way to tell
/// their rows apart).
async fn hidden_of(state: &SessionState, name: &[String]) -> Option<Vec<String>> {
    // The parts as `key` normalized them: parsing their text again would
    // fold a quoted name's case.
    let reference = match name {
        [t] => TableReference::bare(t.as_str()),
        [s, t] => TableReference::partial(s.as_str(), t.as_str()),
        [c, s, t] => TableReference::full(c.as_str(), s.as_str(), t.as_str()),
        _ => return None,
    };
    let schema = state.schema_for_ref(reference.clone()).ok()?;
    let provider = schema.table(reference.table()).await.ok()??;
    let table = StoreTable::of(provider.as_ref())?;
    let def = table.layout().def.clone()?;
    Some(
        def.hidden_columns()
            .into_iter()
            .map(str::to_owned)
            .collect(),
    )
}

/// The relations a statement names, its CTEs' names, and whether it holds
/// a wildcard at all.
#[derive(Default)]
struct Names {
    relations: HashSet<Vec<String>>,
    ctes: HashSet<String>,
    wildcard: bool,
}

impl Visitor for Names {
    type Break = ();

    fn pre_visit_query(
        &mut self,
        query: &datafusion::sql::sqlparser::ast::Query,
    ) -> ControlFlow<()> {
        if let Some(with) = &query.with {
            for cte in &with.cte_tables {
                self.ctes.insert(normalize_ident(&cte.alias.name));
            }
        }
        ControlFlow::Continue(())
    }

    fn pre_visit_select(&mut self, select: &Select) -> ControlFlow<()> {
        self.wildcard |= select.projection.iter().any(|i| {
            matches!(
                i,
                SelectItem::Wildcard(_) | SelectItem::QualifiedWildcard(..)
            )
        });
        ControlFlow::Continue(())
    }

    fn pre_visit_relation(&mut self, relation: &ObjectName) -> ControlFlow<()> {
        self.relations.insert(key(relation));
        ControlFlow::Continue(())
    }
}

/// A relation's name as the lookup reads it: each part normalized.
fn key(name: &ObjectName) -> Vec<String> {
    name.0
        .iter()
        .map(|p| {
            p.as_ident()
                .map(normalize_ident)
                .unwrap_or_else(|| p.to_string())
        })
        .collect()
}

/// One relation of a FROM: the name `*` qualifies its columns by, and
/// for a mapped table the columns `*` leaves out.
struct Relation {
    qualifier: Option<ObjectName>,
    hidden: Option<Vec<String>>,
}

struct Rewrite<'a> {
    mapped: &'a HashMap<Vec<String>, Vec<String>>,
}

impl Rewrite<'_> {
    fn relation(&self, factor: &TableFactor) -> Relation {
        match factor {
            TableFactor::Table { name, alias, .. } => Relation {
                qualifier: Some(match alias {
                    Some(a) => ObjectName::from(vec![a.name.clone()]),
                    None => name.clone(),
                }),
                hidden: self.mapped.get(&key(name)).cloned(),
            },
            TableFactor::Derived { alias, .. } | TableFactor::Function { alias, .. } => Relation {
                qualifier: alias
                    .as_ref()
                    .map(|a| ObjectName::from(vec![a.name.clone()])),
                hidden: None,
            },
            // A nested join or anything else: no one name covers it.
            _ => Relation {
                qualifier: None,
                hidden: None,
            },
        }
    }

    fn relations(&self, from: &[TableWithJoins]) -> (Vec<Relation>, bool) {
        let mut out = Vec::new();
        let mut merges = false;
        for t in from {
            out.push(self.relation(&t.relation));
            for j in &t.joins {
                out.push(self.relation(&j.relation));
                merges |= matches!(
                    constraint(&j.join_operator),
                    Some(JoinConstraint::Using(_) | JoinConstraint::Natural)
                );
            }
        }
        (out, merges)
    }
}

fn constraint(op: &JoinOperator) -> Option<&JoinConstraint> {
    match op {
        JoinOperator::Join(c)
        | JoinOperator::Inner(c)
        | JoinOperator::Left(c)
        | JoinOperator::LeftOuter(c)
        | JoinOperator::Right(c)
        | JoinOperator::RightOuter(c)
        | JoinOperator::FullOuter(c)
        | JoinOperator::Semi(c)
        | JoinOperator::LeftSemi(c)
        | JoinOperator::RightSemi(c)
        | JoinOperator::Anti(c)
        | JoinOperator::LeftAnti(c)
        | JoinOperator::RightAnti(c) => Some(c),
        _ => None,
    }
}

/// The wildcard options that leave `hidden` out.
fn excluding(
    mut options: WildcardAdditionalOptions,
    hidden: &[String],
) -> WildcardAdditionalOptions {
    options.opt_exclude = Some(ExcludeSelectItem::Multiple(
        hidden
            .iter()
            .map(|c| ObjectName::from(vec![Ident::with_quote('"', c.as_str())]))
            .collect(),
    ));
    options
}

/// The last part of a name, normalized: what a qualifier is matched by.
fn last(name: &ObjectName) -> Option<String> {
    name.0
        .last()
        .and_then(|p| p.as_ident())
        .map(normalize_ident)
}

impl VisitorMut for Rewrite<'_> {
    type Break = ();

    fn post_visit_select(&mut self, select: &mut Select) -> ControlFlow<()> {
        let (relations, merges) = self.relations(&select.from);
        let mut mapped = relations.iter().filter_map(|r| r.hidden.as_ref());
        let lone = match (mapped.next(), mapped.next()) {
            (None, _) => return ControlFlow::Continue(()),
            (Some(hidden), None) => Some(hidden.clone()),
            (Some(_), Some(_)) => None,
        };
        let by_name: HashMap<String, &Vec<String>> = relations
            .iter()
            .filter_map(|r| Some((last(r.qualifier.as_ref()?)?, r.hidden.as_ref()?)))
            .collect();
        let splittable = !merges && relations.iter().all(|r| r.qualifier.is_some());
        let items = std::mem::take(&mut select.projection);
        for item in items {
            match item {
                SelectItem::QualifiedWildcard(
                    SelectItemQualifiedWildcardKind::ObjectName(q),
                    options,
                ) if options.opt_exclude.is_none() => {
                    let options = match last(&q).and_then(|n| by_name.get(&n).copied()) {
                        Some(hidden) => excluding(options, hidden),
                        None => options,
                    };
                    select.projection.push(SelectItem::QualifiedWildcard(
                        SelectItemQualifiedWildcardKind::ObjectName(q),
                        options,
                    ));
                }
                SelectItem::Wildcard(options) if options.opt_exclude.is_none() && splittable => {
                    for r in &relations {
                        let Some(q) = r.qualifier.clone() else {
                            continue;
                        };
                        let options = match &r.hidden {
                            Some(hidden) => excluding(options.clone(), hidden),
                            None => options.clone(),
                        };
                        select.projection.push(SelectItem::QualifiedWildcard(
                            SelectItemQualifiedWildcardKind::ObjectName(q),
                            options,
                        ));
                    }
                }
                SelectItem::Wildcard(options) if options.opt_exclude.is_none() => {
                    let options = match &lone {
                        Some(hidden) => excluding(options, hidden),
                        None => options,
                    };
                    select.projection.push(SelectItem::Wildcard(options));
                }
                other => select.projection.push(other),
            }
        }
        ControlFlow::Continue(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::SYSTEM_COLUMNS;
    use crate::planner::SqlParser;

    fn rewritten(sql: &str) -> String {
        let mut statement = SqlParser::new().parse(sql).expect("parses").remove(0);
        let system: Vec<String> = SYSTEM_COLUMNS.map(str::to_owned).into();
        let mapped: HashMap<Vec<String>, Vec<String>> = ["members", "orders"]
            .map(|t| (vec![t.to_owned()], system.clone()))
            .into();
        let _ = VisitMut::visit(&mut statement, &mut Rewrite { mapped: &mapped });
        statement.to_string()
    }

    const EX: &str = r#"EXCLUDE ("PartitionKey", "RowKey", "Timestamp", "_etag")"#;

    #[test]
    fn wildcards_over_mapped_tables_leave_the_system_columns_out() {
        assert_eq!(
            rewritten("SELECT * FROM members"),
            format!("SELECT members.* {EX} FROM members")
        );
        assert_eq!(
            rewritten("SELECT m.*, 1 FROM members AS m"),
            format!("SELECT m.* {EX}, 1 AS \"?column?\" FROM members AS m")
        );
        // Per relation, in FROM order; other relations as they are.
        assert_eq!(
            rewritten("SELECT * FROM members m JOIN other o ON m.id = o.id"),
            format!("SELECT m.* {EX}, o.* FROM members m JOIN other o ON m.id = o.id")
        );
        // USING merges columns: one exclusion over the whole, with one mapped table.
        assert_eq!(
            rewritten("SELECT * FROM members JOIN other USING (id)"),
            format!("SELECT * {EX} FROM members JOIN other USING(id)")
        );
        // Inner queries too (an INSERT's source, a derived table).
        assert_eq!(
            rewritten("INSERT INTO orders SELECT * FROM (SELECT * FROM members) AS s"),
            format!("INSERT INTO orders SELECT * FROM (SELECT members.* {EX} FROM members) AS s")
        );
    }

    #[test]
    fn other_wildcards_are_left_alone() {
        // Two mapped tables merged by USING: no one exclusion fits.
        for sql in [
            "SELECT * FROM other",
            "SELECT count(*) FROM members",
            "SELECT * FROM members m JOIN orders o USING (id)",
        ] {
            let out = rewritten(sql);
            assert!(!out.contains("EXCLUDE"), "{sql} became {out}");
        }
        assert_eq!(
            rewritten("SELECT o.* FROM members JOIN other o ON true"),
            "SELECT o.* FROM members JOIN other o ON true"
        );
    }
}
