"""Scored submissions (SPEC 9): ``submit`` checks a file of ranked lists from a model outside this
process (``submission_files``, ``submission_rows``) and commits it as ``ranks`` under its name, so
``evaluate``, ``report``, ``compare`` and MLflow treat it as any model; a faulty row is rejected
with its reason (``submission_rejects`` and a JSON Lines file) and its target scored as a miss.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark import StorageLevel
from pyspark.sql import DataFrame, Row
from pyspark.sql import functions as F

from intent_spark.core import schema as S
from intent_spark.core.datasets import DatasetRef
from intent_spark.core.errors import IntentError
from intent_spark.exchange.submission_files import (
    NOT_AN_OBJECT,
    NOTHING,
    check_submission_file,
    file_sha256,
    read_json_rows,
    read_parquet_rows,
)
from intent_spark.exchange.submission_rows import ITEMS, SCORES, check_name, checked_rows, target_ranks
from intent_spark.exchange.tasks import split_targets
from intent_spark.lake.context import Lake
from intent_spark.lake.files import filesystem, write_single_file
from intent_spark.lake.tables import read_table, write_dataset
from intent_spark.split.populations import labelled_populations
from intent_spark.train.inputs import item_counts


@dataclass(frozen=True)
class Fault:
    """One kind of rejected row: how many, and the first one's line and reason."""

    kind: str
    count: int
    line: int
    reason: str
    unit: str = "line"  # what the file's rows are called: lines of JSON Lines, rows of Parquet

    def message(self) -> str:
        rows = "row" if self.count == 1 else "rows"
        return f"{self.count:,} {rows} rejected: {self.kind} (e.g. {self.unit} {self.line}: {self.reason})"


@dataclass(frozen=True)
class Scored:
    """What ``submit`` measured and committed."""

    model: str
    split: str
    rows: int
    accepted: int
    faults: list[Fault]
    targets: int
    missing: int
    missing_example: str | None
    list_length: int
    longest_list: int
    sha256: str
    run_id: str | None
    rejects_file: str | None

    @property
    def rejected(self) -> int:
        return sum(f.count for f in self.faults)


def submit(
    lake: Lake, dataset: DatasetRef, path: str, name: str, *, split: str = S.TEST, strict: bool = False
) -> Scored:
    """Check the submission, write its ranks (every target of the split: rejected and missing
    ones as misses), its ``submissions`` row, its rejects and its MLflow run."""
    spark, progress = lake.spark, lake.progress
    check_name(name)
    fmt = check_submission_file(path)
    populations = labelled_populations(lake, dataset)
    if split not in populations:
        raise IntentError(f"{dataset} has no {split} split (it has {', '.join(populations)})")
    sha = file_sha256(path)
    rows = read_parquet_rows(spark, path) if fmt == "parquet" else read_json_rows(spark, path)
    targets = split_targets(lake, dataset)
    known = targets.select(
        S.TARGET_ID, F.col(S.SPLIT).alias("_target_split"), S.SEQ, S.CELL, S.USER_ID, S.ITEM_ID
    )
    catalogue_ids = item_counts(populations[split]).select(S.ITEM_ID).persist(StorageLevel.MEMORY_AND_DISK)
    n_items = catalogue_ids.count()
    progress(f"{dataset} {split} {name}: checking {path} ({fmt}) against {n_items:,} catalogue items")
    checked = checked_rows(rows, known, catalogue_ids, n_items, dataset, split).persist(
        StorageLevel.MEMORY_AND_DISK
    )
    try:
        submission = Submission(lake, dataset, split, name, path, fmt, sha, strict)
        return _score_checked(submission, checked, targets)
    finally:
        checked.unpersist()
        catalogue_ids.unpersist()


@dataclass(frozen=True)
class Submission:
    """One ``intent submit``: where it goes and what it is (its file, format and digest)."""

    lake: Lake
    dataset: str
    split: str
    name: str
    path: str
    fmt: str
    sha: str
    strict: bool

    @property
    def where(self) -> str:
        return f"{self.dataset} {self.split} {self.name}"


