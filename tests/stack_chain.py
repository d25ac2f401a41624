"""The short chain a side stack runs (`make test-stack STACK=NAME`): the benchmark as a user runs
it, from an installed wheel, in the current folder (outside the checkout), with Delta's jars given
the way a cluster gives them (``spark.jars`` in a Spark profile).

One ``intent run`` (generate, ingest, split, verify; SASRec and popularity trained and scored in
2 processes; evaluate, report), then the commands a submitter runs, through the same entry point
in one process: export, a file of popularity's own top items, submit, evaluate, where the
submission must score exactly as popularity's ranks do. One run, not a command a stage: each
process is a JVM start, CI's minutes.
With ``--kill-split``, the run's driver is first killed in the middle of the split (a fault point)
and the chain's run resumes it; the split's tables must equal those of a clean run of the data
stages beside it. Each command's time and last line go to the log; the first failure stops the chain with its
output. Run with the stack's Python: ``python tests/stack_chain.py --jars JAR[,JAR...]``."""

from __future__ import annotations

import argparse
import csv
import io
import os
import re
import signal
import subprocess
import sys
import time
from contextlib import redirect_stderr, redirect_stdout, suppress
from pathlib import Path

DATASET = "hm"
FLOOR = "10"  # the chain's few hundred users: every cell reaches it


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jars", required=True, help="Delta's jars, comma-separated (what spark.jars holds)")
    parser.add_argument("--events", type=int, default=6000)
    parser.add_argument(
        "--kill-split",
        action="store_true",
        help="kill the run's driver once in the middle of the split, let the chain resume it, and "
        "compare the split's tables with those of a clean run of the data stages",
    )
    args = parser.parse_args()
    here = Path.cwd()
    intent = str(Path(sys.executable).parent / "intent")
    import pyarrow
    import pyspark
    import torch

    import intent_spark

    location = Path(intent_spark.__file__).parent
    print(
        f"intent_spark from {location}; pyspark {pyspark.__version__}, pyarrow {pyarrow.__version__}, "
        f"torch {torch.__version__}, python {sys.version.split()[0]}",
        flush=True,
    )
    if not str(location).startswith(sys.prefix):
        print(f"stack chain: intent_spark is not the installed wheel's ({location})")
        return 1
    from intent_spark.core.conf import CONF_DIR

    # the package's own profile for tiny lakes (what the tests use), with Delta's jars added
    profile = here / "cluster.yaml"
    small = (CONF_DIR / "spark" / "small.yaml").read_text(encoding="utf-8")
    profile.write_text(f"{small}\nspark.master: local[2]\nspark.jars: {args.jars}\n", encoding="utf-8")
    run = _run_conf(here, here, args.events, "models: [sasrec, popularity]\nprocesses: 2\n")
    lake = str(here / "lake")
    spark = ["--spark-profile", str(profile)]
    common = ["--dataset", DATASET, "--lake", lake]
    steps: list[tuple[list[str], dict[str, str]]] = []
    if args.kill_split:
        clean = _run_conf(here / "clean", here / "clean", args.events, "models: []\n")
        steps += [(["run", "--conf", str(clean), *spark], {}), (["run", "--conf", str(run), *spark], KILLED)]
    steps.append((["run", "--conf", str(run), *spark], {}))
    for step, env in steps:
        start = time.monotonic()
        code, out = _intent(intent, step, env)
        if not _logged(step, env, code, out, start, -signal.SIGKILL if env else 0):
            return 1
    # a submitter's commands, in this process: each command is a JVM start and an import of torch
    # and Spark, so they share one (CI's minutes), as a notebook calling them would
    from intent_spark.cli import main as intent_main

    submitter = [
        ["export", *common, "--out", "export", *spark],
        [
            "score",
            *common,
            "--model",
            "popularity",
            "--export",
            "popularity.parquet",
            "--top-k",
            "1000",
            *spark,
        ],
        ["submit", *common, "--predictions", "popularity.parquet", "--name", "popularity_file", *spark],
        ["evaluate", *common, *spark],  # at the floor the split recorded (the chain's conf: FLOOR)
    ]
    for step in submitter:
        start, said = time.monotonic(), io.StringIO()
        with redirect_stdout(said), redirect_stderr(said):
            code = intent_main(step)
        if not _logged(step, {}, code, said.getvalue(), start, 0):
            return 1
    return check(here, here / "clean" / "lake" if args.kill_split else None)


def _logged(step: list[str], env: dict[str, str], code: int, out: str, start: float, expected: int) -> bool:
    """One line a command: its exit, its time and its last line; its output where it failed."""
    last = (out.strip().splitlines() or [""])[-1]
    what = f"intent {' '.join(step[:3])}" + (f" ({env['INTENT_FAULT']})" if env else "")
    print(f"{what}: exit {code}, {time.monotonic() - start:.1f} s: {last}", flush=True)
    if code != expected:
        print(out[-8000:])
    return code == expected


