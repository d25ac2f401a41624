"""How the split and target stage scales (issue 7): Spark against the DuckDB reference on the same
Parquet events of generated REES46 data, at several sizes, in one run.

    .venv/bin/python bench/scale_bench.py --events 1000000 5000000 20000000 --repeats 3 \\
        --workdir /tmp/intent-scale --out bench/results/scale.json

For each size: generate the release once (kept in --workdir for later runs), ingest it, export
the events table as plain Parquet, then time, on that one Parquet folder, both engines computing
the test and validation splits down to per-cell user and target counts (Spark without its Delta
writes, so both do the same work). Each repeat checks that the two agree on every cutoff and
count; RePlay's Spark splitters (ColdUserRandomSplitter, then TimeSplitter at the same test
cutoff) run on the same Parquet beside them. Reported per size: median seconds, events per second, peak driver JVM and Python memory,
Spark's shuffle bytes, the Spark/DuckDB ratio, and the scaling exponent from the size before
(log time ratio over log size ratio; 1.0 is linear).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
import urllib.request
from datetime import datetime
from pathlib import Path

import psutil
from duckdb_split import compare_summaries, run_duckdb_split, summarize, summarize_spark_outcomes
from measure import PeakMemory

from intent_spark import schema as S
from intent_spark.config import CONF_DIR, load_source
from intent_spark.generate import generate_release
from intent_spark.ingest import ingest_source
from intent_spark.io import has_table, read_table
from intent_spark.session import build_session
from intent_spark.splitting import load_split_conf, split_events

DATASET = "rees46"


def shuffle_bytes(spark) -> int:
    """Shuffle bytes written by every finished stage so far, from the Spark UI's REST API."""
    app = spark.sparkContext.applicationId
    url = f"{spark.sparkContext.uiWebUrl}/api/v1/applications/{app}/stages?status=complete"
    with urllib.request.urlopen(url, timeout=30) as answer:
        return sum(stage["shuffleWriteBytes"] for stage in json.load(answer))


def prepare(spark, work: Path, events: int) -> Path:
    """Generated release, lake and exported events Parquet for one size (reused when present)."""
    raw, lake, parquet = work / "raw", str(work / "lake"), work / "events.parquet"
    if not raw.is_dir():
        generate_release(DATASET, raw, events, seed=1)
    if not has_table(spark, lake, S.EVENTS):
        ingest_source(spark, load_source(DATASET), str(raw), lake)
    if not parquet.is_dir():
        read_table(spark, lake, S.EVENTS, DATASET).select(S.USER_ID, S.ITEM_ID, S.TS, S.SEQ).write.parquet(
            str(parquet)
        )
    return parquet


def time_spark(spark, parquet: Path, conf) -> tuple[float, dict, PeakMemory, int]:
    before = shuffle_bytes(spark)
    with PeakMemory() as memory:
        started = time.monotonic()
        outcomes = split_events(spark.read.parquet(str(parquet)), DATASET, conf)
        found = summarize_spark_outcomes(outcomes)
        seconds = time.monotonic() - started
    return seconds, found, memory, shuffle_bytes(spark) - before


def time_replay(spark, parquet: Path, cutoff, fraction: float, seed: int) -> tuple[float, dict]:
    """RePlay's Spark splitters on the same events: cold users held out at random, then one
    global time split of the rest; counted so the whole split runs."""
    from replay.splitters import ColdUserRandomSplitter, TimeSplitter

    started = time.monotonic()
    events = spark.read.parquet(str(parquet))
    warm, cold = ColdUserRandomSplitter(
        test_size=fraction, seed=seed, query_column=S.USER_ID, item_column=S.ITEM_ID
    ).split(events)
    train, test = TimeSplitter(
        time_threshold=cutoff, query_column=S.USER_ID, item_column=S.ITEM_ID, timestamp_column=S.TS
    ).split(warm)
    counts = {"train": train.count(), "test": test.count(), "cold": cold.count()}
    return time.monotonic() - started, counts


