//! Page tokens: where a page of a query's rows ended, handed to a client that
//! may resume in another process. A token is the key of the last row it
//! returned (pages run in key order, so that one key is the whole position,
//! however many partitions were read in parallel), bound to its statement and
//! signed with the store's key (HMAC-SHA256), so that an altered token, one of
//! another statement or of another store is refused, never read as a
//! position.
//!
//! The form, base64url without padding: version (1 byte), store id (8), the
//! statement's fingerprint (16), the PartitionKey and the RowKey (each a
//! 4-byte length and UTF-8), then the HMAC of everything before (32).
//! Signed, not encrypted: the keys of the page's last row can be read.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::{digest, hmac};

use crate::storage::{PartitionKey, RowKey};

/// 2: 4-byte key lengths.
const VERSION: u8 = 2;
const MAC_LEN: usize = 32;
const HEADER_LEN: usize = 1 + 8 + 16;

/// Why a token was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TokenError {
    /// Not a token at all: not base64url, too short, cut off, or not a
    /// version this engine writes.
    #[error("invalid page token: {0}")]
    Malformed(&'static str),
    /// Signed by another store's key.
    #[error("page token was issued by another store")]
    OtherStore,
    /// The signature does not match: the token was changed.
    #[error("page token has been altered (its signature does not match)")]
    Altered,
    /// A genuine token of another statement.
    #[error("page token belongs to another statement; resume with the statement that issued it")]
    OtherStatement,
}

/// A statement's fingerprint: the first 16 bytes of the SHA-256 of its text.
pub fn fingerprint(statement: &str) -> [u8; 16] {
    let d = digest::digest(&digest::SHA256, statement.as_bytes());
    let mut out = [0u8; 16];
    out.copy_from_slice(&d.as_ref()[..16]);
    out
}

/// Signs and checks the tokens of one store.
#[derive(Clone)]
pub struct Signer {
    key: hmac::Key,
    store_id: [u8; 8],
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Signer")
            .field("store_id", &self.store_id)
            .finish_non_exhaustive()
    }
}

impl Signer {
    /// A signer with the store's secret; its id is derived from it, so that
    /// a token from another store says so rather than "altered".
    pub fn new(secret: &[u8]) -> Self {
        let mut id = digest::Context::new(&digest::SHA256);
        id.update(b"tablesql store id\0");
        id.update(secret);
        let mut store_id = [0u8; 8];
        store_id.copy_from_slice(&id.finish().as_ref()[..8]);
        Self {
            key: hmac::Key::new(hmac::HMAC_SHA256, secret),
            store_id,
        }
    }

    /// The token of the position after the row `(pk, rk)` of `statement`.
    pub fn issue(&self, statement: &[u8; 16], pk: &PartitionKey, rk: &RowKey) -> String {
        let mut body = Vec::with_capacity(HEADER_LEN + 8 + pk.as_str().len() + rk.as_str().len());
        body.push(VERSION);
        body.extend_from_slice(&self.store_id);
        body.extend_from_slice(statement);
        for k in [pk.as_str(), rk.as_str()] {
            // Keys are at most 1 KiB (checked when they are made).
            let len = u32::try_from(k.len()).unwrap_or(u32::MAX);
            body.extend_from_slice(&len.to_le_bytes());
            body.extend_from_slice(k.as_bytes());
        }
        let tag = hmac::sign(&self.key, &body);
        body.extend_from_slice(tag.as_ref());
        URL_SAFE_NO_PAD.encode(body)
    }

    /// The position a token names, once its form, store, signature and
    /// statement are checked, in that order.
    pub fn open(
        &self,
        token: &str,
        statement: &[u8; 16],
    ) -> Result<(PartitionKey, RowKey), TokenError> {
        let bytes = URL_SAFE_NO_PAD
            .decode(token.trim())
            .map_err(|_| TokenError::Malformed("not base64url"))?;
        if bytes.len() < HEADER_LEN + 8 + MAC_LEN {
            return Err(TokenError::Malformed("too short"));
        }
        if bytes[0] != VERSION {
            return Err(TokenError::Malformed("unknown version"));
        }
        let (body, tag) = bytes.split_at(bytes.len() - MAC_LEN);
        let (pk, rest) = key_field(&body[HEADER_LEN..])?;
        let (rk, rest) = key_field(rest)?;
        if !rest.is_empty() {
            return Err(TokenError::Malformed("trailing bytes"));
        }
        if body[1..9] != self.store_id {
            return Err(TokenError::OtherStore);
        }
        hmac::verify(&self.key, body, tag).map_err(|_| TokenError::Altered)?;
        if &body[9..HEADER_LEN] != statement {
            return Err(TokenError::OtherStatement);
        }
        Ok((
            PartitionKey::from_stored(pk.to_owned()),
            RowKey::from_stored(rk.to_owned()),
        ))
    }
}

/// One length-prefixed key, and the bytes after it.
fn key_field(bytes: &[u8]) -> Result<(&str, &[u8]), TokenError> {
    let cut = TokenError::Malformed("cut off");
    let len: [u8; 4] = bytes
        .get(..4)
        .and_then(|b| b.try_into().ok())
        .ok_or(cut.clone())?;
    let len = usize::try_from(u32::from_le_bytes(len)).map_err(|_| cut.clone())?;
    let end = 4usize.checked_add(len).ok_or(cut.clone())?;
    let text = bytes.get(4..end).ok_or(cut)?;
    let text =
        std::str::from_utf8(text).map_err(|_| TokenError::Malformed("a key is not UTF-8"))?;
    Ok((text, &bytes[end..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys() -> (PartitionKey, RowKey) {
        (
            PartitionKey::from_stored("2012 Boston Marathon__Full".into()),
            RowKey::from_stored("BIB:01234__Ann__F__35".into()),
        )
    }

    #[test]
    fn a_token_round_trips_and_every_bad_one_is_refused() {
        let signer = Signer::new(b"secret one");
        let stmt = fingerprint("SELECT * FROM t");
        let (pk, rk) = keys();
        let token = signer.issue(&stmt, &pk, &rk);
        assert_eq!(signer.open(&token, &stmt), Ok((pk, rk)));

        let other = fingerprint("SELECT a FROM t");
        assert_eq!(signer.open(&token, &other), Err(TokenError::OtherStatement));
        let foreign = Signer::new(b"secret two");
        assert_eq!(foreign.open(&token, &stmt), Err(TokenError::OtherStore));

        // Every single-character change is refused (never a wrong position).
        let alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
        for i in 0..token.len() {
            let old = token.as_bytes()[i] as char;
            let new = alphabet.chars().find(|&c| c != old).unwrap_or('A');
            let mut changed = token.clone();
            changed.replace_range(i..=i, &new.to_string());
            assert!(signer.open(&changed, &stmt).is_err(), "changed at {i}");
        }
        for n in 0..token.len() {
            assert!(signer.open(&token[..n], &stmt).is_err(), "cut to {n}");
        }
        assert_eq!(
            signer.open("not a token!", &stmt),
            Err(TokenError::Malformed("not base64url"))
        );
    }
}
