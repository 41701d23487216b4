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
/// `tablesql.partition_threshold` by the statistics; then a notice under
/// `warn`, a refusal under `deny`. `warn` is quiet where PostgreSQL is,
/// over a small table: it speaks of a scan of every partition only where
/// the estimate puts `tablesql.scan_warn_entities` or more in its ranges,
/// and not at all without one (unless that setting is 0). `estimate` gives the analyzed partitions
/// the scan reads and their entities, by `ANALYZE`'s statistics or the
/// store's kept counts (`None` without either); it is asked only when an
/// answer could apply. The scan acts on the verdict when it runs, so that
/// EXPLAIN shows even a plan the policy refuses.
pub fn verdict(
    session: &dyn Session,
    layout: &Layout,
    path: &AccessPath,
    estimate: impl FnOnce() -> Option<(usize, u64)>,
) -> Option<ScanVerdict> {
    let settings = TablesqlConfig::get(session.config());
    let default = TablesqlConfig::default();
    let settings = settings.unwrap_or(&default);
    let policy = settings.scan_policy;
    if policy == ScanPolicy::Allow {
        return None;
    }
    let counted = if path.reads_every_partition() {
        let at_least = settings.scan_warn_entities;
        if policy == ScanPolicy::Warn && at_least > 0 {
            match estimate() {
                Some((_, entities)) if entities >= at_least => {}
                _ => return None,
            }
        }
        None
    } else {
        let threshold = settings.partition_threshold;
        match estimate() {
            Some((n, _)) if threshold > 0 && n > threshold => Some((n, threshold)),
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
