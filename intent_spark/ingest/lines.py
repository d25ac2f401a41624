"""Raw text lines with their file and line number, computed without a shuffle of the lines.

Spark reads a file in blocks; inside a block, rows arrive in file order with consecutive
``monotonically_increasing_id`` values. A tiny per-block table (first id, line count, and a
running total of lines over the file's earlier blocks) turns every row's id into its
1-based line number. The only shuffle is of that table: one row per block.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from intent_spark.core import schema as S

PATH = "_path"
BLOCK = "_block"
MONO = "_mono"
VALUE = "value"
FILE_INDEX = "file_index"


def read_numbered_lines(spark: SparkSession, files: list[str]) -> DataFrame:
    """One row per raw line: ``source_file, file_index, line, value``.

    ``file_index`` is the 0-based rank of the file path among the files read, so ``(file_index,
    line)`` is a total order of the source that does not depend on partitioning.
    """
    raw = spark.read.text(files).select(
        F.col(VALUE),
        F.col("_metadata.file_path").alias(PATH),
        F.col("_metadata.file_block_start").alias(BLOCK),
        F.monotonically_increasing_id().alias(MONO),
    )
    blocks = raw.groupBy(PATH, BLOCK).agg(
        F.min(MONO).alias("_first_mono"), F.count(F.lit(1)).alias("_block_lines")
    )
    in_file = Window.partitionBy(PATH).orderBy(BLOCK)
    blocks = blocks.select(
        PATH,
        BLOCK,
        "_first_mono",
        (F.sum("_block_lines").over(in_file) - F.col("_block_lines")).alias("_lines_before"),
        (F.dense_rank().over(Window.orderBy(PATH)) - 1).cast("long").alias(FILE_INDEX),
    )
    return raw.join(F.broadcast(blocks), [PATH, BLOCK]).select(
        F.col(PATH).alias(S.SOURCE_FILE),
        F.col(FILE_INDEX),
        (F.col("_lines_before") + F.col(MONO) - F.col("_first_mono") + 1).alias(S.LINE),
        F.col(VALUE),
    )


def read_numbered_parquet_rows(spark: SparkSession, files: list[str], fields: list[str]) -> DataFrame:
    """One row per Parquet row, shaped like ``read_numbered_lines``: the row's fields (as
    strings) are the JSON text in ``value``, and ``line`` is the 1-based row index in its file."""
    from intent_spark.core.errors import IntentError
    from intent_spark.lake.files import to_uri

    df = spark.read.parquet(*files)
    missing = [f for f in fields if f not in df.columns]
    if missing:
        raise IntentError(f"{files[0]}: field(s) {', '.join(missing)} not in the Parquet schema {df.columns}")
    order = spark.createDataFrame(
        [(to_uri(f), i) for i, f in enumerate(files)], f"{PATH} string, {FILE_INDEX} long"
    )
    rows = df.select(
        F.to_json(F.struct(*[F.col(f"`{f}`").cast("string").alias(f) for f in fields])).alias(VALUE),
        F.col("_metadata.file_path").alias(PATH),
        (F.col("_metadata.row_index") + 1).alias(S.LINE),
    )
    return rows.join(F.broadcast(order), PATH).select(
        F.col(PATH).alias(S.SOURCE_FILE), F.col(FILE_INDEX), F.col(S.LINE), F.col(VALUE)
    )
