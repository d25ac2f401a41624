"""The split engine on a hand-computed fixture, plus the rule's edge cases.

The fixture: 12 users over Jan-May 2024, seed 4. With that seed the hash holds out u01 and u06
(test) and u11 (validation); everything else below was worked out by hand from the event list.
"""

from __future__ import annotations

from datetime import datetime

import pytest
from pyspark.sql import functions as F

from intent_spark.checks.verify import verify_dataset
from intent_spark.core import schema as S
from intent_spark.core.datasets import DatasetRef
from intent_spark.lake.context import Lake
from intent_spark.lake.tables import read_table, write_dataset
from intent_spark.split.conf import SplitConf
from intent_spark.split.cutoff import (
    Bucket,
    CutoffRule,
    NoAdmissibleCutoff,
    choose_cutoff,
    choose_granularity,
)
from intent_spark.split.split_tables import run_split


def _at(month: int, day: int) -> datetime:
    return datetime(2024, month, day, 12)


def _targets(spark, lake, split):
    rows = read_table(spark, lake, S.TARGETS, "toy").where(F.col(S.SPLIT) == split).collect()
    return {(r.cell, r.user_id, r.ts, r.item_id) for r in rows}


def test_holdout_cutoffs_and_candidates(spark, toy_lake):
    lake, (test, val) = toy_lake
    new_users = {
        (r.split, r.user_id)
        for r in read_table(spark, lake, S.HOLDOUT, "toy").where(F.col(S.IS_NEW)).collect()
    }
    assert new_users == {("test", "u01"), ("test", "u06"), ("val", "u11")}
    # Test: 40 events, 36 of known users. Month boundaries Feb..May give shares
    # 24/40, 30/40, 33/40, 34/40; admissible Mar, Apr, May; lower median Apr 1.
    assert [round(c.share, 4) for c in test.choice.candidates] == [0.6, 0.75, 0.825, 0.85]
    assert test.choice.cutoff == datetime(2024, 4, 1)
    assert (test.choice.granularity, test.choice.rule) == ("month", "rule")
    # Validation: 33 training events of 10 users spanning Jan 5 - Mar 5 (60 days): day
    # boundaries. Known-to-validation events (u11 held out) before Feb 6, 7, 8..Mar 3, Mar 4
    # are 25, 26, 27, 28 of 33: 28 admissible days, the lower median is the 14th, Feb 19.
    assert val.choice.granularity == "day"
    assert val.choice.admissible[0] == datetime(2024, 2, 6)
    assert val.choice.admissible[-1] == datetime(2024, 3, 4)
    assert len(val.choice.admissible) == 28
    assert val.choice.cutoff == datetime(2024, 2, 19)
    assert val.choice.share == pytest.approx(27 / 33)
    splits = {r.split: r for r in read_table(spark, lake, S.SPLITS, "toy").collect()}
    assert splits["test"].horizon_days == pytest.approx(39.5)  # May 10 12:00 - Apr 1
    assert splits["val"].horizon_days == pytest.approx(15.5)  # Mar 5 12:00 - Feb 19


def test_test_split_targets_by_hand(spark, toy_lake):
    lake, _ = toy_lake
    targets = _targets(spark, lake, "test")
    future_and_new = {t for t in targets if t[0] != "known_past"}
    assert future_and_new == {
        ("known_future_new", "u02", _at(4, 5), "z"),
        ("known_future_seen", "u03", _at(5, 3), "a"),
        ("known_future_new", "u05", _at(5, 4), "e"),
        ("new_past_new", "u01", _at(1, 20), "q"),  # u01's first event (Jan 10) is never a target
        ("new_future_new", "u06", _at(5, 10), "y"),  # y never occurs in training
    }
    known_past = {(t[1], t[2]) for t in targets if t[0] == "known_past"}
    # 33 known events before Apr 1 minus each of the 10 known users' first event.
    assert len(known_past) == 23
    assert ("u02", _at(1, 5)) not in known_past and ("u02", _at(1, 6)) in known_past
    assert ("u10", _at(3, 4)) in known_past and ("u10", _at(1, 16)) not in known_past


def test_validation_twin_targets_by_hand(spark, toy_lake):
    lake, _ = toy_lake
    targets = _targets(spark, lake, "val")
    assert {t for t in targets if t[0] != "known_past"} == {
        ("known_future_seen", "u02", _at(3, 3), "d"),
        ("known_future_seen", "u10", _at(3, 4), "a"),
        ("known_future_seen", "u12", _at(3, 5), "b"),
        ("new_past_seen", "u11", _at(1, 18), "b"),
        ("new_past_seen", "u11", _at(1, 19), "c"),
    }
    assert sum(t[0] == "known_past" for t in targets) == 18  # 27 events of 9 users, minus 9 firsts
    assert all(t[2] < datetime(2024, 4, 1) for t in targets)


