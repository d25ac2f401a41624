"""Rows each data stage reads per event: the split and the model inputs of a generated REES46
release, counted twice, from the queries' plans (as `pipeline_bench.py` counts) and from the
tasks' own input records (Spark's stage metrics), so each count checks the other.

    .venv/bin/python bench/stage_reads.py --events 200000 1000000 --workdir /tmp/stage-reads
    .venv/bin/python bench/stage_reads.py --events 50000000 --driver-memory 6g
"""

from __future__ import annotations

import argparse
import sys
import time
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from pipeline_bench import plan_profile, rest, spark_marks

from intent_spark.core.conf import CONF_DIR
from intent_spark.core.datasets import DatasetRef
from intent_spark.core.sources import load_source
from intent_spark.generate import generate_release
from intent_spark.ingest import ingest_source
from intent_spark.lake.context import Lake
from intent_spark.lake.session import build_session
from intent_spark.split.conf import load_split_conf
from intent_spark.split.split_tables import run_split
from intent_spark.train.conf import load_models_conf
from intent_spark.train.inputs import build_model_inputs

DATASET = DatasetRef("rees46")


def measure(spark, name: str, events: int, lake: str, raw: str, stage) -> None:
    marks = spark_marks(spark)
    started = time.monotonic()
    stage()
    seconds = time.monotonic() - started
    planned = plan_profile(spark, marks, lake, raw)["rows_read"].get("parquet", 0)
    stage_mark = marks[0]
    done = [s for s in rest(spark, "stages?status=complete") if s["stageId"] > stage_mark]
    tasks = sum(s["inputRecords"] for s in done)
    print(
        f"{events:>11,} {name:<13} {seconds:6.1f} s  rows read / events: plans {planned / events:.2f}, "
        f"tasks {tasks / events:.2f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--events", type=int, nargs="+", default=[200_000])
    parser.add_argument("--workdir", default="/tmp/stage-reads")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--driver-memory", default="4g", help="the driver's heap (6g from 50M events)")
    args = parser.parse_args()
    spark = build_session(
        "intent-stage-reads", {"spark.ui.enabled": "true", "spark.driver.memory": args.driver_memory}
    )
    split_conf = load_split_conf(CONF_DIR / "split.yaml", DATASET.source)
    models = load_models_conf()
    for events in args.events:
        folder = Path(args.workdir) / str(events)
        raw, lake = str(folder / "raw"), str(folder / "lake")
        if not (folder / "raw").is_dir():
            generate_release(DATASET.source, raw, events, seed=args.seed)
        if not (folder / "lake" / "events").is_dir():
            ingest_source(Lake(spark, lake), load_source(DATASET.source), raw)
        measure(spark, "split", events, lake, raw, partial(run_split, spark, lake, DATASET, split_conf))
        inputs = partial(
            build_model_inputs,
            Lake(spark, lake),
            DATASET,
            context=models.context,
            max_tokens=models.max_tokens,
            force=True,
        )
        measure(spark, "model inputs", events, lake, raw, inputs)


if __name__ == "__main__":
    main()
