"""Split stage throughput on an ingested lake: time per stage, rows per second, peak memory,
and the physical plan of the targets query (checked for Python UDFs and driver collection).

    .venv/bin/python bench/split_bench.py --lake /tmp/bench20m/lake --dataset rees46
"""

from __future__ import annotations

import argparse
import json
import re
import time

from measure import PeakMemory

from intent_spark.core import schema as S
from intent_spark.core.conf import CONF_DIR
from intent_spark.core.datasets import DatasetRef
from intent_spark.lake.context import Lake
from intent_spark.lake.session import build_session
from intent_spark.lake.tables import read_table
from intent_spark.split.conf import load_split_conf
from intent_spark.split.split_tables import run_split

PYTHON_ON_DATA_PATH = re.compile(
    r"PythonUDF|BatchEvalPython|ArrowEvalPython|MapInPandas|FlatMapGroupsInPandas|PythonRDD"
)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lake", required=True)
    parser.add_argument("--dataset", default="rees46")
    parser.add_argument("--driver-memory", default="6g")
    parser.add_argument("--plan-out", default=None, help="write the targets query plan here")
    args = parser.parse_args()
    spark = build_session("intent-split-bench", {"spark.driver.memory": args.driver_memory})
    events = read_table(spark, args.lake, S.EVENTS, args.dataset).count()
    stages: list[tuple[str, float]] = []
    last = time.monotonic()

    def progress(message: str) -> None:
        nonlocal last
        now = time.monotonic()
        stages.append((message, round(now - last, 1)))
        last = now
        print(f"[{now:.0f}] {message}", flush=True)

    conf = load_split_conf(CONF_DIR / "split.yaml", args.dataset)
    with PeakMemory() as memory:
        started = time.monotonic()
        outcomes = run_split(Lake(spark, args.lake, progress=progress), DatasetRef(args.dataset), conf)
        total = time.monotonic() - started
    progress("end")
    plan = outcomes[0].targets._jdf.queryExecution().executedPlan().toString()
    if args.plan_out:
        with open(args.plan_out, "w") as handle:
            handle.write(plan)
    print(
        json.dumps(
            {
                "dataset": args.dataset,
                "events": events,
                "split_s": round(total, 1),
                "events_per_s": round(events / total),
                "stages": stages[1:],  # each progress line with the seconds since the one before
                "peak_driver_jvm_mib": round(memory.peak_driver / 2**20),
                "peak_python_mib": round(memory.peak_python / 2**20),
                "python_on_data_path": sorted(set(PYTHON_ON_DATA_PATH.findall(plan))),
                "test_cutoff": str(outcomes[0].choice.cutoff),
                "val_cutoff": str(outcomes[1].choice.cutoff),
            }
        )
    )


if __name__ == "__main__":
    main()
