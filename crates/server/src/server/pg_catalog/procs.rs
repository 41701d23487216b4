//! `pg_proc` with its argument columns typed. datafusion-pg-catalog's
//! export keeps them as text: `proargtypes` as `'1034 26'`,
//! `proallargtypes` as `'[1034, 26]'`, `proargmodes` and `proargnames` as
//! `"['i', 'o']"`. PostgreSQL's are `oidvector`, `oid[]`, `"char"[]` and
//! `text[]`: pgcli reads `proallargtypes::regtype[]` at start (a cast of
//! `'[2276]'` to int4 failed, and its completion never loaded), and a
//! driver reading them as arrays got a string. The table is static, so it
//! is typed once, when the catalog is installed.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, AsArray, ListBuilder, RecordBatch};
use datafusion::arrow::array::{Int32Builder, StringBuilder};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::common::DataFusionError;
use datafusion::error::Result;

/// How one text column of the export is typed.
#[derive(Debug, Clone, Copy)]
enum Form {
    /// `oidvector` from `'1034 26'`.
    OidVector,
    /// `oid[]` from `'[1034, 26]'`.
    Oids,
    /// `text[]` (or `"char"[]`) from `"['i', 'o']"`.
    Texts,
}

fn form(column: &str) -> Option<Form> {
    match column {
        "proargtypes" => Some(Form::OidVector),
        "proallargtypes" => Some(Form::Oids),
        "proargmodes" | "proargnames" => Some(Form::Texts),
        _ => None,
    }
}

/// `batch` (datafusion-pg-catalog's `pg_proc`) with its argument columns
/// as lists.
pub fn typed(batch: &RecordBatch) -> Result<RecordBatch> {
    let mut fields = Vec::new();
    let mut columns = Vec::new();
    for (field, column) in batch.schema().fields().iter().zip(batch.columns()) {
        let Some(form) = form(field.name()) else {
            fields.push(field.as_ref().clone());
            columns.push(column.clone());
            continue;
        };
        let texts = column.as_string_opt::<i32>().ok_or_else(|| {
            DataFusionError::Internal(format!("pg_proc: {} is not text", field.name()))
        })?;
        let (list, item): (ArrayRef, DataType) = match form {
            Form::OidVector | Form::Oids => {
                let mut b = ListBuilder::new(Int32Builder::new());
                for text in texts {
                    match text {
                        Some(t) => {
                            for item in items(t, form) {
                                let oid = item.parse::<i32>().map_err(|e| {
                                    DataFusionError::Internal(format!(
                                        "pg_proc.{}: {t:?}: {e}",
                                        field.name()
                                    ))
                                })?;
                                b.values().append_value(oid);
                            }
                            b.append(true);
                        }
                        None => b.append(false),
                    }
                }
                (Arc::new(b.finish()), DataType::Int32)
            }
            Form::Texts => {
                let mut b = ListBuilder::new(StringBuilder::new());
                for text in texts {
                    match text {
                        Some(t) => {
                            for item in items(t, form) {
                                b.values().append_value(item);
                            }
                            b.append(true);
                        }
                        None => b.append(false),
                    }
                }
                (Arc::new(b.finish()), DataType::Utf8)
            }
        };
        fields.push(match form {
            // Space-separated on the wire and counted from 0, as
            // PostgreSQL's (pgJDBC splits `proargtypes` at spaces).
            Form::OidVector => {
                crate::server::vectors::vector_field(field.name(), item, "oidvector")
            }
            Form::Oids | Form::Texts => Field::new(
                field.name(),
                DataType::List(Arc::new(Field::new("item", item, true))),
                true,
            ),
        });
        columns.push(list);
    }
    Ok(RecordBatch::try_new(
        Arc::new(Schema::new(fields)),
        columns,
    )?)
}

/// The items of one exported value: space-separated for an `oidvector`,
/// else a bracketed list whose text items are quoted (`['', 'x']`).
fn items(text: &str, form: Form) -> Vec<&str> {
    let text = text.trim();
    if let Form::OidVector = form {
        return text.split_ascii_whitespace().collect();
    }
    let inner = text
        .strip_prefix('[')
        .and_then(|t| t.strip_suffix(']'))
        .unwrap_or(text)
        .trim();
    if inner.is_empty() {
        return Vec::new();
    }
    inner
        .split(',')
        .map(|item| {
            let item = item.trim();
            item.strip_prefix('\'')
                .and_then(|i| i.strip_suffix('\''))
                .unwrap_or(item)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exported_texts_read_as_postgresqls_arrays() {
        assert_eq!(items("1034 26", Form::OidVector), ["1034", "26"]);
        assert!(items("", Form::OidVector).is_empty());
        assert_eq!(items("[1034, 26, 16]", Form::Oids), ["1034", "26", "16"]);
        assert_eq!(items("['', 'x', 'n']", Form::Texts), ["", "x", "n"]);
        assert_eq!(items("['v']", Form::Texts), ["v"]);
        assert!(items("[]", Form::Texts).is_empty());
    }

    #[test]
    fn argument_columns_become_lists() {
        use datafusion::arrow::array::{Array, StringArray};
        let schema = Arc::new(Schema::new(vec![
            Field::new("proname", DataType::Utf8, false),
            Field::new("proargtypes", DataType::Utf8, true),
            Field::new("proallargtypes", DataType::Utf8, true),
            Field::new("proargnames", DataType::Utf8, true),
        ]));
        let batch = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(StringArray::from(vec!["aclexplode", "now"])),
                Arc::new(StringArray::from(vec![Some("1034"), Some("")])),
                Arc::new(StringArray::from(vec![Some("[1034, 26]"), None])),
                Arc::new(StringArray::from(vec![Some("['acl', 'grantor']"), None])),
            ],
        )
        .unwrap();
        let typed = typed(&batch).unwrap();
        let all = typed.column(2).as_list::<i32>();
        assert_eq!(
            all.value(0)
                .as_primitive::<datafusion::arrow::datatypes::Int32Type>()
                .values(),
            &[1034, 26]
        );
        assert!(all.is_null(1));
        let names = typed.column(3).as_list::<i32>();
        assert_eq!(names.value(0).as_string::<i32>().value(1), "grantor");
        assert_eq!(typed.column(1).as_list::<i32>().value(1).len(), 0);
        assert_eq!(typed.column(0).data_type(), &DataType::Utf8);
    }
}
