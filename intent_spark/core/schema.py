"""Canonical table names, column names and schemas (SPEC section 2 and 8).

Everything that names a column imports it from here, so a rename happens in one place.
"""

from __future__ import annotations

from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DoubleType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

# Table names inside a lake folder.
EVENTS = "events"
ITEMS = "items"
USERS = "users"
REJECTS = "rejects"
INGEST_FILES = "ingest_files"

# Column names.
DATASET = "dataset"
USER_ID = "user_id"
ITEM_ID = "item_id"
TS = "ts"
SEQ = "seq"
EVENT_TYPE = "event_type"
AMOUNT = "amount"
EVENT_ATTRIBUTES = "attributes"
TITLE = "title"
CATEGORY = "category"
BRAND = "brand"
TOKENS = "tokens"
USER_ATTRIBUTES = "attributes"
SOURCE_FILE = "source_file"
LINE = "line"
FIELD = "field"
REASON = "reason"
RAW = "raw"
ITEM_LEVEL = "item_level"  # what an item is: the source's entity (merchant) or a coarser label (mcc)
DEFAULT_ITEM_LEVEL = "item"  # the level of a source conf that does not name its items

# seq = file index << FILE_SHIFT | line << SUB_BITS | sub-event. The line number comes from
# the raw file, so (ts, seq) orders same-timestamp events as the release wrote them.
SUB_BITS = 4
FILE_SHIFT = 44
MAX_FILES = 1 << (63 - FILE_SHIFT)

EVENTS_SCHEMA = StructType(
    [
        StructField(DATASET, StringType(), False),
        StructField(USER_ID, StringType(), False),
        StructField(ITEM_ID, StringType(), False),
        StructField(TS, TimestampType(), False),
        StructField(SEQ, LongType(), False),
        StructField(EVENT_TYPE, StringType(), False),
        StructField(AMOUNT, DoubleType(), True),
        StructField(EVENT_ATTRIBUTES, MapType(StringType(), StringType()), True),
    ]
)

ITEMS_SCHEMA = StructType(
    [
        StructField(DATASET, StringType(), False),
        StructField(ITEM_ID, StringType(), False),
        StructField(TITLE, StringType(), True),
        StructField(CATEGORY, StringType(), True),
        StructField(BRAND, StringType(), True),
        StructField(TOKENS, ArrayType(StringType(), True), False),
    ]
)

USERS_SCHEMA = StructType(
    [
        StructField(DATASET, StringType(), False),
        StructField(USER_ID, StringType(), False),
        StructField(USER_ATTRIBUTES, MapType(StringType(), StringType()), False),
    ]
)

REJECTS_SCHEMA = StructType(
    [
        StructField(DATASET, StringType(), False),
        StructField(SOURCE_FILE, StringType(), False),
        StructField(LINE, LongType(), True),
        StructField(FIELD, StringType(), True),
        StructField(REASON, StringType(), False),
        StructField(RAW, StringType(), True),
    ]
)

INGEST_FILES_SCHEMA = StructType(
    [
        StructField(DATASET, StringType(), False),
        StructField(SOURCE_FILE, StringType(), False),
        StructField("file_index", LongType(), False),
        StructField("raw_rows", LongType(), False),
        StructField("event_rows", LongType(), False),
        StructField("reject_rows", LongType(), False),
        StructField("source", StringType(), True),  # the source conf's name (cct for cct_mcc)
        StructField(ITEM_LEVEL, StringType(), True),
    ]
)

TABLE_SCHEMAS = {
    EVENTS: EVENTS_SCHEMA,
    ITEMS: ITEMS_SCHEMA,
    USERS: USERS_SCHEMA,
    REJECTS: REJECTS_SCHEMA,
    INGEST_FILES: INGEST_FILES_SCHEMA,
}

# --- split stage (SPEC 3 and 8) ---
SPLITS = "splits"
HOLDOUT = "holdout"
TARGETS = "targets"
SPLIT_CANDIDATES = "split_candidates"
SPLIT_COUNTS = "split_counts"
FLOOR_USERS = "floor_users"  # cells with fewer users are not ranked
CHECKSUMS = "checksums"

