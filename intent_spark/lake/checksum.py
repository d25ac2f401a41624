"""Order-independent table checksums (SPEC 6): the same rows give the same sum, however stored."""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import DataFrame
from pyspark.sql import functions as F


@dataclass(frozen=True)
class Checksum:
    rows: int
    checksum: str


def table_checksum(df: DataFrame) -> Checksum:
    """Row count and the exact sum of a 64-bit hash of every row's columns.

    A sum (not XOR) so that duplicated rows change it; summed as DECIMAL(38,0) so it cannot
    overflow. Columns are hashed in name order, so a column reorder does not change it.
    """
    columns = [F.col(f"`{c}`") for c in sorted(df.columns)]
    row_hash = F.xxhash64(*columns).cast("decimal(38,0)")
    result = df.agg(F.count(F.lit(1)).alias("rows"), F.sum(row_hash).alias("total")).first()
    assert result is not None
    return Checksum(int(result.rows), str(result.total if result.total is not None else 0))
