"""dbt-core with dbt-postgres over the project in tests/clients/dbt, against
one PostgreSQL server (tablesql's, or PostgreSQL 15): prints, as JSON, what
it built, for tests/it/tools.rs to compare.

Two rounds: the seed, `dbt run` (a table, a view and an incremental model)
and the snapshot; then the seed changed (a club and an age changed, a
runner added), and seed, run, snapshot again, `dbt test` and `dbt docs
generate`. Each command's success is part of the output.

Usage: dbt_project.py CONNINFO SCHEMA (CONNINFO as libpq's key=value words).
"""

import json
import os
import shutil
import sys
import tempfile

# No network: dbt would send usage statistics and look for a newer version.
os.environ["DBT_SEND_ANONYMOUS_USAGE_STATS"] = "false"
os.environ["DBT_VERSION_CHECK"] = "false"

from dbt.cli.main import dbtRunner  # noqa: E402
import psycopg2  # noqa: E402

conninfo, schema = sys.argv[1], sys.argv[2]
params = dict(word.split("=", 1) for word in conninfo.split())
here = os.path.dirname(os.path.abspath(__file__))
work = tempfile.mkdtemp(prefix="dbt-")
project = os.path.join(work, "project")
shutil.copytree(os.path.join(here, "dbt"), project)
with open(os.path.join(project, "profiles.yml"), "w") as f:
    json.dump({"tablesql": {"target": "dev", "outputs": {"dev": {
        "type": "postgres", "host": params["host"], "port": int(params["port"]),
        "user": params["user"], "password": params.get("password", ""),
        "dbname": params["dbname"], "schema": schema, "threads": 1,
    }}}}, f)

runner = dbtRunner()
done = {}


def dbt(*args):
    """One dbt command; its failure stops the script with dbt's messages."""
    res = runner.invoke([*args, "--quiet", "--project-dir", project, "--profiles-dir", project,
                         "--log-path", os.path.join(work, "logs"),
                         "--target-path", os.path.join(work, "target")])
    name = " ".join(args)
    if not res.success:
        messages = []
        for r in getattr(res.result, "results", None) or []:
            if getattr(r, "status", None) not in ("success", "pass"):
                messages.append(f"{r.node.name}: {r.status}: {r.message}")
        log = os.path.join(work, "logs", "dbt.log")
        tail = open(log).read()[-6000:] if os.path.exists(log) else ""
        sys.exit(f"dbt {name} failed: {res.exception} {messages}\n{tail}")
    results = getattr(res.result, "results", None) or []
    done.setdefault(name, []).append(sorted(str(r.status) for r in results))


for command in (["seed"], ["run"], ["snapshot"]):
    dbt(*command)
shutil.copy(os.path.join(project, "changes", "runners.csv"),
            os.path.join(project, "seeds", "runners.csv"))
for command in (["seed"], ["run"], ["snapshot"], ["test"], ["docs", "generate"]):
    dbt(*command)

conn = psycopg2.connect(**params)
cur = conn.cursor()
cur.execute(f"SET search_path TO {schema}")


def rows(sql):
    cur.execute(sql)
    return [[None if v is None else str(v) for v in row] for row in cur.fetchall()]


out = {
    "commands": done,
    "clubs": rows("SELECT club, runners, oldest FROM clubs ORDER BY club"),
    "older": rows("SELECT id, name, age FROM older ORDER BY id"),
    "seen": rows("SELECT id, name, club, age FROM seen ORDER BY id"),
    # Its times are the runs'; what it holds is which versions are current.
    "snapshot": rows("SELECT id, club, age, dbt_valid_to IS NULL FROM runners_snapshot "
                     "ORDER BY id, dbt_valid_from"),
}
conn.close()

# The catalog `dbt docs generate` read: each relation's kind and columns.
with open(os.path.join(work, "target", "catalog.json")) as f:
    catalog = json.load(f)
out["catalog"] = {
    node["metadata"]["name"]: {
        "type": node["metadata"]["type"],
        "columns": sorted(node["columns"]),
    }
    for node in list(catalog["nodes"].values()) + list(catalog["sources"].values())
}
# The last line of the output (dbt prints its errors before).
print(json.dumps(out, sort_keys=True))
shutil.rmtree(work, ignore_errors=True)
