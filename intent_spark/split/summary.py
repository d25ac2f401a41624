"""The split summary per dataset, as plain data: cutoffs, candidates, cells, history lengths,
seen shares, repeat rates and the event histogram. ``intent_spark.report.split`` writes it out."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import reduce
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from intent_spark.core import schema as S
from intent_spark.core.datasets import DatasetRef
from intent_spark.lake.context import Lake
from intent_spark.lake.tables import source_table
from intent_spark.split.cells import label_events, training_events

NAMES = (S.TEST, S.VAL)


def split_summary(
    lake: Lake, dataset: DatasetRef, labelled_of: Mapping[str, DataFrame] | None = None
) -> dict[str, Any]:
    """Everything the report shows, as plain data (small: a row per split, candidate and cell).

    ``labelled_of``: the split stage's own labelled population of each split (over the events it
    persisted), so the report reads no events again; without it they are labelled from the lake.
    Each figure is one Spark job over both splits (tagged by split), not one job per split.
    """
    labelled_of = labelled_of or {}
    events = source_table(lake.spark, lake.root, S.EVENTS, dataset).select(S.USER_ID, S.ITEM_ID, S.TS, S.SEQ)
    holdout = lake.read(S.HOLDOUT, dataset)
    targets = lake.read(S.TARGETS, dataset)
    # a row per split
    rows = {r[S.SPLIT]: r for r in lake.read(S.SPLITS, dataset).collect()}
    # the summary's two splits, whatever else a table may hold
    targets = targets.where(F.col(S.SPLIT).isin(*NAMES))
    labelled: dict[str, DataFrame] = {}
    owned: list[DataFrame] = []
    for name in NAMES:
        given = labelled_of.get(name)
        if given is None:  # read by the history, the seen shares and the histogram: joined once
            # The validation split lives inside the test split's training period.
            population = (
                events if name == S.TEST else events.where(F.col(S.TS) < F.lit(rows[S.TEST][S.CUTOFF]))
            )
            split_holdout = holdout.where(F.col(S.SPLIT) == name)
            given = label_events(population, split_holdout, rows[name][S.CUTOFF]).persist(
                StorageLevel.MEMORY_AND_DISK
            )
            owned.append(given)
        labelled[name] = given
    try:
        return _figures(lake, dataset, rows, labelled, targets)
    finally:
        for frame in owned:
            frame.unpersist()


def _figures(
    lake: Lake,
    dataset: DatasetRef,
    rows: Mapping[str, Any],
    labelled: Mapping[str, DataFrame],
    targets: DataFrame,
) -> dict[str, Any]:
    """The summary of each split of ``rows``, from its labelled population and its targets."""
    # Every collect here reads a small table or aggregate: a row per split, cell, candidate,
    # user count or month/day.
    training = _both_splits(lambda name: training_events(labelled[name]).select(S.USER_ID, S.ITEM_ID))
    history = {
        r[S.SPLIT]: r
        for r in training.groupBy(S.SPLIT, S.USER_ID)
        .count()
        .groupBy(S.SPLIT)
        .agg(
            F.mean("count").alias("mean"), F.median("count").alias("median"), F.count(F.lit(1)).alias("users")
        )
        .collect()
    }
    evaluation = targets.where(F.col(S.CELL) != "known_past")
    trained_users = training.select(S.SPLIT, S.USER_ID).distinct().withColumn("_trained", F.lit(True))
    trained_items = training.select(S.SPLIT, S.ITEM_ID).distinct().withColumn("_seen", F.lit(True))
    shares = {
        r[S.SPLIT]: r
        for r in evaluation.join(trained_users, [S.SPLIT, S.USER_ID], "left")
        .join(trained_items, [S.SPLIT, S.ITEM_ID], "left")
        .groupBy(S.SPLIT)
        .agg(
            (
                F.count_distinct(F.when(F.col("_trained"), F.col(S.USER_ID))) / F.count_distinct(S.USER_ID)
            ).alias("users_seen"),
            F.avg(F.col("_seen").isNotNull().cast("double")).alias("items_seen"),
        )
        .collect()
    }
    # An event's earlier events of its user and item all lie in the test population (the
    # validation one is its training part), so one pass flags the targets of both splits.
    repeats: dict[str, dict[str, tuple[int, int]]] = {name: {} for name in NAMES}
    for r in repeat_counts(labelled[S.TEST], targets).collect():  # per split and cell
        repeats[r[S.SPLIT]][r[S.CELL]] = (r.repeats, r.targets)
    cells: dict[str, dict[str, dict[str, Any]]] = {name: {} for name in NAMES}
    counts = lake.read(S.SPLIT_COUNTS, dataset).where(F.col(S.SPLIT).isin(*NAMES))
    for r in counts.collect():  # a row per split and cell
        cells[r[S.SPLIT]][r[S.CELL]] = {
            "users": r.n_users,
            "targets": r.n_targets,
            "below_floor": r.below_floor,
            "repeat_rate": _share(*repeats[r[S.SPLIT]].get(r[S.CELL], (0, 0))),
        }
    candidates: dict[str, list[dict[str, Any]]] = {name: [] for name in NAMES}
    listed = lake.read(S.SPLIT_CANDIDATES, dataset).where(F.col(S.SPLIT).isin(*NAMES))
    for r in listed.orderBy(S.SPLIT, "candidate").collect():  # a row per split and candidate
        candidates[r[S.SPLIT]].append(
            {
                "at": r.candidate.isoformat(),
                "share": r.train_share,
                "admissible": r.admissible,
                "chosen": r.chosen,
            }
        )
    # one row per split and month or day: a histogram, not events
    buckets = (
        _both_splits(
            lambda name: labelled[name].select(
                F.date_trunc(rows[name]["granularity"], F.col(S.TS)).alias("start"), S.IS_NEW
            )
        )
        .groupBy(S.SPLIT, "start")
        .agg(F.count(F.lit(1)).alias("events"), F.count(F.when(~F.col(S.IS_NEW), True)).alias("known"))
        .orderBy(S.SPLIT, "start")
        .collect()
    )
    summary: dict[str, Any] = {"dataset": dataset, "splits": {}}
    for name in NAMES:
        row, split_repeats = rows[name], repeats[name]
        split_history, split_shares = history.get(name), shares.get(name)
        summary["splits"][name] = {
            "cutoff": row[S.CUTOFF].isoformat(),
            "rule": row["rule"],
            "granularity": row["granularity"],
            S.ITEM_LEVEL: row[S.ITEM_LEVEL] or S.DEFAULT_ITEM_LEVEL,
            "train_share": row["train_share"],
            "horizon_days": row["horizon_days"],
            "holdout_fraction": row["holdout_fraction"],
            "seed": row["seed"],
            "training_users": split_history.users if split_history else 0,
            "history_mean": split_history["mean"] if split_history else None,
            "history_median": split_history["median"] if split_history else None,
            "evaluation_users_seen_in_training": split_shares.users_seen if split_shares else None,
            "target_items_seen_in_training": split_shares.items_seen if split_shares else None,
            "repeat_rate": _share(
                sum(r for r, _ in split_repeats.values()), sum(t for _, t in split_repeats.values())
            ),
            "cells": {
                cell: cells[name].get(
                    cell, {"users": 0, "targets": 0, "below_floor": True, "repeat_rate": None}
                )
                for cell in S.CELLS
            },
            "candidates": candidates[name],
            "histogram": [
                {"start": r.start.isoformat(), "events": r.events, "known": r.known}
                for r in buckets
                if r[S.SPLIT] == name
            ],
        }
    return summary


def _both_splits(rows_of: Callable[[str], DataFrame]) -> DataFrame:
    """The rows of each split of ``NAMES`` in one frame, each tagged with its split (``split``
    first), so that a figure is one job over both."""
    return reduce(
        DataFrame.unionByName, [rows_of(name).select(F.lit(name).alias(S.SPLIT), "*") for name in NAMES]
    )


def repeat_counts(population: DataFrame, split_targets: DataFrame) -> DataFrame:
    """Per split and cell, ``targets`` and ``repeats``: the targets whose item their user met
    before, in their context (every earlier event of the user in ``(ts, seq)`` order). Where users
    never repeat an item, the popularity and repeat-last references can only score by chance."""
    earlier = Window.partitionBy(S.USER_ID, S.ITEM_ID).orderBy(S.TS, S.SEQ)
    keys = [S.USER_ID, S.ITEM_ID, S.TS, S.SEQ]
    flagged = population.select(*keys, (F.row_number().over(earlier) > 1).alias("_repeat"))
    return (
        split_targets.select(*keys, S.SPLIT, S.CELL)
        .join(flagged, keys)
        .groupBy(S.SPLIT, S.CELL)
        .agg(F.count(F.lit(1)).alias("targets"), F.count(F.when(F.col("_repeat"), True)).alias("repeats"))
    )


def _share(part: int, whole: int) -> float | None:
    return part / whole if whole else None