def _score_checked(sub: Submission, checked: DataFrame, targets: DataFrame) -> Scored:
    total, faults, lengths = _faults(sub, checked)
    accepted = checked.where(F.col("_reason").isNull())
    split_rows = targets.where(F.col(S.SPLIT) == sub.split)
    # an accepted row's target is unique (every copy of a repeated one is rejected)
    listed = split_rows.select(S.TARGET_ID).join(
        accepted.select(S.TARGET_ID, F.lit(True).alias("_listed")), S.TARGET_ID, "left"
    )
    absent = F.col("_listed").isNull()
    n_targets, missing, example = listed.agg(
        F.count(F.lit(1)), F.count(F.when(absent, 1)), F.min(F.when(absent, F.col(S.TARGET_ID)))
    ).first()
    for fault in faults:
        sub.lake.progress(f"{sub.where}: warning: {fault.message()}")
    if missing:
        sub.lake.progress(
            f"{sub.where}: warning: {missing:,} of {n_targets:,} targets have no accepted row and "
            f"are scored as misses (e.g. target_id {example})"
        )
    rejected = checked.where(F.col("_reason").isNotNull())
    rejects_file = _write_rejects(sub, rejected, bool(faults))
    if sub.strict and (faults or missing):
        kinds = [fault.message() for fault in faults]
        if missing:
            kinds.append(f"{missing:,} targets missing (e.g. target_id {example})")
        raise IntentError(
            f"{sub.path}: --strict: "
            + "; ".join(kinds)
            + (f"; rejects in {rejects_file}" if rejects_file else "")
            + NOTHING
        )
    if lengths is None:
        unit = "row" if sub.fmt == "parquet" else "line"
        raise IntentError(
            f"{sub.path}: no {unit} is usable ({total:,} rejected"
            + (f"; see {rejects_file}" if rejects_file else "")
            + ")"
        )
    shortest, longest, n_accepted, n_scored = (
        int(lengths[k]) for k in ("shortest", "longest", "count", "scored")
    )
    record = {
        S.DATASET: sub.dataset,
        S.SPLIT: sub.split,
        S.MODEL: sub.name,
        "file": sub.path,
        "sha256": sub.sha,
        "rows": total,
        "accepted": n_accepted,
        "rejected": total - n_accepted,
        "targets": n_targets,
        "missing": missing,
        S.LIST_LENGTH: shortest,
        "longest_list": longest,
        "has_scores": n_scored > 0,
    }
    run_id = _commit(sub, record, split_rows.join(target_ranks(accepted), S.TARGET_ID, "left"))
    sub.lake.progress(
        f"{sub.where}: {n_accepted:,} of {total:,} rows accepted, lists of {shortest:,}-{longest:,} items; "
        f"metrics at K <= {shortest:,} are exact, above it unavailable"
    )
    return Scored(
        sub.name,
        sub.split,
        total,
        n_accepted,
        faults,
        n_targets,
        missing,
        example,
        shortest,
        longest,
        sub.sha,
        run_id,
        rejects_file,
    )


def _faults(sub: Submission, checked: DataFrame) -> tuple[int, list[Fault], Row | None]:
    """The rows of the file, its faults by kind (first line first), and the accepted rows'
    count and list lengths (None: no row accepted); a file with no row, or a JSON file with no
    object in it, is refused in one line."""
    # one pass over the checked rows: a row per kind of fault (and one for the accepted rows,
    # kind null) with its count, its first line and the accepted lists' lengths
    kinds = (
        checked.groupBy("_kind")
        .agg(
            F.count(F.lit(1)).alias("count"),
            F.min(F.struct(S.LINE, "_reason")).alias("_first"),
            F.min(F.size(ITEMS)).alias("shortest"),
            F.max(F.size(ITEMS)).alias("longest"),
            F.count(SCORES).alias("scored"),
        )
        .collect()
    )
    total = sum(r["count"] for r in kinds)
    if total == 0:
        raise IntentError(f"{sub.path}: the file holds no rows{NOTHING}")
    unit = "row" if sub.fmt == "parquet" else "line"
    faults = [
        Fault(r["_kind"], r["count"], r["_first"]["line"], r["_first"]["_reason"], unit)
        for r in sorted(kinds, key=lambda r: r["_first"]["line"])
        if r["_kind"] is not None
    ]
    if sub.fmt == "json" and [f.kind for f in faults] == [NOT_AN_OBJECT] and faults[0].count == total:
        lines = "line" if total == 1 else "lines"
        raise IntentError(
            f"{sub.path}: not JSON Lines: none of its {total:,} {lines} is a JSON object (line 1: "
            f"{_shown_line(checked)}); write one JSON object per line{NOTHING}"
        )
    return total, faults, next((r for r in kinds if r["_kind"] is None), None)


