"""Ingest throughput on generated data: wall time, rows per second, peak memory.

    .venv/bin/python bench/ingest_bench.py --dataset rees46 --events 5000000

Not a test: numbers depend on the machine. Peak memory is sampled every 0.2 s over this
process and its children (the Spark driver JVM runs executors in-process in local mode).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import psutil
from measure import PeakMemory

from intent_spark.core.sources import load_source
from intent_spark.generate import generate_release
from intent_spark.ingest import ingest_source
from intent_spark.lake.context import Lake
from intent_spark.lake.session import build_session


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dataset", default="rees46")
    parser.add_argument("--events", type=int, default=5_000_000)
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--driver-memory", default="6g")
    args = parser.parse_args()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="intent-bench-"))
    raw, lake = work / "raw", str(work / "lake")

    started = time.monotonic()
    if not raw.is_dir():  # reuse a release generated earlier in the same workdir
        generate_release(args.dataset, raw, args.events, seed=1)
    generate_s = time.monotonic() - started
    raw_bytes = sum(f.stat().st_size for f in raw.rglob("*") if f.is_file())

    spark = build_session("intent-bench", {"spark.driver.memory": args.driver_memory})
    with PeakMemory() as memory:
        started = time.monotonic()
        summary = ingest_source(Lake(spark, lake), load_source(args.dataset), str(raw))
        ingest_s = time.monotonic() - started
    result = {
        "dataset": args.dataset,
        "events": summary.events,
        "raw_mib": round(raw_bytes / 2**20, 1),
        "generate_s": round(generate_s, 1),
        "ingest_s": round(ingest_s, 1),
        "rows_per_s": round(summary.raw_rows / ingest_s),
        "peak_driver_jvm_mib": round(memory.peak_driver / 2**20),
        "peak_python_mib": round(memory.peak_python / 2**20),
        "cores": psutil.cpu_count(),
        "shuffle_partitions": spark.conf.get("spark.sql.shuffle.partitions"),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
