"""Order-independent checksums of a lake's result tables, per dataset (and model), to prove that a
change which must not alter results did not: run it on a lake built before and after, and diff.

It reads the Delta tables with its own SparkSession and its own expressions, not intent_spark's,
so a bug in the library's checksum code cannot hide a difference.

    .venv/bin/python bench/lake_checksums.py demo/lake > after.tsv
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import MapType

TABLES = ("splits", "holdout", "targets", "catalogue", "ranks", "user_metrics", "metrics", "comparisons")


def session(store: bool = False) -> SparkSession:
    """Delta's jars; with ``store``, S3A's too (a lake at s3a://, the store named by AWS_ENDPOINT_URL)."""
    from intent_spark.lake.session import delta_jars  # the cached jars of this environment's Delta

    jars = ",".join(delta_jars(store))
    builder = SparkSession.builder
    endpoint = os.environ.get("AWS_ENDPOINT_URL")
    if store and endpoint:
        builder = (
            builder.config("spark.hadoop.fs.s3a.endpoint", endpoint)
            .config("spark.hadoop.fs.s3a.path.style.access", "true")
            .config("spark.hadoop.fs.s3a.connection.ssl.enabled", str(endpoint.startswith("https")).lower())
            .config("spark.hadoop.fs.s3a.endpoint.region", os.environ.get("AWS_REGION", "us-east-1"))
        )
    return (
        builder.master("local[2]")
        .appName("lake-checksums")
        .config("spark.jars", jars)
        .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
        .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )


def checksums(
    spark: SparkSession, lake: str, table: str, without: tuple[str, ...] = ()
) -> list[tuple[str, str, int, str]]:
    """(table, group, rows, sum of xxhash64 over the row's columns in name order) per group;
    ``without``: columns left out where present (one a change added, to compare the rest)."""
    df = spark.read.format("delta").load(f"{str(lake).rstrip('/')}/{table}")
    df = df.drop(*[c for c in without if c in df.columns])
    keys = [c for c in ("dataset", "model") if c in df.columns]
    # a map hashes by its entries in key order (Spark refuses to hash maps: their order is free)
    columns = [
        F.array_sort(F.map_entries(F.col(f"`{f.name}`")))
        if isinstance(f.dataType, MapType)
        else F.col(f"`{f.name}`")
        for f in sorted(df.schema.fields, key=lambda f: f.name)
    ]
    row_hash = F.xxhash64(*columns).cast("decimal(38,0)")
    rows = df.groupBy(*keys).agg(F.count(F.lit(1)).alias("n"), F.sum(row_hash).alias("s")).collect()
    return sorted((table, "/".join(str(r[k]) for k in keys), int(r["n"]), str(r["s"])) for r in rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("lake", help="a folder, or an s3a:// URI (the S3A jars of make setup-s3)")
    parser.add_argument("--tables", nargs="*", default=list(TABLES))
    parser.add_argument(
        "--without",
        nargs="*",
        default=[],
        metavar="COLUMN",
        help="columns to leave out where a table has them",
    )
    args = parser.parse_args()
    on_store = args.lake.startswith(("s3a://", "s3://"))
    spark = session(store=on_store)
    spark.sparkContext.setLogLevel("ERROR")
    for table in args.tables:
        if not on_store and not (Path(args.lake) / table / "_delta_log").is_dir():
            print(f"{table}\t-\tabsent\t-")
            continue
        for name, group, rows, total in checksums(spark, args.lake, table, tuple(args.without)):
            print(f"{name}\t{group}\t{rows}\t{total}")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
