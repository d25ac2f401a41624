"""Training steps/s and scoring targets/s in 1 and 2 processes (TorchDistributor) on this
machine: generated REES46 data through ingest and split, then SASRec trained and scored by the
library's own stages, as `intent train/score --processes N` run them.

    python bench/processes_bench.py --events 200000 --steps 300 --out bench/results/processes.json

The rates are the stages' own MLflow metrics (rank 0's loop for training; the slowest
process for scoring); the wall times include starting the processes.
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
from pathlib import Path

import psutil
import torch
from mlflow import MlflowClient

from intent_spark.core.conf import CONF_DIR
from intent_spark.core.datasets import DatasetRef
from intent_spark.core.sources import load_source
from intent_spark.generate import generate_release
from intent_spark.ingest import ingest_source
from intent_spark.lake.context import Lake
from intent_spark.lake.session import build_session
from intent_spark.split.conf import load_split_conf
from intent_spark.split.split_tables import run_split
from intent_spark.train.conf import load_models_conf, with_processes
from intent_spark.train.fit import train
from intent_spark.train.score import score


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--model", default="sasrec")
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--out", default="bench/results/processes.json")
    args = parser.parse_args()
    spark = build_session("bench-processes", {})
    work = Path(tempfile.mkdtemp(prefix="processes-bench-"))
    lake, uri = str(work / "lake"), f"sqlite:///{work / 'mlflow.db'}"
    generate_release("rees46", work / "raw", args.events, seed=0)
    ingest_source(Lake(spark, lake), load_source("rees46"), str(work / "raw"))
    run_split(Lake(spark, lake), DatasetRef("rees46"), load_split_conf(CONF_DIR / "split.yaml", "rees46"))
    base = load_models_conf(overrides={args.model: {"steps": args.steps}})
    rows = []
    for processes in args.processes:
        conf = with_processes(base, processes)
        start = time.monotonic()
        run_id = train(
            Lake(spark, lake, uri, progress=print), DatasetRef("rees46"), args.model, conf, splits=["test"]
        )
        train_wall = time.monotonic() - start
        start = time.monotonic()
        score(Lake(spark, lake, uri, progress=print), DatasetRef("rees46"), args.model, conf)
        score_wall = time.monotonic() - start
        metrics = MlflowClient(uri).get_run(run_id).data.metrics
        row = {
            "processes": processes,
            "steps": args.steps,
            "steps_per_second": round(metrics["train.test.steps_per_second"], 2),
            "train_wall_seconds": round(train_wall, 1),
            "targets": int(metrics["score.test.targets"]),
            "targets_per_second": round(metrics["score.test.targets_per_second"], 1),
            "score_wall_seconds": round(score_wall, 1),
        }
        rows.append(row)
        print(json.dumps(row), flush=True)
    result = {
        "machine": f"{platform.machine()}, {psutil.cpu_count()} cores, {psutil.virtual_memory().total / 2**30:.0f} GiB",
        "torch": torch.__version__,
        "events": args.events,
        "model": args.model,
        "rows": rows,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
