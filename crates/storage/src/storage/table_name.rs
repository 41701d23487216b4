//! Table names: `^[A-Za-z][A-Za-z0-9]{2,62}$`, case kept, compared case-insensitively.

use std::fmt;
use std::hash::{Hash, Hasher};

use super::error::InvalidInput;

/// A validated table name. Equality and hashing ignore ASCII case, as the service does.
#[derive(Debug, Clone, Eq)]
pub struct TableName(String);

impl TableName {
    /// Validates a table name.
    pub fn new(name: impl Into<String>) -> Result<Self, InvalidInput> {
        let name = name.into();
        let reason = if name.len() < 3 || name.len() > 63 {
            Some("must be 3 to 63 characters long")
        } else if !name.starts_with(|c: char| c.is_ascii_alphabetic()) {
            Some("must start with a letter")
        } else if !name.chars().all(|c| c.is_ascii_alphanumeric()) {
            Some("may hold only the letters A-Z, a-z and digits")
        } else if name.eq_ignore_ascii_case("tables") {
            Some("\"tables\" is reserved")
        } else {
            None
        };
        match reason {
            Some(reason) => Err(InvalidInput::TableName { name, reason }),
            None => Ok(Self(name)),
        }
    }

    /// The name as it was given.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The name folded to lower case: the identity under which a store keeps it.
    pub fn folded(&self) -> String {
        self.0.to_ascii_lowercase()
    }
}

impl PartialEq for TableName {
    fn eq(&self, other: &Self) -> bool {
        self.0.eq_ignore_ascii_case(&other.0)
    }
}

impl Hash for TableName {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.folded().hash(state)
    }
}

impl fmt::Display for TableName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::str::FromStr for TableName {
    type Err = InvalidInput;
    fn from_str(s: &str) -> Result<Self, InvalidInput> {
        Self::new(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules() {
        assert!(TableName::new("abc").is_ok());
        assert!(TableName::new("A".repeat(63)).is_ok());
        for bad in ["ab", "1abc", "ab_c", "ab-c", "Tables", "", "é12"] {
            assert!(TableName::new(bad).is_err(), "{bad:?}");
        }
        assert!(TableName::new("A".repeat(64)).is_err());
        assert_eq!(
            TableName::new("Races").unwrap(),
            TableName::new("rACES").unwrap()
        );
    }
}
