//! A session's DataFusion context: made for each session with its own
//! settings, notices, transaction block and share of memory, and read
//! back by the engine's statements.

use super::*;

impl Engine {
    /// A new session over the same tables (the wire server's connections):
    /// settings are its own, the catalog and the tables are shared.
    pub fn session_context(&self) -> SessionContext {
        let mut state = self.ctx.state();
        // Its own notices: another session's must not reach it.
        state
            .config_mut()
            .set_extension(Arc::new(Notices::default()));
        // Its own transaction block.
        state
            .config_mut()
            .set_extension(Arc::new(Transaction::default()));
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
        // Its own share of the engine's memory.
        let state = memory::share(state, self.options.memory);
        SessionContext::new_with_state(state)
    }

    /// Another session over the same tables, statistics and store: its
    /// settings and transaction block are its own (see
    /// [`Engine::session_context`]).
    pub fn new_session(&self) -> Engine {
        Engine {
            ctx: self.session_context(),
            ..self.clone()
        }
    }
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

/// The transaction block of a session (an engine's own, or one of
/// [`Engine::session_context`]'s).
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
