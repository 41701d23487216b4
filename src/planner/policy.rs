//! The scan policy: what happens when a statement would read every partition
//! of a table. `allow` runs it; `warn` (the default) runs it and leaves a
//! notice for the front end to show (a NoticeResponse over the wire, a line
//! on stderr in the shell and CLI); `deny` refuses it, naming the key columns
//! that would have made it a point or a range.
//!
//! The policy is a session setting, `tablesql.scan_policy` (see
//! `settings`), so `SET tablesql.scan_policy = 'deny'` works in every front end, and an
//! embedder sets it in `EngineOptions`.

use std::fmt;
use std::str::FromStr;
use std::sync::Mutex;

use datafusion::catalog::Session;
use datafusion::error::{DataFusionError, Result};

use super::settings::TablesqlConfig;
use crate::exec::access::{AccessPath, WholeTable};
use crate::exec::{ExecError, Layout};

/// What a statement that reads every partition of a table gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ScanPolicy {
    /// Runs it.
    Allow,
    /// Runs it and leaves a notice.
    #[default]
    Warn,
    /// Refuses it.
    Deny,
}

impl FromStr for ScanPolicy {
    type Err = DataFusionError;
    fn from_str(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "allow" => Ok(Self::Allow),
            "warn" => Ok(Self::Warn),
            "deny" => Ok(Self::Deny),
            other => Err(DataFusionError::Configuration(format!(
                "tablesql.scan_policy is allow, warn or deny, not {other:?}"
            ))),
        }
    }
}

impl fmt::Display for ScanPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Allow => "allow",
            Self::Warn => "warn",
            Self::Deny => "deny",
        })
    }
}

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

/// Applies the session's policy to a scan of `layout` along `path`: a scan
/// that reads every partition is refused under `deny`, and leaves a notice
/// under `warn`.
pub fn check(session: &dyn Session, layout: &Layout, path: &AccessPath) -> Result<()> {
    if !path.reads_every_partition() {
        return Ok(());
    }
    let policy = session
        .config()
        .options()
        .extensions
        .get::<TablesqlConfig>()
        .map(|c| c.scan_policy)
        .unwrap_or_default();
    match policy {
        ScanPolicy::Allow => Ok(()),
        ScanPolicy::Warn => {
            if let Some(notices) = session.config().get_extension::<Notices>() {
                notices.push(format!(
                    "{} (tablesql.scan_policy = warn)",
                    whole_table(layout)
                ));
            }
            Ok(())
        }
        ScanPolicy::Deny => Err(ExecError::ScanDenied(whole_table(layout)).into()),
    }
}

fn whole_table(layout: &Layout) -> WholeTable {
    match &layout.def {
        Some(def) => {
            let partition_columns: Vec<String> =
                def.partition_key.columns().map(str::to_owned).collect();
            // The rest of the primary key names a row; without one, the
            // RowKey's fields do.
            let row_columns = if def.primary_key.is_empty() {
                def.row_key.columns().map(str::to_owned).collect()
            } else {
                def.primary_key
                    .iter()
                    .filter(|c| !partition_columns.contains(c))
                    .cloned()
                    .collect()
            };
            WholeTable {
                table: def.name.clone(),
                partition_columns,
                row_columns,
            }
        }
        None => WholeTable {
            table: format!("raw.{}", layout.table.as_str().to_lowercase()),
            partition_columns: vec!["PartitionKey".to_owned()],
            row_columns: vec!["RowKey".to_owned()],
        },
    }
}
