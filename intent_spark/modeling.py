"""The train and score stages: model inputs from Delta, models through Petastorm, ranks to Delta.

``train`` builds the model inputs (once per split version), fits the model of each split (test
and its validation twin) and logs both to one MLflow run with their conf and cutoffs. ``score``
loads them back from that run, ranks the full catalogue for every target and writes ``ranks``.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from intent_spark import schema as S
from intent_spark.config import CONF_DIR, ConfError, from_mapping, load_yaml
from intent_spark.errors import IntentError
from intent_spark.io import read_table, write_dataset
from intent_spark.model_inputs import SPLITS, build_model_inputs, inputs_stamp, split_cutoffs
from intent_spark.readers import read_catalogue, split_files, training_batches, user_blocks
from intent_spark.tracking import code_version, find_run, start_run, store
from models import MODEL_NAMES
from models.popularity import Popularity
from models.repeat_last import RepeatLast
from models.sasrec import NegativeSampler, SASRec, SASRecConf, SASRecF

NEURAL = ("sasrec", "sasrec_f")


@dataclass(frozen=True)
class ModelsConf:
    """``conf/models.yaml``: the shared input settings and each model's hyperparameters."""

    context: int = 50
    max_tokens: int = 16
    models: dict[str, dict[str, Any]] = field(default_factory=dict)

    def sasrec(self, model: str) -> SASRecConf:
        values = {**(self.models.get(model) or {}), "context": self.context}
        return from_mapping(SASRecConf, values, f"models.{model}")


def load_models_conf(path: str | Path | None = None, overrides: dict[str, dict] | None = None) -> ModelsConf:
    """The models conf file, with per-model ``overrides`` (e.g. fewer steps for the demo)."""
    raw = load_yaml(Path(path) if path else CONF_DIR / "models.yaml")
    models = {name: dict(values or {}) for name, values in (raw.pop("models", None) or {}).items()}
    for name, values in (overrides or {}).items():
        models.setdefault(name, {}).update(values or {})
    unknown = sorted(set(models) - set(MODEL_NAMES))
    if unknown:
        raise ConfError(
            f"models conf: unknown model(s) {', '.join(unknown)} (known: {', '.join(MODEL_NAMES)})"
        )
    extra = sorted(set(raw) - {"context", "max_tokens"})
    if extra:
        raise ConfError(f"models conf: unknown key(s) {extra}; known: context, max_tokens, models")
    conf = ModelsConf(
        context=int(raw.get("context", 50)), max_tokens=int(raw.get("max_tokens", 16)), models=models
    )
    for name in NEURAL:
        conf.sasrec(name)  # validate every neural model's fields up front
    return conf


def check_model(model: str) -> None:
    if model not in MODEL_NAMES:
        raise IntentError(f"unknown model {model!r} (known: {', '.join(MODEL_NAMES)})")


def _stamp_digest(stamp: str) -> str:
    return hashlib.sha256(stamp.encode()).hexdigest()[:16]


def _device():
    from models.training import pick_device

    return pick_device()


def build_model(model: str, arrays, conf: ModelsConf):
    """A fresh model for one split's catalogue."""
    import torch

    if model == "popularity":
        return Popularity(arrays.train_counts)
    if model == "repeat_last":
        return RepeatLast(arrays.n_items)
    sasrec_conf = conf.sasrec(model)
    if model == "sasrec":
        return SASRec(arrays.n_items, arrays.n_trained, sasrec_conf)
    return SASRecF(
        arrays.n_items, arrays.n_trained, sasrec_conf, torch.from_numpy(arrays.token_ids), arrays.n_tokens
    )


def _check_splits(splits: Sequence[str]) -> list[str]:
    unknown = sorted(set(splits) - set(SPLITS))
    if unknown or not splits:
        raise IntentError(f"unknown split(s) {unknown} (known: {', '.join(SPLITS)})")
    return [s for s in SPLITS if s in splits]


