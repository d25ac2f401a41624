"""Transfer across sources (issue 8): a content model trained on one source ranks another's
catalogue, where every item is new to it.

Items meet through metadata tokens. A target item's token is looked up in the source model's
vocabulary as it is (``brand:acme``) and, failing that, word by word through its value
(``category_code:kitchen.knife`` -> ``kitchen``, ``knife``), since sources name their fields
differently but share words. Only SASRec-F transfers: the ID-only models know no item there.
"""

from __future__ import annotations

from collections.abc import Iterable

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from intent_spark import schema as S
from intent_spark.ingest.tokens import MIN_WORD_LENGTH, WORD_SPLIT
from intent_spark.io import read_table
from intent_spark.model_inputs import first_token_ids, token_vocabulary

TRANSFER_MODELS = ("sasrec_f",)
# A token's own match comes before the matches of its words.
WORDS_PER_TOKEN = 1000


def transfer_model(model: str, source: str) -> str:
    """The name a transferred model's ranks carry in the target's tables: ``sasrec_f@amazon_hk``."""
    return f"{model}@{source}"


def is_transfer(model: str) -> bool:
    return "@" in model


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


def source_vocabulary(spark: SparkSession, lake: str, source: str) -> DataFrame:
    """The token ids the source's test-split content model was trained with."""
    catalogue = read_table(spark, lake, S.CATALOGUE, source).where(F.col(S.SPLIT) == S.TEST)
    items = read_table(spark, lake, S.ITEMS, source).select(S.ITEM_ID, S.TOKENS)
    return token_vocabulary(catalogue, items)


def target_token_ids(spark: SparkSession, lake: str, source: str, target: str, max_tokens: int) -> DataFrame:
    catalogue = read_table(spark, lake, S.CATALOGUE, target).where(F.col(S.SPLIT) == S.TEST)
    items = read_table(spark, lake, S.ITEMS, target).select(S.ITEM_ID, S.TOKENS)
    return transferred_token_ids(catalogue, items, source_vocabulary(spark, lake, source), max_tokens)


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


def shared_cutoffs(spark: SparkSession, lake: str, datasets: Iterable[str]) -> list:
    """The test-split boundaries admissible in every one of the datasets (small: one row each)."""
    rows = (
        read_table(spark, lake, S.SPLITS)
        .where(F.col(S.DATASET).isin(list(datasets)) & (F.col(S.SPLIT) == S.TEST))
        .select("admissible")
        .collect()
    )
    sets = [set(r.admissible) for r in rows]
    return sorted(set.intersection(*sets)) if sets else []
