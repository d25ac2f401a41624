"""The train and score stages: model inputs from Delta, models through the readers, ranks to Delta.

``train`` builds the model inputs (once per split version), fits the model of each split (test
and its validation twin) and logs both to one MLflow run with their conf and cutoffs. ``score``
loads them back from that run, ranks the full catalogue for every target and writes ``ranks``.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from intent_spark.core import schema as S
from intent_spark.core.datasets import DatasetRef
from intent_spark.core.errors import IntentError
from intent_spark.core.faults import fault_point
from intent_spark.lake.context import Lake
from intent_spark.lake.tracking import code_version, start_run
from intent_spark.plugin import HistoryModel, TrainingData, pick_device
from intent_spark.split.populations import SPLITS, split_cutoffs
from intent_spark.train.build import build_model, item_texts, plugin_call, split_catalogue, stamp_digest
from intent_spark.train.conf import ModelsConf
from intent_spark.train.inputs import build_model_inputs
from intent_spark.train.plugin_errors import saves_tracebacks
from intent_spark.train.readers import choose_reader, split_files
from intent_spark.train.registry import resolve, same_model_note
from intent_spark.train.workers import FitJob, fit_processes, open_batches


def _check_splits(splits: Sequence[str]) -> list[str]:
    unknown = sorted(set(splits) - set(SPLITS))
    if unknown or not splits:
        raise IntentError(f"unknown split(s) {unknown} (known: {', '.join(SPLITS)})")
    return [s for s in SPLITS if s in splits]


@saves_tracebacks
def train(
    lake: Lake,
    dataset: DatasetRef,
    model: str,
    conf: ModelsConf,
    *,
    parent_run_id: str | None = None,
    splits: Sequence[str] = SPLITS,
) -> str:
    """Fit ``model`` (a registered name or a ``module:Class`` spec) on the training events of
    each split (default both: the test split and its validation twin); return the MLflow run
    id, nested under ``parent_run_id`` (the benchmark's run) when given. A model that fits
    nothing gets its run all the same: the catalogue it was built for, its settings."""
    import torch

    tracking_uri, progress = lake.tracking_store("train"), lake.progress
    cls = resolve(model)
    name = cls.name
    note = same_model_note(model)
    if note:
        progress(note)
    splits = _check_splits(splits)
    stamp = build_model_inputs(lake, dataset, context=conf.context, max_tokens=conf.max_tokens)
    cutoffs = split_cutoffs(lake, dataset)
    absent = [split for split in splits if split not in cutoffs]
    if absent:  # a protocol variant has a test split only
        progress(f"{dataset}: no {', '.join(absent)} split; training {', '.join(cutoffs)} only")
        splits = [split for split in splits if split in cutoffs]
    device = pick_device()
    # count models train in one process
    distributed = cls.fits and conf.processes > 1 and not issubclass(cls, HistoryModel)
    split_rows = lake.read(S.SPLITS, dataset).collect()  # a row per split
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
        "reader": choose_reader(conf.reader) if cls.fits else "none",
        **{f"{split}_cutoff": f"{cutoff:%Y-%m-%d}" for split, cutoff in cutoffs.items()},
        **{f"{r[S.SPLIT]}_split_seed": r.seed for r in split_rows},
        S.ITEM_LEVEL: next((r[S.ITEM_LEVEL] for r in split_rows if r[S.ITEM_LEVEL]), S.DEFAULT_ITEM_LEVEL),
        **conf.logged(name),
    }
    with (
        start_run(tracking_uri, dataset, name, params, parent_run_id) as run,
        tempfile.TemporaryDirectory() as tmp,
    ):
        # the processes fit every split in one launch; each split's model lands in tmp/split
        fitted_by_split = (
            _fit_in_processes(lake, dataset, model, conf, splits, Path(tmp)) if distributed else {}
        )
        for split in splits:
            catalogue = split_catalogue(lake, dataset, split, conf.reader)
            meta: dict[str, Any] = {
                "split": split,
                "n_items": catalogue.n_items,
                "n_trained": catalogue.n_trained,
                "n_tokens": catalogue.n_tokens,
            }
            run.log_params({f"{split}_n_items": catalogue.n_items, f"{split}_n_trained": catalogue.n_trained})
            folder = Path(tmp) / split
            folder.mkdir(exist_ok=True)
            where = f"{dataset} {name} {split}"
            stats: dict[str, Any] = {}
            if distributed:  # the processes built, fitted and saved it; rank 0's model is in folder
                stats = fitted_by_split[split]
            else:
                fitted = build_model(cls, catalogue, conf, device)
                if cls.fits:
                    urls = split_files(lake, S.TRAIN_SEQUENCES, dataset, split)
                    training = TrainingData(
                        partial(open_batches, urls, (0, 1), conf.reader),
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


def _fit_in_processes(
    lake: Lake, dataset, model, conf, splits: Sequence[str], folder: Path
) -> dict[str, dict[str, Any]]:
    """Each split's model fitted by ``conf.processes`` processes (TorchDistributor, DDP), every
    split in one launch; rank 0's saved model of each split copied into ``folder/split``; each
    split's fit numbers."""
    from intent_spark.lake.files import remove_folder as drop_staging
    from intent_spark.train.distributed import copy_folder, read_json, run_processes
    from intent_spark.train.readers import row_groups

    progress = lake.progress
    cls = resolve(model)
    if not cls.distributable:
        raise IntentError(
            f"model {cls.name!r} cannot be distributed (its fit has its own loop); train it with --processes 1"
        )
    staging = f"{lake.root.rstrip('/')}/_staging/train/{dataset}/{cls.name}"
    drop_staging(staging)
    jobs = []
    for split in splits:
        where = f"{dataset} {cls.name} {split}"
        urls = split_files(lake, S.TRAIN_SEQUENCES, dataset, split)
        groups = row_groups(urls)
        if groups < conf.processes:
            raise IntentError(
                f"{where}: the training sequences hold {groups} row group(s), too few to shard over {conf.processes} processes"
            )
        jobs.append(
            FitJob(
                model=model,
                conf=conf,
                catalogue_urls=split_files(lake, S.CATALOGUE, dataset, split),
                texts=item_texts(lake, dataset, split) if cls.needs_text else None,
                sequence_urls=urls,
                staging=f"{staging}/{split}",
                where=where,
            )
        )
        progress(
            f"{where}: training in {conf.processes} processes ({groups} row groups of training sequences)"
        )
    try:
        run_processes(lake.spark, conf.processes, fit_processes, staging, f"{dataset} {cls.name}", jobs)
        stats = {}
        for split in splits:
            copy_folder(f"{staging}/{split}/model", str(folder / split))
            stats[split] = {**read_json(f"{staging}/{split}/stats.json"), "processes": conf.processes}
    finally:
        drop_staging(staging)
    return stats


def _prefixed(progress: Callable[[str], None], where: str, line: str) -> None:
    progress(f"{where}: {line}")


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
