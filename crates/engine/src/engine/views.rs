//! Views: `CREATE VIEW` kept in the catalog, so that every process over
//! the store plans with it, and `DROP VIEW`.

use super::*;

impl Engine {
    /// The provider of a stored view: its `CREATE VIEW` text planned as
    /// every statement is (so `*` in it is PostgreSQL's), over the tables
    /// registered now.
    pub(super) async fn view_provider(
        &self,
        sql: &str,
    ) -> Result<Arc<dyn TableProvider>, EngineError> {
        self.view_planned(&self.base.state(), sql).await
    }

    /// A view's `CREATE VIEW` text planned under `state` (a session's sees
    /// its own relations: `engine::overlay`).
    pub(super) async fn view_planned(
        &self,
        state: &datafusion::execution::session_state::SessionState,
        sql: &str,
    ) -> Result<Arc<dyn TableProvider>, EngineError> {
        let statement = self
            .parse(sql)
            .map_err(|e| CatalogError::Definition(format!("stored view: {e}")))?
            .into_iter()
            .next()
            .ok_or_else(|| CatalogError::Definition("stored view: no statement".into()))?;
        match crate::planner::upsert::statement_to_plan(state, statement).await? {
            LogicalPlan::Ddl(datafusion::logical_expr::DdlStatement::CreateView(view)) => {
                Ok(Arc::new(datafusion::datasource::ViewTable::new(
                    view.input.as_ref().clone(),
                    view.definition.clone(),
                )))
            }
            _ => Err(CatalogError::Definition("stored view: not CREATE VIEW".into()).into()),
        }
    }

    /// `CREATE [OR REPLACE] VIEW`: planned first (a view that does not plan
    /// is refused before anything is stored), then stored in the catalog,
    /// where every engine over the store finds it.
    pub(super) async fn create_view(
        &self,
        statement: &Statement,
    ) -> Result<Option<DdlOutcome>, EngineError> {
        let Statement::CreateView(view) = statement else {
            return Ok(None);
        };
        block_ddl::refuse_view_kind(view)?;
        let name = ddl::object_name(&view.name)?;
        if view.if_not_exists && self.name_taken(&name).await? {
            return Ok(Some(DdlOutcome::default()));
        }
        let defs = persist::load(self.store.as_ref()).await?;
        if defs.iter().any(|d| d.name == name) {
            return Err(CatalogError::TableExists(name).into());
        }
        let sql = statement.to_string();
        self.view_provider(&sql).await?;
        persist::save_view(self.store.as_ref(), &name, &sql, view.or_replace).await?;
        self.refresh().await?;
        Ok(Some(DdlOutcome::default()))
    }

    /// `DROP VIEW [IF EXISTS] v, ...`.
    pub(super) async fn drop_views(
        &self,
        names: &[ObjectName],
        if_exists: bool,
    ) -> Result<Option<DdlOutcome>, EngineError> {
        let mut outcome = DdlOutcome::default();
        for n in names {
            let name = ddl::object_name(n)?;
            if !persist::remove_view(self.store.as_ref(), &name).await? {
                if !if_exists {
                    return Err(CatalogError::UnknownTable(name).into());
                }
                outcome.notices.push(Notice::new(
                    NoticeKind::DoesNotExist,
                    format!("view \"{name}\" does not exist, skipping"),
                ));
            }
        }
        self.refresh().await?;
        Ok(Some(outcome))
    }
}
