"""The report's inputs, read once from the lake: the metrics, the comparisons adjusted again over
the family the report shows, and each dataset's split summary. Only small aggregate tables:
this runs on the driver whatever the size of the events."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
from pyspark.sql import functions as F

from intent_spark.core import schema as S
from intent_spark.core.datasets import TRANSFER_SEPARATOR, is_transfer, parse_dataset
from intent_spark.evaluate.corrections import (
    DEFAULT_CORRECTION,
    adjust_p_values,
)
from intent_spark.evaluate.metrics import ADJUSTED_COLUMNS
from intent_spark.lake.context import Lake

# The family a report adjusts over: every comparison of one kind and split it shows, whatever
# the dataset (a report of 8 datasets x 7 cells x 10 pairs is one family of 560 tests).
REPORT_FAMILY = (S.SPLIT, "kind", "metric")


@dataclass
class Results:
    """Everything the report shows, as small pandas frames and the split summaries."""

    metrics: pd.DataFrame
    comparisons: pd.DataFrame
    summaries: dict[str, dict[str, Any]]
    correction: str = DEFAULT_CORRECTION
    floors: dict[str, int] = field(default_factory=dict)  # the user floor each dataset was ranked at
    overrides: list[str] = field(default_factory=list)  # floors that differ from the split's, said first

    @property
    def datasets(self) -> list[str]:
        return sorted(self.metrics[S.DATASET].unique())

    def models(self, dataset: str) -> list[str]:
        return sorted(self.metrics.loc[self.metrics[S.DATASET] == dataset, S.MODEL].unique())


def checked_floors(metrics: pd.DataFrame, floors: Mapping[str, int], table: str) -> dict[str, int]:
    """Each shown dataset's user floor, once its metrics are seen to be flagged at that floor:
    a report must not say 1,000 over cells an evaluate ranked at 200. ``table``: where the
    metrics were read (``LAKE/metrics``), for the error."""
    from intent_spark.core.errors import IntentError

    checked = {}
    for dataset, rows in metrics.groupby(S.DATASET):
        floor = floors[dataset]
        wrong = rows[(rows["n_users"] < floor) != rows["below_floor"]]
        if not wrong.empty:
            row = wrong.iloc[0]
            flag = "below" if row["below_floor"] else "above"
            raise IntentError(
                f"{table}: {dataset}'s cells were ranked at another user floor than {floor:,} "
                f"({row[S.CELL]}: {row['n_users']:,} users, flagged {flag} the floor); give the floor "
                "of the run that evaluated it (--floor-users)"
            )
        checked[str(dataset)] = floor
    return checked


def read_metrics(lake: Lake) -> pd.DataFrame:
    """Every dataset's metrics rows (cells x models x metrics: small)."""
    return lake.read(S.METRICS_TABLE).toPandas()  # aggregates, never events


def load_results(
    lake: Lake,
    datasets: Sequence[str] | None = None,
    everything: pd.DataFrame | None = None,
    correction: str = DEFAULT_CORRECTION,
    floor_users: int | None = None,
) -> Results:
    """The evaluated datasets' metrics and comparisons, and their split summaries (read from the
    split report's JSON, or computed when it is missing). ``everything``: ``read_metrics``, when
    the caller has it already. The comparisons' p-values are adjusted again over the family the
    report shows (``REPORT_FAMILY``) by ``correction``. Cells are shown ranked at the floor
    their evaluate flagged them at (``metrics.floor_users``, the split's unless overridden);
    ``floor_users`` re-flags them at another, an override the report's first line says."""
    from intent_spark.core.errors import IntentError
    from intent_spark.split.summary import split_summary

    metrics = read_metrics(lake) if everything is None else everything
    # Variants and transferred models have their own sections (compare_report.py).
    metrics = metrics[~metrics[S.MODEL].map(is_transfer)]
    if not datasets:
        metrics = metrics[~metrics[S.DATASET].map(lambda d: parse_dataset(d).is_variant)]
    if datasets:
        missing = sorted(set(datasets) - set(metrics[S.DATASET]))
        if missing:
            raise IntentError(
                f"{lake.path(S.METRICS_TABLE)}: no results for {', '.join(missing)} (run `intent evaluate`)"
            )
        metrics = metrics[metrics[S.DATASET].isin(datasets)]
    if metrics.empty:
        raise IntentError(f"{lake.path(S.METRICS_TABLE)}: no results yet (run `intent evaluate`)")
    chosen = sorted(metrics[S.DATASET].unique())
    if lake.has(S.COMPARISONS):
        shown = lake.read(S.COMPARISONS).where(
            F.col(S.DATASET).isin(chosen)
            & ~F.col(S.MODEL).contains(TRANSFER_SEPARATOR)
            & ~F.coalesce(F.col("baseline"), F.lit("")).contains(TRANSFER_SEPARATOR)
        )
        stored = [c for c in ADJUSTED_COLUMNS if c in shown.columns]
        adjusted = adjust_p_values(
            shown.drop(*stored), correction, REPORT_FAMILY, order=(S.DATASET, S.CELL, S.MODEL, "baseline")
        )
        comparisons = adjusted.select(*[f.name for f in S.COMPARISONS_SCHEMA.fields]).toPandas()  # small
    else:
        comparisons = pd.DataFrame(columns=[f.name for f in S.COMPARISONS_SCHEMA.fields])
    summaries = {}
    for dataset in chosen:
        saved = Path(lake.root) / "reports" / "split" / f"{dataset}.json"
        summaries[dataset] = (
            json.loads(saved.read_text()) if saved.exists() else split_summary(lake, parse_dataset(dataset))
        )
    floors, overrides = lake_floors(lake, metrics, floor_users)
    if floor_users is not None:
        metrics = metrics.assign(below_floor=metrics["n_users"] < floor_users)
    return Results(
        metrics.reset_index(drop=True),
        comparisons.reset_index(drop=True),
        summaries,
        correction,
        floors,
        overrides,
    )


def lake_floors(lake: Lake, metrics: pd.DataFrame, override: int | None) -> tuple[dict[str, int], list[str]]:
    """Each dataset's user floor as the report shows it, and a sentence for each that is not its
    split's: one ``override`` given to the report, or one its evaluate was given. Metrics written
    before the floor was kept are checked against the split conf's floor (``checked_floors``)."""
    from intent_spark.split.split_tables import split_floor

    floors, overrides = {}, []
    for dataset, rows in metrics.groupby(S.DATASET):
        name = str(dataset)
        kept = rows[S.FLOOR_USERS].dropna() if S.FLOOR_USERS in rows else pd.Series(dtype="int64")
        split = split_floor(lake, name)
        if not kept.empty:
            evaluated = int(kept.max())
        elif override is not None:  # unrecorded, and re-flagged at the override anyway
            evaluated = override
        else:
            evaluated = checked_floors(rows, {name: split}, lake.path(S.METRICS_TABLE))[name]
        floors[name] = evaluated if override is None else override
        if override is not None and override != split:
            overrides.append(
                f"{name} shown at {override:,} users (--floor-users), its split's floor is {split:,}"
            )
        elif override is None and evaluated != split:
            overrides.append(
                f"{name} evaluated at {evaluated:,} users (--floor-users), its split's floor is {split:,}"
            )
    return floors, overrides
