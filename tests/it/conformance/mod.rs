//! The storage conformance suite: one set of cases, written only against the
//! `TableStore` trait, run against every backend. A backend joins with one
//! `conformance_suite!(name, constructor);` line at the bottom of this file.

use std::ops::Bound;
use std::sync::Arc;

use tablesql::storage::{
    AzureStore, ETag, EdmValue, EmbeddedStore, Entity, KeyRange, MemoryStore, PartitionKey, Query,
    RowKey, StoredEntity, TableName, TableStore, WriteOp,
};
use tempfile::TempDir;

/// What a case returns.
pub type TestResult<T = ()> = Result<T, Box<dyn std::error::Error>>;

/// Builds a fixture whose store examines at most `scan_budget` entities per page.
pub type Constructor = fn(usize) -> TestResult<Fixture>;

/// A fresh, empty store of one backend, plus whatever keeps it alive.
pub struct Fixture {
    pub store: Arc<dyn TableStore>,
    _dir: Option<TempDir>,
    /// A service the store talks to, kept running while the fixture lives.
    _service: Option<crate::local_service::Local>,
    make: Constructor,
    /// The service loses the sign of -0.0, which no client can restore:
    /// Azurite keeps Doubles as JavaScript numbers and prints -0 as 0.
    loses_negative_zero: bool,
}

impl Fixture {
    /// Wraps a store; `make` builds another fixture of the same backend.
    pub fn new(store: Arc<dyn TableStore>, dir: Option<TempDir>, make: Constructor) -> Self {
        Self {
            store,
            _dir: dir,
            _service: None,
            make,
            loses_negative_zero: false,
        }
    }

    /// A value as this backend's service gives it back: what was written,
    /// except where the service deviates in a way no client can correct.
    pub fn stored(&self, v: &EdmValue) -> EdmValue {
        match v {
            EdmValue::Double(d) if self.loses_negative_zero && *d == 0.0 => EdmValue::Double(0.0),
            other => other.clone(),
        }
    }

    /// The in-memory reference backend.
    pub fn memory(scan_budget: usize) -> TestResult<Fixture> {
        let store = MemoryStore::new().with_scan_budget(scan_budget);
        Ok(Self::new(Arc::new(store), None, Fixture::memory))
    }

    /// The embedded backend on a real file in a temporary directory.
    pub fn embedded(scan_budget: usize) -> TestResult<Fixture> {
        let dir = tempfile::tempdir()?;
        let store = EmbeddedStore::open(dir.path())?.with_scan_budget(scan_budget);
        Ok(Self::new(Arc::new(store), Some(dir), Fixture::embedded))
    }

    /// The Azure backend on a fresh account of the test Azurite.
    pub fn azure(scan_budget: usize) -> TestResult<Fixture> {
        let config = crate::azurite::fresh_account()?;
        let emulator = config.emulator;
        let store = AzureStore::new(config)?.with_scan_budget(scan_budget);
        let mut fixture = Self::new(Arc::new(store), None, Fixture::azure);
        fixture.loses_negative_zero = emulator;
        Ok(fixture)
    }

    /// The Azure backend on the local Table service with Azure's limits
    /// (the `storage` profile), quick and without faults.
    pub fn table_service(scan_budget: usize) -> TestResult<Fixture> {
        Self::local(scan_budget, &[], Fixture::table_service)
    }

    /// As [`Fixture::table_service`], with busy answers (with and without
    /// hints) and latency with a heavy tail: every case still gets the
    /// model's answer. The faults that change what a case may see are
    /// tested apart (`local_service`): a 500 makes a refused write's
    /// error ambiguous, and an empty page is a page a case counts.
    pub fn table_service_faults(scan_budget: usize) -> TestResult<Fixture> {
        let faults = [
            "busy=0.05",
            "retry_hint=0.5",
            "latency_ms=0.5",
            "latency_sigma=1.5",
        ];
        Self::local(scan_budget, &faults, Fixture::table_service_faults)
    }

    fn local(scan_budget: usize, knobs: &[&str], make: Constructor) -> TestResult<Fixture> {
        let local =
            crate::local_service::Local::start(tablesql::tableservice::Profile::Storage, knobs)
                .map_err(|e| e.to_string())?;
        let store = local.store().map_err(|e| e.to_string())?;
        let mut fixture = Self::new(Arc::new(store.with_scan_budget(scan_budget)), None, make);
        fixture._service = Some(local);
        Ok(fixture)
    }

