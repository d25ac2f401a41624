"""Spark's Python workers run on the interpreter that runs intent, whatever ``python3`` on PATH is,
forked from the daemon that reads each zip archive's directory once (python_daemon.py)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path

import psutil
from conftest import REPO_ROOT, same_tables

from intent_spark.core import schema as S
from intent_spark.lake.tables import write_dataset


def _path_without_python(folder: Path) -> str:
    """A PATH with every program of the system's folders (Java, bash, coreutils) except Python."""
    folder.mkdir()
    for system in ("/usr/local/bin", "/usr/bin", "/bin"):
        for program in sorted(Path(system).iterdir()) if Path(system).is_dir() else []:
            link = folder / program.name
            if not program.name.startswith("python") and not link.exists():
                link.symlink_to(program)
    return str(folder)


def test_the_split_runs_with_no_python3_on_path(spark, toy_lake, tmp_path):
    from conftest import toy_event_rows

    lake = str(tmp_path / "lake")
    events = spark.createDataFrame(toy_event_rows(), S.EVENTS_SCHEMA).repartition(3)
    write_dataset(events, lake, S.EVENTS, "toy")
    path = _path_without_python(tmp_path / "bin")
    assert subprocess.run(["bash", "-c", "command -v python3"], env={"PATH": path}).returncode != 0
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "intent_spark.cli",
            "split",
            "--dataset",
            "toy",
            "--lake",
            lake,
            "--seed",
            "4",
        ],
        cwd=REPO_ROOT,
        env=env | {"PATH": path},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    same_tables(spark, toy_lake[0], lake, "toy", [S.HOLDOUT, S.SPLITS, S.TARGETS], empty=())


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
