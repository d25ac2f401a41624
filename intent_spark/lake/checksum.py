"""Order-independent table checksums (SPEC 6): the same rows give the same sum, however stored."""

from __future__ import annotations

from dataclasses import dataclass
from functools import reduce

from pyspark.sql import DataFrame
from pyspark.sql import functions as F


@dataclass(frozen=True)
class Checksum:
    rows: int
    checksum: str


def row_hash(columns: list[str]):
    """A row's 64-bit hash over ``columns`` in name order, as the exact type the sums use."""
    return F.xxhash64(*[F.col(f"`{c}`") for c in sorted(columns)]).cast("decimal(38,0)")


def table_checksums(tables: dict[str, DataFrame]) -> dict[str, Checksum]:
    """``table_checksum`` of several tables in one Spark job (a union of one aggregate each)."""
    parts = [
        df.agg(F.count(F.lit(1)).alias("rows"), F.sum(row_hash(df.columns)).alias("total")).select(
            F.lit(name).alias("name"), "rows", "total"
        )
        for name, df in tables.items()
    ]
    if not parts:
        return {}
    found = {r["name"]: r for r in reduce(DataFrame.unionByName, parts).collect()}  # one row per table
    return {
        name: Checksum(
            int(found[name]["rows"]), str(found[name]["total"] if found[name]["total"] is not None else 0)
        )
        for name in tables
    }


def table_checksum(df: DataFrame) -> Checksum:
    """Row count and the exact sum of a 64-bit hash of every row's columns.

    A sum (not XOR) so that duplicated rows change it; summed as DECIMAL(38,0) so it cannot
    overflow. Columns are hashed in name order, so a column reorder does not change it.
    """
    return table_checksums({"table": df})["table"]
