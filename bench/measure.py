"""Shared measurement helpers for the benchmark scripts (not part of the library)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import psutil


class PeakMemory:
    """Largest resident set of this process tree seen while running."""

    def __init__(self, interval: float = 0.2) -> None:
        self.interval = interval
        self.peak_driver = 0
        self.peak_python = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        me = psutil.Process()
        while not self._stop.is_set():
            self.peak_python = max(self.peak_python, me.memory_info().rss)
            jvm = 0
            for child in me.children(recursive=True):
                try:  # a short-lived child (a Python worker) may end between listing and reading it
                    if "java" in child.name():
                        jvm += child.memory_info().rss
                except psutil.NoSuchProcess:
                    continue
            self.peak_driver = max(self.peak_driver, jvm)
            time.sleep(self.interval)

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def log_to_mlflow(
    tracking_uri: str, name: str, params: dict, rows: list[dict], step: str, artifacts: list[Path]
) -> str:
    """One MLflow run per benchmark (experiment ``intent-bench``): ``params`` as params, each
    row's numbers as metrics stepped by ``rows[i][step]`` (prefixed by the row's ``model`` when
    it has one), and the artifacts. Returns the run id."""
    from mlflow import MlflowClient

    from intent_spark.lake.tracking import experiment_id

    client = MlflowClient(tracking_uri)
    run_id = client.create_run(experiment_id(tracking_uri, "intent-bench"), run_name=name).info.run_id
    for key, value in params.items():
        client.log_param(run_id, key, value)
    for row in rows:
        prefix = f"{row['model']}." if "model" in row else ""
        for key, value in row.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool) and key != step:
                client.log_metric(run_id, prefix + key, float(value), step=int(row[step]))
    for path in artifacts:
        client.log_artifact(run_id, str(path))
    client.set_terminated(run_id)
    return run_id
