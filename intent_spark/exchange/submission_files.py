"""A submission file: its format, its bytes checked before Spark reads it, its sha256, and its
rows read from Parquet or JSON Lines with their line numbers."""

from __future__ import annotations

import hashlib

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from intent_spark.core import schema as S
from intent_spark.core.errors import IntentError
from intent_spark.exchange.submission_rows import ITEMS, OPTIONAL_STRINGS, SCORES, first_fault
from intent_spark.lake.files import filesystem

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
        *first_fault(faults),
    )
