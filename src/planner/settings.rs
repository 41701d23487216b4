//! tablesql's session settings, a DataFusion configuration extension under
//! the prefix `tablesql.`, so that `SET` and `SHOW` reach them in every
//! front end and an embedder sets them in `EngineOptions`:
//! - `scan_policy`: allow, warn or deny (see `policy`);
//! - `page_size`: 0 (off) or the rows of one page: a query of one table then
//!   returns one page (see `page`), and the token of the next;
//! - `page_token`: the token the next paged query resumes from (taken by it);
//! - `next_page_token`: read-only, the token of the page after the last one,
//!   empty when it was the last;
//! - `guidepost_every`: entities between the guideposts `ANALYZE` records
//!   (1000 by default, a page of the service's);
//! - `partition_threshold`: the scan policy also takes a scan that reads
//!   more analyzed partitions than this (100 by default; 0 turns it off);
//! - `use_indexes`: on (the default) lets the planner read declared index
//!   rows; off reads base rows only (for comparisons, and for users who
//!   distrust their application-written index rows).

use datafusion::common::config::{
    ConfigEntry, ConfigExtension, ConfigField, ExtensionOptions, Visit,
};
use datafusion::error::{DataFusionError, Result};

use super::policy::ScanPolicy;

/// The settings.
#[derive(Debug, Clone)]
pub struct TablesqlConfig {
    /// `tablesql.scan_policy`.
    pub scan_policy: ScanPolicy,
    /// `tablesql.page_size`; 0 turns paging off.
    pub page_size: usize,
    /// `tablesql.page_token`.
    pub page_token: String,
    /// `tablesql.next_page_token`, set by a paged query.
    pub next_page_token: String,
    /// `tablesql.guidepost_every`.
    pub guidepost_every: u64,
    /// `tablesql.partition_threshold`.
    pub partition_threshold: usize,
    /// `tablesql.use_indexes`.
    pub use_indexes: bool,
}

impl Default for TablesqlConfig {
    fn default() -> Self {
        Self {
            scan_policy: ScanPolicy::default(),
            page_size: 0,
            page_token: String::new(),
            next_page_token: String::new(),
            guidepost_every: 1000,
            partition_threshold: 100,
            use_indexes: true,
        }
    }
}

impl TablesqlConfig {
    /// A session's settings, borrowed (`None` for a session without them).
    pub fn get(config: &datafusion::prelude::SessionConfig) -> Option<&Self> {
        config.options().extensions.get::<Self>()
    }

    /// A session's settings, copied (the defaults if it has none).
    pub fn of(config: &datafusion::prelude::SessionConfig) -> Self {
        Self::get(config).cloned().unwrap_or_default()
    }
}

const SCAN_POLICY: &str = "scan_policy";
const PAGE_SIZE: &str = "page_size";
const PAGE_TOKEN: &str = "page_token";
const NEXT_PAGE_TOKEN: &str = "next_page_token";
const GUIDEPOST_EVERY: &str = "guidepost_every";
const PARTITION_THRESHOLD: &str = "partition_threshold";
const USE_INDEXES: &str = "use_indexes";

const DOCS: [(&str, &str); 7] = [
    (
        SCAN_POLICY,
        "What a statement reading every partition of a table gets: allow, warn or deny",
    ),
    (
        PAGE_SIZE,
        "Rows per page of a query of one table (0: no paging); the next page's token is in tablesql.next_page_token",
    ),
    (PAGE_TOKEN, "The token the next paged query resumes from"),
    (
        NEXT_PAGE_TOKEN,
        "The token of the page after the last paged query's (read-only; empty after the last page)",
    ),
    (
        GUIDEPOST_EVERY,
        "Entities between the guideposts ANALYZE records, which split big partitions into chunks",
    ),
    (
        PARTITION_THRESHOLD,
        "The scan policy also takes a scan reading more analyzed partitions than this (0: off)",
    ),
    (
        USE_INDEXES,
        "Whether the planner reads declared index rows (on) or base rows only (off)",
    ),
];

impl TablesqlConfig {
    fn value(&self, key: &str) -> String {
        match key {
            SCAN_POLICY => self.scan_policy.to_string(),
            PAGE_SIZE => self.page_size.to_string(),
            PAGE_TOKEN => self.page_token.clone(),
            GUIDEPOST_EVERY => self.guidepost_every.to_string(),
            PARTITION_THRESHOLD => self.partition_threshold.to_string(),
            NEXT_PAGE_TOKEN => self.next_page_token.clone(),
            USE_INDEXES => if self.use_indexes { "on" } else { "off" }.into(),
            _ => String::new(),
        }
    }
}

impl ConfigExtension for TablesqlConfig {
    const PREFIX: &'static str = "tablesql";
}

impl ExtensionOptions for TablesqlConfig {
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn as_any_mut(&mut self) -> &mut dyn std::any::Any {
        self
    }

    fn cloned(&self) -> Box<dyn ExtensionOptions> {
        Box::new(self.clone())
    }

    fn set(&mut self, key: &str, value: &str) -> Result<()> {
        match key {
            SCAN_POLICY => self.scan_policy = value.parse()?,
            PAGE_SIZE => {
                self.page_size = value.trim().parse().map_err(|_| {
                    DataFusionError::Configuration(format!(
                        "tablesql.page_size is a number of rows (0 for no paging), not {value:?}"
                    ))
                })?;
            }
            PAGE_TOKEN => self.page_token = value.trim().to_owned(),
            GUIDEPOST_EVERY => {
                self.guidepost_every = value
                    .trim()
                    .parse()
                    .ok()
                    .filter(|n| *n > 0)
                    .ok_or_else(|| {
                        DataFusionError::Configuration(format!(
                            "tablesql.guidepost_every is a number of entities above 0, not {value:?}"
                        ))
                    })?;
            }
            PARTITION_THRESHOLD => {
                self.partition_threshold = value.trim().parse().map_err(|_| {
                    DataFusionError::Configuration(format!(
                        "tablesql.partition_threshold is a number of partitions (0 for none), not {value:?}"
                    ))
                })?;
            }
            USE_INDEXES => {
                self.use_indexes = match value.trim().to_lowercase().as_str() {
                    "on" | "true" | "1" => true,
                    "off" | "false" | "0" => false,
                    _ => {
                        return Err(DataFusionError::Configuration(format!(
                            "tablesql.use_indexes is on or off, not {value:?}"
                        )));
                    }
                };
            }
            NEXT_PAGE_TOKEN => {
                return Err(DataFusionError::Configuration(
                    "tablesql.next_page_token is read-only: resume with SET tablesql.page_token"
                        .into(),
                ));
            }
            other => {
                return Err(DataFusionError::Configuration(format!(
                    "unrecognized configuration parameter \"tablesql.{other}\""
                )));
            }
        }
        Ok(())
    }

    /// Keys with the prefix: DataFusion lists them so in
    /// `information_schema.df_settings`, where its `SHOW` looks them up.
    fn entries(&self) -> Vec<ConfigEntry> {
        DOCS.iter()
            .map(|(key, description)| ConfigEntry {
                key: format!("{}.{key}", Self::PREFIX),
                value: Some(self.value(key)),
                description,
            })
            .collect()
    }
}

impl ConfigField for TablesqlConfig {
    fn visit<V: Visit>(&self, v: &mut V, key: &str, _description: &'static str) {
        for (name, description) in DOCS {
            v.some(&format!("{key}.{name}"), self.value(name), description);
        }
    }

    fn set(&mut self, key: &str, value: &str) -> Result<()> {
        ExtensionOptions::set(self, key, value)
    }
}
