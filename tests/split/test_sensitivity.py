"""The cutoff sensitivity table: the rule's variants on hand-written histograms, then one small
Spark check that its shipped row is the cutoff the split stage picks."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from intent_spark.core import schema as S
from intent_spark.split.conf import SplitConf
from intent_spark.split.cutoff import Bucket, CutoffRule
from intent_spark.split.sensitivity import ROW_COLUMNS, cutoff_sensitivity, rule_variants, sensitivity_rows
from intent_spark.split.split_tables import split_population

SHIPPED = CutoffRule()


def test_variants_of_the_shipped_rule():
    found = [(label, r.low, r.high, r.target_share, r.day_span_days) for label, r in rule_variants(SHIPPED)]
    assert found == [
        ("shipped", 0.75, 0.85, 0.80, 62.0),
        ("band 0.775-0.825", 0.775, 0.825, 0.80, 62.0),
        ("band 0.725-0.875", 0.725, 0.875, 0.80, 62.0),
        ("band 0.700-0.800, target 0.750", 0.70, 0.80, 0.75, 62.0),
        ("band 0.800-0.900, target 0.850", 0.80, 0.90, 0.85, 62.0),
        ("day switch 31 d", 0.75, 0.85, 0.80, 31.0),
        ("day switch 124 d", 0.75, 0.85, 0.80, 124.0),
    ]


def test_variants_are_clipped_to_shares():
    # Target 0.95 in [0.90, 1.00]: widening puts high at 1.025 and shifting up at 1.05 -> 1.
    variants = dict(rule_variants(CutoffRule(target_share=0.95, low=0.90, high=1.0)))
    assert (variants["band 0.875-1.000"].low, variants["band 0.875-1.000"].high) == (0.875, 1.0)
    up = variants["band 0.950-1.000, target 1.000"]
    assert (up.low, up.high, up.target_share) == (0.95, 1.0, 1.0)


# Ten months of 2024, 200 events, 2 of new users every month (n_events = n_known + 2):
#   month    Jan Feb Mar Apr May Jun Jul Aug Sep Oct
#   n_known   60  40  30  15   5   4  12   4   6   4   (180 known)
# Known events before each boundary, over 200:
#   Feb 1 .30, Mar 1 .50, Apr 1 .65, May 1 .725, Jun 1 .75, Jul 1 .77, Aug 1 .83, Sep 1 .85,
#   Oct 1 .88 (Nov 1 is after the last month with events: no candidate).
# The span (Jan 3 - Oct 20) is far above 124 days, so every variant uses months:
#   shipped [.75, .85]  Jun Jul Aug Sep (both ends inclusive)  4, lower median Jul 1 (.77)
#   [.775, .825]        .77 below, .83 above                   0, no cutoff
#   [.725, .875]        May Jun Jul Aug Sep                    5, median Jul 1: not moved
#   [.70, .80]          May Jun Jul                            3, median Jun 1 (.75)
#   [.80, .90]          Aug Sep Oct                            3, median Sep 1 (.85)
#   day switch 31/124   still months                           Jul 1: not moved
# Horizon to the last event, Oct 20 12:00: Jul 1 -> 111.5 days, Jun 1 -> 141.5, Sep 1 -> 49.5.
MONTH_KNOWN = [60, 40, 30, 15, 5, 4, 12, 4, 6, 4]
MONTHS = [Bucket(datetime(2024, m, 1), k + 2, k) for m, k in enumerate(MONTH_KNOWN, start=1)]


def _summary(rows):
    return [(r["variant"], r["granularity"], r["cutoff"], r["n_admissible"], r["moved"]) for r in rows]


def test_band_variants_on_ten_months():
    # No day histogram: a variant that read it would find no candidate at all.
    rows = sensitivity_rows(
        datetime(2024, 1, 3, 9), datetime(2024, 10, 20, 12), MONTHS, [], rule_variants(SHIPPED)
    )
    assert all(tuple(r) == ROW_COLUMNS for r in rows)
    assert _summary(rows) == [
        ("shipped", "month", datetime(2024, 7, 1), 4, False),
        ("band 0.775-0.825", "month", None, 0, True),
        ("band 0.725-0.875", "month", datetime(2024, 7, 1), 5, False),
        ("band 0.700-0.800, target 0.750", "month", datetime(2024, 6, 1), 3, True),
        ("band 0.800-0.900, target 0.850", "month", datetime(2024, 9, 1), 3, True),
        ("day switch 31 d", "month", datetime(2024, 7, 1), 4, False),
        ("day switch 124 d", "month", datetime(2024, 7, 1), 4, False),
    ]
    assert [r["share"] for r in rows] == [0.77, None, 0.77, 0.75, 0.85, 0.77, 0.77]
    assert [r["horizon_days"] for r in rows] == [111.5, None, 111.5, 141.5, 49.5, 111.5, 111.5]
    assert (rows[3]["low"], rows[3]["high"], rows[3]["target_share"]) == (0.70, 0.80, 0.75)


# Forty days, Jan 20 09:00 - Feb 29 09:00 2024 (leap year), 100 events:
#   day      Jan 20  Jan 31  Feb 10  Feb 29
#   n_events     50      30      10      10
#   n_known      50      28      10      10
# Day boundaries Jan 21..Feb 29 (40): share .50 up to Jan 31, .78 for Feb 1..Feb 10 (10 days),
# .88 for Feb 11..Feb 29 (19 days). The only month boundary is Feb 1, share 78/100 = .78.
#   shipped (62 d: days)  10 admissible, lower median index 4: Feb 5 (.78), horizon 24.375
#   day switch 31 d       40 > 31: months, Feb 1 (.78), horizon 28.375: moved
#   day switch 124 d      days, Feb 5: not moved
#   [.775,.825] [.725,.875] [.70,.80]: only .78 admissible -> the same 10 days, Feb 5
#   [.80, .90]            .88 -> 19 days, median index 9: Feb 20, horizon 9.375
DAYS = [
    Bucket(datetime(2024, 1, 20), 50, 50),
    Bucket(datetime(2024, 1, 31), 30, 28),
    Bucket(datetime(2024, 2, 10), 10, 10),
    Bucket(datetime(2024, 2, 29), 10, 10),
]
DAY_MONTHS = [Bucket(datetime(2024, 1, 1), 80, 78), Bucket(datetime(2024, 2, 1), 20, 20)]


def test_day_switch_on_forty_days():
    last = datetime(2024, 2, 29, 9)
    rows = sensitivity_rows(datetime(2024, 1, 20, 9), last, DAY_MONTHS, DAYS, rule_variants(SHIPPED))
    assert _summary(rows) == [
        ("shipped", "day", datetime(2024, 2, 5), 10, False),
        ("band 0.775-0.825", "day", datetime(2024, 2, 5), 10, False),
        ("band 0.725-0.875", "day", datetime(2024, 2, 5), 10, False),
        ("band 0.700-0.800, target 0.750", "day", datetime(2024, 2, 5), 10, False),
        ("band 0.800-0.900, target 0.850", "day", datetime(2024, 2, 20), 19, True),
        ("day switch 31 d", "month", datetime(2024, 2, 1), 1, True),
        ("day switch 124 d", "day", datetime(2024, 2, 5), 10, False),
    ]
    assert [r["share"] for r in rows] == [0.78, 0.78, 0.78, 0.78, 0.88, 0.78, 0.78]
    assert [r["horizon_days"] for r in rows] == [24.375] * 4 + [9.375, 28.375, 24.375]


def test_no_events_gives_rows_without_cutoff():
    at = datetime(2024, 1, 1)
    rows = sensitivity_rows(at, at, [], [], rule_variants(SHIPPED))
    assert [(r["cutoff"], r["n_admissible"], r["moved"]) for r in rows] == [(None, 0, False)] * 7


def _events(n: int, span_days: int) -> list[tuple]:
    """``n`` events of 41 users over ``span_days`` from Jan 3 2024, denser at the start."""
    start = datetime(2024, 1, 3, 8)
    return [
        (
            f"u{(k * 7) % 41:02d}",
            f"i{k % 13}",
            start + timedelta(seconds=int((k / n) ** 0.8 * span_days * 86_400)),
            k + 1,
        )
        for k in range(n)
    ]


@pytest.mark.parametrize("span_days", [290, 50], ids=["months", "days"])
def test_shipped_row_is_the_split_stage_cutoff(spark, span_days):
    events = spark.createDataFrame(
        _events(300, span_days), f"{S.USER_ID} string, {S.ITEM_ID} string, {S.TS} timestamp, {S.SEQ} long"
    ).repartition(3)  # partition-proof
    conf = SplitConf(seed=3, holdout_fraction=0.1, floor_users=1, known_past_users=10)
    table = cutoff_sensitivity(events, dataset="toy", key="toy", fraction=0.1, seed=3, rule=conf.rule)
    assert list(table.columns) == [S.DATASET, *ROW_COLUMNS]
    assert len(table) == len(rule_variants(conf.rule)) and set(table[S.DATASET]) == {"toy"}

    test = split_population(events, dataset="toy", split=S.TEST, conf=conf, manual=None)
    shipped = table.iloc[0]
    assert shipped["variant"] == "shipped" and not shipped["moved"]
    assert shipped["granularity"] == test.choice.granularity == ("month" if span_days > 62 else "day")
    assert shipped["cutoff"].to_pydatetime() == test.choice.cutoff
    assert shipped["share"] == test.choice.share
    assert shipped["n_admissible"] == len(test.choice.admissible)
    assert shipped["horizon_days"] == pytest.approx(test.horizon_days)
