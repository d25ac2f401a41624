"""The split stage: events -> holdout, splits, targets (SPEC 3), with counts and checksums.

Test split: 10% of users held out by hash; the cutoff by the rule over all events. Validation
split: the same inside the test split's training period (known users, before the test cutoff),
with its own holdout, so every test cell has a validation twin built the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from intent_spark.core import schema as S
from intent_spark.core.datasets import DatasetRef
from intent_spark.core.faults import fault_point
from intent_spark.core.progress import Progress, silent
from intent_spark.lake.checksum import Checksum, row_hash, table_checksums
from intent_spark.lake.context import Lake
from intent_spark.lake.tables import ingest_record, persisted_events
from intent_spark.split.cells import seen_items, training_events, with_period
from intent_spark.split.conf import SplitConf
from intent_spark.split.cutoff import (
    CutoffChoice,
    buckets_of,
    choose_cutoff,
    choose_granularity,
    collect_days,
    share_before,
    span_of,
)
from intent_spark.split.holdout import is_held_out, sample_users
from intent_spark.split.targets import select_targets

CHECKSUMMED_TABLES = (S.HOLDOUT, S.SPLITS, S.SPLIT_CANDIDATES, S.TARGETS, S.SPLIT_COUNTS)


@dataclass(frozen=True)
class SplitOutcome:
    """One split's choice and its in-memory (lazy) tables."""

    name: str
    choice: CutoffChoice
    holdout: DataFrame
    labelled: DataFrame
    targets: DataFrame
    horizon_days: float


def _manual_share(labelled_all: DataFrame, cutoff: datetime) -> float:
    row = labelled_all.agg(
        F.count(F.when(~F.col(S.IS_NEW) & (F.col(S.TS) < F.lit(cutoff)), True)).alias("before"),
        F.count(F.lit(1)).alias("total"),
    ).first()
    assert row is not None
    return row.before / row.total


def flag_users(population: DataFrame, conf: SplitConf, key: str, split: str) -> DataFrame:
    """The population with ``is_new``: is_new is a function of the user id alone, so events are
    flagged without a join."""
    return population.withColumn(
        S.IS_NEW, is_held_out(F.col(S.USER_ID), conf.holdout_fraction, conf.seed, key, split)
    )


def holdout_rows(flagged: DataFrame, dataset: str, split: str) -> DataFrame:
    """HOLDOUT_SCHEMA rows from flagged events: one per distinct user of the population."""
    return flagged.select(
        F.lit(dataset).alias(S.DATASET), F.lit(split).alias(S.SPLIT), S.USER_ID, S.IS_NEW
    ).distinct()


def split_population(
    population: DataFrame,
    *,
    dataset: str,
    split: str,
    conf: SplitConf,
    manual: datetime | None,
    key: str | None = None,
) -> SplitOutcome:
    """Holdout, cutoff, cells and targets of one split over its population of events; ``key``
    names the users' source for the holdout hash (default ``dataset``).

    One aggregation reads the population for the whole cutoff rule (its per-day histogram gives
    the span, the month or day buckets and a manual cutoff's share); everything else is lazy.
    The caller persists the population when it is read more than once.
    """
    key = key or dataset
    if not 0.0 < conf.holdout_fraction < 1.0:
        raise ValueError(f"holdout_fraction must be in (0, 1), got {conf.holdout_fraction}")
    flagged = flag_users(population, conf, key, split)
    days = collect_days(flagged)
    first, last = span_of(days)
    granularity = choose_granularity(first, last, conf.rule)
    manual_share = None
    if manual is not None:
        manual_share = share_before(days, manual)
        if manual_share is None:  # a cutoff inside a day: counted from the events themselves
            manual_share = _manual_share(flagged, manual)
    choice = choose_cutoff(
        buckets_of(days, granularity),
        granularity,
        conf.rule,
        dataset=dataset,
        split=split,
        manual=manual,
        manual_share=manual_share,
    )
    holdout = holdout_rows(flagged, dataset, split)
    labelled = with_period(flagged, choice.cutoff)
    known_users = holdout.where(~F.col(S.IS_NEW))
    targets = select_targets(
        labelled,
        seen_items(labelled),
        sample_users(known_users, conf.known_past_users, conf.seed, key, split),
        dataset=dataset,
        split=split,
        max_per_period=conf.max_targets_per_period,
    )
    horizon = (last - choice.cutoff).total_seconds() / 86_400
    return SplitOutcome(split, choice, holdout, labelled, targets, horizon)


