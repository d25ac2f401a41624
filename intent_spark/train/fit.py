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
from contextlib import closing
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from intent_spark.core import schema as S
from intent_spark.core.errors import IntentError
from intent_spark.core.faults import fault_point
from intent_spark.core.progress import Progress, silent
from intent_spark.lake.readers import read_catalogue, split_files, training_batches
from intent_spark.lake.tables import read_table, source_table
from intent_spark.lake.tracking import code_version, start_run
from intent_spark.plugin import Catalogue, HistoryModel, Model, TrainingData, pick_device
from intent_spark.split.populations import SPLITS, split_cutoffs
from intent_spark.train.conf import ModelsConf
from intent_spark.train.inputs import build_model_inputs
from intent_spark.train.plugin_errors import plugin_error, saves_tracebacks
from intent_spark.train.registry import resolve, same_model_note


def stamp_digest(stamp: str) -> str:
    return hashlib.sha256(stamp.encode()).hexdigest()[:16]


def item_texts(spark: SparkSession, lake: str, dataset: str, split: str) -> list[str]:
    """Each catalogue item's title and metadata text by index 0..N ("" where there is none).
    One row per item (items, not events), read only for models that ask for text."""
    catalogue = read_table(spark, lake, S.CATALOGUE, dataset).where(F.col(S.SPLIT) == split)
    items = source_table(spark, lake, S.ITEMS, dataset)
    text = F.concat_ws(". ", F.col(S.TITLE), F.col(S.CATEGORY), F.col(S.BRAND))
    rows = (
        catalogue.select(S.ITEM_ID, S.ITEM_INDEX)
        .join(items.select(S.ITEM_ID, text.alias("_text")), S.ITEM_ID, "left")
        .select(S.ITEM_INDEX, F.coalesce(F.col("_text"), F.lit("")).alias("_text"))
        .toPandas()
    )
    texts = [""] * (int(rows[S.ITEM_INDEX].max()) + 1 if len(rows) else 1)
    for index, value in zip(rows[S.ITEM_INDEX].tolist(), rows["_text"].tolist(), strict=True):
        texts[index] = value
    return texts


def split_catalogue(spark: SparkSession, lake: str, dataset: str, split: str) -> Catalogue:
    """What a model gets of one split's catalogue; item texts are read when it asks."""
    arrays = read_catalogue(split_files(spark, lake, S.CATALOGUE, dataset, split))
    return replace(arrays, text_loader=lambda: item_texts(spark, lake, dataset, split))


def build_model(cls: type[Model], catalogue: Catalogue, conf: ModelsConf, device) -> Model:
    """A fresh model for one split's catalogue, its initial weights from the conf's seed (not
    from whatever ran before in the process)."""
    import torch

    torch.manual_seed(conf.scoring(cls.name).seed)
    try:
        return cls(catalogue, conf.settings(cls.name), device)
    except IntentError:
        raise
    except Exception as exc:  # noqa: BLE001 - a plug-in's own fault, named
        raise plugin_error(f"model {cls.name!r}", "building it", exc, cls) from exc


def _check_splits(splits: Sequence[str]) -> list[str]:
    unknown = sorted(set(splits) - set(SPLITS))
    if unknown or not splits:
        raise IntentError(f"unknown split(s) {unknown} (known: {', '.join(SPLITS)})")
    return [s for s in SPLITS if s in splits]


