"""How the split and target stage scales: Spark against the DuckDB reference and
RePlay's splitters on the same Parquet events of generated REES46 data, at several sizes, in one run.

    cd bench && ../.venv/bin/python scale_bench.py --events 1000000 5000000 20000000 50000000

For each size: generate the release once (kept in --workdir for later runs), ingest it and
export the events table as plain Parquet. Then, after one warm-up, per repeat on that Parquet:
Spark computing the test and validation splits down to per-cell user and target counts (without
its Delta writes), DuckDB doing the same (the two must agree on every cutoff and count), RePlay's
Spark splitters (ColdUserRandomSplitter, then TimeSplitter at the same test cutoff), and our own
holdout and time split alone, the like-for-like work. Reported per size: medians, events per
second, the Spark/DuckDB and RePlay/ours ratios, peak JVM and Python memory, shuffle and spill
bytes, and the scaling exponent from the size before (log time ratio over log size ratio; 1.0
is linear). Results go to results/scale.json, a figure and one MLflow run.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import statistics
import time
import urllib.request
from datetime import datetime
from pathlib import Path

import psutil
from duckdb_split import compare_summaries, run_duckdb_split, summarize, summarize_spark_outcomes
from measure import PeakMemory, log_to_mlflow
from pyspark.sql import functions as F

from intent_spark.core import schema as S
from intent_spark.core.conf import CONF_DIR
from intent_spark.core.sources import load_source
from intent_spark.generate import generate_release
from intent_spark.ingest import ingest_source
from intent_spark.lake.context import Lake
from intent_spark.lake.session import build_session
from intent_spark.lake.tables import has_table, read_table
from intent_spark.split.cells import with_period
from intent_spark.split.conf import load_split_conf
from intent_spark.split.holdout import is_held_out
from intent_spark.split.split_tables import split_events

DATASET = "rees46"
# RePlay 0.22 asks for pandas<3 and pyarrow<24: it installs beside the dbr-17.3 and petastorm stacks
# (`make bench STACK=petastorm`), not beside newest, where its columns are NaN
HAVE_REPLAY = importlib.util.find_spec("replay") is not None


def stage_totals(spark) -> tuple[int, int]:
    """Shuffle bytes written and bytes spilled to disk by every finished stage so far, from the
    Spark UI's REST API."""
    app = spark.sparkContext.applicationId
    url = f"{spark.sparkContext.uiWebUrl}/api/v1/applications/{app}/stages?status=complete"
    with urllib.request.urlopen(url, timeout=30) as answer:
        stages = json.load(answer)
    return sum(s["shuffleWriteBytes"] for s in stages), sum(s["diskBytesSpilled"] for s in stages)


def prepare(spark, work: Path, events: int) -> Path:
    """Generated release, lake and exported events Parquet for one size (reused when present)."""
    raw, lake, parquet = work / "raw", str(work / "lake"), work / "events.parquet"
    if not raw.is_dir():
        generate_release(DATASET, raw, events, seed=1)
    if not has_table(spark, lake, S.EVENTS):
        ingest_source(Lake(spark, lake), load_source(DATASET), str(raw))
    if not parquet.is_dir():
        read_table(spark, lake, S.EVENTS, DATASET).select(S.USER_ID, S.ITEM_ID, S.TS, S.SEQ).write.parquet(
            str(parquet)
        )
    return parquet


def time_spark(spark, parquet: Path, conf) -> tuple[float, dict, PeakMemory, int, int]:
    shuffled_before, spilled_before = stage_totals(spark)
    with PeakMemory() as memory:
        started = time.monotonic()
        outcomes = split_events(spark.read.parquet(str(parquet)), DATASET, conf)
        found = summarize_spark_outcomes(outcomes)
        seconds = time.monotonic() - started
    shuffled, spilled = stage_totals(spark)
    return seconds, found, memory, shuffled - shuffled_before, spilled - spilled_before