def test_counts_and_verify_pass(spark, toy_lake):
    lake, _ = toy_lake
    counts = {
        (r.split, r.cell): (r.n_users, r.n_targets, r.below_floor)
        for r in read_table(spark, lake, S.SPLIT_COUNTS, "toy").collect()
    }
    assert counts[("test", "known_past")] == (10, 23, True)
    assert counts[("test", "known_future_new")] == (2, 2, True)
    assert counts[("val", "new_past_seen")] == (1, 2, True)
    # the floor it flagged them at, recorded for evaluate and the report: the split conf's 1,000
    assert {r.floor_users for r in read_table(spark, lake, S.SPLIT_COUNTS, "toy").collect()} == {1000}
    failed = [r for r in verify_dataset(Lake(spark, lake), DatasetRef("toy")) if not r.ok]
    assert failed == []


def test_cell_counts_flag_cells_under_the_floor_they_record(spark, toy_lake):
    from intent_spark.split.split_tables import cell_counts

    lake, _ = toy_lake
    rows = cell_counts(read_table(spark, lake, S.TARGETS, "toy"), 10).collect()
    flags = {(r.split, r.cell): (r.n_users, r.below_floor, r.floor_users) for r in rows}
    assert flags[("test", "known_past")] == (10, False, 10)  # 10 users: not under a floor of 10
    assert flags[("test", "known_future_new")] == (2, True, 10)


def test_verify_catches_a_corrupted_target(spark, toy_lake, tmp_path):
    lake, _ = toy_lake
    import shutil

    copy = str(tmp_path / "lake")
    shutil.copytree(lake, copy)
    targets = read_table(spark, copy, S.TARGETS, "toy")
    leaked = targets.where((F.col(S.SPLIT) == "test") & (F.col(S.CELL) == "known_future_seen")).withColumn(
        S.CELL, F.lit("known_past")
    )
    kept = targets.where(~((F.col(S.SPLIT) == "test") & (F.col(S.CELL) == "known_future_seen")))
    write_dataset(kept.unionByName(leaked).localCheckpoint(), copy, S.TARGETS, "toy")
    failed = {r.name for r in verify_dataset(Lake(spark, copy), DatasetRef("toy")) if not r.ok}
    assert {"target_cell_consistent", "counts_reconcile", "checksum_targets"} <= failed


def test_no_admissible_candidate_lists_every_share():
    # 100 events: Jan 90 (70 known), Feb 5 (4), Mar 5 (5). Shares at Feb 1 and Mar 1 are 70/100
    # and 74/100, both below the band.
    buckets = [
        Bucket(datetime(2024, 1, 1), 90, 70),
        Bucket(datetime(2024, 2, 1), 5, 4),
        Bucket(datetime(2024, 3, 1), 5, 5),
    ]
    with pytest.raises(NoAdmissibleCutoff) as error:
        choose_cutoff(buckets, "month", CutoffRule(), dataset="x", split="test")
    assert str(error.value) == (
        "x test: no month boundary has a train share in [0.75, 0.85]; candidates: 2024-02-01 0.700; "
        "2024-03-01 0.740. Fix the cutoff by hand in the conf."
    )
    manual = choose_cutoff(
        buckets,
        "month",
        CutoffRule(),
        dataset="x",
        split="test",
        manual=datetime(2024, 1, 20),
        manual_share=0.5,
    )
    assert (manual.cutoff, manual.rule) == (datetime(2024, 1, 20), "manual")


def test_granularity_switches_at_62_days():
    rule = CutoffRule()
    assert choose_granularity(datetime(2024, 1, 1), datetime(2024, 3, 3), rule) == "day"  # 62 days
    assert choose_granularity(datetime(2024, 1, 1), datetime(2024, 3, 3, 0, 0, 1), rule) == "month"


