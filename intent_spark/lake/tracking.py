"""MLflow: where runs go, how a trained model's run is found again, and the code version.

The default store is SQLite beside a local lake (``LAKE/../mlflow.db``, artifacts in
``LAKE/../mlartifacts``), so the embedded default needs no server; ``--tracking-uri`` or
``MLFLOW_TRACKING_URI`` point anywhere else (a server, Databricks). A lake on an object store
with a SQLite tracking store keeps its artifacts on that store too (``s3://BUCKET/mlartifacts``
beside ``s3a://BUCKET/lake``), so training and scoring processes on other machines reach them.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import socket
import subprocess
import typing
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from functools import cache
from pathlib import Path
from typing import Any

from intent_spark.core.conf import REPO_ROOT, environment
from intent_spark.core.errors import IntentError
from intent_spark.lake.locks import pid_alive

EXPERIMENT = "intent-spark"
TAG_DATASET = "intent.dataset"
TAG_MODEL = "intent.model"
TAG_STAGE = "intent.stage"
TAG_WRITER = "intent.writer"  # host:pid of the process that opened the run
TAG_PARENT = "mlflow.parentRunId"  # MLflow's own tag: the UI nests a run under its parent
T = typing.TypeVar("T")

# MLflow retries a refused request 7 times with doubling waits (minutes in all); a stopped
# server is said in seconds instead. Set these variables to wait longer.
RETRIES_ENV = "MLFLOW_HTTP_REQUEST_MAX_RETRIES"
os.environ.setdefault(RETRIES_ENV, "3")
os.environ.setdefault("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1")
# Stores that refused a request after all its retries, until one answers again: the calls that
# close a failed run try them once (each retried call would wait another 7 s for nothing).
_REFUSED: set[str] = set()


@contextmanager
def reaching(tracking_uri: str) -> Iterator[None]:
    """MLflow's errors inside the block as one line naming the store (a stopped server, a
    refused request), never a traceback; the stage that called fails and a rerun continues."""
    from mlflow.exceptions import MlflowException

    try:
        yield
    except MlflowException as exc:
        text = str(exc).strip()
        first = (text.splitlines() or [type(exc).__name__])[0]
        if "Max retries exceeded" in text or "Connection refused" in text or "ConnectionError" in text:
            _REFUSED.add(tracking_uri)
            raise IntentError(
                f"MLflow at {tracking_uri} is unreachable (connection refused); start it, or point "
                "--tracking-uri elsewhere, and rerun: no run of this stage was logged as finished"
            ) from exc
        raise IntentError(f"MLflow at {tracking_uri}: {first[:300]}") from exc
    _REFUSED.discard(tracking_uri)


def closing_runs(tracking_uri: str) -> AbstractContextManager[None]:
    """MLflow's requests inside the block (a failed run's last status) tried once, without
    retries, while the store has refused this process's last request; as set otherwise."""
    return environment(RETRIES_ENV, "0" if tracking_uri in _REFUSED else None)


def reaches_store(function: Callable[..., T]) -> Callable[..., T]:
    """``reaching`` around a whole function whose first argument is the tracking URI."""

    @functools.wraps(function)
    def wrapped(tracking_uri: str, *args: Any, **kwargs: Any) -> T:
        with reaching(tracking_uri):
            return function(tracking_uri, *args, **kwargs)

    return wrapped


def writer_tag() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def close_abandoned_runs(tracking_uri: str, filter_string: str = "") -> list[str]:
    """Runs still RUNNING that a process of this host opened and died with (killed, or its
    store gone before it could say FAILED) are set FAILED: none looks in progress or finished
    that is neither. Returns their ids."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri)
    where = f"attributes.status = 'RUNNING' AND tags.`{TAG_WRITER}` LIKE '{socket.gethostname()}:%'"
    closed = []
    for run in client.search_runs([experiment_id(tracking_uri)], filter_string=f"{where} {filter_string}"):
        pid = int(run.data.tags[TAG_WRITER].rsplit(":", 1)[1])
        if pid != os.getpid() and not pid_alive(pid):
            client.set_terminated(run.info.run_id, "FAILED")
            closed.append(run.info.run_id)
    return closed


def default_tracking_uri(root: str, explicit: str | None = None) -> str:
    """The tracking store of a lake: ``explicit``, else ``MLFLOW_TRACKING_URI``, else SQLite beside
    a local lake. For a lake on an object store with a SQLite tracking store, the experiment is
    made (if new) with its artifacts on the lake's store, beside the lake."""
    from intent_spark.lake.files import on_store

    uri = explicit or os.environ.get("MLFLOW_TRACKING_URI")
    if not uri:
        if "://" in root:
            raise IntentError(f"{root}: a remote lake needs --tracking-uri (or MLFLOW_TRACKING_URI)")
        return f"sqlite:///{Path(root).resolve().parent / 'mlflow.db'}"
    if on_store(root) and uri.startswith("sqlite:///"):
        experiment_id(uri, artifact_location=store_artifact_root(root))
    return uri


