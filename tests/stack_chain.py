"""The short chain a side stack runs (`make test-stack STACK=NAME`): every stage as a user runs it,
from an installed wheel, in the current folder (outside the checkout), with Delta's jars given
the way a cluster gives them (``spark.jars`` in a Spark profile).

generate, ingest, split, verify; SASRec and popularity trained and scored in 2 processes;
export, and a submission of popularity's own top items; evaluate and report, where the
submission must score exactly as popularity's ranks do. Each command's time and last line go to the log; the first
failure stops the chain with its output. Run with the stack's Python:
``python tests/stack_chain.py --jars JAR[,JAR...]``."""

from __future__ import annotations

import argparse
import csv
import subprocess
import sys
import time
from pathlib import Path

DATASET = "hm"
FLOOR = "10"  # the chain's few hundred users: every cell reaches it


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jars", required=True, help="Delta's jars, comma-separated (what spark.jars holds)")
    parser.add_argument("--events", type=int, default=6000)
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
    lake = str(here / "lake")
    spark = ["--spark-profile", str(profile)]
    common = ["--dataset", DATASET, "--lake", lake]
    steps = [
        ["generate", "--dataset", DATASET, "--events", str(args.events), "--out", "raw", "--seed", "3"],
        ["ingest", "--dataset", DATASET, "--raw", "raw", "--lake", lake, *spark],
        ["split", *common, *spark],
        ["verify", "--lake", lake, "--dataset", DATASET, *spark],
        ["train", *common, "--model", "sasrec", "--steps", "20", "--processes", "2", *spark],
        ["score", *common, "--model", "sasrec", "--processes", "2", *spark],
        ["train", *common, "--model", "popularity", "--processes", "2", *spark],
        ["score", *common, "--model", "popularity", "--processes", "2", *spark],
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
        # one evaluate and one report for the three (each command is a JVM start: CI's minutes)
        ["evaluate", *common, "--floor-users", FLOOR, *spark],
        ["report", "--lake", lake, "--out", "report", "--floor-users", FLOOR, *spark],
    ]
    for step in steps:
        start = time.monotonic()
        done = subprocess.run([intent, *step], capture_output=True, text=True)
        last = ((done.stdout + done.stderr).strip().splitlines() or [""])[-1]
        print(
            f"intent {' '.join(step[:3])}: exit {done.returncode}, {time.monotonic() - start:.1f} s: {last}",
            flush=True,
        )
        if done.returncode != 0:
            print(done.stdout[-4000:] + done.stderr[-4000:])
            return 1
    return check(here)


def check(here: Path) -> int:
    """The outcomes a user would look for: both models in the report's summary (as a cell's leader
    or runner-up), tasks exported, and the submitted file's metrics (the test split's, at k up to
    100) equal to popularity's own in every cell."""
    summary = list(csv.DictReader((here / "report" / "summary.csv").open(encoding="utf-8")))
    models = {row["leader"] for row in summary} | {row["runner_up"] for row in summary}
    # the submitted file scores exactly as popularity does: either of the two may head its ties
    problems = [
        f"{' or '.join(names)} missing from the report's summary.csv"
        for names in (("sasrec",), ("popularity", "popularity_file"))
        if not models & set(names)
    ]
    import pyarrow.parquet as pq

    tasks = sorted((here / "export").glob("*/tasks.parquet"))
    if not tasks or not all(pq.read_metadata(t).num_rows for t in tasks):
        problems.append(f"no exported tasks under {here / 'export'}")
    metrics = _cell_metrics(here)
    own, submitted = metrics.get("popularity", {}), metrics.get("popularity_file", {})
    differ = {key: (value, own.get(key)) for key, value in submitted.items() if own.get(key) != value}
    if not submitted or differ:
        problems.append(
            f"popularity's submitted top items score otherwise than its ranks: {differ or 'no metrics'}"
        )
    for problem in problems:
        print(f"stack chain: {problem}")
    print(
        f"stack chain: {'failed' if problems else 'passed'}: {len(summary)} summary rows, {len(tasks)} task files, "
        f"{len(submitted)} metrics of the submitted file equal to popularity's"
    )
    return 1 if problems else 0


def _cell_metrics(here: Path) -> dict[str, dict[tuple[str, str, str, int], float]]:
    """Each model's cell means at k up to 100 from the lake's ``metrics`` table, read through Spark."""
    from intent_spark.lake.session import build_session
    from intent_spark.lake.tables import read_table

    spark = build_session(overrides=_profile(here / "cluster.yaml"))
    rows = read_table(spark, str(here / "lake"), "metrics", DATASET).collect()
    found: dict[str, dict[tuple[str, str, str, int], float]] = {}
    for row in rows:
        if row.value is not None and row.k is not None and row.k <= 100:  # the file lists 1,000 items
            key = (row.split, row.cell, row.metric, row.k)
            found.setdefault(row.model, {})[key] = round(row.value, 12)
    spark.stop()
    return found


def _profile(path: Path) -> dict[str, str]:
    import yaml

    return {
        str(k): str(v).lower() if isinstance(v, bool) else str(v)
        for k, v in yaml.safe_load(path.read_text()).items()
    }


if __name__ == "__main__":
    raise SystemExit(main())
