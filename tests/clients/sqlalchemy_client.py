"""SQLAlchemy 2 against `tablesql serve`, as a new user would reach it.

Run as `python sqlalchemy_client.py DRIVER PORT USER DATABASE` (DRIVER: psycopg or
psycopg2). Prints one JSON document of what the inspector and a few queries
returned; the Rust test (tests/it/clients.rs) checks it. No option, no
monkeypatch: a plain URL.
"""
import json
import sys

import pandas
import sqlalchemy
from sqlalchemy import MetaData, Table, create_engine, inspect, select, text


def main():
    driver, port, user, database = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    engine = create_engine(f"postgresql+{driver}://{user}@127.0.0.1:{port}/{database}")
    out = {"sqlalchemy": sqlalchemy.__version__, "driver": driver}
    with engine.connect() as conn:
        out["server_version_info"] = list(engine.dialect.server_version_info)
        out["count"] = conn.execute(text("SELECT count(*) FROM registrations")).scalar_one()

    insp = inspect(engine)
    out["schemas"] = insp.get_schema_names()
    out["tables"] = sorted(insp.get_table_names())
    out["views"] = insp.get_view_names()
    out["columns"] = [
        {"name": c["name"], "type": str(c["type"]), "nullable": c["nullable"]}
        for c in insp.get_columns("registrations")
    ]
    out["pk"] = insp.get_pk_constraint("registrations")
    out["indexes"] = [
        {"name": i["name"], "columns": i["column_names"], "unique": i["unique"]}
        for i in insp.get_indexes("registrations")
    ]
    out["foreign_keys"] = insp.get_foreign_keys("registrations")
    out["unique_constraints"] = insp.get_unique_constraints("registrations")

    # A reflected Table, selected through the ORM's core.
    regs = Table("registrations", MetaData(), autoload_with=engine)
    with engine.connect() as conn:
        rows = conn.execute(
            select(regs.c.bib, regs.c.name, regs.c.age)
            .where(regs.c.age >= 60)
            .order_by(regs.c.event, regs.c.distance, regs.c.bib)
            .limit(3)
        ).all()
        out["reflected_select"] = [list(r) for r in rows]
        bound = conn.execute(
            text("SELECT name FROM registrations WHERE bib = :bib ORDER BY event, distance"),
            {"bib": 7},
        ).all()
        out["bound"] = [list(r) for r in bound]

    frame = pandas.read_sql(
        "SELECT gender, count(*) AS n, avg(age) AS mean_age FROM registrations "
        "GROUP BY gender ORDER BY gender",
        engine,
    )
    out["pandas"] = {
        "version": pandas.__version__,
        "columns": list(frame.columns),
        "rows": frame.astype(str).values.tolist(),
    }
    print(json.dumps(out, default=str))


if __name__ == "__main__":
    main()