    /// Another fresh fixture of the same backend with a different scan budget.
    pub fn with_scan_budget(&self, scan_budget: usize) -> TestResult<Fixture> {
        (self.make)(scan_budget)
    }

    /// The store under test.
    pub fn store(&self) -> &dyn TableStore {
        &*self.store
    }
}

// ---- assertions ------------------------------------------------------------

/// Asserts that a value matches a pattern, showing the value when it does not.
macro_rules! assert_matches {
    ($value:expr, $pat:pat $(if $guard:expr)?) => {{
        let value = &$value;
        assert!(
            matches!(value, $pat $(if $guard)?),
            "expected {}, got {:?}",
            stringify!($pat $(if $guard)?),
            value
        );
    }};
}

/// Asserts that a result is an error matching a pattern, and yields the error.
macro_rules! expect_err {
    ($result:expr, $pat:pat $(if $guard:expr)?) => {{
        match $result {
            Err(e) => {
                assert!(
                    matches!(&e, $pat $(if $guard)?),
                    "expected error {}, got {:?}",
                    stringify!($pat $(if $guard)?),
                    e
                );
                e
            }
            Ok(v) => panic!("expected error {}, got Ok({:?})", stringify!($pat), v),
        }
    }};
}

// ---- builders ----------------------------------------------------------------

/// A PartitionKey that must be valid.
pub fn pk(s: &str) -> PartitionKey {
    PartitionKey::new(s).unwrap_or_else(|e| panic!("bad test PartitionKey {s:?}: {e}"))
}

/// A RowKey that must be valid.
pub fn rk(s: &str) -> RowKey {
    RowKey::new(s).unwrap_or_else(|e| panic!("bad test RowKey {s:?}: {e}"))
}

/// A TableName that must be valid.
pub fn tn(s: &str) -> TableName {
    TableName::new(s).unwrap_or_else(|e| panic!("bad test table name {s:?}: {e}"))
}

/// An entity with the given properties.
pub fn entity(p: &str, r: &str, props: &[(&str, EdmValue)]) -> Entity {
    props
        .iter()
        .fold(Entity::new(pk(p), rk(r)), |e, (name, value)| {
            e.with(*name, value.clone())
        })
}

/// A String value.
pub fn text(s: &str) -> EdmValue {
    EdmValue::String(s.to_owned())
}

/// An Int32 value.
pub fn int(i: i32) -> EdmValue {
    EdmValue::Int32(i)
}

/// Creates a table and returns its name.
pub async fn table(store: &dyn TableStore, name: &str) -> TestResult<TableName> {
    let name = tn(name);
    store.create_table(&name).await?;
    Ok(name)
}

/// The names of the store's tables, as listed.
pub async fn table_names(store: &dyn TableStore) -> TestResult<Vec<String>> {
    let tables = store.list_tables().await?;
    Ok(tables.iter().map(|t| t.as_str().to_owned()).collect())
}

/// Inserts one entity and returns its ETag.
pub async fn insert(store: &dyn TableStore, t: &TableName, e: Entity) -> TestResult<ETag> {
    let outcome = store.execute(t, WriteOp::Insert(e)).await?;
    Ok(outcome.etag.ok_or("an insert returned no ETag")?)
}

/// Reads one entity by its keys.
pub async fn get(
    store: &dyn TableStore,
    t: &TableName,
    p: &str,
    r: &str,
) -> TestResult<Option<StoredEntity>> {
    Ok(store.get(t, &pk(p), &rk(r)).await?)
}

/// Reads one entity that must exist.
pub async fn must_get(
    store: &dyn TableStore,
    t: &TableName,
    p: &str,
    r: &str,
) -> TestResult<StoredEntity> {
    Ok(get(store, t, p, r)
        .await?
        .ok_or_else(|| format!("entity ({p:?}, {r:?}) is missing"))?)
}

/// Inserts entities through entity group transactions of 100 (one partition per
/// chunk; callers pass entities of one partition).
pub async fn seed(store: &dyn TableStore, t: &TableName, entities: Vec<Entity>) -> TestResult {
    let mut ops: Vec<WriteOp> = entities.into_iter().map(WriteOp::Insert).collect();
    while !ops.is_empty() {
        let rest = ops.split_off(ops.len().min(100));
        store.execute_batch(t, ops).await?;
        ops = rest;
    }
    Ok(())
}

