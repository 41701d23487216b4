//! Where a store lives, as given on the command line (`--store`) or in
//! `TABLESQL_STORE`: a scheme and its address, or a bare directory path.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;

#[cfg(feature = "azure")]
use super::azure::{AzureConfig, AzureStore, ConfigError};
use super::embedded::{DEFAULT_DERIVED_CACHE, DEFAULT_PAGE_CACHE, Opening};
use super::{Result, TableStore};

/// The directory the embedded store uses when none is given.
pub const DEFAULT_LOCATION: &str = "./tablesql-data";

/// A store location.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum StoreLocation {
    /// The embedded store in this directory: `embedded:DIR`, or just `DIR`.
    Embedded(PathBuf),
    /// The Azure Table service: `azure:<connection string>`, e.g.
    /// `azure:UseDevelopmentStorage=true` for Azurite on 127.0.0.1:10002;
    /// `azure` alone reads it from `AZURE_STORAGE_CONNECTION_STRING`.
    #[cfg(feature = "azure")]
    Azure(Box<AzureConfig>),
}

/// A location that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LocationError {
    /// A scheme this build does not know. The location is not repeated: it
    /// might hold a secret.
    #[error(
        "unknown store scheme {scheme:?}; known: embedded:DIR (or a directory path), azure:<connection string> (with the cargo feature \"azure\")"
    )]
    UnknownScheme {
        /// The scheme as written.
        scheme: String,
    },
    /// A scheme whose backend this build leaves out (its cargo feature is off).
    #[error("store scheme {scheme:?} needs tablesql built with the cargo feature {feature:?}")]
    NotBuilt {
        /// The scheme as written.
        scheme: String,
        /// The feature that builds its backend.
        feature: &'static str,
    },
    /// An Azure connection string that does not parse.
    #[cfg(feature = "azure")]
    #[error("azure: {0}")]
    Azure(#[from] ConfigError),
    /// `azure` (or `azure:`) without a connection string, and none in
    /// the environment.
    #[error(
        "--store azure takes the connection string from {AZURE_CONNECTION_ENV}, which is not set (or give azure:<connection string>)"
    )]
    AzureEnvUnset,
}

/// The variable the Azure SDKs read a storage account's connection string
/// from; `azure` (or `azure:` with nothing after it) reads it too, so that
/// an account key need not be on a command line (visible in `ps`).
pub const AZURE_CONNECTION_ENV: &str = "AZURE_STORAGE_CONNECTION_STRING";

impl FromStr for StoreLocation {
    type Err = LocationError;

    fn from_str(s: &str) -> Result<Self, LocationError> {
        if s == "azure" || s == "azure:" {
            return Self::azure_from_env(std::env::var(AZURE_CONNECTION_ENV).ok());
        }
        // A scheme is two or more letters before the first colon; one letter
        // would be a drive, and a path separator before the colon a path.
        match s.split_once(':') {
            Some(("embedded", rest)) => Ok(StoreLocation::Embedded(PathBuf::from(rest))),
            #[cfg(feature = "azure")]
            Some(("azure", conn)) => Ok(StoreLocation::Azure(Box::new(AzureConfig::parse(conn)?))),
            #[cfg(not(feature = "azure"))]
            Some(("azure", _)) => Err(LocationError::NotBuilt {
                scheme: "azure".to_owned(),
                feature: "azure",
            }),
            Some((scheme, _))
                if scheme.len() > 1 && scheme.chars().all(|c| c.is_ascii_alphabetic()) =>
            {
                Err(LocationError::UnknownScheme {
                    scheme: scheme.to_owned(),
                })
            }
            _ => Ok(StoreLocation::Embedded(PathBuf::from(s))),
        }
    }
}

impl fmt::Display for StoreLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreLocation::Embedded(dir) => write!(f, "embedded:{}", dir.display()),
            #[cfg(feature = "azure")]
            StoreLocation::Azure(config) => config.fmt(f),
        }
    }
}

