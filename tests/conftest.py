"""Shared fixtures: one Spark session with Delta for the whole run, and the real samples."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import suppress
from datetime import datetime
from functools import cache
from pathlib import Path

import pytest
import yaml
from pyspark.sql import SparkSession

from intent_spark.core.datasets import DatasetRef
from intent_spark.lake.context import Lake
from intent_spark.lake.session import JARS_DIR, PROFILE_ENV, build_session, spark_settings

REPO_ROOT = Path(__file__).resolve().parent.parent
REAL_DATA = Path(os.environ.get("INTENT_REAL_DATA", REPO_ROOT.parent / "shared" / "data" / "real"))
STACKS = REPO_ROOT / "conf" / "stacks"


def package_name(requirement: str) -> str:
    """A requirement's project name as pip compares it: ``delta_spark>=3`` -> ``delta-spark``."""
    return re.split(r"[\s<>=!~;\[(]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def pinned_versions(constraints: Path) -> dict[str, str]:
    """name -> version of each ``name==version`` line of a constraints file (a stack, a runtime)."""
    lines = constraints.read_text(encoding="utf-8").splitlines()
    return {
        package_name(line): line.split("==", 1)[1].strip()
        for line in lines
        if "==" in line and not line.startswith("#")
    }


# The test suite's own speed-ups, which no command of the package turns on: two settings on top of
# the tiny-lake profile (conf/spark/small.yaml: interpreted plans, no adaptive re-planning).
JAVA_OPTIONS = "spark.driver.extraJavaOptions"
# Spark's Python workers forked from a daemon that reads each zip archive's directory once, not at
# every task (intent_spark/lake/python_daemon.py): every worker of the tests runs on this
# interpreter, where the package is importable.
DAEMON = {"spark.python.daemon.module": "intent_spark.lake.python_daemon"}
# The driver JVM's class-data archive (AppCDS), where `make class-archive` built it for this JDK and
# these jars (tools/class_archive.py): the classes a run loads, mapped from one file already parsed
# and verified instead of read from the jars at every start (a start and a first Delta write:
# 11.5 s without it, 6.5 s with it, on 2 cores). ``-Xshare:auto``: a JDK that cannot map it starts
# as it always did.
CLASS_ARCHIVE = JARS_DIR / "driver-classes.jsa"
SUITE_PROFILE = "intent-spark-tests"  # the start of the name of the profile file written below


def class_archive_options(archive: Path = CLASS_ARCHIVE) -> str:
    """The Java options that map ``archive``; none where it does not exist."""
    if not archive.is_file():
        return ""
    return f"-XX:SharedArchiveFile={archive} -Xshare:auto -Xlog:cds=off -Xlog:cds+dynamic=off"


def suite_profile(base: str = "small", archive: Path = CLASS_ARCHIVE) -> dict[str, str]:
    """The tests' Spark settings: the profile ``base``, the workers' daemon, the driver's archive."""
    settings = {**spark_settings(base, []), **DAEMON}
    settings[JAVA_OPTIONS] = f"{settings.get(JAVA_OPTIONS, '')} {class_archive_options(archive)}".strip()
    return settings


def write_profile(settings: dict[str, str], folder: Path | None = None) -> Path:
    """A profile file of ``settings`` in ``folder`` (the temp folder), named by its content:
    written once, by whichever run first needs it, and renamed into place whole."""
    text = yaml.safe_dump(settings, sort_keys=True)
    name = f"{SUITE_PROFILE}-{hashlib.sha256(text.encode()).hexdigest()[:16]}.yaml"
    path = (folder or Path(tempfile.gettempdir())) / name
    if not path.is_file():
        partial = path.with_name(f".{path.name}.{os.getpid()}")
        partial.write_text(text, encoding="utf-8")
        partial.replace(path)
    return path


# Every session of the tests, in this process and in each `intent` child (they inherit the
# environment; pytest-xdist's workers too, from the process that starts them), uses the tests'
# profile. A profile the environment already names is used as it is.
if PROFILE_ENV not in os.environ:
    os.environ[PROFILE_ENV] = str(write_profile(suite_profile()))

# Two workers share the machine's cores. torch's intra-op threads (OpenMP) spin while they wait
# for a core the other worker holds: SASRec's 300 check steps take 3.8 s alone, 30 s beside one
# busy core with 2 threads, 4.3 s with 1. One thread per process, here and in every child.
os.environ.setdefault("OMP_NUM_THREADS", "1")


# C2 compiles a method after 5x the default call and loop counts (C1 as before). C2's threads
# were a third of the test JVMs' CPU, compiling code a short test runs a few thousand times.
HOT_CODE_ONLY = (
    "-XX:Tier4InvocationThreshold=25000 -XX:Tier4MinInvocationThreshold=3000"
    " -XX:Tier4CompileThreshold=50000 -XX:Tier4BackEdgeThreshold=200000"
)


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    work = tmp_path_factory.mktemp("spark")
    session = build_session(
        "intent-tests",
        {
            "spark.master": "local[2]",
            "spark.ui.enabled": "false",
            "spark.sql.warehouse.dir": str(work / "warehouse"),
            "spark.local.dir": str(work / "local"),
            "spark.driver.memory": "2g",
            **spark_settings(None, []),
            # one task per stage of a job: the other pytest worker holds the other core, so a
            # second task buys no time, and each costs its own scheduling (a frame made from a
            # Python list, one Python task per partition: ~0.1 s each, docs/bench/notes/test-session.md)
            "spark.sql.shuffle.partitions": "1",
            "spark.default.parallelism": "1",
            "spark.databricks.delta.snapshotPartitions": "1",
            # this JVM lives the whole run: unlike a child's, its hot code pays for the C2 compiler,
            # but only its hottest (C2 at 5x the usual call counts) and with the throughput
            # collector, not G1: each ~10% less CPU over 41 Spark-bound tests (docs/bench/notes/test-session.md); the
            # class archive as in the children
            JAVA_OPTIONS: f"-Duser.timezone=UTC -XX:+UseParallelGC {HOT_CODE_ONLY} {class_archive_options()}".strip(),
        },
        store=True,  # S3A, where `make setup-s3` cached it: the store test reads its lake back
    )
    yield session
    session.stop()


# `make test` runs two pytest-xdist workers, each test module whole on one of them (module
# fixtures are built once). A session fixture is built once per worker, so the modules that use
# an expensive one form one unit of work. (xdist's own `--dist loadgroup` marks do not take on
# pytest 9, whose node ids no longer read the `_nodeid` that xdist rewrites.) Not the modules of
# ``reference_run``: they hold the slowest tests (killed drivers, the cluster, MLflow stopped),
# and the reference is built once for both workers (a lock and a shared folder).
SHARED_FIXTURE_GROUPS = {
    "split_lake": "generated_lake",
    "generated_lake": "generated_lake",
    "toy_lake": "toy_lake",
}


# The toy events of split/test_split.py, worked out by hand there and in every test on
# ``toy_lake``. user, "MM-DD", item  (all at 12:00 UTC in 2024; seq follows this order)
FIXTURE = """
u02 01-05 a; u02 01-06 b; u02 01-07 c; u02 02-03 a; u02 03-03 d; u02 04-05 z
u03 01-05 a; u03 01-06 a; u03 01-07 b; u03 02-03 b; u03 05-03 a
u04 01-08 b; u04 01-09 c; u04 01-10 d; u04 02-04 a
u05 01-08 c; u05 01-09 c; u05 01-10 a; u05 05-04 e
u07 01-11 a; u07 01-12 b; u07 01-13 c; u07 02-05 d
u08 01-11 d; u08 01-12 a; u08 02-06 b
u09 01-14 a; u09 01-15 b; u09 02-07 c
u10 01-16 c; u10 03-04 a
u11 01-17 a; u11 01-18 b; u11 01-19 c
u12 01-20 d; u12 03-05 b
u01 01-10 a; u01 01-20 q
u06 02-10 c; u06 05-10 y
"""


def toy_event_rows() -> list[tuple]:
    rows = []
    for seq, entry in enumerate(e.strip() for e in FIXTURE.replace("\n", ";").split(";") if e.strip()):
        user, day, item = entry.split()
        month, dom = map(int, day.split("-"))
        rows.append(("toy", user, item, datetime(2024, month, dom, 12), seq + 1, "view", None, None))
    return rows


# Every table of the dataset the chain writes, compared row for row with an uninterrupted run.
CHAIN_TABLES = (
    "events", "rejects", "items", "users", "ingest_files", "holdout", "splits", "targets",
    "split_candidates", "split_counts", "checksums", "catalogue", "train_sequences", "score_events",
    "model_inputs", "ranks", "user_metrics", "metrics", "comparisons",
)  # fmt: skip


# Modules whose tests start `intent` in a child process (a JVM of its own) without the session's.
JVM_IN_CHILD = {
    "tests/pipeline/test_cluster.py",
    "tests/lake/test_faults.py",
    "tests/pipeline/test_run_resume.py",
}


def pytest_configure(config):
    """The markers this file sets, also where pytest runs without the project's settings (a side
    stack's tests run with ``-c /dev/null`` outside the checkout)."""
    config.addinivalue_line("markers", "jvm: starts a JVM (set by tests/conftest.py)")
    config.addinivalue_line("markers", "slow: takes more than a few seconds")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Every test that needs a JVM (the Spark fixture, or an `intent` child) is marked ``jvm``,
    so ``-m 'not jvm'`` (`make test-fast`) runs the rest alone. Modules with a slow test come
    first, in collection order otherwise: the scheduler hands out its units in this order
    (``--no-loadscope-reorder``), and a long one handed out last would leave one worker running
    alone at the end."""
    for item in items:
        if "spark" in getattr(item, "fixturenames", ()) or item.nodeid.split("::", 1)[0] in JVM_IN_CHILD:
            item.add_marker(pytest.mark.jvm)
    slow = {item.nodeid.split("::", 1)[0] for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.nodeid.split("::", 1)[0] not in slow)


@pytest.fixture(autouse=True)
def _no_unmarked_jvm(request):
    """A test not marked ``jvm`` must not start one: `make test-fast` promises no JVM."""
    from pyspark import SparkContext

    before = SparkContext._active_spark_context
    yield
    started = before is None and SparkContext._active_spark_context is not None
    if started and request.node.get_closest_marker("jvm") is None:
        pytest.fail("this test started a JVM (a SparkSession) but is not marked jvm", pytrace=False)


@cache
def work_unit(module_path: str) -> str:
    """The group of the first shared session fixture the module's source names, else the module."""
    try:
        source = (REPO_ROOT / module_path).read_text(encoding="utf-8")
    except OSError:
        return module_path
    return next((group for name, group in SHARED_FIXTURE_GROUPS.items() if name in source), module_path)


def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    class SharedFixtureScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid.split("::", 1)[0])

    return SharedFixtureScheduling(config, log)


