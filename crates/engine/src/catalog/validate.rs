//! `TableDef::validate`: the checks every definition passes before it is
//! used or stored, each kind in a function of its own, in the order they
//! are reported.

use std::collections::HashSet;

use super::{
    CatalogError, GlobalIndexDef, IndexDef, SYSTEM_COLUMNS, Segment, TableDef, fits, persist,
};

impl TableDef {
    /// Checks that the parts agree: templates name declared columns of key
    /// types, the primary key is a leading run of key fields, no name twice.
    pub fn validate(&self) -> Result<(), CatalogError> {
        self.check_names()?;
        self.check_templates()?;
        self.check_primary_key()?;
        self.check_prefixes()?;
        let mut names = HashSet::new();
        for g in &self.global_indexes {
            if !names.insert(g.name.clone()) {
                return Err(self.bad(format!("index {} is defined twice", g.name)));
            }
            self.check_global(g)?;
        }
        for i in &self.indexes {
            if !names.insert(i.name.clone()) {
                return Err(self.bad(format!("index {} is defined twice", i.name)));
            }
            self.check_index(i)?;
        }
        Ok(())
    }

    fn bad(&self, reason: String) -> CatalogError {
        CatalogError::Inconsistent {
            table: self.name.clone(),
            reason,
        }
    }

    /// A name, a storage table that is not the catalog's, no column twice
    /// and none named as a system column.
    fn check_names(&self) -> Result<(), CatalogError> {
        let bad = |reason: String| self.bad(reason);
        // The catalog's version entity has the empty RowKey (`persist`);
        // PostgreSQL refuses a zero-length name too.
        if self.name.is_empty() {
            return Err(bad("a table needs a name".into()));
        }
        // It holds the catalog, the statistics and the store's secret.
        if self
            .storage_table
            .as_str()
            .eq_ignore_ascii_case(persist::CATALOG_TABLE)
        {
            return Err(bad(format!(
                "storage table {} is tablesql's own catalog",
                persist::CATALOG_TABLE
            )));
        }
        let mut seen = std::collections::HashSet::new();
        for c in &self.columns {
            if !seen.insert(c.name.to_lowercase()) {
                return Err(bad(format!("column {} is declared twice", c.name)));
            }
            if SYSTEM_COLUMNS
                .iter()
                .any(|s| s.eq_ignore_ascii_case(&c.name))
            {
                return Err(bad(format!("column {} is a system column", c.name)));
            }
        }
        Ok(())
    }

    /// Every template's fields name declared columns of types they can write.
    fn check_templates(&self) -> Result<(), CatalogError> {
        let bad = |reason: String| self.bad(reason);
        // A bucket is of the base row's RowKey: a PartitionKey of its own.
        let rows = std::iter::once(("row_key", &self.row_key))
            .chain(self.indexes.iter().map(|i| (i.name.as_str(), &i.row_key)));
        for (what, template) in rows {
            if template.row_buckets().is_some() {
                return Err(bad(format!(
                    "{what}: {{#N}} is a PartitionKey template (the bucket of the RowKey)"
                )));
            }
        }
        let templates = std::iter::once(("partition_key", &self.partition_key))
            .chain(std::iter::once(("row_key", &self.row_key)))
            .chain(self.indexes.iter().map(|i| (i.name.as_str(), &i.row_key)));
        for (what, template) in templates {
            for seg in template.segments() {
                let Segment::Field { column, format } = seg else {
                    continue;
                };
                let col = self.column(column).ok_or_else(|| {
                    bad(format!("{what} template names undeclared column {column}"))
                })?;
                let fits = fits(col.column_type, *format);
                if !fits {
                    return Err(bad(format!(
                        "column {column} of type {} cannot be written in key field {seg_text}",
                        col.column_type,
                        seg_text = template
                    )));
                }
            }
        }
        Ok(())
    }

    /// The primary key is the PartitionKey's fields and a leading run of
    /// the RowKey's, no key field twice.
    fn check_primary_key(&self) -> Result<(), CatalogError> {
        let bad = |reason: String| self.bad(reason);
        // The bucket is the whole RowKey's: with fields past the primary
        // key, one SQL row could land in two buckets.
        if self.partition_key.row_buckets().is_some()
            && self.primary_key.len() != self.row_key.columns().count()
        {
            return Err(bad(format!(
                "a {} PartitionKey needs the primary key to be every RowKey field",
                self.partition_key
            )));
        }
        let key_fields: Vec<&str> = self.key_columns().collect();
        for (i, c) in key_fields.iter().enumerate() {
            if key_fields[..i].contains(c) {
                return Err(bad(format!("column {c} appears in the keys twice")));
            }
        }
        let pk_fields = self.partition_key.columns().count();
        let n = self.primary_key.len();
        let leading = key_fields.get(..n).unwrap_or(&[]);
        let same = n >= pk_fields
            && n == leading.len()
            && self
                .primary_key
                .iter()
                .all(|c| leading.contains(&c.as_str()));
        if !same {
            return Err(bad(format!(
                "the primary key must be the PartitionKey fields and a leading run of RowKey fields (from {})",
                key_fields.join(", ")
            )));
        }
        Ok(())
    }

