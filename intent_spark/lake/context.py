"""A lake as the stages use it, in the manner of ``DeltaTable.forPath``: the Spark session, the
lake's root, its MLflow store and the progress line, made once at the edge (a command, a job,
the runner) and passed down instead of four loose arguments."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

from intent_spark.core.progress import Progress, silent


@dataclass(frozen=True)
class Lake:
    spark: Any  # pyspark.sql.SparkSession
    root: str  # a local path or an s3a:// URI
    tracking_uri: str | None = (
        None  # the MLflow store; None: MLFLOW_TRACKING_URI, else SQLite beside a local lake
    )
    progress: Progress = silent
    tracked: bool = True  # False: nothing is logged to MLflow (--no-mlflow)

    @cached_property
    def tracking(self) -> str | None:
        """The MLflow store the stages log to, resolved once (``tracking.default_tracking_uri``);
        None when tracking is off."""
        if not self.tracked:
            return None
        from intent_spark.lake.tracking import default_tracking_uri

        return default_tracking_uri(self.root, self.tracking_uri)

    def tracking_store(self, stage: str) -> str:
        """The store of a stage that cannot run without MLflow (``train`` keeps its models there;
        ``score``, ``transfer`` and an export read them back); one line where tracking is off."""
        from intent_spark.core.errors import IntentError

        if self.tracking is None:
            raise IntentError(
                f"{self.root}: {stage} needs MLflow, where the trained models are kept; it cannot run "
                "with tracking off"
            )
        return self.tracking

    def path(self, table: str) -> str:
        return f"{self.root.rstrip('/')}/{table}"

    def read(self, table: str, dataset: str | None = None) -> Any:
        """A table (one dataset's rows where given) as a DataFrame."""
        from intent_spark.lake.tables import read_table

        return read_table(self.spark, self.root, table, dataset)

    def has(self, table: str) -> bool:
        from intent_spark.lake.tables import has_table

        return has_table(self.spark, self.root, table)

    def write(self, df: Any, table: str, dataset: str, **partition: str) -> int:
        """Replace one dataset's part of a table in one transaction (``tables.write_dataset``)."""
        from intent_spark.lake.tables import write_dataset

        return write_dataset(df, self.root, table, dataset, **partition)
