"""Each split's labelled population read back from the stored holdout and cutoffs, the one
place later stages (model inputs, leak counts) learn who is new and which period an event is in."""

from __future__ import annotations

from datetime import datetime

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from intent_spark.core import schema as S
from intent_spark.core.datasets import parse_dataset
from intent_spark.lake.tables import read_table, source_table
from intent_spark.split.cells import label_events, training_events

SPLITS = (S.TEST, S.VAL)


def split_cutoffs(spark: SparkSession, lake: str, dataset: str) -> dict[str, datetime]:
    """``{split: cutoff}`` from the splits table (two rows per dataset, never events)."""
    rows = read_table(spark, lake, S.SPLITS, dataset).select(S.SPLIT, S.CUTOFF).collect()
    return {r[S.SPLIT]: r[S.CUTOFF] for r in rows}


def labelled_populations(spark: SparkSession, lake: str, dataset: str) -> dict[str, DataFrame]:
    """Each split's population with ``is_new`` and ``period``, from the stored holdout and cutoffs.

    Test: every event. Validation: the test split's training events, relabelled by its own
    holdout and cutoff. A protocol variant has a test split only, labelled by its protocol.
    """
    from intent_spark.split.protocols import protocol_population

    if parse_dataset(dataset).protocol:
        return {S.TEST: protocol_population(spark, lake, dataset)}
    cutoffs = split_cutoffs(spark, lake, dataset)
    events = source_table(spark, lake, S.EVENTS, dataset).select(S.USER_ID, S.ITEM_ID, S.TS, S.SEQ)
    holdout = read_table(spark, lake, S.HOLDOUT, dataset)

    def users_of(name: str) -> DataFrame:
        return holdout.where(F.col(S.SPLIT) == name).select(S.USER_ID, S.IS_NEW)

    test = label_events(events, users_of(S.TEST), cutoffs[S.TEST])
    population = training_events(test).select(S.USER_ID, S.ITEM_ID, S.TS, S.SEQ)
    return {S.TEST: test, S.VAL: label_events(population, users_of(S.VAL), cutoffs[S.VAL])}
