"""asyncpg against `tablesql serve`: prepared statements, a cursor inside a
transaction, and its type introspection (asyncpg asks pg_type about every
type it has not met). Run as `python asyncpg_client.py PORT USER DATABASE`;
prints one JSON document for tests/it/clients.rs.
"""
import asyncio
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
    await conn.close()
    print(json.dumps(out, default=str))


asyncio.run(main())
