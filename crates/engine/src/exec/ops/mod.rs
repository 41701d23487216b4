//! SQL operators DataFusion lacks or runs differently from PostgreSQL.
//!
//! Not about storage at all: each is an operator, aggregate, function or
//! optimizer rule that the planner puts into an ordinary DataFusion plan
//! so that SQL answers as PostgreSQL's does (a scalar subquery of two rows
//! fails, integer overflow fails, a correlated subquery DataFusion cannot
//! decorrelate still runs) or so that a long join can be cancelled. Kept
//! apart from the scan and the writes, which they never touch.
//!
//! - `apply`: `SubqueryApplyExec`, correlated subqueries run per outer value.
//! - `single_value`: the one row of a scalar subquery, or an error for two.
//! - `checked`: integer `+`, `-` and `*` that fail on overflow.
//! - `coop`: the rule that makes joins yield to the runtime.

pub mod apply;
pub mod checked;
pub mod coop;
pub mod single_value;
