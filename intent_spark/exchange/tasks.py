"""Exported tasks (SPEC 9): the benchmark's questions as files, for models outside this process.

Per split, ``DIR/<split>/`` holds:

- ``tasks.parquet``: one row per target, its user and time and the context before it (the
  user's earlier events in (ts, seq) order, the last N), never the target item or its cell;
- ``catalogue.parquet``: every item that may be ranked, with its metadata and training count;
- ``train.parquet``: the split's training events (known users, before the cutoff), the only
  events a model may learn from;
- ``FORMAT.md``: these formats and the submission format, with examples from the files.

Every file is written by Spark and streamed into one file in a fixed order with fixed row
groups (``write_single_file``), so exporting the same lake twice gives the same bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from intent_spark.core import schema as S
from intent_spark.core.datasets import DatasetRef
from intent_spark.core.errors import IntentError
from intent_spark.exchange.formats import format_text
from intent_spark.lake.context import Lake
from intent_spark.lake.files import filesystem, write_single_file
from intent_spark.lake.tables import source_table
from intent_spark.split.cells import training_events
from intent_spark.split.populations import labelled_populations
from intent_spark.split.targets import target_id
from intent_spark.train.inputs import item_counts

DEFAULT_CONTEXT = 200
TASKS_FILE, CATALOGUE_FILE, TRAIN_FILE, FORMAT_FILE = (
    "tasks.parquet",
    "catalogue.parquet",
    "train.parquet",
    "FORMAT.md",
)
CONTEXT_ITEMS, CONTEXT_TS = "context_items", "context_ts"
CONTEXT_EVENT_TYPES, CONTEXT_AMOUNTS = "context_event_types", "context_amounts"


@dataclass(frozen=True)
class Exported:
    split: str
    folder: str
    tasks: int
    items: int
    train_events: int


def split_targets(lake: Lake, dataset: str, split: str | None = None) -> DataFrame:
    """The targets table (of one split, or all) with each target's public ``target_id``."""
    targets = lake.read(S.TARGETS, dataset)
    if split is not None:
        targets = targets.where(F.col(S.SPLIT) == split)
    named = target_id(F.col(S.DATASET), F.col(S.SPLIT), F.col(S.USER_ID), F.col(S.SEQ))
    return targets.withColumn(S.TARGET_ID, named)


def tasks(
    population: DataFrame, attributes: DataFrame, targets: DataFrame, context: int, amounts: bool
) -> DataFrame:
    """One row per target: ``target_id, dataset, split, user_id, ts`` and the context lists.

    Each user's events are gathered once, sorted by (ts, seq); each of their targets keeps the
    events strictly before it and of those the last ``context``. The rows come out ordered by
    user and time (their write order).
    """
    users = targets.select(S.USER_ID).distinct()
    events = population.select(S.USER_ID, S.TS, S.SEQ, S.ITEM_ID).join(users, S.USER_ID)
    fields = [S.TS, S.SEQ, S.ITEM_ID, S.EVENT_TYPE] + ([S.AMOUNT] if amounts else [])
    history = (
        events.join(attributes, [S.USER_ID, S.SEQ])
        .groupBy(S.USER_ID)
        .agg(F.sort_array(F.collect_list(F.struct(*fields))).alias("_history"))
    )
    wanted = targets.select(S.TARGET_ID, S.DATASET, S.SPLIT, S.USER_ID, S.TS, S.SEQ)
    before = F.filter(
        "_history", lambda e: (e[S.TS] < F.col(S.TS)) | ((e[S.TS] == F.col(S.TS)) & (e[S.SEQ] < F.col(S.SEQ)))
    )
    joined = wanted.join(history, S.USER_ID).withColumn("_before", before)
    n = F.size("_before")
    kept = joined.withColumn("_kept", F.slice("_before", F.greatest(n - context + 1, F.lit(1)), context))
    lists = {
        CONTEXT_ITEMS: S.ITEM_ID,
        CONTEXT_TS: S.TS,
        CONTEXT_EVENT_TYPES: S.EVENT_TYPE,
        **({CONTEXT_AMOUNTS: S.AMOUNT} if amounts else {}),
    }
    columns = [F.transform("_kept", _field_of(field)).alias(name) for name, field in lists.items()]
    return kept.orderBy(S.USER_ID, S.TS, S.SEQ).select(
        S.TARGET_ID, S.DATASET, S.SPLIT, S.USER_ID, S.TS, *columns
    )


def _field_of(field: str):
    return lambda event: event[field]  # one argument: Spark's transform without the index


