"""A submission's rows checked one by one: each row's first fault (``_kind, _field, _reason``),
an accepted row's target rank, and the name a submission is scored under."""

from __future__ import annotations

import re
from collections.abc import Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from intent_spark.core import schema as S
from intent_spark.core.errors import IntentError
from intent_spark.lake.spark_line import array_position, array_remove

ITEMS, SCORES = "items", "scores"
OPTIONAL_STRINGS = (S.DATASET, S.SPLIT)
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
# One fault a row may have: (condition, kind, field, reason), tried in list order.
Check = tuple[Column, "Column | str", "Column | str", Column]


def first_fault(faults: Sequence[Check]) -> list[Column]:
    """``_kind, _field, _reason`` of the first fault that holds (nulls when none)."""
    kind = field = reason = None
    for condition, name, column, text in reversed(faults):
        kind = (
            F.when(condition, F.lit(name)) if kind is None else F.when(condition, F.lit(name)).otherwise(kind)
        )
        field = (
            F.when(condition, F.lit(column))
            if field is None
            else F.when(condition, F.lit(column)).otherwise(field)
        )
        reason = F.when(condition, text) if reason is None else F.when(condition, text).otherwise(reason)
    assert kind is not None and field is not None and reason is not None
    return [kind.alias("_kind"), field.alias("_field"), reason.alias("_reason")]


def checked_rows(
    rows: DataFrame, known: DataFrame, catalogue_ids: DataFrame, n_items: int, dataset: str, split: str
) -> DataFrame:
    """Each row with the first fault that holds (``_kind, _field, _reason``; null when the row
    is accepted) and, where its id is known, its target's ``split, seq, cell, user_id, item_id``.
    A row's type fault comes first; a list's items are checked against the catalogue only in
    one exploded anti-join."""
    items = F.col(ITEMS)
    exploded = rows.where(items.isNotNull()).select(S.LINE, F.posexplode(items).alias("_pos", S.ITEM_ID))
    unknown = (
        # the catalogue goes to every task: the list items are looked up where they are read,
        # never shuffled (only the few unknown ones are grouped by line)
        exploded.join(F.broadcast(catalogue_ids), S.ITEM_ID, "left_anti")
        .groupBy(S.LINE)
        .agg(F.min(F.struct("_pos", S.ITEM_ID)).getField(S.ITEM_ID).alias("_unknown"))
    )
    faults = _target_faults(dataset, split) + _list_faults(n_items, split)
    joined = rows.join(known, S.TARGET_ID, "left").join(unknown, S.LINE, "left")
    return joined.select(
        *[c for c in joined.columns if c not in ("_kind", "_field", "_reason", "_unknown")],
        *first_fault(faults),
    )


def _target_faults(dataset: str, split: str) -> list[Check]:
    """The faults of a row's own fields and target, in order: its type fault (from reading),
    no target_id, another dataset or split, an unknown target, a target submitted twice."""
    copies = F.count(F.lit(1)).over(_by_target())
    text = F.format_string
    return [
        (F.col("_kind").isNotNull(), F.col("_kind"), F.col("_field"), F.col("_reason")),
        (F.col(S.TARGET_ID).isNull(), "no target_id", S.TARGET_ID, F.lit("the row has no target_id")),
        (
            F.col(f"_{S.DATASET}").isNotNull() & (F.col(f"_{S.DATASET}") != dataset),
            "another dataset",
            S.DATASET,
            text(f"a row of dataset %s; this submission is for {dataset}", F.col(f"_{S.DATASET}")),
        ),
        (
            F.col(f"_{S.SPLIT}").isNotNull() & (F.col(f"_{S.SPLIT}") != split),
            "another split",
            S.SPLIT,
            text(f"a row of split %s; this submission is for {split}", F.col(f"_{S.SPLIT}")),
        ),
        (
            F.col("_target_split").isNull(),
            "unknown target_id",
            S.TARGET_ID,
            text("unknown target_id %s", F.col(S.TARGET_ID)),
        ),
        (
            F.col("_target_split") != split,
            "another split",
            S.TARGET_ID,
            text(
                f"target_id %s is a target of the %s split; this submission is for {split}",
                F.col(S.TARGET_ID),
                F.col("_target_split"),
            ),
        ),
        (
            copies > 1,
            "target submitted more than once",
            S.TARGET_ID,
            text("target_id %s has %d rows (all are rejected)", F.col(S.TARGET_ID), copies),
        ),
    ]


