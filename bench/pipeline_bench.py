"""The whole pipeline stage by stage at growing sizes, against single-node DuckDB references
(the whole pipeline at 50M events). Not a test: numbers depend on the machine.

    .venv/bin/python bench/pipeline_bench.py --events 1000000 5000000 20000000 50000000

Each size runs in its own child process, so each starts with a fresh JVM and Python heap (its
peak memory is its own) and a crash loses one size, not the run. Per size:

- the REES46 release (generated once with seed 1 and the 8 dirty lines, kept in --workdir and
  reused by later runs) goes into a fresh lake through the library's own stage functions, the
  ones ``intent ingest/split/train/score/evaluate`` call, each timed alone after a warm-up:
  ingest; split (both splits, targets, their Delta writes, checksums and the split report);
  model inputs (catalogue, train_sequences, score_events: the part of ``intent train`` that
  builds inputs); train sasrec (a few hundred steps of small batches: the point is the data
  path, not the model) and popularity; score popularity, repeat_last and sasrec (each with its
  ranks written); evaluate (user_metrics, metrics, comparisons, MLflow);
- DuckDB references on the same files in the same process, between the Spark stages:
  ``duckdb_ingest.py`` on the raw CSVs (events, rejects and items, per event type and reject
  reason, must equal Spark's), ``duckdb_split.py`` on the events table's Parquet files (cutoffs
  and per-cell counts must equal Spark's tables) and ``duckdb_evaluate.py`` on the ranks files
  (every cell metric equal to 1e-12); the run stops at the first disagreement;
- sasrec's scoring targets/s through Petastorm (``rank_split``'s own measure, logged to MLflow)
  against the bare kernel's at the same catalogue size (``model_bench.time_scoring``, synthetic
  blocks, no Spark, no Petastorm).

Per stage and size: wall seconds, events/s, the scaling exponent from the size before (log time
ratio over log size ratio; 1.0 is linear), peak JVM and Python RSS, shuffle written and bytes
spilled, task seconds over wall seconds (busy cores), and from the Spark UI's REST API the
executed plans (queries, Exchange, Window and Sort nodes, which tables each query scans) and
from the Delta logs the files each table was written in. Output: --out (JSON), the same stem as
.md (the tables) and .png (seconds against events, log-log, one line per stage, DuckDB dashed),
and the extrapolation to REES46's 411.7M events on 16 cores with its assumptions.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil
from measure import PeakMemory

from intent_spark.core.datasets import DatasetRef
from intent_spark.lake.context import Lake

DATASET = DatasetRef("rees46")
REES46_EVENTS = 411_700_000
MIB = 2**20

# (stage, kind, DuckDB reference): data stages are Spark's; model stages run torch in the driver.
STAGES = (
    ("ingest", "data", True),
    ("split", "data", True),
    ("model inputs", "data", False),
    ("train sasrec", "model", False),
    ("train popularity", "model", False),
    ("score popularity", "model", False),
    ("score repeat_last", "model", False),
    ("score sasrec", "model", False),
    ("evaluate", "data", True),
)
KIND = {name: kind for name, kind, _ in STAGES}
MODELS = ("popularity", "repeat_last", "sasrec")


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


# --- what Spark did during a stage: the UI's REST API and the Delta logs --------------------


def rest(spark, path: str) -> Any:
    sc = spark.sparkContext
    url = f"{sc.uiWebUrl}/api/v1/applications/{sc.applicationId}/{path}"
    with urllib.request.urlopen(url, timeout=120) as answer:
        return json.load(answer)


def spark_marks(spark) -> tuple[int, int]:
    """The newest stage id and SQL execution id so far (-1 when none): what a stage adds comes
    after them."""
    stages = rest(spark, "stages")
    executions = rest(spark, "sql?details=false&offset=0&length=1000000")
    return max((s["stageId"] for s in stages), default=-1), max((e["id"] for e in executions), default=-1)


_SCAN = re.compile(r"\n\((\d+)\) Scan ([^\n]*)\n(.*?)(?=\n\n\(\d+\) |\Z)", re.S)
_LOCATION = re.compile(r"Location: \S+ \[([^\]]*)\]")
_UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}


def tables_in_plan(plan: str, lake: str, raw: str) -> set[tuple[str, str]]:
    """(operator number, what it reads) of every file scan an executed plan's description
    names: a lake table by name, ``delta log``, ``raw files`` or the path. A cached plan's scans
    are named too, whether or not they ran: a hint of what is read where, not a count."""
    found = set()
    for number, _, body in _SCAN.findall(plan):
        match = _LOCATION.search(body)
        if not match:
            continue
        for path in match.group(1).split(", "):
            if re.fullmatch(r"\.\.\. \d+ entries", path):  # a long listing, shortened
                continue
            path = re.sub(r"^file:(//)?", "", path)
            if "/_delta_log" in path:
                found.add((number, "delta log"))
            elif path.startswith(lake):
                found.add((number, path[len(lake) :].strip("/").split("/")[0]))
            elif path.startswith(raw):
                found.add((number, "raw files"))
            else:
                found.add((number, path))
    return found


def _number(text: str | None) -> float:
    """A UI metric's value: ``100,015`` or ``1497.8 KiB`` (0 when absent or not a number)."""
    if not text:
        return 0.0
    parts = text.replace(",", "").split()
    try:
        return float(parts[0]) * (_UNITS.get(parts[1], 1) if len(parts) > 1 else 1)
    except (ValueError, IndexError):
        return 0.0


def executed_scans(
    nodes: list[dict[str, Any]], edges: list[dict[str, int]]
) -> list[tuple[str, float, float]]:
    """(format, rows, bytes) of every file scan of a query that read anything. A persisted set's
    plan is listed under each InMemoryTableScan that reads it, every copy with the metrics of the
    one scan that filled the cache: counted once. (A later query lists it again, reading nothing.)"""
    parent = {edge["fromId"]: edge["toId"] for edge in edges}  # the graph's edges run child -> parent
    names = {node["nodeId"]: node["nodeName"] for node in nodes}

    def cached(node_id: int) -> bool:
        while node_id in parent:
            node_id = parent[node_id]
            if names.get(node_id) == "InMemoryTableScan":
                return True
        return False

    scans, filled = [], set()
    for node in nodes:
        name = node["nodeName"]
        if not name.startswith("Scan ") or name.startswith("Scan ExistingRDD"):
            continue
        metrics = {m["name"]: m["value"] for m in node["metrics"]}
        rows = _number(metrics.get("number of output rows"))
        files = _number(metrics.get("number of files read"))
        size = _number(metrics.get("size of files read"))
        if cached(node["nodeId"]):
            if (name, rows, files, size) in filled:
                continue
            filled.add((name, rows, files, size))
        if rows > 0 or files > 0:
            scans.append((name.removeprefix("Scan ").strip(), rows, size))
    return scans


