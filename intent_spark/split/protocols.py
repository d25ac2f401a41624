"""Other evaluation protocols on the same events, beside the INTENT cells.

- ``leave_last_out``: the usual per-user split. Each user's last event is their target and every
  other event trains, so a training event of one user can follow another user's target in
  time: the model has seen the future it is scored on.
- ``horizon``: HORIZON's Task 1 (Goel et al.). One global cutoff (the INTENT test cutoff) and
  the INTENT test holdout; training is known users' events before the cutoff except each one's
  last, which is a target (1a). Known users' events after the cutoff are 1b; held-out users'
  last event before the cutoff is 1c and their events after it 1d.

A protocol is run as a variant dataset (``amazon_hk.leave_last_out``) with its own holdout,
splits and targets tables, test split only; model inputs, training, scoring and metrics are the
INTENT stages unchanged. Its events are labelled like the INTENT split's: ``is_new`` and a
``period``, where ``held_out`` marks an event before the cutoff that the protocol keeps out of
training, so ``training_events`` (known users, ``past``) is the protocol's training set.
``targets_preceding_training`` measures the leak; `verify` applies it everywhere.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from intent_spark.core import schema as S
from intent_spark.core.datasets import HORIZON, LEAVE_LAST_OUT, PROTOCOLS, DatasetRef
from intent_spark.core.errors import IntentError
from intent_spark.lake.context import Lake
from intent_spark.lake.tables import ingested_source
from intent_spark.split.conf import SplitConf
from intent_spark.split.holdout import assign_holdout
from intent_spark.split.split_tables import write_counts_and_checksums

HELD_OUT = "held_out"
# (held-out event of a known user, of a new user, later event of a known user, of a new user)
PROTOCOL_CELLS = {
    LEAVE_LAST_OUT: (LEAVE_LAST_OUT, LEAVE_LAST_OUT, LEAVE_LAST_OUT, LEAVE_LAST_OUT),
    HORIZON: ("horizon_1a", "horizon_1c", "horizon_1b", "horizon_1d"),
}
CELL_LABELS = {
    LEAVE_LAST_OUT: "leave-last-out: every user's last event",
    "horizon_1a": "HORIZON 1a: known users' last event before the cutoff",
    "horizon_1b": "HORIZON 1b: known users' events after the cutoff",
    "horizon_1c": "HORIZON 1c: held-out users' last event before the cutoff",
    "horizon_1d": "HORIZON 1d: held-out users' events after the cutoff",
}
FROM_END = "_from_end"
USER_EVENTS = "_user_events"


def leave_last_out(events: DataFrame) -> tuple[DataFrame, DataFrame]:
    """(training, targets): each user's last event in ``(ts, seq)`` order is their target when
    they have an earlier one; every other event is training."""
    labelled = label_leave_last_out(events)
    held = F.col(S.PERIOD) == HELD_OUT
    return labelled.where(~held).drop(S.IS_NEW, S.PERIOD), labelled.where(held).drop(S.IS_NEW, S.PERIOD)


def label_leave_last_out(events: DataFrame) -> DataFrame:
    """Every user known; each user's last event (with an earlier one) ``held_out``, the rest
    ``past``."""
    by_user = Window.partitionBy(S.USER_ID)
    from_end = F.row_number().over(by_user.orderBy(F.col(S.TS).desc(), F.col(S.SEQ).desc()))
    last = (F.col(FROM_END) == 1) & (F.col(USER_EVENTS) >= 2)
    return (
        events.withColumn(FROM_END, from_end)
        .withColumn(USER_EVENTS, F.count(F.lit(1)).over(by_user))
        .withColumn(S.IS_NEW, F.lit(False))
        .withColumn(S.PERIOD, F.when(last, F.lit(HELD_OUT)).otherwise(F.lit(S.PAST)))
        .drop(FROM_END, USER_EVENTS)
    )


def label_horizon(events: DataFrame, holdout: DataFrame, cutoff: datetime) -> DataFrame:
    """Events after the cutoff ``future``; before it each user's last event (with an earlier one
    before the cutoff) ``held_out`` and the rest ``past``; ``is_new`` from ``holdout``."""
    before = F.col(S.TS) < F.lit(cutoff)
    by_user = Window.partitionBy(S.USER_ID)
    by_side = Window.partitionBy(S.USER_ID, "_before").orderBy(F.col(S.TS).desc(), F.col(S.SEQ).desc())
    last = F.col("_before") & (F.col(FROM_END) == 1) & (F.col(USER_EVENTS) >= 2)
    period = F.when(~F.col("_before"), F.lit(S.FUTURE)).when(last, F.lit(HELD_OUT)).otherwise(F.lit(S.PAST))
    return (
        events.join(holdout.select(S.USER_ID, S.IS_NEW), S.USER_ID)
        .withColumn("_before", before)
        .withColumn(FROM_END, F.row_number().over(by_side))
        .withColumn(USER_EVENTS, F.count(F.when(before, True)).over(by_user))
        .withColumn(S.PERIOD, period)
        .drop("_before", FROM_END, USER_EVENTS)
    )


def protocol_targets(
    labelled: DataFrame, protocol: str, *, dataset: str, split: str, max_per_period: int
) -> DataFrame:
    """TARGETS_SCHEMA rows: every held-out event, and each user's first ``max_per_period``
    events after the cutoff that follow an earlier event."""
    known_held, new_held, known_later, new_later = PROTOCOL_CELLS[protocol]
    in_order = Window.partitionBy(S.USER_ID).orderBy(S.TS, S.SEQ)
    in_period = Window.partitionBy(S.USER_ID, S.PERIOD).orderBy(S.TS, S.SEQ)
    indexed = labelled.withColumn("_position", F.row_number().over(in_order)).withColumn(
        "_in_period", F.row_number().over(in_period)
    )
    held = F.col(S.PERIOD) == HELD_OUT
    later = (
        (F.col(S.PERIOD) == S.FUTURE) & (F.col("_position") >= 2) & (F.col("_in_period") <= max_per_period)
    )
    new = F.col(S.IS_NEW)
    cell = F.when(held, F.when(new, F.lit(new_held)).otherwise(F.lit(known_held))).otherwise(
        F.when(new, F.lit(new_later)).otherwise(F.lit(known_later))
    )
    return indexed.where(held | later).select(
        F.lit(dataset).alias(S.DATASET),
        F.lit(split).alias(S.SPLIT),
        cell.alias(S.CELL),
        S.USER_ID,
        S.ITEM_ID,
        S.TS,
        S.SEQ,
    )


def _source_test_split(lake: Lake, ref: DatasetRef) -> dict:
    """The source's test split row: the protocol's cutoff, holdout fraction and seed."""
    prerequisite = f"split {ref.source} first: {ref.name} takes its test cutoff and holdout"
    if not lake.has(S.SPLITS):
        raise IntentError(f"{ref.name}: {prerequisite}")
    rows = lake.read(S.SPLITS, ref.source).where(F.col(S.SPLIT) == S.TEST).collect()
    if not rows:  # one row per split
        raise IntentError(f"{ref.name}: {prerequisite}")
    return rows[0].asDict()


def protocol_holdout(
    events: DataFrame, protocol: str, dataset: str, source_split: dict, key: str
) -> DataFrame:
    """HOLDOUT_SCHEMA rows of the protocol's test split: nobody new under leave-last-out, the
    INTENT test holdout (same users, same seed) under HORIZON."""
    if protocol == LEAVE_LAST_OUT:
        return (
            events.select(S.USER_ID)
            .distinct()
            .select(
                F.lit(dataset).alias(S.DATASET),
                F.lit(S.TEST).alias(S.SPLIT),
                S.USER_ID,
                F.lit(False).alias(S.IS_NEW),
            )
        )
    return assign_holdout(
        events,
        fraction=source_split["holdout_fraction"],
        seed=source_split["seed"],
        dataset=dataset,
        split=S.TEST,
        key=key,
    )


def label_protocol(events: DataFrame, protocol: str, holdout: DataFrame, cutoff: datetime) -> DataFrame:
    if protocol == LEAVE_LAST_OUT:
        return label_leave_last_out(events)
    return label_horizon(events, holdout, cutoff)


def protocol_population(lake: Lake, dataset: DatasetRef) -> DataFrame:
    """The labelled test population of a protocol variant, from its stored holdout and cutoff."""
    assert dataset.protocol is not None
    events = lake.read(S.EVENTS, dataset.source).select(S.USER_ID, S.ITEM_ID, S.TS, S.SEQ)
    split = lake.read(S.SPLITS, dataset).where(F.col(S.SPLIT) == S.TEST).first()  # one row
    holdout = lake.read(S.HOLDOUT, dataset).where(F.col(S.SPLIT) == S.TEST)
    return label_protocol(events, dataset.protocol, holdout, split[S.CUTOFF])


def run_protocol_split(lake: Lake, dataset: DatasetRef, conf: SplitConf) -> None:
    """Write holdout, splits, targets, split_counts and checksums of a protocol variant
    (``amazon_hk.horizon``); its source must be split first. Of ``conf`` it takes the targets
    per period and the user floor, which its counts record as the INTENT split's do."""
    protocol = dataset.protocol
    if protocol is None:
        raise IntentError(f"{dataset}: not a protocol variant (known: {', '.join(PROTOCOLS)})")
    source = _source_test_split(lake, dataset)
    events = lake.read(S.EVENTS, dataset.source).select(S.USER_ID, S.ITEM_ID, S.TS, S.SEQ)
    lake.progress(f"{dataset}: {protocol} split at {source[S.CUTOFF]:%Y-%m-%d}")
    key = ingested_source(lake.spark, lake.root, dataset)
    lake.write(protocol_holdout(events, protocol, dataset, source, key), S.HOLDOUT, dataset)
    holdout = lake.read(S.HOLDOUT, dataset)
    labelled = label_protocol(events, protocol, holdout, source[S.CUTOFF])
    share = labelled.agg(
        (F.count(F.when(~F.col(S.IS_NEW) & (F.col(S.PERIOD) == S.PAST), True)) / F.count(F.lit(1))).alias("s")
    ).first()  # one aggregate row
    row: tuple[Any, ...] = (
        dataset,
        S.TEST,
        source[S.CUTOFF],
        source["granularity"],
        float(share.s),
        [],
        protocol,
        float(source["horizon_days"]),
        float(source["holdout_fraction"]),
        int(source["seed"]),
        source[S.ITEM_LEVEL],
    )
    lake.write(lake.spark.createDataFrame([row], S.SPLITS_SCHEMA), S.SPLITS, dataset)
    lake.write(lake.spark.createDataFrame([], S.SPLIT_CANDIDATES_SCHEMA), S.SPLIT_CANDIDATES, dataset)
    targets = protocol_targets(
        labelled, protocol, dataset=dataset, split=S.TEST, max_per_period=conf.max_targets_per_period
    )
    lake.write(targets, S.TARGETS, dataset)
    write_counts_and_checksums(lake, dataset, conf.floor_users)