/// The memory an embedded store keeps, each process its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreMemory {
    /// Scans' decoded pages, answered again until a write lands in them.
    pub derived_cache: usize,
    /// The file's pages, as read (redb's read cache).
    pub page_cache: usize,
}

impl Default for StoreMemory {
    fn default() -> Self {
        Self {
            derived_cache: DEFAULT_DERIVED_CACHE,
            page_cache: DEFAULT_PAGE_CACHE,
        }
    }
}

impl StoreLocation {
    /// The Azure location of a connection string read from the environment
    /// (`None`, or empty: unset). Its text is never repeated in an error.
    fn azure_from_env(conn: Option<String>) -> Result<Self, LocationError> {
        let conn = conn
            .filter(|c| !c.trim().is_empty())
            .ok_or(LocationError::AzureEnvUnset)?;
        #[cfg(feature = "azure")]
        return Ok(StoreLocation::Azure(Box::new(AzureConfig::parse(&conn)?)));
        #[cfg(not(feature = "azure"))]
        {
            drop(conn);
            Err(LocationError::NotBuilt {
                scheme: "azure".to_owned(),
                feature: "azure",
            })
        }
    }

    /// Opens the store, an embedded one with the default caches.
    pub fn open(&self) -> Result<Arc<dyn TableStore>> {
        self.open_with(StoreMemory::default())
    }

    /// Opens the store; an embedded one keeps at most `memory`'s bytes of
    /// scans' decoded pages (`EmbeddedStore::with_derived_cache`, 0: none)
    /// and of its file's pages (`Opening::page_cache`). A remote store
    /// keeps neither whatever it is given: other processes write to it
    /// unheard.
    pub fn open_with(&self, memory: StoreMemory) -> Result<Arc<dyn TableStore>> {
        match self {
            StoreLocation::Embedded(dir) => Ok(Arc::new(
                Opening::new()
                    .page_cache(memory.page_cache)
                    .open(dir)?
                    .with_derived_cache(memory.derived_cache),
            )),
            #[cfg(feature = "azure")]
            StoreLocation::Azure(config) => Ok(Arc::new(AzureStore::new(config.as_ref().clone())?)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_paths_and_schemes() {
        let dir = |s: &str| match s.parse::<StoreLocation>() {
            Ok(StoreLocation::Embedded(d)) => d,
            other => panic!("{s}: {other:?}"),
        };
        assert_eq!(dir("./data"), PathBuf::from("./data"));
        assert_eq!(dir("embedded:/x/y"), PathBuf::from("/x/y"));
        assert_eq!(dir("C:/data"), PathBuf::from("C:/data"));
        assert_eq!(dir("./a:b"), PathBuf::from("./a:b"));
        #[cfg(feature = "azure")]
        assert!(matches!(
            "azure:UseDevelopmentStorage=true".parse::<StoreLocation>(),
            Ok(StoreLocation::Azure(_))
        ));
        #[cfg(not(feature = "azure"))]
        assert!(matches!(
            "azure:UseDevelopmentStorage=true".parse::<StoreLocation>(),
            Err(LocationError::NotBuilt { .. })
        ));
        assert!(matches!(
            "ftp:bucket".parse::<StoreLocation>(),
            Err(LocationError::UnknownScheme { .. })
        ));
        assert!(matches!(
            StoreLocation::azure_from_env(None),
            Err(LocationError::AzureEnvUnset)
        ));
        assert!(matches!(
            StoreLocation::azure_from_env(Some(" ".into())),
            Err(LocationError::AzureEnvUnset)
        ));
        #[cfg(feature = "azure")]
        assert!(matches!(
            StoreLocation::azure_from_env(Some("UseDevelopmentStorage=true".into())),
            Ok(StoreLocation::Azure(_))
        ));
        #[cfg(feature = "azure")]
        assert!(matches!(
            "azure:AccountName=x;AuthScheme=SharedKey".parse::<StoreLocation>(),
            Err(LocationError::Azure(ConfigError::Missing(_)))
        ));
    }
}
