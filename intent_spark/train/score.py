"""The score stage: the trained model of each split back from MLflow, the full catalogue ranked
for every target (tie-aware, blocked), staged as Parquet and committed to ``ranks`` once."""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from intent_spark.core import schema as S
from intent_spark.core.errors import IntentError
from intent_spark.core.faults import fault_point
from intent_spark.core.progress import Progress, silent
from intent_spark.lake.files import remove_folder
from intent_spark.lake.readers import split_files, user_batches, user_blocks
from intent_spark.lake.tables import read_table, write_dataset
from intent_spark.lake.tracking import download_artifacts, find_run, log_run_metrics
from intent_spark.plugin import Catalogue, HistoryModel, Model, pick_device
from intent_spark.split.populations import SPLITS
from intent_spark.train.conf import ModelsConf
from intent_spark.train.fit import build_model, item_texts, plugin_call, split_catalogue, stamp_digest, train
from intent_spark.train.inputs import inputs_stamp
from intent_spark.train.plugin_errors import saves_tracebacks
from intent_spark.train.registry import resolve, same_model_note


def load_model(cls: type[Model], folder: Path, catalogue: Catalogue, conf: ModelsConf, device) -> Model:
    """A trained model back from its MLflow artifact folder for one split."""
    meta = json.loads((folder / "meta.json").read_text())
    if meta["n_items"] != catalogue.n_items or meta["n_trained"] != catalogue.n_trained:
        raise IntentError(
            f"{cls.name}: trained on {meta['n_items']:,} items ({meta['n_trained']:,} trained) but the catalogue "
            f"has {catalogue.n_items:,} ({catalogue.n_trained:,}); train it again"
        )
    fitted = build_model(cls, catalogue, conf, device)
    plugin_call(
        f"{cls.name} {meta['split']}",
        f"load from its saved folder {folder.name}/",
        fitted.load,
        folder,
    )
    return fitted


def scoring_run(
    spark: SparkSession,
    lake: str,
    dataset: str,
    model: str,
    conf: ModelsConf,
    *,
    tracking_uri: str,
    run_id: str | None = None,
    parent_run_id: str | None = None,
    progress: Progress = silent,
):
    """The model's class and the MLflow run to score from: the given run, or the newest for the
    dataset and model, checked against the current split and inputs. A model that fits nothing
    and has no run for this split gets one (``train`` without fitting)."""
    cls = resolve(model)
    name = cls.name
    stamp = stamp_digest(inputs_stamp(spark, lake, dataset, conf.context, conf.max_tokens))
    run = find_run(tracking_uri, dataset, name, run_id, missing_ok=not cls.fits)
    if run is not None and not cls.fits and run.data.params.get("inputs_stamp") != stamp and not run_id:
        run = None  # built for another split: build it again, there is nothing to fit
    if run is None:
        made = train(
            spark,
            lake,
            dataset,
            model,
            conf,
            tracking_uri=tracking_uri,
            parent_run_id=parent_run_id,
            progress=progress,
        )
        run = find_run(tracking_uri, dataset, name, made)
    if run.data.params.get("inputs_stamp") != stamp:
        raise IntentError(
            f"{dataset} {name}: MLflow run {run.info.run_id} was trained on another split or input settings; "
            f"run `intent train --dataset {dataset} --model {model}` again"
        )
    return cls, run