def splits_rows(
    spark: SparkSession, dataset: str, conf: SplitConf, outcomes: list[SplitOutcome], item_level: str
) -> DataFrame:
    rows = [
        (
            dataset,
            o.name,
            o.choice.cutoff,
            o.choice.granularity,
            float(o.choice.share),
            list(o.choice.admissible),
            o.choice.rule,
            float(o.horizon_days),
            float(conf.holdout_fraction),
            int(conf.seed),
            item_level,
        )
        for o in outcomes
    ]
    return spark.createDataFrame(rows, S.SPLITS_SCHEMA)


def candidate_rows(spark: SparkSession, dataset: str, outcomes: list[SplitOutcome]) -> DataFrame:
    rows = [
        (dataset, o.name, c.at, c.events_before, float(c.share), c.admissible, c.at == o.choice.cutoff)
        for o in outcomes
        for c in o.choice.candidates
    ]
    return spark.createDataFrame(rows, S.SPLIT_CANDIDATES_SCHEMA)


def cell_counts(targets: DataFrame, floor_users: int, *more: Column) -> DataFrame:
    """SPLIT_COUNTS rows: users and targets per dataset, split and cell (then ``more``
    aggregates of each cell, where given)."""
    return (
        targets.groupBy(S.DATASET, S.SPLIT, S.CELL)
        .agg(F.count_distinct(S.USER_ID).alias("n_users"), F.count(F.lit(1)).alias("n_targets"), *more)
        .withColumn("below_floor", F.col("n_users") < floor_users)
        .withColumn(S.FLOOR_USERS, F.lit(floor_users).cast("long"))
    )


def recorded_floor(lake: Lake, dataset: str) -> int | None:
    """The user floor a dataset's split applied (``split_counts.floor_users``): what evaluate
    flags its cells at and the report shows. None for a split written before the floor was kept."""
    counts = lake.read(S.SPLIT_COUNTS, dataset)
    if S.FLOOR_USERS not in counts.columns:
        return None
    found = counts.agg(F.max(S.FLOOR_USERS).alias("floor")).first()  # one aggregate row
    return None if found is None or found.floor is None else int(found.floor)


def split_floor(lake: Lake, dataset: str, unrecorded: int | None = None) -> int:
    """The floor the split recorded; for a split written before it was kept, ``unrecorded`` (the
    split conf a run gives it), else ``conf/split.yaml``'s."""
    from intent_spark.split.conf import conf_floor

    found = recorded_floor(lake, dataset)
    if found is not None:
        return found
    return unrecorded if unrecorded is not None else conf_floor(dataset)


def write_counts_and_checksums(lake: Lake, dataset: str, floor_users: int) -> None:
    """SPLIT_COUNTS and CHECKSUMS from one read of the stored targets: their cell counts and,
    per cell, the exact sum of their row hashes, whose total is the targets' checksum."""
    targets = lake.read(S.TARGETS, dataset)
    hashed = [c for c in targets.columns if c != S.DATASET]  # as compute_checksums hashes them
    total = F.sum(row_hash(hashed)).alias("total")
    cells = cell_counts(targets, floor_users, total).collect()  # one row per split and cell
    counts = [tuple(r[f.name] for f in S.SPLIT_COUNTS_SCHEMA.fields) for r in cells]
    lake.write(lake.spark.createDataFrame(counts, S.SPLIT_COUNTS_SCHEMA), S.SPLIT_COUNTS, dataset)
    summed = Checksum(sum(r.n_targets for r in cells), str(sum(int(r.total) for r in cells)))
    write_checksums(lake, dataset, known={S.TARGETS: summed})


