//! Notices a statement leaves for its front end (a NoticeResponse over the
//! wire, a `NOTICE:` line in the shell and CLI), and the scan policy's
//! verdict on a scan, which the scan acts on when it runs.

use std::sync::Mutex;

use datafusion::prelude::SessionConfig;

use super::ExecError;
use super::read::access::WholeTable;

/// Most notices waiting to be drained.
const MAX_NOTICES: usize = 100;

/// What a notice reports, as a kind each front end names in its own terms
/// (the wire server by SQLSTATE, in `server::sqlstate`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum NoticeKind {
    /// `IF NOT EXISTS` met an object that exists, so nothing was done.
    AlreadyExists,
    /// `IF EXISTS` met no object, so nothing was done.
    DoesNotExist,
    /// What a statement did (ANALYZE's summary, an index built or dropped).
    Done,
    /// A clause accepted without its effect (a FOREIGN KEY, not enforced).
    NotEnforced,
    /// The scan policy lets a scan of every partition run (`warn`).
    WideScan,
    /// The catalog changed under the session, which now plans with it.
    CatalogChanged,
    /// Where a paged statement stands: more rows follow (and the token to
    /// resume from), or it ran whole.
    Page,
}

impl NoticeKind {
    /// The SQLSTATE PostgreSQL's NOTICE carries: `IF NOT EXISTS` of an
    /// existing relation is `42P07` (duplicate_table), the rest `00000`.
    pub fn sqlstate(self) -> &'static str {
        use crate::sqlstate as code;
        match self {
            NoticeKind::AlreadyExists => code::DUPLICATE_TABLE,
            NoticeKind::DoesNotExist
            | NoticeKind::Done
            | NoticeKind::NotEnforced
            | NoticeKind::WideScan
            | NoticeKind::CatalogChanged
            | NoticeKind::Page => code::SUCCESSFUL_COMPLETION,
        }
    }
}

/// A notice: its kind and its text, which is what a person reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notice {
    /// What it reports.
    pub kind: NoticeKind,
    /// What it says.
    pub text: String,
}

impl Notice {
    /// A notice of `kind` saying `text`.
    pub fn new(kind: NoticeKind, text: impl Into<String>) -> Self {
        Self {
            kind,
            text: text.into(),
        }
    }
}

impl std::fmt::Display for Notice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

/// Notices a session's statements leave for its front end, drained after
/// each statement. A session configuration extension: each session (each
/// wire connection) holds its own.
#[derive(Debug, Default)]
pub struct Notices(Mutex<Vec<Notice>>);

impl Notices {
    /// Leaves a notice, once: a subquery planned per outer value would
    /// otherwise repeat it, and a library caller that never drains would
    /// collect them without end (at most `MAX_NOTICES` wait).
    pub fn push(&self, notice: Notice) {
        if let Ok(mut n) = self.0.lock()
            && n.len() < MAX_NOTICES
            && !n.contains(&notice)
        {
            n.push(notice);
        }
    }

    /// The notices left since the last call.
    pub fn take(&self) -> Vec<Notice> {
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
                    notices.push(Notice::new(NoticeKind::WideScan, text.clone()));
                }
                Ok(())
            }
            ScanVerdict::Deny(table) => Err(ExecError::ScanDenied(table.clone())),
        }
    }
}