def catalogue_rows(labelled: DataFrame, items: DataFrame | None) -> DataFrame:
    """Every item of the split's catalogue with its metadata and training count, by item id."""
    counts = item_counts(labelled).select(S.ITEM_ID, S.TRAIN_COUNT)
    if items is not None:
        counts = counts.join(
            items.select(S.ITEM_ID, S.TITLE, S.CATEGORY, S.BRAND, S.TOKENS), S.ITEM_ID, "left"
        )
    else:
        counts = counts.select(
            S.ITEM_ID,
            S.TRAIN_COUNT,
            *[F.lit(None).cast("string").alias(c) for c in (S.TITLE, S.CATEGORY, S.BRAND)],
            F.lit(None).cast("array<string>").alias(S.TOKENS),
        )
    return counts.select(S.ITEM_ID, S.TITLE, S.CATEGORY, S.BRAND, S.TOKENS, S.TRAIN_COUNT).orderBy(S.ITEM_ID)


def training_rows(labelled: DataFrame, attributes: DataFrame, amounts: bool) -> DataFrame:
    """The split's training events in (user, ts, seq) order."""
    events = (
        training_events(labelled)
        .select(S.USER_ID, S.ITEM_ID, S.TS, S.SEQ)
        .join(attributes, [S.USER_ID, S.SEQ])
    )
    columns = [S.USER_ID, S.ITEM_ID, S.TS, S.EVENT_TYPE] + ([S.AMOUNT] if amounts else [])
    return events.orderBy(S.USER_ID, S.TS, S.SEQ).select(*columns)


def export_tasks(
    lake: Lake,
    dataset: DatasetRef,
    out: str,
    *,
    splits: Sequence[str] | None = None,
    context: int = DEFAULT_CONTEXT,
) -> list[Exported]:
    """Write the files of each split (default: every split of the dataset) under ``out``."""
    spark, root, progress = lake.spark, lake.root, lake.progress
    if context < 1:
        raise IntentError(f"--context {context}: a context keeps at least one event")
    if not lake.has(S.TARGETS) or lake.read(S.TARGETS, dataset).isEmpty():
        raise IntentError(f"{root}: no targets of {dataset}; run `intent split --dataset {dataset}` first")
    populations = labelled_populations(lake, dataset)
    wanted = list(splits or populations)
    for split in wanted:
        if split not in populations:
            raise IntentError(f"{dataset} has no {split} split (it has {', '.join(populations)})")
    events = source_table(spark, root, S.EVENTS, dataset)
    amounts = not events.where(F.col(S.AMOUNT).isNotNull()).isEmpty()
    attributes = events.select(S.USER_ID, S.SEQ, S.EVENT_TYPE, S.AMOUNT)
    items = source_table(spark, root, S.ITEMS, dataset) if lake.has(S.ITEMS) else None
    done = []
    for split in wanted:
        folder = f"{out.rstrip('/')}/{split}"
        fs, path = filesystem(folder)
        fs.create_dir(path, recursive=True)
        targets = split_targets(lake, dataset, split)
        _check_unique(targets, dataset, split)
        labelled = populations[split]
        progress(f"{dataset} {split}: writing {TASKS_FILE} (context: the last {context} events)")
        n_tasks = write_single_file(
            tasks(labelled, attributes, targets, context, amounts), f"{folder}/{TASKS_FILE}"
        )
        progress(f"{dataset} {split}: writing {CATALOGUE_FILE} and {TRAIN_FILE}")
        n_items = write_single_file(catalogue_rows(labelled, items), f"{folder}/{CATALOGUE_FILE}")
        n_train = write_single_file(training_rows(labelled, attributes, amounts), f"{folder}/{TRAIN_FILE}")
        text = format_text(dataset, split, folder, n_tasks, n_items, n_train, context, amounts)
        with fs.open_output_stream(f"{path}/{FORMAT_FILE}") as sink:
            sink.write(text.encode("utf-8"))
        progress(
            f"{dataset} {split}: {n_tasks:,} tasks, {n_items:,} items, {n_train:,} training events in {folder}"
        )
        done.append(Exported(split, folder, n_tasks, n_items, n_train))
    return done


def _check_unique(targets: DataFrame, dataset: str, split: str) -> None:
    clash = targets.groupBy(S.TARGET_ID).count().where(F.col("count") > 1).first()  # none, or one row
    if clash is not None:
        raise IntentError(
            f"{dataset} {split}: two targets share the id {clash[S.TARGET_ID]} (a hash collision)"
        )
