"""Reading and writing the lake's Delta tables, one dataset partition at a time."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import pyarrow.fs as pafs
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from intent_spark.core import schema as S
from intent_spark.core.datasets import DatasetRef
from intent_spark.core.errors import IntentError
from intent_spark.lake.integrity import LOG, check_table, log_versions, note_own_commit, table_root

# A variant of a dataset (``amazon_hk.leave_last_out``, ``amazon_hk.seed1``) is split and scored
# under its own name but reads its source's ingested tables: nothing is copied.
VARIANT_SEPARATOR = "."
SOURCE_TABLES = (S.EVENTS, S.ITEMS, S.USERS)


def source_dataset(dataset: str) -> str:
    """The ingested dataset a variant was made from (the name itself when it is no variant)."""
    return dataset.split(VARIANT_SEPARATOR, 1)[0]


def variant_name(dataset: str) -> str | None:
    """``leave_last_out`` of ``amazon_hk.leave_last_out``; None for an ingested dataset."""
    parts = dataset.split(VARIANT_SEPARATOR, 1)
    return parts[1] if len(parts) == 2 else None


def table_path(root: str, table: str) -> str:
    return f"{root.rstrip('/')}/{table}"


def write_dataset(df: DataFrame, root: str, table: str, dataset: str, **partition: str) -> int:
    """Replace one dataset's partition of a table in a single Delta transaction; return the rows
    it wrote (from the commit's own metrics: no second read of the table).

    ``partition`` narrows the replaced part further (``model="sasrec"`` on ``ranks``). Other
    rows are untouched, and a failed write leaves the previous version intact.
    """
    schema = S.TABLE_SCHEMAS.get(table)
    if schema is not None:
        df = df.select(*[F.col(f.name).cast(f.dataType).alias(f.name) for f in schema.fields])
    replaced = " AND ".join(
        f"{column} = '{value}'" for column, value in {S.DATASET: dataset, **partition}.items()
    )
    for attempt in range(CONFLICT_RETRIES + 1):
        try:
            (
                df.write.format("delta")
                .mode("overwrite")
                .option("replaceWhere", replaced)
                .option("mergeSchema", "true")  # a lake written before a column was added keeps working
                .partitionBy(*S.TABLE_PARTITIONS.get(table, (S.DATASET,)))
                .save(table_path(root, table))
            )
            break
        except Exception as exc:
            # Another dataset's writer created the table or changed its schema first: this write
            # replaces only its own partition, so doing it again is safe.
            if attempt < CONFLICT_RETRIES and any(code in str(exc) for code in CONFLICTS):
                time.sleep(0.5 * (attempt + 1))
                continue
            _raise_disk_full(exc, root, table, dataset)
            raise
    version, written = own_commit(table_path(root, table), replaced)
    if version is not None:  # ours is the newest commit: whole if the table was (no re-listing)
        note_own_commit(table_path(root, table), version)
    if written is None:  # another writer committed since, or metrics off: count what is there
        return int(read_table(df.sparkSession, root, table, dataset).where(replaced).count())
    return written


DISK_FULL = ("No space left on device", "Disk quota exceeded")
# Delta's error classes for a commit that lost a race with another writer
CONFLICTS = ("DELTA_CONCURRENT", "DELTA_PROTOCOL_CHANGED", "DELTA_METADATA_CHANGED")
CONFLICT_RETRIES = 3


def _raise_disk_full(exc: Exception, root: str, table: str, dataset: str) -> None:
    """A write the disk could not hold, as one line saying the table kept its last version."""
    full = next((why for why in DISK_FULL if why in str(exc)), None)
    if full is None:
        return
    version = table_version(table_path(root, table))
    kept = "no version yet" if version is None else f"its version {version}, as before"
    raise IntentError(
        f"{table_path(root, table)}: writing {dataset} failed: {full.lower()}; nothing of this "
        f"write was committed, the table keeps {kept}"
    ) from None


def table_version(path: str) -> int | None:
    """The newest commit of a table, from its log's file names; None before its first."""
    return _newest_commit(*table_root(path))


def _newest_commit(system: pafs.FileSystem, root: str) -> int | None:
    commits = log_versions(system.get_file_info(pafs.FileSelector(f"{root}/{LOG}", allow_not_found=True)))[0]
    return max(commits) if commits else None


def own_commit(path: str, predicate: str) -> tuple[int | None, int | None]:
    """The version of a table's newest commit when that commit replaced ``predicate`` (this
    writer's), and its ``numOutputRows``; (None, None) when the newest commit is another (a
    concurrent writer's), and no row count where the commit has no metrics."""
    system, root = table_root(path)
    newest = _newest_commit(system, root)
    if newest is None:
        return None, None
    with system.open_input_stream(f"{root}/{LOG}/{newest:020d}.json") as stream:
        lines = stream.read().decode("utf-8").splitlines()
    for line in lines:
        info = json.loads(line).get("commitInfo")
        if info is not None:
            if (info.get("operationParameters") or {}).get("predicate") != predicate:
                return None, None
            rows = (info.get("operationMetrics") or {}).get("numOutputRows")
            return newest, None if rows is None else int(rows)
    return None, None


def has_table(spark: SparkSession, root: str, table: str) -> bool:
    """Whether the lake holds a Delta table of that name."""
    return delta_table_class().isDeltaTable(spark, table_path(root, table))


def delta_table_class() -> Any:
    """Delta Lake's Python ``DeltaTable``, or a one-line error naming the extra that installs it
    (a cluster's runtime brings its own)."""
    try:
        from delta.tables import DeltaTable
    except ImportError:
        raise IntentError(
            "Delta Lake's Python package is not installed: pip install 'intent-spark[spark]' "
            "(or delta-spark at the version of the Delta jars your Spark runs)"
        ) from None
    return DeltaTable


def read_table(spark: SparkSession, root: str, table: str, dataset: str | None = None) -> DataFrame:
    """A lake table (one dataset's partition when ``dataset`` is given); a one-line error if
    absent or damaged (``integrity.check_table``: nothing is computed on a damaged table)."""
    path = table_path(root, table)
    if not has_table(spark, root, table):
        raise IntentError(f"{path}: no such table in the lake (run the stage that writes {table} first)")
    check_table(spark, path)
    df = spark.read.format("delta").load(path)
    return df if dataset is None else df.where(F.col(S.DATASET) == dataset)


def source_table(spark: SparkSession, root: str, table: str, dataset: DatasetRef) -> DataFrame:
    """An ingested table (events, items, users) of a dataset, or of the source a variant reads
    (``amazon_hk.seed1`` reads ``amazon_hk``'s events: nothing is copied). A backtest origin
    (``amazon_hk.origin2``) reads the events before its origin only: every stage sees the data
    as it stood then."""
    rows = read_table(spark, root, table, dataset.source)
    if dataset.origin is None or table != S.EVENTS:
        return rows
    return rows.where(F.col(S.TS) < F.lit(backtest_origin(rows, dataset.origin)))


@contextmanager
def persisted_events(spark: SparkSession, root: str, dataset: DatasetRef) -> Iterator[DataFrame]:
    """A dataset's events (``user_id, item_id, ts, seq``) read from the lake once and persisted
    for one stage, released when the block ends: every table of the stage is computed from this
    one set, and nothing of it outlives the stage (a killed driver takes it with it)."""
    from pyspark import StorageLevel

    events = source_table(spark, root, S.EVENTS, dataset).select(S.USER_ID, S.ITEM_ID, S.TS, S.SEQ)
    persisted = events.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        yield persisted
    finally:
        persisted.unpersist()


def months_before(at: datetime, months: int) -> datetime:
    """The first instant of the month ``months`` months before ``at``'s month."""
    index = at.year * 12 + at.month - 1 - months
    return datetime(index // 12, index % 12 + 1, 1)


def backtest_origin(events: DataFrame, back: int) -> datetime:
    """The ``back``-th month boundary strictly before the last event (1: the last boundary).
    One aggregate over the timestamps (Delta answers it from file statistics)."""
    row = events.agg(F.max(S.TS)).first()
    last = None if row is None else row[0]
    if last is None:
        raise IntentError("no events: a backtest origin needs the data's last event")
    first_of_month = datetime(last.year, last.month, 1)
    latest = first_of_month if first_of_month < last else months_before(first_of_month, 1)
    return months_before(latest, back - 1)


def ingest_record(spark: SparkSession, root: str, dataset: DatasetRef) -> tuple[str, str]:
    """The source conf a dataset (or a variant's source) was ingested with and its item level,
    as its ingest manifest records them (``("cct", "mcc")`` for ``cct_mcc``). A dataset not
    ingested from files (a hand-built table), or ingested before they were recorded, is its own
    source at the default level."""
    source, level = dataset.source, S.DEFAULT_ITEM_LEVEL
    if not has_table(spark, root, S.INGEST_FILES):
        return source, level
    manifest = read_table(spark, root, S.INGEST_FILES, source)
    if S.ITEM_LEVEL not in manifest.columns:
        return source, level
    found = (
        manifest.where(F.col(S.ITEM_LEVEL).isNotNull()).select("source", S.ITEM_LEVEL).first()
    )  # a row per file
    return (source, level) if found is None else (found[0], found[1])


def ingested_source(spark: SparkSession, root: str, dataset: DatasetRef) -> str:
    """The source conf a dataset was ingested with (``cct`` for ``cct_mcc``); else its own name."""
    return ingest_record(spark, root, dataset)[0]


@contextmanager
def spark_conf(spark: SparkSession, settings: Mapping[str, str]) -> Iterator[None]:
    """Set SQL confs for the actions run inside the block, then restore them."""
    previous: dict[str, str | None] = {k: spark.conf.get(k, None) for k in settings}
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, before in previous.items():
            if before is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, before)
