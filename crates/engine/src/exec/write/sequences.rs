//! The values of sequences this process has reserved and not yet handed
//! out: one block per sequence (see `catalog::sequence`), shared by every
//! session of the engine, so that one write serves `cache` calls of
//! `nextval` whichever connection makes them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::catalog::CatalogError;
use crate::catalog::sequence::{self, Block};
use crate::storage::TableStore;

/// The blocks of one engine.
#[derive(Debug)]
pub struct Sequences {
    store: Arc<dyn TableStore>,
    /// An async lock per sequence: callers that find the block used up
    /// wait for the one reservation rather than each making one.
    blocks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<Option<Block>>>>>,
}

impl Sequences {
    /// No blocks yet, over `store`.
    pub fn new(store: Arc<dyn TableStore>) -> Self {
        Self {
            store,
            blocks: Mutex::default(),
        }
    }

    fn slot(&self, name: &str) -> Arc<tokio::sync::Mutex<Option<Block>>> {
        let mut blocks = self.blocks.lock().unwrap_or_else(|p| p.into_inner());
        blocks.entry(name.to_owned()).or_default().clone()
    }

    /// `nextval(name)`: the next value of this process's block, reserving a
    /// new block from the counter when it is used up.
    pub async fn next(&self, name: &str) -> Result<i64, CatalogError> {
        let slot = self.slot(name);
        let mut block = slot.lock().await;
        if let Some(value) = block.as_mut().and_then(Block::take) {
            return Ok(value);
        }
        *block = None;
        let mut fresh = sequence::reserve(self.store.as_ref(), name).await?;
        let value = fresh.take().ok_or_else(|| {
            CatalogError::Definition(format!("sequence {name} reserved an empty block"))
        })?;
        *block = Some(fresh);
        Ok(value)
    }

    /// `setval(name, value, is_called)`: sets the counter and drops this
    /// process's block, so that its next `nextval` follows the new value.
    /// Other processes finish the blocks they hold first, as sessions with
    /// a `CACHE` do in PostgreSQL.
    pub async fn set(&self, name: &str, value: i64, is_called: bool) -> Result<(), CatalogError> {
        let slot = self.slot(name);
        let mut block = slot.lock().await;
        *block = None;
        sequence::set(self.store.as_ref(), name, value, is_called).await
    }

    /// Forgets a dropped sequence's block.
    pub fn forget(&self, name: &str) {
        let mut blocks = self.blocks.lock().unwrap_or_else(|p| p.into_inner());
        blocks.remove(name);
    }
}