def test_tied_timestamps_follow_seq(spark, tmp_path):
    """H&M-style dates: three purchases on one day; the first by seq is the user's first event."""
    lake = str(tmp_path / "lake")
    day = datetime(2020, 1, 10)
    rows = [
        ("ties", "c1", item, day, seq, "purchase", None, None)
        for item, seq in (("x", 30), ("y", 10), ("w", 20))
    ]
    rows += [
        ("ties", f"k{i}", "x", datetime(2020, m, 5), 100 + i * 10 + m, "purchase", None, None)
        for i in range(30)
        for m in (1, 2, 3, 4, 5)
    ]
    write_dataset(spark.createDataFrame(rows, S.EVENTS_SCHEMA), lake, S.EVENTS, "ties")
    run_split(
        Lake(spark, lake),
        DatasetRef("ties"),
        SplitConf(seed=0, manual_cutoff=datetime(2020, 5, 1), manual_val_cutoff=datetime(2020, 3, 1)),
    )
    c1 = read_table(spark, lake, S.TARGETS, "ties").where(
        (F.col(S.USER_ID) == "c1") & (F.col(S.SPLIT) == "test")
    )
    # Whether c1 is known (known_past: sampled, all users are) or new (new_past_*), its targets
    # are the two purchases after seq 10, the first of the day by seq.
    assert sorted((r.seq, r.item_id) for r in c1.collect()) == [(20, "w"), (30, "x")]


def test_split_report_files_and_contents(spark, toy_lake, tmp_path):
    import json

    from intent_spark.report.split import write_split_report
    from intent_spark.split.summary import split_summary

    lake, _ = toy_lake
    folder = write_split_report(split_summary(Lake(spark, lake), DatasetRef("toy")), tmp_path / "report")
    summary = json.loads((folder / "toy.json").read_text())
    test, val = summary["splits"]["test"], summary["splits"]["val"]
    assert (test["cutoff"], test["rule"], val["granularity"]) == ("2024-04-01T00:00:00", "rule", "day")
    # 10 training users with 33 events: mean 3.3; counts sorted 2,2,3,3,3,3,4,4,4,5 -> median 3.
    assert (test["training_users"], test["history_mean"], test["history_median"]) == (10, 3.3, 3.0)
    assert test["cells"]["known_future_new"] == {
        "users": 2,
        "targets": 2,
        "below_floor": True,
        "repeat_rate": 0.0,  # z and e: neither met before by its user
    }
    assert test["cells"]["new_past_seen"] == {
        "users": 0,
        "targets": 0,
        "below_floor": True,
        "repeat_rate": None,
    }
    # Repeats of the user's own earlier item: u03's a on May 3 (known_future_seen); in known_past
    # u02's second a, u03's second a and second b, u05's second c: 4 of 23.
    assert test["cells"]["known_future_seen"]["repeat_rate"] == 1.0
    assert test["cells"]["known_past"]["repeat_rate"] == pytest.approx(4 / 23)
    assert test["repeat_rate"] == pytest.approx(5 / 28)
    # Evaluation targets (not known_past): items z, a, e, q, y -> only a is seen (1 of 5).
    assert test["target_items_seen_in_training"] == pytest.approx(0.2)
    # The validation histogram stops at the test cutoff: Jan, Feb and Mar days only.
    assert max(h["start"] for h in val["histogram"]) < "2024-04-01"
    assert sum(h["events"] for h in val["histogram"]) == 33
    assert (folder / "toy_test_histogram.png").stat().st_size > 10_000
    assert "| known_future_new | 2 | 2 | 0.000 | yes |" in (folder / "toy.md").read_text()


def test_the_sets_a_split_persists_are_released_when_it_ends(spark, tmp_path):
    """The events the split reads once and keeps for all its tables are gone from the session when
    it ends: nothing it persisted outlives the stage (the same toy events, split again)."""
    from conftest import toy_event_rows

    lake = str(tmp_path / "lake")
    write_dataset(spark.createDataFrame(toy_event_rows(), S.EVENTS_SCHEMA), lake, S.EVENTS, "toy")

    def persisted() -> dict[int, str]:  # Delta keeps each table's log state cached: not the stage's
        rdds = spark.sparkContext._jsc.getPersistentRDDs()
        names = {key: str(rdds[key].name()) for key in rdds}
        return {key: name for key, name in names.items() if not name.startswith("Delta Table State")}

    # compared by id: a set an earlier test left may be cleaned up meanwhile (Spark unpersists
    # what the JVM's collector finds unreachable), but nothing the split persists may stay
    before = persisted()
    outcomes = run_split(Lake(spark, lake), DatasetRef("toy"), SplitConf(seed=4))
    assert [o.choice.cutoff for o in outcomes] == [datetime(2024, 4, 1), datetime(2024, 2, 19)]
    assert read_table(spark, lake, S.TARGETS, "toy").count() > 0
    left = {key: name for key, name in persisted().items() if key not in before}
    assert not left, left