def plan_profile(spark, marks: tuple[int, int], lake: str, raw: str) -> dict[str, Any]:
    """What the stage's Spark work was: shuffle, spill and task time of its finished stages; its
    queries' executed plans (Delta's own log queries counted apart) and the file scans that ran."""
    time.sleep(1.0)  # the UI's listener runs behind the jobs
    stage_mark, sql_mark = marks
    done = [s for s in rest(spark, "stages?status=complete") if s["stageId"] > stage_mark]
    executions = [
        e
        for e in rest(spark, "sql?details=true&planDescription=true&offset=0&length=1000000")
        if e["id"] > sql_mark
    ]
    queries = [e for e in executions if not e["description"].startswith("Delta:")]
    nodes = Counter(n["nodeName"] for e in queries for n in e["nodes"])
    named: Counter[str] = Counter()
    scans: Counter[str] = Counter()
    rows_read: Counter[str] = Counter()
    bytes_read = 0.0
    for e in queries:
        for _, table in tables_in_plan(e.get("planDescription", ""), lake, raw):
            named[table] += 1
        for fmt, rows, size in executed_scans(e["nodes"], e.get("edges", [])):
            scans[fmt] += 1
            rows_read[fmt] += int(rows)
            bytes_read += size
    return {
        "shuffle_mib": round(sum(s["shuffleWriteBytes"] for s in done) / MIB, 1),
        "spill_mib": round(sum(s["diskBytesSpilled"] for s in done) / MIB, 1),
        "memory_spill_mib": round(sum(s["memoryBytesSpilled"] for s in done) / MIB, 1),
        "task_s": round(sum(s["executorRunTime"] for s in done) / 1000, 1),
        "spark_stages": len(done),
        "sql_queries": len(queries),
        "delta_log_queries": len(executions) - len(queries),
        "exchanges": nodes["Exchange"],
        "broadcasts": nodes["BroadcastExchange"],
        "windows": sum(v for k, v in nodes.items() if k.startswith("Window")),
        "sorts": nodes["Sort"],
        "cached_scans": nodes["InMemoryTableScan"],
        "file_scans": dict(sorted(scans.items())),
        "rows_read": dict(sorted(rows_read.items())),
        "read_mib": round(bytes_read / MIB, 1),
        "tables_in_plans": dict(sorted(named.items())),
        "_executions": executions,
    }


def delta_commits(lake: str) -> dict[str, set[str]]:
    """Every table's commit files so far."""
    root = Path(lake)
    if not root.is_dir():
        return {}
    return {
        log.parent.name: {p.name for p in log.glob("*.json")}
        for log in root.glob("*/_delta_log")
        if log.is_dir()
    }


def written_files(lake: str, before: dict[str, set[str]]) -> dict[str, dict[str, float]]:
    """Per table, the data files (and MiB) the commits after ``before`` added."""
    written: dict[str, dict[str, float]] = {}
    for table, commits in delta_commits(lake).items():
        for name in sorted(commits - before.get(table, set())):
            for line in (Path(lake) / table / "_delta_log" / name).read_text().splitlines():
                add = json.loads(line).get("add")
                if add is not None:
                    entry = written.setdefault(table, {"files": 0, "mib": 0.0})
                    entry["files"] += 1
                    entry["mib"] += add["size"] / MIB
    return {t: {"files": int(v["files"]), "mib": round(v["mib"], 2)} for t, v in sorted(written.items())}


def jvm_rss(me: psutil.Process) -> int:
    """Resident bytes of the JVMs under this process (the Spark driver, executors in local mode)."""
    total = 0
    for child in me.children(recursive=True):
        try:
            if "java" in child.name():
                total += child.memory_info().rss
        except psutil.NoSuchProcess:  # a Python worker that ended meanwhile
            continue
    return total


class SizeRun:
    """Times the stages of one size: each with its peak memory and what Spark did."""

    def __init__(self, spark, events: int, lake: str, raw: Path, verbose: bool, plans: Path | None) -> None:
        self.spark, self.events, self.lake, self.raw = spark, events, lake, str(raw)
        self.verbose, self.plans = verbose, plans
        self.rows: dict[str, dict[str, Any]] = {}

    def progress(self, stage: str) -> Callable[[str], None]:
        """The library's own progress lines for a stage (``--quiet``: none)."""
        if not self.verbose:
            return lambda _: None
        start = time.monotonic()
        return lambda line: say(f"[{self.events:,} {stage} {time.monotonic() - start:6.1f}s] {line}")

    @contextmanager
    def stage(self, name: str) -> Iterator[dict[str, Any]]:
        marks = spark_marks(self.spark)
        commits = delta_commits(self.lake)
        row: dict[str, Any] = {"stage": name, "kind": KIND[name], "events": self.events}
        me = psutil.Process()  # what the stage starts from: peaks include what earlier stages left
        row["start_python_mib"] = round(me.memory_info().rss / MIB)
        row["start_jvm_mib"] = round(jvm_rss(me) / MIB)
        with PeakMemory() as memory:
            started = time.monotonic()
            yield row
            seconds = time.monotonic() - started
        row.update(
            seconds=round(seconds, 2),
            events_per_s=round(self.events / seconds),
            peak_jvm_mib=round(memory.peak_driver / MIB),
            peak_python_mib=round(memory.peak_python / MIB),
        )
        row["load_1m"] = round(os.getloadavg()[0], 2)  # others' work on the machine shows here
        profile = plan_profile(self.spark, marks, self.lake, self.raw)
        executions = profile.pop("_executions")
        row.update(profile)
        if self.plans is not None:  # every query's executed plan, for reading by hand
            self.plans.mkdir(parents=True, exist_ok=True)
            (self.plans / f"{name.replace(' ', '_')}.json").write_text(json.dumps(executions, indent=1))
        row["busy_cores"] = round(row["task_s"] / seconds, 2)
        row["files_written"] = written_files(self.lake, commits)
        self.rows[name] = row
        files = sum(v["files"] for v in row["files_written"].values())
        say(
            f"[pipeline {self.events:,}] {name}: {seconds:.1f} s, {row['events_per_s']:,} events/s, "
            f"JVM {row['peak_jvm_mib']:,} MiB, Python {row['peak_python_mib']:,} MiB, "
            f"shuffle {row['shuffle_mib']:,} MiB, spill {row['spill_mib']:,} MiB, busy cores {row['busy_cores']}; "
            f"{row['sql_queries']} queries, {row['exchanges']} Exchange, {row['windows']} Window, "
            f"{files} files written; load {row['load_1m']}"
        )

    @contextmanager
    def reference(self, name: str) -> Iterator[dict[str, Any]]:
        """A DuckDB reference of stage ``name``, timed the same way (Python RSS is DuckDB's)."""
        found: dict[str, Any] = {}
        with PeakMemory() as memory:
            started = time.monotonic()
            yield found
            seconds = time.monotonic() - started
        row = self.rows[name]
        row.update(
            duckdb_s=round(seconds, 2),
            duckdb_peak_python_mib=round(memory.peak_python / MIB),
            ratio=round(row["seconds"] / seconds, 2),
        )
        say(
            f"[pipeline {self.events:,}] {name} in DuckDB: {seconds:.1f} s (Spark/DuckDB {row['ratio']}), "
            f"Python {row['duckdb_peak_python_mib']:,} MiB; {found.get('check', '')}"
        )


