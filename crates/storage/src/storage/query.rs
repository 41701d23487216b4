//! Queries: key ranges, filter, projection and top; pages of at most 1,000
//! entities; continuation tokens that resume exactly where a page stopped.

use std::fmt;
use std::ops::Bound;
use std::str::FromStr;
use std::sync::Arc;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use super::entity::{Properties, StoredEntity};
use super::error::InvalidInput;
use super::filter::Filter;
use super::key::{PartitionKey, RowKey};

/// Most entities one page carries.
pub const MAX_PAGE: usize = 1000;

/// A range of keys, each end open, inclusive or exclusive.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct KeyRange<K> {
    /// Lower end.
    pub start: Bound<K>,
    /// Upper end.
    pub end: Bound<K>,
}

impl<K: Ord> KeyRange<K> {
    /// Every key.
    pub fn all() -> Self {
        Self {
            start: Bound::Unbounded,
            end: Bound::Unbounded,
        }
    }

    /// One key exactly.
    pub fn exactly(k: K) -> Self
    where
        K: Clone,
    {
        Self {
            start: Bound::Included(k.clone()),
            end: Bound::Included(k),
        }
    }

    /// The one key of a range of one key exactly, as `exactly` makes.
    pub fn single(&self) -> Option<&K> {
        match (&self.start, &self.end) {
            (Bound::Included(a), Bound::Included(b)) if a == b => Some(a),
            _ => None,
        }
    }

    /// Whether `k` is below the lower end.
    pub fn is_before(&self, k: &K) -> bool {
        match &self.start {
            Bound::Unbounded => false,
            Bound::Included(s) => k < s,
            Bound::Excluded(s) => k <= s,
        }
    }

    /// Whether `k` is above the upper end.
    pub fn is_after(&self, k: &K) -> bool {
        match &self.end {
            Bound::Unbounded => false,
            Bound::Included(e) => k > e,
            Bound::Excluded(e) => k >= e,
        }
    }

    /// The part of the range above `after` (all of it for `None`): where a
    /// listing resumes.
    pub fn after(&self, after: Option<&K>) -> Self
    where
        K: Clone,
    {
        Self {
            start: match after {
                Some(k) if !self.is_before(k) => Bound::Excluded(k.clone()),
                _ => self.start.clone(),
            },
            end: self.end.clone(),
        }
    }

    /// Whether `k` lies in the range.
    pub fn contains(&self, k: &K) -> bool {
        !self.is_before(k) && !self.is_after(k)
    }

    /// Whether no key lies in the range (its start is past its end).
    pub fn is_empty(&self) -> bool {
        match (&self.start, &self.end) {
            (Bound::Included(s), Bound::Included(e)) => s > e,
            (Bound::Included(s) | Bound::Excluded(s), Bound::Included(e) | Bound::Excluded(e)) => {
                s >= e
            }
            _ => false,
        }
    }
}

impl KeyRange<RowKey> {
    /// The RowKey kind (`super::key::row_kind`) this range reads whole and
    /// alone: `[kind, kind')`, where `kind'` follows every key of the kind
    /// (its colon raised to `;`), as a scan of one kind of row asks. `Some("")`
    /// for every RowKey.
    pub fn kind(&self) -> Option<&str> {
        match (&self.start, &self.end) {
            (Bound::Unbounded, Bound::Unbounded) => Some(""),
            (Bound::Included(start), Bound::Excluded(end)) => {
                let k = start.as_str();
                let stem = k.strip_suffix(':')?;
                (!stem.is_empty()
                    && super::key::row_kind(k) == k
                    && end.as_str().strip_suffix(';') == Some(stem))
                .then_some(k)
            }
            _ => None,
        }
    }
}

impl<K: Ord> Default for KeyRange<K> {
    fn default() -> Self {
        Self::all()
    }
}

/// A query of one table.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Query {
    /// The partitions to read.
    pub partitions: KeyRange<PartitionKey>,
    /// The rows to read within each of those partitions.
    pub rows: KeyRange<RowKey>,
    /// A property filter; entities failing it are scanned but not returned.
    pub filter: Option<Filter>,
    /// The custom properties to return (`$select`); `None` returns all.
    /// Shared: a prepared read sets the same names at every run.
    pub select: Option<Arc<[String]>>,
    /// Most entities in one page (`$top`), 1 to 1000; `None` means 1000.
    pub top: Option<u32>,
}

