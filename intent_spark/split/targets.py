"""Targets (SPEC 3.5): per user and period, the first 100 events that follow an earlier event."""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from intent_spark.core import schema as S
from intent_spark.split.cells import ITEM_SEEN, cell_name

POSITION = "_position"
INDEX_IN_PERIOD = "_index_in_period"


def index_events(labelled: DataFrame) -> DataFrame:
    """Add each event's 1-based position in its user's history and its index as a target
    candidate within its period (0 for the user's very first event, which is never a target).

    One window partitioned by user serves both: past events precede future ones in (ts, seq),
    so a future event's index is its position minus the user's past events (or minus 1 when the
    user's history starts in the future).
    """
    by_user = Window.partitionBy(S.USER_ID)
    in_order = by_user.orderBy(S.TS, S.SEQ)
    n_past = F.count(F.when(F.col(S.PERIOD) == S.PAST, True)).over(by_user)
    position = F.row_number().over(in_order)
    indexed = labelled.withColumn(POSITION, position).withColumn("_n_past", n_past)
    index = F.when(F.col(S.PERIOD) == S.PAST, F.col(POSITION) - 1).otherwise(
        F.col(POSITION) - F.greatest(F.col("_n_past"), F.lit(1))
    )
    return indexed.withColumn(INDEX_IN_PERIOD, index).drop("_n_past")


def select_targets(
    labelled: DataFrame,
    seen: DataFrame,
    known_past_users: DataFrame,
    *,
    dataset: str,
    split: str,
    max_per_period: int = 100,
) -> DataFrame:
    """TARGETS_SCHEMA rows: one per target event, with its cell.

    ``labelled`` is the split population's events (``label_events``), ``seen`` the training
    items, ``known_past_users`` the fixed sample of known users scored on ``known_past``.
    """
    indexed = index_events(labelled)
    candidates = indexed.where((F.col(INDEX_IN_PERIOD) >= 1) & (F.col(INDEX_IN_PERIOD) <= max_per_period))
    sampled = known_past_users.select(S.USER_ID, F.lit(True).alias("_sampled"))
    with_item = candidates.join(seen.select(S.ITEM_ID, F.lit(True).alias(ITEM_SEEN)), S.ITEM_ID, "left").join(
        F.broadcast(sampled), S.USER_ID, "left"
    )
    is_known_past = ~F.col(S.IS_NEW) & (F.col(S.PERIOD) == S.PAST)
    kept = with_item.where(~is_known_past | F.col("_sampled").isNotNull())
    return kept.select(
        F.lit(dataset).alias(S.DATASET),
        F.lit(split).alias(S.SPLIT),
        cell_name(F.col(S.IS_NEW), F.col(S.PERIOD), F.coalesce(F.col(ITEM_SEEN), F.lit(False))).alias(S.CELL),
        S.USER_ID,
        S.ITEM_ID,
        S.TS,
        S.SEQ,
    )


def target_id(dataset: Column, split: Column, user: Column, seq: Column) -> Column:
    """A target's public name in exported tasks and submissions: the first 24 hex digits of
    sha256("dataset|split|user|seq"). Stable across reruns and machines (it depends on the
    target alone) and opaque: ``seq`` carries the raw file's line, which would point at the
    answer in the public release."""
    key = F.concat_ws("|", dataset, split, user, seq.cast("string"))
    return F.substring(F.sha2(key, 256), 1, 24)