# --- one size, in its own process ------------------------------------------------------------


def prepare_raw(work: Path, events: int, seed: int) -> tuple[Path, float | None]:
    """The generated release of one size (reused when a finished one is there) and the seconds
    its generation took now (None when reused)."""
    from intent_spark.generate import generate_release

    raw, marker = work / "raw", work / "raw.json"
    if raw.is_dir() and marker.is_file() and json.loads(marker.read_text()).get("seed") == seed:
        return raw, None
    shutil.rmtree(raw, ignore_errors=True)
    say(f"[pipeline {events:,}] generating the release in {raw}")
    started = time.monotonic()
    release = generate_release(DATASET, raw, events, seed=seed, dirty=True)
    seconds = time.monotonic() - started
    marker.write_text(json.dumps({"seed": seed, "dirty": True, "rows": release.event_rows}))
    return raw, seconds


def warm_up(spark, folder: Path) -> None:
    """The JVM's first jobs and Delta's classes paid before anything is timed."""
    path = str(folder)
    spark.range(10_000).selectExpr("id", "id % 7 AS k").write.format("delta").mode("overwrite").save(path)
    spark.read.format("delta").load(path).groupBy("k").count().collect()
    shutil.rmtree(folder, ignore_errors=True)


def duckdb_split_files(files: list[str], conf, threads: int | None, temp: Path):
    """``duckdb_split.split_events`` over the events table's own Parquet files."""
    from duckdb_split import connect, split_events

    con = connect(threads)
    try:
        con.execute(f"SET temp_directory = '{temp}'")  # not .tmp in the working directory
        listed = ", ".join("'" + f.replace("'", "''") + "'" for f in files)
        con.execute(
            f"""CREATE OR REPLACE TEMP VIEW events AS
            SELECT user_id, item_id, CAST(ts AS TIMESTAMP) AS ts, seq FROM read_parquet([{listed}])"""
        )
        return split_events(con, dataset=DATASET, conf=conf)
    finally:
        con.close()


def local_paths(urls: list[str]) -> list[str]:
    return [re.sub(r"^file:(//)?", "", u) for u in urls]


def kernel_rate(n_items: int, n_trained: int, users: int) -> dict[str, Any]:
    """The bare scoring kernel's targets/s at this catalogue size (``model_bench``'s measure:
    synthetic 200-event histories, 20 targets each, no Spark, no Petastorm)."""
    import model_bench
    import torch

    from intent_spark.plugin import pick_device
    from models.sasrec import SASRec

    device = pick_device()
    torch.manual_seed(0)
    model = SASRec(n_items, n_trained, model_bench.CONF).to(device)
    blocks = model_bench.user_blocks(n_items, users, history=200, targets=20, seed=0)
    rate, _ = model_bench.time_scoring(model, blocks, device)
    return {
        "kernel_targets_per_s": round(rate, 1),
        "kernel_targets": users * 20,
        "device": device.type,
        "torch_threads": torch.get_num_threads(),
    }


def sasrec_scoring(bench: SizeRun, test, kernel_before: dict[str, Any], users: int) -> dict[str, Any]:
    """sasrec's targets/s through Petastorm (``rank_split``'s own measure, logged to MLflow:
    reading the user blocks and ranking them, both splits) against the bare kernel's at the test
    split's catalogue size, measured just before the stage and again now (their mean)."""
    measured = bench.rows["score sasrec"]["mlflow"]
    targets = sum(measured.get(f"score.{s}.targets", 0.0) for s in ("test", "val"))
    seconds = sum(
        measured[f"score.{s}.targets"] / measured[f"score.{s}.targets_per_second"]
        for s in ("test", "val")
        if measured.get(f"score.{s}.targets_per_second")
    )
    kernel_after = kernel_rate(test.n_items, test.n_trained, users)
    kernel = (kernel_before["kernel_targets_per_s"] + kernel_after["kernel_targets_per_s"]) / 2
    scoring = {
        "n_items": test.n_items,
        "n_trained": test.n_trained,
        "targets": int(targets),
        "petastorm_targets_per_s": round(targets / seconds, 1) if seconds else None,
        "stage_targets_per_s": round(targets / bench.rows["score sasrec"]["seconds"], 1),
        **kernel_after,
        "kernel_targets_per_s": round(kernel, 1),
        "kernel_before_after": [kernel_before["kernel_targets_per_s"], kernel_after["kernel_targets_per_s"]],
    }
    scoring["fraction_of_kernel"] = round(targets / seconds / kernel, 3) if seconds else None
    say(
        f"[pipeline {bench.events:,}] sasrec scoring: {scoring['petastorm_targets_per_s']} targets/s through "
        f"Petastorm, bare kernel {scoring['kernel_before_after']} at {test.n_items:,} items "
        f"({scoring['fraction_of_kernel']} of their mean)"
    )
    return scoring


