"""MLflow: where runs go, how a trained model's run is found again, and the code version.

The default store is SQLite beside a local lake (``LAKE/../mlflow.db``, artifacts in
``LAKE/../mlartifacts``), so the embedded default needs no server; ``--tracking-uri`` or
``MLFLOW_TRACKING_URI`` point anywhere else (a server, Databricks).
"""

from __future__ import annotations

import logging
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import Any

from intent_spark.errors import IntentError

EXPERIMENT = "intent-spark"
TAG_DATASET = "intent.dataset"
TAG_MODEL = "intent.model"
TAG_STAGE = "intent.stage"
REPO_ROOT = Path(__file__).resolve().parent.parent


def default_tracking_uri(lake: str, explicit: str | None = None) -> str:
    if explicit:
        return explicit
    if os.environ.get("MLFLOW_TRACKING_URI"):
        return os.environ["MLFLOW_TRACKING_URI"]
    if "://" in lake:
        raise IntentError(f"{lake}: a remote lake needs --tracking-uri (or MLFLOW_TRACKING_URI)")
    return f"sqlite:///{Path(lake).resolve().parent / 'mlflow.db'}"


def _artifact_root(tracking_uri: str) -> str | None:
    """Artifacts beside a SQLite store; a server or other store decides for itself."""
    if tracking_uri.startswith("sqlite:///"):
        return (Path(tracking_uri.removeprefix("sqlite:///")).parent / "mlartifacts").resolve().as_uri()
    return None


def experiment_id(tracking_uri: str, name: str = EXPERIMENT) -> str:
    import mlflow

    logging.getLogger("alembic").setLevel(logging.WARNING)
    mlflow.set_tracking_uri(tracking_uri)
    found = mlflow.get_experiment_by_name(name)
    if found is not None:
        return found.experiment_id
    return mlflow.create_experiment(name, artifact_location=_artifact_root(tracking_uri))


@contextmanager
def start_run(tracking_uri: str, dataset: str, model: str, params: dict[str, Any]) -> Iterator[Any]:
    """A training run tagged with dataset and model; params logged before any training."""
    import mlflow

    exp = experiment_id(tracking_uri)
    tags = {TAG_DATASET: dataset, TAG_MODEL: model, TAG_STAGE: "train"}
    with mlflow.start_run(experiment_id=exp, run_name=f"{dataset}/{model}", tags=tags) as run:
        mlflow.log_params(params)
        yield run


def find_run(tracking_uri: str, dataset: str, model: str, run_id: str | None = None) -> Any:
    """The given run, or the newest finished training run of (dataset, model)."""
    import mlflow

    exp = experiment_id(tracking_uri)
    if run_id:
        return mlflow.get_run(run_id)
    runs = mlflow.search_runs(
        experiment_ids=[exp],
        filter_string=(
            f"tags.`{TAG_DATASET}` = '{dataset}' AND tags.`{TAG_MODEL}` = '{model}' "
            f"AND tags.`{TAG_STAGE}` = 'train' AND attributes.status = 'FINISHED'"
        ),
        order_by=["attributes.start_time DESC"],
        max_results=1,
        output_format="list",
    )
    if not runs:
        raise IntentError(
            f"no trained {model} for {dataset} in {tracking_uri}: run `intent train --dataset {dataset} --model {model}`"
        )
    return runs[0]


@cache
def code_version() -> str:
    """The git commit of the code (with ``+dirty`` for local changes), or the package version."""
    try:
        described = subprocess.run(
            ["git", "-C", str(REPO_ROOT), "describe", "--always", "--dirty=+dirty"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        )
        return described.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        from importlib.metadata import version

        return version("intent-spark")
