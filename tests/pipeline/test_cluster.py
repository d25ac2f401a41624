"""The jobs/ entry points under spark-submit on a real Spark standalone cluster (a master and two
workers on 127.0.0.1, started from the installed Spark distribution): the chain ends with the
same tables as the local run with the same seed, even when an executor is killed mid-split."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil
import pyspark
import pytest
from conftest import REPO_ROOT, class_archive_options, free_port, same_tables, write_run_conf

from intent_spark.core import schema as S
from intent_spark.core.datasets import DatasetRef
from intent_spark.lake.context import Lake
from intent_spark.lake.session import PROFILE_ENV, delta_jars

pytestmark = pytest.mark.slow

SPARK_HOME = Path(pyspark.__file__).parent
DATASET = DatasetRef("hm")
# short-lived JVMs on two shared cores: the quick compiler, and the driver's class archive where
# `make class-archive` built it (the same JDK and Spark jars: drivers, executors and daemons)
QUICK_JVM = f"-Duser.timezone=UTC -XX:TieredStopAtLevel=1 {class_archive_options()}".strip()
TABLES = [S.EVENTS, S.HOLDOUT, S.SPLITS, S.TARGETS, S.CHECKSUMS, S.RANKS, S.METRICS_TABLE]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "PYSPARK_GATEWAY"))}
    env.update(
        SPARK_HOME=str(SPARK_HOME),
        SPARK_LOCAL_IP="127.0.0.1",
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        SPARK_DAEMON_JAVA_OPTS=QUICK_JVM,
    )
    # the tiny-lake profile, not the tests' own: an executor's Python workers fork from Spark's
    # daemon, as on any cluster (QUICK_JVM maps the class archive)
    env[PROFILE_ENV] = "small"
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
    port, ui = free_port(), free_port()
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
                str(free_port()),
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
        "--conf", "spark.sql.shuffle.partitions=4", "--conf", "spark.databricks.delta.snapshotPartitions=2",
        "--conf", f"spark.driver.extraJavaOptions={QUICK_JVM}",
        "--conf", f"spark.executor.extraJavaOptions={QUICK_JVM}",
        # a killed executor's tasks are retried on the other one, or on its replacement
        "--conf", "spark.task.maxFailures=4",
        str(REPO_ROOT / "jobs" / f"{stage}.py"), *args,
    ]  # fmt: skip
    process = subprocess.Popen(
        command, cwd=REPO_ROOT, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    process.started = time.monotonic()
    return process


def _finish(process: subprocess.Popen, stage: str, seen: str = "") -> str:
    out, _ = process.communicate(timeout=600)
    assert process.returncode == 0, f"{stage}: {(seen + out)[-3000:]}"
    print(f"{stage}: {time.monotonic() - process.started:.1f} s")  # shown with -s or on failure
    return seen + out


def _executors() -> list[int]:
    return [
        p.pid
        for p in psutil.process_iter(["cmdline"])
        if "org.apache.spark.executor.CoarseGrainedExecutorBackend" in (p.info["cmdline"] or [])
    ]


def _kill_an_executor_after_the_test_cutoff(process: subprocess.Popen) -> str:
    """Read the driver's output until the test cutoff is chosen (the validation split and every
    write are still to come), SIGKILL one of the two executors, and return what was read."""
    seen = ""
    for line in process.stdout:
        seen += line
        if "test cutoff" in line:
            break
    assert process.poll() is None, f"the split ended before an executor could be killed: {seen[-3000:]}"
    executors = _executors()
    assert len(executors) == 2, executors
    os.kill(executors[0], signal.SIGKILL)
    return seen


def test_intent_run_on_the_cluster_equals_the_local_run_despite_a_killed_executor(
    spark, cluster, reference_run, tmp_path
):
    """One spark-submit of jobs/run.py: generate, ingest, split, verify, train, score, evaluate,
    report. Popularity's tables equal the local run's; GRU4Rec is trained and scored by two
    TorchDistributor processes, barrier tasks on the two executors (one of them the killed
    one's replacement), and the same model scored by one local process gives the same ranks."""
    from mlflow import MlflowClient
    from pyspark.sql import functions as F

    from intent_spark.lake.tables import read_table
    from intent_spark.lake.tracking import default_tracking_uri, find_run
    from intent_spark.train.conf import load_models_conf
    from intent_spark.train.score import score

    conf = write_run_conf(
        tmp_path / "cluster",
        models=("popularity", "gru4rec"),
        more="processes: 2\nmodel_overrides:\n  gru4rec: {steps: 20}\n",
    )
    run = _submit(cluster, "run", "--conf", str(conf))
    log = _finish(run, "run", _kill_an_executor_after_the_test_cutoff(run))
    assert "Lost executor" in log, log[-3000:]
    assert "done: report at" in log
    for split in ("test", "val"):
        assert f"hm gru4rec {split}: training in 2 processes" in log, log[-3000:]
    assert "step 20/20" in log and "hm gru4rec: scoring in 2 processes" in log, log[-3000:]
    lake = str(tmp_path / "cluster" / "work" / "lake")
    same_tables(spark, lake, str(reference_run / "lake"), DATASET, TABLES, models=("popularity",))
    uri = default_tracking_uri(lake)
    assert (
        MlflowClient(uri).get_run(find_run(uri, DATASET, "gru4rec").info.run_id).data.params["processes"]
        == "2"
    )

    def ranks():
        frame = read_table(spark, lake, S.RANKS, DATASET).where(F.col(S.MODEL) == "gru4rec")
        return (
            frame.select(S.SPLIT, S.SEQ, S.RANK, S.TIED)
            .toPandas()
            .sort_values([S.SPLIT, S.SEQ])
            .reset_index(drop=True)
        )

    two = ranks()
    score(Lake(spark, lake, uri), DATASET, "gru4rec", load_models_conf())
    one = ranks()
    assert len(one) == len(two) > 0 and one.equals(two)


@pytest.mark.cluster
def test_stage_by_stage_on_the_cluster_equals_the_local_run_despite_a_killed_executor(
    spark, cluster, reference_run, tmp_path
):
    """One spark-submit per jobs/ entry point, as the scheduled job runs them (make test-cluster:
    each stage starts its own driver and executors: 11 minutes on two cores when measured)."""
    lake, mlflow_uri = str(tmp_path / "lake"), f"sqlite:///{tmp_path / 'mlflow.db'}"
    common = ["--dataset", DATASET, "--lake", lake]
    _finish(_submit(cluster, "ingest", *common, "--raw", str(reference_run / "raw" / DATASET)), "ingest")
    split = _submit(cluster, "split", *common)
    log = _finish(split, "split", _kill_an_executor_after_the_test_cutoff(split))
    assert "Lost executor" in log, log[-3000:]
    for stage, extra in (
        ("verify", []),
        ("train", ["--model", "popularity", "--tracking-uri", mlflow_uri]),
        ("score", ["--model", "popularity", "--tracking-uri", mlflow_uri]),
        ("evaluate", ["--tracking-uri", mlflow_uri]),
    ):
        _finish(_submit(cluster, stage, *common, *extra), stage)
    same_tables(spark, lake, str(reference_run / "lake"), DATASET, TABLES)