def sampled_scoring(spark, lake: str, model: str, conf, uri: str, sample: int, progress) -> dict[str, float]:
    """A neural model's scoring on a fixed sample of the test split's users (every k-th user
    block, so about ``sample`` targets), by the stage's own loader and ranker (exact rank rule,
    full catalogue): its targets/s, and the seconds all targets would take at that pace."""
    import tempfile

    from pyspark.sql import functions as F

    from intent_spark.core import schema as S
    from intent_spark.lake.tables import read_table
    from intent_spark.lake.tracking import download_artifacts, find_run
    from intent_spark.plugin import pick_device
    from intent_spark.train.build import load_model, split_catalogue
    from intent_spark.train.readers import split_files, user_blocks
    from intent_spark.train.registry import resolve
    from intent_spark.train.workers import rank_split

    counts = read_table(spark, lake, S.SPLIT_COUNTS, DATASET).where(F.col(S.SPLIT) == S.TEST)
    total = int(counts.agg(F.sum("n_targets")).first()[0])  # a row per cell
    every = max(1, math.ceil(total / sample))
    cls, device = resolve(model), pick_device()
    run = find_run(uri, DATASET, cls.name)
    with tempfile.TemporaryDirectory() as tmp:
        folder = download_artifacts(uri, run.info.run_id, "model", tmp)
        fitted = load_model(
            cls, folder / S.TEST, split_catalogue(Lake(spark, lake), DATASET, S.TEST), conf, device
        )
        urls = split_files(Lake(spark, lake), S.SCORE_EVENTS, DATASET, S.TEST)
        blocks = (block for i, block in enumerate(user_blocks(urls)) if i % every == 0)
        seconds, written = rank_split(
            fitted, blocks, conf, device, f"{tmp}/sample.parquet", None, progress, where=f"{DATASET} {model}"
        )
    rate = written / seconds if seconds else 0.0
    return {
        "score.test.targets": float(written),
        "score.test.targets_per_second": rate,
        "score.test.all_targets": float(total),
        "score.test.every_kth_user": float(every),
        "score.test.extrapolated_seconds": total / rate if rate else float("nan"),
    }


def run_metrics(uri: str, model: str) -> dict[str, float]:
    from mlflow import MlflowClient

    from intent_spark.lake.tracking import find_run

    return dict(MlflowClient(uri).get_run(find_run(uri, DATASET, model).info.run_id).data.metrics)


def run_size(args: argparse.Namespace, events: int) -> dict[str, Any]:
    """Every stage of one size and its references; raises at the first disagreement."""
    from duckdb_evaluate import compare_metrics, ranks_files, run_duckdb_evaluate, spark_metrics
    from duckdb_ingest import compare_ingest, run_duckdb_ingest, spark_ingest_counts
    from duckdb_split import compare_summaries, spark_split_summary, summarize
    from pyspark.sql import functions as F

    from intent_spark.core import schema as S
    from intent_spark.core.conf import CONF_DIR
    from intent_spark.core.sources import load_source
    from intent_spark.evaluate.metrics import evaluate
    from intent_spark.ingest import ingest_source
    from intent_spark.lake.session import build_session, spark_settings
    from intent_spark.lake.tables import ingested_source, read_table
    from intent_spark.lake.tracking import default_tracking_uri
    from intent_spark.split.conf import load_split_conf
    from intent_spark.split.split_tables import run_split
    from intent_spark.train.inputs import build_model_inputs

    work = Path(args.workdir).resolve() / str(events)
    work.mkdir(parents=True, exist_ok=True)
    raw, generate_s = prepare_raw(work, events, args.seed)
    run_dir = work / "run"  # the lake, its MLflow store and the DuckDB outputs: fresh every run
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir()
    lake, duck = str(run_dir / "lake"), run_dir / "duckdb"
    settings = {
        "spark.driver.memory": args.driver_memory,
        "spark.ui.enabled": "true",
        "spark.ui.retainedJobs": "100000",
        "spark.ui.retainedStages": "100000",
        "spark.sql.ui.retainedExecutions": "100000",
        **spark_settings(None, args.spark_conf or []),
    }
    spark = build_session("intent-pipeline-bench", settings)
    warm_up(spark, run_dir / "warm-up")
    uri = default_tracking_uri(lake)
    source = load_source(DATASET)
    bench = SizeRun(
        spark, events, lake, raw, verbose=not args.quiet, plans=work / "plans" if args.dump_plans else None
    )
    checks: dict[str, Any] = {}

    with bench.stage("ingest") as row:
        summary = ingest_source(Lake(spark, lake, progress=bench.progress("ingest")), source, str(raw))
        row["output_rows"] = summary.events
    with bench.reference("ingest") as found:
        ingested = run_duckdb_ingest(raw, duck / "ingest", source, threads=args.duckdb_threads)
        found["check"] = f"{ingested.events:,} events, {ingested.rejects:,} rejects, {ingested.items:,} items"
    differences = compare_ingest(ingested, spark_ingest_counts(spark, lake, DATASET))
    if differences:
        raise SystemExit(f"{events:,} events: ingest: Spark and DuckDB disagree: {differences}")
    checks["ingest"] = {
        "equal": True,
        "events": ingested.events,
        "rejects": ingested.rejects,
        "items": ingested.items,
        "event_types": ingested.event_types,
        "reasons": ingested.reasons,
    }

    from intent_spark.report.split import split_report_writer

    split_conf = load_split_conf(
        CONF_DIR / "split.yaml", DATASET, {}, source=ingested_source(spark, lake, DATASET)
    )
    with bench.stage("split") as row:
        split_lake = Lake(spark, lake, progress=bench.progress("split"))
        run_split(split_lake, DATASET, split_conf, report=split_report_writer(split_lake, DATASET))
    event_files = local_paths(read_table(spark, lake, S.EVENTS, DATASET).inputFiles())
    with bench.reference("split") as found:
        splits = duckdb_split_files(event_files, split_conf, args.duckdb_threads, duck / "split-tmp")
        found["check"] = ", ".join(f"{s.name} cutoff {s.choice.cutoff:%Y-%m-%d}" for s in splits)
    stored = spark_split_summary(spark, lake, DATASET)
    differences = compare_summaries(summarize(splits), stored)
    if differences:
        raise SystemExit(f"{events:,} events: split: Spark and DuckDB disagree: {differences}")
    checks["split"] = {"equal": True, "splits": stored}

    # torch comes in with the models (about 470 MiB of Python RSS): after the stages that need none.
    from intent_spark.train.build import split_catalogue
    from intent_spark.train.conf import load_models_conf, with_steps
    from intent_spark.train.fit import train
    from intent_spark.train.score import score

    overrides = {"sasrec": {"batch_size": args.train_batch}}
    models = with_steps(load_models_conf(None, overrides, "pipeline_bench"), args.train_steps)
    with bench.stage("model inputs") as row:
        build_model_inputs(
            Lake(spark, lake, progress=bench.progress("model inputs")),
            DATASET,
            context=models.context,
            max_tokens=models.max_tokens,
            force=True,
        )
    catalogues = {split: split_catalogue(Lake(spark, lake), DATASET, split) for split in ("test", "val")}
    test = catalogues["test"]
    kernel_before = None
    for verb, run_stage, names in (
        ("train", train, ("sasrec", "popularity")),
        ("score", score, ("popularity", "repeat_last", "sasrec")),
    ):
        for model in [m for m in names if m in args.models]:
            # the bare kernel just before and just after sasrec's scoring: this machine's speed drifts
            if (verb, model) == ("score", "sasrec"):
                kernel_before = kernel_rate(test.n_items, test.n_trained, args.kernel_users)
            if (verb, model) == ("score", "sasrec") and args.neural_targets:
                with bench.stage(f"{verb} {model}") as row:
                    row["mlflow"] = sampled_scoring(
                        spark, lake, model, models, uri, args.neural_targets, bench.progress("score sasrec")
                    )
                    row["output_rows"] = int(row["mlflow"]["score.test.targets"])
                continue
            with bench.stage(f"{verb} {model}") as row:
                written = run_stage(
                    Lake(spark, lake, uri, progress=bench.progress(f"{verb} {model}")), DATASET, model, models
                )
                if verb == "score":
                    row["output_rows"] = written
            row["mlflow"] = {k: v for k, v in run_metrics(uri, model).items() if k.startswith(f"{verb}.")}
    scoring = sasrec_scoring(bench, test, kernel_before, args.kernel_users) if kernel_before else None

    floor = load_split_conf(CONF_DIR / "split.yaml", DATASET).floor_users
    with bench.stage("evaluate") as row:
        row["output_rows"] = evaluate(
            Lake(spark, lake, uri, progress=bench.progress("evaluate")), DATASET, floor_users=floor
        )
    files = local_paths(ranks_files(spark, lake, DATASET))
    with bench.reference("evaluate") as found:
        cells, _ = run_duckdb_evaluate(files, duck / "evaluate", threads=args.duckdb_threads)
        found["check"] = f"{len(cells):,} cell metrics"
    compared = compare_metrics(cells, spark_metrics(spark, lake, DATASET))
    if compared.differences:
        raise SystemExit(f"{events:,} events: evaluate: Spark and DuckDB disagree: {compared.differences}")
    checks["evaluate"] = {
        "equal": True,
        "rows": compared.rows,
        "max_abs_diff": compared.max_abs_diff,
        "max_ci_abs_diff": compared.max_ci_abs_diff,
    }
    say(
        f"[pipeline {events:,}] evaluate: {compared.rows} cell metrics equal, largest difference "
        f"{compared.max_abs_diff:.2e} (intervals {compared.max_ci_abs_diff:.2e})"
    )
    users = read_table(spark, lake, S.HOLDOUT, DATASET).where(F.col(S.SPLIT) == S.TEST).count()
    raw_bytes = sum(f.stat().st_size for f in raw.rglob("*") if f.is_file())
    return {
        "events": events,
        "raw_mib": round(raw_bytes / MIB, 1),
        "generate_s": None if generate_s is None else round(generate_s, 1),
        "users": users,
        "items": {split: c.n_items for split, c in catalogues.items()},
        "trained_items": {split: c.n_trained for split, c in catalogues.items()},
        "targets": {
            split: sum(c["n_targets"] for c in outcome["cells"].values()) for split, outcome in stored.items()
        },
        "shuffle_partitions": spark.conf.get("spark.sql.shuffle.partitions"),
        "rows": [bench.rows[name] for name, _, _ in STAGES if name in bench.rows],
        "checks": checks,
        "scoring": scoring,
    }


