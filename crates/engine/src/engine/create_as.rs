//! `CREATE TABLE ... AS <query>`: a table made from a query's schema, then
//! filled by its rows.

use super::*;

impl Session {
    /// `CREATE TABLE t [(names)] AS <query>`: a plain table (the default
    /// mapping, a hidden row key: the query gives no primary key) with the
    /// query's columns and types, then its rows, written as `INSERT INTO t
    /// <query>` writes them. A type the store has no EDM type for is
    /// refused before anything is created. In a transaction block both
    /// wait for COMMIT.
    pub(super) async fn create_table_as(
        &self,
        create: &datafusion::sql::sqlparser::ast::CreateTable,
    ) -> Result<DdlOutcome, EngineError> {
        let Some(query) = &create.query else {
            return Err(CatalogError::Definition("CREATE TABLE AS needs a query".into()).into());
        };
        // PostgreSQL has no CREATE OR REPLACE TABLE; over an existing table
        // it would keep the old rows beside the query's.
        if create.or_replace {
            return Err(CatalogError::Definition(
                "CREATE OR REPLACE TABLE ... AS is not supported: DROP TABLE, then CREATE TABLE ... AS".into(),
            )
            .into());
        }
        let name = ddl::object_name(&create.name)?;
        if let Some(own) = self.block_own() {
            self.touch(&own, &[&name]).await?;
        }
        if !matches!(self.named(&name).await?, block_ddl::Named::Missing) {
            if create.if_not_exists {
                let mut outcome = DdlOutcome::default();
                outcome.notices.push(Notice::new(
                    NoticeKind::AlreadyExists,
                    format!("relation \"{name}\" already exists, skipping"),
                ));
                return Ok(outcome);
            }
            return Err(CatalogError::TableExists(name).into());
        }
        let state = self.ctx.state();
        let plan =
            crate::planner::upsert::statement_to_plan(&state, Statement::Query(query.clone()))
                .await?;
        let fields = crate::planner::output_names::shown(plan.schema().inner());
        if create.columns.len() > fields.fields().len() {
            return Err(CatalogError::Definition(format!(
                "CREATE TABLE AS specifies {} column names, but the query has only {} columns",
                create.columns.len(),
                fields.fields().len()
            ))
            .into());
        }
        let quote = |n: &str| format!("\"{}\"", n.replace('"', "\"\""));
        let mut columns = Vec::new();
        for (i, field) in fields.fields().iter().enumerate() {
            let column = match create.columns.get(i) {
                Some(c) => crate::catalog::normalize_ident(&c.name),
                None => field.name().clone(),
            };
            let t = crate::catalog::ColumnType::from_arrow(field.data_type()).ok_or_else(|| {
                CatalogError::UnsupportedType {
                    column: column.clone(),
                    sql_type: field.data_type().to_string(),
                }
            })?;
            columns.push((column, t));
        }
        let ddl = format!(
            "CREATE TABLE {} ({})",
            quote(&name),
            columns
                .iter()
                .map(|(c, t)| format!("{} {t}", quote(c)))
                .collect::<Vec<_>>()
                .join(", ")
        );
        let def = ddl::parse(&ddl)?;
        // In a block, the table and its rows wait for COMMIT together
        // (`engine::block_ddl`).
        self.define_table(def).await?;
        let insert = format!(
            "INSERT INTO {} ({}) {query}",
            quote(&name),
            columns
                .iter()
                .map(|(c, _)| quote(c))
                .collect::<Vec<_>>()
                .join(", ")
        );
        // The table and its rows together: a failed write drops the table
        // (with what it wrote of them; an owned table's storage goes too).
        let written = async {
            let statement = self
                .parse(&insert)
                .map_err(|e| EngineError::DataFusion(DataFusionError::SQL(Box::new(e), None)))?
                .into_iter()
                .next()
                .ok_or_else(|| {
                    CatalogError::Definition(format!("could not write {name}'s rows"))
                })?;
            self.frame(statement).await?.collect().await?;
            Ok::<(), EngineError>(())
        }
        .await;
        if let Err(e) = written {
            if self.block_own().is_some() {
                self.undefine_in_block(&name);
            } else {
                let _ = Box::pin(self.drop_table(&name)).await;
            }
            return Err(e);
        }
        Ok(DdlOutcome::default())
    }
}
