//! The demo data set: race registrations, the domain's example of secondary
//! lookups by denormalization. Each registration is written twice in one entity
//! group transaction, under `BIB:{bib:05}__{name}__{gender}__{age}` and
//! `AGE:{age:03}__{bib}__{name}__{gender}`, in partition `{event}__{distance}`.
//! The data is a pure function of the row count, so a test can recompute any
//! transaction the loader sent.

use chrono::{TimeZone, Utc};
use futures::StreamExt;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::storage::{
    EdmValue, Entity, PartitionKey, Result, RowKey, StorageError, TableName, TableStore, WriteOp,
};

/// The demo table's name.
pub const TABLE: &str = "Registrations";
/// The storage table of the events.
pub const EVENTS_TABLE: &str = "Events";
/// The shipped catalog definitions the demo registers.
pub const CATALOG: [&str; 2] = [
    include_str!("../../../catalog/registrations.sql"),
    include_str!("../../../catalog/events.sql"),
];
/// The cities of the events, in `EVENTS` order.
pub const CITIES: [&str; 4] = ["New York", "Boston", "Chicago", "Berlin"];
/// The events, each run at every distance.
pub const EVENTS: [&str; 4] = [
    "2011 New York City Marathon",
    "2012 Boston Marathon",
    "2013 Chicago Marathon",
    "2014 Berlin Marathon",
];
/// The distances.
pub const DISTANCES: [&str; 3] = ["Full", "Half", "10K"];
/// Registrations per entity group transaction (two entities each: 100 operations).
pub const REGISTRATIONS_PER_BATCH: u64 = 50;
/// Transactions in flight at once while loading.
pub const CONCURRENCY: usize = 8;

const PARTITIONS: u64 = (EVENTS.len() * DISTANCES.len()) as u64;
const SEED: u64 = 0x7ab1_e5a1;
const NAMES: [&str; 16] = [
    "John", "Mary", "Ahmed", "Yuki", "Olga", "Pedro", "Amara", "Liam", "Chen", "Sofia", "Kofi",
    "Ingrid", "Ravi", "Lucia", "Tom", "Zara",
];
const CLUBS: [&str; 5] = [
    "Road Runners",
    "Harriers",
    "Striders",
    "Track Club",
    "Joggers",
];

/// One registration.
#[derive(Debug, Clone, PartialEq)]
pub struct Registration {
    /// Event name.
    pub event: &'static str,
    /// Distance name.
    pub distance: &'static str,
    /// Bib number, unique within the event and distance.
    pub bib: i32,
    /// Runner's first name.
    pub name: &'static str,
    /// "M" or "F".
    pub gender: &'static str,
    /// Age in years.
    pub age: i32,
    /// Finish time in seconds.
    pub finish_seconds: i64,
    /// When the runner registered.
    pub registered: chrono::DateTime<Utc>,
    /// Running club, when the runner has one.
    pub club: Option<&'static str>,
}