def store_artifact_root(root: str) -> str:
    """``s3://BUCKET/PARENT/mlartifacts`` for ``s3a://BUCKET/PARENT/lake`` (MLflow names S3 s3://)."""
    path = root.split("://", 1)[1].rstrip("/")
    parent = path.rsplit("/", 1)[0] if "/" in path else path
    return f"s3://{parent}/mlartifacts"


def _artifact_root(tracking_uri: str) -> str | None:
    """Artifacts beside a SQLite store; a server or other store decides for itself."""
    if tracking_uri.startswith("sqlite:///"):
        return (Path(tracking_uri.removeprefix("sqlite:///")).parent / "mlartifacts").resolve().as_uri()
    return None


@contextmanager
def store(tracking_uri: str) -> Iterator[None]:
    """MLflow's fluent calls (``mlflow.log_*``) go to ``tracking_uri`` inside the block only.
    MLflow keeps the store in a global and in ``MLFLOW_TRACKING_URI``; left set, it would be
    the default store of the next lake this process touches."""
    import mlflow

    before = os.environ.get("MLFLOW_TRACKING_URI")
    mlflow.set_tracking_uri(tracking_uri)
    try:
        yield
    finally:
        mlflow.set_tracking_uri(typing.cast(str, before))  # None: MLflow's own default again


@reaches_store
def experiment_id(tracking_uri: str, name: str = EXPERIMENT, artifact_location: str | None = None) -> str:
    """The experiment's id, made on first use with its artifacts at ``artifact_location`` (else
    beside a SQLite store); an experiment keeps the artifact location it was made with."""
    from mlflow import MlflowClient

    logging.getLogger("alembic").setLevel(logging.WARNING)
    client = MlflowClient(tracking_uri)
    found = client.get_experiment_by_name(name)
    if found is not None:
        return found.experiment_id
    return client.create_experiment(name, artifact_location=artifact_location or _artifact_root(tracking_uri))


class TrainingRun:
    """The MLflow run a training stage logs to while it is open (``start_run``)."""

    def __init__(self, run: Any, tracking_uri: str):
        self._run = run
        self.run_id: str = run.info.run_id
        self.tracking_uri = tracking_uri

    def log_params(self, params: dict[str, Any]) -> None:
        import mlflow

        with reaching(self.tracking_uri):
            mlflow.log_params(params)

    def log_metrics(self, metrics: dict[str, float]) -> None:
        import mlflow

        with reaching(self.tracking_uri):
            mlflow.log_metrics(metrics)

    def log_artifacts(self, folder: str | Path, artifact_path: str) -> None:
        import mlflow

        with reaching(self.tracking_uri):
            mlflow.log_artifacts(str(folder), artifact_path=artifact_path)


@contextmanager
def start_run(
    tracking_uri: str,
    dataset: str,
    model: str,
    params: dict[str, Any],
    parent_run_id: str | None = None,
    stage: str = "train",
) -> Iterator[TrainingRun]:
    """A model's run tagged with dataset and model (``stage``: ``train``, or ``submission`` for
    a scored submission), nested under the benchmark's parent run when there is one; params
    logged before anything else."""
    import mlflow

    with reaching(tracking_uri):
        exp = experiment_id(tracking_uri)
        close_abandoned_runs(
            tracking_uri, f"AND tags.`{TAG_DATASET}` = '{dataset}' AND tags.`{TAG_MODEL}` = '{model}'"
        )
    tags = {TAG_DATASET: dataset, TAG_MODEL: model, TAG_STAGE: stage, TAG_WRITER: writer_tag()}
    if parent_run_id:
        tags[TAG_PARENT] = parent_run_id
    # the block's own failure ends the run FAILED; a store gone by then leaves it RUNNING, and
    # the next run of this dataset and model closes it (close_abandoned_runs)
    with reaching(tracking_uri), store(tracking_uri):
        run = mlflow.start_run(experiment_id=exp, run_name=f"{dataset}/{model}", tags=tags)
        try:
            mlflow.log_params(params)
            yield TrainingRun(run, tracking_uri)
        except BaseException:
            with closing_runs(tracking_uri):
                mlflow.end_run("FAILED")
            raise
        mlflow.end_run()


def log_run_metrics(tracking_uri: str, run_id: str, metrics: dict[str, float]) -> None:
    """Metrics added to a finished run (scoring speed, cell metrics); it stays finished."""
    import mlflow

    with reaching(tracking_uri), store(tracking_uri), mlflow.start_run(run_id=run_id):
        mlflow.log_metrics(metrics)


def download_artifacts(tracking_uri: str, run_id: str, artifact_path: str, dst: str | Path) -> Path:
    """A run's artifact folder (``model``, ``model/test``) copied under ``dst``; its local path."""
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # progress is ours to print
    import mlflow

    # MLflow 3.0 (Databricks Runtime 17.3's) looks the run up in the process's own store whatever
    # tracking_uri says, and a scoring process has none set: this store is the process's meanwhile.
    # Then exactly what was there goes back: an unset store stays unset (get_tracking_uri names
    # MLflow's default, ./mlflow.db, which set_tracking_uri would pin every later run to)
    previous = mlflow.get_tracking_uri() if mlflow.is_tracking_uri_set() else None
    environment = os.environ.get("MLFLOW_TRACKING_URI")
    mlflow.set_tracking_uri(tracking_uri)
    try:
        with reaching(tracking_uri):
            return Path(
                mlflow.artifacts.download_artifacts(
                    run_id=run_id, artifact_path=artifact_path, dst_path=str(dst), tracking_uri=tracking_uri
                )
            )
    finally:
        mlflow.set_tracking_uri(previous)  # type: ignore[arg-type]  # None unsets it, and the variable
        if environment is not None:
            os.environ["MLFLOW_TRACKING_URI"] = environment


