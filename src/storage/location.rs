//! Where a store lives, as given on the command line (`--store`) or in
//! `TABLESQL_STORE`: a scheme and its address, or a bare directory path.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;

use super::{EmbeddedStore, Result, TableStore};

/// The directory the embedded store uses when none is given.
pub const DEFAULT_LOCATION: &str = "./tablesql-data";

/// A store location.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreLocation {
    /// The embedded store in this directory: `embedded:DIR`, or just `DIR`.
    Embedded(PathBuf),
}

/// A location naming a scheme this build does not know.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown store scheme {scheme:?} in {location:?}; known: embedded:DIR (or a directory path)"
)]
pub struct UnknownScheme {
    /// The scheme as written.
    pub scheme: String,
    /// The whole location.
    pub location: String,
}

impl FromStr for StoreLocation {
    type Err = UnknownScheme;

    fn from_str(s: &str) -> Result<Self, UnknownScheme> {
        // A scheme is two or more letters before the first colon; one letter
        // would be a drive, and a path separator before the colon a path.
        match s.split_once(':') {
            Some(("embedded", rest)) => Ok(StoreLocation::Embedded(PathBuf::from(rest))),
            Some((scheme, _))
                if scheme.len() > 1 && scheme.chars().all(|c| c.is_ascii_alphabetic()) =>
            {
                Err(UnknownScheme {
                    scheme: scheme.to_owned(),
                    location: s.to_owned(),
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
        }
    }
}

impl StoreLocation {
    /// Opens the store.
    pub fn open(&self) -> Result<Arc<dyn TableStore>> {
        match self {
            StoreLocation::Embedded(dir) => Ok(Arc::new(EmbeddedStore::open(dir)?)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_paths_and_schemes() {
        let p = |s: &str| s.parse::<StoreLocation>();
        assert_eq!(p("./data"), Ok(StoreLocation::Embedded("./data".into())));
        assert_eq!(
            p("embedded:/x/y"),
            Ok(StoreLocation::Embedded("/x/y".into()))
        );
        assert_eq!(p("C:/data"), Ok(StoreLocation::Embedded("C:/data".into())));
        assert_eq!(p("./a:b"), Ok(StoreLocation::Embedded("./a:b".into())));
        assert!(matches!(
            p("azure:UseDevelopmentStorage=true"),
            Err(UnknownScheme { .. })
        ));
    }
}
