//! The store's secret: 32 random bytes kept beside the catalog (partition
//! `secret` of `TablesqlCatalog`), created by the first engine that needs it.
//! Page tokens are signed with it, so any process over the same store can
//! check a token another one issued, and no other store's token passes.

use ring::rand::{SecureRandom, SystemRandom};

use super::CatalogError;
use super::persist::table;
use crate::storage::{EdmValue, Entity, PartitionKey, RowKey, StorageError, TableStore, WriteOp};

const PARTITION: &str = "secret";
const ROW: &str = "page_tokens";
const LEN: usize = 32;

/// The store's secret for page tokens, created on first use. Two engines
/// creating it at once agree: the second insert fails and reads the first's.
pub async fn page_token_key(store: &dyn TableStore) -> Result<Vec<u8>, CatalogError> {
    let table = table()?;
    let pk = PartitionKey::new(PARTITION).map_err(StorageError::from)?;
    let rk = RowKey::new(ROW).map_err(StorageError::from)?;
    if let Some(found) = read(store, &pk, &rk).await? {
        return Ok(found);
    }
    let mut secret = vec![0u8; LEN];
    SystemRandom::new()
        .fill(&mut secret)
        .map_err(|_| CatalogError::Secret("no system randomness to make it"))?;
    match store.create_table(&table).await {
        Ok(()) | Err(StorageError::TableAlreadyExists(_)) => {}
        Err(e) => return Err(e.into()),
    }
    let entity = Entity::new(pk.clone(), rk.clone()).with("key", EdmValue::Binary(secret.clone()));
    match store.execute(&table, WriteOp::Insert(entity)).await {
        Ok(_) => Ok(secret),
        Err(StorageError::EntityAlreadyExists { .. }) => read(store, &pk, &rk)
            .await?
            .ok_or_else(|| CatalogError::Secret("it vanished while being created")),
        Err(e) => Err(e.into()),
    }
}

async fn read(
    store: &dyn TableStore,
    pk: &PartitionKey,
    rk: &RowKey,
) -> Result<Option<Vec<u8>>, CatalogError> {
    match store.get(&table()?, pk, rk).await {
        Ok(Some(e)) => match e.get("key") {
            Some(EdmValue::Binary(k)) if k.len() == LEN => Ok(Some(k.clone())),
            _ => Err(CatalogError::Secret("it is not 32 bytes")),
        },
        Ok(None) | Err(StorageError::TableNotFound(_)) => Ok(None),
        Err(e) => Err(e.into()),
    }
}
