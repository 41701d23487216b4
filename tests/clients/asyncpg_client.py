"""asyncpg against `tablesql serve`: prepared statements, a cursor inside a
transaction, its type introspection (asyncpg asks pg_type about every
type it has not met), and binary COPY (copy_records_to_table) and COPY of a
query with arguments (copy_from_query, which inlines them with
quote_literal). Run as `python asyncpg_client.py PORT USER DATABASE`;
prints one JSON document for tests/it/clients.rs.
"""
import asyncio
import datetime
import decimal
import io
import json
import sys

import asyncpg


async def main():
    port, user, database = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    conn = await asyncpg.connect(host="127.0.0.1", port=port, user=user, database=database)
    out = {"asyncpg": asyncpg.__version__, "server_version": list(conn.get_server_version())[:2]}
    stmt = await conn.prepare(
        "SELECT name, age FROM registrations WHERE bib = $1 ORDER BY event, distance LIMIT 1"
    )
    out["prepared"] = [list(await stmt.fetchrow(b)) for b in (3, 5, 7)]
    out["prepared_types"] = [t.name for t in (a.type for a in stmt.get_attributes())]
    async with conn.transaction():
        cursor = await conn.cursor(
            "SELECT bib, registered FROM registrations WHERE age >= $1 "
            "ORDER BY event, distance, bib",
            30,
        )
        first = await cursor.fetch(4)
        second = await cursor.fetch(4)
    # Timestamps as epoch milliseconds: asyncpg decodes timestamptz itself.
    out["cursor"] = [
        [r["bib"], round(r["registered"].timestamp() * 1000) if r["registered"] else None]
        for r in first + second
    ]
    out["counts"] = await conn.fetchval("SELECT count(*) FROM registrations")
    # A type asyncpg has no built-in codec for makes it introspect pg_type.
    out["array"] = list(
        await conn.fetchval(
            "SELECT array_agg(DISTINCT bib ORDER BY bib) FROM registrations WHERE bib < 4"
        )
    )
    # Binary COPY both ways: records into a table, a query with arguments
    # (inlined with quote_literal) out of it.
    await conn.execute(
        "CREATE TABLE asyncpg_copy (k TEXT NOT NULL, id INT NOT NULL, at TIMESTAMP, "
        "price NUMERIC(10, 2), PRIMARY KEY (k, id)) WITH (storage_table = 'AsyncpgCopy', "
        "partition_key = '{k}', row_key = '{id:05}')"
    )
    when = datetime.datetime(2026, 5, 1, 10, 0, tzinfo=datetime.timezone.utc)
    records = [("a", i, when + datetime.timedelta(seconds=i), decimal.Decimal(i) / 4)
               for i in range(1, 2001)]
    out["copy_in"] = await conn.copy_records_to_table(
        "asyncpg_copy", records=records, columns=["k", "id", "at", "price"]
    )
    out["copied"] = [
        [r["id"], r["at"].isoformat(), str(r["price"])]
        for r in await conn.fetch(
            "SELECT id, at, price FROM asyncpg_copy WHERE id IN (1, 2000) ORDER BY id"
        )
    ]
    buffer = io.BytesIO()
    out["copy_out"] = await conn.copy_from_query(
        "SELECT id, k FROM asyncpg_copy WHERE id <= $1 AND k = $2 ORDER BY id",
        3, "a", output=buffer, format="csv",
    )
    out["copy_out_rows"] = buffer.getvalue().decode()
    # Binary COPY out of one table and into another, through asyncpg.
    binary = io.BytesIO()
    columns = ["k", "id", "at", "price"]
    await conn.copy_from_table("asyncpg_copy", columns=columns, output=binary, format="binary")
    await conn.execute(
        "CREATE TABLE asyncpg_copy2 (k TEXT NOT NULL, id INT NOT NULL, at TIMESTAMP, "
        "price NUMERIC(10, 2), PRIMARY KEY (k, id)) WITH (storage_table = 'AsyncpgCopy2', "
        "partition_key = '{k}', row_key = '{id:05}')"
    )
    binary.seek(0)
    out["copy_binary_in"] = await conn.copy_to_table(
        "asyncpg_copy2", source=binary, columns=columns, format="binary"
    )
    out["copy_binary_same"] = await conn.fetchval(
        "SELECT count(*) FROM asyncpg_copy a JOIN asyncpg_copy2 b ON a.k = b.k "
        "AND a.id = b.id AND a.at = b.at AND a.price = b.price"
    )
    await conn.close()
    print(json.dumps(out, default=str))


asyncio.run(main())
