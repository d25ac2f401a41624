"""Scored submissions (SPEC 9): ranked lists from a model outside this process, checked row by
row and turned into ``ranks`` under the submission's name, so ``evaluate``, ``report``,
``compare`` and MLflow treat it as any model.

Every check is a column expression over the whole file; a faulty row is rejected with its
reason (``submission_rejects`` and a JSON Lines file) and its target scored as a miss, and each
kind of fault is one line with its count and an example. A column of the wrong type in a Parquet
file refuses the file; with ``strict`` any fault refuses the submission (its rejects are kept).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, Row, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from intent_spark.core import schema as S
from intent_spark.core.datasets import DatasetRef
from intent_spark.core.errors import IntentError
from intent_spark.exchange.tasks import split_targets
from intent_spark.lake.context import Lake
from intent_spark.lake.files import filesystem, write_single_file
from intent_spark.lake.spark_line import array_position, array_remove
from intent_spark.lake.tables import read_table, write_dataset
from intent_spark.split.populations import labelled_populations
from intent_spark.train.inputs import item_counts

ITEMS, SCORES = "items", "scores"
OPTIONAL_STRINGS = (S.DATASET, S.SPLIT)
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
# A JSON array of strings, and of numbers, as Spark's get_json_object writes them (compact).
STRING_LIST = r'^\[("([^"\\]|\\.)*"(,"([^"\\]|\\.)*")*)?\]$'
NUMBER = r"-?[0-9]+(\.[0-9]+)?([eE][+-]?[0-9]+)?"
NUMBER_LIST = rf"^\[({NUMBER}(,{NUMBER})*)?\]$"
# NaN and Infinity as Python's json.dumps writes them for float("nan") and float("inf"): not JSON.
NOT_JSON_NUMBER = r"[\[,:]\s*(-?Infinity|NaN)\s*[,\]}]"
NOT_AN_OBJECT = "not a JSON object"
# A list with a number among its elements, in get_json_object's compact JSON (elements that are
# strings skipped whole, so a digit inside a string is no number).
NUMBER_IN_LIST = r'^\[(("([^"\\]|\\.)*"|[^",\[\]{}]*),)*-?[0-9]'
LINE_BITS = 33  # monotonically_increasing_id: the partition above bit 33, the row below


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


NOTHING = "; nothing was scored"
# The first bytes of files a submission is not (the compressions by their magic numbers).
COMPRESSED = {
    b"\x1f\x8b": "gzip",
    b"BZh": "bzip2",
    b"\x28\xb5\x2f\xfd": "zstd",
    b"\xfd7zXZ": "xz",
    b"PK\x03\x04": "zip",
}
COMPRESSED_SUFFIXES = {".gz": "gzip", ".bz2": "bzip2", ".zst": "zstd", ".xz": "xz", ".zip": "zip"}
PARQUET_MAGIC = b"PAR1"


def submission_format(path: str) -> str:
    fs, inside = filesystem(path)
    info = fs.get_file_info(inside)
    if info.type.name == "NotFound":
        raise IntentError(f"{path}: no such file")
    suffix = next((s for s in COMPRESSED_SUFFIXES if path.endswith(s)), None)
    if suffix is not None:
        raise IntentError(
            f"{path}: a {COMPRESSED_SUFFIXES[suffix]}-compressed file; submit the .parquet or .jsonl file "
            f"itself, uncompressed (Parquet compresses its own columns){NOTHING}"
        )
    if info.type.name == "Directory" or path.endswith(".parquet"):
        return "parquet"
    if path.endswith((".jsonl", ".json", ".ndjson")):
        return "json"
    raise IntentError(f"{path}: a submission is Parquet (.parquet) or JSON Lines (.jsonl)")


def data_files(fs, folder: str) -> list[str]:
    """The data files of a folder submission (Spark's or pandas' part files), in name order:
    hidden and ``_``-prefixed files (``_SUCCESS``, ``.crc``) are not data."""
    import pyarrow.fs as pafs

    return sorted(
        f.path
        for f in fs.get_file_info(pafs.FileSelector(folder, recursive=True))
        if f.type == pafs.FileType.File and not f.base_name.startswith((".", "_"))
    )


def check_file_bytes(path: str, fmt: str) -> int | None:
    """Refuse, in one line and before Spark reads it, a file that is not what its name says:
    empty, compressed, cut short, not Parquet (pyarrow reads each Parquet file's footer), or
    Parquet named ``.jsonl``. Returns the Parquet rows (None for JSON Lines)."""
    import pyarrow.fs as pafs
    import pyarrow.parquet as pq

    fs, inside = filesystem(path)
    if fs.get_file_info(inside).type == pafs.FileType.Directory:
        files = data_files(fs, inside)
        named = {f: f"{path.rstrip('/')}/{f[len(inside.rstrip('/')) + 1 :]}" for f in files}
    else:
        files, named = [inside], {inside: path}
    rows = 0
    for file in files:
        where = named[file]
        size = fs.get_file_info(file).size or 0
        if size == 0:
            raise IntentError(f"{where}: the file is empty (0 bytes){NOTHING}")
        with fs.open_input_file(file) as source:
            head = source.read(8)
            if size >= 8:
                source.seek(size - 4)
                tail = source.read(4)
            else:
                tail = b""
            packed = next((name for magic, name in COMPRESSED.items() if head.startswith(magic)), None)
            if packed is not None:
                raise IntentError(
                    f"{where}: the file is {packed}-compressed; submit it uncompressed "
                    f"(Parquet compresses its own columns){NOTHING}"
                )
            if fmt == "json":
                if head.startswith(PARQUET_MAGIC):
                    raise IntentError(
                        f"{where}: a Parquet file named as JSON Lines; name it .parquet{NOTHING}"
                    )
                return None
            if not head.startswith(PARQUET_MAGIC):
                raise IntentError(
                    f"{where}: not a Parquet file (its bytes do not start with PAR1; a JSON Lines file "
                    f"is named .jsonl){NOTHING}"
                )
            if tail != PARQUET_MAGIC:
                raise IntentError(
                    f"{where}: a Parquet file cut short: it starts as Parquet but its footer is missing "
                    f"({size:,} bytes; copy or write it again){NOTHING}"
                )
            source.seek(0)
            try:
                rows += pq.ParquetFile(source).metadata.num_rows
            except Exception as exc:  # noqa: BLE001 - any unreadable footer is the file's fault
                raise IntentError(
                    f"{where}: a damaged Parquet file: its footer does not read "
                    f"({type(exc).__name__}: {str(exc).splitlines()[0][:200]}){NOTHING}"
                ) from None
    if not files:
        raise IntentError(f"{path}: the folder holds no Parquet file{NOTHING}")
    return rows


def check_submission_file(path: str) -> str:
    """The submission's format, once its bytes are known to be what its name says and to hold
    rows: every file-level refusal in one line, by pyarrow alone (before Spark starts)."""
    fmt = submission_format(path)
    if check_file_bytes(path, fmt) == 0:
        raise IntentError(f"{path}: the file holds no rows{NOTHING}")
    return fmt


def file_sha256(path: str) -> str:
    """sha256 of the file's bytes (of a folder: of its files' sums in name order)."""
    import pyarrow.fs as pafs

    fs, inside = filesystem(path)
    if fs.get_file_info(inside).type == pafs.FileType.Directory:
        files = data_files(fs, inside)
        return hashlib.sha256("".join(_digest(fs, f) for f in files).encode()).hexdigest()
    return _digest(fs, inside)


def _digest(fs, path: str) -> str:
    digest = hashlib.sha256()
    with fs.open_input_stream(path) as stream:
        while chunk := stream.read(1 << 22):
            digest.update(chunk)
    return digest.hexdigest()


def with_line_numbers(df: DataFrame) -> DataFrame:
    """``line``: each row's 1-based position in the file (a file scan keeps file order within
    and across its partitions; the offsets come from one count per partition)."""
    tagged = df.withColumn("_id", F.monotonically_increasing_id())
    part = F.shiftright("_id", LINE_BITS)
    sizes = sorted(tagged.groupBy(part.alias("_part")).count().collect())  # a row per partition
    offsets, total = [], 0
    for row in sizes:
        offsets.append((row["_part"], total))
        total += row["count"]
    offset_frame = df.sparkSession.createDataFrame(offsets or [(0, 0)], "_part long, _offset long")
    row_in_part = F.col("_id").bitwiseAND(F.lit((1 << LINE_BITS) - 1))
    return (
        tagged.withColumn("_part", part)
        .join(F.broadcast(offset_frame), "_part")
        .withColumn(S.LINE, F.col("_offset") + row_in_part + 1)
        .drop("_id", "_part", "_offset")
    )


def read_parquet_rows(spark: SparkSession, path: str) -> DataFrame:
    """The submission's rows as ``line, raw, target_id, items, scores, dataset, split, _kind,
    _field, _reason`` (no row-level type fault: a Parquet column has one type)."""
    df = spark.read.parquet(path)
    types = {f.name: f.dataType for f in df.schema.fields}
    for column in (S.TARGET_ID, ITEMS):
        if column not in types:
            raise IntentError(f"{path}: no column {column} (it has {', '.join(types) or 'none'})")
    expected = {
        S.TARGET_ID: (isinstance(types[S.TARGET_ID], T.StringType), "a string"),
        ITEMS: (_list_of(types[ITEMS], T.StringType), "a list of item id strings"),
    }
    if SCORES in types:
        expected[SCORES] = (_list_of(types[SCORES], T.NumericType), "a list of numbers")
    for column in OPTIONAL_STRINGS:
        if column in types:
            expected[column] = (isinstance(types[column], T.StringType), "a string")
    for column, (ok, wanted) in expected.items():
        if not ok:
            first = df.select(column).first()
            example = "" if first is None else f"; row 1 holds {first[0]!r}"
            raise IntentError(
                f"{path}: column {column} is {types[column].simpleString()} in all {df.count():,} rows, "
                f"expected {wanted}{example}; nothing was scored"
            )
    raw = F.to_json(F.struct(*[F.col(c) for c in df.columns]))
    return with_line_numbers(df).select(
        S.LINE,
        raw.alias(S.RAW),
        F.col(S.TARGET_ID),
        F.col(ITEMS),
        (F.col(SCORES).cast("array<double>") if SCORES in types else F.lit(None).cast("array<double>")).alias(
            SCORES
        ),
        *[(F.col(c) if c in types else F.lit(None).cast("string")).alias(f"_{c}") for c in OPTIONAL_STRINGS],
        *[F.lit(None).cast("string").alias(c) for c in ("_kind", "_field", "_reason")],
    )


def _list_of(data_type: T.DataType, element: type) -> bool:
    return isinstance(data_type, T.ArrayType) and isinstance(data_type.elementType, element)


def read_json_rows(spark: SparkSession, path: str) -> DataFrame:
    """JSON Lines rows in the same columns as ``read_parquet_rows``; a line that is no JSON
    object, or whose field has the wrong JSON type, carries its fault."""
    lines = with_line_numbers(spark.read.text(path))
    value = F.col("value")

    def raw_field(name: str) -> Column:
        return F.get_json_object(value, f"$.{name}")

    is_string = {name: value.rlike(rf'"{name}"\s*:\s*"') for name in (S.TARGET_ID, *OPTIONAL_STRINGS)}
    items = raw_field(ITEMS)
    not_json = F.json_object_keys(value).isNull()
    faults = [
        (
            not_json & value.rlike(NOT_JSON_NUMBER),
            "NaN or Infinity in JSON",
            "row",
            F.format_string(
                "the line holds %s, which is not JSON: Python's json.dumps writes float('nan') and "
                "float('inf') so; give finite numbers",
                F.regexp_extract(value, NOT_JSON_NUMBER, 1),
            ),
        ),
        (not_json, NOT_AN_OBJECT, "row", F.lit("the line is not a JSON object")),
        (
            raw_field(S.TARGET_ID).isNotNull() & ~is_string[S.TARGET_ID],
            "wrong type",
            S.TARGET_ID,
            F.concat(F.lit("target_id "), raw_field(S.TARGET_ID), F.lit(" is not a string")),
        ),
        (
            items.isNotNull() & ~items.rlike(STRING_LIST),
            "wrong type",
            ITEMS,
            F.when(
                value.rlike(rf'"{ITEMS}"\s*:\s*"'),
                F.lit('items is a string, not a list of item id strings (write ["a"], not "a")'),
            )
            .when(
                items.rlike(NUMBER_IN_LIST),
                F.lit('items is not a list of item id strings: it holds a number (write "123", not 123)'),
            )
            .otherwise(F.lit("items is not a list of item id strings")),
        ),
        (
            raw_field(SCORES).isNotNull() & ~raw_field(SCORES).rlike(NUMBER_LIST),
            "wrong type",
            SCORES,
            F.lit("scores is not a list of numbers"),
        ),
        *[
            (raw_field(c).isNotNull() & ~is_string[c], "wrong type", c, F.lit(f"{c} is not a string"))
            for c in OPTIONAL_STRINGS
        ],
    ]
    return lines.select(
        S.LINE,
        value.alias(S.RAW),
        raw_field(S.TARGET_ID).alias(S.TARGET_ID),
        F.from_json(raw_field(ITEMS), "array<string>").alias(ITEMS),
        F.from_json(raw_field(SCORES), "array<double>").alias(SCORES),
        *[raw_field(c).alias(f"_{c}") for c in OPTIONAL_STRINGS],
        *_first_fault(faults),
    )


def _first_fault(faults: list[tuple[Column, str, str, Column]]) -> list[Column]:
    """``_kind, _field, _reason`` of the first fault that holds (nulls when none)."""
    kind = field = reason = None
    for condition, name, column, text in reversed(faults):
        kind = (
            F.when(condition, F.lit(name)) if kind is None else F.when(condition, F.lit(name)).otherwise(kind)
        )
        field = (
            F.when(condition, F.lit(column))
            if field is None
            else F.when(condition, F.lit(column)).otherwise(field)
        )
        reason = F.when(condition, text) if reason is None else F.when(condition, text).otherwise(reason)
    assert kind is not None and field is not None and reason is not None
    return [kind.alias("_kind"), field.alias("_field"), reason.alias("_reason")]


def checked_rows(
    rows: DataFrame, known: DataFrame, catalogue_ids: DataFrame, n_items: int, dataset: str, split: str
) -> DataFrame:
    """Each row with the first fault that holds (``_kind, _field, _reason``; null when the row
    is accepted) and, where its id is known, its target's ``split, seq, cell, user_id, item_id``.
    A row's type fault comes first; a list's items are checked against the catalogue only in
    one exploded anti-join."""
    items = F.col(ITEMS)
    scores = F.col(SCORES)
    n = F.size(items)
    copies = F.count(F.lit(1)).over(_by_target())
    exploded = rows.where(items.isNotNull()).select(S.LINE, F.posexplode(items).alias("_pos", S.ITEM_ID))
    unknown = (
        # the catalogue goes to every task: the list items are looked up where they are read,
        # never shuffled (only the few unknown ones are grouped by line)
        exploded.join(F.broadcast(catalogue_ids), S.ITEM_ID, "left_anti")
        .groupBy(S.LINE)
        .agg(F.min(F.struct("_pos", S.ITEM_ID)).getField(S.ITEM_ID).alias("_unknown"))
    )
    repeated = F.filter(items, lambda x, i: array_position(items, x) <= i)
    rising = F.filter(
        F.sequence(F.lit(2), F.greatest(n, F.lit(2))),
        lambda i: (i <= n) & (F.try_element_at(scores, i) > F.try_element_at(scores, i - 1)),
    )
    text = F.format_string
    faults = [
        (F.col("_kind").isNotNull(), F.col("_kind"), F.col("_field"), F.col("_reason")),
        (F.col(S.TARGET_ID).isNull(), "no target_id", S.TARGET_ID, F.lit("the row has no target_id")),
        (
            F.col(f"_{S.DATASET}").isNotNull() & (F.col(f"_{S.DATASET}") != dataset),
            "another dataset",
            S.DATASET,
            text(f"a row of dataset %s; this submission is for {dataset}", F.col(f"_{S.DATASET}")),
        ),
        (
            F.col(f"_{S.SPLIT}").isNotNull() & (F.col(f"_{S.SPLIT}") != split),
            "another split",
            S.SPLIT,
            text(f"a row of split %s; this submission is for {split}", F.col(f"_{S.SPLIT}")),
        ),
        (
            F.col("_target_split").isNull(),
            "unknown target_id",
            S.TARGET_ID,
            text("unknown target_id %s", F.col(S.TARGET_ID)),
        ),
        (
            F.col("_target_split") != split,
            "another split",
            S.TARGET_ID,
            text(
                f"target_id %s is a target of the %s split; this submission is for {split}",
                F.col(S.TARGET_ID),
                F.col("_target_split"),
            ),
        ),
        (
            copies > 1,
            "target submitted more than once",
            S.TARGET_ID,
            text("target_id %s has %d rows (all are rejected)", F.col(S.TARGET_ID), copies),
        ),
        (items.isNull() | (n == 0), "empty list", ITEMS, F.lit("the list of items is empty")),
        (
            n > n_items,
            "list longer than the catalogue",
            ITEMS,
            text(f"a list of %d items; the catalogue has {n_items:,}", n),
        ),
        (
            # a hashed distinct first: the pairwise search (quadratic in the list) runs only on a
            # list that has a repeat, never on a whole catalogue's clean list
            (F.size(F.array_distinct(items)) < n) & (F.size(repeated) > 0),
            "item repeated in a list",
            ITEMS,
            text("item %s appears more than once", F.element_at(repeated, 1)),
        ),
        (
            F.col("_unknown").isNotNull(),
            "item not in the catalogue",
            ITEMS,
            text(f"item %s is not in the {split} split's catalogue", F.col("_unknown")),
        ),
        (
            scores.isNotNull() & (F.size(scores) != n),
            "scores of another length",
            SCORES,
            text("%d scores for %d items", F.size(scores), n),
        ),
        (
            scores.isNotNull()
            & F.exists(scores, lambda x: x.isNull() | F.isnan(x) | (F.abs(x) == F.lit(float("inf")))),
            "score not finite",
            SCORES,
            F.lit("scores hold a null, NaN or infinity"),
        ),
        (
            scores.isNotNull() & (F.size(rising) > 0),
            "scores rising",
            SCORES,
            text(
                "scores rise at position %d (%s after %s)",
                F.element_at(rising, 1),
                F.element_at(scores, F.element_at(rising, 1)).cast("string"),
                F.element_at(scores, F.element_at(rising, 1) - 1).cast("string"),
            ),
        ),
    ]
    joined = rows.join(known, S.TARGET_ID, "left").join(unknown, S.LINE, "left")
    return joined.select(
        *[c for c in joined.columns if c not in ("_kind", "_field", "_reason", "_unknown")],
        *_first_fault(faults),
    )


def _by_target():
    from pyspark.sql import Window

    return Window.partitionBy(S.TARGET_ID)


def target_ranks(accepted: DataFrame) -> DataFrame:
    """``rank, tied`` of each accepted row's target: its position in the list, the expected
    position within its tie group where scores are given, +inf when it is not listed."""
    items, scores = F.col(ITEMS), F.col(SCORES)
    position = array_position(items, F.col(S.ITEM_ID)).cast("int")
    own = F.element_at(scores, F.greatest(position, F.lit(1)))
    first = array_position(scores, own)
    # the scores equal to the target's: a lambda comparing each score with ``own`` would search
    # the list for the target once per score (quadratic); removing them is one pass
    group = F.size(scores) - F.size(array_remove(scores, own))
    beyond = position == 0
    rank = (
        F.when(beyond, F.lit(float("inf")))
        .when(scores.isNull(), position.cast("double"))
        .otherwise(first + (group - 1) / 2.0)
    )
    tied = F.when(beyond | scores.isNull(), F.lit(0)).otherwise(group - 1)
    return accepted.select(S.TARGET_ID, rank.alias(S.RANK), tied.cast("long").alias(S.TIED))


def check_name(name: str) -> None:
    from intent_spark.train.registry import registered

    if not NAME_PATTERN.fullmatch(name):
        raise IntentError(
            f"--name {name!r}: letters, digits, '_', '.' and '-' only, starting with a letter or digit"
        )
    if name in registered():
        raise IntentError(
            f"--name {name}: a registered model has that name (its ranks would be replaced); choose another"
        )


def submit(
    lake: Lake, dataset: DatasetRef, path: str, name: str, *, split: str = S.TEST, strict: bool = False
) -> Scored:
    """Check the submission, write its ranks (every target of the split: rejected and missing
    ones as misses), its ``submissions`` row, its rejects and its MLflow run."""
    spark, root, progress = lake.spark, lake.root, lake.progress
    check_name(name)
    fmt = check_submission_file(path)
    populations = labelled_populations(spark, root, dataset)
    if split not in populations:
        raise IntentError(f"{dataset} has no {split} split (it has {', '.join(populations)})")
    sha = file_sha256(path)
    rows = read_parquet_rows(spark, path) if fmt == "parquet" else read_json_rows(spark, path)
    targets = split_targets(spark, root, dataset)
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
    if not sub.lake.tracking_uri:
        return None
    return _log_submission(sub.lake.tracking_uri, sub.dataset, sub.name, {**record, "format": sub.fmt})


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
