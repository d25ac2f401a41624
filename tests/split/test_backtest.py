"""Backtesting: the whole split again at each of the last K month boundaries before the data's
end, on a hand-built fixture whose cutoffs are worked out by hand, and through `intent run` on
generated data with every origin's cutoff recomputed from the events."""

from __future__ import annotations

from datetime import datetime, timedelta

import pandas as pd
import pytest
from conftest import copy_reference_run
from pyspark.sql import functions as F

from intent_spark.core import schema as S
from intent_spark.core.datasets import origin_variant, parse_dataset
from intent_spark.core.errors import IntentError
from intent_spark.lake.context import Lake
from intent_spark.lake.tables import backtest_origin, months_before, read_table, source_table, write_dataset
from intent_spark.split.conf import SplitConf
from intent_spark.split.split_tables import run_split

# Events per month of 2024: each month holds a fifth of everything up to its end, so the test
# cutoff of data ending in month M is M's first day (share 0.8 exactly at it, 0.64 a month before).
MONTHS = {1: 256, 2: 64, 3: 80, 4: 100, 5: 125, 6: 156}  # June: the 1st to the 15th only
USERS = 16


def _rows() -> list[tuple]:
    rows, seq = [], 0
    for month, count in MONTHS.items():
        days = 15 if month == 6 else 28
        for i in range(count):
            seq += 1
            at = datetime(2024, month, 1) + timedelta(days=days * i / count, hours=1)
            rows.append(("bt", f"u{seq % USERS:02d}", f"i{seq % 37}", at, seq, "view", None, None))
    return rows


def test_months_before_and_the_origins_of_a_dataset(spark):
    assert months_before(datetime(2024, 3, 1), 0) == datetime(2024, 3, 1)
    assert months_before(datetime(2024, 1, 1), 1) == datetime(2023, 12, 1)
    assert months_before(datetime(2024, 3, 1), 14) == datetime(2023, 1, 1)
    events = spark.createDataFrame(_rows(), S.EVENTS_SCHEMA)
    # the last event is on June 15: the boundaries before it are June 1, May 1, April 1
    assert [backtest_origin(events, k) for k in (1, 2, 3)] == [
        datetime(2024, 6, 1),
        datetime(2024, 5, 1),
        datetime(2024, 4, 1),
    ]
    # a last event exactly on a boundary: that boundary is the data's end, not an origin
    on_boundary = spark.createDataFrame(
        [("bt", "u", "i", datetime(2024, 6, 1), 1, "view", None, None)], S.EVENTS_SCHEMA
    )
    assert backtest_origin(on_boundary, 1) == datetime(2024, 5, 1)
    assert parse_dataset("bt.origin2").origin == 2 and origin_variant("bt", 3) == "bt.origin3"
    with pytest.raises(IntentError, match="origin0"):
        parse_dataset("bt.origin0")


def test_each_origin_splits_the_data_before_it_by_the_same_rule(spark, tmp_path):
    lake = str(tmp_path / "lake")
    write_dataset(spark.createDataFrame(_rows(), S.EVENTS_SCHEMA), lake, S.EVENTS, "bt")
    conf = SplitConf(holdout_fraction=1e-6, seed=5)  # no user of 16 falls under it: no holdout
    for name in ["bt", *(origin_variant("bt", k) for k in (1, 2, 3))]:
        run_split(Lake(spark, lake), parse_dataset(name), conf)
    assert read_table(spark, lake, S.HOLDOUT).where(F.col(S.IS_NEW)).count() == 0
    cutoffs = {
        r[S.DATASET]: r[S.CUTOFF]
        for r in read_table(spark, lake, S.SPLITS).where(F.col(S.SPLIT) == S.TEST).collect()
    }
    # By hand (no holdout, so share = events before c / events before the origin):
    #   origin3 (Apr 1): Jan-Mar, 400 events; Mar 1 has 320/400 = 0.80, Feb 1 256/400 = 0.64
    #   origin2 (May 1): Jan-Apr, 500; Apr 1 400/500 = 0.80, Mar 1 0.64
    #   origin1 (Jun 1): Jan-May, 625; May 1 500/625 = 0.80, Apr 1 0.64
    #   end: all 781; Jun 1 625/781 = 0.800, May 1 0.640
    assert cutoffs == {
        "bt.origin3": datetime(2024, 3, 1),
        "bt.origin2": datetime(2024, 4, 1),
        "bt.origin1": datetime(2024, 5, 1),
        "bt": datetime(2024, 6, 1),
    }
    shares = {
        r[S.DATASET]: r.train_share
        for r in read_table(spark, lake, S.SPLITS).where(F.col(S.SPLIT) == S.TEST).collect()
    }
    assert shares["bt.origin3"] == pytest.approx(0.8) and shares["bt"] == pytest.approx(625 / 781)
    # every table of an origin sees only the data before it
    for k, origin in ((1, datetime(2024, 6, 1)), (2, datetime(2024, 5, 1)), (3, datetime(2024, 4, 1))):
        name = origin_variant("bt", k)
        last = read_table(spark, lake, S.TARGETS, name).agg(F.max(S.TS)).first()[0]
        assert last < origin
        assert source_table(spark, lake, S.EVENTS, parse_dataset(name)).count() == sum(
            n for m, n in MONTHS.items() if m < origin.month
        )
    # the holdout hash is the source's: the same users are new at every origin
    dates = {"manual_cutoff": datetime(2024, 3, 1), "manual_val_cutoff": datetime(2024, 2, 1)}
    conf = SplitConf(holdout_fraction=0.5, seed=5, **dates)  # half the users would leave no rule
    for name in ("bt", "bt.origin1"):
        run_split(Lake(spark, lake), parse_dataset(name), conf)
    held = {
        name: {
            r.user_id
            for r in read_table(spark, lake, S.HOLDOUT, name)
            .where(F.col(S.IS_NEW) & (F.col(S.SPLIT) == S.TEST))
            .collect()
        }
        for name in ("bt", "bt.origin1")
    }
    assert held["bt"] == held["bt.origin1"] and 0 < len(held["bt"]) < USERS


