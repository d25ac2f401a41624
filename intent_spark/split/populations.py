"""Each split's labelled population read back from the stored holdout and cutoffs, the one
place later stages (model inputs, leak counts) learn who is new and which period an event is in."""

from __future__ import annotations

from datetime import datetime

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from intent_spark.core import schema as S
from intent_spark.core.datasets import DatasetRef
from intent_spark.lake.context import Lake
from intent_spark.lake.tables import ingest_record, source_table
from intent_spark.split.cells import training_events, with_period
from intent_spark.split.holdout import is_held_out

SPLITS = (S.TEST, S.VAL)


def split_cutoffs(lake: Lake, dataset: str) -> dict[str, datetime]:
    """``{split: cutoff}`` from the splits table (two rows per dataset, never events)."""
    rows = lake.read(S.SPLITS, dataset).select(S.SPLIT, S.CUTOFF).collect()
    return {r[S.SPLIT]: r[S.CUTOFF] for r in rows}


def labelled_populations(
    lake: Lake, dataset: DatasetRef, events: DataFrame | None = None
) -> dict[str, DataFrame]:
    """Each split's population with ``is_new`` and ``period``, from the stored cutoffs and the
    holdout's own hash (a function of the user id, the seed and the fraction the splits table
    records), so no population is joined to the holdout table again.

    Test: every event. Validation: the test split's training events, relabelled by its own
    holdout and cutoff. A protocol variant has a test split only, labelled by its protocol.
    ``events``: the dataset's events when the caller has them (persisted), else read here.
    """
    from intent_spark.split.protocols import protocol_population

    if dataset.protocol:
        return {S.TEST: protocol_population(lake, dataset)}
    rows = {r[S.SPLIT]: r for r in lake.read(S.SPLITS, dataset).collect()}  # two rows
    key = ingest_record(lake.spark, lake.root, dataset)[0]
    if events is None:
        events = source_table(lake.spark, lake.root, S.EVENTS, dataset).select(
            S.USER_ID, S.ITEM_ID, S.TS, S.SEQ
        )

    def labelled(population: DataFrame, split: str) -> DataFrame:
        row = rows[split]
        held_out = is_held_out(F.col(S.USER_ID), row["holdout_fraction"], row["seed"], key, split)
        return with_period(population.withColumn(S.IS_NEW, held_out), row[S.CUTOFF])

    test = labelled(events, S.TEST)
    population = training_events(test).select(S.USER_ID, S.ITEM_ID, S.TS, S.SEQ)
    return {S.TEST: test, S.VAL: labelled(population, S.VAL)}
