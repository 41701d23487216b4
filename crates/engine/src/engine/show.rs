//! `SHOW` as the session answers it: a mapped table's DDL, a `tablesql.*`
//! setting, a session parameter.

use super::*;

impl Session {
    /// `SHOW CREATE TABLE t` of a mapped table, as CockroachDB answers it
    /// (`table_name`, `create_statement`): the canonical DDL, with the
    /// mapping a plain `CREATE TABLE` chose. `None` for other statements
    /// and other tables (DataFusion's answer).
    pub(super) async fn show_create_table(
        &self,
        statement: &Statement,
    ) -> Result<Option<RecordBatch>, EngineError> {
        let Statement::ShowCreate {
            obj_type: datafusion::sql::sqlparser::ast::ShowCreateObject::Table,
            obj_name,
        } = statement
        else {
            return Ok(None);
        };
        let Ok(name) = ddl::object_name(obj_name) else {
            return Ok(None);
        };
        let Some(def) = self
            .public_schema()
            .table(&name)
            .await?
            .and_then(|t| bulk::mapping(t.as_ref()))
        else {
            return Ok(None);
        };
        let schema = Arc::new(datafusion::arrow::datatypes::Schema::new(vec![
            datafusion::arrow::datatypes::Field::new(
                "table_name",
                datafusion::arrow::datatypes::DataType::Utf8,
                false,
            ),
            datafusion::arrow::datatypes::Field::new(
                "create_statement",
                datafusion::arrow::datatypes::DataType::Utf8,
                false,
            ),
        ]));
        let batch = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(datafusion::arrow::array::StringArray::from(vec![
                    def.name.clone(),
                ])),
                Arc::new(datafusion::arrow::array::StringArray::from(vec![
                    def.to_ddl(),
                ])),
            ],
        )
        .map_err(DataFusionError::from)?;
        Ok(Some(batch))
    }

    /// `SHOW tablesql.name` as PostgreSQL shows a setting: one column named
    /// after it, one row. `None` for any other statement (DataFusion's
    /// `SHOW` answers `datafusion.*` names).
    pub(super) fn show_setting(
        &self,
        statement: &Statement,
    ) -> Result<Option<RecordBatch>, EngineError> {
        let Statement::ShowVariable { variable } = statement else {
            return Ok(None);
        };
        let name = variable
            .iter()
            .map(|i| i.value.to_ascii_lowercase())
            .collect::<Vec<_>>()
            .join(".");
        if !name.starts_with("tablesql.") {
            return Ok(None);
        }
        let Some(value) = session_setting(&self.ctx.state(), &name) else {
            return Err(EngineError::UnknownSetting(name));
        };
        let column: datafusion::arrow::array::ArrayRef =
            Arc::new(datafusion::arrow::array::StringArray::from(vec![
                value.unwrap_or_default(),
            ]));
        Ok(Some(
            RecordBatch::try_from_iter([(name, column)]).map_err(DataFusionError::from)?,
        ))
    }

    /// `SHOW` of session parameters, as PostgreSQL answers it: one column
    /// of text, or `name` and `setting` for `SHOW ALL`.
    pub(super) fn show_parameters(
        &self,
        shown: &parameters::Shown,
    ) -> Result<RecordBatch, EngineError> {
        let session = &self.parameters;
        let rows: Vec<(String, String)> = match shown {
            parameters::Shown::All => session.all(),
            parameters::Shown::One(name) => vec![(name.clone(), session.get(name)?)],
        };
        let column = |values: Vec<String>| -> datafusion::arrow::array::ArrayRef {
            Arc::new(datafusion::arrow::array::StringArray::from(values))
        };
        let (names, values): (Vec<String>, Vec<String>) = rows.into_iter().unzip();
        let columns = match shown {
            parameters::Shown::All => vec![("name", column(names)), ("setting", column(values))],
            parameters::Shown::One(name) => vec![(name.as_str(), column(values))],
        };
        Ok(RecordBatch::try_from_iter(columns).map_err(DataFusionError::from)?)
    }
}