def replay_split(spark, parquet: Path, cutoff, conf) -> dict:
    """RePlay's Spark splitters on the same events: cold users held out at random, then one
    global time split of the rest."""
    from replay.splitters import ColdUserRandomSplitter, TimeSplitter

    events = spark.read.parquet(str(parquet))
    warm, cold = ColdUserRandomSplitter(
        test_size=conf.holdout_fraction, seed=conf.seed, query_column=S.USER_ID, item_column=S.ITEM_ID
    ).split(events)
    train, test = TimeSplitter(
        time_threshold=cutoff, query_column=S.USER_ID, item_column=S.ITEM_ID, timestamp_column=S.TS
    ).split(warm)
    return {"train": train, "test": test, "cold": cold}


def our_time_split(spark, parquet: Path, cutoff, conf) -> dict:
    """Our holdout and global time split alone, the work RePlay's two splitters do: held-out
    users flagged by the seeded hash (no join, no sort), the rest cut at the test cutoff."""
    events = spark.read.parquet(str(parquet))
    held_out = is_held_out(F.col(S.USER_ID), conf.holdout_fraction, conf.seed, DATASET, S.TEST)
    labelled = with_period(events.withColumn(S.IS_NEW, held_out), cutoff)
    known = labelled.where(~F.col(S.IS_NEW))
    return {
        "train": known.where(F.col(S.PERIOD) == S.PAST),
        "test": known.where(F.col(S.PERIOD) == S.FUTURE),
        "cold": labelled.where(F.col(S.IS_NEW)),
    }


def time_materialized(split, spark, parquet: Path, cutoff, conf) -> tuple[float, dict]:
    """Seconds to build and count each of a splitter's three outputs (one job per output, as a
    caller writing them would run)."""
    started = time.monotonic()
    counts = {name: frame.count() for name, frame in split(spark, parquet, cutoff, conf).items()}
    return time.monotonic() - started, counts