# --- the run: every size, then the tables, the figure and the extrapolation ------------------


def exponent(smaller: tuple[int, float], larger: tuple[int, float]) -> float:
    return math.log(larger[1] / smaller[1]) / math.log(larger[0] / smaller[0])


def with_exponents(rows: list[dict[str, Any]]) -> None:
    """Each row's exponent from the same stage at the size before (Spark's, and DuckDB's)."""
    by_stage: dict[str, list[dict[str, Any]]] = {}
    for row in sorted(rows, key=lambda r: r["events"]):
        by_stage.setdefault(row["stage"], []).append(row)
    for stage_rows in by_stage.values():
        for smaller, larger in zip(stage_rows, stage_rows[1:], strict=False):
            larger["exponent"] = round(
                exponent((smaller["events"], smaller["seconds"]), (larger["events"], larger["seconds"])), 3
            )
            if "duckdb_s" in smaller and "duckdb_s" in larger:
                larger["duckdb_exponent"] = round(
                    exponent(
                        (smaller["events"], smaller["duckdb_s"]), (larger["events"], larger["duckdb_s"])
                    ),
                    3,
                )


def goals(rows: list[dict[str, Any]], scoring: list[dict[str, Any]]) -> dict[str, Any]:
    """The goals as measured: each data stage's exponent from the second size to the last
    (5M to 50M) at most 1.1 at flat driver memory (the Python driver's peak grows at most 25%),
    within 2x of DuckDB at the largest size, and scoring through Petastorm at least 80% of the
    bare kernel's targets/s there."""
    sizes = sorted({r["events"] for r in rows})
    if len(sizes) < 2:
        return {}
    start, end = (sizes[1] if len(sizes) >= 3 else sizes[0]), sizes[-1]
    at = {(r["stage"], r["events"]): r for r in rows}
    verdicts: dict[str, Any] = {"span": [start, end], "stages": {}}
    for name, kind, has_reference in STAGES:
        first, last = at.get((name, start)), at.get((name, end))
        if first is None or last is None:
            continue
        entry: dict[str, Any] = {
            "exponent": round(exponent((start, first["seconds"]), (end, last["seconds"])), 3),
            "python_growth": round(last["peak_python_mib"] / first["peak_python_mib"], 2),
            "jvm_mib": [first["peak_jvm_mib"], last["peak_jvm_mib"]],
        }
        if kind == "data":
            entry["exponent_ok"] = entry["exponent"] <= 1.1 and entry["python_growth"] <= 1.25
        if has_reference:
            entry["ratio"] = last.get("ratio")
            entry["ratio_ok"] = last.get("ratio") is not None and last["ratio"] <= 2.0
        verdicts["stages"][name] = entry
    largest = next((s for s in scoring if s["events"] == end), None)
    if largest and largest.get("fraction_of_kernel") is not None:
        verdicts["scoring"] = {
            "fraction_of_kernel": largest["fraction_of_kernel"],
            "ok": largest["fraction_of_kernel"] >= 0.8,
        }
    return verdicts


