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
    tracking_uri: str | None = None  # None: MLFLOW_TRACKING_URI, else SQLite beside a local lake
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
