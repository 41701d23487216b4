"""The Arrow readers against `tablesql serve`: connectorx (its default
protocol, binary COPY; CSV; and partitioned on a column), polars'
`read_database_uri` with both its engines (connectorx and ADBC), and ADBC's
driver with a bound parameter (it reads pg_type's `typreceive != 0` at
connect). Run as `python arrow_readers.py PORT`; prints one JSON document
for tests/it/clients.rs.
"""
import json
import sys

import adbc_driver_postgresql
import adbc_driver_postgresql.dbapi as dbapi
import pyarrow as pa
import connectorx as cx
import polars as pl

port = int(sys.argv[1])
uri = f"postgresql://tablesql@127.0.0.1:{port}/tablesql"
query = "SELECT event, distance, bib, name, age, finish, registered FROM registrations"


def summary(df):
    """What a test compares: the count, two sums and the first row by key."""
    df = df.sort(["event", "distance", "bib"])
    return {
        "rows": df.height,
        "bibs": int(df["bib"].sum()),
        "ages": int(df["age"].sum()),
        "first": [str(v) for v in df.row(0)],
    }


out = {"versions": [cx.__version__, pl.__version__, adbc_driver_postgresql.__version__]}
out["connectorx"] = summary(cx.read_sql(uri, query, return_type="polars"))
out["connectorx_csv"] = summary(cx.read_sql(uri, query, protocol="csv", return_type="polars"))
out["connectorx_partitioned"] = summary(
    cx.read_sql(uri, query, partition_on="bib", partition_num=4, return_type="polars")
)
out["polars_connectorx"] = summary(pl.read_database_uri(query, uri, engine="connectorx"))
out["polars_adbc"] = summary(pl.read_database_uri(query, uri, engine="adbc"))
with dbapi.connect(uri) as conn:
    with conn.cursor() as cur:
        cur.execute(
            "SELECT name, age FROM registrations WHERE bib = $1 ORDER BY event, distance LIMIT 2",
            parameters=(3,),
        )
        out["adbc_bound"] = [[r["name"], r["age"]] for r in cur.fetch_arrow_table().to_pylist()]
        # adbc_ingest: CREATE TABLE and a binary COPY in one block, then an
        # append (its columns found by `$1::regclass` of `"public" . "t"`).
        ingested = pa.table(
            {
                "id": pa.array([1, 2, 3], pa.int64()),
                "name": ["a", "b", None],
                "x": [1.5, None, 2.5],
            }
        )
        created = cur.adbc_ingest("adbc_ingested", ingested, mode="create")
        conn.commit()
        appended = cur.adbc_ingest("adbc_ingested", ingested.slice(0, 1).set_column(0, "id", pa.array([4], pa.int64())), mode="append")
        conn.commit()
        cur.execute("SELECT id, name, x FROM adbc_ingested ORDER BY id")
        out["adbc_ingest"] = {"created": created, "appended": appended, "rows": [list(r) for r in cur.fetchall()]}
        cur.execute("DROP TABLE adbc_ingested")
        conn.commit()
print(json.dumps(out))
