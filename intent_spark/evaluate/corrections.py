"""Multiple-comparison correction (SPEC 10): the paired comparisons shown together are one family,
and "significant" always refers to the adjusted p-value.

Both corrections are window functions over a family ordered by p, so they run where the
comparisons are (a few hundred rows per dataset) without collecting them:

- Holm (family-wise error): the i-th smallest of m p-values becomes
  max over j <= i of min(1, (m - j + 1) p_j), a running maximum from the smallest p up;
- Benjamini-Hochberg (false discovery rate): min over j >= i of min(1, m p_j / j), a running
  minimum from the largest p down.

Tied p-values get the same adjusted value whatever order the window puts them in, so the
result does not depend on the tie-break.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from intent_spark.core.errors import IntentError
from intent_spark.core.schema import BH, CORRECTIONS, HOLM
from intent_spark.core.schema import NO_CORRECTION as NONE

DEFAULT_CORRECTION = HOLM
SIGNIFICANCE = 0.05
P_VALUE = "p_value"
P_ADJUSTED = "p_adjusted"
CORRECTION = "correction"
FAMILY_SIZE = "family_size"
CORRECTION_NAMES = {HOLM: "Holm", BH: "Benjamini-Hochberg", NONE: "no correction"}


def check_correction(method: str, where: str = "--correction") -> str:
    if method not in CORRECTIONS:
        raise IntentError(f"{where}: unknown correction {method!r}; known: {', '.join(CORRECTIONS)}")
    return method


def adjust_p_values(
    comparisons: DataFrame, method: str, family: Sequence[str], order: Sequence[str] = ()
) -> DataFrame:
    """``comparisons`` with ``p_adjusted``, ``correction`` and ``family_size``: the p-values of
    every group of ``family`` columns adjusted as one family. Rows without a p-value (retention
    ratios) are in no family: their adjusted value and family size are null. ``order`` breaks
    ties among equal p-values (it cannot change the adjusted values, only keeps plans stable).
    """
    check_correction(method)
    tested = F.col(P_VALUE).isNotNull()
    group = [*family, "_tested"]
    rows = comparisons.withColumn("_tested", tested)
    ranked = Window.partitionBy(*group).orderBy(F.col(P_VALUE).asc(), *order)
    m = F.count(F.lit(1)).over(Window.partitionBy(*group))
    i = F.row_number().over(ranked)
    if method == HOLM:
        scaled = F.least(F.lit(1.0), (m - i + 1) * F.col(P_VALUE))
        adjusted = F.max("_scaled").over(ranked.rowsBetween(Window.unboundedPreceding, Window.currentRow))
    elif method == BH:
        scaled = F.least(F.lit(1.0), m * F.col(P_VALUE) / i)
        adjusted = F.min("_scaled").over(ranked.rowsBetween(Window.currentRow, Window.unboundedFollowing))
    else:
        scaled = F.col(P_VALUE)
        adjusted = F.col("_scaled")
    return (
        rows.withColumn("_scaled", scaled)
        .withColumn(P_ADJUSTED, F.when(F.col("_tested"), adjusted))
        .withColumn(CORRECTION, F.when(F.col("_tested"), F.lit(method)))
        .withColumn(FAMILY_SIZE, F.when(F.col("_tested"), m))
        .drop("_tested", "_scaled")
    )