SPLIT = "split"
CELL = "cell"
IS_NEW = "is_new"
CUTOFF = "cutoff"
PERIOD = "period"
TEST = "test"
VAL = "val"
PAST = "past"
FUTURE = "future"

CELLS = (
    "known_past",
    "known_future_seen",
    "known_future_new",
    "new_past_seen",
    "new_past_new",
    "new_future_seen",
    "new_future_new",
)

SPLITS_SCHEMA = StructType(
    [
        StructField(DATASET, StringType(), False),
        StructField(SPLIT, StringType(), False),
        StructField(CUTOFF, TimestampType(), False),
        StructField("granularity", StringType(), False),
        StructField("train_share", DoubleType(), False),
        StructField("admissible", ArrayType(TimestampType(), True), False),
        StructField("rule", StringType(), False),
        StructField("horizon_days", DoubleType(), False),
        StructField("holdout_fraction", DoubleType(), False),
        StructField("seed", LongType(), False),
        StructField(ITEM_LEVEL, StringType(), True),
    ]
)

HOLDOUT_SCHEMA = StructType(
    [
        StructField(DATASET, StringType(), False),
        StructField(SPLIT, StringType(), False),
        StructField(USER_ID, StringType(), False),
        StructField(IS_NEW, BooleanType(), False),
    ]
)

TARGETS_SCHEMA = StructType(
    [
        StructField(DATASET, StringType(), False),
        StructField(SPLIT, StringType(), False),
        StructField(CELL, StringType(), False),
        StructField(USER_ID, StringType(), False),
        StructField(ITEM_ID, StringType(), False),
        StructField(TS, TimestampType(), False),
        StructField(SEQ, LongType(), False),
    ]
)

SPLIT_CANDIDATES_SCHEMA = StructType(
    [
        StructField(DATASET, StringType(), False),
        StructField(SPLIT, StringType(), False),
        StructField("candidate", TimestampType(), False),
        StructField("events_before", LongType(), False),
        StructField("train_share", DoubleType(), False),
        StructField("admissible", BooleanType(), False),
        StructField("chosen", BooleanType(), False),
    ]
)

SPLIT_COUNTS_SCHEMA = StructType(
    [
        StructField(DATASET, StringType(), False),
        StructField(SPLIT, StringType(), False),
        StructField(CELL, StringType(), False),
        StructField("n_users", LongType(), False),
        StructField("n_targets", LongType(), False),
        StructField("below_floor", BooleanType(), False),
        # the user floor the split applied: evaluate and report read it (null: split before it was kept)
        StructField(FLOOR_USERS, LongType(), True),
    ]
)

CHECKSUMS_SCHEMA = StructType(
    [
        StructField(DATASET, StringType(), False),
        StructField("table", StringType(), False),
        StructField("rows", LongType(), False),
        StructField("checksum", StringType(), False),
    ]
)

TABLE_SCHEMAS.update(
    {
        SPLITS: SPLITS_SCHEMA,
        HOLDOUT: HOLDOUT_SCHEMA,
        TARGETS: TARGETS_SCHEMA,
        SPLIT_CANDIDATES: SPLIT_CANDIDATES_SCHEMA,
        SPLIT_COUNTS: SPLIT_COUNTS_SCHEMA,
        CHECKSUMS: CHECKSUMS_SCHEMA,
    }
)

# --- model inputs and ranks (SPEC 4, 5 and 8) ---
CATALOGUE = "catalogue"
TRAIN_SEQUENCES = "train_sequences"
SCORE_EVENTS = "score_events"
MODEL_INPUTS = "model_inputs"
RANKS = "ranks"

MODEL = "model"
RANK = "rank"
TIED = "tied"  # other items tying with the target (its tie group has tied + 1 items)
ITEM_INDEX = "item_index"
SEEN = "seen"
TRAIN_COUNT = "train_count"
TOKEN_IDS = "token_ids"
POSITION = "position"
IS_TARGET = "is_target"
CHUNK = "chunk"
ITEMS_COLUMN = "items"
LAST_TS = "last_ts"