impl Query {
    /// Every entity of the table.
    pub fn all() -> Self {
        Self::default()
    }

    /// Every entity of one partition.
    pub fn partition(pk: PartitionKey) -> Self {
        Self {
            partitions: KeyRange::exactly(pk),
            ..Self::default()
        }
    }

    /// Restricts the rows (builder style).
    pub fn rows(mut self, rows: KeyRange<RowKey>) -> Self {
        self.rows = rows;
        self
    }

    /// Sets the filter (builder style).
    pub fn filter(mut self, filter: Filter) -> Self {
        self.filter = Some(filter);
        self
    }

    /// Sets the projection (builder style).
    pub fn select<S: Into<String>>(mut self, names: impl IntoIterator<Item = S>) -> Self {
        self.select = Some(names.into_iter().map(Into::into).collect());
        self
    }

    /// Sets the page size (builder style).
    pub fn top(mut self, top: u32) -> Self {
        self.top = Some(top);
        self
    }

    /// The page size, checked.
    pub fn page_size(&self) -> Result<usize, InvalidInput> {
        match self.top {
            None => Ok(MAX_PAGE),
            Some(t) if (1..=MAX_PAGE as u32).contains(&t) => Ok(t as usize),
            Some(t) => Err(InvalidInput::Top(t)),
        }
    }

    /// Keeps only the selected properties of an entity that passed the filter.
    pub fn project(&self, properties: &mut Properties) {
        if let Some(names) = &self.select {
            properties.retain(|name, _| names.iter().any(|n| n == name));
        }
    }

    /// The custom properties a store must read to filter and project: `None`
    /// for all of them.
    pub fn needed_properties(&self) -> Option<Vec<String>> {
        let mut names = self.select.as_deref()?.to_vec();
        if let Some(f) = &self.filter {
            f.visit_properties(&mut |n| {
                if !names.iter().any(|m| m == n) {
                    names.push(n.to_owned());
                }
            });
        }
        Some(names)
    }

    /// Whether an entity in range is returned.
    pub fn passes(&self, e: &(impl super::view::EntityView + ?Sized)) -> bool {
        self.filter.as_ref().is_none_or(|f| f.matches(e))
    }
}

/// Where the next page of a query starts: the key of the first entity the next
/// page may return. A remote service's own continuation values ride along
/// verbatim, since only that service knows how to read them. The text form is
/// opaque and stable across processes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContinuationToken {
    /// The PartitionKey of the first entity the next page may return.
    pub next_partition_key: PartitionKey,
    /// The RowKey of the first entity the next page may return.
    pub next_row_key: RowKey,
    /// The service's `NextPartitionKey`/`NextRowKey`, when a service issued them.
    pub service: Option<ServiceToken>,
}

/// A continuation as a remote service issued it, to be sent back unchanged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceToken {
    /// `x-ms-continuation-NextPartitionKey`.
    pub next_partition_key: String,
    /// `x-ms-continuation-NextRowKey`, which the service may leave out.
    pub next_row_key: Option<String>,
}

impl ContinuationToken {
    /// A token that resumes at a key.
    pub fn at(next_partition_key: PartitionKey, next_row_key: RowKey) -> Self {
        Self {
            next_partition_key,
            next_row_key,
            service: None,
        }
    }
}

const TOKEN_VERSION: &str = "1:";
const SERVICE_TOKEN_VERSION: &str = "2:";

impl fmt::Display for ContinuationToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // U+0000 cannot occur in a key nor in a service's continuation header,
        // so it separates the fields unambiguously.
        let mut raw = match &self.service {
            None => TOKEN_VERSION.to_owned(),
            Some(_) => SERVICE_TOKEN_VERSION.to_owned(),
        };
        raw.push_str(self.next_partition_key.as_str());
        raw.push('\u{0}');
        raw.push_str(self.next_row_key.as_str());
        if let Some(service) = &self.service {
            raw.push('\u{0}');
            raw.push_str(&service.next_partition_key);
            if let Some(rk) = &service.next_row_key {
                raw.push('\u{0}');
                raw.push_str(rk);
            }
        }
        f.write_str(&URL_SAFE_NO_PAD.encode(raw))
    }
}