def train(
    spark: SparkSession,
    lake: str,
    dataset: str,
    model: str,
    conf: ModelsConf,
    *,
    tracking_uri: str,
    parent_run_id: str | None = None,
    splits: Sequence[str] = SPLITS,
    progress: Callable[[str], None] = lambda _: None,
) -> str:
    """Fit ``model`` on the training events of each split (default both: the test split and its
    validation twin); return the MLflow run id, nested under ``parent_run_id`` (the benchmark's
    run) when given."""
    import torch

    check_model(model)
    splits = _check_splits(splits)
    stamp = build_model_inputs(
        spark, lake, dataset, context=conf.context, max_tokens=conf.max_tokens, progress=progress
    )
    cutoffs = split_cutoffs(spark, lake, dataset)
    absent = [split for split in splits if split not in cutoffs]
    if absent:  # a protocol variant has a test split only
        progress(f"{dataset}: no {', '.join(absent)} split; training {', '.join(cutoffs)} only")
        splits = [split for split in splits if split in cutoffs]
    device = _device()
    split_rows = read_table(spark, lake, S.SPLITS, dataset).collect()  # a row per split
    params: dict[str, Any] = {
        "dataset": dataset,
        "model": model,
        "context": conf.context,
        "max_tokens": conf.max_tokens,
        "inputs_stamp": _stamp_digest(stamp),
        "code_version": code_version(),
        "device": device.type,
        "splits": ",".join(splits),
        **{f"{split}_cutoff": f"{cutoff:%Y-%m-%d}" for split, cutoff in cutoffs.items()},
        **{f"{r[S.SPLIT]}_split_seed": r.seed for r in split_rows},
        S.ITEM_LEVEL: next((r[S.ITEM_LEVEL] for r in split_rows if r[S.ITEM_LEVEL]), S.DEFAULT_ITEM_LEVEL),
    }
    if model in NEURAL:
        params.update(asdict(conf.sasrec(model)))
    with (
        start_run(tracking_uri, dataset, model, params, parent_run_id) as run,
        tempfile.TemporaryDirectory() as tmp,
    ):
        import mlflow

        for split in splits:
            arrays = read_catalogue(split_files(spark, lake, S.CATALOGUE, dataset, split))
            fitted = build_model(model, arrays, conf)
            meta = {
                "split": split,
                "n_items": arrays.n_items,
                "n_trained": arrays.n_trained,
                "n_tokens": arrays.n_tokens,
            }
            mlflow.log_params({f"{split}_n_items": arrays.n_items, f"{split}_n_trained": arrays.n_trained})
            folder = Path(tmp) / split
            folder.mkdir()
            if model in NEURAL:
                urls = split_files(spark, lake, S.TRAIN_SEQUENCES, dataset, split)
                stats = _fit_neural(
                    fitted,
                    arrays,
                    conf.sasrec(model),
                    urls,
                    device,
                    lambda line, split=split: progress(f"{dataset} {model} {split}: {line}"),
                )
                mlflow.log_metrics({f"train.{split}.{k}": v for k, v in stats.items() if k != "loss"})
                meta["loss"] = stats["loss"]
                torch.save(fitted.state_dict(), folder / "state.pt")
            elif model == "popularity":
                np.save(folder / "train_counts.npy", arrays.train_counts)
            (folder / "meta.json").write_text(json.dumps(meta, indent=2))
            progress(f"{dataset} {model} {split}: {arrays.n_items:,} items, {arrays.n_trained:,} trained")
        mlflow.log_artifacts(tmp, artifact_path="model")
        return run.info.run_id


