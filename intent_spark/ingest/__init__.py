"""Ingest: a source's raw release files -> the canonical ``events``, ``items``, ``users``,
``rejects`` and ``ingest_files`` Delta tables, replacing that dataset's partition only."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

from intent_spark.core import schema as S
from intent_spark.core.datasets import VARIANT_SEPARATOR
from intent_spark.core.errors import IntentError
from intent_spark.core.faults import fault_point
from intent_spark.core.sources import EventsSpec, SourceConf
from intent_spark.ingest.events import (
    REASON_CHECKED,
    check_rows,
    drop_header_lines,
    narrowed,
    pad_id,
    parse_lines,
    raw_field,
    raw_field_names,
    to_events,
    to_rejects,
)
from intent_spark.ingest.files import check_gzip, find_files
from intent_spark.ingest.levels import item_labels, label_items, label_lines, labelled_spec
from intent_spark.ingest.lines import read_numbered_lines, read_numbered_parquet_rows
from intent_spark.ingest.metadata import (
    items_from_events,
    items_from_file,
    merge_items,
    read_table_file,
    users_from_file,
)
from intent_spark.lake.context import Lake
from intent_spark.lake.files import filesystem, to_uri
from intent_spark.lake.progress import spark_progress
from intent_spark.lake.tables import read_table, spark_conf, write_dataset

TRUNCATED_AFTER = "_truncated_after"
INGEST_SQL_CONF = {"spark.sql.files.ignoreCorruptFiles": "true"}


@dataclass(frozen=True)
class FileProblem:
    """A whole-file problem found before Spark reads it (empty, truncated gzip)."""

    path: str
    reason: str
    complete_lines: int | None = None


@dataclass(frozen=True)
class IngestSummary:
    """Counts after an ingest; ``rejects`` includes whole-file problems (line is null)."""

    dataset: str
    files: int
    raw_rows: int
    events: int
    rejects: int
    items: int
    users: int


def inspect_files(files: list[str], check_gzip_files: bool) -> list[FileProblem]:
    """Empty files, and gzip files whose stream stops early, as file-level problems."""
    problems = []
    for path in files:
        fs, local = filesystem(path)
        if fs.get_file_info(local).size == 0:
            problems.append(FileProblem(path, "empty file"))
            continue
        if check_gzip_files and path.endswith(".gz"):
            check = check_gzip(path)
            if check.truncated:
                problems.append(
                    FileProblem(
                        path,
                        f"truncated gzip: {check.error}; lines after {check.complete_lines} are lost",
                        check.complete_lines,
                    )
                )
            elif check.complete_lines == 0:
                problems.append(FileProblem(path, "empty file"))
    return problems


def _problem_frame(spark: SparkSession, problems: list[FileProblem], dataset: str) -> DataFrame:
    rows = [(dataset, to_uri(p.path), None, None, p.reason, None) for p in problems]
    return spark.createDataFrame(rows, S.REJECTS_SCHEMA)


def mark_truncated(spark: SparkSession, lines: DataFrame, problems: list[FileProblem]) -> DataFrame:
    """Add the last complete line of each truncated gzip (null for every other file)."""
    truncated = [(to_uri(p.path), p.complete_lines) for p in problems if p.complete_lines is not None]
    schema = StructType([StructField(S.SOURCE_FILE, StringType()), StructField(TRUNCATED_AFTER, LongType())])
    limits = spark.createDataFrame(truncated, schema)
    return lines.join(F.broadcast(limits), S.SOURCE_FILE, "left")


def read_checked_lines(
    spark: SparkSession, spec: EventsSpec, files: list[str], problems: list[FileProblem]
) -> DataFrame:
    """Every data line of the readable event files, parsed, with ``_reason`` null when good."""
    if spec.format == "parquet":
        numbered = read_numbered_parquet_rows(spark, files, raw_field_names(spec))
    else:
        numbered = read_numbered_lines(spark, files)
    lines = drop_header_lines(mark_truncated(spark, numbered, problems), spec)
    checked = check_rows(parse_lines(lines, spec), spec)
    cut_off = F.col(S.LINE) > F.col(TRUNCATED_AFTER)
    return checked.withColumn(
        REASON_CHECKED,
        F.when(cut_off, F.lit("incomplete last line of a truncated gzip")).otherwise(F.col(REASON_CHECKED)),
    )


def read_catalogue(
    spark: SparkSession,
    conf: SourceConf,
    raw_root: str,
    name: str,
    checked: DataFrame | None,
    events: DataFrame,
    progress: Callable[[str], None],
) -> DataFrame:
    """ITEMS rows: every item of the events or of a metadata file, with its tokens."""
    spec = conf.events
    if checked is not None and (spec.item_fields or spec.item_tokens):
        good = checked.where(F.col(REASON_CHECKED).isNull()).withColumns(
            {
                S.ITEM_ID: pad_id(raw_field(spec.item), spec.id_pad),
                S.SEQ: F.shiftleft(F.col("file_index"), S.FILE_SHIFT)
                + F.shiftleft(F.col(S.LINE), S.SUB_BITS),
            }
        )
        catalogue = items_from_events(good, spec, name)
    else:
        catalogue = (
            events.select(S.DATASET, S.ITEM_ID)
            .distinct()
            .select(
                S.DATASET,
                S.ITEM_ID,
                *[F.lit(None).cast("string").alias(c) for c in (S.TITLE, S.CATEGORY, S.BRAND)],
                F.array().cast("array<string>").alias(S.TOKENS),
            )
        )
    file_items = []
    for item_spec in conf.items:
        try:
            files = find_files(raw_root, item_spec.files, "item metadata")
        except IntentError:  # metadata is optional; the events carry the catalogue
            progress(f"{name}: no item metadata file matches {', '.join(item_spec.files)}; skipped")
            continue
        header = _has_header(files, item_spec.header, item_spec.columns, item_spec.key, item_spec.delimiter)
        df = read_table_file(spark, files, item_spec, header)
        file_items.append(items_from_file(df, item_spec, name))
    return merge_items(catalogue, file_items)


def read_profiles(
    spark: SparkSession, conf: SourceConf, raw_root: str, name: str, progress: Callable[[str], None]
) -> DataFrame:
    """USERS rows from the source's profile file, or none."""
    empty = spark.createDataFrame([], S.USERS_SCHEMA)
    spec = conf.users
    if spec is None:
        return empty
    try:
        files = find_files(raw_root, spec.files, "user profile")
    except IntentError:  # profiles are optional
        progress(f"{name}: no user profile file matches {', '.join(spec.files)}; skipped")
        return empty
    header = _has_header(files, spec.header, spec.columns, spec.key, spec.delimiter)
    df = read_table_file(spark, files, spec, header)
    return users_from_file(df, spec, name)