/// Registration number `i` of the data set (the same for every row count).
pub fn registration(i: u64) -> Registration {
    let partition = (i % PARTITIONS) as usize;
    let event = EVENTS[partition / DISTANCES.len()];
    let distance = DISTANCES[partition % DISTANCES.len()];
    let mut rng = ChaCha8Rng::seed_from_u64(SEED ^ i.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let year: i32 = event[..4].parse().unwrap_or(2011);
    let base = match distance {
        "Full" => 7_200,
        "Half" => 3_600,
        _ => 1_800,
    };
    let day = Utc
        .with_ymd_and_hms(year, 1, 1, 0, 0, 0)
        .single()
        .unwrap_or_default();
    Registration {
        event,
        distance,
        bib: (i / PARTITIONS + 1) as i32,
        name: NAMES[rng.random_range(0..NAMES.len())],
        gender: if rng.random_bool(0.5) { "M" } else { "F" },
        age: rng.random_range(18..=85),
        finish_seconds: base + rng.random_range(0..base * 2),
        registered: day + chrono::Duration::seconds(rng.random_range(0..300 * 86_400)),
        club: rng
            .random_bool(0.6)
            .then(|| CLUBS[rng.random_range(0..CLUBS.len())]),
    }
}

impl Registration {
    /// The partition: `{event}__{distance}`.
    pub fn partition_key(&self) -> Result<PartitionKey> {
        Ok(PartitionKey::new(format!(
            "{}__{}",
            self.event, self.distance
        ))?)
    }

    /// The two entities, base row first: `BIB:` and `AGE:` RowKeys, same properties.
    pub fn entities(&self) -> Result<[Entity; 2]> {
        let pk = self.partition_key()?;
        let (bib, name, gender, age) = (self.bib, self.name, self.gender, self.age);
        let by_bib = RowKey::new(format!("BIB:{bib:05}__{name}__{gender}__{age}"))?;
        let by_age = RowKey::new(format!("AGE:{age:03}__{bib}__{name}__{gender}"))?;
        let mut base = Entity::new(pk, by_bib)
            .with("bib", EdmValue::Int32(bib))
            .with("name", EdmValue::String(name.into()))
            .with("gender", EdmValue::String(gender.into()))
            .with("age", EdmValue::Int32(age))
            .with("event", EdmValue::String(self.event.into()))
            .with("distance", EdmValue::String(self.distance.into()))
            .with("finish", EdmValue::Int64(self.finish_seconds))
            .with("registered", EdmValue::DateTime(self.registered));
        if let Some(club) = self.club {
            base = base.with("club", EdmValue::String(club.into()));
        }
        let mut index = base.clone();
        index.row_key = by_age;
        Ok([base, index])
    }
}

/// The transactions that load `rows` registrations, in the order they are sent:
/// each holds up to 50 registrations of one partition, and consecutive
/// transactions go to different partitions.
#[derive(Debug, Clone)]
pub struct Plan {
    rows: u64,
    // (partition, chunk within partition) per transaction
    batches: Vec<(u64, u64)>,
}

impl Plan {
    /// The plan for `rows` registrations.
    pub fn new(rows: u64) -> Self {
        let in_partition = |p: u64| {
            if p < rows {
                (rows - p).div_ceil(PARTITIONS)
            } else {
                0
            }
        };
        let chunks = |p: u64| in_partition(p).div_ceil(REGISTRATIONS_PER_BATCH);
        let most = chunks(0);
        let batches = (0..most)
            .flat_map(|c| {
                (0..PARTITIONS)
                    .filter(move |&p| c < chunks(p))
                    .map(move |p| (p, c))
            })
            .collect();
        Self { rows, batches }
    }

    /// Number of transactions.
    pub fn len(&self) -> usize {
        self.batches.len()
    }

    /// Whether there is nothing to load.
    pub fn is_empty(&self) -> bool {
        self.batches.is_empty()
    }

    /// The registrations of transaction `b`.
    pub fn registrations(&self, b: usize) -> Vec<Registration> {
        let Some(&(p, c)) = self.batches.get(b) else {
            return Vec::new();
        };
        let first = c * REGISTRATIONS_PER_BATCH;
        (first..first + REGISTRATIONS_PER_BATCH)
            .map(|k| p + k * PARTITIONS)
            .take_while(|&i| i < self.rows)
            .map(registration)
            .collect()
    }

    /// The operations of transaction `b`.
    pub fn batch(&self, b: usize) -> Result<Vec<WriteOp>> {
        let mut ops = Vec::with_capacity(2 * REGISTRATIONS_PER_BATCH as usize);
        for r in self.registrations(b) {
            ops.extend(r.entities()?.into_iter().map(WriteOp::Insert));
        }
        Ok(ops)
    }
}

/// The event rows: one per event and distance.
pub fn events() -> Result<Vec<Entity>> {
    let mut out = Vec::new();
    for (event, city) in EVENTS.iter().zip(CITIES) {
        for distance in DISTANCES {
            let (km, cutoff) = match distance {
                "Full" => (42.195, Some(390)),
                "Half" => (21.0975, Some(210)),
                _ => (10.0, None),
            };
            let mut e = Entity::new(PartitionKey::new(*event)?, RowKey::new(distance)?)
                .with("city", EdmValue::String(city.into()))
                .with("km", EdmValue::Double(km));
            if let Some(c) = cutoff {
                e = e.with("cutoff_minutes", EdmValue::Int32(c));
            }
            out.push(e);
        }
    }
    Ok(out)
}

async fn recreate(store: &dyn TableStore, table: &TableName) -> Result<()> {
    match store.delete_table(table).await {
        Ok(()) | Err(StorageError::TableNotFound(_)) => {}
        Err(e) => return Err(e),
    }
    store.create_table(table).await
}

/// Registers the demo's catalog definitions in the store (replacing older ones).
pub async fn register_catalog(
    store: &dyn TableStore,
) -> std::result::Result<(), crate::catalog::CatalogError> {
    for sql in CATALOG {
        crate::catalog::persist::save(store, &crate::catalog::ddl::parse(sql)?, true).await?;
    }
    Ok(())
}

/// Drops and recreates the demo tables, registers their definitions, loads
/// the events, then `rows` registrations (2·rows entities). `on_commit(b, n)`
/// runs after transaction `b` of `n` registration entities is durable.
pub async fn load(
    store: &dyn TableStore,
    rows: u64,
    mut on_commit: impl FnMut(usize, usize),
) -> Result<u64> {
    register_catalog(store).await.map_err(|e| match e {
        crate::catalog::CatalogError::Storage(s) => s,
        other => StorageError::Task(other.to_string()),
    })?;
    let events_table = TableName::new(EVENTS_TABLE)?;
    recreate(store, &events_table).await?;
    // One partition per event, its distances consecutive.
    for partition in events()?.chunks(DISTANCES.len()) {
        let ops = partition.iter().cloned().map(WriteOp::Insert).collect();
        store.execute_batch(&events_table, ops).await?;
    }
    let table = TableName::new(TABLE)?;
    recreate(store, &table).await?;
    let plan = Plan::new(rows);
    let table = &table;
    let plan = &plan;
    let mut commits = futures::stream::iter(0..plan.len())
        .map(|b| async move {
            let ops = plan.batch(b)?;
            let n = ops.len();
            store.execute_batch(table, ops).await?;
            Ok::<_, StorageError>((b, n))
        })
        .buffer_unordered(CONCURRENCY);
    let mut loaded = 0;
    while let Some(done) = commits.next().await {
        let (b, n) = done?;
        loaded += n as u64;
        on_commit(b, n);
    }
    Ok(loaded)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_covers_every_registration_once() {
        for rows in [0, 1, 11, 12, 13, 599, 600, 601, 1234] {
            let plan = Plan::new(rows);
            let mut bibs: Vec<(PartitionKey, i32)> = (0..plan.len())
                .flat_map(|b| plan.registrations(b))
                .map(|r| (r.partition_key().unwrap(), r.bib))
                .collect();
            assert_eq!(bibs.len() as u64, rows);
            bibs.sort();
            bibs.dedup();
            assert_eq!(bibs.len() as u64, rows, "duplicates for {rows}");
            for b in 0..plan.len() {
                let regs = plan.registrations(b);
                assert!(!regs.is_empty() && regs.len() <= 50);
                assert!(
                    regs.iter()
                        .all(|r| r.partition_key().unwrap() == regs[0].partition_key().unwrap())
                );
            }
        }
    }

    #[test]
    fn data_is_deterministic_and_keys_follow_the_templates() {
        assert_eq!(registration(42), registration(42));
        let r = registration(13);
        let [bib, age] = r.entities().unwrap();
        assert_eq!(r.bib, 2);
        assert_eq!(
            bib.partition_key.as_str(),
            "2011 New York City Marathon__Half"
        );
        assert_eq!(
            bib.row_key.as_str(),
            format!("BIB:00002__{}__{}__{}", r.name, r.gender, r.age)
        );
        assert_eq!(
            age.row_key.as_str(),
            format!("AGE:{:03}__2__{}__{}", r.age, r.name, r.gender)
        );
        assert_eq!(bib.properties, age.properties);
    }
}
