//! Writing rows: SQL rows into entities and entity group transactions.
//!
//! INSERT, UPDATE, DELETE and `INSERT ... ON CONFLICT` encode each row as
//! its base entity and its index rows, in the row's partition, and send
//! them in entity group transactions of at most 100 operations, so that a
//! row and its index rows land together or not at all. A transaction block
//! buffers those writes and commits them as one such transaction where they
//! fit one, else through a durable record of them (`commit`). Kept
//! apart from the read side because a write's guarantees (what is atomic,
//! what is conditional on an ETag, what a failure leaves written) are
//! its own; it reads through `read` (the rows an UPDATE or DELETE
//! changes, the keys an INSERT checks) but the read side does not write.
//!
//! - `dml`: `DmlExec`, INSERT, UPDATE and DELETE; `dml::upsert`, `ON CONFLICT`.
//! - `encode`: a row into its base entity and index rows; pure.
//! - `transaction`: `BEGIN ... COMMIT`, a session's buffered writes and
//!   the reads it validates at COMMIT.
//! - `locks`: the row locks of `FOR UPDATE` among one engine's sessions.
//! - `commit`: COMMIT of a block wider than one entity group transaction.
//! - `upkeep`: index CHECK and REPAIR (and `CREATE INDEX`'s backfill).
//! - `global`: global indexes' entities, written around the base row's write.
//! - `sequences`: the blocks of sequence values this process has reserved.

pub mod commit;
pub mod dml;
pub mod encode;
pub mod global;
pub mod locks;
pub mod reads;
pub mod sequences;
pub mod transaction;
pub mod upkeep;
