"""DuckDB's postgres extension against a server, at its default settings:
ATTACH, a count, a filtered query, a join with a local DuckDB table and an
aggregate pushed nowhere (DuckDB reads the rows by binary COPY and
aggregates them itself). The extension is loaded from the file that the
PyPI package duckdb-extension-postgres-scanner carries, with no network.

argv: conninfo, table name. Prints JSON: DuckDB's version and each
query's rows, for tests/it/tools.rs to compare with PostgreSQL 15's.
"""

import json
import pathlib
import sys

import duckdb
import duckdb_extension_postgres_scanner

conninfo, table = sys.argv[1], sys.argv[2]
extension = (
    pathlib.Path(duckdb_extension_postgres_scanner.__file__).parent
    / "extensions"
    / f"v{duckdb.__version__}"
    / "postgres_scanner.duckdb_extension"
)
con = duckdb.connect(config={"autoinstall_known_extensions": False, "autoload_known_extensions": False})
con.sql(f"LOAD '{extension}'")
con.sql(f"ATTACH '{conninfo}' AS pg (TYPE postgres, READ_ONLY)")
con.sql("CREATE TABLE labels AS SELECT * FROM (VALUES ('a', 'first'), ('c', 'third')) t(k, label)")
t = f"pg.public.{table}"


def rows(sql):
    # Text for every value: DuckDB's Python types (Decimal, datetime with
    # a zone) would need pytz, and JSON takes none of them.
    return [[None if v is None else str(v) for v in row] for row in con.sql(sql).fetchall()]


out = {
    "duckdb": duckdb.__version__,
    # Each side has other tables in public; this one must be among them.
    "listed": [table]
    in rows("SELECT table_name FROM duckdb_tables() WHERE database_name = 'pg' AND schema_name = 'public'"),
    "columns": rows(
        f"SELECT column_name, data_type FROM duckdb_columns() WHERE database_name = 'pg' AND table_name = '{table}' ORDER BY column_index"
    ),
    "count": rows(f"SELECT count(*) FROM {t}"),
    "filtered": rows(
        f"SELECT id, k, big, x, ok, ts::VARCHAR, d, n, raw, t FROM {t} WHERE id BETWEEN 10 AND 14 AND ok ORDER BY id"
    ),
    "joined": rows(
        f"SELECT l.label, count(*), sum(p.big), min(p.n), max(p.d) FROM {t} p JOIN labels l ON p.k = l.k GROUP BY l.label ORDER BY 1"
    ),
    "nulls": rows(f"SELECT count(*) - count(big), count(*) - count(t) FROM {t}"),
}
print(json.dumps(out))
