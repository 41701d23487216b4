//! `ANALYZE`: a table's statistics taken as the session's settings say
//! (every entity, or a sample) and stored, for the planner of every
//! process over the store.

use super::*;

impl Engine {
    /// `ANALYZE table`, read as `how` says; its outcome says what it
    /// found. A bare `ANALYZE` analyzes every mapped table.
    pub async fn analyze_statement(
        &self,
        analyze: &datafusion::sql::sqlparser::ast::Analyze,
        how: Reading,
    ) -> Result<DdlOutcome, EngineError> {
        // `raw.<table>` names a storage table (`Engine::storage_table`);
        // any other name, a table of schema public.
        let name = match &analyze.table_name {
            Some(n) => Some(match n.0.as_slice() {
                [schema, table]
                    if schema
                        .as_ident()
                        .is_some_and(|s| s.value.eq_ignore_ascii_case(RAW_SCHEMA)) =>
                {
                    let table = table
                        .as_ident()
                        .map(|t| t.value.clone())
                        .unwrap_or_default();
                    format!("{RAW_SCHEMA}.{table}")
                }
                _ => ddl::object_name(n)?,
            }),
            None => None,
        };
        Ok(DdlOutcome {
            notices: self.analyze_tables(name.as_deref(), how).await?,
        })
    }

    /// Analyzes one table (a mapped table by its SQL name, with its global
    /// indexes' tables; or a storage table), or every mapped table: a
    /// notice per storage table read says what it found. SQL's `ANALYZE`
    /// and `tablesql analyze` both come here.
    pub async fn analyze_tables(
        &self,
        name: Option<&str>,
        how: Reading,
    ) -> Result<Vec<Notice>, EngineError> {
        let defs = persist::load(self.store.as_ref()).await?;
        let names: Vec<String> = match name {
            Some(name) => vec![name.to_owned()],
            None => defs.iter().map(|d| d.name.clone()).collect(),
        };
        let mut outcome = DdlOutcome::default();
        for name in names {
            let def = defs.iter().find(|d| d.name == name);
            let (table, paths) = self.analyzed_as(&name, def).await?;
            let (stats, sampled) = self
                .analyze_storage(table.clone(), how, &paths, true)
                .await?;
            if def.is_none() {
                // A raw table's columns are found from a sample: taken again.
                self.refresh_raw(&table).await?;
            }
            outcome.notices.push(Notice::new(
                NoticeKind::Done,
                format!("analyzed {name}: {stats}{}", sampled_note(sampled)),
            ));
            // A global index's table too: the planner costs a path through
            // it by the entities its partitions (the indexed values) hold.
            let globals = def.map(|d| d.global_indexes.as_slice()).unwrap_or_default();
            for g in globals.iter().filter(|g| !g.building) {
                let path = KeyPath {
                    name: PRIMARY_PATH.to_owned(),
                    row_key: g.row_key.clone(),
                    others: Vec::new(),
                };
                let (stats, sampled) = self
                    .analyze_storage(g.table.clone(), how, &[path], false)
                    .await?;
                outcome.notices.push(Notice::new(
                    NoticeKind::Done,
                    format!(
                        "analyzed index {}: {stats}{}",
                        g.name,
                        sampled_note(sampled)
                    ),
                ));
            }
        }
        Ok(outcome.notices)
    }

    /// Takes and stores the statistics of a table (a mapped table by its SQL
    /// name, or a storage table): from now on its scans fan out by them.
    pub async fn analyze(&self, name: &str, every: u64) -> Result<TableStats, EngineError> {
        let defs = persist::load(self.store.as_ref()).await?;
        let def = defs.iter().find(|d| d.name == name);
        let (table, paths) = self.analyzed_as(name, def).await?;
        let how = Reading { every, sample: 0 };
        Ok(self.analyze_storage(table, how, &paths, true).await?.0)
    }

