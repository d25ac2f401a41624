"""Metrics from ranks (SPEC 5), in Spark: per target, per user, per cell with 95% intervals.

Per target: NDCG@K = 1/log2(1 + rank) if rank <= K; HR@K = Recall@K = [rank <= K];
Precision@K = HR@K / K; MRR@K = 1/rank if rank <= K. A user's score in a cell is the mean over
their targets; a cell's score is the mean over users, with a normal 95% interval over users.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from intent_spark import schema as S

KS = (1, 5, 10, 20, 50, 100)
METRICS = ("ndcg", "hr", "recall", "precision", "mrr")
Z_95 = 1.959963984540054
TIE_RATE = "tie_rate"
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


def user_metrics(ranks: DataFrame) -> DataFrame:
    """One row per dataset, split, cell, model and user: the mean of every metric over the
    user's targets, their number, and the share of them ranked inside a tie."""
    rank = F.col(S.RANK)
    means = [
        F.avg(target_metric(metric, k, rank)).alias(metric_column(metric, k))
        for metric in METRICS
        for k in KS
    ]
    tied = F.avg(F.when(F.col(S.TIED) > 0, 1.0).otherwise(0.0)).alias(TIE_RATE)
    return ranks.groupBy(*USER_KEYS).agg(F.count(F.lit(1)).alias("n_targets"), tied, *means)


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
    return by_metric.unionByName(ties).withColumn("below_floor", F.col("n_users") < floor_users)


def mlflow_name(split: str, cell: str, metric: str, k: int) -> str:
    """The stable MLflow metric name of SPEC 8: ``<split>.<cell>.<metric>_<k>``."""
    return f"{split}.{cell}.{metric}" if metric == TIE_RATE else f"{split}.{cell}.{metric}_{k}"


def evaluate(
    spark,
    lake: str,
    dataset: str,
    *,
    floor_users: int,
    bootstrap: int = 0,
    tracking_uri: str | None = None,
    progress=lambda _: None,
) -> int:
    """Write ``user_metrics`` and ``metrics`` from ``ranks``; log each model's cell metrics to its
    MLflow training run. Returns the number of metric rows."""
    from intent_spark.io import read_table, write_dataset

    ranks = read_table(spark, lake, S.RANKS, dataset)
    progress(f"{dataset}: per-user metrics")
    write_dataset(user_metrics(ranks), lake, S.USER_METRICS, dataset)
    users = read_table(spark, lake, S.USER_METRICS, dataset)
    how = f"{bootstrap} bootstrap replicates" if bootstrap else "normal"
    progress(f"{dataset}: cell metrics with 95% intervals ({how})")
    write_dataset(cell_metrics(users, floor_users, bootstrap), lake, S.METRICS_TABLE, dataset)
    rows = read_table(spark, lake, S.METRICS_TABLE, dataset).collect()  # cells x models x metrics
    if tracking_uri:
        import mlflow

        from intent_spark.tracking import find_run

        for model in sorted({r[S.MODEL] for r in rows}):
            run = find_run(tracking_uri, dataset, model)
            values = {
                mlflow_name(r[S.SPLIT], r[S.CELL], r.metric, r.k): r.value
                for r in rows
                if r[S.MODEL] == model
            }
            with mlflow.start_run(run_id=run.info.run_id):
                mlflow.log_metrics(values)
            progress(f"{dataset} {model}: {len(values)} metrics logged to MLflow run {run.info.run_id}")
    return len(rows)


def normal_p_value(z: float) -> float:
    """Two-sided p-value of a standard normal statistic."""
    import math

    return math.erfc(abs(z) / math.sqrt(2.0))


def paired_difference(
    users: DataFrame, column: str, left: Column, right: Column, keys: tuple[str, ...]
) -> DataFrame:
    """Per-user differences ``left - right`` of one metric over the users present on both sides,
    grouped by ``keys``: mean, normal 95% interval, users and the z statistic.

    ``left`` and ``right`` select rows of ``user_metrics`` (two models in one cell, or two cells
    of one model); pairing by user removes the between-user variance both sides share.
    """
    side = [*keys, S.USER_ID]
    a = users.where(left).select(*side, F.col(column).alias("_left"))
    b = users.where(right).select(*side, F.col(column).alias("_right"))
    paired = a.join(b, side).withColumn("_d", F.col("_left") - F.col("_right"))
    n = F.count(F.lit(1))
    sd = F.coalesce(F.stddev_samp("_d"), F.lit(0.0))
    mean = F.avg("_d")
    stats = paired.groupBy(*keys).agg(mean.alias("difference"), sd.alias("_sd"), n.alias("n_users"))
    half = F.lit(Z_95) * F.col("_sd") / F.sqrt("n_users")
    z = F.when(F.col("_sd") > 0, F.col("difference") / (F.col("_sd") / F.sqrt("n_users")))
    return stats.select(
        *keys,
        "difference",
        (F.col("difference") - half).alias("ci_low"),
        (F.col("difference") + half).alias("ci_high"),
        "n_users",
        z.alias("z"),
    )


def compare_models(users: DataFrame, model_a: str, model_b: str, column: str = "ndcg_10") -> DataFrame:
    """``model_a - model_b`` per dataset, split and cell, on the same users' targets."""
    keys = (S.DATASET, S.SPLIT, S.CELL)
    return paired_difference(users, column, F.col(S.MODEL) == model_a, F.col(S.MODEL) == model_b, keys)


MEMORIZATION_PAIRS = (
    ("known_future", "known_future_seen", "known_future_new"),
    ("new_past", "new_past_seen", "new_past_new"),
    ("new_future", "new_future_seen", "new_future_new"),
)


def memorization_gap(users: DataFrame, column: str = "ndcg_10") -> DataFrame:
    """Seen minus new, for the same users and period (SPEC 5), per dataset, split and model."""
    keys = (S.DATASET, S.SPLIT, S.MODEL)
    gaps = [
        paired_difference(users, column, F.col(S.CELL) == seen, F.col(S.CELL) == new, keys).withColumn(
            "group", F.lit(group)
        )
        for group, seen, new in MEMORIZATION_PAIRS
    ]
    union = gaps[0]
    for frame in gaps[1:]:
        union = union.unionByName(frame)
    return union


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


def bootstrap_intervals(
    users: DataFrame, column: str, *, replicates: int = 200, seed: int = 0, keys: tuple[str, ...] = CELL_KEYS
) -> DataFrame:
    """User-level bootstrap 95% intervals (2.5th and 97.5th percentiles of replicate means).

    Deterministic: each (user, replicate) weight comes from a seeded hash, not a random stream.
    """
    draws = users.select(*keys, S.USER_ID, F.col(column).alias("_x")).crossJoin(
        F.broadcast(users.sparkSession.range(replicates).withColumnRenamed("id", "_r"))
    )
    bits = F.xxhash64(F.lit(f"intent-bootstrap:{seed}"), F.col(S.USER_ID), F.col("_r"))
    uniform = F.pmod(bits, F.lit(1 << 30)) / F.lit(float(1 << 30))
    weighted = draws.withColumn("_w", _poisson_weight(uniform))
    means = weighted.groupBy(*keys, "_r").agg((F.sum(F.col("_w") * F.col("_x")) / F.sum("_w")).alias("_mean"))
    return means.groupBy(*keys).agg(
        F.percentile("_mean", 0.025).alias("ci_low"), F.percentile("_mean", 0.975).alias("ci_high")
    )