@saves_tracebacks
def score(
    spark: SparkSession,
    lake: str,
    dataset: str,
    model: str,
    conf: ModelsConf,
    *,
    tracking_uri: str,
    run_id: str | None = None,
    parent_run_id: str | None = None,
    progress: Progress = silent,
) -> int:
    """Rank the full catalogue for every target of the splits the run was trained on; replace the
    model's ``ranks``; return its rows. A model that fits nothing and has no run yet gets one
    here (``train`` without fitting), so it is scored without a train stage."""
    cls, run = scoring_run(
        spark,
        lake,
        dataset,
        model,
        conf,
        tracking_uri=tracking_uri,
        run_id=run_id,
        parent_run_id=parent_run_id,
        progress=progress,
    )
    name = cls.name
    note = same_model_note(model)
    if note:
        progress(note)
    splits = run.data.params.get("splits", ",".join(SPLITS)).split(",")
    device = pick_device()
    staging = f"{lake.rstrip('/')}/_staging/ranks/{dataset}/{name}"
    metrics: dict[str, float] = {}
    # how many targets each split must rank, from the split's own counts (a row per cell)
    per_split = (
        read_table(spark, lake, S.SPLIT_COUNTS, dataset)
        .groupBy(S.SPLIT)
        .agg(F.sum("n_targets").alias("count"))
        .collect()
    )
    targets = {r[S.SPLIT]: int(r["count"]) for r in per_split}
    drop_staging(staging)  # parts a killed scoring left behind are not this one's
    try:
        if conf.processes > 1 and not issubclass(cls, HistoryModel):
            metrics = _score_in_processes(
                spark,
                lake,
                dataset,
                model,
                conf,
                tracking_uri,
                run.info.run_id,
                splits,
                staging,
                targets,
                progress,
            )
        else:
            if conf.processes > 1:
                progress(f"{dataset} {name}: a count model ranks in one pass; scored in one process")
            with tempfile.TemporaryDirectory() as tmp:
                folder = download_artifacts(tracking_uri, run.info.run_id, "model", tmp)
                for split in splits:
                    catalogue = split_catalogue(spark, lake, dataset, split)
                    fitted = load_model(cls, folder / split, catalogue, conf, device)
                    urls = split_files(spark, lake, S.SCORE_EVENTS, dataset, split)
                    seconds, written = rank_split(
                        fitted,
                        user_batches(urls),
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
    rows = write_ranks(spark, lake, dataset, name, staging, splits)
    log_run_metrics(tracking_uri, run.info.run_id, metrics)
    return rows


def _score_in_processes(
    spark, lake, dataset, model, conf, tracking_uri, run_id, splits, staging, targets, progress
):
    """Every split ranked by ``conf.processes`` processes (TorchDistributor), each over every
    N-th user block; their staged parts must hold every target of the split."""
    from intent_spark.train.distributed import run_processes, staged_counts

    cls = resolve(model)
    where = f"{dataset} {cls.name}"
    progress(f"{where}: scoring in {conf.processes} processes")
    job = ScoreJob(
        model=model,
        conf=conf,
        tracking_uri=tracking_uri,
        run_id=run_id,
        splits=list(splits),
        catalogue_urls={split: split_files(spark, lake, S.CATALOGUE, dataset, split) for split in splits},
        event_urls={split: split_files(spark, lake, S.SCORE_EVENTS, dataset, split) for split in splits},
        texts={
            split: item_texts(spark, lake, dataset, split) if cls.needs_text else None for split in splits
        },
        staging=staging,
        where=where,
    )
    run_processes(spark, conf.processes, score_process, staging, where, job)
    counts = staged_counts(staging)
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


STAGED_SCHEMA = f"{S.SEQ} bigint, {S.RANK} double, {S.TIED} bigint"  # what rank_split stages


def staged_part(staging: str, split: str, rank: int = 0) -> str:
    """Where one process stages its ranks of a split (every part of a split is one folder)."""
    return f"{staging}/{split}/part-{rank:05d}.parquet"


def rank_split(fitted, blocks, conf, device, out_path, expected, progress, where) -> tuple[float, int]:
    """Rank the targets of a split's user blocks (all of them, or one process's share) and
    stage ``seq, rank, tied`` as Parquet; return (seconds, targets). ``expected``: the targets
    the blocks must hold (None: a share, checked by the stage). A model's fault (scores of the
    wrong shape, NaN) is one line naming ``where``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from intent_spark.lake.files import filesystem
    from intent_spark.train.ranker import ModelFault, rank_blocks

    settings = conf.scoring(fitted.name)
    chunk = settings.score_chunk_items_gpu if device.type == "cuda" else settings.score_chunk_items
    start = time.monotonic()
    last_report = [start]

    def report(done: int) -> None:
        now = time.monotonic()
        if now - last_report[0] >= 10 or done == expected:
            rate = done / (now - start) if now > start else 0.0
            if expected is None:
                progress(f"{done:,} targets of this process's share, {rate:,.0f}/s")
            else:
                left = (expected - done) / rate if rate else float("nan")
                progress(f"{done:,}/{expected:,} targets, {rate:,.0f}/s, about {left:.0f}s left")
            last_report[0] = now

    fs, path = filesystem(out_path)
    fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
    schema = pa.schema([(S.SEQ, pa.int64()), (S.RANK, pa.float64()), (S.TIED, pa.int64())])
    written = 0
    ranked = rank_blocks(
        fitted,
        blocks,
        context=conf.context,
        batch_size=settings.score_batch,
        chunk_items=chunk,
        device=device,
        fuse_from_items=settings.score_fuse_from_items,
        progress=report,
    )
    with fs.open_output_stream(path) as sink, pq.ParquetWriter(sink, schema) as writer:
        try:
            for seqs, ranks, ties in ranked:
                writer.write_table(pa.table({S.SEQ: seqs, S.RANK: ranks, S.TIED: ties}, schema=schema))
                written += seqs.shape[0]
        except ModelFault as fault:
            raise IntentError(f"{where}: {fault}; nothing written") from None
        except IntentError:
            raise
        except Exception as exc:  # noqa: BLE001 - the model's own scoring code failed
            from intent_spark.train.plugin_errors import plugin_error

            raise plugin_error(where, "scoring", exc, type(fitted)) from exc
    if expected is not None and written != expected:
        raise IntentError(f"scored {written:,} targets but the split has {expected:,}")
    return time.monotonic() - start, written


def write_ranks(
    spark: SparkSession, lake: str, dataset: str, model: str, staging: str, splits: Sequence[str]
) -> int:
    """Join staged ranks to their targets (cell, user) and replace the model's ranks partition."""
    targets = read_table(spark, lake, S.TARGETS, dataset)
    staged = None
    for split in splits:
        part = (
            spark.read.schema(STAGED_SCHEMA)  # known: no job to infer it from the files
            .parquet(f"{staging}/{split}")  # one part per scoring process
            .withColumn(S.SPLIT, F.lit(split))
        )
        staged = part if staged is None else staged.unionByName(part)
    ranks = targets.join(staged, [S.SPLIT, S.SEQ]).select(
        S.DATASET, S.SPLIT, S.CELL, F.lit(model).alias(S.MODEL), S.USER_ID, S.SEQ, S.RANK, S.TIED
    )
    written = write_dataset(ranks, lake, S.RANKS, dataset, model=model)
    drop_staging(staging)
    return written


@saves_tracebacks
@dataclass(frozen=True)
class ScoreJob:
    """What each scoring process needs: the run's model, the splits' files, where to stage."""

    model: str
    conf: Any
    tracking_uri: str
    run_id: str
    splits: list[str]
    catalogue_urls: dict[str, list[str]]
    event_urls: dict[str, list[str]]
    texts: dict[str, list[str] | None]
    staging: str
    where: str


def score_process(job: ScoreJob) -> None:
    """One scoring process: the model loaded from MLflow once, every ``world``-th user block of
    each split ranked into this process's part of the staged ranks."""

    from intent_spark.lake.readers import read_catalogue
    from intent_spark.train.distributed import (
        process_device,
        process_rank,
        say,
        silent,
        with_texts,
        write_text,
    )

    rank, world = process_rank()
    device = process_device()
    cls = resolve(job.model)
    counts: dict[str, int] = {}
    seconds: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = download_artifacts(job.tracking_uri, job.run_id, "model", tmp)
        for split in job.splits:
            catalogue = read_catalogue(job.catalogue_urls[split])
            if job.texts.get(split) is not None:
                catalogue = with_texts(catalogue, job.texts[split])  # type: ignore[arg-type]
            fitted = load_model(cls, folder / split, catalogue, job.conf, device)
            blocks = (b for i, b in enumerate(user_blocks(job.event_urls[split])) if i % world == rank)
            line = partial(say, f"{job.where} {split}") if rank == 0 else silent
            seconds[split], counts[split] = rank_split(
                fitted,
                blocks,
                job.conf,
                device,
                staged_part(job.staging, split, rank),
                None,
                line,
                where=f"{job.where} {split}",
            )
    write_text(
        f"{job.staging}/counts/rank-{rank:05d}.json", json.dumps({"targets": counts, "seconds": seconds})
    )
