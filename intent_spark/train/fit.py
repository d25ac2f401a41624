"""The train and score stages: model inputs from Delta, models through Petastorm, ranks to Delta.

``train`` builds the model inputs (once per split version), fits the model of each split (test
and its validation twin) and logs both to one MLflow run with their conf and cutoffs. ``score``
loads them back from that run, ranks the full catalogue for every target and writes ``ranks``.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
from pyspark.sql import SparkSession

from intent_spark.core import schema as S
from intent_spark.core.errors import IntentError
from intent_spark.lake.readers import read_catalogue, split_files, training_batches
from intent_spark.lake.tables import read_table
from intent_spark.lake.tracking import code_version, start_run
from intent_spark.split.populations import SPLITS, split_cutoffs
from intent_spark.train.conf import NEURAL, ModelsConf, check_model
from intent_spark.train.inputs import build_model_inputs
from models.popularity import Popularity
from models.repeat_last import RepeatLast
from models.sasrec import NegativeSampler, SASRec, SASRecConf, SASRecF
from models.training import pick_device


def stamp_digest(stamp: str) -> str:
    return hashlib.sha256(stamp.encode()).hexdigest()[:16]


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
    device = pick_device()
    split_rows = read_table(spark, lake, S.SPLITS, dataset).collect()  # a row per split
    params: dict[str, Any] = {
        "dataset": dataset,
        "model": model,
        "context": conf.context,
        "max_tokens": conf.max_tokens,
        "inputs_stamp": stamp_digest(stamp),
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
        for split in splits:
            arrays = read_catalogue(split_files(spark, lake, S.CATALOGUE, dataset, split))
            if model in NEURAL:  # initial weights from the model's seed, not from what ran before
                torch.manual_seed(conf.sasrec(model).seed)
            fitted = build_model(model, arrays, conf)
            meta = {
                "split": split,
                "n_items": arrays.n_items,
                "n_trained": arrays.n_trained,
                "n_tokens": arrays.n_tokens,
            }
            run.log_params({f"{split}_n_items": arrays.n_items, f"{split}_n_trained": arrays.n_trained})
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
                run.log_metrics({f"train.{split}.{k}": v for k, v in stats.items() if k != "loss"})
                meta["loss"] = stats["loss"]
                torch.save(fitted.state_dict(), folder / "state.pt")
            elif model == "popularity":
                np.save(folder / "train_counts.npy", arrays.train_counts)
            (folder / "meta.json").write_text(json.dumps(meta, indent=2))
            progress(f"{dataset} {model} {split}: {arrays.n_items:,} items, {arrays.n_trained:,} trained")
        run.log_artifacts(tmp, "model")
        return run.run_id


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