GENERATED_EVENTS = 4000


@pytest.fixture(scope="session")
def generated_lake(spark, tmp_path_factory):
    """All five sources generated (with injected bad rows) and ingested once per test run."""
    from intent_spark.core.sources import load_source
    from intent_spark.generate import SOURCES, generate_release
    from intent_spark.ingest import ingest_source

    lake = str(tmp_path_factory.mktemp("lake_generated"))
    releases, summaries = {}, {}
    for name in SOURCES:
        raw = tmp_path_factory.mktemp(f"raw_{name}")
        releases[name] = generate_release(name, raw, GENERATED_EVENTS, seed=7, dirty=True)
        summaries[name] = ingest_source(Lake(spark, lake), load_source(name), str(raw))
    return lake, releases, summaries


@pytest.fixture(scope="session")
def split_lake(spark, generated_lake):
    """The generated lake with every source split by the shipped protocol conf."""
    from intent_spark.core.conf import CONF_DIR
    from intent_spark.generate import SOURCES
    from intent_spark.split.conf import load_split_conf
    from intent_spark.split.split_tables import run_split

    lake, _, _ = generated_lake
    for name in SOURCES:
        run_split(Lake(spark, lake), DatasetRef(name), load_split_conf(CONF_DIR / "split.yaml", name))
    return lake


