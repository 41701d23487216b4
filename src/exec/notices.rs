//! Notices a statement leaves for its front end (a NoticeResponse over the
//! wire, a `NOTICE:` line in the shell and CLI), and the scan policy's
//! verdict on a scan, which the scan acts on when it runs.

use std::sync::Mutex;

use datafusion::prelude::SessionConfig;

use super::ExecError;
use super::access::WholeTable;

/// Most notices waiting to be drained.
const MAX_NOTICES: usize = 100;

/// Notices a session's statements leave for its front end, drained after
/// each statement. A session configuration extension: each session (each
/// wire connection) holds its own.
#[derive(Debug, Default)]
pub struct Notices(Mutex<Vec<String>>);

impl Notices {
    /// Leaves a notice, once: a subquery planned per outer value would
    /// otherwise repeat it, and a library caller that never drains would
    /// collect them without end (at most `MAX_NOTICES` wait).
    pub fn push(&self, notice: String) {
        if let Ok(mut n) = self.0.lock()
            && n.len() < MAX_NOTICES
            && !n.contains(&notice)
        {
            n.push(notice);
        }
    }

    /// The notices left since the last call.
    pub fn take(&self) -> Vec<String> {
        self.0
            .lock()
            .map(|mut n| std::mem::take(&mut *n))
            .unwrap_or_default()
    }
}

/// What the scan policy decided for one scan (see `planner::policy`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScanVerdict {
    /// Run, and leave this notice.
    Notice(String),
    /// Refuse: the scan reads every partition of this table.
    Deny(WholeTable),
}

impl ScanVerdict {
    /// Leaves the notice in the session's `Notices`, or refuses.
    pub fn apply(&self, config: &SessionConfig) -> Result<(), ExecError> {
        match self {
            ScanVerdict::Notice(text) => {
                if let Some(notices) = config.get_extension::<Notices>() {
                    notices.push(text.clone());
                }
                Ok(())
            }
            ScanVerdict::Deny(table) => Err(ExecError::ScanDenied(table.clone())),
        }
    }
}
