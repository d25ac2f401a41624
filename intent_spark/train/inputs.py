"""Model inputs built in Spark (SPEC 4): the catalogue, training sequences and scoring streams.

All three are Delta tables partitioned by dataset and split, so a reader takes one split's
Parquet files straight from the lake:

- ``catalogue``: every item of the split's population with a dense index (training items
  first, by training count), its training count and its metadata-token ids (vocabulary from
  training items only, so a new item's id never enters a model);
- ``train_sequences``: training events only (known users, before the cutoff), cut into
  overlapping chunks of ``context + 1`` consecutive items per user, so every training transition
  is used once and no row grows with a user's history;
- ``score_events``: for every user with a target, their events up to their last target in
  (ts, seq) order, with the targets flagged. Each target's context is the rows before it in its
  user's block, read by the scorer in one pass; nothing per target is materialised here.
"""

from __future__ import annotations

from functools import reduce

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from intent_spark.core import schema as S
from intent_spark.core.datasets import DatasetRef
from intent_spark.core.faults import fault_point
from intent_spark.lake.context import Lake
from intent_spark.lake.tables import persisted_events, source_table, spark_conf
from intent_spark.split.cells import training_events
from intent_spark.split.populations import labelled_populations

# Every user's scoring rows land in one file (repartitioned by user); the scorer reads and sorts
# one file at a time, so this bounds its memory.
SCORE_ROWS_PER_FILE = 2_000_000
# Training sequences of a split are spread over files by user, each sorted: the same rows in the
# same order on every machine, and a row group per process for a reader to shard
# (cur_shard / shard_count) - at least two, one more per 10M events. Few and large: Petastorm
# pays about half a second per row group it opens, every time the endless reader comes round.
MIN_TRAIN_FILES = 2
TRAIN_EVENTS_PER_FILE = 10_000_000
INPUTS_LAYOUT = 2  # in the stamp: inputs written by another layout are rebuilt


def catalogue(labelled: DataFrame, items: DataFrame, max_tokens: int) -> DataFrame:
    """One row per item of the population: index, seen flag, training count and token ids.

    The global index window runs in one partition over items (not events): a catalogue of
    millions of rows, sorted once.
    """
    present = item_counts(labelled)
    order = Window.orderBy(F.col(S.SEEN).desc(), F.col(S.TRAIN_COUNT).desc(), F.col(S.ITEM_ID))
    indexed = present.withColumn(S.ITEM_INDEX, F.row_number().over(order).cast("int"))
    return indexed.join(item_token_ids(indexed, items, max_tokens), S.ITEM_ID, "left").withColumn(
        S.TOKEN_IDS, F.coalesce(F.col(S.TOKEN_IDS), F.array_repeat(F.lit(0), max_tokens))
    )


def item_counts(labelled: DataFrame) -> DataFrame:
    """``item_id, train_count, seen``: every item of a split's population (its catalogue) and
    how often it occurs in the split's training events."""
    counts = training_events(labelled).groupBy(S.ITEM_ID).agg(F.count(F.lit(1)).alias(S.TRAIN_COUNT))
    present = labelled.select(S.ITEM_ID).distinct().join(counts, S.ITEM_ID, "left")
    return present.fillna(0, [S.TRAIN_COUNT]).withColumn(S.SEEN, F.col(S.TRAIN_COUNT) > 0)


def item_token_ids(indexed: DataFrame, items: DataFrame, max_tokens: int) -> DataFrame:
    """``item_id, token_ids``: each item's first ``max_tokens`` distinct known tokens, 0-padded.

    Known tokens are those of training items, numbered 1..T in token order.
    """
    exploded = items.select(S.ITEM_ID, F.posexplode(S.TOKENS).alias("_pos", "_token"))
    exploded = exploded.groupBy(S.ITEM_ID, "_token").agg(F.min("_pos").alias("_pos"))
    known = exploded.join(F.broadcast(token_vocabulary(indexed, items)), "_token")
    return first_token_ids(known, max_tokens)