@pytest.fixture(scope="session")
def toy_lake(spark, tmp_path_factory):
    """The hand-computed toy events (``toy_event_rows``), split with seed 4: ``(lake, outcomes)``."""
    from intent_spark.core import schema as S
    from intent_spark.lake.tables import write_dataset
    from intent_spark.split.conf import SplitConf
    from intent_spark.split.split_tables import run_split

    lake = str(tmp_path_factory.mktemp("lake_toy"))
    events = spark.createDataFrame(toy_event_rows(), S.EVENTS_SCHEMA).repartition(3)  # partition-proof
    write_dataset(events, lake, S.EVENTS, "toy")
    return lake, run_split(Lake(spark, lake), DatasetRef("toy"), SplitConf(seed=4))


@pytest.fixture
def lake(tmp_path: Path) -> str:
    return str(tmp_path / "lake")


@pytest.fixture(scope="session")
def real_data() -> Path:
    if not REAL_DATA.is_dir():
        pytest.skip(f"shared real samples absent: {REAL_DATA} (tests read them from ../shared/data/real)")
    return REAL_DATA


def write_run_conf(folder: Path, models: tuple[str, ...] = ("popularity",), more: str = "") -> Path:
    """A small `intent run` conf: one generated source, the popularity model (or ``models``),
    seed 3, then the YAML lines ``more``."""
    folder.mkdir(parents=True, exist_ok=True)
    conf = folder / "run.yaml"
    conf.write_text(
        f"workdir: {folder / 'work'}\nseed: 3\ndatasets:\n  - {{name: hm, events: 3000}}\n"
        f"models: [{', '.join(models)}]\n{more}"
    )
    return conf


