"""The split summary per dataset, as plain data: cutoffs, candidates, cells, history lengths,
seen shares, repeat rates and the event histogram. ``intent_spark.report.split`` writes it out."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from intent_spark.core import schema as S
from intent_spark.core.datasets import DatasetRef
from intent_spark.lake.tables import read_table, source_table
from intent_spark.split.cells import label_events, training_events


def split_summary(
    spark: SparkSession, lake: str, dataset: DatasetRef, labelled_of: Mapping[str, DataFrame] | None = None
) -> dict[str, Any]:
    """Everything the report shows, as plain data (small: a row per split, candidate and cell).

    ``labelled_of``: the split stage's own labelled population of each split (over the events it
    persisted), so the report reads no events again; without it they are labelled from the lake.
    """
    labelled_of = labelled_of or {}
    events = source_table(spark, lake, S.EVENTS, dataset).select(S.USER_ID, S.ITEM_ID, S.TS, S.SEQ)
    holdout = read_table(spark, lake, S.HOLDOUT, dataset)
    targets = read_table(spark, lake, S.TARGETS, dataset)
    summary: dict[str, Any] = {"dataset": dataset, "splits": {}}
    # Every collect below reads a small table: a row per split, cell, candidate or month/day.
    rows = {r[S.SPLIT]: r for r in read_table(spark, lake, S.SPLITS, dataset).collect()}
    for name in (S.TEST, S.VAL):
        row = rows[name]
        split_holdout = holdout.where(F.col(S.SPLIT) == name)
        # The validation split lives inside the test split's training period.
        population = events if name == S.TEST else events.where(F.col(S.TS) < F.lit(rows[S.TEST][S.CUTOFF]))
        # read by the history, the seen shares and the histogram: joined once
        labelled = labelled_of.get(name)
        if labelled is None:
            labelled = label_events(population, split_holdout, row[S.CUTOFF]).persist(
                StorageLevel.MEMORY_AND_DISK
            )
        training = training_events(labelled)
        history = (
            training.groupBy(S.USER_ID)
            .count()
            .agg(
                F.mean("count").alias("mean"),
                F.median("count").alias("median"),
                F.count(F.lit(1)).alias("users"),
            )
            .first()
        )
        evaluation = targets.where((F.col(S.SPLIT) == name) & (F.col(S.CELL) != "known_past"))
        trained_users = training.select(S.USER_ID).distinct().withColumn("_trained", F.lit(True))
        trained_items = training.select(S.ITEM_ID).distinct().withColumn("_seen", F.lit(True))
        shares = (
            evaluation.join(trained_users, S.USER_ID, "left")
            .join(trained_items, S.ITEM_ID, "left")
            .agg(
                (
                    F.count_distinct(F.when(F.col("_trained"), F.col(S.USER_ID)))
                    / F.count_distinct(S.USER_ID)
                ).alias("users_seen"),
                F.avg(F.col("_seen").isNotNull().cast("double")).alias("items_seen"),
            )
            .first()
        )
        repeats = {
            r[S.CELL]: (r.repeats, r.targets)
            for r in repeat_counts(labelled, targets.where(F.col(S.SPLIT) == name)).collect()  # per cell
        }
        cells = {
            r[S.CELL]: {
                "users": r.n_users,
                "targets": r.n_targets,
                "below_floor": r.below_floor,
                "repeat_rate": _share(*repeats.get(r[S.CELL], (0, 0))),
            }
            for r in read_table(spark, lake, S.SPLIT_COUNTS, dataset).where(F.col(S.SPLIT) == name).collect()
        }
        candidates = [
            {
                "at": r.candidate.isoformat(),
                "share": r.train_share,
                "admissible": r.admissible,
                "chosen": r.chosen,
            }
            for r in read_table(spark, lake, S.SPLIT_CANDIDATES, dataset)
            .where(F.col(S.SPLIT) == name)
            .orderBy("candidate")
            .collect()
        ]
        granularity = row["granularity"]
        buckets = labelled.groupBy(F.date_trunc(granularity, F.col(S.TS)).alias("start")).agg(
            F.count(F.lit(1)).alias("events"), F.count(F.when(~F.col(S.IS_NEW), True)).alias("known")
        )
        summary["splits"][name] = {
            "cutoff": row[S.CUTOFF].isoformat(),
            "rule": row["rule"],
            "granularity": granularity,
            S.ITEM_LEVEL: row[S.ITEM_LEVEL] or S.DEFAULT_ITEM_LEVEL,
            "train_share": row["train_share"],
            "horizon_days": row["horizon_days"],
            "holdout_fraction": row["holdout_fraction"],
            "seed": row["seed"],
            "training_users": history.users if history else 0,
            "history_mean": history["mean"] if history else None,
            "history_median": history["median"] if history else None,
            "evaluation_users_seen_in_training": shares.users_seen if shares else None,
            "target_items_seen_in_training": shares.items_seen if shares else None,
            "repeat_rate": _share(sum(r for r, _ in repeats.values()), sum(t for _, t in repeats.values())),
            "cells": {
                cell: cells.get(cell, {"users": 0, "targets": 0, "below_floor": True, "repeat_rate": None})
                for cell in S.CELLS
            },
            "candidates": candidates,
            # one row per month or day: a histogram, not events
            "histogram": [
                {"start": r.start.isoformat(), "events": r.events, "known": r.known}
                for r in buckets.orderBy("start").collect()
            ],
        }
        if name not in labelled_of:
            labelled.unpersist()
    return summary


def repeat_counts(population: DataFrame, split_targets: DataFrame) -> DataFrame:
    """Per cell, ``targets`` and ``repeats``: the targets whose item their user met before, in
    their context (every earlier event of the user in ``(ts, seq)`` order). Where users never
    repeat an item, the popularity and repeat-last references can only score by chance."""
    earlier = Window.partitionBy(S.USER_ID, S.ITEM_ID).orderBy(S.TS, S.SEQ)
    keys = [S.USER_ID, S.ITEM_ID, S.TS, S.SEQ]
    flagged = population.select(*keys, (F.row_number().over(earlier) > 1).alias("_repeat"))
    return (
        split_targets.select(*keys, S.CELL)
        .join(flagged, keys)
        .groupBy(S.CELL)
        .agg(F.count(F.lit(1)).alias("targets"), F.count(F.when(F.col("_repeat"), True)).alias("repeats"))
    )


def _share(part: int, whole: int) -> float | None:
    return part / whole if whole else None
