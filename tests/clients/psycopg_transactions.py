"""psycopg 3 in its default mode: every statement opens a transaction that
commit() or rollback() ends. Prints what it saw as JSON for
tests/it/clients.rs to check."""

import json
import sys

import psycopg

port, user, dbname = sys.argv[1:4]
INSERT = (
    "INSERT INTO registrations (event, distance, bib, name, gender, age) "
    "VALUES (%s, %s, %s, %s, %s, %s)"
)
out = {}
with psycopg.connect(host="127.0.0.1", port=port, user=user, dbname=dbname) as conn:
    out["autocommit"] = conn.autocommit
    with conn.cursor() as cur:
        cur.execute(INSERT, ("Py Tx", "5K", 1, "P1", "M", 33))
        cur.executemany(INSERT, [("Py Tx", "5K", b, f"P{b}", "F", 30 + b) for b in (2, 3)])
        cur.execute(
            "UPDATE registrations SET club = %s WHERE event = %s AND distance = %s AND bib = %s",
            ("Tx", "Py Tx", "5K", 2),
        )
        out["update_rowcount"] = cur.rowcount
        out["status_inside"] = conn.info.transaction_status.name
        # The transaction reads its own writes.
        cur.execute(
            "SELECT count(*) FROM registrations WHERE event = %s AND distance = %s",
            ("Py Tx", "5K"),
        )
        out["seen_inside"] = cur.fetchone()[0]
    conn.commit()
    # A rolled-back transaction leaves nothing.
    with conn.cursor() as cur:
        cur.execute(INSERT, ("Py Tx", "5K", 4, "P4", "M", 44))
        cur.execute("DELETE FROM registrations WHERE event = 'Py Tx' AND distance = '5K' AND bib = 1")
    conn.rollback()
    # A transaction over two partitions commits both.
    with conn.cursor() as cur:
        cur.execute(INSERT, ("Py Tx", "5K", 5, "P5", "M", 55))
        cur.execute(INSERT, ("Py Tx", "10K", 6, "P6", "M", 66))
    conn.commit()
    # A failed one leaves nothing in either: the duplicate fails its
    # statement, and the transaction is rolled back.
    with conn.cursor() as cur:
        cur.execute(INSERT, ("Py Tx", "10K", 7, "P7", "M", 77))
        try:
            cur.execute(INSERT, ("Py Tx", "5K", 5, "P5", "M", 55))
            out["duplicate"] = "accepted"
        except psycopg.Error as e:
            out["duplicate"] = e.sqlstate
    conn.rollback()
    with conn.cursor() as cur:
        cur.execute(
            "SELECT distance, bib, club FROM registrations WHERE event = 'Py Tx' "
            "AND distance IN ('5K', '10K') ORDER BY distance, bib"
        )
        out["rows"] = [list(r) for r in cur.fetchall()]
    conn.commit()
print(json.dumps(out))