# Item indices are dense per (dataset, split): 1..S the training items, S+1..N the rest, 0 padding.
CATALOGUE_SCHEMA = StructType(
    [
        StructField(DATASET, StringType(), False),
        StructField(SPLIT, StringType(), False),
        StructField(ITEM_ID, StringType(), False),
        StructField(ITEM_INDEX, IntegerType(), False),
        StructField(SEEN, BooleanType(), False),
        StructField(TRAIN_COUNT, LongType(), False),
        StructField(TOKEN_IDS, ArrayType(IntegerType(), True), False),
    ]
)

# One row per chunk of context + 1 consecutive training events of a user, left-padded with 0.
TRAIN_SEQUENCES_SCHEMA = StructType(
    [
        StructField(DATASET, StringType(), False),
        StructField(SPLIT, StringType(), False),
        StructField(USER_ID, StringType(), False),
        StructField(CHUNK, IntegerType(), False),
        StructField(ITEMS_COLUMN, ArrayType(IntegerType(), True), False),
        StructField(LAST_TS, TimestampType(), False),
    ]
)

# Every event of a user with a target, up to the user's last target, in (ts, seq) order.
SCORE_EVENTS_SCHEMA = StructType(
    [
        StructField(DATASET, StringType(), False),
        StructField(SPLIT, StringType(), False),
        StructField(USER_ID, StringType(), False),
        StructField(POSITION, IntegerType(), False),
        StructField(ITEM_INDEX, IntegerType(), False),
        StructField(SEQ, LongType(), False),
        StructField(IS_TARGET, BooleanType(), False),
    ]
)

MODEL_INPUTS_SCHEMA = StructType(
    [
        StructField(DATASET, StringType(), False),
        StructField("stamp", StringType(), False),
    ]
)

RANKS_SCHEMA = StructType(
    [
        StructField(DATASET, StringType(), False),
        StructField(SPLIT, StringType(), False),
        StructField(CELL, StringType(), False),
        StructField(MODEL, StringType(), False),
        StructField(USER_ID, StringType(), False),
        StructField(SEQ, LongType(), False),
        StructField(RANK, DoubleType(), False),
        StructField(TIED, LongType(), False),
    ]
)

TABLE_SCHEMAS.update(
    {
        CATALOGUE: CATALOGUE_SCHEMA,
        TRAIN_SEQUENCES: TRAIN_SEQUENCES_SCHEMA,
        SCORE_EVENTS: SCORE_EVENTS_SCHEMA,
        MODEL_INPUTS: MODEL_INPUTS_SCHEMA,
        RANKS: RANKS_SCHEMA,
    }
)

# Partition columns besides the dataset: model inputs are read one split at a time by Petastorm.
TABLE_PARTITIONS = {
    CATALOGUE: (DATASET, SPLIT),
    TRAIN_SEQUENCES: (DATASET, SPLIT),
    SCORE_EVENTS: (DATASET, SPLIT),
    RANKS: (DATASET, MODEL),
}

# --- metrics (SPEC 5 and 8) ---
METRICS_TABLE = "metrics"
USER_METRICS = "user_metrics"

METRICS_SCHEMA = StructType(
    [
        StructField(DATASET, StringType(), False),
        StructField(SPLIT, StringType(), False),
        StructField(CELL, StringType(), False),
        StructField(MODEL, StringType(), False),
        StructField("metric", StringType(), False),
        StructField("k", IntegerType(), False),
        StructField("value", DoubleType(), True),  # null: unavailable (k beyond a submission's lists)
        StructField("ci_low", DoubleType(), True),
        StructField("ci_high", DoubleType(), True),
        StructField("n_users", LongType(), False),
        StructField("n_targets", LongType(), False),
        StructField("below_floor", BooleanType(), False),
        StructField(FLOOR_USERS, LongType(), True),  # the floor below_floor was flagged at
    ]
)

TABLE_SCHEMAS[METRICS_TABLE] = METRICS_SCHEMA
TABLE_PARTITIONS[USER_METRICS] = (DATASET, MODEL)

# Derived results (SPEC 5): paired model differences, memorization gaps, retention ratios.
COMPARISONS = "comparisons"
PAIRED = "paired"
MEMORIZATION_GAP = "memorization_gap"
RETENTION = "retention"