impl FromStr for ContinuationToken {
    type Err = InvalidInput;
    fn from_str(s: &str) -> Result<Self, InvalidInput> {
        fn bad<E>(_: E) -> InvalidInput {
            InvalidInput::ContinuationToken
        }
        let bytes = URL_SAFE_NO_PAD.decode(s).map_err(bad)?;
        let raw = String::from_utf8(bytes).map_err(bad)?;
        let (with_service, body) = match raw.strip_prefix(TOKEN_VERSION) {
            Some(body) => (false, body),
            None => (
                true,
                raw.strip_prefix(SERVICE_TOKEN_VERSION)
                    .ok_or(InvalidInput::ContinuationToken)?,
            ),
        };
        let mut fields = body.split('\u{0}');
        let mut next = || fields.next().ok_or(InvalidInput::ContinuationToken);
        let mut token = Self::at(
            PartitionKey::new(next()?).map_err(bad)?,
            RowKey::new(next()?).map_err(bad)?,
        );
        if with_service {
            token.service = Some(ServiceToken {
                next_partition_key: next()?.to_owned(),
                next_row_key: next().ok().map(str::to_owned),
            });
        }
        if fields.next().is_some() {
            return Err(InvalidInput::ContinuationToken);
        }
        Ok(token)
    }
}

/// One page of a query's answer.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Page {
    /// The entities, in key order. May be empty even when a token follows.
    pub entities: Vec<StoredEntity>,
    /// Where to resume; `None` when the query is done.
    pub continuation: Option<ContinuationToken>,
    /// Entities the store examined for this page: those in the key range,
    /// before the filter. A remote service does not say; there it counts the
    /// entities the service sent.
    pub scanned: usize,
}

/// One page of a table's distinct PartitionKeys (`TableStore::partitions`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PartitionPage {
    /// The PartitionKeys of partitions that hold at least one entity, in key
    /// order. May be empty even when the listing goes on.
    pub partitions: Vec<PartitionKey>,
    /// Where the next page starts: after this PartitionKey. `None` when the
    /// listing is done.
    pub after: Option<PartitionKey>,
    /// Requests the store made for this page: a store that cannot seek pays
    /// one per partition.
    pub requests: usize,
}

/// One partition's entities by RowKey kind, from counts a store keeps
/// (`TableStore::partition_counts`). A kind is the literal `name:` that
/// starts a RowKey (`BIB:`, `r:`), "" for a RowKey without one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionCount {
    /// The partition.
    pub partition: PartitionKey,
    /// Its entities of each kind it holds, in the kinds' byte order.
    pub kinds: Vec<(String, u64)>,
}

impl PartitionCount {
    /// Its entities of every kind.
    pub fn entities(&self) -> u64 {
        self.kinds.iter().map(|(_, n)| n).sum()
    }
}

/// Most PartitionKeys one page of a partition listing carries.
pub const MAX_PARTITION_PAGE: usize = 1000;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_range_is_one_kind_only_when_it_holds_that_kind_exactly() {
        let range = |s: &str, e: &str| KeyRange {
            start: Bound::Included(RowKey::from_stored(s.into())),
            end: Bound::Excluded(RowKey::from_stored(e.into())),
        };
        assert_eq!(KeyRange::<RowKey>::all().kind(), Some(""));
        assert_eq!(range("BIB:", "BIB;").kind(), Some("BIB:"));
        assert_eq!(range("BIB:0", "BIB:1").kind(), None);
        assert_eq!(range("BI", "BJ").kind(), None);
        assert_eq!(range("BIB:", "BIC").kind(), None);
    }

    #[test]
    fn token_text_round_trips() {
        let mut t = ContinuationToken::at(
            PartitionKey::new("2011 NYC__Full").unwrap(),
            RowKey::new("BIB:00001__é\u{10000}").unwrap(),
        );
        assert_eq!(t.to_string().parse::<ContinuationToken>().unwrap(), t);
        for rk in [None, Some("MSFyIQ--".to_owned())] {
            t.service = Some(ServiceToken {
                next_partition_key: "MSE0IXA-".into(),
                next_row_key: rk,
            });
            assert_eq!(t.to_string().parse::<ContinuationToken>().unwrap(), t);
        }
        assert!("garbage!".parse::<ContinuationToken>().is_err());
        assert!(
            URL_SAFE_NO_PAD
                .encode("2:a\u{0}b")
                .parse::<ContinuationToken>()
                .is_err()
        );
    }
}
