"""Apache Spark (pyspark, local mode) reads a mapped table from `tablesql serve`
through pgJDBC, in parallel: one JDBC predicate per partition range, so each
Spark partition is one query with its own WHERE.

Run as `python spark_client.py JDBC_JAR JDBC_URL READS_JSON`, READS_JSON a list of
`{"table": ..., "column": ..., "predicates": [...]}` (one query per predicate)
or `{"table": ..., "column": ..., "stride": [COLUMN, LOWER, UPPER, N]}` (Spark's
own split of an integer column into N ranges). Prints one JSON document:
Spark's version and, for each read, the DataFrame's columns and partition
count, the rows each Spark partition read, the count and the sum of `column`
over the table; the Rust test (tests/it/server/spark.rs) checks them against
tablesql's own answers. A plain pgJDBC URL (one server, or several with
pgJDBC's `loadBalanceHosts`), no other option, no workaround; one
Spark session for all the reads, since its JVM's start is the cost.
"""
import json
import sys

from pyspark.sql import SparkSession
from pyspark.sql import functions as F


def main():
    jar, url, reads = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("tablesql-spark-test")
        .config("spark.jars", jar)
        .config("spark.driver.memory", "512m")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        # Loopback only: no lookup of the machine's name.
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    try:
        out = {"spark": spark.version, "reads": [read(spark, url, r) for r in reads]}
    finally:
        spark.stop()
    print(json.dumps(out))


def read(spark, url, r):
    """One table read in parallel, one Spark partition (one query) per predicate."""
    properties = {
        "user": "tablesql",
        "driver": "org.postgresql.Driver",
        # pgJDBC then reads each partition's rows in pages (a portal in a
        # transaction), as Spark's users set it for large tables.
        "fetchsize": "500",
    }
    if "predicates" in r:
        frame = spark.read.jdbc(url, r["table"], predicates=r["predicates"], properties=properties)
    else:
        column, lower, upper, n = r["stride"]
        frame = spark.read.jdbc(
            url,
            r["table"],
            column=column,
            lowerBound=lower,
            upperBound=upper,
            numPartitions=n,
            properties=properties,
        )
    per_partition = frame.rdd.mapPartitions(lambda rows: [sum(1 for _ in rows)]).collect()
    total = frame.agg(F.count(F.lit(1)).alias("n"), F.sum(r["column"]).alias("s")).first()
    return {
        "columns": frame.columns,
        "partitions": frame.rdd.getNumPartitions(),
        "per_partition": per_partition,
        "count": total["n"],
        "sum": None if total["s"] is None else int(total["s"]),
    }


if __name__ == "__main__":
    main()
