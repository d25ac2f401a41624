"""The jobs/ entry points under spark-submit on a real Spark standalone cluster (a master and two
workers on 127.0.0.1, started from the installed Spark distribution): the chain ends with the
same tables as the local run with the same seed, even when an executor is killed mid-split."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pyspark
import pytest
from conftest import same_tables

from intent_spark import schema as S
from intent_spark.session import delta_jars

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

REPO = Path(__file__).resolve().parent.parent
SPARK_HOME = Path(pyspark.__file__).parent
DATASET = "hm"


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "PYSPARK_GATEWAY"))}
    env.update(
        SPARK_HOME=str(SPARK_HOME),
        SPARK_LOCAL_IP="127.0.0.1",
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
    )
    return env


def _wait(what: str, check, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, f"{what} not within {seconds:.0f} s"
        time.sleep(0.3)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """spark://127.0.0.1:PORT with two one-core workers; everything started is stopped after."""
    work = tmp_path_factory.mktemp("standalone")
    port, ui = _port(), _port()
    spark_class = str(SPARK_HOME / "bin" / "spark-class")
    started = []

    def start(*args: str) -> None:
        log = open(work / f"{len(started)}.log", "w")  # noqa: SIM115 (closed with the process)
        started.append(
            subprocess.Popen([spark_class, *args], env=_env(), stdout=log, stderr=log, start_new_session=True)
        )

    master = f"spark://127.0.0.1:{port}"
    try:
        start(
            "org.apache.spark.deploy.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--webui-port",
            str(ui),
        )

        def alive_workers() -> int:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{ui}/json/", timeout=2) as answer:
                    return sum(w["state"] == "ALIVE" for w in json.load(answer)["workers"])
            except OSError:
                return -1

        _wait("the master", lambda: alive_workers() >= 0)
        for i in range(2):
            start(
                "org.apache.spark.deploy.worker.Worker",
                "--host",
                "127.0.0.1",
                "--cores",
                "1",
                "--memory",
                "1g",
                "--webui-port",
                str(_port()),
                "--work-dir",
                str(work / f"worker{i}"),
                master,
            )
        _wait("two workers", lambda: alive_workers() == 2)
        yield master
    finally:
        for process in started:
            os.killpg(process.pid, signal.SIGTERM)
        for process in started:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)


def _submit(master: str, stage: str, *args: str) -> subprocess.Popen:
    command = [
        str(SPARK_HOME / "bin" / "spark-submit"), "--master", master,
        "--jars", ",".join(delta_jars()),
        "--conf", "spark.executor.memory=700m", "--conf", "spark.driver.memory=1g",
        "--conf", "spark.sql.shuffle.partitions=4",
        # a killed executor's tasks are retried on the other one, or on its replacement
        "--conf", "spark.task.maxFailures=4",
        str(REPO / "jobs" / f"{stage}.py"), *args,
    ]  # fmt: skip
    return subprocess.Popen(
        command, cwd=REPO, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def _finish(process: subprocess.Popen, stage: str, seen: str = "") -> str:
    out, _ = process.communicate(timeout=600)
    assert process.returncode == 0, f"{stage}: {(seen + out)[-3000:]}"
    return seen + out


def _executors() -> list[int]:
    found = subprocess.run(["pgrep", "-f", "CoarseGrainedExecutorBackend"], capture_output=True, text=True)
    return [int(p) for p in found.stdout.split()]


def test_chain_on_the_cluster_equals_the_local_run_despite_a_killed_executor(
    spark, cluster, reference_run, tmp_path
):
    lake, mlflow_uri = str(tmp_path / "lake"), f"sqlite:///{tmp_path / 'mlflow.db'}"
    common = ["--dataset", DATASET, "--lake", lake]
    _finish(_submit(cluster, "ingest", *common, "--raw", str(reference_run / "raw" / DATASET)), "ingest")

    split = _submit(cluster, "split", *common)
    seen = ""
    for line in split.stdout:  # the test cutoff is chosen; the validation split and writes follow
        seen += line
        if "test cutoff" in line:
            break
    assert split.poll() is None, f"the split ended before an executor could be killed: {seen[-3000:]}"
    killed = _executors()
    assert len(killed) == 2, killed
    os.kill(killed[0], signal.SIGKILL)
    log = _finish(split, "split", seen)
    assert killed[0] not in _executors()
    assert "Lost executor" in log, log[-3000:]

    for stage, extra in (
        ("verify", []),
        ("train", ["--model", "popularity", "--tracking-uri", mlflow_uri]),
        ("score", ["--model", "popularity", "--tracking-uri", mlflow_uri]),
        ("evaluate", ["--tracking-uri", mlflow_uri]),
    ):
        _finish(_submit(cluster, stage, *common, *extra), stage)

    tables = [S.EVENTS, S.HOLDOUT, S.SPLITS, S.TARGETS, S.CHECKSUMS, S.RANKS, S.METRICS_TABLE]
    same_tables(spark, lake, str(reference_run / "lake"), DATASET, tables)
