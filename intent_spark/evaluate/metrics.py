"""Metrics from ranks (SPEC 5), in Spark: per target, per user, per cell with 95% intervals.

Per target: NDCG@K = 1/log2(1 + rank) if rank <= K; HR@K = Recall@K = [rank <= K];
Precision@K = HR@K / K; MRR@K = 1/rank if rank <= K. A user's score in a cell is the mean over
their targets; a cell's score is the mean over users, with a normal 95% interval over users.
A submission's metrics at K above its shortest list are null: unavailable, never 0.
"""

from __future__ import annotations

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from intent_spark.core import schema as S
from intent_spark.core.errors import IntentError
from intent_spark.core.faults import fault_point
from intent_spark.core.progress import Progress, silent
from intent_spark.evaluate.corrections import (
    CORRECTION,
    DEFAULT_CORRECTION,
    FAMILY_SIZE,
    P_ADJUSTED,
    adjust_p_values,
)
from intent_spark.lake.context import Lake

KS = (1, 5, 10, 20, 50, 100)
METRICS = ("ndcg", "hr", "recall", "precision", "mrr")
Z_95 = 1.959963984540054
Z_80 = 0.8416212335729143  # the standard normal's 80th percentile: power 0.8
TIE_RATE = "tie_rate"
ADJUSTED_COLUMNS = (P_ADJUSTED, CORRECTION, FAMILY_SIZE)
USER_KEYS = (S.DATASET, S.SPLIT, S.CELL, S.MODEL, S.USER_ID)
CELL_KEYS = (S.DATASET, S.SPLIT, S.CELL, S.MODEL)


def metric_column(metric: str, k: int) -> str:
    return f"{metric}_{k}"


def target_metric(metric: str, k: int, rank: Column) -> Column:
    """One metric of one target from its (expected, possibly fractional) rank."""
    within = rank <= F.lit(float(k))
    value = {
        "ndcg": 1.0 / F.log2(1.0 + rank),
        "hr": F.lit(1.0),
        "recall": F.lit(1.0),
        "precision": F.lit(1.0 / k),
        "mrr": 1.0 / rank,
    }[metric]
    return F.when(within, value).otherwise(F.lit(0.0))


def user_metrics(ranks: DataFrame, limits: DataFrame | None = None) -> DataFrame:
    """One row per dataset, split, cell, model and user: the mean of every metric over the
    user's targets, their number, and the share of them ranked inside a tie.

    ``limits`` (``dataset, split, model, list_length``) holds the submissions' shortest lists:
    a submission's metrics at k above it are null (unavailable: a rank beyond a list says
    nothing about k past its end), never 0.
    """
    rank = F.col(S.RANK)
    if limits is None:
        limited = ranks.withColumn("_limit", F.lit(None).cast("long"))
    else:
        keys = [S.DATASET, S.SPLIT, S.MODEL]
        limited = ranks.join(F.broadcast(limits.withColumnRenamed(S.LIST_LENGTH, "_limit")), keys, "left")
    available = {k: F.col("_limit").isNull() | (F.col("_limit") >= k) for k in KS}
    means = [
        F.when(available[k], F.avg(target_metric(metric, k, rank))).alias(metric_column(metric, k))
        for metric in METRICS
        for k in KS
    ]
    tied = F.avg(F.when(F.col(S.TIED) > 0, 1.0).otherwise(0.0)).alias(TIE_RATE)
    grouped = limited.groupBy(*USER_KEYS, "_limit").agg(F.count(F.lit(1)).alias("n_targets"), tied, *means)
    return grouped.drop("_limit")


def long_user_metrics(users: DataFrame) -> DataFrame:
    """The user table with one row per metric and k (``metric, k, value``)."""
    pairs = [(metric, k) for metric in METRICS for k in KS]
    stacked = ", ".join(f"'{m}', {k}, `{metric_column(m, k)}`" for m, k in pairs)
    return users.select(
        *USER_KEYS, "n_targets", F.expr(f"stack({len(pairs)}, {stacked}) as (metric, k, value)")
    )


