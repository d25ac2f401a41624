"""Seeded hash holdout of users (SPEC 3.1): who is a *new* user, never used for training."""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from intent_spark.core import schema as S

HASH_BUCKETS = 1 << 30


def hash_fraction(user_id: Column, salt: str) -> Column:
    """A number in [0, 1) that is a fixed function of (salt, user id): no randomness, no order."""
    return F.pmod(F.xxhash64(F.lit(salt), user_id), F.lit(HASH_BUCKETS)).cast("double") / HASH_BUCKETS


def holdout_salt(seed: int, key: str, split: str) -> str:
    """Different splits and seeds hold out independent sets of users. ``key`` is the source the
    users come from (``lake.tables.ingested_source``, never a variant's name): a variant
    (``amazon_hk.seed1``) or another item level (``cct_mcc``) of a source holds out the same
    users as the source under the same seed."""
    return f"intent-holdout:{seed}:{key}:{split}"


def is_held_out(user_id: Column, fraction: float, seed: int, key: str, split: str) -> Column:
    return hash_fraction(user_id, holdout_salt(seed, key, split)) < F.lit(fraction)


def assign_holdout(
    users: DataFrame, *, fraction: float, seed: int, dataset: str, split: str, key: str
) -> DataFrame:
    """One row per distinct user of ``users`` (any frame with ``user_id``): HOLDOUT_SCHEMA.
    ``key`` names the users' source for the hash (``holdout_salt``)."""
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"holdout_fraction must be in (0, 1), got {fraction}")
    return (
        users.select(S.USER_ID)
        .distinct()
        .select(
            F.lit(dataset).alias(S.DATASET),
            F.lit(split).alias(S.SPLIT),
            S.USER_ID,
            is_held_out(F.col(S.USER_ID), fraction, seed, key, split).alias(S.IS_NEW),
        )
    )


def sample_users(users: DataFrame, n: int, seed: int, key: str, split: str) -> DataFrame:
    """The ``n`` users with the smallest seeded hash (all if fewer): a fixed sample.

    ``orderBy().limit()`` runs as a per-partition top-n merged on the driver (n rows), so it
    never sorts all users in one partition.
    """
    salt = f"intent-sample:{seed}:{key}:{split}"
    return (
        users.select(S.USER_ID)
        .distinct()
        .withColumn("_h", F.xxhash64(F.lit(salt), F.col(S.USER_ID)))
        .orderBy("_h", S.USER_ID)
        .limit(n)
        .select(S.USER_ID)
    )