/// Inserts bare entities for every (PartitionKey, RowKey) pair given.
pub async fn seed_keys(store: &dyn TableStore, t: &TableName, keys: &[(&str, &str)]) -> TestResult {
    for (p, r) in keys {
        insert(store, t, entity(p, r, &[])).await?;
    }
    Ok(())
}

/// An entity of exactly `bytes` by the service's size formula, made of String
/// properties of at most 32,000 characters (`bytes` must be even).
pub fn entity_of_size(p: &str, r: &str, bytes: usize) -> Entity {
    assert!(bytes.is_multiple_of(2), "sizes by the formula are even");
    let mut e = entity(p, r, &[]);
    for i in 0.. {
        let left = bytes - e.stored_size();
        if left == 0 {
            break;
        }
        // A property "Snn" costs 8 + 6 + 4 bytes plus 2 per character.
        let room = left
            .checked_sub(18)
            .expect("size too small to reach exactly")
            / 2;
        let chars = if room <= 32_000 {
            room
        } else {
            (room - 20).min(32_000)
        };
        e = e.with(format!("S{i:02}"), text(&"x".repeat(chars)));
    }
    assert_eq!(e.stored_size(), bytes);
    e
}

/// The (PartitionKey, RowKey) pairs of entities, in the order given.
pub fn keys(entities: &[StoredEntity]) -> Vec<(String, String)> {
    entities
        .iter()
        .map(|e| {
            (
                e.partition_key().as_str().to_owned(),
                e.row_key().as_str().to_owned(),
            )
        })
        .collect()
}

/// The RowKeys of entities, in the order given.
pub fn row_keys(entities: &[StoredEntity]) -> Vec<String> {
    entities
        .iter()
        .map(|e| e.row_key().as_str().to_owned())
        .collect()
}

/// Owned (PartitionKey, RowKey) pairs from string pairs.
pub fn pairs(keys: &[(&str, &str)]) -> Vec<(String, String)> {
    keys.iter()
        .map(|(p, r)| ((*p).to_owned(), (*r).to_owned()))
        .collect()
}

/// A key range from two string bounds.
pub fn range<K: Ord>(start: Bound<&str>, end: Bound<&str>, make: fn(&str) -> K) -> KeyRange<K> {
    KeyRange {
        start: start.map(make),
        end: end.map(make),
    }
}

/// Every entity the query matches, following tokens.
pub async fn all(
    store: &dyn TableStore,
    t: &TableName,
    q: &Query,
) -> TestResult<Vec<StoredEntity>> {
    Ok(store.query_all(t, q).await?)
}

/// Asserts a table holds exactly `n` entities.
pub async fn assert_count(store: &dyn TableStore, t: &TableName, n: u64) -> TestResult {
    assert_eq!(store.count(t).await?, n, "entities in table {t}");
    Ok(())
}

// ---- the suite ---------------------------------------------------------------

mod batches;
mod concurrency;
mod filters;
mod limits;
mod order;
mod paging;
mod partitions;
mod queries;
mod tables;
mod values;
mod writes;