def exponent(smaller: tuple[int, float], larger: tuple[int, float]) -> float:
    return math.log(larger[1] / smaller[1]) / math.log(larger[0] / smaller[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--events", type=int, nargs="+", default=[1_000_000, 5_000_000, 20_000_000, 50_000_000]
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workdir", default="/tmp/intent-scale")
    parser.add_argument("--driver-memory", default="6g")
    parser.add_argument("--out", default="bench/results/scale.json")
    args = parser.parse_args()
    spark = build_session(
        "intent-scale-bench", {"spark.driver.memory": args.driver_memory, "spark.ui.enabled": "true"}
    )
    conf = load_split_conf(CONF_DIR / "split.yaml", DATASET)
    rows = []
    for events in sorted(args.events):
        parquet = prepare(spark, Path(args.workdir) / str(events), events)
        spark_runs, duck_runs, replay_runs = [], [], []
        for repeat in range(args.repeats):
            seconds, found, memory, shuffled = time_spark(spark, parquet, conf)
            splits, duck_seconds = run_duckdb_split(parquet, DATASET, conf)
            differences = compare_summaries(summarize(splits), found)
            if differences:
                raise SystemExit(f"{events} events: Spark and DuckDB disagree: {differences}")
            cutoff = datetime.fromisoformat(found[S.TEST]["cutoff"])
            replay_seconds, replay_counts = time_replay(
                spark, parquet, cutoff, conf.holdout_fraction, conf.seed
            )
            spark_runs.append((seconds, memory.peak_driver, memory.peak_python, shuffled))
            duck_runs.append(duck_seconds)
            replay_runs.append(replay_seconds)
            print(
                f"{events:,} events, run {repeat + 1}: spark {seconds:.1f} s, duckdb {duck_seconds:.1f} s, "
                f"replay {replay_seconds:.1f} s {replay_counts}",
                flush=True,
            )
        spark_s = statistics.median(r[0] for r in spark_runs)
        duck_s = statistics.median(duck_runs)
        replay_s = statistics.median(replay_runs)
        rows.append(
            {
                "events": events,
                "spark_s": round(spark_s, 2),
                "duckdb_s": round(duck_s, 2),
                "ratio": round(spark_s / duck_s, 2),
                "replay_s": round(replay_s, 2),
                "replay_over_ours": round(replay_s / spark_s, 2),
                "spark_events_per_s": round(events / spark_s),
                "peak_driver_jvm_mib": round(max(r[1] for r in spark_runs) / 2**20),
                "peak_python_mib": round(max(r[2] for r in spark_runs) / 2**20),
                "shuffle_mib": round(statistics.median(r[3] for r in spark_runs) / 2**20, 1),
                "test_cutoff": found[S.TEST]["cutoff"],
                "cells_equal": True,
            }
        )
    for smaller, larger in zip(rows, rows[1:], strict=False):
        larger["spark_exponent"] = round(
            exponent((smaller["events"], smaller["spark_s"]), (larger["events"], larger["spark_s"])), 3
        )
        larger["duckdb_exponent"] = round(
            exponent((smaller["events"], smaller["duckdb_s"]), (larger["events"], larger["duckdb_s"])), 3
        )
    result = {
        "cores": psutil.cpu_count(),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "shuffle_partitions": spark.conf.get("spark.sql.shuffle.partitions"),
        "repeats": args.repeats,
        "rows": rows,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(
        "| events | Spark s | DuckDB s | Spark/DuckDB | RePlay s | RePlay/ours | Spark events/s | exponent "
        "| peak JVM MiB | shuffle MiB |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['events']:,} | {r['spark_s']} | {r['duckdb_s']} | {r['ratio']} | {r['replay_s']} "
            f"| {r['replay_over_ours']} | {r['spark_events_per_s']:,} "
            f"| {r.get('spark_exponent', '-')} | {r['peak_driver_jvm_mib']} | {r['shuffle_mib']} |"
        )


if __name__ == "__main__":
    main()