    /// The storage table `ANALYZE name` reads and the key paths it counts:
    /// a mapped table's (`def`, already read) give both; otherwise a
    /// storage table by its name or as `raw.<name>` (another catalog read),
    /// with none.
    pub(super) async fn analyzed_as(
        &self,
        name: &str,
        def: Option<&TableDef>,
    ) -> Result<(crate::storage::TableName, Vec<KeyPath>), EngineError> {
        Ok(match def {
            Some(d) => (d.storage_table.clone(), key_paths(d)),
            None => (self.storage_table(name).await?, Vec::new()),
        })
    }

    /// Takes and stores the statistics of storage table `table`, counting
    /// the distinct key prefixes of `paths`, and the entities' sizes where
    /// `sizes` (the advisor and the report read them; the planner not).
    /// Sampled where `how` asks and the last statistics hold more entities
    /// than the sample (they place it); then also what the sample did.
    pub(super) async fn analyze_storage(
        &self,
        table: crate::storage::TableName,
        how: Reading,
        paths: &[KeyPath],
        sizes: bool,
    ) -> Result<(TableStats, Option<SampleReport>), EngineError> {
        let previous = self.stats.get(&table);
        let analysis = Analysis {
            every: how.every,
            width: self.options.scan.max_in_flight,
            paths,
            sizes,
            previous: previous.as_deref(),
            sample: how.sample,
        };
        // A sample reads forward from the last guideposts, which needs
        // pages in key order: a store without it (`TableStore::key_ordered`)
        // is read whole.
        if let Some(before) = previous.as_deref()
            && how.sample > 0
            && before.entities() > how.sample
            && self.store.key_ordered()
        {
            let sampled = analyze_sampled(&self.store, &table, &analysis, before).await?;
            stats::save_changes(
                self.store.as_ref(),
                &table,
                &sampled.stats,
                &sampled.changed,
                &sampled.gone,
                before.taken,
            )
            .await?;
            self.stats.set(table, sampled.stats.clone());
            return Ok((sampled.stats, Some(sampled.report)));
        }
        let taken = crate::exec::stats::analyze::analyze(&self.store, &table, &analysis).await?;
        stats::save(self.store.as_ref(), &table, &taken).await?;
        self.stats.set(table, taken.clone());
        Ok((taken, None))
    }
}

/// How `ANALYZE` reads a table, from the session's settings.
#[derive(Debug, Clone, Copy)]
pub struct Reading {
    /// A guidepost every this many entities (`tablesql.guidepost_every`).
    pub every: u64,
    /// Entities to sample, 0 to read them all (`tablesql.analyze_sample`).
    pub sample: u64,
}

/// What a sampled `ANALYZE` adds to its notice.
fn sampled_note(report: Option<SampleReport>) -> String {
    report.map(|r| format!(" ({r})")).unwrap_or_default()
}

/// The key paths of a mapped table whose distinct prefixes `ANALYZE`
/// counts: the primary key's RowKey and each local index's that is built.
fn key_paths(def: &TableDef) -> Vec<KeyPath> {
    let literal = |t: &crate::keys::KeyTemplate| match t.segments().first() {
        Some(crate::keys::Segment::Literal(l)) => Some(l.clone()),
        _ => None,
    };
    // A base RowKey that starts with a field reads index rows as its own.
    let others = match literal(&def.row_key) {
        Some(_) => Vec::new(),
        None => def
            .indexes
            .iter()
            .filter_map(|i| literal(&i.row_key))
            .collect(),
    };
    let primary = KeyPath {
        name: PRIMARY_PATH.to_owned(),
        row_key: def.row_key.clone(),
        others,
    };
    let indexes = def.indexes.iter().filter(|i| !i.building).map(|i| KeyPath {
        name: i.name.clone(),
        row_key: i.row_key.clone(),
        others: Vec::new(),
    });
    std::iter::once(primary).chain(indexes).collect()
}