def run_split(
    lake: Lake,
    dataset: DatasetRef,
    conf: SplitConf,
    report: Callable[[dict[str, Any]], object] | None = None,
) -> list[SplitOutcome]:
    """Write holdout, splits, split_candidates, targets, split_counts and checksums of a dataset,
    and hand its split summary to ``report`` when given (``report.split.split_report_writer``).

    The events are read from the lake once: persisted for the stage, every table and the summary
    are computed from that one set, and it is released when the stage ends (a killed driver
    takes it with it: nothing of it outlives the stage).
    """
    from intent_spark.lake.progress import spark_progress

    with (
        spark_progress(lake.spark, lake.progress, f"{dataset} split"),
        persisted_events(lake.spark, lake.root, dataset) as events,
    ):
        outcomes = _split_tables(lake, dataset, events, conf)
        if report is not None:
            from intent_spark.split.summary import split_summary

            lake.progress(f"{dataset}: split report")
            report(split_summary(lake, dataset, {o.name: o.labelled for o in outcomes}))
        return outcomes


def split_events(
    events: DataFrame,
    dataset: str,
    conf: SplitConf,
    progress: Progress = silent,
    key: str | None = None,
) -> list[SplitOutcome]:
    """The test split of ``events``, then the validation split of its training events; lazy,
    nothing is written. ``key``: see ``split_population``."""
    progress(f"{dataset}: test split (holdout, cutoff, cells, targets)")
    test = split_population(
        events, dataset=dataset, split=S.TEST, conf=conf, manual=conf.manual_cutoff, key=key
    )
    progress(
        f"{dataset}: test cutoff {test.choice.cutoff:%Y-%m-%d} ({test.choice.rule}, share {test.choice.share:.3f})"
    )
    val_population = training_events(test.labelled).select(S.USER_ID, S.ITEM_ID, S.TS, S.SEQ)
    val = split_population(
        val_population, dataset=dataset, split=S.VAL, conf=conf, manual=conf.manual_val_cutoff, key=key
    )
    progress(
        f"{dataset}: validation cutoff {val.choice.cutoff:%Y-%m-%d} ({val.choice.rule}, share {val.choice.share:.3f})"
    )
    return [test, val]


def _split_tables(lake: Lake, dataset: DatasetRef, events: DataFrame, conf: SplitConf) -> list[SplitOutcome]:
    progress = lake.progress
    source, level = ingest_record(lake.spark, lake.root, dataset)
    outcomes = split_events(events, dataset, conf, progress, key=source)
    test, val = outcomes
    lake.write(test.holdout.unionByName(val.holdout), S.HOLDOUT, dataset)
    lake.write(splits_rows(lake.spark, dataset, conf, outcomes, level), S.SPLITS, dataset)
    lake.write(candidate_rows(lake.spark, dataset, outcomes), S.SPLIT_CANDIDATES, dataset)
    fault_point("split.holdout")
    progress(f"{dataset}: writing targets")
    lake.write(test.targets.unionByName(val.targets), S.TARGETS, dataset)
    # Counted from the stored table: persisting the targets instead saves this read but changes
    # their files, and with them the last bits of evaluate's sums (docs/bench/notes/split.md).
    progress(f"{dataset}: cell counts and checksums")
    write_counts_and_checksums(lake, dataset, conf.floor_users)
    return outcomes


def compute_checksums(
    lake: Lake, dataset: str, known: dict[str, Checksum] | None = None
) -> dict[str, tuple[int, str]]:
    """Rows and checksum of each CHECKSUMMED_TABLES table of ``dataset``, read from the lake
    except those ``known`` already."""
    known = known or {}
    tables = {
        table: lake.read(table, dataset).drop(S.DATASET) for table in CHECKSUMMED_TABLES if table not in known
    }
    found = table_checksums(tables) | known
    return {table: (found[table].rows, found[table].checksum) for table in CHECKSUMMED_TABLES}


def write_checksums(lake: Lake, dataset: str, known: dict[str, Checksum] | None = None) -> None:
    rows = [(dataset, t, rows, total) for t, (rows, total) in compute_checksums(lake, dataset, known).items()]
    lake.write(lake.spark.createDataFrame(rows, S.CHECKSUMS_SCHEMA), S.CHECKSUMS, dataset)
