//! Temporary tables: `CREATE TEMP TABLE [AS]`, in schema `pg_temp`, the
//! session's alone and in its memory (`engine::own`), dropped with it.
//! dbt's incremental models and snapshots stage their rows in one.

use datafusion::sql::sqlparser::ast::{CreateTable, Ident};

use super::block_ddl::exists_skipping;
use super::*;

impl Session {
    /// `CREATE TEMP TABLE`, `CREATE TEMP TABLE ... AS` and `DROP TABLE` of
    /// temporary tables; `None` for other statements.
    pub(super) async fn temp_ddl(
        &self,
        statement: &Statement,
    ) -> Result<Option<DdlOutcome>, EngineError> {
        let Some(own) = self.own() else {
            return Ok(None);
        };
        match statement {
            Statement::CreateTable(create) if create.temporary => {
                if create.on_commit.is_some() {
                    return Err(EngineError::NotSupported(
                        "ON COMMIT of a temporary table is not supported".into(),
                    ));
                }
                let name = temp_name(&create.name)?;
                let mut outcome = DdlOutcome::default();
                if own.temp(&name).is_some() {
                    if create.if_not_exists {
                        outcome.notices.push(exists_skipping(&name));
                        return Ok(Some(outcome));
                    }
                    return Err(CatalogError::TableExists(name).into());
                }
                let table = match &create.query {
                    Some(query) => self.temp_from_query(create, query).await?,
                    None => {
                        let def = ddl::from_create_table(create)?;
                        let fields: Vec<_> = def
                            .columns
                            .iter()
                            .map(|c| {
                                datafusion::arrow::datatypes::Field::new(
                                    &c.name,
                                    c.column_type.arrow_type(),
                                    !c.not_null,
                                )
                            })
                            .collect();
                        let schema = Arc::new(datafusion::arrow::datatypes::Schema::new(fields));
                        MemTable::try_new(schema, vec![vec![]])?
                    }
                };
                own.put_temp(&name, Some(Arc::new(table)));
                self.engine.catalog_changed();
                Ok(Some(outcome))
            }
            Statement::Drop {
                object_type: ObjectType::Table,
                if_exists: _,
                names,
                ..
            } => {
                let names: Vec<String> = names
                    .iter()
                    .map(temp_name)
                    .collect::<Result<_, _>>()
                    .unwrap_or_default();
                if names.is_empty() || names.iter().any(|n| own.temp(n).is_none()) {
                    return Ok(None);
                }
                for n in &names {
                    own.put_temp(n, None);
                }
                self.engine.catalog_changed();
                Ok(Some(DdlOutcome::default()))
            }
            _ => Ok(None),
        }
    }

    async fn temp_from_query(
        &self,
        create: &CreateTable,
        query: &datafusion::sql::sqlparser::ast::Query,
    ) -> Result<MemTable, EngineError> {
        // Planned here, not by `frame`: its rows whole, never one page.
        let state = self.ctx.state();
        let plan = crate::planner::upsert::statement_to_plan(
            &state,
            Statement::Query(Box::new(query.clone())),
        )
        .await?;
        let shown = crate::planner::output_names::shown(plan.schema().inner());
        // The names the plan shows, the types its rows come in (the
        // physical plan's, which rules after the logical one may change).
        let stream = DataFrame::new(state, plan).execute_stream().await?;
        let types = stream.schema();
        let batches: Vec<RecordBatch> = futures::TryStreamExt::try_collect(stream).await?;
        let fields: Vec<_> = types
            .fields()
            .iter()
            .enumerate()
            .map(|(i, f)| {
                let name = match create.columns.get(i) {
                    Some(c) => crate::catalog::normalize_ident(&c.name),
                    None => shown.field(i).name().clone(),
                };
                f.as_ref().clone().with_name(name).with_nullable(true)
            })
            .collect();
        let schema = Arc::new(datafusion::arrow::datatypes::Schema::new(fields));
        let batches = batches
            .into_iter()
            .map(|b| RecordBatch::try_new(schema.clone(), b.columns().to_vec()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(DataFusionError::from)?;
        Ok(MemTable::try_new(schema, vec![batches])?)
    }
}

/// A temporary table's name: bare, or in `pg_temp`.
fn temp_name(name: &ObjectName) -> Result<String, CatalogError> {
    match name.0.as_slice() {
        [schema, table]
            if schema
                .as_ident()
                .is_some_and(|s| normalize(s) == overlay::TEMP_SCHEMA) =>
        {
            table
                .as_ident()
                .map(crate::catalog::normalize_ident)
                .ok_or_else(|| CatalogError::Definition(format!("invalid table name {name}")))
        }
        _ => ddl::object_name(name),
    }
}

fn normalize(ident: &Ident) -> String {
    crate::catalog::normalize_ident(ident)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_temporary_name_may_be_qualified_by_pg_temp_only() {
        let parse = |s: &str| match crate::planner::SqlParser::new()
            .parse(&format!("DROP TABLE {s}"))
            .expect("parses")
            .remove(0)
        {
            Statement::Drop { names, .. } => names[0].clone(),
            _ => unreachable!(),
        };
        assert_eq!(temp_name(&parse("pg_temp.x")).expect("name"), "x");
        assert_eq!(temp_name(&parse("x")).expect("name"), "x");
        assert!(temp_name(&parse("other.x")).is_err());
    }
}
