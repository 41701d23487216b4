//! Continuation tokens as the service writes them. On `storage`, Azure's
//! form, `1!<length>!<base64 of the key>` with `-` for padding, and no
//! `NextRowKey` where the next page starts a partition. On `cosmos`, a form
//! no client can read a key from (`C!` and hex): Cosmos DB's tokens are
//! opaque, and its pages are in no key order to resume by.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use tablesql_storage::storage::{PartitionKey, RowKey};

use crate::http::bad;
use crate::limits::Profile;
use crate::service::Refusal;

/// `NextPartitionKey` and, unless the position starts a partition, `NextRowKey`.
pub fn encode(pk: &PartitionKey, rk: &RowKey, profile: Profile) -> (String, Option<String>) {
    let one = |k: &str| match profile {
        Profile::Storage => {
            let b64 = STANDARD.encode(k).replace('=', "-");
            format!("1!{}!{b64}", b64.len())
        }
        Profile::Cosmos => {
            let hex: String = k.bytes().map(|b| format!("{b:02x}")).collect();
            format!("C!{hex}")
        }
    };
    let rk = (!rk.as_str().is_empty() || profile == Profile::Cosmos).then(|| one(rk.as_str()));
    (one(pk.as_str()), rk)
}

/// The position a client's `NextPartitionKey` and `NextRowKey` name.
pub fn decode(pk: &str, rk: Option<&str>) -> Result<(PartitionKey, RowKey), Refusal> {
    let invalid = || {
        bad(
            "InvalidInput",
            "the continuation token is not one this service gave",
        )
    };
    let one = |t: &str| -> Option<String> {
        if let Some(hex) = t.strip_prefix("C!") {
            if !hex.len().is_multiple_of(2) || !hex.is_ascii() {
                return None;
            }
            let bytes: Option<Vec<u8>> = (0..hex.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).ok())
                .collect();
            return String::from_utf8(bytes?).ok();
        }
        let body = t.strip_prefix("1!")?.split_once('!')?.1;
        let unpadded = body.trim_end_matches('-');
        let padded = format!("{unpadded}{}", "=".repeat(body.len() - unpadded.len()));
        String::from_utf8(STANDARD.decode(padded).ok()?).ok()
    };
    let pk = PartitionKey::new(one(pk).ok_or_else(invalid)?).map_err(|_| invalid())?;
    let rk = match rk {
        None => RowKey::default(),
        Some(t) => RowKey::new(one(t).ok_or_else(invalid)?).map_err(|_| invalid())?,
    };
    Ok((pk, rk))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_round_trip_and_partition_starts_carry_no_row_key() {
        let pk = PartitionKey::new("p1").unwrap();
        let rk = RowKey::new("é'x").unwrap();
        for profile in [Profile::Storage, Profile::Cosmos] {
            let (p, r) = encode(&pk, &rk, profile);
            let back = decode(&p, r.as_deref()).unwrap();
            assert_eq!(back, (pk.clone(), rk.clone()));
        }
        let (p, r) = encode(&pk, &RowKey::default(), Profile::Storage);
        assert_eq!((p.as_str(), r), ("1!4!cDE-", None));
        assert!(decode("garbage", None).is_err());
    }
}
