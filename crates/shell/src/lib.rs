//! tablesql's interactive shell over the engine: a line editor, meta
//! commands, tables on the terminal. It does not depend on the wire server.
//! Most users want the `tablesql` crate, which re-exports [`shell`].

#![deny(missing_docs)]

// The engine's modules at the paths the shell's code names them by.
use tablesql_engine::{catalog, engine, load, sqlstate};

pub mod shell;
