"""The score stage: the trained model of each split back from MLflow, the full catalogue ranked
for every target (tie-aware, blocked), staged as Parquet and committed to ``ranks`` once."""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from intent_spark.core import schema as S
from intent_spark.core.errors import IntentError
from intent_spark.lake.readers import read_catalogue, split_files, user_blocks
from intent_spark.lake.tables import read_table, write_dataset
from intent_spark.lake.tracking import download_artifacts, find_run, log_run_metrics
from intent_spark.split.populations import SPLITS
from intent_spark.train.conf import NEURAL, ModelsConf, check_model
from intent_spark.train.fit import build_model, stamp_digest
from intent_spark.train.inputs import inputs_stamp
from models.popularity import Popularity
from models.training import pick_device


def load_model(model: str, folder: Path, arrays, conf: ModelsConf, device):
    """A trained model back from its MLflow artifact folder for one split."""
    import torch

    meta = json.loads((folder / "meta.json").read_text())
    if meta["n_items"] != arrays.n_items or meta["n_trained"] != arrays.n_trained:
        raise IntentError(
            f"{model}: trained on {meta['n_items']:,} items ({meta['n_trained']:,} trained) but the catalogue "
            f"has {arrays.n_items:,} ({arrays.n_trained:,}); train it again"
        )
    if model == "popularity":
        return Popularity(np.load(folder / "train_counts.npy"))
    fitted = build_model(model, arrays, conf)
    if model in NEURAL:
        fitted.load_state_dict(torch.load(folder / "state.pt", map_location=device))
        fitted.to(device)
    return fitted


def score(
    spark: SparkSession,
    lake: str,
    dataset: str,
    model: str,
    conf: ModelsConf,
    *,
    tracking_uri: str,
    run_id: str | None = None,
    progress: Callable[[str], None] = lambda _: None,
) -> int:
    """Rank the full catalogue for every target of the splits the run was trained on; replace the
    model's ``ranks``; return its rows."""
    check_model(model)
    stamp = stamp_digest(inputs_stamp(spark, lake, dataset, conf.context, conf.max_tokens))
    run = find_run(tracking_uri, dataset, model, run_id)
    if run.data.params.get("inputs_stamp") != stamp:
        raise IntentError(
            f"{dataset} {model}: MLflow run {run.info.run_id} was trained on another split or input settings; "
            f"run `intent train --dataset {dataset} --model {model}` again"
        )
    splits = run.data.params.get("splits", ",".join(SPLITS)).split(",")
    device = pick_device()
    staging = f"{lake.rstrip('/')}/_staging/ranks/{dataset}/{model}"
    metrics: dict[str, float] = {}
    # a row per split: how many targets each must rank
    per_split = read_table(spark, lake, S.TARGETS, dataset).groupBy(S.SPLIT).count().collect()
    targets = {r[S.SPLIT]: r["count"] for r in per_split}
    with tempfile.TemporaryDirectory() as tmp:
        folder = download_artifacts(tracking_uri, run.info.run_id, "model", tmp)
        for split in splits:
            arrays = read_catalogue(split_files(spark, lake, S.CATALOGUE, dataset, split))
            fitted = load_model(model, folder / split, arrays, conf, device)
            urls = split_files(spark, lake, S.SCORE_EVENTS, dataset, split)
            expected = targets.get(split, 0)
            seconds, written = rank_split(
                fitted,
                urls,
                conf,
                device,
                f"{staging}/{split}.parquet",
                expected,
                lambda line, split=split: progress(f"{dataset} {model} {split}: {line}"),
            )
            metrics[f"score.{split}.targets_per_second"] = written / seconds if seconds else 0.0
            metrics[f"score.{split}.targets"] = float(written)
    rows = write_ranks(spark, lake, dataset, model, staging, splits)
    log_run_metrics(tracking_uri, run.info.run_id, metrics)
    return rows


STAGED_SCHEMA = f"{S.SEQ} bigint, {S.RANK} double, {S.TIED} bigint"  # what rank_split stages


def rank_split(fitted, urls, conf, device, out_path, expected, progress) -> tuple[float, int]:
    """Rank one split's targets and stage ``seq, rank`` as Parquet; return (seconds, targets)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from intent_spark.lake.files import filesystem
    from models.scoring import rank_blocks

    settings = conf.sasrec(fitted.name) if fitted.name in NEURAL else conf.sasrec("sasrec")
    chunk = settings.score_chunk_items_gpu if device.type == "cuda" else settings.score_chunk_items
    start = time.monotonic()
    last_report = [start]

    def report(done: int) -> None:
        now = time.monotonic()
        if now - last_report[0] >= 10 or done == expected:
            rate = done / (now - start) if now > start else 0.0
            left = (expected - done) / rate if rate else float("nan")
            progress(f"{done:,}/{expected:,} targets, {rate:,.0f}/s, about {left:.0f}s left")
            last_report[0] = now

    fs, path = filesystem(out_path)
    fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
    schema = pa.schema([(S.SEQ, pa.int64()), (S.RANK, pa.float64()), (S.TIED, pa.int64())])
    written = 0
    with fs.open_output_stream(path) as sink, pq.ParquetWriter(sink, schema) as writer:
        for seqs, ranks, ties in rank_blocks(
            fitted,
            user_blocks(urls),
            context=conf.context,
            batch_size=settings.score_batch,
            chunk_items=chunk,
            device=device,
            fuse_from_items=settings.score_fuse_from_items,
            progress=report,
        ):
            writer.write_table(pa.table({S.SEQ: seqs, S.RANK: ranks, S.TIED: ties}, schema=schema))
            written += seqs.shape[0]
    if written != expected:
        raise IntentError(f"scored {written:,} targets but the split has {expected:,}")
    return time.monotonic() - start, written


def write_ranks(
    spark: SparkSession, lake: str, dataset: str, model: str, staging: str, splits: Sequence[str]
) -> int:
    """Join staged ranks to their targets (cell, user) and replace the model's ranks partition."""
    from intent_spark.lake.files import filesystem

    targets = read_table(spark, lake, S.TARGETS, dataset)
    staged = None
    for split in splits:
        part = (
            spark.read.schema(STAGED_SCHEMA)  # known: no job to infer it from the files
            .parquet(f"{staging}/{split}.parquet")
            .withColumn(S.SPLIT, F.lit(split))
        )
        staged = part if staged is None else staged.unionByName(part)
    ranks = targets.join(staged, [S.SPLIT, S.SEQ]).select(
        S.DATASET, S.SPLIT, S.CELL, F.lit(model).alias(S.MODEL), S.USER_ID, S.SEQ, S.RANK, S.TIED
    )
    written = write_dataset(ranks, lake, S.RANKS, dataset, model=model)
    fs, path = filesystem(staging)
    fs.delete_dir(path)
    return written
