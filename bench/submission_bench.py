"""What a submission costs: `intent submit` as a user runs it (its own process, Spark's start
included) on generated events (H&M by default), with lists of 20 items and lists of the whole
catalogue, and the same check in the running session at growing list lengths for the cost per
million list items. Every list is a random order of catalogue items (a clean file: no row is
rejected).

    .venv/bin/python bench/submission_bench.py --events 20000 --out bench/results/submissions.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from intent_spark.core.datasets import DatasetRef
from intent_spark.lake.context import Lake

REPO = Path(__file__).resolve().parent.parent


def prepare(work: Path, dataset: str, events: int, seed: int) -> tuple[str, Path]:
    """Generated events ingested and split into a fresh lake, its test tasks exported."""
    from intent_spark.core.conf import CONF_DIR
    from intent_spark.core.sources import load_source
    from intent_spark.exchange.tasks import export_tasks
    from intent_spark.generate import generate_release
    from intent_spark.ingest import ingest_source
    from intent_spark.lake.session import build_session
    from intent_spark.split.conf import load_split_conf
    from intent_spark.split.split_tables import run_split

    spark = build_session("submission-bench")
    raw, lake, tasks = work / "raw", str(work / "lake"), work / "tasks"
    generate_release(dataset, raw, events, seed=seed)
    ingest_source(Lake(spark, lake), load_source(dataset), str(raw))
    ref = DatasetRef(dataset)
    run_split(Lake(spark, lake), ref, load_split_conf(CONF_DIR / "split.yaml", dataset))
    export_tasks(Lake(spark, lake), ref, str(tasks), splits=["test"])
    return lake, tasks


def write_lists(tasks: Path, length: int | None, path: Path, seed: int) -> tuple[int, int]:
    """One row per test task, ``length`` distinct catalogue items in random order (None: all of
    them) with falling scores; returns (rows, list items)."""
    ids = pq.read_table(tasks / "test" / "tasks.parquet", columns=["target_id"]).column(0).to_pylist()
    catalogue = np.array(pq.read_table(tasks / "test" / "catalogue.parquet").column("item_id").to_pylist())
    n = catalogue.size if length is None else min(length, catalogue.size)
    rng = np.random.default_rng(seed)
    lists = [catalogue[rng.permutation(catalogue.size)[:n]].tolist() for _ in ids]
    scores = np.linspace(1.0, 0.0, n).tolist()
    pq.write_table(pa.table({"target_id": ids, "items": lists, "scores": [scores] * len(ids)}), path)
    return len(ids), len(ids) * n


def run_submit(code: Path, lake: str, dataset: str, path: Path, name: str) -> float:
    """Seconds of ``intent submit`` of the checkout ``code`` in its own process, start-up included."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "intent_spark.cli", "submit", "--dataset", dataset, "--lake", lake,
         "--predictions", str(path), "--name", name, "--strict"],
        cwd=code, env=env, check=True, stdout=subprocess.DEVNULL,
    )  # fmt: skip
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="hm", help="a generated source")
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--work", default="/tmp/submission-bench")
    parser.add_argument("--lengths", type=int, nargs="+", default=[20, 100, 0], help="0: the whole catalogue")
    parser.add_argument("--out", default="bench/results/submissions.json")
    parser.add_argument(
        "--code",
        default=str(REPO),
        help="the checkout whose code is timed (another: the code before a change)",
    )
    args = parser.parse_args()
    code = Path(args.code).resolve()
    sys.path.insert(0, str(code))  # every intent_spark import below is that checkout's
    work = Path(args.work)
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    started = time.perf_counter()
    lake, tasks = prepare(work, args.dataset, args.events, args.seed)
    print(f"lake and tasks of {args.events:,} events in {time.perf_counter() - started:.1f} s", flush=True)

    from intent_spark.exchange.submissions import submit
    from intent_spark.lake.session import build_session

    spark = build_session("submission-bench")
    rows = []
    for length in args.lengths:
        path = work / f"lists_{length or 'all'}.parquet"
        targets, items = write_lists(tasks, length or None, path, args.seed)
        command = run_submit(code, lake, args.dataset, path, f"cli_{length or 'all'}")
        began = time.perf_counter()
        scored = submit(
            Lake(spark, lake, tracked=False),
            DatasetRef(args.dataset),
            str(path),
            f"session_{length or 'all'}",
            strict=True,
        )
        session = time.perf_counter() - began
        row = {
            "list_length": scored.longest_list,
            "targets": targets,
            "list_items": items,
            "command_s": round(command, 2),
            "in_session_s": round(session, 2),
        }
        rows.append(row)
        print(json.dumps(row), flush=True)
    if len(rows) >= 2:
        first, last = rows[0], rows[-1]
        per_million = (last["in_session_s"] - first["in_session_s"]) / (
            (last["list_items"] - first["list_items"]) / 1e6
        )
        print(f"cost per million list items (in session, marginal): {per_million:.2f} s")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(
        json.dumps({"dataset": args.dataset, "events": args.events, "rows": rows}, indent=2) + "\n"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
