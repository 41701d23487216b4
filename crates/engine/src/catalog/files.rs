//! Catalog files: a directory of `.sql` files holding `CREATE TABLE ... WITH
//! (...)` mappings (the project's `catalog/` is one), read in name order and
//! checked whole before any is applied (`Engine::apply_catalog`).

use std::path::{Path, PathBuf};

use datafusion::sql::sqlparser::ast::Statement;
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;

use super::{CatalogError, TableDef, ddl};

/// A definition and the file it came from.
#[derive(Debug, Clone)]
pub struct CatalogFile {
    /// The file.
    pub path: PathBuf,
    /// One of its definitions.
    pub def: TableDef,
}

/// The definitions of every `.sql` file in `dir`, files in name order and
/// statements in file order. A file that does not read, a statement that is
/// not a mapping, or one table defined twice is an error naming the file.
pub fn read_dir(dir: &Path) -> Result<Vec<CatalogFile>, CatalogError> {
    let io = |path: &Path, e: std::io::Error| {
        CatalogError::Definition(format!("{}: {e}", path.display()))
    };
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| io(dir, e))?
        .map(|entry| entry.map(|e| e.path()).map_err(|e| io(dir, e)))
        .collect::<Result<_, _>>()?;
    paths.retain(|p| p.extension().is_some_and(|x| x == "sql") && p.is_file());
    paths.sort();
    let mut out: Vec<CatalogFile> = Vec::new();
    for path in paths {
        let text = std::fs::read_to_string(&path).map_err(|e| io(&path, e))?;
        for def in definitions(&text).map_err(|e| in_file(&path, e))? {
            if let Some(first) = out.iter().find(|f| f.def.name == def.name) {
                return Err(in_file(
                    &path,
                    CatalogError::Definition(format!(
                        "table {} is defined in {} too",
                        def.name,
                        first.path.display()
                    )),
                ));
            }
            out.push(CatalogFile {
                path: path.clone(),
                def,
            });
        }
    }
    Ok(out)
}

/// The mappings of one file's text; any other statement is an error.
pub fn definitions(text: &str) -> Result<Vec<TableDef>, CatalogError> {
    let statements = Parser::parse_sql(&PostgreSqlDialect {}, text)
        .map_err(|e| CatalogError::Definition(e.to_string()))?;
    statements
        .iter()
        .map(|statement| match statement {
            Statement::CreateTable(create) if ddl::is_mapping(create) => {
                ddl::from_create_table(create)
            }
            other => Err(CatalogError::Definition(format!(
                "a catalog file holds CREATE TABLE statements only, not: {}",
                first_words(&other.to_string())
            ))),
        })
        .collect()
}

fn in_file(path: &Path, e: CatalogError) -> CatalogError {
    CatalogError::Definition(format!("{}: {e}", path.display()))
}

/// The start of a statement, for an error.
fn first_words(sql: &str) -> String {
    let words: Vec<&str> = sql.split_whitespace().take(6).collect();
    words.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_catalog_reads_and_other_statements_are_refused() {
        // The workspace's catalog/, two levels above this crate.
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../catalog");
        let files = read_dir(&dir).expect("catalog/");
        let names: Vec<&str> = files.iter().map(|f| f.def.name.as_str()).collect();
        assert_eq!(names, ["events", "registrations"]);
        let err = definitions("CREATE VIEW v AS SELECT 1").expect_err("not a table");
        assert!(
            err.to_string().contains("CREATE TABLE statements only"),
            "{err}"
        );
        // A plain table takes the default mapping; without a key, a
        // hidden generated one.
        let loose = definitions("CREATE TABLE a (x INT); ").expect("no key");
        assert_eq!(loose[0].row_key.to_string(), "r:{_rowid:s}");
        assert_eq!(loose[0].hidden_columns().last(), Some(&"_rowid"));
        let plain = definitions("CREATE TABLE a (x INT PRIMARY KEY)").expect("plain");
        assert_eq!(plain[0].partition_key.to_string(), "{#16}");
        let err = definitions("SELECT 1").expect_err("not DDL");
        assert!(err.to_string().contains("SELECT 1"), "{err}");
    }
}