def cell_metrics(users: DataFrame, floor_users: int, bootstrap: int = 0, seed: int = 0) -> DataFrame:
    """METRICS_SCHEMA rows: each cell's mean over users with its normal 95% interval, or with
    user-level bootstrap percentiles when ``bootstrap`` replicates are asked for.

    The tie rate is a share of targets (k = 0): targets ranked inside a tie / all targets.
    """
    long = long_user_metrics(users)
    n = F.count(F.lit(1))
    mean = F.avg("value")
    half = F.lit(Z_95) * F.coalesce(F.stddev_samp("value"), F.lit(0.0)) / F.sqrt(n)
    by_metric = long.groupBy(*CELL_KEYS, "metric", "k").agg(
        mean.alias("value"),
        (mean - half).alias("ci_low"),
        (mean + half).alias("ci_high"),
        n.alias("n_users"),
        F.sum("n_targets").alias("n_targets"),
    )
    if bootstrap:
        keys = (*CELL_KEYS, "metric", "k")
        boot = bootstrap_intervals(long, "value", replicates=bootstrap, seed=seed, keys=keys)
        by_metric = by_metric.drop("ci_low", "ci_high").join(boot, list(keys))
    ties = users.groupBy(*CELL_KEYS).agg(
        F.lit(TIE_RATE).alias("metric"),
        F.lit(0).alias("k"),
        (F.sum(F.col(TIE_RATE) * F.col("n_targets")) / F.sum("n_targets")).alias("value"),
        F.lit(None).cast("double").alias("ci_low"),
        F.lit(None).cast("double").alias("ci_high"),
        F.count(F.lit(1)).alias("n_users"),
        F.sum("n_targets").alias("n_targets"),
    )
    return (
        by_metric.unionByName(ties)
        .withColumn("below_floor", F.col("n_users") < floor_users)
        .withColumn(S.FLOOR_USERS, F.lit(floor_users).cast("long"))
    )


def mlflow_name(split: str, cell: str, metric: str, k: int) -> str:
    """The stable MLflow metric name of SPEC 8: ``<split>.<cell>.<metric>_<k>``."""
    return f"{split}.{cell}.{metric}" if metric == TIE_RATE else f"{split}.{cell}.{metric}_{k}"


def evaluate(
    lake: Lake,
    dataset: str,
    *,
    floor_users: int | None = None,
    unrecorded_floor: int | None = None,
    bootstrap: int = 0,
    correction: str = DEFAULT_CORRECTION,
) -> int:
    """Write ``user_metrics``, ``metrics`` and ``comparisons`` from ``ranks``; log each model's
    cell metrics to its MLflow training run (unless tracking is off). Cells are flagged at the
    floor the split applied; ``floor_users`` overrides it, said in the progress line and kept in
    ``metrics.floor_users`` for the report to say; ``unrecorded_floor`` stands in for a split
    written before the floor was kept. Returns the number of metric rows."""
    from intent_spark.lake.progress import spark_progress

    floor = evaluation_floor(lake, dataset, floor_users, unrecorded_floor)
    with spark_progress(lake.spark, lake.progress, f"{dataset} evaluate"):
        rows = _metric_tables(lake, dataset, floor, bootstrap, correction)
    if lake.tracking:
        log_cell_metrics(lake.tracking, dataset, rows, lake.progress)
    return len(rows)


def evaluation_floor(lake: Lake, dataset: str, override: int | None, unrecorded: int | None = None) -> int:
    """The floor the split recorded, or ``override`` (said when it differs); a split written
    before the floor was kept takes ``unrecorded`` (its split conf's), else conf/split.yaml's."""
    from intent_spark.split.split_tables import recorded_floor, split_floor

    applied = split_floor(lake, dataset, unrecorded)
    if recorded_floor(lake, dataset) is None:
        lake.progress(
            f"{dataset}: split before its floor was kept: cells flagged at its split conf's {applied:,}"
        )
    if override is None or override == applied:
        return applied
    lake.progress(
        f"{dataset}: cells flagged at {override:,} users (--floor-users), an override of the split's {applied:,}"
    )
    return override


def _metric_tables(lake: Lake, dataset: str, floor_users: int, bootstrap: int, correction: str) -> list:
    progress = lake.progress
    ranks = lake.read(S.RANKS, dataset)
    progress(f"{dataset}: per-user metrics")
    lake.write(user_metrics(ranks, submission_limits(lake, dataset)), S.USER_METRICS, dataset)
    fault_point("evaluate.user_metrics")
    # Read once: the cell metrics and every comparison family are computed from this one set.
    users = lake.read(S.USER_METRICS, dataset).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        how = f"{bootstrap} bootstrap replicates" if bootstrap else "normal"
        progress(f"{dataset}: cell metrics with 95% intervals ({how})")
        lake.write(cell_metrics(users, floor_users, bootstrap), S.METRICS_TABLE, dataset)
        metrics = lake.read(S.METRICS_TABLE, dataset)
        progress(f"{dataset}: paired model comparisons, memorization gaps and retention")
        lake.write(comparisons(users, metrics, correction=correction), S.COMPARISONS, dataset)
        return metrics.collect()  # cells x models x metrics: small
    finally:
        users.unpersist()