/// Generates `mod $backend` with one `#[tokio::test]` per case, grouped by the
/// file that holds the case: `conformance::<backend>::<file>::<case>`.
macro_rules! conformance_suite {
    ($backend:ident, $constructor:path) => {
        conformance_suite!(@emit $backend, $constructor, {
            tables {
                create_then_list_keeps_names_as_created,
                names_are_unique_ignoring_case,
                names_resolve_ignoring_case,
                delete_table_removes_it,
                delete_missing_table_is_not_found,
                recreated_table_is_empty,
                reads_of_missing_table_are_not_found,
                writes_to_missing_table_are_not_found,
                table_name_rules,
                tables_are_independent,
            }
            writes {
                insert_then_get,
                insert_existing_is_already_exists,
                update_replaces_all_properties,
                update_missing_is_not_found,
                update_with_stale_etag_fails,
                merge_keeps_other_properties,
                merge_missing_is_not_found,
                merge_with_stale_etag_fails,
                merge_can_change_a_property_type,
                delete_removes_entity,
                delete_missing_is_not_found,
                delete_with_stale_etag_fails,
                insert_or_replace_inserts_then_replaces,
                insert_or_merge_inserts_then_merges,
                every_write_returns_a_new_etag_that_is_stored,
                timestamp_increases_on_every_write,
                if_match_any_ignores_version,
                entities_are_schemaless,
            }
            values {
                strings_round_trip,
                binaries_round_trip,
                booleans_round_trip,
                datetimes_round_trip,
                datetime_drops_digits_below_100ns,
                doubles_round_trip,
                guids_round_trip,
                integers_round_trip,
                int32_and_int64_stay_distinct,
                every_type_round_trips_through_query_and_upserts,
            }
            limits {
                key_length_limit,
                forbidden_key_characters,
                allowed_key_characters_work_end_to_end,
                empty_keys_work_end_to_end,
                property_count_limit,
                property_name_rules,
                system_property_names_are_rejected,
                string_value_limit,
                binary_value_limit,
                entity_size_limit,
                datetime_range_limit,
                datetime_far_beyond_range_is_rejected,
                limits_apply_to_every_write_kind,
                top_limits,
            }
            batches {
                failing_op_rolls_back_whole_batch,
                failure_at_first_and_last_index,
                hundred_ops_ok_hundred_and_one_too_many,
                empty_batch_is_rejected,
                cross_partition_batch_is_rejected,
                duplicate_row_in_batch_is_rejected,
                invalid_entity_in_batch_names_its_index,
                batch_over_4_mib_is_rejected,
                batch_just_under_4_mib_is_accepted,
                stale_etag_in_batch_changes_nothing,
                batch_mixing_all_six_kinds,
                batch_outcomes_have_one_etag_per_op,
                batch_stamps_follow_earlier_writes,
            }
            queries {
                point_get_and_missing_get,
                many_gets_of_one_partition,
                partition_range_bounds,
                row_range_within_one_partition,
                row_range_across_partitions,
                select_projects_named_properties,
                select_empty_list_returns_bare_entities,
                top_limits_page_size,
            }
            filters {
                filter_int32_operators,
                filter_int64_operators,
                filter_string_operators,
                filter_double_operators,
                filter_datetime_operators,
                filter_boolean_operators,
                filter_guid_operators,
                filter_binary_operators,
                filter_and_or_not,
                filter_on_key_operands,
                filter_on_timestamp,
                missing_property_compares_false,
                type_mismatch_compares_false,
            }
            paging {
                pages_of_a_thousand,
                top_seven_pages,
                resume_from_token_text,
                malformed_token_fails_to_parse,
                pages_across_partitions,
                empty_pages_with_tokens_under_small_scan_budget,
                small_scan_budget_with_row_range_and_top,
                a_page_that_ends_with_its_range_has_no_token,
                token_survives_deletion_of_named_entity,
                query_all_and_count,
                pages_into_a_sink_match_the_pages,
            }
            partitions {
                partitions_are_listed_once_in_key_order,
                partition_listing_keeps_to_its_range,
                emptied_partitions_are_not_listed,
                many_partitions_page_in_order,
                listing_a_missing_table_is_not_found,
            }
            order {
                numeric_text_sorts_lexically,
                prefix_sorts_first,
                non_bmp_sorts_before_private_use,
                order_is_case_sensitive,
                empty_key_sorts_first,
                partition_then_row_order,
                ranges_use_utf16_order,
                order_holds_across_pages,
            }
            concurrency {
                concurrent_inserts_all_land,
                concurrent_batches_all_land,
                queries_while_writing_succeed,
                one_of_racing_conditional_updates_wins,
                one_of_racing_inserts_wins,
                optimistic_counter_never_loses_an_increment,
            }
        });
    };
    (@emit $backend:ident, $constructor:path, { $($file:ident { $($case:ident),* $(,)? })* }) => {
        mod $backend {
            #[allow(unused_imports)]
            use super::*;

            fn make(scan_budget: usize) -> TestResult<Fixture> {
                $constructor(scan_budget)
            }

            $(
                mod $file {
                    $(
                        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                        async fn $case() -> Result<(), Box<dyn std::error::Error>> {
                            let fixture = super::make(tablesql::storage::DEFAULT_SCAN_BUDGET)?;
                            crate::conformance::$file::$case(&fixture).await
                        }
                    )*
                }
            )*
        }
    };
}

conformance_suite!(memory, Fixture::memory);
conformance_suite!(embedded, Fixture::embedded);
conformance_suite!(azure, Fixture::azure);
conformance_suite!(table_service, Fixture::table_service);
conformance_suite!(table_service_faults, Fixture::table_service_faults);
