//! A statement's global index writes around its base rows (see
//! `catalog::GlobalIndexDef`): the new entities before any base row, so a
//! base row is never without its entity; the old ones' deletes after.
//!
//! Unique indexes go first. A value taken there fails the statement
//! (23505) and gives back the entities it made, unless `INSERT ... ON
//! CONFLICT DO NOTHING` names that index (or no target): then the row is
//! skipped, as PostgreSQL skips it, and puts nothing more. Values taken by
//! rows the statement then fails to write (a base transaction refused, or
//! never sent) are given back too, so that they are not held for a write
//! that will never come. Only entities the statement made are given back:
//! one it replaced may be the row's own, and a handed-over one
//! (`global::named_bases`) still stands for the row's old keys.

use std::collections::{BTreeMap, HashSet};

use datafusion::error::{DataFusionError, Result};
use futures::StreamExt;

use super::{DmlOp, Group, OnExisting, Writer};
use crate::exec::ExecError;
use crate::exec::write::global;
use crate::storage::{Entity, IfMatch, PartitionKey, RowKey, WriteOp};

/// Unique entities put at once: a unique entity whose base row has not
/// landed within `global::IN_FLIGHT` may be taken over by another row, so
/// a flush's puts must be quick (10,000 at 16 at once on Azure take about
/// 15 s), and `global::PUTS_WITHIN` bounds them.
const UNIQUE_PUTS_IN_FLIGHT: usize = 16;

/// A unique entity a statement made: its index, its row's group, itself.
pub(super) struct Made {
    index: usize,
    pub(super) seq: usize,
    entity: Entity,
}

/// An old entity's delete, with the base row it named.
type Leaving = (WriteOp, (PartitionKey, RowKey));

/// What a flush's global index puts did.
pub(super) struct Globals {
    /// New unique entities, to give back if their rows are not written.
    pub(super) made: Vec<Made>,
    /// The primary keys rows `DO NOTHING` skipped had taken.
    pub(super) released: Vec<(PartitionKey, String)>,
    /// When the first unique entity was put: its base row must land
    /// within `global::LAND_WITHIN` of it.
    pub(super) since: Option<std::time::Instant>,
}

/// What putting one index's entities did.
struct Puts {
    /// Rows skipped for a taken value (`ON CONFLICT DO NOTHING`).
    skipped: Vec<usize>,
    /// New unique entities.
    made: Vec<Made>,
}

impl Writer {
    /// Puts the global index entities of the `pending` groups, unique
    /// indexes first, and drops the groups `DO NOTHING` skips; returns the
    /// unique entities made, to give back if the rows then fail, and the
    /// primary keys the skipped rows had taken in the statement.
    pub(super) async fn put_globals(
        &self,
        pending: &mut BTreeMap<PartitionKey, Vec<Group>>,
    ) -> Result<Globals> {
        let unique = |i: usize| {
            self.def
                .global_indexes
                .get(i)
                .is_some_and(|g| g.unique.is_some())
        };
        let mut before: BTreeMap<(bool, usize), Vec<(usize, WriteOp)>> = BTreeMap::new();
        for g in pending.values_mut().flatten() {
            for (i, op) in g.before.drain(..) {
                before.entry((!unique(i), i)).or_default().push((g.seq, op));
            }
        }
        // In the statement's order, so that of two rows with one value
        // the first is kept, as PostgreSQL keeps it.
        for ops in before.values_mut() {
            ops.sort_by_key(|(seq, _)| *seq);
        }
        let mut skipped: HashSet<usize> = HashSet::new();
        let mut made: Vec<Made> = Vec::new();
        let since = before
            .keys()
            .any(|(later, _)| !later)
            .then(std::time::Instant::now);
        for ((_, i), ops) in before {
            let ops = ops
                .into_iter()
                .filter(|(seq, _)| !skipped.contains(seq))
                .collect();
            match self.put_global(i, ops).await {
                Ok(puts) => {
                    skipped.extend(puts.skipped);
                    made.extend(puts.made);
                }
                Err(e) => {
                    self.give_back(made.iter().collect()).await;
                    return Err(e);
                }
            }
        }
        let mut released = Vec::new();
        if !skipped.is_empty() {
            let (gone, kept): (Vec<Made>, Vec<Made>) =
                made.into_iter().partition(|m| skipped.contains(&m.seq));
            self.give_back(gone.iter().collect()).await;
            made = kept;
            for groups in pending.values_mut() {
                for g in groups.iter_mut().filter(|g| skipped.contains(&g.seq)) {
                    released.extend(g.claimed.take());
                }
                groups.retain(|g| !skipped.contains(&g.seq));
            }
            pending.retain(|_, groups| !groups.is_empty());
        }
        Ok(Globals {
            made,
            released,
            since,
        })
    }

