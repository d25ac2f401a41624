"""Transfer across sources: a content model trained on one source ranks another's
catalogue, where every item is new to it.

Items meet through metadata tokens. A target item's token is looked up in the source model's
vocabulary as it is (``brand:acme``) and, failing that, word by word through its value
(``category_code:kitchen.knife`` -> ``kitchen``, ``knife``), since sources name their fields
differently but share words. Only SASRec-F transfers: the ID-only models know no item there.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterable

import numpy as np
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from intent_spark.core import schema as S
from intent_spark.core.datasets import DatasetRef
from intent_spark.core.errors import IntentError
from intent_spark.ingest.tokens import MIN_WORD_LENGTH, WORD_SPLIT
from intent_spark.lake.context import Lake
from intent_spark.lake.tables import source_table
from intent_spark.lake.tracking import download_artifacts, find_run
from intent_spark.plugin import Catalogue, load_state, pick_device
from intent_spark.train.conf import ModelsConf
from intent_spark.train.inputs import build_model_inputs, first_token_ids, token_vocabulary
from intent_spark.train.readers import read_catalogue, split_files, user_blocks
from intent_spark.train.score import write_ranks
from intent_spark.train.workers import rank_split, staged_part
from models.sasrec import SASRecF, SASRecFModel

# A token's own match comes before the matches of its words.
WORDS_PER_TOKEN = 1000


def token_keys(items: DataFrame) -> DataFrame:
    """``item_id, _pos, _key``: each token itself, then the words of its value, in token order."""
    exploded = items.select(S.ITEM_ID, F.posexplode(S.TOKENS).alias("_p", "_token"))
    value = F.regexp_replace(F.col("_token"), r"^[^:]*:", "")
    words = F.filter(F.split(F.lower(value), WORD_SPLIT), lambda w: F.length(w) >= MIN_WORD_LENGTH)
    keys = F.concat(F.array(F.col("_token")), words)
    return exploded.select(S.ITEM_ID, "_p", F.posexplode(keys).alias("_sub", "_key")).select(
        S.ITEM_ID, (F.col("_p") * WORDS_PER_TOKEN + F.col("_sub")).alias("_pos"), "_key"
    )


def transferred_token_ids(
    target_catalogue: DataFrame, target_items: DataFrame, vocabulary: DataFrame, max_tokens: int
) -> DataFrame:
    """``item_index, token_ids`` of every target catalogue item in the source's token ids
    (0-padded; all zero when no token or word is known to the source)."""
    keys = token_keys(target_items.join(target_catalogue.select(S.ITEM_ID), S.ITEM_ID))
    matched = keys.join(F.broadcast(vocabulary.withColumnRenamed("_token", "_key")), "_key")
    known = matched.groupBy(S.ITEM_ID, "_token_id").agg(F.min("_pos").alias("_pos"))
    ids = first_token_ids(known, max_tokens)
    return (
        target_catalogue.select(S.ITEM_ID, S.ITEM_INDEX)
        .join(ids, S.ITEM_ID, "left")
        .select(
            S.ITEM_ID,
            S.ITEM_INDEX,
            F.coalesce(F.col(S.TOKEN_IDS), F.array_repeat(F.lit(0), max_tokens)).alias(S.TOKEN_IDS),
        )
    )


def source_vocabulary(lake: Lake, source: DatasetRef) -> DataFrame:
    """The token ids the source's test-split content model was trained with."""
    catalogue = lake.read(S.CATALOGUE, source).where(F.col(S.SPLIT) == S.TEST)
    items = source_table(lake.spark, lake.root, S.ITEMS, source).select(S.ITEM_ID, S.TOKENS)
    return token_vocabulary(catalogue, items)


def target_token_ids(lake: Lake, source: DatasetRef, target: DatasetRef, max_tokens: int) -> DataFrame:
    """``item_id, item_index, token_ids`` of the target's test catalogue in the source's token ids."""
    catalogue = lake.read(S.CATALOGUE, target).where(F.col(S.SPLIT) == S.TEST)
    items = source_table(lake.spark, lake.root, S.ITEMS, target).select(S.ITEM_ID, S.TOKENS)
    return transferred_token_ids(catalogue, items, source_vocabulary(lake, source), max_tokens)