def extrapolate(
    rows: list[dict[str, Any]],
    measured_cores: int,
    *,
    target_events: int = REES46_EVENTS,
    cluster_cores: int = 16,
    efficiency: float = 0.7,
) -> dict[str, Any]:
    """Each stage's time at ``target_events`` from its exponent between the two largest sizes,
    then spread over ``cluster_cores``: ideally (every stage, perfect scaling over cores) and
    conservatively (data stages at ``efficiency``; data and scoring stages no better than linear
    in the events; training and scoring, which run torch in one driver process, not spread)."""
    sizes = sorted({r["events"] for r in rows})
    if len(sizes) < 2:
        return {}
    smaller, larger = sizes[-2], sizes[-1]
    at = {(r["stage"], r["events"]): r for r in rows}
    speedup = cluster_cores / measured_cores
    growth = target_events / larger
    stages, ideal_total, conservative_total = {}, 0.0, 0.0
    for name, kind, _ in STAGES:
        a, b = at.get((name, smaller)), at.get((name, larger))
        if a is None or b is None:
            continue
        e = exponent((smaller, a["seconds"]), (larger, b["seconds"]))
        local = b["seconds"] * growth ** max(e, 0.0)  # no stage gets faster with more events
        floor = 0.0 if name.startswith("train") else 1.0  # a fixed number of steps; else per event
        at_least_linear = b["seconds"] * growth ** max(e, floor)
        spread = speedup * efficiency if kind == "data" else 1.0  # torch in one driver process: not spread
        conservative = at_least_linear / spread
        stages[name] = {
            "exponent": round(e, 3),
            f"seconds_{measured_cores}_cores": round(local, 1),
            "ideal_s": round(local / speedup, 1),
            "conservative_s": round(conservative, 1),
        }
        ideal_total += local / speedup
        conservative_total += conservative
    return {
        "target_events": target_events,
        "from_sizes": [smaller, larger],
        "cluster_cores": cluster_cores,
        "measured_cores": measured_cores,
        "stages": stages,
        "ideal_total_min": round(ideal_total / 60, 1),
        "conservative_total_min": round(conservative_total / 60, 1),
        "assumptions": [
            f"each stage's time grows from the {larger:,}-event size as (events ratio)^exponent, the exponent "
            f"measured between {smaller:,} and {larger:,} events on this machine (floored at 0: no stage gets "
            "faster with more events)",
            f"ideal: every stage spread over {cluster_cores} cores as fast as these {measured_cores}, perfectly "
            f"({speedup:g}x); scoring needs `--processes` (TorchDistributor) for that",
            f"conservative: data stages at {efficiency:.0%} parallel efficiency; data and scoring stages no better "
            "than linear in the events (exponent floored at 1.0: targets grow with the events); training and "
            "scoring in one driver process as measured, not spread",
            "training is a fixed number of steps (the benchmark's, not SPEC 4's 20,000), so it grows with the "
            "events only through the catalogue",
            "shuffle over the network no slower than local disk here; heap per core at least as here; "
            "shuffle partitions raised to 2-3 per core; no skew beyond the generated data's",
        ],
    }


def plot(result: dict[str, Any], path: Path) -> Path:
    """Seconds against events per stage on log axes (slope 1 is linear), DuckDB dashed."""
    from intent_spark.lake.figures import pyplot, save_figure

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(12, 6.5))
    colours = plt.get_cmap("tab10")
    rows = result["rows"]
    sizes = sorted({r["events"] for r in rows})
    for i, (name, _, has_reference) in enumerate(STAGES):
        mine = sorted((r for r in rows if r["stage"] == name), key=lambda r: r["events"])
        if not mine:
            continue
        colour = colours(i % 10)
        ax.plot(
            [r["events"] for r in mine], [r["seconds"] for r in mine], marker="o", color=colour, label=name
        )
        if has_reference:
            ax.plot(
                [r["events"] for r in mine if "duckdb_s" in r],
                [r["duckdb_s"] for r in mine if "duckdb_s" in r],
                marker="s",
                linestyle="--",
                color=colour,
                label=f"{name} (DuckDB)",
            )
    slowest = max((r for r in rows if r["events"] == sizes[0]), key=lambda r: r["seconds"])
    ax.plot(
        sizes,
        [slowest["seconds"] * s / sizes[0] for s in sizes],
        linestyle=":",
        color="grey",
        label="linear from the slowest stage",
    )
    ax.set(xscale="log", yscale="log", xlabel="events", ylabel="seconds (one run)")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # beside the lines, not on them
    ax.grid(True, which="both", linewidth=0.3)
    fig.suptitle(
        f"Pipeline stage by stage: Spark (solid) and DuckDB (dashed), {result['cores']} cores, "
        f"{result['memory_gib']} GiB"
    )
    return save_figure(fig, path, "pipeline scaling")


def _mib(value: Any) -> str:
    return "-" if value is None else f"{value:,}"