    /// Whether a value taken in unique index `name` skips the row.
    fn skips(&self, name: &str) -> bool {
        matches!(&self.op, DmlOp::Upsert(OnExisting::Nothing(a)) if a.skips_unique(name))
    }

    /// Puts global index `i`'s entities (each with its row's group): a
    /// unique index's by Inserts, each checked for a taken value (two in
    /// this batch with one value are a conflict too: neither base row is
    /// written yet).
    async fn put_global(&self, i: usize, ops: Vec<(usize, WriteOp)>) -> Result<Puts> {
        let mut out = Puts {
            skipped: Vec::new(),
            made: Vec::new(),
        };
        let Some(g) = self.def.global_indexes.get(i) else {
            return Ok(out);
        };
        if g.unique.is_none() {
            let ops = ops.into_iter().map(|(_, op)| op).collect();
            global::send(self.store.as_ref(), &g.table, ops)
                .await
                .map_err(DataFusionError::from)?;
            return Ok(out);
        }
        let skip = self.skips(&g.name);
        let violation = |e: &Entity| ExecError::UniqueViolation {
            table: self.def.name.clone(),
            index: g.name.clone(),
            values: global::shown_values(&self.def, g, e),
        };
        let mut seen = HashSet::new();
        let mut entities: Vec<(usize, &Entity)> = Vec::new();
        for (seq, op) in &ops {
            let Some(e) = op.entity() else { continue };
            if seen.insert((&e.partition_key, &e.row_key)) {
                entities.push((*seq, e));
            } else if skip {
                out.skipped.push(*seq);
            } else {
                return Err(violation(e).into());
            }
        }
        let store = self.store.as_ref();
        let started = std::time::Instant::now();
        // By position: a closure over references is not Send-general here.
        let puts: Vec<std::result::Result<global::Put, ExecError>> =
            futures::stream::iter(0..entities.len())
                .map(|k| global::put_unique(store, &self.def, g, entities[k].1))
                .buffered(UNIQUE_PUTS_IN_FLIGHT)
                .collect()
                .await;
        let mut failed = None;
        for ((seq, e), put) in entities.iter().zip(puts) {
            match put {
                Ok(global::Put::New | global::Put::TakenOver) => out.made.push(Made {
                    index: i,
                    seq: *seq,
                    entity: (*e).clone(),
                }),
                Ok(global::Put::Own) => {}
                Err(ExecError::UniqueViolation { .. }) if skip => out.skipped.push(*seq),
                Err(err) => {
                    failed.get_or_insert(err);
                }
            }
        }
        // Too slow (a throttled store): the first values put could be taken
        // over before their rows land.
        if failed.is_none() && started.elapsed() > global::PUTS_WITHIN {
            failed = Some(ExecError::UniquePutsTooSlow {
                index: g.name.clone(),
                rows: entities.len(),
                seconds: global::PUTS_WITHIN.as_secs(),
            });
        }
        match failed {
            None => Ok(out),
            Some(err) => {
                self.give_back(out.made.iter().collect()).await;
                Err(err.into())
            }
        }
    }

