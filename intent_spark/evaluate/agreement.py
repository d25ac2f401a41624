"""Protocol agreement: does an evaluation protocol order models the way the INTENT cells do?

A benchmark is read to choose between models, so what matters about a protocol is the order it
puts models in, not its absolute scores. ``protocol_agreement`` compares the model orderings of
two settings (leave-last-out, a HORIZON setting, an INTENT deployment cell) with Kendall's tau-b
and a user-level bootstrap interval. The bootstrap is paired: a user's weight in replicate r is
the same in every setting and for every model (``metrics.bootstrap_weight``), so the interval
reflects which users were drawn, not independent noise on each side.

Input grain (``users``): one row per setting, model and user_id, with ``value`` the user's score
in that setting (for example ``ndcg_10`` of ``user_metrics``, with the cell or split as setting).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from intent_spark.core import schema as S
from intent_spark.core.datasets import PROTOCOLS, TRANSFER_SEPARATOR, protocol_variant
from intent_spark.evaluate.metrics import bootstrap_weight
from intent_spark.lake.context import Lake
from intent_spark.lake.reports import compare_folder
from intent_spark.split.protocols import PROTOCOL_CELLS

SETTING = "setting"
VALUE = "value"
REPLICATE = "_r"
MEAN = "mean"
AGREEMENT_COLUMNS = (
    "setting_a",
    "setting_b",
    "n_models",
    "tau",
    "ci_low",
    "ci_high",
    "models_a",
    "models_b",
)


def _sign(d: float) -> int:
    return int(d > 0) - int(d < 0)  # int(): numpy booleans do not subtract


def kendall_tau_b(x: Sequence[float], y: Sequence[float]) -> float:
    """Kendall's tau-b of two paired score sequences (model i scores ``x[i]`` and ``y[i]``).

    tau-b = (C - D) / sqrt((n0 - n1)(n0 - n2)) over the n0 = n(n - 1)/2 pairs, with C and D the
    concordant and discordant pairs and n1, n2 the pairs tied in x and in y; a pair tied on both
    sides counts in both. NaN when undefined: fewer than two items, a NaN score, or one side
    all tied. O(n^2), which is nothing for the handful of models a benchmark compares.

    >>> kendall_tau_b([1, 2, 3, 4], [1, 2, 4, 3])
    0.6666666666666666
    """
    if len(x) != len(y):
        raise ValueError(f"kendall_tau_b needs equal lengths, got {len(x)} and {len(y)}")
    n = len(x)
    if n < 2 or any(math.isnan(v) for v in (*x, *y)):
        return math.nan
    concordant = discordant = tied_x = tied_y = 0
    for i in range(n):
        for j in range(i + 1, n):
            sx, sy = _sign(x[i] - x[j]), _sign(y[i] - y[j])
            tied_x += sx == 0
            tied_y += sy == 0
            concordant += sx * sy > 0
            discordant += sx * sy < 0
    pairs = n * (n - 1) // 2
    denominator = (pairs - tied_x) * (pairs - tied_y)
    if denominator == 0:
        return math.nan
    return (concordant - discordant) / math.sqrt(denominator)


def replicate_means(users: DataFrame, *, replicates: int, seed: int) -> DataFrame:
    """One row per setting, model and bootstrap replicate ``_r``: the Poisson-bootstrap weighted
    mean of ``value`` over users (``mean``).

    The weight depends on the user and the replicate only, so replicate r draws the same users
    in every setting and for every model: orderings compared within a replicate are paired.
    ``mean`` is null in a replicate that draws none of the group's users.
    """
    if replicates < 1:
        raise ValueError(f"replicates must be at least 1, got {replicates}")
    draws = users.select(SETTING, S.MODEL, S.USER_ID, F.col(VALUE).alias("_x")).crossJoin(
        F.broadcast(users.sparkSession.range(replicates).withColumnRenamed("id", REPLICATE))
    )
    weighted = draws.withColumn("_w", bootstrap_weight(F.col(S.USER_ID), F.col(REPLICATE), seed))
    total = F.sum("_w")
    # all-zero weights: no mean rather than a division by zero (an error under ANSI)
    mean = F.when(total > 0, F.sum(F.col("_w") * F.col("_x")) / total)
    return weighted.groupBy(SETTING, S.MODEL, REPLICATE).agg(mean.alias(MEAN))


def _best_first(means: pd.Series) -> str:
    """Model names by descending mean (ties by name), comma-joined."""
    return ",".join(model for model, _ in sorted(means.items(), key=lambda kv: (-kv[1], kv[0])))


def _percentile_interval(taus: Sequence[float]) -> tuple[float, float]:
    """2.5th and 97.5th percentiles (linear, as Spark's ``percentile``) of the defined taus."""
    defined = np.asarray(taus, dtype=float)
    defined = defined[~np.isnan(defined)]
    if defined.size == 0:
        return math.nan, math.nan
    low, high = np.percentile(defined, [2.5, 97.5])
    return float(low), float(high)


def _pair_agreement(a: str, b: str, full: pd.Series, boot: pd.DataFrame) -> dict:
    """One output row from the driver-side tables: ``full`` indexed by (setting, model),
    ``boot`` with one row per replicate and (setting, model) columns."""
    models = sorted(set(full.loc[a].index) & set(full.loc[b].index))
    mean_a, mean_b = full.loc[a][models], full.loc[b][models]
    # a replicate with a model undrawn on one side gives NaN and is dropped from the interval
    taus = [
        kendall_tau_b(ra, rb)
        for ra, rb in zip(boot[a][models].to_numpy(), boot[b][models].to_numpy(), strict=True)
    ]
    low, high = _percentile_interval(taus)
    return {
        "setting_a": a,
        "setting_b": b,
        "n_models": len(models),
        "tau": kendall_tau_b(mean_a.to_numpy(), mean_b.to_numpy()),
        "ci_low": low,
        "ci_high": high,
        "models_a": _best_first(mean_a),
        "models_b": _best_first(mean_b),
    }


def protocol_agreement(
    users: DataFrame, pairs: Sequence[tuple[str, str]], *, replicates: int = 200, seed: int = 0
) -> pd.DataFrame:
    """How far each (setting_a, setting_b) pair agrees on the order of the models they share.

    For users who ask whether a protocol (leave-last-out, a HORIZON setting) ranks models the
    way the INTENT deployment cells do: tau = 1 is the same order, -1 the reverse. One row per
    pair, in the order given: ``n_models`` (models in both settings), ``tau`` (Kendall's tau-b
    of the plain per-model means over users), ``ci_low``/``ci_high`` (2.5th/97.5th percentiles
    of tau over paired bootstrap replicates, undefined replicates dropped; NaN when none is
    defined), and ``models_a``/``models_b`` (the shared models best first, comma-joined) so a
    reader sees where the orders part.

    Only aggregates reach the driver: settings x models means and settings x models x
    replicates bootstrap means. Rows with a null ``value`` are left out.
    """
    pairs = [(str(a), str(b)) for a, b in pairs]
    if not pairs:
        raise ValueError("protocol_agreement needs at least one pair of settings")
    if replicates < 1:
        raise ValueError(f"replicates must be at least 1, got {replicates}")
    settings = sorted({s for pair in pairs for s in pair})
    scores = users.where(F.col(SETTING).isin(settings) & F.col(VALUE).isNotNull())
    full = scores.groupBy(SETTING, S.MODEL).agg(F.avg(VALUE).alias(MEAN)).toPandas()  # settings x models
    missing = sorted(set(settings) - set(full[SETTING]))
    if missing:
        raise ValueError(f"no users in setting(s) {missing}")
    replicated = replicate_means(scores, replicates=replicates, seed=seed)
    boot = replicated.toPandas()  # settings x models x replicates rows
    full_means = full.set_index([SETTING, S.MODEL])[MEAN].sort_index()
    by_replicate = (
        boot.set_index([REPLICATE, SETTING, S.MODEL])[MEAN].unstack([SETTING, S.MODEL]).sort_index(axis=1)
    )
    rows = [_pair_agreement(a, b, full_means, by_replicate) for a, b in pairs]
    return pd.DataFrame(rows, columns=list(AGREEMENT_COLUMNS))


# The deployment cells a protocol's model ordering is compared with.
REFERENCE_CELLS = ("known_future_seen", "known_future_new", "new_future_seen", "new_future_new")


def write_agreement(
    lake: Lake, dataset: str, protocols: Sequence[str], *, replicates: int, seed: int = 0
) -> Path | None:
    """Kendall tau-b of each protocol setting's model order (test NDCG@10) against each INTENT
    deployment cell's, with paired user-bootstrap intervals: ``LAKE/reports/compare/
    <dataset>.agreement.csv``. None when the dataset has no evaluated protocol variant."""
    variants = [protocol_variant(dataset, p) for p in protocols]
    users = (
        lake.read(S.USER_METRICS)
        .where(
            F.col(S.DATASET).isin([dataset, *variants])
            & (F.col(S.SPLIT) == S.TEST)
            & ~F.col(S.MODEL).contains(TRANSFER_SEPARATOR)
        )
        .select(F.col(S.CELL).alias(SETTING), S.MODEL, S.USER_ID, F.col("ndcg_10").alias(VALUE))
    )
    present = {r[SETTING] for r in users.select(SETTING).distinct().collect()}  # a row per cell
    ordered = dict.fromkeys(c for p in PROTOCOLS if p in protocols for c in sorted(set(PROTOCOL_CELLS[p])))
    others = [c for c in ordered if c in present]
    references = [c for c in REFERENCE_CELLS if c in present]
    if not others or not references:
        return None
    pairs = [(other, reference) for other in others for reference in references]
    table = protocol_agreement(users, pairs, replicates=replicates, seed=seed)
    table.insert(0, S.DATASET, dataset)
    path = compare_folder(lake.root) / f"{dataset}.agreement.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(path, index=False)
    return path


def evaluated_protocols(lake: Lake, dataset: str) -> list[str]:
    """The protocols whose variant of ``dataset`` has metrics, in the order of ``PROTOCOLS``."""
    names = {protocol_variant(dataset, p): p for p in PROTOCOLS}
    rows = lake.read(S.METRICS_TABLE).where(F.col(S.DATASET).isin(list(names)))
    found = {r[S.DATASET] for r in rows.select(S.DATASET).distinct().collect()}  # a row per variant
    return [p for name, p in names.items() if name in found]