@saves_tracebacks
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
    progress: Progress = silent,
) -> str:
    """Fit ``model`` (a registered name or a ``module:Class`` spec) on the training events of
    each split (default both: the test split and its validation twin); return the MLflow run
    id, nested under ``parent_run_id`` (the benchmark's run) when given. A model that fits
    nothing gets its run all the same: the catalogue it was built for, its settings."""
    import torch

    cls = resolve(model)
    name = cls.name
    note = same_model_note(model)
    if note:
        progress(note)
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
    distributed = (
        cls.fits and conf.processes > 1 and not issubclass(cls, HistoryModel)
    )  # count models: one process
    split_rows = read_table(spark, lake, S.SPLITS, dataset).collect()  # a row per split
    params: dict[str, Any] = {
        "dataset": dataset,
        "model": name,
        "model_class": f"{cls.__module__}:{cls.__qualname__}",
        "model_kind": cls.kind,
        "context": conf.context,
        "max_tokens": conf.max_tokens,
        "inputs_stamp": stamp_digest(stamp),
        "code_version": code_version(),
        "device": device.type,
        "splits": ",".join(splits),
        "processes": conf.processes if distributed else 1,
        **{f"{split}_cutoff": f"{cutoff:%Y-%m-%d}" for split, cutoff in cutoffs.items()},
        **{f"{r[S.SPLIT]}_split_seed": r.seed for r in split_rows},
        S.ITEM_LEVEL: next((r[S.ITEM_LEVEL] for r in split_rows if r[S.ITEM_LEVEL]), S.DEFAULT_ITEM_LEVEL),
        **conf.logged(name),
    }
    with (
        start_run(tracking_uri, dataset, name, params, parent_run_id) as run,
        tempfile.TemporaryDirectory() as tmp,
    ):
        for split in splits:
            catalogue = split_catalogue(spark, lake, dataset, split)
            meta: dict[str, Any] = {
                "split": split,
                "n_items": catalogue.n_items,
                "n_trained": catalogue.n_trained,
                "n_tokens": catalogue.n_tokens,
            }
            run.log_params({f"{split}_n_items": catalogue.n_items, f"{split}_n_trained": catalogue.n_trained})
            folder = Path(tmp) / split
            folder.mkdir()
            where = f"{dataset} {name} {split}"
            stats: dict[str, Any] = {}
            if distributed:  # the processes build, fit and save it; rank 0's model lands in folder
                stats = _fit_in_processes(spark, lake, dataset, model, conf, split, folder, progress)
            else:
                fitted = build_model(cls, catalogue, conf, device)
                if cls.fits:
                    urls = split_files(spark, lake, S.TRAIN_SEQUENCES, dataset, split)
                    training = TrainingData(
                        partial(open_batches, urls, 0, 1),
                        context=conf.context,
                        seed=conf.scoring(name).seed,
                        device=device,
                        progress=partial(_prefixed, progress, where),
                    )
                    torch.manual_seed(training.seed)
                    stats = plugin_call(where, "fit", fitted.fit, training) or {}
                plugin_call(where, "save", fitted.save, folder)
            run.log_metrics({f"train.{split}.{k}": float(v) for k, v in stats.items() if _number(v)})
            meta.update({k: v for k, v in stats.items() if not _number(v)})
            (folder / "meta.json").write_text(json.dumps(meta, indent=2))
            progress(f"{where}: {catalogue.n_items:,} items, {catalogue.n_trained:,} trained")
        fault_point("train.fitted")
        run.log_artifacts(tmp, "model")
        return run.run_id


def _fit_in_processes(spark, lake, dataset, model, conf, split, folder: Path, progress) -> dict[str, Any]:
    """One split's model fitted by ``conf.processes`` processes (TorchDistributor, DDP); rank
    0's saved model copied into ``folder``; its fit's numbers."""
    from intent_spark.lake.files import remove_folder as drop_staging
    from intent_spark.lake.readers import row_groups
    from intent_spark.train.distributed import copy_folder, read_json, run_processes

    cls = resolve(model)
    where = f"{dataset} {cls.name} {split}"
    if not cls.distributable:
        raise IntentError(
            f"model {cls.name!r} cannot be distributed (its fit has its own loop); train it with --processes 1"
        )
    urls = split_files(spark, lake, S.TRAIN_SEQUENCES, dataset, split)
    groups = row_groups(urls)
    if groups < conf.processes:
        raise IntentError(
            f"{where}: the training sequences hold {groups} row group(s), too few to shard over {conf.processes} processes"
        )
    staging = f"{lake.rstrip('/')}/_staging/train/{dataset}/{cls.name}/{split}"
    drop_staging(staging)
    job = FitJob(
        model=model,
        conf=conf,
        catalogue_urls=split_files(spark, lake, S.CATALOGUE, dataset, split),
        texts=item_texts(spark, lake, dataset, split) if cls.needs_text else None,
        sequence_urls=urls,
        staging=staging,
        where=where,
    )
    progress(f"{where}: training in {conf.processes} processes ({groups} row groups of training sequences)")
    try:
        run_processes(spark, conf.processes, fit_process, staging, where, job)
        copy_folder(f"{staging}/model", str(folder))
        stats = read_json(f"{staging}/stats.json")
    finally:
        drop_staging(staging)
    return {**stats, "processes": conf.processes}