    /// Gives back unique entities made for rows that will not be written:
    /// each deleted where it still names its row, best effort (one left
    /// stands for no row, and is taken over once old).
    pub(super) async fn give_back(&self, made: Vec<&Made>) {
        for m in made {
            let Some(g) = self.def.global_indexes.get(m.index) else {
                continue;
            };
            let named = global::named_bases(&self.def, g, &m.entity);
            let [base] = named.as_slice() else {
                continue;
            };
            let op = WriteOp::Delete {
                partition_key: m.entity.partition_key.clone(),
                row_key: m.entity.row_key.clone(),
                if_match: IfMatch::Any,
            };
            let _ = global::delete_unique(self.store.as_ref(), &self.def, g, &op, base).await;
        }
    }

    /// Fails the flush (after giving back the values of rows not `sent`)
    /// when its base rows are late: a unique entity put before them could
    /// be taken over once `global::IN_FLIGHT` old.
    pub(super) async fn late(&self, globals: &Globals, sent: &HashSet<usize>) -> Result<()> {
        if globals
            .since
            .is_none_or(|t| t.elapsed() <= global::LAND_WITHIN)
        {
            return Ok(());
        }
        let e = ExecError::UniquePutsTooSlow {
            index: self
                .def
                .global_indexes
                .iter()
                .find(|g| g.unique.is_some())
                .map_or_else(String::new, |g| g.name.clone()),
            rows: globals.made.len(),
            seconds: global::LAND_WITHIN.as_secs(),
        };
        Err(self.unsent(&globals.made, sent, e.into()).await)
    }

    /// `e`, a failure to send the base rows, after giving back the values
    /// taken for rows not `sent`.
    pub(super) async fn unsent(
        &self,
        made: &[Made],
        sent: &HashSet<usize>,
        e: DataFusionError,
    ) -> DataFusionError {
        let unsent: Vec<&Made> = made.iter().filter(|m| !sent.contains(&m.seq)).collect();
        self.give_back(unsent).await;
        e
    }

    /// The deletes of the global index entities the rows no longer write,
    /// pinned to the version each has before the base rows are written
    /// (`global::pin_deletes`), by index.
    pub(super) async fn pin_global(
        &self,
        after: Vec<(usize, WriteOp, (PartitionKey, RowKey))>,
    ) -> Result<BTreeMap<usize, Vec<Leaving>>> {
        let mut by_index: BTreeMap<usize, Vec<Leaving>> = BTreeMap::new();
        for (i, op, base) in after {
            by_index.entry(i).or_default().push((op, base));
        }
        let mut pinned = BTreeMap::new();
        for (i, deletes) in by_index {
            let Some(g) = self.def.global_indexes.get(i) else {
                continue;
            };
            let ops = global::pin_deletes(self.store.as_ref(), &self.def, g, deletes)
                .await
                .map_err(DataFusionError::from)?;
            pinned.insert(i, ops);
        }
        Ok(pinned)
    }

    /// Deletes the pinned entities: one that changed since it was pinned
    /// (another statement put it again) stays, and so does one of a base
    /// row whose transaction may not have landed (`unsure`): that row may
    /// still hold the value.
    pub(super) async fn delete_global(
        &self,
        pinned: BTreeMap<usize, Vec<Leaving>>,
        unsure: &HashSet<(PartitionKey, RowKey)>,
    ) -> Result<()> {
        for (i, leaving) in pinned {
            let ops: Vec<WriteOp> = leaving
                .into_iter()
                .filter(|(_, base)| !unsure.contains(base))
                .map(|(op, _)| op)
                .collect();
            if let Some(g) = self.def.global_indexes.get(i) {
                global::send(self.store.as_ref(), &g.table, ops)
                    .await
                    .map_err(DataFusionError::from)?;
            }
        }
        Ok(())
    }
}
