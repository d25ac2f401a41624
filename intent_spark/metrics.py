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


def cell_metrics(users: DataFrame, floor_users: int) -> DataFrame:
    """METRICS_SCHEMA rows: each cell's mean over users with its normal 95% interval.

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
    progress(f"{dataset}: cell metrics with 95% intervals")
    write_dataset(cell_metrics(users, floor_users), lake, S.METRICS_TABLE, dataset)
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
