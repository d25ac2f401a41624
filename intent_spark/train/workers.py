"""The process workers of TorchDistributor: what each training or scoring process runs, and
the job it is given (nothing in a job needs Spark). Rank 0 saves the model and speaks for all."""

from __future__ import annotations

import json
import tempfile
import time
from contextlib import closing
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from intent_spark.core import schema as S
from intent_spark.core.errors import IntentError
from intent_spark.lake.tracking import download_artifacts
from intent_spark.plugin import TrainingData
from intent_spark.train.build import build_model, load_model, plugin_call
from intent_spark.train.distributed import (
    copy_folder,
    error_line,
    process_device,
    process_rank,
    say,
    silent,
    with_texts,
    write_text,
)
from intent_spark.train.readers import read_catalogue, training_batches, user_blocks
from intent_spark.train.registry import resolve


def open_batches(
    urls: list[str],
    shard: tuple[int, int],
    reader: str,
    batch_size: int,
    shuffle_buffer: int,
    seed: int,
    epochs: int | None,
):
    """The reader (``auto``, ``arrow`` or ``petastorm``) over this process's shard (rank,
    processes) of one split's training sequences; closing it stops the reader."""
    return closing(
        training_batches(urls, batch_size, shuffle_buffer, seed, epochs, shard=shard, reader=reader)
    )


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


def fit_processes(jobs: list[FitJob]) -> None:
    """One training process of every split's fit, one split after the other in one process group
    (one launch for the stage, not one per split): each model built from the same seed, fitted on
    this process's shard with gradients averaged by DDP; rank 0 saves it and its numbers under
    the job's ``staging``."""
    import torch.distributed as dist

    device = process_device()
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    try:
        for job in jobs:
            try:
                _fit_split(job, device)
            except IntentError:
                raise
            except Exception as exc:  # named by its split: the launch's own ``where`` names none
                raise IntentError(error_line(exc, job.where)) from exc
    finally:
        dist.destroy_process_group()


def _fit_split(job: FitJob, device) -> None:
    import torch
    import torch.distributed as dist

    from intent_spark.plugin.training import counting_data_parallel_loops

    rank, world = process_rank()
    cls = resolve(job.model)
    catalogue = read_catalogue(job.catalogue_urls, job.conf.reader)
    if job.texts is not None:
        catalogue = with_texts(catalogue, job.texts)
    fitted = build_model(cls, catalogue, job.conf, device)
    seed = job.conf.scoring(cls.name).seed
    training = TrainingData(
        partial(open_batches, job.sequence_urls, (rank, world), job.conf.reader),
        context=job.conf.context,
        seed=seed,
        device=device,
        progress=partial(say, job.where) if rank == 0 else silent,
        rank=rank,
        world_size=world,
    )
    torch.manual_seed(seed)
    with counting_data_parallel_loops() as loops:
        stats = plugin_call(job.where, "fit", fitted.fit, training) or {}
    if loops.count == 0:
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
    rank, world = process_rank()
    device = process_device()
    cls = resolve(job.model)
    counts: dict[str, int] = {}
    seconds: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = download_artifacts(job.tracking_uri, job.run_id, "model", tmp)
        for split in job.splits:
            catalogue = read_catalogue(job.catalogue_urls[split], job.conf.reader)
            if job.texts.get(split) is not None:
                catalogue = with_texts(catalogue, job.texts[split])  # type: ignore[arg-type]
            fitted = load_model(cls, folder / split, catalogue, job.conf, device)
            blocks = (
                b
                for i, b in enumerate(user_blocks(job.event_urls[split], job.conf.reader))
                if i % world == rank
            )
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
