"""psqlODBC (Debian's odbc-postgresql, the driver Excel, Tableau and Power
BI use) through pyodbc, with the driver's default options: the catalog
functions a BI tool calls when it syncs a table (SQLTables, SQLColumns,
SQLPrimaryKeys, SQLStatistics), a query with a bound parameter, and a
transaction committed, one rolled back, and one with a failed statement
in it (psqlODBC rolls back the statement only, by savepoint).

argv: driver path, port, database, user, table (with rows: k text, id
int, n numeric(12,3), primary key (k, id)), a name for a scratch table.
Prints JSON, for tests/it/tools.rs to compare with PostgreSQL 15's.
"""

import json
import sys

import pyodbc

driver, port, database, user, table, scratch = sys.argv[1:7]
con = pyodbc.connect(
    f"DRIVER={driver};SERVER=127.0.0.1;PORT={port};DATABASE={database};UID={user};PWD=unused",
    autocommit=True,
)
cur = con.cursor()


def text(rows):
    return [[None if v is None else str(v) for v in row] for row in rows]


out = {
    "pyodbc": pyodbc.version,
    "tables": [[r.table_schem, r.table_name, r.table_type] for r in cur.tables(table=table)],
    "columns": [
        [r.column_name, r.type_name, r.column_size, r.decimal_digits, r.nullable, r.ordinal_position]
        for r in cur.columns(table=table)
    ],
    "primary_keys": [[r.column_name, r.key_seq, r.pk_name] for r in cur.primaryKeys(table=table)],
    "statistics": [
        [r.non_unique, r.index_name, r.type, r.ordinal_position, r.column_name]
        for r in cur.statistics(table=table)
        if r.index_name is not None
    ],
    "parameter": text(cur.execute(f"SELECT id, k, n FROM {table} WHERE id = ? ORDER BY k", 12).fetchall()),
}

cur.execute(f"DROP TABLE IF EXISTS {scratch}")
cur.execute(f"CREATE TABLE {scratch} (id INT PRIMARY KEY, v TEXT)")
con.autocommit = False
cur.execute(f"INSERT INTO {scratch} VALUES (?, ?)", 1, "committed")
con.commit()
cur.execute(f"INSERT INTO {scratch} VALUES (?, ?)", 2, "rolled back")
con.rollback()
cur.execute(f"INSERT INTO {scratch} VALUES (?, ?)", 3, "before the error")
try:
    cur.execute(f"SELECT * FROM {scratch}_missing")
    out["error"] = None
except pyodbc.Error as e:
    out["error"] = e.args[0]
cur.execute(f"INSERT INTO {scratch} VALUES (?, ?)", 4, "after the error")
con.commit()
out["after"] = text(cur.execute(f"SELECT id, v FROM {scratch} ORDER BY id").fetchall())
con.commit()
con.autocommit = True
cur.execute(f"DROP TABLE {scratch}")
print(json.dumps(out))