def submission_limits(lake: Lake, dataset: str) -> DataFrame | None:
    """``dataset, split, model, list_length`` of the dataset's scored submissions, if any."""
    if not lake.has(S.SUBMISSIONS):
        return None
    return lake.read(S.SUBMISSIONS, dataset).select(S.DATASET, S.SPLIT, S.MODEL, S.LIST_LENGTH)


def log_cell_metrics(tracking_uri: str, dataset: str, rows: list, progress: Progress = silent) -> None:
    """Each model's ``metrics`` rows as MLflow metrics of its newest training run."""
    from intent_spark.lake.tracking import find_run, log_run_metrics

    for model in sorted({r[S.MODEL] for r in rows}):
        try:
            run = find_run(tracking_uri, dataset, model)
        except IntentError:  # ranks from a model trained against another store
            progress(f"{dataset} {model}: no training run in {tracking_uri}; metrics kept in the table only")
            continue
        values = {
            mlflow_name(r[S.SPLIT], r[S.CELL], r.metric, r.k): r.value
            for r in rows
            if r[S.MODEL] == model and r.value is not None  # unavailable: not logged, never 0
        }
        log_run_metrics(tracking_uri, run.info.run_id, values)
        progress(f"{dataset} {model}: {len(values)} metrics logged to MLflow run {run.info.run_id}")


def normal_p_value(z: float) -> float:
    """Two-sided p-value of a standard normal statistic."""
    import math

    return math.erfc(abs(z) / math.sqrt(2.0))


# Abramowitz and Stegun 7.1.26: erfc(x) = t exp(-x^2) poly(t), t = 1 / (1 + p x), absolute
# error below 1.5e-7 for x >= 0; Spark SQL has no normal CDF.
_ERFC_P = 0.3275911
_ERFC_A = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)


def p_value_column(z: Column) -> Column:
    """Two-sided normal p-value of a z column, as a column expression (null stays null)."""
    x = F.abs(z) / F.lit(2.0**0.5)
    t = F.lit(1.0) / (F.lit(1.0) + F.lit(_ERFC_P) * x)
    poly = F.lit(0.0)
    for a in reversed(_ERFC_A):
        poly = (poly + F.lit(a)) * t
    return poly * F.exp(-x * x)


def minimum_detectable_effect(sd: Column, n: Column) -> Column:
    """The smallest true mean difference a paired z-test over ``n`` users detects with power 0.8
    at two-sided 0.05: (z_0.975 + z_0.8) sd / sqrt(n), from the per-user standard deviation of
    the differences; null under two users, where there is no spread to read."""
    return F.when(n >= 2, F.lit(Z_95 + Z_80) * sd / F.sqrt(n))


def _difference_stats(paired: DataFrame, keys: tuple[str, ...]) -> DataFrame:
    """Mean of ``_d`` per group, its normal 95% interval over users, the paired z-test and the
    minimum detectable effect. Users whose difference is unavailable (a submission's metric
    beyond its lists) are left out."""
    n = F.count(F.lit(1))
    stats = (
        paired.where(F.col("_d").isNotNull())
        .groupBy(*keys)
        .agg(
            F.avg("_d").alias("value"),
            F.coalesce(F.stddev_samp("_d"), F.lit(0.0)).alias("_sd"),
            n.alias("n_users"),
        )
    )
    se = F.col("_sd") / F.sqrt("n_users")
    z = F.when(F.col("_sd") > 0, F.col("value") / se)
    return stats.select(
        *keys,
        "value",
        (F.col("value") - F.lit(Z_95) * se).alias("ci_low"),
        (F.col("value") + F.lit(Z_95) * se).alias("ci_high"),
        "n_users",
        z.alias("z"),
        # no spread at all: identical users give p = 1, a constant nonzero difference p = 0
        F.coalesce(p_value_column(z), F.when(F.col("value") == 0, 1.0).otherwise(0.0)).alias("p_value"),
        minimum_detectable_effect(F.col("_sd"), F.col("n_users")).alias("mde"),
    )


