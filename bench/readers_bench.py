"""Both readers on the same model-input files: rows/s of a training pass and SASRec training
steps/s through each, at each size, in one run (`make bench-readers`; BENCHMARKS.md).

The files are one generated REES46 release per size taken through ingest, split and the model
inputs (the test split's ``train_sequences``, as `intent train` reads them). Our reader runs in
this environment; Petastorm runs in the `petastorm` stack's (``--petastorm-python``, by default
.venv-petastorm/bin/python, which `make setup STACK=petastorm` builds), where ours runs again, so
each comparison is also made within one environment. Measurements alternate between the readers.

    python bench/readers_bench.py --events 1000000 5000000 --out bench/results/readers.json
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BATCH, BUFFER, CONTEXT = 256, 10_000, 50  # the reference SASRec's batch, shuffling buffer and context


def say(line: str) -> None:
    print(f"[readers] {line}", file=sys.stderr, flush=True)


def model_input_files(work: Path, events: int) -> list[str]:
    """The test split's training sequences of a generated release of ``events`` events."""
    from intent_spark.core.conf import CONF_DIR
    from intent_spark.core.datasets import DatasetRef
    from intent_spark.core.sources import load_source
    from intent_spark.generate import generate_release
    from intent_spark.ingest import ingest_source
    from intent_spark.lake.context import Lake
    from intent_spark.lake.session import build_session
    from intent_spark.split.conf import load_split_conf
    from intent_spark.split.split_tables import run_split
    from intent_spark.train.inputs import build_model_inputs
    from intent_spark.train.readers import split_files

    dataset = DatasetRef("rees46")
    spark = build_session("bench-readers", {"spark.driver.memory": "6g"})
    lake = str(work / "lake")
    say(f"{events:,} events: generate, ingest, split, model inputs in {work}")
    generate_release("rees46", work / "raw", events, seed=0)
    ingest_source(Lake(spark, lake), load_source("rees46"), str(work / "raw"))
    run_split(Lake(spark, lake), dataset, load_split_conf(CONF_DIR / "split.yaml", "rees46"))
    build_model_inputs(Lake(spark, lake), dataset, context=CONTEXT, max_tokens=16)
    return split_files(Lake(spark, lake), "train_sequences", dataset, "test")


def pass_rate(urls: list[str], reader: str) -> tuple[float, int]:
    """Rows/s of one shuffled training pass, batches of ``BATCH`` through a ``BUFFER``-row buffer."""
    from intent_spark.train.readers import training_batches

    start = time.perf_counter()
    rows = sum(b.shape[0] for b in training_batches(urls, BATCH, BUFFER, seed=0, epochs=1, reader=reader))
    return rows / (time.perf_counter() - start), rows


def sasrec_rate(urls: list[str], reader: str, steps: int) -> float:
    """SASRec training steps/s (the reference settings, ``steps`` steps) fed by ``reader``."""
    from functools import partial

    import numpy as np
    import torch

    from intent_spark.plugin import Catalogue, TrainingData
    from intent_spark.train.build import build_model
    from intent_spark.train.conf import load_models_conf
    from intent_spark.train.readers import read_columns
    from intent_spark.train.registry import resolve
    from intent_spark.train.workers import open_batches

    highest = int(max(int(read_columns([url], ["items"], "arrow")["items"].max(initial=0)) for url in urls))
    catalogue = Catalogue(
        np.r_[0, np.ones(highest, dtype=np.int64)], np.zeros((highest + 1, 1), dtype=np.int64)
    )
    conf = load_models_conf(overrides={"sasrec": {"steps": steps}})
    model = build_model(resolve("sasrec"), catalogue, conf, torch.device("cpu"))
    data = TrainingData(
        partial(open_batches, urls, (0, 1), reader),
        context=conf.context,
        seed=0,
        device=torch.device("cpu"),
        progress=lambda _: None,
    )
    torch.manual_seed(0)
    start = time.perf_counter()
    model.fit(data)
    return steps / (time.perf_counter() - start)


