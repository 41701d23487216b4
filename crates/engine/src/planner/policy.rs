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

use datafusion::catalog::Session;
use datafusion::error::{DataFusionError, Result};

use super::settings::TablesqlConfig;
use crate::exec::Layout;
pub use crate::exec::notices::{Notices, ScanVerdict};
use crate::exec::read::access::{AccessPath, WholeTable};

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

/// What the session's policy makes of a scan of `layout` along `path`:
/// nothing, unless it reads every partition, or more partitions than
/// `tablesql.partition_threshold` by the statistics (`partitions` counts
/// the analyzed partitions the scan reads, `None` without statistics; it is
/// asked only when the threshold could apply); then a notice under `warn`,
/// a refusal under `deny`. The scan acts on it when it runs, so that
/// EXPLAIN shows even a plan the policy refuses. Every scan asks, so the
/// common answer (nothing) allocates nothing.
pub fn verdict(
    session: &dyn Session,
    layout: &Layout,
    path: &AccessPath,
    partitions: impl FnOnce() -> Option<usize>,
) -> Option<ScanVerdict> {
    let (policy, threshold) = TablesqlConfig::get(session.config()).map_or_else(
        || {
            let d = TablesqlConfig::default();
            (d.scan_policy, d.partition_threshold)
        },
        |s| (s.scan_policy, s.partition_threshold),
    );
    if policy == ScanPolicy::Allow {
        return None;
    }
    let counted = if path.reads_every_partition() {
        None
    } else {
        match partitions() {
            Some(n) if threshold > 0 && n > threshold => Some((n, threshold)),
            _ => return None,
        }
    };
    let wide = WholeTable {
        partitions: counted,
        ..whole_table(layout)
    };
    Some(match policy {
        ScanPolicy::Deny => ScanVerdict::Deny(wide),
        _ => ScanVerdict::Notice(format!("{wide} (tablesql.scan_policy = warn)")),
    })
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
                partitions: None,
                partition_columns,
                row_columns,
            }
        }
        None => WholeTable {
            table: format!("raw.{}", layout.table.as_str().to_lowercase()),
            partitions: None,
            partition_columns: vec!["PartitionKey".to_owned()],
            row_columns: vec!["RowKey".to_owned()],
        },
    }
}
