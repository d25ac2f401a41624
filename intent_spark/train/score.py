"""The score stage: the trained model of each split back from MLflow, the full catalogue ranked
for every target (tie-aware, blocked), staged as Parquet and committed to ``ranks`` once."""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import dataclass

from pyspark.sql import functions as F

from intent_spark.core import schema as S
from intent_spark.core.datasets import DatasetRef
from intent_spark.core.errors import IntentError
from intent_spark.core.faults import fault_point
from intent_spark.lake.context import Lake
from intent_spark.lake.files import remove_folder
from intent_spark.lake.tracking import download_artifacts, find_run, log_run_metrics
from intent_spark.plugin import HistoryModel, pick_device
from intent_spark.split.populations import SPLITS
from intent_spark.train.build import (
    item_texts,
    load_model,
    split_catalogue,
    stamp_digest,
)
from intent_spark.train.conf import ModelsConf
from intent_spark.train.fit import train
from intent_spark.train.inputs import inputs_stamp
from intent_spark.train.plugin_errors import saves_tracebacks
from intent_spark.train.readers import split_files, user_batches
from intent_spark.train.registry import resolve, same_model_note
from intent_spark.train.workers import STAGED_SCHEMA, ScoreJob, rank_split, score_process, staged_part


def scoring_run(
    lake: Lake,
    dataset: DatasetRef,
    model: str,
    conf: ModelsConf,
    *,
    run_id: str | None = None,
    parent_run_id: str | None = None,
):
    """The model's class and the MLflow run to score from: the given run, or the newest for the
    dataset and model, checked against the current split and inputs. A model that fits nothing
    and has no run for this split gets one (``train`` without fitting)."""
    tracking_uri = lake.tracking_store("score")
    cls = resolve(model)
    name = cls.name
    stamp = stamp_digest(inputs_stamp(lake, dataset, conf.context, conf.max_tokens))
    run = find_run(tracking_uri, dataset, name, run_id, missing_ok=not cls.fits)
    if run is not None and not cls.fits and run.data.params.get("inputs_stamp") != stamp and not run_id:
        run = None  # built for another split: build it again, there is nothing to fit
    if run is None:
        made = train(lake, dataset, model, conf, parent_run_id=parent_run_id)
        run = find_run(tracking_uri, dataset, name, made)
    if run.data.params.get("inputs_stamp") != stamp:
        raise IntentError(
            f"{dataset} {name}: MLflow run {run.info.run_id} was trained on another split or input settings; "
            f"run `intent train --dataset {dataset} --model {model}` again"
        )
    return cls, run


@saves_tracebacks
def score(
    lake: Lake,
    dataset: DatasetRef,
    model: str,
    conf: ModelsConf,
    *,
    run_id: str | None = None,
    parent_run_id: str | None = None,
) -> int:
    """Rank the full catalogue for every target of the splits the run was trained on; replace the
    model's ``ranks``; return its rows. A model that fits nothing and has no run yet gets one
    here (``train`` without fitting), so it is scored without a train stage."""
    tracking_uri, progress = lake.tracking_store("score"), lake.progress
    cls, run = scoring_run(lake, dataset, model, conf, run_id=run_id, parent_run_id=parent_run_id)
    name = cls.name
    note = same_model_note(model)
    if note:
        progress(note)
    splits = run.data.params.get("splits", ",".join(SPLITS)).split(",")
    device = pick_device()
    staging = f"{lake.root.rstrip('/')}/_staging/ranks/{dataset}/{name}"
    metrics: dict[str, float] = {}
    # how many targets each split must rank, from the split's own counts (a row per cell)
    per_split = (
        lake.read(S.SPLIT_COUNTS, dataset).groupBy(S.SPLIT).agg(F.sum("n_targets").alias("count")).collect()
    )
    targets = {r[S.SPLIT]: int(r["count"]) for r in per_split}
    drop_staging(staging)  # parts a killed scoring left behind are not this one's
    try:
        if conf.processes > 1 and not issubclass(cls, HistoryModel):
            scoring = Scoring(dataset, model, conf, run.info.run_id, splits, staging, targets)
            metrics = _score_in_processes(lake, scoring)
        else:
            if conf.processes > 1:
                progress(f"{dataset} {name}: a count model ranks in one pass; scored in one process")
            with tempfile.TemporaryDirectory() as tmp:
                folder = download_artifacts(tracking_uri, run.info.run_id, "model", tmp)
                for split in splits:
                    catalogue = split_catalogue(lake, dataset, split, conf.reader)
                    fitted = load_model(cls, folder / split, catalogue, conf, device)
                    urls = split_files(lake, S.SCORE_EVENTS, dataset, split)
                    seconds, written = rank_split(
                        fitted,
                        user_batches(urls, conf.reader),
                        conf,
                        device,
                        staged_part(staging, split),
                        targets.get(split, 0),
                        lambda line, split=split: progress(f"{dataset} {name} {split}: {line}"),
                        where=f"{dataset} {name} {split}",
                    )
                    metrics[f"score.{split}.targets_per_second"] = written / seconds if seconds else 0.0
                    metrics[f"score.{split}.targets"] = float(written)
    except Exception:
        drop_staging(staging)  # nothing of a failed scoring is kept
        raise
    fault_point("score.staged")
    rows = write_ranks(lake, dataset, name, staging, splits)
    log_run_metrics(tracking_uri, run.info.run_id, metrics)
    return rows