def _rule_by_hand(events: pd.DataFrame, new_users: set[str]) -> datetime:
    """SPEC 3.2 recomputed in pandas: month boundaries after the first event and not after the
    last month's start, share = known users' events before c / all, the lower median of those in
    [0.75, 0.85]."""
    months = events["ts"].dt.to_period("M").dt.to_timestamp()
    first, last = months.min(), months.max()
    known = ~events["user_id"].isin(new_users)
    admissible = []
    at = first + pd.offsets.MonthBegin(1)
    while at <= last:
        share = (known & (events["ts"] < at)).sum() / len(events)
        if 0.75 <= share <= 0.85:
            admissible.append(at.to_pydatetime())
        at = at + pd.offsets.MonthBegin(1)
    return admissible[(len(admissible) - 1) // 2]


@pytest.mark.slow
def test_a_run_backtests_three_origins_and_reports_their_order(spark, reference_run, tmp_path, capsys):
    """On a copy of the reference run (its ingest, split and popularity are skipped): the three
    origins are split, trained, scored and evaluated, and repeat_last is added everywhere."""
    from intent_spark.cli import main

    work = tmp_path / "work"
    copy_reference_run(reference_run, work)
    conf = tmp_path / "run.yaml"
    conf.write_text(
        f"workdir: {work}\nseed: 3\ndatasets:\n  - {{name: hm, events: 3000}}\n"
        "models: [popularity, repeat_last]\nbacktest: {origins: 3, replicates: 20}\n"
    )
    assert main(["run", "--conf", str(conf)]) == 0
    assert "hm: split skipped (inputs unchanged since it finished)" in capsys.readouterr().err
    lake = str(work / "lake")
    events = read_table(spark, lake, S.EVENTS, "hm").select(S.USER_ID, S.TS).toPandas()
    last = events["ts"].max()
    origins = pd.read_csv(
        work / "lake" / "reports" / "compare" / "hm.origins.csv", parse_dates=["origin", "test_cutoff"]
    )
    assert list(origins["variant"]) == ["hm.origin3", "hm.origin2", "hm.origin1", "hm"]
    boundary = datetime(last.year, last.month, 1)
    expected = [months_before(boundary, k - 1) for k in (3, 2, 1)]
    assert list(origins["origin"][:3].dt.to_pydatetime()) == expected
    for variant, origin, cutoff in zip(
        origins["variant"], origins["origin"], origins["test_cutoff"], strict=True
    ):
        before = events if pd.isna(origin) else events[events["ts"] < origin]
        held = read_table(spark, lake, S.HOLDOUT, variant).where(F.col(S.IS_NEW) & (F.col(S.SPLIT) == S.TEST))
        new_users = {r.user_id for r in held.collect()}
        assert cutoff.to_pydatetime() == _rule_by_hand(before, new_users), variant
    # each origin was scored and evaluated, and the report shows the origins side by side
    evaluated = {
        r[S.DATASET] for r in read_table(spark, lake, S.METRICS_TABLE).select(S.DATASET).distinct().collect()
    }
    assert set(origins["variant"]) <= evaluated
    tau = pd.read_csv(work / "lake" / "reports" / "compare" / "hm.backtest.csv")
    labels = [f"{o:%Y-%m-%d}" for o in expected]
    assert set(zip(tau["origin_a"], tau["origin_b"], strict=True)) <= {
        (labels[0], labels[1]),
        (labels[1], labels[2]),
        (labels[2], "end"),
    }
    assert tau["tau"].dropna().between(-1, 1).all() and len(tau) > 0
    page = (work / "report" / "report.html").read_text(encoding="utf-8")
    assert "hm: cell scores over the origins (NDCG@10, test)" in page
    assert "does the model order hold between origins? (Kendall tau-b)" in page
    assert "hm.origin1" not in pd.read_csv(work / "report" / "summary.csv")[S.DATASET].tolist()