def start_benchmark(tracking_uri: str, name: str, params: dict[str, Any]) -> str:
    """The parent run of one benchmark (``intent run``): its dataset and model runs nest under
    it and the report is logged to it. Ended by ``end_benchmark``."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri)
    with reaching(tracking_uri):
        close_abandoned_runs(tracking_uri, f"AND tags.`{TAG_STAGE}` = 'benchmark'")
        run = client.create_run(
            experiment_id(tracking_uri),
            run_name=name,
            tags={TAG_STAGE: "benchmark", TAG_WRITER: writer_tag()},
        )
        for key, value in params.items():
            client.log_param(run.info.run_id, key, value)
    return run.info.run_id


def end_benchmark(tracking_uri: str, run_id: str, ok: bool) -> None:
    from mlflow import MlflowClient

    with reaching(tracking_uri), closing_runs(tracking_uri):
        MlflowClient(tracking_uri).set_terminated(run_id, "FINISHED" if ok else "FAILED")


def log_report(tracking_uri: str, folder: str, run_id: str | None = None) -> str:
    """The report folder as artifacts (``report/``) of the given run, or of a new report run."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri)
    own = run_id is None
    with reaching(tracking_uri):
        if own:
            run_id = client.create_run(
                experiment_id(tracking_uri), run_name="report", tags={TAG_STAGE: "report"}
            ).info.run_id
        assert run_id is not None
        client.log_artifacts(run_id, folder, "report")
        if own:
            client.set_terminated(run_id)
    return run_id


def metric_pattern(pattern: str) -> re.Pattern[str]:
    """``--metrics``: a regular expression matching whole dot-separated parts of a metric name
    (``test.known_past.ndcg_10``): ``ndcg_10`` finds ndcg_10 of every split and cell and never
    ndcg_100; ``ndcg_.*`` finds every K; ``^test\\.`` every test metric."""
    try:
        return re.compile(rf"(?:^|(?<=\.))(?:{pattern})(?:(?=\.|$)|(?<=\.))")
    except re.error as exc:
        raise IntentError(f"--metrics {pattern!r}: not a regular expression ({exc})") from None


@reaches_store
def compare_runs(tracking_uri: str, run_ids: list[str], dataset: str | None, pattern: str) -> Any:
    """Metrics of the chosen runs: one row per run (index ``dataset, model, run_id``), a column per
    metric name matching ``pattern`` in name order, from the given run ids or the newest
    training run of each dataset and model."""
    import pandas as pd
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri)
    exp = experiment_id(tracking_uri)
    if run_ids:
        runs = [client.get_run(r) for r in run_ids]
    else:
        where = f"tags.`{TAG_MODEL}` != '' AND attributes.status = 'FINISHED'"  # trained and submitted
        if dataset:
            where += f" AND tags.`{TAG_DATASET}` = '{dataset}'"
        found = client.search_runs([exp], filter_string=where, order_by=["attributes.start_time DESC"])
        latest: dict[tuple[Any, Any], Any] = {}
        for run in found:  # newest first: keep one run per dataset and model
            latest.setdefault((run.data.tags.get(TAG_DATASET), run.data.tags.get(TAG_MODEL)), run)
        runs = [latest[key] for key in sorted(latest)]
    if not runs:
        raise IntentError(
            f"no finished training runs in {tracking_uri}" + (f" for {dataset}" if dataset else "")
        )
    wanted = metric_pattern(pattern)
    rows = [
        {
            "dataset": run.data.tags.get(TAG_DATASET, "?"),
            "model": run.data.tags.get(TAG_MODEL, "?"),
            "run_id": run.info.run_id,
            **{k: v for k, v in run.data.metrics.items() if wanted.search(k)},
        }
        for run in runs
    ]
    table = pd.DataFrame(rows).set_index(["dataset", "model", "run_id"])
    return table[sorted(table.columns)]


@reaches_store
def find_run(
    tracking_uri: str, dataset: str, model: str, run_id: str | None = None, *, missing_ok: bool = False
) -> Any:
    """The given run, or the newest finished run of (dataset, model): its training run, or a
    submission's run; None when there is none and ``missing_ok``."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri)
    if run_id:
        return client.get_run(run_id)
    runs = client.search_runs(
        [experiment_id(tracking_uri)],
        filter_string=(
            f"tags.`{TAG_DATASET}` = '{dataset}' AND tags.`{TAG_MODEL}` = '{model}' "
            "AND attributes.status = 'FINISHED'"
        ),
        order_by=["attributes.start_time DESC"],
        max_results=1,
    )
    if not runs:
        if missing_ok:
            return None
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
