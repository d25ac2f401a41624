"""A trained model's answers as a submission file (SPEC 9), for a model's list to travel as
any outside model's does: ``intent score --export``."""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass

import numpy as np
from pyspark.sql import functions as F

from intent_spark.core import schema as S
from intent_spark.core.datasets import DatasetRef
from intent_spark.core.errors import IntentError
from intent_spark.lake.context import Lake
from intent_spark.lake.tracking import download_artifacts
from intent_spark.plugin import pick_device
from intent_spark.split.populations import SPLITS
from intent_spark.train.build import load_model, split_catalogue
from intent_spark.train.conf import ModelsConf
from intent_spark.train.plugin_errors import saves_tracebacks
from intent_spark.train.readers import split_files, user_blocks
from intent_spark.train.score import drop_staging, scoring_run


@dataclass(frozen=True)
class TopItemsExport:
    """Where ``intent score --export`` writes, and what: each target of ``split`` with its top ``k``
    items, as Parquet or JSON Lines by ``out``'s suffix."""

    out: str
    split: str = S.TEST
    k: int = 100


@saves_tracebacks
def export_top_items(
    lake: Lake,
    dataset: DatasetRef,
    model: str,
    conf: ModelsConf,
    export: TopItemsExport,
    *,
    run_id: str | None = None,
) -> int:
    """A trained model's answers in the submission format (SPEC 9): every target of the split
    with its top k item ids (a tie group reaching past k listed whole) and their scores,
    ordered by ``target_id``. Returns the rows."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from intent_spark.lake.files import filesystem, write_single_file
    from intent_spark.split.targets import target_id
    from intent_spark.train.ranker import ModelFault, top_items

    progress = lake.progress
    out, split, k = export.out, export.split, export.k
    fmt = "parquet" if out.endswith(".parquet") else "json" if out.endswith((".jsonl", ".json")) else None
    if fmt is None:
        raise IntentError(f"--export {out}: write a .parquet or .jsonl file")
    if k < 1:
        raise IntentError(f"--top-k {k}: list at least one item")
    cls, run = scoring_run(lake, dataset, model, conf, run_id=run_id)
    name = cls.name
    if split not in run.data.params.get("splits", ",".join(SPLITS)).split(","):
        raise IntentError(f"{dataset} {name}: MLflow run {run.info.run_id} has no {split} split")
    device = pick_device()
    rows = lake.read(S.CATALOGUE, dataset).where(F.col(S.SPLIT) == split)
    index = rows.select(S.ITEM_INDEX, S.ITEM_ID).toPandas()  # one row per item, never events
    item_ids = np.empty(int(index[S.ITEM_INDEX].max()) + 1, dtype=object)
    item_ids[index[S.ITEM_INDEX].to_numpy()] = index[S.ITEM_ID].to_numpy()
    expected = lake.read(S.TARGETS, dataset).where(F.col(S.SPLIT) == split).count()
    staging = f"{lake.root.rstrip('/')}/_staging/export/{dataset}/{name}"
    fs, path = filesystem(f"{staging}/{split}.parquet")
    schema = pa.schema(
        [(S.SEQ, pa.int64()), ("items", pa.list_(pa.string())), ("scores", pa.list_(pa.float64()))]
    )
    where = f"{dataset} {name} {split}"
    settings = conf.scoring(name)
    start, last = time.monotonic(), [time.monotonic()]

    def report(done: int) -> None:
        if time.monotonic() - last[0] >= 10 or done == expected:
            progress(
                f"{where}: top {k} of {done:,}/{expected:,} targets, {done / max(time.monotonic() - start, 1e-9):,.0f}/s"
            )
            last[0] = time.monotonic()

    written = 0
    try:
        with tempfile.TemporaryDirectory() as tmp:
            folder = download_artifacts(lake.tracking_store("score"), run.info.run_id, "model", tmp)
            fitted = load_model(
                cls, folder / split, split_catalogue(lake, dataset, split, conf.reader), conf, device
            )
            urls = split_files(lake, S.SCORE_EVENTS, dataset, split)
            fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
            listed = top_items(
                fitted,
                user_blocks(urls, conf.reader),
                context=conf.context,
                k=k,
                chunk_items=settings.score_chunk_items_gpu
                if device.type == "cuda"
                else settings.score_chunk_items,
                device=device,
                progress=report,
            )
            with fs.open_output_stream(path) as sink, pq.ParquetWriter(sink, schema) as writer:
                batch: dict[str, list] = {S.SEQ: [], "items": [], "scores": []}
                try:
                    for seq, indices, values in listed:
                        batch[S.SEQ].append(seq)
                        batch["items"].append(item_ids[indices].tolist())
                        batch["scores"].append(values.tolist())
                        if len(batch[S.SEQ]) >= 10_000:
                            writer.write_table(pa.table(batch, schema=schema))
                            written += len(batch[S.SEQ])
                            batch = {S.SEQ: [], "items": [], "scores": []}
                except ModelFault as fault:
                    raise IntentError(f"{where}: {fault}; nothing written") from None
                writer.write_table(pa.table(batch, schema=schema))
                written += len(batch[S.SEQ])
        if written != expected:
            raise IntentError(f"{where}: listed {written:,} targets but the split has {expected:,}")
        targets = lake.read(S.TARGETS, dataset).where(F.col(S.SPLIT) == split)
        named = targets.select(
            S.SEQ,
            target_id(F.col(S.DATASET), F.col(S.SPLIT), F.col(S.USER_ID), F.col(S.SEQ)).alias(S.TARGET_ID),
        )
        answers = lake.spark.read.parquet(f"{staging}/{split}.parquet").join(named, S.SEQ)
        rows_out = write_single_file(
            answers.select(S.TARGET_ID, "items", "scores").orderBy(S.TARGET_ID), out, fmt
        )
    finally:
        drop_staging(staging)
    progress(f"{where}: {rows_out:,} answers (top {k}) in {out}")
    return rows_out
