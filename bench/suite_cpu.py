"""Where a command's CPU goes, by kind of process: run it, read every process's CPU time from
``/proc`` once a second, and sum them by what each process is (a test worker's Python or its
JVM, an `intent` child and its JVM, the standalone cluster, Spark's Python workers,
TorchDistributor's processes, the MLflow server, moto...).

    .venv/bin/python bench/suite_cpu.py -- .venv/bin/python -m pytest

A process that ends between two readings loses at most its last second. Linux only.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from contextlib import suppress
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")
# The kind of a Python process, by a piece of its command line (first match wins).
PYTHON_KINDS = (
    ("exec(eval(sys.stdin", "test worker: Python"),  # pytest-xdist's execnet worker
    ("intent_spark.cli", "`intent` child: Python"),
    ("intent_spark.lake.python_daemon", "Spark's Python workers"),
    ("pyspark.daemon", "Spark's Python workers"),
    ("pyspark.worker", "Spark's Python workers"),
    ("/train.py", "TorchDistributor processes"),  # its script in a temporary folder
    ("torch.distributed.run", "TorchDistributor processes"),
    ("mlflow", "MLflow server"),
    ("uvicorn", "MLflow server"),
    ("huey", "MLflow server"),
    ("moto", "moto (the S3 server)"),
    ("jobs/", "spark-submit: Python driver"),
    ("-m pytest", "pytest's main process"),
)
# A JVM's kind: the cluster's own classes, else the kind of the Python that started it.
JVM_KINDS = (
    ("deploy.master.Master", "cluster: master and worker JVMs"),
    ("deploy.worker.Worker", "cluster: master and worker JVMs"),
    ("CoarseGrainedExecutorBackend", "cluster: executor JVMs"),
    ("launcher.Main", "spark-submit's launcher JVM"),
    ("/jobs/", "spark-submit: driver JVM"),  # `spark-submit jobs/run.py`, started by a test
)
STARTING = "a JVM starting (Spark's launch scripts)"
REREAD = ("other", "other Python", STARTING)
JVM_OF = {"test worker: Python": "test worker: JVM", "`intent` child: Python": "`intent` child: JVM"}


def command_line(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")


def stat_fields(pid: int) -> list[str]:
    """``/proc/PID/stat`` after the command name (which may hold spaces and parentheses)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def parent_of(pid: int) -> int:
    return int(stat_fields(pid)[1])


def kind_of(pid: int) -> str:
    """What a process is; a JVM is named after the Python that started it (through the shell
    scripts between them)."""
    line = command_line(pid)
    program = Path(line.split(" ", 1)[0]).name
    if program == "java":
        named = next((kind for piece, kind in JVM_KINDS if piece in line), None)
        if named is not None:
            return named
        return JVM_OF.get(kind_of(parent_of(pid)), "other JVM")
    if program in ("bash", "sh", "env") and ("spark-class" in line or "spark-submit" in line):
        return STARTING  # Spark's scripts exec the JVM under the same pid: read again later
    if "python" in program:
        return next((kind for piece, kind in PYTHON_KINDS if piece in line), "other Python")
    if "chrom" in program:
        return "Chromium"
    return "other"


def cpu_seconds(pid: int) -> float:
    fields = stat_fields(pid)
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime


def sample(running: subprocess.Popen) -> dict[str, float]:
    """CPU seconds by kind over the command's life. A process's kind is read again while it is
    unknown or one of Spark's launch scripts, which become the JVM they run under the same pid."""
    first = _readings()  # what ran before: only its growth counts
    last, kinds = dict(first), {}
    while running.poll() is None:
        for pid, seconds in _readings().items():
            last[pid] = seconds
            if pid not in kinds or kinds[pid] in REREAD:
                with suppress(OSError, ValueError, IndexError):  # gone since its reading
                    kinds[pid] = kind_of(pid)
        time.sleep(1)
    totals: dict[str, float] = {}
    for pid, seconds in last.items():
        kind = kinds.get(pid, "other")
        totals[kind] = totals.get(kind, 0.0) + seconds - first.get(pid, 0.0)
    return totals


def _readings() -> dict[int, float]:
    """CPU seconds of every process alive now, this one left out."""
    own, found = os.getpid(), {}
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != own:
            try:
                found[int(name)] = cpu_seconds(int(name))
            except (OSError, ValueError, IndexError):
                continue  # gone between the listing and the reading
    return found


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the command, after --")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to measure after --")
    started = time.monotonic()
    running = subprocess.Popen(command)
    totals = sample(running)
    wall = time.monotonic() - started
    print("\n| process | CPU s | share |\n|---|---:|---:|", file=sys.stderr)
    whole = sum(totals.values())
    for kind, seconds in sorted(totals.items(), key=lambda item: -item[1]):
        print(f"| {kind} | {seconds:,.0f} | {seconds / max(whole, 1e-9):.0%} |", file=sys.stderr)
    print(f"| **all** | **{whole:,.0f}** | in {wall:,.0f} s of wall |", file=sys.stderr)
    sys.exit(running.returncode)


if __name__ == "__main__":
    main()