def ingest_source(lake: Lake, conf: SourceConf, raw_root: str, dataset: str | None = None) -> IngestSummary:
    """Read one source's raw files and replace its partition of every canonical table.

    The checked lines are persisted once on local disk (not the heap) because four outputs read
    them: events, rejects, the catalogue and the per-file counts. They keep only what those read
    (``events.narrowed``): persisting the whole parse cost more than the reads it saved.
    """
    spark, root, progress = lake.spark, lake.root, lake.progress
    name = dataset or conf.name
    if VARIANT_SEPARATOR in name:
        raise IntentError(
            f"dataset name {name!r}: '{VARIANT_SEPARATOR}' is kept for variants (amazon_hk.seed1)"
        )
    spec = conf.events
    event_files = find_files(raw_root, spec.files, "event-log")
    if len(event_files) > S.MAX_FILES:
        raise IntentError(f"{raw_root}: {len(event_files)} event files; seq has room for {S.MAX_FILES}")
    progress(f"{name}: {len(event_files)} event file(s) under {raw_root}")
    problems = inspect_files(event_files, conf.check_gzip)
    unreadable = {p.path for p in problems if p.complete_lines is None}
    readable = [f for f in event_files if f not in unreadable]
    file_rejects = _problem_frame(spark, problems, name)

    checked = fine_items = None
    fine = conf.item_levels.fine
    with spark_conf(spark, INGEST_SQL_CONF), spark_progress(spark, progress, f"{name} ingest"):
        try:
            catalogue = None
            if readable:
                # a coarse item level turns good lines into rejects later: those keep every line
                lines_read = read_checked_lines(spark, spec, readable, problems)
                checked = narrowed(lines_read, spec, keep_lines=bool(conf.level_field))
                checked = checked.persist(StorageLevel.DISK_ONLY)
                events = to_events(checked, spec, name)
                rejects = to_rejects(checked, name).unionByName(file_rejects)
                if conf.level_field:
                    progress(f"{name}: items at level {conf.level} (the {conf.level_field} of each {fine})")
                    fine_items = read_catalogue(spark, conf, raw_root, name, checked, events, progress)
                    fine_items = fine_items.persist(StorageLevel.DISK_ONLY)
                    labels = item_labels(fine_items, conf.level_field)
                    lines = label_lines(checked, labels, spec, conf.level_field, conf.level)
                    events = to_events(lines, labelled_spec(spec), name)
                    rejects = to_rejects(lines, name).unionByName(file_rejects)
                    catalogue = label_items(labels, conf.level_field, name)
            else:
                events = spark.createDataFrame([], S.EVENTS_SCHEMA)
                rejects = file_rejects
            progress(f"{name}: parsing and writing events")
            written_rows = {S.EVENTS: write_dataset(events, root, S.EVENTS, name)}
            fault_point("ingest.events")
            progress(f"{name}: writing rejects")
            written_rows[S.REJECTS] = write_dataset(rejects, root, S.REJECTS, name)
            written = read_table(spark, root, S.EVENTS, name)
            progress(f"{name}: writing items")
            if catalogue is None:
                catalogue = read_catalogue(spark, conf, raw_root, name, checked, written, progress)
            written_rows[S.ITEMS] = write_dataset(catalogue, root, S.ITEMS, name)
            progress(f"{name}: writing users")
            profiles = read_profiles(spark, conf, raw_root, name, progress)
            written_rows[S.USERS] = write_dataset(profiles, root, S.USERS, name)
            progress(f"{name}: reconciling raw rows with events and rejects")
            manifest = file_manifest(
                checked, written, read_table(spark, root, S.REJECTS, name), name, event_files
            )
            levelled = manifest.withColumns({"source": F.lit(conf.name), S.ITEM_LEVEL: F.lit(conf.level)})
            # one row per raw file: the summary's totals come from these rows, not a read-back
            per_file = levelled.collect()
            write_dataset(spark.createDataFrame(per_file, levelled.schema), root, S.INGEST_FILES, name)
        finally:
            for persisted in (checked, fine_items):
                if persisted is not None:
                    persisted.unpersist()

    return IngestSummary(
        dataset=name,
        files=len(per_file),
        raw_rows=sum(row["raw_rows"] or 0 for row in per_file),
        events=written_rows[S.EVENTS],
        rejects=written_rows[S.REJECTS],
        items=written_rows[S.ITEMS],
        users=written_rows[S.USERS],
    )