def _fit_neural(fitted, arrays, settings: SASRecConf, urls: list[str], device, progress) -> dict[str, Any]:
    """Train SASRec or SASRec-F on one split's training sequences, read through Petastorm."""
    import torch

    from models.training import fit

    torch.manual_seed(settings.seed)
    sampler = None
    if arrays.n_trained > settings.full_softmax_max_items:
        counts = torch.from_numpy(arrays.train_counts[: arrays.n_trained + 1])
        sampler = NegativeSampler(counts, settings.negatives)
    batches = training_batches(urls, settings.batch_size, settings.shuffle_buffer, settings.seed)
    try:
        stats: dict[str, Any] = fit(
            fitted,
            batches,
            steps=settings.steps,
            learning_rate=settings.learning_rate,
            weight_decay=settings.weight_decay,
            sampler=sampler,
            device=device,
            progress=progress,
        )
    finally:
        batches.close()  # stops the Petastorm reader
    stats["loss"] = "sampled_softmax" if sampler else "full_softmax"
    return stats


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
    import mlflow

    check_model(model)
    stamp = _stamp_digest(inputs_stamp(spark, lake, dataset, conf.context, conf.max_tokens))
    run = find_run(tracking_uri, dataset, model, run_id)
    if run.data.params.get("inputs_stamp") != stamp:
        raise IntentError(
            f"{dataset} {model}: MLflow run {run.info.run_id} was trained on another split or input settings; "
            f"run `intent train --dataset {dataset} --model {model}` again"
        )
    splits = run.data.params.get("splits", ",".join(SPLITS)).split(",")
    device = _device()
    staging = f"{lake.rstrip('/')}/_staging/ranks/{dataset}/{model}"
    metrics: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(
            mlflow.artifacts.download_artifacts(
                run_id=run.info.run_id, artifact_path="model", dst_path=tmp, tracking_uri=tracking_uri
            )
        )
        for split in splits:
            arrays = read_catalogue(split_files(spark, lake, S.CATALOGUE, dataset, split))
            fitted = load_model(model, folder / split, arrays, conf, device)
            urls = split_files(spark, lake, S.SCORE_EVENTS, dataset, split)
            expected = read_table(spark, lake, S.TARGETS, dataset).where(F.col(S.SPLIT) == split).count()
            seconds, written = _rank_split(
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
    rows = _write_ranks(spark, lake, dataset, model, staging, splits)
    with store(tracking_uri), mlflow.start_run(run_id=run.info.run_id):
        mlflow.log_metrics(metrics)
    return rows


def _rank_split(fitted, urls, conf, device, out_path, expected, progress) -> tuple[float, int]:
    """Rank one split's targets and stage ``seq, rank`` as Parquet; return (seconds, targets)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from intent_spark.ingest.files import filesystem
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


def _write_ranks(
    spark: SparkSession, lake: str, dataset: str, model: str, staging: str, splits: Sequence[str]
) -> int:
    """Join staged ranks to their targets (cell, user) and replace the model's ranks partition."""
    from intent_spark.ingest.files import filesystem

    targets = read_table(spark, lake, S.TARGETS, dataset)
    staged = None
    for split in splits:
        part = spark.read.parquet(f"{staging}/{split}.parquet").withColumn(S.SPLIT, F.lit(split))
        staged = part if staged is None else staged.unionByName(part)
    ranks = targets.join(staged, [S.SPLIT, S.SEQ]).select(
        S.DATASET, S.SPLIT, S.CELL, F.lit(model).alias(S.MODEL), S.USER_ID, S.SEQ, S.RANK, S.TIED
    )
    write_dataset(ranks, lake, S.RANKS, dataset, model=model)
    fs, path = filesystem(staging)
    fs.delete_dir(path)
    return read_table(spark, lake, S.RANKS, dataset).where(F.col(S.MODEL) == model).count()


def score_transfer(
    spark: SparkSession,
    lake: str,
    source: str,
    target: str,
    conf: ModelsConf,
    *,
    tracking_uri: str,
    model: str = "sasrec_f",
    progress: Callable[[str], None] = lambda _: None,
) -> int:
    """Rank ``target``'s test targets with ``model`` trained on ``source``'s test split (its
    newest run); write them as ``model@source`` ranks of the target and the token coverage to
    ``transfers``. Returns the ranks written."""
    import mlflow
    import torch

    from intent_spark.transfer import (
        TRANSFER_MODELS,
        coverage,
        shared_cutoffs,
        target_token_ids,
        transfer_model,
    )

    if model not in TRANSFER_MODELS:
        raise IntentError(
            f"{model} cannot transfer: only {', '.join(TRANSFER_MODELS)} scores items it never saw"
        )
    name = transfer_model(model, source)
    run = find_run(tracking_uri, source, model)
    build_model_inputs(
        spark, lake, target, context=conf.context, max_tokens=conf.max_tokens, progress=progress
    )
    source_arrays = read_catalogue(split_files(spark, lake, S.CATALOGUE, source, S.TEST))
    token_ids = target_token_ids(spark, lake, source, target, conf.max_tokens).cache()
    # One row per target catalogue item (items, not events), as read_catalogue reads it.
    rows = token_ids.select(S.ITEM_INDEX, S.TOKEN_IDS).toPandas().sort_values(S.ITEM_INDEX)
    tokens = np.zeros((len(rows) + 1, conf.max_tokens), dtype=np.int64)
    if len(rows):
        tokens[rows[S.ITEM_INDEX].to_numpy()] = np.stack(rows[S.TOKEN_IDS].to_numpy())
    device = _device()
    # No item of the target is a trained id of the source: the model scores by tokens alone.
    fitted = SASRecF(len(rows), 0, conf.sasrec(model), torch.from_numpy(tokens), source_arrays.n_tokens)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(
            mlflow.artifacts.download_artifacts(
                run_id=run.info.run_id,
                artifact_path=f"model/{S.TEST}",
                dst_path=tmp,
                tracking_uri=tracking_uri,
            )
        )
        state = torch.load(folder / "state.pt", map_location=device)
    state["id_embedding.weight"] = torch.zeros_like(fitted.id_embedding.weight)
    state["item_tokens"] = fitted.item_tokens
    fitted.load_state_dict(state)
    fitted.to(device).eval()
    targets = read_table(spark, lake, S.TARGETS, target).where(F.col(S.SPLIT) == S.TEST)
    staging = f"{lake.rstrip('/')}/_staging/ranks/{target}/{name}"
    _rank_split(
        fitted,
        split_files(spark, lake, S.SCORE_EVENTS, target, S.TEST),
        conf,
        device,
        f"{staging}/{S.TEST}.parquet",
        targets.count(),
        lambda line: progress(f"{target} {name}: {line}"),
    )
    written = _write_ranks(spark, lake, target, name, staging, [S.TEST])
    shared = shared_cutoffs(spark, lake, (source, target))
    reached = coverage(targets, token_ids).select(
        F.lit(target).alias(S.DATASET),
        F.lit(source).alias(S.SOURCE),
        F.lit(model).alias(S.MODEL),
        S.CELL,
        "n_targets",
        "n_with_tokens",
        F.array(*[F.lit(c) for c in shared]).cast("array<timestamp>").alias("shared_cutoffs"),
    )
    write_dataset(reached, lake, S.TRANSFERS, target, source=source)
    token_ids.unpersist()
    return written


def with_steps(conf: ModelsConf, steps: int | None) -> ModelsConf:
    """The same conf with every neural model's step count replaced (the demo's short runs)."""
    if steps is None:
        return conf
    shortened = {name: {**(conf.models.get(name) or {}), "steps": steps} for name in NEURAL}
    return replace(conf, models={**conf.models, **shortened})