def paired_difference(
    users: DataFrame, column: str, left: Column, right: Column, keys: tuple[str, ...]
) -> DataFrame:
    """Per-user differences ``left - right`` of one metric over the users present on both sides,
    grouped by ``keys``: mean (``value``), normal 95% interval, users, z and p-value.

    ``left`` and ``right`` select rows of ``user_metrics`` (two models in one cell, or two cells
    of one model); pairing by user removes the between-user variance both sides share.
    """
    side = [*keys, S.USER_ID]
    a = users.where(left).select(*side, F.col(column).alias("_left"))
    b = users.where(right).select(*side, F.col(column).alias("_right"))
    return _difference_stats(a.join(b, side).withColumn("_d", F.col("_left") - F.col("_right")), keys)


def compare_models(users: DataFrame, model_a: str, model_b: str, column: str = "ndcg_10") -> DataFrame:
    """``model_a - model_b`` per dataset, split and cell, on the same users' targets."""
    keys = (S.DATASET, S.SPLIT, S.CELL)
    return paired_difference(users, column, F.col(S.MODEL) == model_a, F.col(S.MODEL) == model_b, keys)


def pairwise_comparisons(users: DataFrame, column: str = "ndcg_10") -> DataFrame:
    """Every pair of models (``model`` before ``baseline`` by name) in every cell: one self-join
    on the user, so no list of models is needed on the driver."""
    side = [S.DATASET, S.SPLIT, S.CELL, S.USER_ID]
    a = users.select(*side, S.MODEL, F.col(column).alias("_left"))
    b = users.select(*side, F.col(S.MODEL).alias("baseline"), F.col(column).alias("_right"))
    paired = a.join(b, side).where(F.col(S.MODEL) < F.col("baseline"))
    stats = _difference_stats(
        paired.withColumn("_d", F.col("_left") - F.col("_right")),
        (S.DATASET, S.SPLIT, S.CELL, S.MODEL, "baseline"),
    )
    return stats.withColumn("kind", F.lit(S.PAIRED)).withColumn("metric", F.lit(column))


MEMORIZATION_PAIRS = (
    ("known_future", "known_future_seen", "known_future_new"),
    ("new_past", "new_past_seen", "new_past_new"),
    ("new_future", "new_future_seen", "new_future_new"),
)


def memorization_gap(users: DataFrame, column: str = "ndcg_10") -> DataFrame:
    """Seen minus new, for the same users and period (SPEC 5), per dataset, split and model;
    ``cell`` names the pair (``known_future_seen-known_future_new``)."""
    keys = (S.DATASET, S.SPLIT, S.MODEL)
    gaps = [
        paired_difference(users, column, F.col(S.CELL) == seen, F.col(S.CELL) == new, keys).withColumn(
            S.CELL, F.lit(f"{seen}-{new}")
        )
        for _, seen, new in MEMORIZATION_PAIRS
    ]
    union = gaps[0]
    for frame in gaps[1:]:
        union = union.unionByName(frame)
    return union.withColumn("kind", F.lit(S.MEMORIZATION_GAP)).withColumn("metric", F.lit(column))


RETENTION_PAIRS = (("new_future_seen", "new_past_seen"), ("new_future_new", "new_past_new"))


def retention(metrics: DataFrame, metric: str = "ndcg", k: int = 10) -> DataFrame:
    """Future over past on new users (SPEC 5), per model, from the ``metrics`` table.

    The interval is the delta method on the two cell means, with standard errors read back
    from their 95% intervals and the cells taken as independent. Repeat-last's row is the
    data's own drift reference. Cells with a zero past score give no ratio.
    """
    keys = [S.DATASET, S.SPLIT, S.MODEL]
    chosen = metrics.where((F.col("metric") == metric) & (F.col("k") == k) & F.col("value").isNotNull())
    ratios = []
    for future, past in RETENTION_PAIRS:
        f = chosen.where(F.col(S.CELL) == future).select(
            *keys,
            F.col("value").alias("_f"),
            ((F.col("ci_high") - F.col("ci_low")) / F.lit(2 * Z_95)).alias("_sf"),
            F.col("n_users").alias("_nf"),
        )
        p = chosen.where((F.col(S.CELL) == past) & (F.col("value") > 0)).select(
            *keys,
            F.col("value").alias("_p"),
            ((F.col("ci_high") - F.col("ci_low")) / F.lit(2 * Z_95)).alias("_sp"),
            F.col("n_users").alias("_np"),
        )
        ratio = F.col("_f") / F.col("_p")
        # Var(f / p) ~ (sf^2 + r^2 sp^2) / p^2
        se = F.sqrt(F.pow("_sf", 2) + F.pow(ratio, 2) * F.pow("_sp", 2)) / F.col("_p")
        ratios.append(
            f.join(p, keys).select(
                *keys,
                F.lit(f"{future}/{past}").alias(S.CELL),
                ratio.alias("value"),
                (ratio - F.lit(Z_95) * se).alias("ci_low"),
                (ratio + F.lit(Z_95) * se).alias("ci_high"),
                F.least("_nf", "_np").alias("n_users"),
                F.lit(None).cast("double").alias("p_value"),
                F.lit(None).cast("double").alias("mde"),
            )
        )
    return (
        ratios[0]
        .unionByName(ratios[1])
        .withColumn("kind", F.lit(S.RETENTION))
        .withColumn("metric", F.lit(f"{metric}_{k}"))
    )


