"""MLflow's store refusing a request: one line naming it, and a failed run's closing calls
that do not wait through every retry again. No JVM: a socket plays the refusing store."""

from __future__ import annotations

import os
import socket
import threading
from contextlib import suppress

import pytest

from intent_spark.core.errors import IntentError
from intent_spark.lake.tracking import RETRIES_ENV, end_benchmark, experiment_id


class ResettingStore:
    """A port that accepts each connection and resets it at once, counting them: what a request
    to a server that has gone away gets, with every attempt seen."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.attempts = 0
        threading.Thread(target=self._reset_each, daemon=True).start()

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.listener.getsockname()[1]}"

    def _reset_each(self) -> None:
        with suppress(OSError):
            while True:
                client, _ = self.listener.accept()
                self.attempts += 1
                client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                client.close()


def test_after_the_store_refused_a_failed_run_is_closed_with_one_try(monkeypatch):
    monkeypatch.setenv(RETRIES_ENV, "2")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_BACKOFF_JITTER", "0")
    store = ResettingStore()
    try:
        with pytest.raises(IntentError) as refused:
            experiment_id(store.uri)
        assert str(refused.value) == (
            f"MLflow at {store.uri} is unreachable (connection refused); start it, or point "
            "--tracking-uri elsewhere, and rerun: no run of this stage was logged as finished"
        )
        assert store.attempts == 3  # the first try and two retries
        with pytest.raises(IntentError, match="unreachable"):
            end_benchmark(store.uri, "0" * 32, ok=False)
        assert store.attempts == 4  # one try
        assert os.environ[RETRIES_ENV] == "2"  # the setting is back for every other call
    finally:
        store.listener.close()


@pytest.mark.parametrize("process_store", [None, "sqlite:///elsewhere.db"])
def test_an_artifact_download_leaves_the_process_store_as_it_was(tmp_path, monkeypatch, process_store):
    """The download sets the run's store as the process's (MLflow 3.0 looks runs up there) and puts
    back what was: an unset store stays unset, so later runs do not land in ./mlflow.db."""
    import mlflow
    from mlflow import MlflowClient

    from intent_spark.lake.tracking import download_artifacts

    monkeypatch.setattr("mlflow.tracking._tracking_service.utils._tracking_uri", None)
    if process_store is None:
        monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    else:
        monkeypatch.setenv("MLFLOW_TRACKING_URI", process_store)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    experiment = client.create_experiment("e", artifact_location=(tmp_path / "artifacts").as_uri())
    run = client.create_run(experiment).info.run_id
    (tmp_path / "state.txt").write_text("weights")
    client.log_artifact(run, str(tmp_path / "state.txt"), "model")

    folder = download_artifacts(uri, run, "model", tmp_path / "got")
    assert (folder / "state.txt").read_text() == "weights"
    assert mlflow.is_tracking_uri_set() is (process_store is not None)
    assert os.environ.get("MLFLOW_TRACKING_URI") == process_store


def test_a_lakes_store_has_one_meaning(monkeypatch, tmp_path):
    """No URI is the default store (SQLite beside a local lake); tracking off is ``tracked=False``,
    where a stage that keeps its models in MLflow stops in one line."""
    from intent_spark.lake.context import Lake

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    root = str(tmp_path / "lake")
    assert Lake(None, root).tracking == f"sqlite:///{tmp_path.resolve() / 'mlflow.db'}"
    assert Lake(None, root, "sqlite:////elsewhere/mlflow.db").tracking == "sqlite:////elsewhere/mlflow.db"
    off = Lake(None, root, "sqlite:////elsewhere/mlflow.db", tracked=False)
    assert off.tracking is None
    with pytest.raises(IntentError, match=r"lake: train needs MLflow, .*it cannot run with tracking off$"):
        off.tracking_store("train")