def open_batches(
    urls: list[str],
    rank: int,
    processes: int,
    batch_size: int,
    shuffle_buffer: int,
    seed: int,
    epochs: int | None,
):
    """The Petastorm reader over this process's shard of one split's training sequences;
    closing it stops the reader."""
    return closing(training_batches(urls, batch_size, shuffle_buffer, seed, epochs, shard=(rank, processes)))


def _prefixed(progress: Callable[[str], None], where: str, line: str) -> None:
    progress(f"{where}: {line}")


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def plugin_call(where: str, what: str, method: Callable[..., Any], *args: Any) -> Any:
    """A model's own method; its exceptions become one line naming the model, the split and
    the plug-in's file and line, with the plug-in's frames and the whole traceback kept."""
    try:
        return method(*args)
    except IntentError:
        raise
    except Exception as exc:  # noqa: BLE001 - a plug-in's fault, never a bare traceback
        owner = getattr(method, "__self__", None)
        raise plugin_error(where, what, exc, type(owner) if owner is not None else type(exc)) from exc


@dataclass(frozen=True)
class FitJob:
    """What each training process needs: nothing that needs Spark."""

    model: str  # a registered name or a module:Class spec
    conf: Any  # ModelsConf
    catalogue_urls: list[str]
    texts: list[str] | None  # the item texts, read once by the stage for a model that needs them
    sequence_urls: list[str]
    staging: str
    where: str


def fit_process(job: FitJob) -> None:
    """One training process: the model built from the same seed, fitted on this process's shard
    with gradients averaged by DDP; rank 0 saves it and its numbers under ``staging``."""
    import torch
    import torch.distributed as dist

    from intent_spark.lake.readers import read_catalogue
    from intent_spark.plugin import training as loop
    from intent_spark.train.distributed import (
        copy_folder,
        process_device,
        process_rank,
        say,
        silent,
        with_texts,
        write_text,
    )

    rank, world = process_rank()
    device = process_device()
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    try:
        cls = resolve(job.model)
        catalogue = read_catalogue(job.catalogue_urls)
        if job.texts is not None:
            catalogue = with_texts(catalogue, job.texts)
        fitted = build_model(cls, catalogue, job.conf, device)
        seed = job.conf.scoring(cls.name).seed
        training = TrainingData(
            partial(open_batches, job.sequence_urls, rank, world),
            context=job.conf.context,
            seed=seed,
            device=device,
            progress=partial(say, job.where) if rank == 0 else silent,
            rank=rank,
            world_size=world,
        )
        torch.manual_seed(seed)
        loops = loop.DATA_PARALLEL_LOOPS[0]
        stats = plugin_call(job.where, "fit", fitted.fit, training) or {}
        if loop.DATA_PARALLEL_LOOPS[0] == loops:
            raise IntentError(
                f"model {cls.name!r} trains with its own loop, not intent_spark.plugin.train_steps, so its "
                "gradients would not be averaged over processes; train it with --processes 1"
            )
        if rank == 0:
            with tempfile.TemporaryDirectory() as tmp:
                plugin_call(job.where, "save", fitted.save, Path(tmp))
                copy_folder(tmp, f"{job.staging}/model")
            write_text(f"{job.staging}/stats.json", json.dumps({k: v for k, v in stats.items()}, default=str))
        dist.barrier()
    finally:
        dist.destroy_process_group()
