//! Planning: the DataFusion table provider of store tables, the pushdown of
//! filters onto the PartitionKey/RowKey index into the access paths
//! (`exec::read::access`) that scans run and EXPLAIN shows.
//!
//! - `provider`: `StoreTable`, the DataFusion `TableProvider` of a mapped or
//!   raw table.
//! - `pushdown`: the pushdown function: filters into the access paths of
//!   `exec::read::access` (`pushdown::keyset` the row-value bounds,
//!   `pushdown::cost` a path's requests by the statistics); pure.
//! - `simple_scan`: the plan shape fast paths take: columns and filters over
//!   one scan.
//! - `point`: prepared point reads by primary key, planned once at prepare.
//! - `page`: one page of a query in key order, for token paging.
//! - `lookup`: lookup joins: the physical optimizer rule that reads a join's
//!   inner table by key where the estimates favour it.
//! - `policy`: the scan policy (`allow`, `warn`, `deny`) and its verdict on a
//!   scan of every partition.
//! - `settings`: the `tablesql.*` session settings.
//! - `parameters`: PostgreSQL's session parameters (`application_name`,
//!   `DateStyle`, ...), `current_setting` and `set_config`.
//! - `identity`: the PostgreSQL version tablesql says it is, in one place.
//! - `sql`: the one parser of every front end.
//! - `pg_spelling`: PostgreSQL spellings DataFusion lacks, as ones it plans:
//!   `LIKE ... ESCAPE`, `(expr).field`, `generate_subscripts`,
//!   `_pg_expandarray`.
//! - `pg_functions`: the functions they become, `json_build_object`,
//!   `quote_literal`, `pg_typeof` and the constant answers tools ask for.
//! - `wildcard`: `SELECT *` as PostgreSQL expands it, without the system
//!   columns.
//! - `column_listing`: `information_schema.columns` without the system columns.
//! - `output_names`: output columns of one name, as PostgreSQL allows them.
//! - `literals`: integer literals typed as PostgreSQL types them.
//! - `bool_literals`: a quoted literal compared with a boolean is one.
//! - `checked`: integer arithmetic as PostgreSQL's (`exec::ops::checked`).
//! - `undefined`: an unknown table or function, found by asking the catalog
//!   after DataFusion's planning fails, so that its SQLSTATE (42P01, 42883) is
//!   not read from message text.
//! - `physical`: the session's query planner: DataFusion's, with the extension
//!   planner that turns `ApplyNode`s into `SubqueryApplyExec`s.
//! - `subquery`: subqueries DataFusion cannot run, moved into `ApplyNode`s by
//!   an optimizer rule.
//! - `apply_node`: `ApplyNode`, the logical node of subqueries evaluated per
//!   outer value.
//! - `subquery_rules`: analyzer rules around DataFusion's subquery rewrites.
//! - `rewrite`: the walk those rules share.
//! - `insert_defaults`: an INSERT without a column list, and its `DEFAULT`
//!   cells, as PostgreSQL reads them.
//! - `insert_source`: `VALUES` nested in an INSERT's query, as something
//!   DataFusion plans.
//! - `upsert`: `INSERT ... ON CONFLICT` (`UpsertNode`).
//! - `returning`: `INSERT/UPDATE/DELETE ... RETURNING` (`ReturningNode`).
//! - `dml_query`: DELETE and UPDATE whose rows a query chooses (a subquery,
//!   `UPDATE ... FROM`, `DELETE ... USING`), planned as that query.
//! - `dml_shape`: keeps DELETE and UPDATE to what a table can answer.
//! - `sequence_functions`: `nextval`, `currval` and `setval`, and `nextval` in
//!   `VALUES`.
//! - `index_functions`: `tablesql_check_index`, `tablesql_repair_index`.
//! - `workload_views`: the workload statistics as views
//!   (`tablesql_stat_statements`, `tablesql_stat_partitions`),
//!   `tablesql_stat_reset()`, and the advisor's `tablesql_advise` and
//!   `tablesql_advise_report`.

pub mod apply_node;
pub mod bool_literals;
pub mod checked;
pub mod column_listing;
pub mod dml_query;
pub mod dml_shape;
pub mod identity;
pub mod index_functions;
pub mod insert_defaults;
pub mod insert_source;
pub mod literals;
pub mod lookup;
pub mod output_names;
pub mod page;
pub mod parameters;
pub mod parse_ident;
pub mod pg_functions;
pub mod pg_spelling;
pub mod physical;
pub mod point;
pub mod policy;
pub mod provider;
pub mod pushdown;
pub mod returning;
pub mod rewrite;
pub mod sequence_functions;
pub mod settings;
pub(crate) mod simple_scan;
pub mod sql;
pub mod subquery;
pub mod subquery_rules;
pub mod timestamp_text;
pub mod undefined;
pub mod upsert;
pub mod wildcard;
pub mod workload_views;

pub use physical::TablesqlQueryPlanner;
pub use provider::StoreTable;
pub use sql::SqlParser;