def comparisons(
    users: DataFrame, metrics: DataFrame, column: str = "ndcg_10", correction: str = DEFAULT_CORRECTION
) -> DataFrame:
    """The ``comparisons`` table: paired model differences, memorization gaps and retention,
    p-values adjusted over each dataset's comparisons of one kind in one split."""
    metric, k = column.rsplit("_", 1)
    columns = [f.name for f in S.COMPARISONS_SCHEMA.fields if f.name not in ADJUSTED_COLUMNS]
    parts = [
        pairwise_comparisons(users, column),
        memorization_gap(users, column).withColumn("baseline", F.lit(None).cast("string")),
        retention(metrics, metric, int(k)).withColumn("baseline", F.lit(None).cast("string")),
    ]
    union = (
        parts[0]
        .select(*columns)
        .unionByName(parts[1].select(*columns))
        .unionByName(parts[2].select(*columns))
    )
    family = (S.DATASET, S.SPLIT, "kind", "metric")
    adjusted = adjust_p_values(union, correction, family, order=(S.CELL, S.MODEL, "baseline"))
    return adjusted.select(*[f.name for f in S.COMPARISONS_SCHEMA.fields])


# Poisson(1) cumulative probabilities for k = 0..7: a user's weight in one bootstrap replicate is
# the smallest k whose CDF reaches the user's hashed uniform draw (the Poisson bootstrap, which
# needs no resampling step and so runs as one aggregation).
_POISSON_1_CDF = (
    0.36787944,
    0.73575888,
    0.91969860,
    0.98101184,
    0.99634015,
    0.99940582,
    0.99991676,
    0.99998975,
)


def _poisson_weight(uniform: Column) -> Column:
    weight = F.lit(len(_POISSON_1_CDF))
    for k in reversed(range(len(_POISSON_1_CDF))):
        weight = F.when(uniform < F.lit(_POISSON_1_CDF[k]), F.lit(k)).otherwise(weight)
    return weight


def bootstrap_weight(user: Column, replicate: Column, seed: int) -> Column:
    """A user's Poisson(1) weight in one bootstrap replicate, from a seeded hash of the user and
    the replicate alone: the same user gets the same weight in replicate r in every table, so
    replicates of different settings, models or cells are paired."""
    bits = F.xxhash64(F.lit(f"intent-bootstrap:{seed}"), user, replicate)
    uniform = F.pmod(bits, F.lit(1 << 30)) / F.lit(float(1 << 30))
    return _poisson_weight(uniform)


def bootstrap_intervals(
    users: DataFrame, column: str, *, replicates: int = 200, seed: int = 0, keys: tuple[str, ...] = CELL_KEYS
) -> DataFrame:
    """User-level bootstrap 95% intervals (2.5th and 97.5th percentiles of replicate means).

    Deterministic: each (user, replicate) weight comes from a seeded hash, not a random stream.
    """
    draws = users.select(*keys, S.USER_ID, F.col(column).alias("_x")).crossJoin(
        F.broadcast(users.sparkSession.range(replicates).withColumnRenamed("id", "_r"))
    )
    weighted = draws.withColumn("_w", bootstrap_weight(F.col(S.USER_ID), F.col("_r"), seed))
    means = weighted.groupBy(*keys, "_r").agg((F.sum(F.col("_w") * F.col("_x")) / F.sum("_w")).alias("_mean"))
    return means.groupBy(*keys).agg(
        F.percentile("_mean", 0.025).alias("ci_low"), F.percentile("_mean", 0.975).alias("ci_high")
    )