def token_vocabulary(indexed: DataFrame, items: DataFrame) -> DataFrame:
    """``_token, _token_id``: the distinct tokens of a catalogue's seen (training) items,
    numbered 1..T in token order: the ids a content model's token embedding was trained on."""
    seen = indexed.where(F.col(S.SEEN)).select(S.ITEM_ID)
    tokens = items.join(seen, S.ITEM_ID).select(F.explode(S.TOKENS).alias("_token")).distinct()
    return tokens.withColumn("_token_id", F.row_number().over(Window.orderBy("_token")).cast("int"))


def first_token_ids(known: DataFrame, max_tokens: int) -> DataFrame:
    """``item_id, token_ids`` from ``item_id, _pos, _token_id`` rows: the first ``max_tokens``
    in ``_pos`` order, 0-padded."""
    first = Window.partitionBy(S.ITEM_ID).orderBy("_pos")
    kept = known.withColumn("_n", F.row_number().over(first)).where(F.col("_n") <= max_tokens)
    listed = kept.groupBy(S.ITEM_ID).agg(
        F.sort_array(F.collect_list(F.struct("_pos", "_token_id"))).alias("_s")
    )
    ids = F.transform(F.col("_s"), lambda x: x["_token_id"])
    padding = F.array_repeat(F.lit(0), F.lit(max_tokens) - F.size(ids))
    return listed.select(S.ITEM_ID, F.concat(ids, padding).alias(S.TOKEN_IDS))


def with_item_index(events: DataFrame, catalogue_rows: DataFrame) -> DataFrame:
    return events.join(catalogue_rows.select(S.ITEM_ID, S.ITEM_INDEX), S.ITEM_ID)


def train_sequences(training: DataFrame, catalogue_rows: DataFrame, context: int) -> DataFrame:
    """Chunks of ``context + 1`` consecutive training items per user, left-padded with 0.

    Event at 0-based position p belongs to chunk p // context; the first event of each chunk
    after the first also closes the previous chunk, so every consecutive pair is a transition
    in exactly one chunk. Chunks with fewer than two items teach nothing and are dropped.
    """
    in_order = Window.partitionBy(S.USER_ID).orderBy(S.TS, S.SEQ)
    position = F.row_number().over(in_order) - 1
    indexed = with_item_index(training, catalogue_rows).withColumn("_p", position)
    p = F.col("_p")
    own = (p / context).cast("int")
    chunks = F.when((p % context == 0) & (p > 0), F.array(own - 1, own)).otherwise(F.array(own))
    exploded = indexed.withColumn(S.CHUNK, F.explode(chunks))
    grouped = exploded.groupBy(S.USER_ID, S.CHUNK).agg(
        F.sort_array(F.collect_list(F.struct("_p", S.ITEM_INDEX))).alias("_s"),
        F.max(S.TS).alias(S.LAST_TS),
    )
    items = F.transform(F.col("_s"), lambda x: x[S.ITEM_INDEX])
    padding = F.array_repeat(F.lit(0), F.lit(context + 1) - F.size(items))
    return grouped.where(F.size("_s") >= 2).select(
        S.USER_ID, S.CHUNK, F.concat(padding, items).alias(S.ITEMS_COLUMN), S.LAST_TS
    )


def score_events(labelled: DataFrame, split_targets: DataFrame, catalogue_rows: DataFrame) -> DataFrame:
    """Each user's events up to their last target, with position (1-based) and target flag."""
    flagged = with_item_index(labelled, catalogue_rows).join(
        split_targets.select(S.SEQ, F.lit(True).alias(S.IS_TARGET)), S.SEQ, "left"
    )
    by_user = Window.partitionBy(S.USER_ID)
    position = F.row_number().over(by_user.orderBy(S.TS, S.SEQ))
    placed = flagged.withColumn(S.POSITION, position.cast("int"))
    last_target = F.max(F.when(F.col(S.IS_TARGET), F.col(S.POSITION))).over(by_user)
    kept = placed.withColumn("_last", last_target).where(F.col(S.POSITION) <= F.col("_last"))
    return kept.select(
        S.USER_ID,
        S.POSITION,
        S.ITEM_INDEX,
        S.SEQ,
        F.coalesce(F.col(S.IS_TARGET), F.lit(False)).alias(S.IS_TARGET),
    )