def plot(result: dict, path: Path) -> Path:
    """Seconds against events on log axes (a slope-1 line is linear scaling), and the ratios."""
    from intent_spark.lake.figures import pyplot, save_figure

    plt = pyplot()
    rows = result["rows"]
    events = [r["events"] for r in rows]
    fig, (curves, ratios) = plt.subplots(1, 2, figsize=(11, 4.2))
    for key, label in (
        ("spark_s", "ours: split and targets (Spark)"),
        ("duckdb_s", "the same in DuckDB"),
        ("our_time_split_s", "ours: holdout and time split only"),
        ("replay_s", "RePlay: ColdUserRandomSplitter + TimeSplitter"),
    ):
        if key == "replay_s" and not HAVE_REPLAY:
            continue
        curves.plot(events, [r[key] for r in rows], marker="o", label=label)
    linear = [rows[0]["spark_s"] * e / events[0] for e in events]
    curves.plot(events, linear, linestyle=":", color="grey", label="linear from the smallest size")
    curves.set(xscale="log", yscale="log", xlabel="events", ylabel="seconds (median)")
    curves.legend(fontsize=7)
    positions = range(len(rows))
    width = 0.4
    ratios.bar([p - width / 2 for p in positions], [r["ratio"] for r in rows], width, label="Spark / DuckDB")
    ratios.bar(
        [p + width / 2 for p in positions],
        [r["replay_over_our_time_split"] for r in rows],
        width,
        label="RePlay / ours (time split)",
    )
    ratios.axhline(1.0, color="grey", linewidth=0.8)
    ratios.set_xticks(list(positions), [f"{e / 1e6:g}M" for e in events])
    ratios.set(xlabel="events", ylabel="time ratio")
    ratios.legend(fontsize=7)
    fig.suptitle(f"Split and target stage, {result['cores']} cores, {result['memory_gib']} GiB")
    return save_figure(fig, path, "split scaling")


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
    parser.add_argument("--out", default="results/scale.json")
    parser.add_argument("--figure", default="../docs/bench/split_scaling.png")
    parser.add_argument("--tracking-uri", default="sqlite:///results/mlflow.db")
    parser.add_argument(
        "--prepare-only", action="store_true", help="generate, ingest and export each size, time nothing"
    )
    args = parser.parse_args()
    spark = build_session(
        "intent-scale-bench", {"spark.driver.memory": args.driver_memory, "spark.ui.enabled": "true"}
    )
    conf = load_split_conf(CONF_DIR / "split.yaml", DATASET)
    rows = []
    sizes = sorted(args.events)
    if not HAVE_REPLAY:
        print(
            "RePlay is not installed beside this stack (pandas<3, pyarrow<24): its columns stay NaN",
            flush=True,
        )
    inputs = {events: prepare(spark, Path(args.workdir) / str(events), events) for events in sizes}
    if args.prepare_only:
        return
    time_spark(spark, inputs[sizes[0]], conf)  # warm-up: the JVM's first job pays its start-up
    for events, parquet in inputs.items():
        spark_runs, duck_runs, replay_runs, time_split_runs = [], [], [], []
        for repeat in range(args.repeats):
            seconds, found, memory, shuffled, spilled = time_spark(spark, parquet, conf)
            splits, duck_seconds = run_duckdb_split(parquet, DATASET, conf)
            differences = compare_summaries(summarize(splits), found)
            if differences:
                raise SystemExit(f"{events} events: Spark and DuckDB disagree: {differences}")
            cutoff = datetime.fromisoformat(found[S.TEST]["cutoff"])
            replay_seconds, replay_counts = (
                time_materialized(replay_split, spark, parquet, cutoff, conf)
                if HAVE_REPLAY
                else (math.nan, {})
            )
            ours_seconds, ours_counts = time_materialized(our_time_split, spark, parquet, cutoff, conf)
            spark_runs.append((seconds, memory.peak_driver, memory.peak_python, shuffled, spilled))
            duck_runs.append(duck_seconds)
            replay_runs.append(replay_seconds)
            time_split_runs.append(ours_seconds)
            print(
                f"{events:,} events, run {repeat + 1}: spark {seconds:.1f} s, duckdb {duck_seconds:.1f} s, "
                f"replay {replay_seconds:.1f} s {replay_counts}, ours {ours_seconds:.1f} s {ours_counts}",
                flush=True,
            )
        spark_s = statistics.median(r[0] for r in spark_runs)
        duck_s = statistics.median(duck_runs)
        replay_s = statistics.median(replay_runs)
        time_split_s = statistics.median(time_split_runs)
        rows.append(
            {
                "events": events,
                "spark_s": round(spark_s, 2),
                "duckdb_s": round(duck_s, 2),
                "ratio": round(spark_s / duck_s, 2),
                "replay_s": round(replay_s, 2),
                "our_time_split_s": round(time_split_s, 2),
                "replay_over_our_time_split": round(replay_s / time_split_s, 2),
                "replay_over_our_stage": round(replay_s / spark_s, 2),
                "spark_events_per_s": round(events / spark_s),
                "peak_driver_jvm_mib": round(max(r[1] for r in spark_runs) / 2**20),
                "peak_python_mib": round(max(r[2] for r in spark_runs) / 2**20),
                "shuffle_mib": round(statistics.median(r[3] for r in spark_runs) / 2**20, 1),
                "spill_mib": round(max(r[4] for r in spark_runs) / 2**20, 1),
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
    Path(args.figure).parent.mkdir(parents=True, exist_ok=True)
    figure = plot(result, Path(args.figure))
    params = {k: result[k] for k in ("cores", "memory_gib", "shuffle_partitions", "repeats")}
    run_id = log_to_mlflow(
        args.tracking_uri, "split-scaling", params, rows, "events", [figure, Path(args.out)]
    )
    print(f"figure {args.figure}, MLflow run {run_id} in {args.tracking_uri}")
    print(
        "| events | split+targets s | DuckDB s | Spark/DuckDB | exponent | our time split s | RePlay s "
        "| RePlay/ours | events/s | peak JVM MiB | peak Python MiB | shuffle MiB | spill MiB |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['events']:,} | {r['spark_s']} | {r['duckdb_s']} | {r['ratio']} | {r.get('spark_exponent', '-')} "
            f"| {r['our_time_split_s']} | {r['replay_s']} | {r['replay_over_our_time_split']} "
            f"| {r['spark_events_per_s']:,} | {r['peak_driver_jvm_mib']} | {r['peak_python_mib']} "
            f"| {r['shuffle_mib']} | {r['spill_mib']} |"
        )


if __name__ == "__main__":
    main()
