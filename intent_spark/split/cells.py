"""Cells (SPEC 3.4): known/new user x before/after the cutoff x seen/new item."""

from __future__ import annotations

from datetime import datetime

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from intent_spark.core import schema as S

ITEM_SEEN = "_item_seen"


def label_events(events: DataFrame, holdout: DataFrame, cutoff: datetime) -> DataFrame:
    """Events of a split's population with ``is_new`` and ``period`` ('past' before the cutoff).

    ``holdout`` (one row per user of the population) decides who is in the population: events
    of users it does not list are dropped.
    """
    return with_period(events.join(holdout.select(S.USER_ID, S.IS_NEW), S.USER_ID), cutoff)


def with_period(flagged: DataFrame, cutoff: datetime) -> DataFrame:
    """Add ``period``: 'past' before the cutoff, 'future' at or after it."""
    return flagged.withColumn(
        S.PERIOD, F.when(F.col(S.TS) < F.lit(cutoff), F.lit(S.PAST)).otherwise(F.lit(S.FUTURE))
    )


def training_events(labelled: DataFrame) -> DataFrame:
    """Known users' events before the cutoff: the only events a model may train on."""
    return labelled.where(~F.col(S.IS_NEW) & (F.col(S.PERIOD) == S.PAST))


def seen_items(labelled: DataFrame) -> DataFrame:
    """One row per item that occurs in the training events."""
    return training_events(labelled).select(S.ITEM_ID).distinct()


def cell_name(is_new: Column, period: Column, item_seen: Column) -> Column:
    """The cell of a target: ``known_past`` is one cell; the others split on the item."""
    who = F.when(is_new, F.lit("new")).otherwise(F.lit("known"))
    what = F.when(item_seen, F.lit("seen")).otherwise(F.lit("new"))
    return F.when(~is_new & (period == S.PAST), F.lit("known_past")).otherwise(
        F.concat_ws("_", who, period, what)
    )
