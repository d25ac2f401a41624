"""Raw text lines with their file and line number, computed without a shuffle of the lines.

Spark reads a file in blocks; inside a block, rows arrive in file order with consecutive
``monotonically_increasing_id`` values. A tiny per-block table (first id, line count, and a
running total of lines over the file's earlier blocks) turns every row's id into its
1-based line number. The only shuffle is of that table: one row per block.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from intent_spark import schema as S

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
