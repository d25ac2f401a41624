"""How far the test cutoff would move if the protocol's fixed numbers were different.

The rule (SPEC 3.2) fixes an admissible band [0.75, 0.85] around a 0.80 target share and a
62-day switch between day and month boundaries. This module re-applies the rule with each of
those numbers nudged and reports, per variant, the cutoff it picks and whether it moved. Spark
only reduces the events to the month and day histograms and the time span; the variants run in
plain Python on those small tables, so they can be tested on hand-written histograms.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from intent_spark.core import schema as S
from intent_spark.core.datasets import DatasetRef
from intent_spark.lake.context import Lake
from intent_spark.lake.reports import compare_folder
from intent_spark.lake.tables import ingested_source, source_table
from intent_spark.split.conf import SplitConf
from intent_spark.split.cutoff import (
    DAY,
    MONTH,
    Bucket,
    CutoffRule,
    NoAdmissibleCutoff,
    candidates,
    choose_cutoff,
    choose_granularity,
    collect_buckets,
    time_span,
)
from intent_spark.split.holdout import is_held_out

SHIPPED = "shipped"
BAND_SHIFT = 0.05
ROW_COLUMNS = (
    "variant",
    "low",
    "high",
    "target_share",
    "day_span_days",
    "granularity",
    "cutoff",
    "share",
    "n_admissible",
    "horizon_days",
    "moved",
)


def _share(value: float) -> float:
    """Clip to [0, 1] and drop float noise, so 0.75 - 0.025 compares equal to the share 0.725."""
    return round(min(1.0, max(0.0, value)), 6)


def _band(rule: CutoffRule, low: float, high: float, target: float | None = None) -> CutoffRule:
    target_share = rule.target_share if target is None else target
    return replace(rule, low=_share(low), high=_share(high), target_share=_share(target_share))


def _band_label(rule: CutoffRule, moved_target: bool = False) -> str:
    label = f"band {rule.low:.3f}-{rule.high:.3f}"
    return f"{label}, target {rule.target_share:.3f}" if moved_target else label


def rule_variants(rule: CutoffRule) -> list[tuple[str, CutoffRule]]:
    """The shipped rule first, then one variant per nudged number, each labelled by what changed.

    Band narrower / wider by half (each side half as far / 1.5 times as far from the target),
    band shifted down / up by 0.05 (target moves with it), and the day/month switch at half and
    at twice its span (31 and 124 days for the shipped 62).
    """
    t, low, high = rule.target_share, rule.low, rule.high
    narrow = _band(rule, low + (t - low) / 2, high - (high - t) / 2)
    wide = _band(rule, low - (t - low) / 2, high + (high - t) / 2)
    down = _band(rule, low - BAND_SHIFT, high - BAND_SHIFT, t - BAND_SHIFT)
    up = _band(rule, low + BAND_SHIFT, high + BAND_SHIFT, t + BAND_SHIFT)
    short = replace(rule, day_span_days=rule.day_span_days / 2)
    long = replace(rule, day_span_days=rule.day_span_days * 2)
    return [
        (SHIPPED, rule),
        (_band_label(narrow), narrow),
        (_band_label(wide), wide),
        (_band_label(down, moved_target=True), down),
        (_band_label(up, moved_target=True), up),
        (f"day switch {short.day_span_days:g} d", short),
        (f"day switch {long.day_span_days:g} d", long),
    ]


def _variant_row(
    label: str,
    rule: CutoffRule,
    first: datetime,
    last: datetime,
    month_buckets: list[Bucket],
    day_buckets: list[Bucket],
) -> dict[str, Any]:
    granularity = choose_granularity(first, last, rule)
    buckets = day_buckets if granularity == DAY else month_buckets
    found = candidates(buckets, granularity, rule)
    cutoff: datetime | None = None
    share: float | None = None
    try:
        # choose_cutoff itself, so the table can never disagree with the split stage.
        choice = choose_cutoff(buckets, granularity, rule, dataset="sensitivity", split=S.TEST)
        cutoff, share = choice.cutoff, choice.share
    except NoAdmissibleCutoff:
        pass  # a variant that admits nothing is an answer here, not an error
    horizon = (last - cutoff).total_seconds() / 86_400 if cutoff is not None else None
    return {
        "variant": label,
        "low": rule.low,
        "high": rule.high,
        "target_share": rule.target_share,
        "day_span_days": rule.day_span_days,
        "granularity": granularity,
        "cutoff": cutoff,
        "share": share,
        "n_admissible": sum(c.admissible for c in found),
        "horizon_days": horizon,
    }


def sensitivity_rows(
    first: datetime,
    last: datetime,
    month_buckets: list[Bucket],
    day_buckets: list[Bucket],
    variants: list[tuple[str, CutoffRule]],
) -> list[dict[str, Any]]:
    """One row per variant (keys ``ROW_COLUMNS``): the cutoff the rule picks under it.

    ``first``/``last`` are the first and last event times; each variant reads the histogram of
    the granularity it picks. ``cutoff``, ``share`` and ``horizon_days`` are None when no
    boundary is admissible. ``moved`` compares with the first variant (the shipped rule).
    """
    rows = [_variant_row(label, rule, first, last, month_buckets, day_buckets) for label, rule in variants]
    reference = rows[0]["cutoff"] if rows else None
    return [{**row, "moved": row["cutoff"] != reference} for row in rows]


def cutoff_sensitivity(
    events: DataFrame,
    *,
    dataset: str,
    fraction: float,
    seed: int,
    rule: CutoffRule,
    key: str,
) -> pd.DataFrame:
    """One row per variant of ``rule`` for the test split of ``events`` (``user_id``, ``ts``).

    Users are held out exactly as ``split_population`` does for the test split. Only the time
    span and the month / day histograms (a row per month or day) reach the driver.
    """
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"holdout fraction must be in (0, 1), got {fraction}")
    flagged = events.withColumn(S.IS_NEW, is_held_out(F.col(S.USER_ID), fraction, seed, key, S.TEST))
    first, last = time_span(events)
    variants = rule_variants(rule)
    # A histogram no variant reads is not worth a pass over the events (long datasets: days).
    needed = {choose_granularity(first, last, r) for _, r in variants}
    month = collect_buckets(flagged, MONTH) if MONTH in needed else []
    day = collect_buckets(flagged, DAY) if DAY in needed else []
    table = pd.DataFrame(sensitivity_rows(first, last, month, day, variants), columns=list(ROW_COLUMNS))
    table["cutoff"] = pd.to_datetime(table["cutoff"])  # NaT where nothing is admissible, even if all are
    table.insert(0, S.DATASET, dataset)
    return table


def write_sensitivity(lake: Lake, dataset: DatasetRef, conf: SplitConf) -> Path:
    """The cutoff under other bands and day/month switches (one row per variant of the rule)."""
    from intent_spark.split.sensitivity import cutoff_sensitivity

    events = source_table(lake.spark, lake.root, S.EVENTS, dataset).select(S.USER_ID, S.ITEM_ID, S.TS, S.SEQ)
    table = cutoff_sensitivity(
        events,
        dataset=dataset,
        key=ingested_source(lake.spark, lake.root, dataset),
        fraction=conf.holdout_fraction,
        seed=conf.seed,
        rule=conf.rule,
    )
    path = compare_folder(lake.root) / f"{dataset}.sensitivity.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(path, index=False)
    return path