def file_manifest(
    checked: DataFrame | None, events: DataFrame, rejects: DataFrame, dataset: str, files: list[str]
) -> DataFrame:
    """One row per event file: raw data lines, lines that became events, and line rejects.

    ``raw_rows`` counts the data lines read, whatever became of them, so the invariant
    raw_rows = event_rows + reject_rows is a real check. A per-signal KuaiRand line counts once.
    """
    spark = events.sparkSession
    listed = spark.createDataFrame([(to_uri(f),) for f in files], f"{S.SOURCE_FILE} string")
    if checked is None:
        raw = spark.createDataFrame([], f"{S.SOURCE_FILE} string, file_index long, raw_rows long")
    else:
        raw = checked.groupBy(S.SOURCE_FILE, "file_index").agg(F.count(F.lit(1)).alias("raw_rows"))
    # Each line that became events has exactly one event with sub-event 0: no distinct needed.
    first_of_line = F.col(S.SEQ).bitwiseAND((1 << S.SUB_BITS) - 1) == 0
    event_rows = (
        events.where(first_of_line)
        .groupBy(F.shiftright(F.col(S.SEQ), S.FILE_SHIFT).alias("file_index"))
        .agg(F.count(F.lit(1)).alias("event_rows"))
    )
    reject_rows = (
        rejects.where(F.col(S.LINE).isNotNull())
        .groupBy(S.SOURCE_FILE)
        .agg(F.count(F.lit(1)).alias("reject_rows"))
    )
    return (
        listed.join(raw, S.SOURCE_FILE, "left")
        .join(event_rows, "file_index", "left")
        .join(reject_rows, S.SOURCE_FILE, "left")
        .select(
            F.lit(dataset).alias(S.DATASET),
            S.SOURCE_FILE,
            F.coalesce(F.col("file_index"), F.lit(-1)).alias("file_index"),
            F.coalesce(F.col("raw_rows"), F.lit(0)).alias("raw_rows"),
            F.coalesce(F.col("event_rows"), F.lit(0)).alias("event_rows"),
            F.coalesce(F.col("reject_rows"), F.lit(0)).alias("reject_rows"),
        )
    )


def _has_header(files: list[str], header: str, columns: tuple[str, ...], key: str, delimiter: str) -> bool:
    """Resolve ``header: auto`` by reading the first line of the first file."""
    if header != "auto":
        return header == "true"
    fs, local = filesystem(files[0])
    with fs.open_input_stream(local) as stream:
        first = stream.read(64 * 1024).split(b"\n", 1)[0].decode("utf-8", "replace")
    if columns:
        return first.strip().lstrip("\ufeff").startswith(columns[0])
    return key in [c.strip().strip('"') for c in first.split(delimiter)]