def _tagged(frames: list[DataFrame], dataset: str) -> DataFrame:
    return reduce(DataFrame.unionByName, frames).withColumn(S.DATASET, F.lit(dataset))


def inputs_stamp(lake: Lake, dataset: str, context: int, max_tokens: int) -> str:
    """What the model inputs depend on: the split tables' checksums and the input settings."""
    rows = lake.read(S.CHECKSUMS, dataset).collect()  # one row per split table
    sums = ",".join(f"{r.table}:{r.rows}:{r.checksum}" for r in sorted(rows, key=lambda r: r.table))
    return f"{sums};context={context};max_tokens={max_tokens};layout={INPUTS_LAYOUT}"


def build_model_inputs(
    lake: Lake, dataset: DatasetRef, *, context: int, max_tokens: int, force: bool = False
) -> str:
    """Write catalogue, train_sequences and score_events for both splits of a dataset; return
    the stamp they were built from.

    Skipped when the stored stamp shows the split and settings are unchanged.
    """
    stamp = inputs_stamp(lake, dataset, context, max_tokens)
    if not force and lake.has(S.MODEL_INPUTS):
        previous = lake.read(S.MODEL_INPUTS, dataset).collect()  # at most one row
        if previous and previous[0]["stamp"] == stamp:
            lake.progress(f"{dataset}: model inputs up to date")
            return stamp
    with persisted_events(lake.spark, lake.root, dataset) as events:
        _write_model_inputs(lake, dataset, events, context, max_tokens)
    lake.write(lake.spark.createDataFrame([(dataset, stamp)], S.MODEL_INPUTS_SCHEMA), S.MODEL_INPUTS, dataset)
    return stamp


def _write_model_inputs(lake: Lake, dataset, events, context, max_tokens) -> None:
    """Catalogue, training sequences and scoring streams of both splits, from one read of the
    events: each split's population is labelled from that one persisted set."""
    spark, progress = lake.spark, lake.progress
    items = source_table(spark, lake.root, S.ITEMS, dataset).select(S.ITEM_ID, S.TOKENS)
    targets = lake.read(S.TARGETS, dataset)
    populations = labelled_populations(lake, dataset, events)
    progress(f"{dataset}: writing the catalogue of each split")
    catalogues = [
        catalogue(labelled, items, max_tokens).withColumn(S.SPLIT, F.lit(split))
        for split, labelled in populations.items()
    ]
    lake.write(_tagged(catalogues, dataset), S.CATALOGUE, dataset)
    fault_point("inputs.catalogue")
    # Indices are read back from the stored catalogue, not recomputed for every table.
    stored = lake.read(S.CATALOGUE, dataset)
    n_events = events.count()
    files = max(1, -(-n_events // SCORE_ROWS_PER_FILE))
    train_files = max(MIN_TRAIN_FILES, -(-n_events // TRAIN_EVENTS_PER_FILE))
    sequences, streams = [], []
    for split, labelled in populations.items():
        rows = stored.where(F.col(S.SPLIT) == split)
        training = training_events(labelled)
        chunks = train_sequences(training, rows, context).withColumn(S.SPLIT, F.lit(split))
        sequences.append(chunks.repartition(train_files, S.USER_ID).sortWithinPartitions(S.USER_ID, S.CHUNK))
        split_targets = targets.where(F.col(S.SPLIT) == split)
        stream = score_events(labelled, split_targets, rows).withColumn(S.SPLIT, F.lit(split))
        streams.append(stream.repartition(files, S.USER_ID).sortWithinPartitions(S.USER_ID, S.POSITION))
    progress(f"{dataset}: writing training sequences ({train_files} files per split)")
    # Adaptive execution would merge small shuffle partitions, and with them the files.
    with spark_conf(spark, {"spark.sql.adaptive.coalescePartitions.enabled": "false"}):
        lake.write(_tagged(sequences, dataset), S.TRAIN_SEQUENCES, dataset)
    progress(f"{dataset}: writing scoring streams ({files} file(s) per split)")
    lake.write(_tagged(streams, dataset), S.SCORE_EVENTS, dataset)
