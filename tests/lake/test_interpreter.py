"""The tests' session as its profile makes it (tests/conftest.py): Spark's Python workers fork
from the daemon that reads each zip archive's directory once (python_daemon.py), and the driver
JVM maps the class-data archive where `make class-archive` built it. That the workers run on the
interpreter that runs intent, with no ``python3`` on PATH, is proved by the killed drivers of
``tests/pipeline/test_run_resume.py``: each stage from ingest to evaluate finishes in such a child."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import psutil
import pytest
from conftest import CLASS_ARCHIVE


def test_the_sessions_python_workers_fork_from_the_daemon_that_reads_archives_once(spark):
    assert spark.createDataFrame([(n,) for n in range(5)], "n long").selectExpr("sum(n)").first()[0] == 10
    jvm = psutil.Process(spark.sparkContext._gateway.proc.pid)  # this session's, not a child's
    commands = []
    for child in jvm.children(recursive=True):
        with contextlib.suppress(psutil.Error):  # gone, or a zombie
            commands.append(child.cmdline())
    workers = [cmd for cmd in commands if any(part.startswith("pyspark.") for part in cmd[1:])]
    assert workers, f"no Python worker under this session's JVM: {commands}"
    assert all(cmd[:3] == [sys.executable, "-m", "intent_spark.lake.python_daemon"] for cmd in workers), (
        workers
    )


@pytest.mark.skipif(
    not CLASS_ARCHIVE.is_file(), reason=f"no class archive ({CLASS_ARCHIVE}): `make class-archive`"
)
def test_the_sessions_driver_maps_the_class_archive(spark):
    jvm = spark.sparkContext._gateway.proc.pid
    maps = Path(f"/proc/{jvm}/maps").read_text()  # a mapped file by its real path
    assert str(CLASS_ARCHIVE.resolve()) in maps, f"{CLASS_ARCHIVE} is not mapped by the driver JVM {jvm}"