@pytest.fixture(scope="session")
def reference_run(spark, tmp_path_factory) -> Path:
    """`intent run` of ``write_run_conf`` without interruption: the workdir (``raw/hm``, ``lake``)
    whose tables a resumed run and a cluster run must equal. Built once per test run, by the
    first worker to ask, in that worker's process; the other worker waits on the lock and reads
    the same folder (every test reads its tables or copies them, none writes them)."""
    import fcntl

    from intent_spark.cli import main

    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):  # pytest-xdist: the workers' temp folders share this parent
        shared = shared.parent
    folder, finished = shared / "reference", shared / "reference.finished"
    with (shared / "reference.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not finished.exists():
            assert main(["run", "--conf", str(write_run_conf(folder))]) == 0
            finished.touch()
    return folder / "work"


def copy_reference_run(reference_run: Path, to: Path) -> Path:
    """A copy of the reference run's workdir that a run extends (modification times kept: its
    ingest is not redone). The copy's MLflow experiment keeps its artifacts in the copy: an
    experiment keeps the artifact folder it was made with, which is the reference's own, and
    the reference is read by both workers, never written."""
    import sqlite3

    shutil.copytree(reference_run, to)
    with sqlite3.connect(to / "mlflow.db") as db:  # MLflow has no call that moves an experiment's artifacts
        db.execute("UPDATE experiments SET artifact_location = ?", ((to / "mlartifacts").resolve().as_uri(),))
    return to


# the generated H&M files of ``write_run_conf`` have no malformed line: rejects is empty in both
EMPTY_IN_REFERENCE = ("rejects",)


def same_tables(
    spark,
    left: str,
    right: str,
    dataset: str,
    tables: list[str],
    empty: tuple[str, ...] = EMPTY_IN_REFERENCE,
    models: tuple[str, ...] | None = None,
) -> None:
    """Each table holds the same rows in both lakes (maps compared as JSON, raw files by name,
    doubles to 1e-12: a mean's or a variance's last bits follow the order of its sum); tables in
    ``empty`` hold no row in either, every other table holds some. With ``models``, a table with
    a model column is compared on those models' rows only."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import DoubleType, MapType

    from intent_spark.lake.tables import read_table

    def read(lake: str, table: str):
        frame = read_table(spark, lake, table, dataset)
        if models is not None and "model" in frame.columns:
            frame = frame.where(F.col("model").isin(list(models)))
        columns = []
        for field in frame.schema.fields:
            if isinstance(field.dataType, MapType):  # no set operations on maps
                columns.append(F.to_json(field.name).alias(field.name))
            elif field.name == "source_file":  # each lake read its own copy of the raw folder
                columns.append(F.element_at(F.split(field.name, "/"), -1).alias(field.name))
            elif isinstance(field.dataType, DoubleType):
                columns.append(F.round(field.name, 12).alias(field.name))
            else:
                columns.append(F.col(field.name))
        return frame.select(*columns)

    for table in tables:
        one, other = read(left, table), read(right, table)
        # one Spark job per table: each distinct row with its copies on either side (the multiset
        # comparison exceptAll makes both ways, nulls equal to nulls), then the sums over them
        side = F.col("_side")
        copies = (
            one.withColumn("_side", F.lit(1))
            .unionByName(other.withColumn("_side", F.lit(2)))
            .groupBy(*one.columns)
            .agg(F.count(F.when(side == 1, 1)).alias("_one"), F.count(F.when(side == 2, 1)).alias("_other"))
        )
        ones, others, differing = copies.agg(
            F.coalesce(F.sum("_one"), F.lit(0)),
            F.coalesce(F.sum("_other"), F.lit(0)),
            F.count(F.when(F.col("_one") != F.col("_other"), 1)),
        ).first()
        assert ones == others and (ones == 0) == (table in empty), (table, ones, others)
        assert differing == 0, (table, f"{differing} distinct rows differ in their copies")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_mlflow_server(port: int, folder: Path) -> subprocess.Popen:
    """A real `mlflow server` on 127.0.0.1:PORT, its store and artifacts in FOLDER (a restart on
    the same folder finds the same runs), in its own process group, once it answers /health."""
    log = folder / f"mlflow-server-{port}.log"  # a file, not a pipe: a full pipe would stall the server
    with log.open("ab") as err:
        server = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "mlflow",
                "server",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--workers",
                "1",
                "--backend-store-uri",
                f"sqlite:///{folder / 'server.db'}",
                "--artifacts-destination",
                str(folder / "artifacts"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=err,
            start_new_session=True,
            # without its job runner (GenAI jobs, which no run of ours queues): a queue consumer
            # of 10 workers cost 13 of a start's 21 s of CPU
            env=os.environ | {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"},
        )
    deadline = time.monotonic() + 120
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as answer:
                if answer.status == 200:
                    return server
        except OSError:
            pass
        assert server.poll() is None, log.read_text(errors="replace")[-2000:]
        assert time.monotonic() < deadline, "mlflow server did not answer within 120 s"
        time.sleep(0.5)


def stop_mlflow_server(server: subprocess.Popen) -> None:
    """Kill the server and its workers at once: to a client, the store is simply gone."""
    with suppress(ProcessLookupError):
        os.killpg(server.pid, 9)
    server.wait(timeout=30)