    /// Each kind of row in a partition owns its RowKey prefix.
    fn check_prefixes(&self) -> Result<(), CatalogError> {
        let bad = |reason: String| self.bad(reason);
        // Base rows and index rows share partitions; each index must own a
        // RowKey prefix, and so do base rows where their template starts
        // with one, so a scan reads each kind by range, never by guess. Base
        // rows without one (a GUID or a plain id RowKey) are every row
        // whose RowKey starts with no index's prefix: a base row written
        // with such a RowKey is refused (`index_prefix_of`).
        if !self.indexes.is_empty() {
            let lead = |t: &crate::keys::KeyTemplate| match t.segments().first() {
                Some(Segment::Literal(l)) => Some(l.clone()),
                _ => None,
            };
            let mut taken: Vec<(String, &str)> = Vec::new();
            if let Some(base) = lead(&self.row_key) {
                taken.push((base, "the base rows"));
            }
            for i in &self.indexes {
                let own = lead(&i.row_key).ok_or_else(|| {
                    bad(format!(
                        "index {} must start with literal text (like AGE:)",
                        i.name
                    ))
                })?;
                // Each kind of row owns its prefix: a range read of one
                // kind must never meet another's rows.
                if let Some((other, whose)) = taken
                    .iter()
                    .find(|(p, _)| own.starts_with(p.as_str()) || p.starts_with(own.as_str()))
                {
                    return Err(bad(format!(
                        "index {} starts like {whose} ({own:?} and {other:?}): scans could not tell them apart",
                        i.name
                    )));
                }
                taken.push((own, &i.name));
            }
        }
        Ok(())
    }

    /// A global index: a storage table of its own, typed fields of declared
    /// columns, the whole primary key in its key.
    fn check_global(&self, g: &GlobalIndexDef) -> Result<(), CatalogError> {
        let bad = |reason: String| self.bad(reason);
        if g.table == self.storage_table {
            return Err(bad(format!(
                "global index {} needs a storage table of its own, not the table's",
                g.name
            )));
        }
        for t in [&g.partition_key, &g.row_key] {
            if t.row_buckets().is_some() {
                return Err(bad(format!(
                    "global index {}: {{#N}} is not an index key",
                    g.name
                )));
            }
            for n in 0..t.columns().count() {
                let Some((column, format)) = t.field(n) else {
                    continue;
                };
                let col = self.column(column).ok_or_else(|| {
                    bad(format!(
                        "global index {} names undeclared column {column}",
                        g.name
                    ))
                })?;
                if !fits(col.column_type, format) {
                    return Err(bad(format!(
                        "column {column} of type {} cannot be written in key field {t}",
                        col.column_type
                    )));
                }
                if !col.not_null && !format.holds_null() {
                    return Err(bad(format!(
                        "global index {} field {column} of a nullable column must be a typed field that holds NULL",
                        g.name
                    )));
                }
            }
        }
        if let Some(n) = g.unique
            && !(1..=g.key_columns().count()).contains(&n)
        {
            return Err(bad(format!(
                "global index {}: {n} unique fields, of {} key fields",
                g.name,
                g.key_columns().count()
            )));
        }
        // Each base row has one entity: its key holds the whole
        // primary key, so two rows never share one.
        let missing: Vec<&str> = self
            .primary_key
            .iter()
            .map(String::as_str)
            .filter(|c| !g.key_columns().any(|k| k == *c))
            .collect();
        if !missing.is_empty() {
            return Err(bad(format!(
                "global index {} lacks primary key column {}, so two rows could share an entity",
                g.name,
                missing.join(", ")
            )));
        }
        Ok(())
    }

    /// A local index: a row for every base row, and back to it.
    fn check_index(&self, i: &IndexDef) -> Result<(), CatalogError> {
        let bad = |reason: String| self.bad(reason);
        // Every base row has its index row: a nullable column's field
        // must write NULL (a typed field), or a row with NULL there
        // would have none, and the index would miss it.
        let nullable = (0..i.row_key.columns().count())
            .filter_map(|n| i.row_key.field(n))
            .find(|(c, f)| !f.holds_null() && self.column(c).is_some_and(|c| !c.not_null));
        if let Some((c, _)) = nullable {
            return Err(bad(format!(
                "index {} field {c} of a nullable column must be a typed field that holds NULL (like {{{c}:s}} or {{{c}:i10}}), or the column NOT NULL",
                i.name
            )));
        }
        // An index row must lead back to its base row: with the
        // partition's fields, its RowKey holds the whole primary key.
        let missing: Vec<&str> = self
            .primary_key
            .iter()
            .map(String::as_str)
            .filter(|c| !self.partition_key.columns().any(|p| p == *c))
            .filter(|c| !i.row_key.columns().any(|f| f == *c))
            .collect();
        if !missing.is_empty() {
            return Err(bad(format!(
                "index {} lacks primary key column {}, so an index row could not name its base row",
                i.name,
                missing.join(", ")
            )));
        }
        Ok(())
    }
}