def measure(urls: list[str], readers: list[str], repeats: int, steps: int) -> dict[str, dict[str, object]]:
    """Each reader's passes and SASRec runs, alternating reader by reader, ``repeats`` times."""
    import pyarrow
    import torch

    from intent_spark.train.readers import choose_reader

    found: dict[str, dict[str, list[float]]] = {r: {"rows_per_s": [], "steps_per_s": []} for r in readers}
    rows = 0
    torch.set_num_threads(2)
    for _ in range(repeats):
        for reader in readers:
            rate, rows = pass_rate(urls, reader)
            found[reader]["rows_per_s"].append(rate)
    for _ in range(repeats):
        for reader in readers:
            found[reader]["steps_per_s"].append(sasrec_rate(urls, reader, steps))
    env = f"pyarrow {pyarrow.__version__}, torch {torch.__version__}"
    return {
        reader: {
            "reader": choose_reader(reader),
            "environment": env,
            "rows": rows,
            "rows_per_s": round(statistics.median(values["rows_per_s"]), 1),
            "rows_per_s_all": [round(v, 1) for v in values["rows_per_s"]],
            "steps_per_s": round(statistics.median(values["steps_per_s"]), 3),
            "steps_per_s_all": [round(v, 3) for v in values["steps_per_s"]],
        }
        for reader, values in found.items()
    }


def in_petastorm_env(python: str, urls: list[str], repeats: int, steps: int) -> dict[str, dict[str, object]]:
    """The same measurement in the Petastorm stack's Python: Petastorm, then ours there too."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as listing:
        json.dump(urls, listing)
    done = subprocess.run(
        [
            python,
            __file__,
            "--measure",
            listing.name,
            "--repeats",
            str(repeats),
            "--steps",
            str(steps),
            "--readers",
            "petastorm",
            "arrow",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    if done.returncode != 0:
        raise SystemExit(f"readers bench: the Petastorm environment ({python}) failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout)


def markdown(result: dict) -> str:
    lines = [
        f"Machine: {result['machine']}; batch {BATCH}, shuffling buffer {BUFFER}, SASRec {result['steps']} steps (reference settings).",
        "",
        "| events | training rows | reader (environment) | rows/s | SASRec steps/s | rows/s, ours / Petastorm | steps/s, ours / Petastorm |",
        "|---:|---:|---|---:|---:|---:|---:|",
    ]
    for size in result["sizes"]:
        peta = size["petastorm_env"]["petastorm"]
        for name, row in (
            ("ours (newest)", size["newest"]["arrow"]),
            ("ours (petastorm stack)", size["petastorm_env"]["arrow"]),
            ("Petastorm (petastorm stack)", peta),
        ):
            ratio_rows = row["rows_per_s"] / peta["rows_per_s"]
            ratio_steps = row["steps_per_s"] / peta["steps_per_s"]
            lines.append(
                f"| {size['events']:,} | {row['rows']:,} | {name}: {row['environment']} | {row['rows_per_s']:,.0f} "
                f"| {row['steps_per_s']:.2f} | {ratio_rows:.2f} | {ratio_steps:.2f} |"
            )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, nargs="+", default=[1_000_000, 5_000_000])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--petastorm-python", default=str(ROOT / ".venv-petastorm" / "bin" / "python"))
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "readers.json"))
    parser.add_argument("--measure", help=argparse.SUPPRESS)  # a child: a JSON list of file URLs
    parser.add_argument("--readers", nargs="+", default=["arrow"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        urls = json.loads(Path(args.measure).read_text())
        print(json.dumps(measure(urls, args.readers, args.repeats, args.steps)))
        return 0
    if not Path(args.petastorm_python).exists():
        raise SystemExit(
            f"readers bench: {args.petastorm_python} not found; run `make setup STACK=petastorm` first"
        )
    sizes = []
    for events in args.events:
        work = Path(tempfile.mkdtemp(prefix=f"readers-bench-{events}-"))
        urls = model_input_files(work, events)
        from pyspark.sql import SparkSession

        active = SparkSession.getActiveSession()
        if active is not None:
            active.stop()  # nothing else on the cores while the readers are timed
        say(f"{events:,} events: {len(urls)} files; timing both readers")
        newest = measure(urls, ["arrow"], args.repeats, args.steps)
        petastorm_env = in_petastorm_env(args.petastorm_python, urls, args.repeats, args.steps)
        sizes.append({"events": events, "files": len(urls), "newest": newest, "petastorm_env": petastorm_env})
        say(json.dumps(sizes[-1]))
    result = {
        "machine": f"{platform.node()}: {platform.processor() or platform.machine()}, {__import__('os').cpu_count()} cores",
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "steps": args.steps,
        "sizes": sizes,
    }
    result["markdown"] = markdown(result)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(result["markdown"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
