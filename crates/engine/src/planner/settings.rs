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
//! - `scan_warn_entities`: under `warn`, a scan of every partition gets its
//!   notice only where the kept counts or statistics put at least this many
//!   entities in its ranges (100,000 by default; 0 warns of every one);
//! - `use_indexes`: on (the default) lets the planner read declared index
//!   rows; off reads base rows only (for comparisons, and for users who
//!   distrust their application-written index rows);
//! - `enable_lookup_join`: on (the default) reads the inner side of a join
//!   by key where the estimates favour it (`planner::lookup`), off never,
//!   always wherever the join's keys allow it (tests and comparisons);
//! - `lookup_join_batch`: outer rows whose keys one lookup batch reads
//!   (1000 by default, the most keys one access path enumerates);
//! - `analyze_sample`: entities a re-`ANALYZE` samples instead of reading
//!   the table whole (0, the default: whole; see `exec::stats::sample`).

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
    /// `tablesql.scan_warn_entities`.
    pub scan_warn_entities: u64,
    /// `tablesql.use_indexes`.
    pub use_indexes: bool,
    /// `tablesql.enable_lookup_join`.
    pub lookup_join: LookupJoin,
    /// `tablesql.lookup_join_batch`.
    pub lookup_join_batch: usize,
    /// `tablesql.analyze_sample`; 0 reads every entity.
    pub analyze_sample: u64,
}

/// When the planner reads a join's inner side by key (`tablesql.enable_lookup_join`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LookupJoin {
    /// Where the estimated requests favour it.
    #[default]
    On,
    /// Never: every equi-join is a hash join.
    Off,
    /// Wherever the join's keys allow it, whatever the estimates.
    Always,
}

impl std::fmt::Display for LookupJoin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LookupJoin::On => "on",
            LookupJoin::Off => "off",
            LookupJoin::Always => "always",
        })
    }
}

impl std::str::FromStr for LookupJoin {
    type Err = DataFusionError;

    fn from_str(value: &str) -> Result<Self> {
        match value.trim().to_lowercase().as_str() {
            "on" | "true" | "1" => Ok(LookupJoin::On),
            "off" | "false" | "0" => Ok(LookupJoin::Off),
            "always" => Ok(LookupJoin::Always),
            _ => Err(DataFusionError::Configuration(format!(
                "tablesql.enable_lookup_join is on, off or always, not {value:?}"
            ))),
        }
    }
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
            scan_warn_entities: 100_000,
            use_indexes: true,
            lookup_join: LookupJoin::default(),
            lookup_join_batch: 1000,
            analyze_sample: 0,
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
const SCAN_WARN_ENTITIES: &str = "scan_warn_entities";
const USE_INDEXES: &str = "use_indexes";
const ENABLE_LOOKUP_JOIN: &str = "enable_lookup_join";
const LOOKUP_JOIN_BATCH: &str = "lookup_join_batch";
const ANALYZE_SAMPLE: &str = "analyze_sample";

const DOCS: [(&str, &str); 11] = [
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
        SCAN_WARN_ENTITIES,
        "Under scan_policy warn, the entities a scan of every partition reads by the kept counts or statistics before it gets a notice (0: every such scan)",
    ),
    (
        USE_INDEXES,
        "Whether the planner reads declared index rows (on) or base rows only (off)",
    ),
    (
        ENABLE_LOOKUP_JOIN,
        "Whether a join reads its inner table by key: on (where the estimates favour it), off, or always",
    ),
    (
        LOOKUP_JOIN_BATCH,
        "Outer rows whose keys one batch of a lookup join reads (1 to 1000)",
    ),
    (
        ANALYZE_SAMPLE,
        "Entities ANALYZE samples where a table has last statistics to place them by (0: read every entity)",
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
            SCAN_WARN_ENTITIES => self.scan_warn_entities.to_string(),
            NEXT_PAGE_TOKEN => self.next_page_token.clone(),
            USE_INDEXES => if self.use_indexes { "on" } else { "off" }.into(),
            ENABLE_LOOKUP_JOIN => self.lookup_join.to_string(),
            LOOKUP_JOIN_BATCH => self.lookup_join_batch.to_string(),
            ANALYZE_SAMPLE => self.analyze_sample.to_string(),
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
            SCAN_WARN_ENTITIES => {
                self.scan_warn_entities = value.trim().parse().map_err(|_| {
                    DataFusionError::Configuration(format!(
                        "tablesql.scan_warn_entities is a number of entities (0 to warn of every scan of every partition), not {value:?}"
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
            ENABLE_LOOKUP_JOIN => self.lookup_join = value.parse()?,
            LOOKUP_JOIN_BATCH => {
                self.lookup_join_batch = value
                    .trim()
                    .parse()
                    .ok()
                    .filter(|n| (1..=crate::planner::pushdown::MAX_REQUESTS).contains(n))
                    .ok_or_else(|| {
                        DataFusionError::Configuration(format!(
                            "tablesql.lookup_join_batch is a number of rows from 1 to {}, not {value:?}",
                            crate::planner::pushdown::MAX_REQUESTS
                        ))
                    })?;
            }
            ANALYZE_SAMPLE => {
                self.analyze_sample = value.trim().parse().map_err(|_| {
                    DataFusionError::Configuration(format!(
                        "tablesql.analyze_sample is a number of entities (0 to read them all), not {value:?}"
                    ))
                })?;
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