def coverage(targets: DataFrame, token_ids: DataFrame) -> DataFrame:
    """Per cell: ``n_targets`` and ``n_with_tokens``, the targets whose item has a token the
    source model knows (the others it cannot score)."""
    has_tokens = F.exists(S.TOKEN_IDS, lambda t: t > 0)
    known = token_ids.where(has_tokens).select(S.ITEM_ID, F.lit(1).alias("_known"))
    return (
        targets.join(known, S.ITEM_ID, "left")
        .groupBy(S.CELL)
        .agg(F.count(F.lit(1)).alias("n_targets"), F.count("_known").alias("n_with_tokens"))
    )


def shared_cutoffs(lake: Lake, datasets: Iterable[str]) -> list:
    """The test-split boundaries admissible in every one of the datasets (small: one row each)."""
    rows = (
        lake.read(S.SPLITS)
        .where(F.col(S.DATASET).isin(list(datasets)) & (F.col(S.SPLIT) == S.TEST))
        .select("admissible")
        .collect()
    )
    sets = [set(r.admissible) for r in rows]
    return sorted(set.intersection(*sets)) if sets else []


def score_transfer(
    lake: Lake, source: DatasetRef, target: DatasetRef, conf: ModelsConf, *, model: str = "sasrec_f"
) -> int:
    """Rank ``target``'s test targets with ``model`` trained on ``source``'s test split (its
    newest run); write them as ``model@source`` ranks of the target and the token coverage to
    ``transfers``. Returns the ranks written."""
    import torch

    from intent_spark.core.datasets import TRANSFER_MODELS, transfer_model

    progress = lake.progress
    if model not in TRANSFER_MODELS:
        raise IntentError(
            f"{model} cannot transfer: only {', '.join(TRANSFER_MODELS)} scores items it never saw"
        )
    tracking_uri = lake.tracking_store("transfer")
    name = transfer_model(model, source)
    run = find_run(tracking_uri, source, model)
    build_model_inputs(lake, target, context=conf.context, max_tokens=conf.max_tokens)
    source_arrays = read_catalogue(split_files(lake, S.CATALOGUE, source, S.TEST), conf.reader)
    token_ids = target_token_ids(lake, source, target, conf.max_tokens).cache()
    # One row per target catalogue item (items, not events), as read_catalogue reads it.
    rows = token_ids.select(S.ITEM_INDEX, S.TOKEN_IDS).toPandas().sort_values(S.ITEM_INDEX)
    tokens = np.zeros((len(rows) + 1, conf.max_tokens), dtype=np.int64)
    if len(rows):
        tokens[rows[S.ITEM_INDEX].to_numpy()] = np.stack(rows[S.TOKEN_IDS].to_numpy())
    device = pick_device()
    # No item of the target is a trained id of the source: the model scores by tokens alone,
    # with the source's token vocabulary.
    settings = conf.settings(model)
    fitted = SASRecFModel(Catalogue(np.zeros(len(rows) + 1, dtype=np.int64), tokens), settings, device)
    network = SASRecF(len(rows), 0, settings, torch.from_numpy(tokens), source_arrays.n_tokens)
    with tempfile.TemporaryDirectory() as tmp:
        folder = download_artifacts(tracking_uri, run.info.run_id, f"model/{S.TEST}", tmp)
        state = load_state(folder / "state.pt", device)
    state["id_embedding.weight"] = torch.zeros_like(network.id_embedding.weight)
    state["item_tokens"] = network.item_tokens
    network.load_state_dict(state)
    fitted.network = network.to(device).eval()
    targets = lake.read(S.TARGETS, target).where(F.col(S.SPLIT) == S.TEST)
    staging = f"{lake.root.rstrip('/')}/_staging/ranks/{target}/{name}"
    rank_split(
        fitted,
        user_blocks(split_files(lake, S.SCORE_EVENTS, target, S.TEST), conf.reader),
        conf,
        device,
        staged_part(staging, S.TEST),
        targets.count(),
        lambda line: progress(f"{target} {name}: {line}"),
        where=f"{target} {name}",
    )
    written = write_ranks(lake, target, name, staging, [S.TEST])
    shared = shared_cutoffs(lake, (source, target))
    reached = coverage(targets, token_ids).select(
        F.lit(target).alias(S.DATASET),
        F.lit(source).alias(S.SOURCE),
        F.lit(model).alias(S.MODEL),
        S.CELL,
        "n_targets",
        "n_with_tokens",
        F.array(*[F.lit(c) for c in shared]).cast("array<timestamp>").alias("shared_cutoffs"),
    )
    lake.write(reached, S.TRANSFERS, target, source=source)
    token_ids.unpersist()
    return written