# Multiple-comparison corrections of the paired p-values (SPEC 10).
HOLM = "holm"
BH = "bh"
NO_CORRECTION = "none"
CORRECTIONS = (HOLM, BH, NO_CORRECTION)

COMPARISONS_SCHEMA = StructType(
    [
        StructField(DATASET, StringType(), False),
        StructField(SPLIT, StringType(), False),
        StructField("kind", StringType(), False),  # paired | memorization_gap | retention
        StructField(MODEL, StringType(), False),
        StructField("baseline", StringType(), True),  # the other model of a paired comparison
        StructField(CELL, StringType(), False),  # a cell, or the pair of cells compared
        StructField("metric", StringType(), False),  # a user_metrics column, e.g. ndcg_10
        StructField("value", DoubleType(), False),
        StructField("ci_low", DoubleType(), True),
        StructField("ci_high", DoubleType(), True),
        StructField("n_users", LongType(), False),
        StructField("p_value", DoubleType(), True),
        # the p-value adjusted over its family (SPEC 10): one dataset's comparisons of one kind
        # in one split here; the report adjusts again over every dataset it shows
        StructField("p_adjusted", DoubleType(), True),
        StructField("correction", StringType(), True),  # holm | bh | none
        StructField("family_size", LongType(), True),
        # the smallest true mean difference the cell detects with 80% power at two-sided 0.05
        StructField("mde", DoubleType(), True),
    ]
)
TABLE_SCHEMAS[COMPARISONS] = COMPARISONS_SCHEMA

# Transfer across sources: per target cell, how many targets a content model trained
# on `source` can reach through shared tokens, and the cutoffs both sources admit.
TRANSFERS = "transfers"
SOURCE = "source"
TRANSFERS_SCHEMA = StructType(
    [
        StructField(DATASET, StringType(), False),
        StructField(SOURCE, StringType(), False),
        StructField(MODEL, StringType(), False),
        StructField(CELL, StringType(), False),
        StructField("n_targets", LongType(), False),
        StructField("n_with_tokens", LongType(), False),
        StructField("shared_cutoffs", ArrayType(TimestampType(), True), False),
    ]
)
TABLE_SCHEMAS[TRANSFERS] = TRANSFERS_SCHEMA
TABLE_PARTITIONS[TRANSFERS] = (DATASET, SOURCE)

# Exported tasks and scored submissions (SPEC 9): a model outside this process answers
# ``target_id``s with ranked lists; its ranks go to ``ranks`` under the submission's name.
TARGET_ID = "target_id"
SUBMISSIONS = "submissions"
SUBMISSION_REJECTS = "submission_rejects"
LIST_LENGTH = "list_length"  # the shortest list of a submission: metrics at k above it are unavailable
SUBMISSIONS_SCHEMA = StructType(
    [
        StructField(DATASET, StringType(), False),
        StructField(SPLIT, StringType(), False),
        StructField(MODEL, StringType(), False),
        StructField("file", StringType(), False),
        StructField("sha256", StringType(), False),
        StructField("rows", LongType(), False),
        StructField("accepted", LongType(), False),
        StructField("rejected", LongType(), False),
        StructField("targets", LongType(), False),
        StructField("missing", LongType(), False),
        StructField(LIST_LENGTH, LongType(), False),
        StructField("longest_list", LongType(), False),
        StructField("has_scores", BooleanType(), False),
    ]
)
SUBMISSION_REJECTS_SCHEMA = StructType(
    [
        StructField(DATASET, StringType(), False),
        StructField(SPLIT, StringType(), False),
        StructField(MODEL, StringType(), False),
        StructField(LINE, LongType(), False),  # 1-based row of the submission file
        StructField(TARGET_ID, StringType(), True),
        StructField(FIELD, StringType(), False),
        StructField(REASON, StringType(), False),
        StructField(RAW, StringType(), True),  # the row as JSON
    ]
)
TABLE_SCHEMAS[SUBMISSIONS] = SUBMISSIONS_SCHEMA
TABLE_SCHEMAS[SUBMISSION_REJECTS] = SUBMISSION_REJECTS_SCHEMA
TABLE_PARTITIONS[SUBMISSIONS] = (DATASET, MODEL)
TABLE_PARTITIONS[SUBMISSION_REJECTS] = (DATASET, MODEL)
