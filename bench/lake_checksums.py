"""Order-independent checksums of a lake's result tables, per dataset (and model), to prove that a
change which must not alter results did not: run it on a lake built before and after, and diff.

It reads the Delta tables with its own SparkSession and its own expressions, not intent_spark's,
so a bug in the library's checksum code cannot hide a difference.

    .venv/bin/python bench/lake_checksums.py demo/lake > after.tsv
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

JARS = Path(__file__).resolve().parent.parent / ".jars"
TABLES = ("splits", "holdout", "targets", "catalogue", "ranks", "user_metrics", "metrics", "comparisons")


def session() -> SparkSession:
    jars = ",".join(str(p) for p in sorted(JARS.glob("delta-*.jar")))
    return (
        SparkSession.builder.master("local[2]")
        .appName("lake-checksums")
        .config("spark.jars", jars)
        .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
        .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )


def checksums(spark: SparkSession, lake: Path, table: str) -> list[tuple[str, str, int, str]]:
    """(table, group, rows, sum of xxhash64 over the row's columns in name order) per group."""
    df = spark.read.format("delta").load(str(lake / table))
    keys = [c for c in ("dataset", "model") if c in df.columns]
    row_hash = F.xxhash64(*[F.col(f"`{c}`") for c in sorted(df.columns)]).cast("decimal(38,0)")
    rows = df.groupBy(*keys).agg(F.count(F.lit(1)).alias("n"), F.sum(row_hash).alias("s")).collect()
    return sorted((table, "/".join(str(r[k]) for k in keys), int(r["n"]), str(r["s"])) for r in rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("lake", type=Path)
    parser.add_argument("--tables", nargs="*", default=list(TABLES))
    args = parser.parse_args()
    spark = session()
    spark.sparkContext.setLogLevel("ERROR")
    for table in args.tables:
        if not (args.lake / table / "_delta_log").is_dir():
            print(f"{table}\t-\tabsent\t-")
            continue
        for name, group, rows, total in checksums(spark, args.lake, table):
            print(f"{name}\t{group}\t{rows}\t{total}")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