# intent_spark.core.faults' variable: after holdout and splits are written, before targets
KILLED = {"INTENT_FAULT": "split.holdout"}
SPLIT_TABLES = ("events", "holdout", "splits", "targets", "split_candidates", "split_counts")


def _run_conf(folder: Path, workdir: Path, events: int, models: str) -> Path:
    """A run conf of the chain's dataset; its split conf is the package's with the chain's floor
    (a run conf's own floor cannot go below 200 users, which a chain this small never reaches)."""
    from intent_spark.core.conf import CONF_DIR

    folder.mkdir(parents=True, exist_ok=True)
    split = folder / "split.yaml"
    package = (CONF_DIR / "split.yaml").read_text(encoding="utf-8")
    split.write_text(re.sub(r"(?m)^floor_users: \d+", f"floor_users: {FLOOR}", package), encoding="utf-8")
    conf = folder / "run.yaml"
    conf.write_text(
        f"workdir: {workdir}\nseed: 3\ndatasets:\n  - {{name: {DATASET}, events: {events}}}\n{models}"
        f"split_conf: {split}\nmodel_overrides:\n  sasrec: {{steps: 20}}\n",
        encoding="utf-8",
    )
    return conf


def _intent(intent: str, command: list[str], env: dict[str, str]) -> tuple[int, str]:
    """Run one command in a process group of its own; a driver killed at a fault point takes its
    JVM and Python workers with it, as a machine's failure would."""
    child = subprocess.Popen(
        [intent, *command],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, **env},
        start_new_session=True,
    )
    out, _ = child.communicate()
    with suppress(ProcessLookupError):
        os.killpg(child.pid, signal.SIGKILL)
    return child.returncode, out


def check(here: Path, clean: Path | None) -> int:
    """The outcomes a user would look for: both models in the run's report summary (as a cell's
    leader or runner-up), tasks exported, the submitted file's metrics (the test split's, at k up
    to 100) equal to popularity's own in every cell; with ``clean``, the split's tables of the
    resumed run equal to the clean run's."""
    summary = list(csv.DictReader((here / "report" / "summary.csv").open(encoding="utf-8")))
    models = {row["leader"] for row in summary} | {row["runner_up"] for row in summary}
    problems = [
        f"{name} missing from the report's summary.csv"
        for name in ("sasrec", "popularity")
        if name not in models
    ]
    import pyarrow.parquet as pq

    tasks = sorted((here / "export").glob("*/tasks.parquet"))
    if not tasks or not all(pq.read_metadata(t).num_rows for t in tasks):
        problems.append(f"no exported tasks under {here / 'export'}")
    from intent_spark.lake.session import build_session

    spark = build_session(overrides=_profile(here / "cluster.yaml"))  # the submitter's, still running
    metrics = _cell_metrics(spark, here)
    own, submitted = metrics.get("popularity", {}), metrics.get("popularity_file", {})
    differ = {key: (value, own.get(key)) for key, value in submitted.items() if own.get(key) != value}
    if not submitted or differ:
        problems.append(
            f"popularity's submitted top items score otherwise than its ranks: {differ or 'no metrics'}"
        )
    if clean is not None:
        from conftest import same_tables  # the tests' comparison: rows as multisets, doubles to 1e-12

        try:
            same_tables(spark, str(here / "lake"), str(clean), DATASET, list(SPLIT_TABLES))
        except AssertionError as differ:
            problems.append(f"the resumed split's tables differ from a clean run's: {differ}")
    spark.stop()
    for problem in problems:
        print(f"stack chain: {problem}")
    print(
        f"stack chain: {'failed' if problems else 'passed'}: {len(summary)} summary rows, {len(tasks)} task files, "
        f"{len(submitted)} metrics of the submitted file equal to popularity's"
        + (
            f"; the split killed and resumed, its {len(SPLIT_TABLES)} tables equal to a clean run's"
            if clean
            else ""
        )
    )
    return 1 if problems else 0


def _cell_metrics(spark, here: Path) -> dict[str, dict[tuple[str, str, str, int], float]]:
    """Each model's cell means at k up to 100 from the lake's ``metrics`` table, read through Spark."""
    from intent_spark.lake.tables import read_table

    rows = read_table(spark, str(here / "lake"), "metrics", DATASET).collect()
    found: dict[str, dict[tuple[str, str, str, int], float]] = {}
    for row in rows:
        if row.value is not None and row.k is not None and row.k <= 100:  # the file lists 1,000 items
            key = (row.split, row.cell, row.metric, row.k)
            found.setdefault(row.model, {})[key] = round(row.value, 12)
    return found


def _profile(path: Path) -> dict[str, str]:
    import yaml

    return {
        str(k): str(v).lower() if isinstance(v, bool) else str(v)
        for k, v in yaml.safe_load(path.read_text()).items()
    }


if __name__ == "__main__":
    raise SystemExit(main())
