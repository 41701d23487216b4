//! A session's DataFusion context: copied from the engine's for each
//! session, with its own settings, notices, transaction block and share
//! of memory, and read back by the session's statements.

use super::*;

impl Engine {
    /// A new session's context over the same tables: settings are its
    /// own, the catalog and the tables are shared ([`Engine::session`]).
    pub(super) fn session_context(&self) -> SessionContext {
        let mut state = self.base.state();
        // Its own notices: another session's must not reach it.
        state
            .config_mut()
            .set_extension(Arc::new(Notices::default()));
        // Its own transaction block, over the row locks of every session.
        state
            .config_mut()
            .set_extension(Arc::new(Transaction::new(self.locks.clone())));
        // Its own configuration, changed by its own SETs.
        state
            .config_mut()
            .set_extension(Arc::new(direct::ConfigGeneration::default()));
        // Its own `currval`s.
        state
            .config_mut()
            .options_mut()
            .extensions
            .insert(SequenceSession::default());
        // Its own parameters (`SET application_name`, `statement_timeout`).
        state
            .config_mut()
            .options_mut()
            .extensions
            .insert(SessionParameters::default());
        // Its own relations (a block's DDL, its temporary tables), which
        // it plans through (`engine::overlay`).
        let own = Arc::new(own::OwnRelations::default());
        state.config_mut().set_extension(own.clone());
        let catalogs = overlay::SessionCatalogs {
            base: state.catalog_list().clone(),
            name: state.config().options().catalog.default_catalog.clone(),
            own,
        };
        let state = SessionStateBuilder::new_from_existing(state)
            .with_catalog_list(Arc::new(catalogs))
            .build();
        // Its own share of the engine's memory.
        let state = memory::share(state, self.options.memory);
        SessionContext::new_with_state(state)
    }
}

/// A session's PostgreSQL parameters (`planner::parameters`), shared with
/// its context.
pub(crate) fn session_parameters(ctx: &SessionContext) -> SessionParameters {
    ctx.state_ref()
        .read()
        .config()
        .options()
        .extensions
        .get::<SessionParameters>()
        .cloned()
        .unwrap_or_default()
}

/// The notices a session's statements left since the last call.
pub(crate) fn session_notices(ctx: &SessionContext) -> Vec<Notice> {
    ctx.state_ref()
        .read()
        .config()
        .get_extension::<Notices>()
        .map(|n| n.take())
        .unwrap_or_default()
}

/// The relations of a session's own (`engine::own`).
pub(crate) fn session_relations(ctx: &SessionContext) -> Option<Arc<own::OwnRelations>> {
    ctx.state_ref()
        .read()
        .config()
        .get_extension::<own::OwnRelations>()
}

/// The transaction block of a session's context.
pub(crate) fn session_transaction(ctx: &SessionContext) -> Option<Arc<Transaction>> {
    ctx.state_ref()
        .read()
        .config()
        .get_extension::<Transaction>()
}

/// A `tablesql.*` setting of a session, by its full name: `None` for a
/// name that is no such setting, `Some(None)` for one not set.
pub(crate) fn session_setting(
    state: &datafusion::execution::session_state::SessionState,
    name: &str,
) -> Option<Option<String>> {
    let entries = state
        .config_options()
        .extensions
        .get::<TablesqlConfig>()
        .map(datafusion::config::ExtensionOptions::entries)
        .unwrap_or_default();
    entries.into_iter().find(|e| e.key == name).map(|e| e.value)
}