def markdown(result: dict[str, Any]) -> str:
    """The tables of one run: stages x sizes, plans and writes, goals, scoring, extrapolation."""
    rows = sorted(result["rows"], key=lambda r: ([s for s, _, _ in STAGES].index(r["stage"]), r["events"]))
    lines = [
        f"Pipeline stage by stage, {result['cores']} cores, {result['memory_gib']} GiB, driver heap "
        f"{result['settings']['driver_memory']}, {result['shuffle_partitions']} shuffle partitions, "
        f"sasrec {result['settings']['train_steps']} steps of {result['settings']['train_batch']}; {result['date']}.",
        *(
            [f"Sizes {', '.join(f'{e:,}' for e in result['resumed'])} reused from an earlier run (--resume)."]
            if result.get("resumed")
            else []
        ),
        *([f"The run stopped early: {result['failed']}."] if result.get("failed") else []),
        "",
        "| stage | events | seconds | events/s | exponent | peak JVM MiB | peak Python MiB | shuffle MiB | spill MiB "
        "| DuckDB s | Spark/DuckDB |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['stage']} | {r['events']:,} | {r['seconds']:,} | {r['events_per_s']:,} | {r.get('exponent', '-')} "
            f"| {r['peak_jvm_mib']:,} | {r['peak_python_mib']:,} | {_mib(r['shuffle_mib'])} | {_mib(r['spill_mib'])} "
            f"| {r.get('duckdb_s', '-')} | {r.get('ratio', '-')} |"
        )
    total: dict[int, float] = {}
    for r in rows:
        total[r["events"]] = total.get(r["events"], 0.0) + r["seconds"]
    lines += [
        "",
        "All stages (Spark): "
        + ", ".join(f"{e:,} events {s:,.0f} s" for e, s in sorted(total.items()))
        + f"; the whole run took {result['wall_s']:,.0f} s with the references and checks.",
        "",
        "| events | raw MiB | users | items, test (trained) | targets, test + val | generated in |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for size in result["sizes"]:
        targets = size.get("targets", {})
        generated = "reused" if size["generate_s"] is None else f"{size['generate_s']} s"
        lines.append(
            f"| {size['events']:,} | {size['raw_mib']:,} | {size['users']:,} | {size['items']['test']:,} "
            f"({size['trained_items']['test']:,}) | {targets.get('test', 0):,} + {targets.get('val', 0):,} "
            f"| {generated} |"
        )
    lines += [
        "",
        "Plans and writes (queries exclude Delta's own log queries, counted after the +; busy cores are task "
        "seconds over wall seconds; load is the machine's 1-minute load average at the stage's end; Parquet scans that ran, with the rows they read over the events in brackets; "
        "files each table's commits added, MiB in brackets):",
        "",
        "| stage | events | queries | Exchange | Window | Sort | busy cores | load | Parquet scans (rows / events) "
        "| files written (MiB) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for r in rows:
        read = r["rows_read"].get("parquet", 0) / r["events"]
        scans = f"{r['file_scans'].get('parquet', 0)} ({read:.1f}x)"
        if r["rows_read"].get("text"):
            scans += f", raw text {r['file_scans']['text']} ({r['rows_read']['text'] / r['events']:.1f}x)"
        files = ", ".join(f"{t} {v['files']} ({v['mib']})" for t, v in r["files_written"].items()) or "-"
        lines.append(
            f"| {r['stage']} | {r['events']:,} | {r['sql_queries']}+{r['delta_log_queries']} | {r['exchanges']} "
            f"| {r['windows']} | {r['sorts']} | {r['busy_cores']} | {r['load_1m']} | {scans} | {files} |"
        )
    if result["scoring"]:
        lines += [
            "",
            "sasrec scoring, targets/s: through Petastorm (`rank_split`'s measure: reading the user blocks and "
            "ranking them) against the bare kernel (`model_bench.time_scoring`, measured just before and just "
            "after the stage) at the test split's catalogue size:",
            "",
            "| events | items (trained) | targets | Petastorm | whole stage | kernel before, after | fraction of kernel |",
            "|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for x in result["scoring"]:
            before, after = x["kernel_before_after"]
            lines.append(
                f"| {x['events']:,} | {x['n_items']:,} ({x['n_trained']:,}) | {x['targets']:,} "
                f"| {x['petastorm_targets_per_s']} | {x['stage_targets_per_s']} | {before}, {after} "
                f"| {x['fraction_of_kernel']} |"
            )
    checks = result["checks"]
    lines += [
        "",
        "Checks (every size): "
        + "; ".join(
            f"{int(e):,}: ingest {c['ingest']['events']:,} events, {c['ingest']['rejects']} rejects equal; split cutoffs "
            f"and cells equal; evaluate {c['evaluate']['rows']} cell metrics, max diff {c['evaluate']['max_abs_diff']:.1e}"
            for e, c in sorted(checks.items(), key=lambda kv: int(kv[0]))
        ),
    ]
    g = result.get("goals") or {}
    if g:
        start, end = g["span"]
        lines += ["", f"Goals, {start:,} to {end:,} events:", ""]
        lines.append(
            "| stage | exponent | Python growth | JVM MiB | exponent goal | Spark/DuckDB | ratio goal |"
        )
        lines.append("|---|---:|---:|---|---|---:|---|")
        for name, v in g["stages"].items():
            ok = {True: "met", False: "**missed**", None: "-"}
            lines.append(
                f"| {name} | {v['exponent']} | {v['python_growth']} | {v['jvm_mib'][0]:,} -> {v['jvm_mib'][1]:,} "
                f"| {ok[v.get('exponent_ok')]} | {v.get('ratio', '-')} | {ok[v.get('ratio_ok')]} |"
            )
        if "scoring" in g:
            lines.append(
                f"\nScoring through Petastorm at {end:,}: {g['scoring']['fraction_of_kernel']} of the bare kernel "
                f"({'met' if g['scoring']['ok'] else '**missed**'}; goal 0.8)."
            )
    x = result.get("extrapolation") or {}
    if x:
        lines += [
            "",
            f"Extrapolation to {x['target_events']:,} events on {x['cluster_cores']} cores (from "
            f"{x['from_sizes'][0]:,} and {x['from_sizes'][1]:,} events): ideal **{x['ideal_total_min']} min**, "
            f"conservative **{x['conservative_total_min']} min**.",
            "",
            f"| stage | exponent | s on {x['measured_cores']} cores | ideal s | conservative s |",
            "|---|---:|---:|---:|---:|",
        ]
        local = f"seconds_{x['measured_cores']}_cores"
        for name, v in x["stages"].items():
            lines.append(
                f"| {name} | {v['exponent']} | {v[local]:,} | {v['ideal_s']:,} | {v['conservative_s']:,} |"
            )
        lines += ["", "Assumptions:", *[f"- {a}" for a in x["assumptions"]]]
    return "\n".join(lines) + "\n"


def child_argv(args: argparse.Namespace, events: int, out: Path) -> list[str]:
    argv = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--one-size",
        str(events),
        "--child-out",
        str(out),
        "--workdir",
        args.workdir,
        "--seed",
        str(args.seed),
        "--driver-memory",
        args.driver_memory,
        "--train-steps",
        str(args.train_steps),
        "--train-batch",
        str(args.train_batch),
        "--kernel-users",
        str(args.kernel_users),
        "--neural-targets",
        str(args.neural_targets),
        "--models",
        *args.models,
    ]
    if args.duckdb_threads is not None:
        argv += ["--duckdb-threads", str(args.duckdb_threads)]
    for pair in args.spark_conf or []:
        argv += ["--spark-conf", pair]
    if args.quiet:
        argv.append("--quiet")
    if args.dump_plans:
        argv.append("--dump-plans")
    return argv


# Measured on generated REES46 releases: 127.5 MiB of raw files per 1M events; a size's lake,
# staging and Spark's shuffle files together stayed under 1.5x that.
RAW_BYTES_PER_EVENT = 134
RUN_BYTES_PER_EVENT = 200
PYTHON_BYTES = 2 * 2**30  # the driver's Python with torch, beside the JVM's heap


def resources_short(sizes: list[int], workdir: Path, driver_memory: str) -> str | None:
    """What the run needs that this machine lacks, in one line, or None: the releases of every
    size are kept, one size's lake at a time; the JVM's heap and the Python driver in memory."""
    missing = []
    existing = workdir
    while not existing.exists():
        existing = existing.parent
    kept = sum(0 if (workdir / str(n) / "raw.json").is_file() else n * RAW_BYTES_PER_EVENT for n in sizes)
    disk = kept + max(sizes) * RUN_BYTES_PER_EVENT
    free = shutil.disk_usage(existing).free
    if disk > free:
        missing.append(f"{disk / 2**30:.1f} GiB of disk under {workdir} ({free / 2**30:.1f} GiB free)")
    units = {"g": 2**30, "m": 2**20, "k": 2**10}
    heap = (
        int(float(driver_memory[:-1]) * units[driver_memory[-1].lower()])
        if driver_memory[-1].isalpha()
        else int(driver_memory)
    )
    memory = heap + PYTHON_BYTES
    total = psutil.virtual_memory().total
    if memory > total:
        missing.append(
            f"{memory / 2**30:.1f} GiB of memory (--driver-memory {driver_memory} plus the Python driver; {total / 2**30:.1f} GiB here)"
        )
    if not missing:
        return None
    return f"{max(sizes):,} events need " + " and ".join(missing) + "; run fewer or smaller sizes (--events)"


def settings_of(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "seed": args.seed,
        "driver_memory": args.driver_memory,
        "train_steps": args.train_steps,
        "train_batch": args.train_batch,
        "kernel_users": args.kernel_users,
        "neural_targets": args.neural_targets,
        "models": sorted(args.models),
        "duckdb_threads": args.duckdb_threads,
        "spark_conf": args.spark_conf or [],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--events", type=int, nargs="+", default=[1_000_000, 5_000_000, 20_000_000, 50_000_000]
    )
    parser.add_argument(
        "--workdir", default="/tmp/intent-pipeline", help="generated releases (kept) and lakes"
    )
    parser.add_argument("--out", default="bench/results/pipeline.json", help="JSON; .md and .png beside it")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--driver-memory", default="6g")
    parser.add_argument("--train-steps", type=int, default=200, help="sasrec steps per split")
    parser.add_argument("--train-batch", type=int, default=64, help="sasrec sequences per step")
    parser.add_argument("--kernel-users", type=int, default=200, help="synthetic users (20 targets each)")
    parser.add_argument(
        "--neural-targets",
        type=int,
        default=100_000,
        help="sasrec scored on a fixed sample of about this many test targets (0: every target)",
    )
    parser.add_argument(
        "--models",
        nargs="+",
        choices=MODELS,
        default=list(MODELS),
        help="models trained and scored (default all; sasrec's scoring dominates the run)",
    )
    parser.add_argument("--duckdb-threads", type=int, default=None, help="default: all cores")
    parser.add_argument("--spark-conf", action="append", metavar="KEY=VALUE", help="extra Spark setting")
    parser.add_argument("--quiet", action="store_true", help="only the benchmark's own line per stage")
    parser.add_argument(
        "--dump-plans",
        action="store_true",
        help="each stage's queries and executed plans to WORKDIR/N/plans/",
    )
    parser.add_argument("--keep-lakes", action="store_true", help="keep each size's lake (default: removed)")
    parser.add_argument(
        "--resume",
        action="store_true",
        help="reuse a size's result from an earlier run with the same settings",
    )
    parser.add_argument("--from-json", default=None, help="rebuild --out's tables and figure from this JSON")
    parser.add_argument("--one-size", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--child-out", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.from_json:  # the tables and figure again from an earlier run's JSON
        result = json.loads(Path(args.from_json).read_text())
        return write_report(result, Path(args.out))
    if args.one_size is not None:  # a child: one size, its result to --child-out
        result = run_size(args, args.one_size)
        result["settings"] = settings_of(args)
        Path(args.child_out).write_text(json.dumps(result, indent=2, default=str))
        return 0

    started = time.monotonic()
    sizes = sorted(args.events)
    short = resources_short(sizes, Path(args.workdir), args.driver_memory)
    if short:
        print(f"pipeline_bench: {short}", file=sys.stderr)
        return 2
    done: list[dict[str, Any]] = []
    resumed: list[int] = []
    failed = None
    for events in sizes:
        out = Path(args.workdir).resolve() / str(events) / "result.json"
        if args.resume and out.is_file():
            earlier = json.loads(out.read_text())
            if earlier.get("settings") == settings_of(args):
                say(f"[pipeline {events:,}] reusing the result of an earlier run ({out})")
                done.append(earlier)
                resumed.append(events)
                continue
        out.parent.mkdir(parents=True, exist_ok=True)
        out.unlink(missing_ok=True)
        say(f"[pipeline {events:,}] starting ({time.monotonic() - started:.0f} s into the run)")
        code = subprocess.run(child_argv(args, events, out), check=False).returncode
        if code != 0 or not out.is_file():
            failed = f"{events:,} events: the child process exited with {code}"
            say(f"[pipeline] {failed}; writing the sizes done so far")
            break
        done.append(json.loads(out.read_text()))
        if not args.keep_lakes:  # the release stays for later runs; the lake and outputs go
            shutil.rmtree(out.parent / "run", ignore_errors=True)
    if not done:
        print(f"pipeline_bench: {failed}", file=sys.stderr)
        return 1
    rows = [row for size in done for row in size["rows"]]
    with_exponents(rows)
    scoring = [{"events": size["events"], **size["scoring"]} for size in done if size.get("scoring")]
    cores = psutil.cpu_count() or 1
    result = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "cores": cores,
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "python": sys.version.split()[0],
        "shuffle_partitions": done[0]["shuffle_partitions"],
        "settings": settings_of(args),
        "sizes": [
            {k: v for k, v in size.items() if k not in ("rows", "checks", "scoring", "settings")}
            for size in done
        ],
        "resumed": resumed,
        "failed": failed,
        "wall_s": round(time.monotonic() - started, 1),
        "rows": rows,
        "checks": {str(size["events"]): size["checks"] for size in done},
        "scoring": scoring,
    }
    code = write_report(result, Path(args.out))
    return 1 if failed else code


def write_report(result: dict[str, Any], out: Path) -> int:
    """Goals and extrapolation of a run's rows, then the JSON, the tables and the figure."""
    result["goals"] = goals(result["rows"], result["scoring"])
    result["extrapolation"] = extrapolate(result["rows"], result["cores"])
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2, default=str))
    text = markdown(result)
    out.with_suffix(".md").write_text(text)
    figure = plot(result, out.with_suffix(".png"))
    print(text)
    print(f"results {out}, tables {out.with_suffix('.md')}, figure {figure}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    raise SystemExit(main())