@dataclass(frozen=True)
class Scoring:
    """One model's scoring of one dataset: its MLflow run, the splits it ranks, how many targets
    each must rank, and where the ranks stage before they are committed."""

    dataset: DatasetRef
    model: str  # as asked for: a registered name or a module:Class spec
    conf: ModelsConf
    run_id: str
    splits: list[str]
    staging: str
    targets: dict[str, int]


def _score_in_processes(lake: Lake, scoring: Scoring) -> dict[str, float]:
    """Every split ranked by ``conf.processes`` processes (TorchDistributor), each over every
    N-th user block; their staged parts must hold every target of the split."""
    from intent_spark.train.distributed import run_processes, staged_counts

    dataset, conf, splits, targets = scoring.dataset, scoring.conf, scoring.splits, scoring.targets
    cls = resolve(scoring.model)
    where = f"{dataset} {cls.name}"
    lake.progress(f"{where}: scoring in {conf.processes} processes")
    job = ScoreJob(
        model=scoring.model,
        conf=conf,
        tracking_uri=lake.tracking_store("score"),
        run_id=scoring.run_id,
        splits=list(splits),
        catalogue_urls={split: split_files(lake, S.CATALOGUE, dataset, split) for split in splits},
        event_urls={split: split_files(lake, S.SCORE_EVENTS, dataset, split) for split in splits},
        texts={split: item_texts(lake, dataset, split) if cls.needs_text else None for split in splits},
        staging=scoring.staging,
        where=where,
    )
    run_processes(lake.spark, conf.processes, score_process, scoring.staging, where, job)
    counts = staged_counts(scoring.staging)
    metrics: dict[str, float] = {"score.processes": float(conf.processes)}
    for split in splits:
        written = sum(c["targets"][split] for c in counts)
        if len(counts) != conf.processes or written != targets.get(split, 0):
            raise IntentError(
                f"{where} {split}: {len(counts)} of {conf.processes} processes staged {written:,} targets "
                f"of {targets.get(split, 0):,}; nothing committed"
            )
        slowest = max(c["seconds"][split] for c in counts)
        metrics[f"score.{split}.targets_per_second"] = written / slowest if slowest else 0.0
        metrics[f"score.{split}.targets"] = float(written)
    return metrics


def drop_staging(staging: str) -> None:
    remove_folder(staging)


def write_ranks(lake: Lake, dataset: str, model: str, staging: str, splits: Sequence[str]) -> int:
    """Join staged ranks to their targets (cell, user) and replace the model's ranks partition."""
    targets = lake.read(S.TARGETS, dataset)
    staged = None
    for split in splits:
        part = (
            lake.spark.read.schema(STAGED_SCHEMA)  # known: no job to infer it from the files
            .parquet(f"{staging}/{split}")  # one part per scoring process
            .withColumn(S.SPLIT, F.lit(split))
        )
        staged = part if staged is None else staged.unionByName(part)
    ranks = targets.join(staged, [S.SPLIT, S.SEQ]).select(
        S.DATASET, S.SPLIT, S.CELL, F.lit(model).alias(S.MODEL), S.USER_ID, S.SEQ, S.RANK, S.TIED
    )
    written = lake.write(ranks, S.RANKS, dataset, model=model)
    drop_staging(staging)
    return written