def _list_faults(n_items: int, split: str) -> list[Check]:
    """The faults of a row's list and scores, in order: empty, longer than the catalogue, an
    item repeated or not in the catalogue (``_unknown``), scores of another length, not finite
    or rising."""
    items = F.col(ITEMS)
    scores = F.col(SCORES)
    n = F.size(items)
    repeated = F.filter(items, lambda x, i: array_position(items, x) <= i)
    rising = F.filter(
        F.sequence(F.lit(2), F.greatest(n, F.lit(2))),
        lambda i: (i <= n) & (F.try_element_at(scores, i) > F.try_element_at(scores, i - 1)),
    )
    text = F.format_string
    return [
        (items.isNull() | (n == 0), "empty list", ITEMS, F.lit("the list of items is empty")),
        (
            n > n_items,
            "list longer than the catalogue",
            ITEMS,
            text(f"a list of %d items; the catalogue has {n_items:,}", n),
        ),
        (
            # a hashed distinct first: the pairwise search (quadratic in the list) runs only on a
            # list that has a repeat, never on a whole catalogue's clean list
            (F.size(F.array_distinct(items)) < n) & (F.size(repeated) > 0),
            "item repeated in a list",
            ITEMS,
            text("item %s appears more than once", F.element_at(repeated, 1)),
        ),
        (
            F.col("_unknown").isNotNull(),
            "item not in the catalogue",
            ITEMS,
            text(f"item %s is not in the {split} split's catalogue", F.col("_unknown")),
        ),
        (
            scores.isNotNull() & (F.size(scores) != n),
            "scores of another length",
            SCORES,
            text("%d scores for %d items", F.size(scores), n),
        ),
        (
            scores.isNotNull()
            & F.exists(scores, lambda x: x.isNull() | F.isnan(x) | (F.abs(x) == F.lit(float("inf")))),
            "score not finite",
            SCORES,
            F.lit("scores hold a null, NaN or infinity"),
        ),
        (
            scores.isNotNull() & (F.size(rising) > 0),
            "scores rising",
            SCORES,
            text(
                "scores rise at position %d (%s after %s)",
                F.element_at(rising, 1),
                F.element_at(scores, F.element_at(rising, 1)).cast("string"),
                F.element_at(scores, F.element_at(rising, 1) - 1).cast("string"),
            ),
        ),
    ]


def _by_target():
    from pyspark.sql import Window

    return Window.partitionBy(S.TARGET_ID)


def target_ranks(accepted: DataFrame) -> DataFrame:
    """``rank, tied`` of each accepted row's target: its position in the list, the expected
    position within its tie group where scores are given, +inf when it is not listed."""
    items, scores = F.col(ITEMS), F.col(SCORES)
    position = array_position(items, F.col(S.ITEM_ID)).cast("int")
    own = F.element_at(scores, F.greatest(position, F.lit(1)))
    first = array_position(scores, own)
    # the scores equal to the target's: a lambda comparing each score with ``own`` would search
    # the list for the target once per score (quadratic); removing them is one pass
    group = F.size(scores) - F.size(array_remove(scores, own))
    beyond = position == 0
    rank = (
        F.when(beyond, F.lit(float("inf")))
        .when(scores.isNull(), position.cast("double"))
        .otherwise(first + (group - 1) / 2.0)
    )
    tied = F.when(beyond | scores.isNull(), F.lit(0)).otherwise(group - 1)
    return accepted.select(S.TARGET_ID, rank.alias(S.RANK), tied.cast("long").alias(S.TIED))


def check_name(name: str) -> None:
    from intent_spark.train.registry import registered

    if not NAME_PATTERN.fullmatch(name):
        raise IntentError(
            f"--name {name!r}: letters, digits, '_', '.' and '-' only, starting with a letter or digit"
        )
    if name in registered():
        raise IntentError(
            f"--name {name}: a registered model has that name (its ranks would be replaced); choose another"
        )
