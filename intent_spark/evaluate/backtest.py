"""Backtesting (SPEC 10): does a model's lead hold at other dates?

The backtest origins of a dataset (``amazon_hk.origin3`` .. ``origin1``) are the whole INTENT
split again on the events before each of the last K month boundaries before the data's end,
with the same rule and holdout seed, scored by the same models. Here each origin's test cells
are put side by side with the full data's ("end"), and the model order of every cell is compared
between consecutive origins by Kendall tau-b, with a paired user bootstrap: a user's weight in
a replicate is the same at every origin (``metrics.bootstrap_weight``), so the interval says how
much the order moves with the users drawn, not with independent noise at each origin.

Written as two small CSVs under ``LAKE/reports/compare``: ``<dataset>.origins.csv`` (each
origin's date and cutoffs) and ``<dataset>.backtest.csv`` (tau per cell and consecutive pair).
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pandas as pd
from pyspark.sql import functions as F

from intent_spark.core import schema as S
from intent_spark.core.datasets import TRANSFER_SEPARATOR, origin_variant
from intent_spark.evaluate.agreement import SETTING, VALUE, protocol_agreement
from intent_spark.lake.context import Lake
from intent_spark.lake.reports import compare_folder
from intent_spark.lake.tables import backtest_origin

END = "end"  # the full data: the benchmark as run
SETTING_SEPARATOR = "|"
ORIGIN_COLUMNS = (S.DATASET, "variant", "origin", "label", "test_cutoff", "val_cutoff", "train_share")


def origin_label(origin: datetime | None) -> str:
    return END if origin is None else f"{origin:%Y-%m-%d}"


def origin_rows(lake: Lake, dataset: str, origins: int) -> pd.DataFrame:
    """One row per origin, oldest first, then the full data: its variant, date and cutoffs."""
    events = lake.read(S.EVENTS, dataset)
    splits = lake.read(S.SPLITS)
    rows = []
    for back in [*range(origins, 0, -1), None]:
        variant = dataset if back is None else origin_variant(dataset, back)
        at = None if back is None else backtest_origin(events, back)
        of_variant = splits.where(F.col(S.DATASET) == variant).collect()  # a row per split
        cutoffs = {r[S.SPLIT]: r for r in of_variant}
        test, val = cutoffs.get(S.TEST), cutoffs.get(S.VAL)
        rows.append(
            (
                dataset,
                variant,
                at,
                origin_label(at),
                None if test is None else test[S.CUTOFF],
                None if val is None else val[S.CUTOFF],
                None if test is None else test["train_share"],
            )
        )
    return pd.DataFrame(rows, columns=list(ORIGIN_COLUMNS))


def backtest_agreement(
    lake: Lake, dataset: str, origins: pd.DataFrame, *, replicates: int, seed: int = 0
) -> pd.DataFrame:
    """Kendall tau-b of the test model order (NDCG@10) of every cell between consecutive origins
    (the last pair: origin 1 and the full data), with paired user-bootstrap intervals."""
    labels = dict(zip(origins["variant"], origins["label"], strict=True))
    label = F.lit(None).cast("string")
    for variant, text in labels.items():
        label = F.when(F.col(S.DATASET) == variant, F.lit(text)).otherwise(label)
    users = (
        lake.read(S.USER_METRICS)
        .where(
            F.col(S.DATASET).isin(list(labels))
            & (F.col(S.SPLIT) == S.TEST)
            & ~F.col(S.MODEL).contains(TRANSFER_SEPARATOR)
        )
        .select(
            F.concat_ws(SETTING_SEPARATOR, label, F.col(S.CELL)).alias(SETTING),
            S.MODEL,
            S.USER_ID,
            F.col("ndcg_10").alias(VALUE),
        )
    )
    settings = users.where(F.col(VALUE).isNotNull()).select(SETTING).distinct()
    present = {r[SETTING] for r in settings.collect()}  # a row per cell and origin, never per user
    ordered = list(origins["label"])
    pairs = [
        (f"{a}{SETTING_SEPARATOR}{cell}", f"{b}{SETTING_SEPARATOR}{cell}")
        for cell in S.CELLS
        for a, b in zip(ordered, ordered[1:], strict=False)
        if {f"{a}{SETTING_SEPARATOR}{cell}", f"{b}{SETTING_SEPARATOR}{cell}"} <= present
    ]
    columns = [S.DATASET, S.CELL, "origin_a", "origin_b", "n_models", "tau", "ci_low", "ci_high"]
    if not pairs:
        return pd.DataFrame(columns=[*columns, "models_a", "models_b"])
    table = protocol_agreement(users, pairs, replicates=replicates, seed=seed)
    split_a = table.pop("setting_a").str.split(SETTING_SEPARATOR, n=1, expand=True)
    split_b = table.pop("setting_b").str.split(SETTING_SEPARATOR, n=1, expand=True)
    table.insert(0, S.DATASET, dataset)
    table.insert(1, S.CELL, split_a[1])
    table.insert(2, "origin_a", split_a[0])
    table.insert(3, "origin_b", split_b[0])
    return table


def write_backtest(lake: Lake, dataset: str, origins: int, *, replicates: int, seed: int = 0) -> Path:
    """``LAKE/reports/compare/<dataset>.origins.csv`` and ``<dataset>.backtest.csv``; returns
    the latter."""
    folder = compare_folder(lake.root)
    folder.mkdir(parents=True, exist_ok=True)
    table = origin_rows(lake, dataset, origins)
    table.to_csv(folder / f"{dataset}.origins.csv", index=False)
    path = folder / f"{dataset}.backtest.csv"
    backtest_agreement(lake, dataset, table, replicates=replicates, seed=seed).to_csv(path, index=False)
    return path