def _commit(sub: Submission, record: dict, ranked: DataFrame) -> str | None:
    """The submission's ``submissions`` row, its ranks (a target with no accepted row a miss)
    and its MLflow run (the run's id, None without a store)."""
    ranks = ranked.select(
        S.DATASET,
        S.SPLIT,
        S.CELL,
        F.lit(sub.name).alias(S.MODEL),
        S.USER_ID,
        S.SEQ,
        F.coalesce(F.col(S.RANK), F.lit(float("inf"))).alias(S.RANK),
        F.coalesce(F.col(S.TIED), F.lit(0)).alias(S.TIED),
    )
    write_dataset(
        sub.lake.spark.createDataFrame([record], S.SUBMISSIONS_SCHEMA),
        sub.lake.root,
        S.SUBMISSIONS,
        sub.dataset,
        model=sub.name,
        split=sub.split,
    )
    # the shortest list first: ranks without it would read as 0 beyond the lists
    written = write_dataset(ranks, sub.lake.root, S.RANKS, sub.dataset, model=sub.name, split=sub.split)
    if written != record["targets"]:
        raise IntentError(f"{sub.where}: wrote {written:,} ranks for {record['targets']:,} targets")
    if sub.lake.tracking is None:
        return None
    return _log_submission(sub.lake.tracking, sub.dataset, sub.name, {**record, "format": sub.fmt})


def _shown_line(checked: DataFrame) -> str:
    """The first line of a file, cut to 60 characters, as a user would recognise it."""
    first = checked.where(F.col(S.LINE) == 1).select(S.RAW).first()
    text = "" if first is None or first[0] is None else first[0]
    return repr(text[:60] + ("..." if len(text) > 60 else ""))


def _write_rejects(sub: Submission, rejected: DataFrame, any_rejected: bool) -> str | None:
    """The rejected rows into ``submission_rejects`` (replacing this submission's earlier ones)
    and, when there are any, one JSON Lines file beside the lake's reports; its path."""
    spark, root = sub.lake.spark, sub.lake.root
    dataset, split, name = sub.dataset, sub.split, sub.name
    rows = rejected.select(
        F.lit(dataset).alias(S.DATASET),
        F.lit(split).alias(S.SPLIT),
        F.lit(name).alias(S.MODEL),
        S.LINE,
        S.TARGET_ID,
        F.col("_field").alias(S.FIELD),
        F.col("_reason").alias(S.REASON),
        S.RAW,
    )
    write_dataset(rows, root, S.SUBMISSION_REJECTS, dataset, model=name, split=split)
    path = f"{root.rstrip('/')}/reports/submissions/{dataset}/{name}/{split}/rejects.jsonl"
    fs, inside = filesystem(path)
    if fs.get_file_info(inside).type.name == "File":
        fs.delete_file(inside)
    if not any_rejected:
        return None
    fs.create_dir(inside.rsplit("/", 1)[0], recursive=True)
    stored = read_table(spark, root, S.SUBMISSION_REJECTS, dataset).where(
        (F.col(S.MODEL) == name) & (F.col(S.SPLIT) == split)
    )
    write_single_file(
        stored.select(S.LINE, S.TARGET_ID, S.FIELD, S.REASON, S.RAW).orderBy(S.LINE), path, "json"
    )
    return path


def _log_submission(tracking_uri: str, dataset: str, name: str, record: dict) -> str:
    from intent_spark.lake.tracking import code_version, start_run

    params = {f"submission.{k}": v for k, v in record.items() if k not in (S.DATASET, S.MODEL)}
    params.update({"dataset": dataset, "model": name, "kind": "submission", "code_version": code_version()})
    with start_run(tracking_uri, dataset, name, params, stage="submission") as run:
        return run.run_id
