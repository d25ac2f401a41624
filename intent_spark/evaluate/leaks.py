"""The leak measure: targets that some training event follows in time (scored on a period the
model was trained on), per test cell, for the INTENT split and every protocol variant."""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from intent_spark.core import schema as S
from intent_spark.core.datasets import DatasetRef
from intent_spark.lake.context import Lake
from intent_spark.lake.reports import compare_folder
from intent_spark.split.cells import training_events


def targets_preceding_training(training: DataFrame, targets: DataFrame) -> DataFrame:
    """The targets that some training event follows in time (any user's): scored on a period
    the model was trained on. One aggregate row is joined, nothing is collected."""
    last_training = training.agg(F.max(S.TS).alias("_last_training"))
    return (
        targets.crossJoin(last_training).where(F.col(S.TS) < F.col("_last_training")).drop("_last_training")
    )


def leaked_targets(lake: Lake, dataset: DatasetRef) -> DataFrame:
    """Per test cell: ``n_targets`` and ``n_leaked``, the targets some training event of the
    split follows in time (an INTENT split's, or a protocol variant's). One row per cell."""
    from intent_spark.split.populations import labelled_populations

    labelled = labelled_populations(lake, dataset)[S.TEST]
    targets = lake.read(S.TARGETS, dataset).where(F.col(S.SPLIT) == S.TEST)
    leaked = targets_preceding_training(training_events(labelled), targets).select(
        S.SEQ, F.lit(1).alias("_leaked")
    )
    return (
        targets.join(leaked, S.SEQ, "left")
        .groupBy(S.CELL)
        .agg(F.count(F.lit(1)).alias("n_targets"), F.count("_leaked").alias("n_leaked"))
    )


def write_leaks(lake: Lake, dataset: DatasetRef) -> Path:
    """Per test cell, the targets that some training event follows in time."""
    table = leaked_targets(lake, dataset).toPandas()  # one row per cell
    table.insert(0, S.DATASET, dataset)
    path = compare_folder(lake.root) / f"{dataset}.leaks.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(path, index=False)
    return path
