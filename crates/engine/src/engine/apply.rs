//! Applying a directory of catalog files to a store: the definitions a
//! project keeps in version control (its `catalog/*.sql`) made the store's.

use std::path::Path;

use super::{Engine, EngineError};
use crate::catalog::{files, persist};

/// What applying did to one definition.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Applied {
    /// It was not in the store: created (with its storage table if missing).
    Created(String),
    /// The store held another definition of that name: replaced. Entities
    /// stay as they are; index rows a new template names are the
    /// application's to write, or `CREATE INDEX`'s to build.
    Replaced(String),
    /// The store held the same definition.
    Unchanged(String),
}

impl std::fmt::Display for Applied {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Applied::Created(name) => write!(f, "created {name}"),
            Applied::Replaced(name) => write!(f, "replaced {name}"),
            Applied::Unchanged(name) => write!(f, "unchanged {name}"),
        }
    }
}

impl Engine {
    /// Makes the stored catalog hold the mappings of every `.sql` file in
    /// `dir` (`catalog::files`): each created, or replaced where the stored
    /// one differs, in file order, `each` told of it as it is done. Every
    /// file is read and checked before anything is stored, so a file that
    /// does not read or holds something else changes nothing; a store
    /// failure part way leaves applied what `each` was told of. Tables the
    /// files do not name are left alone.
    pub async fn apply_catalog(
        &self,
        dir: &Path,
        mut each: impl FnMut(&Applied),
    ) -> Result<Vec<Applied>, EngineError> {
        let wanted = files::read_dir(dir)?;
        for file in &wanted {
            // Refused here (a default that does not plan), not half way.
            self.column_defaults(&crate::exec::Layout::mapped(std::sync::Arc::new(
                file.def.clone(),
            )))?;
        }
        let stored = persist::load(self.store.as_ref()).await?;
        let mut done = Vec::with_capacity(wanted.len());
        for file in wanted {
            let name = file.def.name.clone();
            let outcome = match stored.iter().find(|d| d.name == name) {
                Some(old) if old.to_ddl() == file.def.to_ddl() => Applied::Unchanged(name),
                Some(_) => {
                    self.create_table(file.def, true).await?;
                    Applied::Replaced(name)
                }
                None => {
                    self.create_table(file.def, false).await?;
                    Applied::Created(name)
                }
            };
            each(&outcome);
            done.push(outcome);
        }
        Ok(done)
    }
}
