"""Leave-last-out and HORIZON against the INTENT cells on the hand-computed toy events
(test_split): the usual protocol trains on events that follow its test events; the INTENT
future cells never do, and `verify` says so."""

from __future__ import annotations

from datetime import datetime

import pytest
from conftest import toy_event_rows
from pyspark.sql import functions as F

from intent_spark.checks.verify import lake_datasets, verify_dataset
from intent_spark.core import schema as S
from intent_spark.core.datasets import PROTOCOLS, DatasetRef, parse_dataset
from intent_spark.evaluate.leaks import leaked_targets
from intent_spark.lake.context import Lake
from intent_spark.lake.tables import read_table
from intent_spark.split.conf import SplitConf
from intent_spark.split.protocols import leave_last_out, run_protocol_split

LAST_EVENTS = {
    ("u02", 4, 5, "z"), ("u03", 5, 3, "a"), ("u04", 2, 4, "a"), ("u05", 5, 4, "e"),
    ("u07", 2, 5, "d"), ("u08", 2, 6, "b"), ("u09", 2, 7, "c"), ("u10", 3, 4, "a"),
    ("u11", 1, 19, "c"), ("u12", 3, 5, "b"), ("u01", 1, 20, "q"), ("u06", 5, 10, "y"),
}  # fmt: skip


def _events(spark):
    return spark.createDataFrame(toy_event_rows(), S.EVENTS_SCHEMA).repartition(3)


def test_leave_last_out_holds_out_each_users_last_event(spark):
    training, targets = leave_last_out(_events(spark))
    assert {(r.user_id, r.ts.month, r.ts.day, r.item_id) for r in targets.collect()} == LAST_EVENTS
    assert training.count() + targets.count() == len(toy_event_rows()) == 40


@pytest.fixture(scope="module")
def protocol_lake(spark, toy_lake):
    lake, _ = toy_lake
    for protocol in PROTOCOLS:
        run_protocol_split(
            Lake(spark, lake), DatasetRef("toy", protocol=protocol), SplitConf(max_targets_per_period=100)
        )
    return lake


def _cells(spark, lake, dataset):
    rows = read_table(spark, lake, S.TARGETS, dataset).collect()
    return {(r.cell, r.user_id, r.ts.month, r.ts.day, r.item_id) for r in rows}


def test_horizon_settings_by_hand(spark, protocol_lake):
    # Cutoff Apr 1 and held-out users u01, u06 as in the INTENT test split (seed 4). Before the
    # cutoff each user's last event is held out when they have two there: 1a for the ten known
    # users, 1c for u01 (u06 has one event before it). After it every event with an earlier one.
    cells = _cells(spark, protocol_lake, "toy.horizon")
    assert {c for c in cells if c[0] == "horizon_1a"} == {
        ("horizon_1a", "u02", 3, 3, "d"), ("horizon_1a", "u03", 2, 3, "b"), ("horizon_1a", "u04", 2, 4, "a"),
        ("horizon_1a", "u05", 1, 10, "a"), ("horizon_1a", "u07", 2, 5, "d"), ("horizon_1a", "u08", 2, 6, "b"),
        ("horizon_1a", "u09", 2, 7, "c"), ("horizon_1a", "u10", 3, 4, "a"), ("horizon_1a", "u11", 1, 19, "c"),
        ("horizon_1a", "u12", 3, 5, "b"),
    }  # fmt: skip
    assert {c for c in cells if c[0] != "horizon_1a"} == {
        ("horizon_1b", "u02", 4, 5, "z"), ("horizon_1b", "u03", 5, 3, "a"), ("horizon_1b", "u05", 5, 4, "e"),
        ("horizon_1c", "u01", 1, 20, "q"), ("horizon_1d", "u06", 5, 10, "y"),
    }  # fmt: skip
    split = read_table(spark, protocol_lake, S.SPLITS, "toy.horizon").first()
    # Training: 33 known events before Apr 1 minus the ten held out, of 40.
    assert (split.cutoff, split.rule, split.train_share) == (datetime(2024, 4, 1), "horizon", 23 / 40)
    assert _cells(spark, protocol_lake, "toy.leave_last_out") == {("leave_last_out", *t) for t in LAST_EVENTS}


def test_a_protocol_split_records_its_floor_as_the_intent_split_does(spark, protocol_lake):
    from intent_spark.split.split_tables import split_floor

    floor = SplitConf().floor_users
    for name in ("toy", "toy.horizon", "toy.leave_last_out"):  # evaluate flags the cells at this
        assert split_floor(Lake(spark, protocol_lake), name) == floor
    counts = read_table(spark, protocol_lake, S.SPLIT_COUNTS, "toy.horizon").collect()  # a row per cell
    assert counts and all(r.below_floor == (r.n_users < floor) for r in counts)


def test_verify_flags_the_leave_last_out_leak_and_not_the_intent_future_cells(spark, protocol_lake):
    by_check = {
        (r.dataset, r.name): r
        for r in verify_dataset(Lake(spark, protocol_lake), parse_dataset("toy.leave_last_out"))
    }
    leak = by_check["toy.leave_last_out", "no_target_precedes_training"]
    assert (leak.ok, leak.violations) == (False, 6)
    assert all(r.ok for key, r in by_check.items() if key[1].startswith("checksum_"))
    # HORIZON's settings before the cutoff leak too: its last training event is u02's Feb 3, after
    # the 1a targets of u05 (Jan 10) and u11 (Jan 19) and u01's 1c target (Jan 20).
    horizon = {r.name: r for r in verify_dataset(Lake(spark, protocol_lake), parse_dataset("toy.horizon"))}
    assert horizon["no_target_precedes_training"].violations == 3
    # INTENT: the last training event is u12's Mar 5. The future cells never leak; the past cells
    # are before the cutoff by definition (22 of 23 known_past, u01's new_past_new target).
    leaks = {
        r.cell: (r.n_leaked, r.n_targets)
        for r in leaked_targets(Lake(spark, protocol_lake), DatasetRef("toy")).collect()
    }
    assert leaks == {
        "known_past": (22, 23), "new_past_new": (1, 1), "known_future_new": (0, 2),
        "known_future_seen": (0, 1), "new_future_new": (0, 1),
    }  # fmt: skip
    # test_split's test_counts_and_verify_pass runs every INTENT check on this lake.
    assert lake_datasets(Lake(spark, protocol_lake)) == ["toy"]


def test_a_variant_names_what_it_needs_first(spark, tmp_path, capsys):
    """A protocol variant takes its source's test cutoff and holdout, so the source is split
    first; a seed variant needs only the source's events; an unknown variant is refused."""
    from intent_spark.cli import main
    from intent_spark.lake.tables import write_dataset

    lake = str(tmp_path / "lake")
    assert main(["split", "--dataset", "hand.seed3", "--lake", lake]) == 2
    assert capsys.readouterr().err.strip() == (
        f"intent split: error: {lake}: no events of hand; ingest hand first (`intent ingest`)"
    )
    write_dataset(_events(spark).withColumn(S.DATASET, F.lit("hand")), lake, S.EVENTS, "hand")
    assert main(["split", "--dataset", "hand.leave_last_out", "--lake", lake]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "intent split: error: hand.leave_last_out: split hand first: "
        "hand.leave_last_out takes its test cutoff and holdout"
    )
    cutoffs = ["--cutoff", "2024-04-01", "--val-cutoff", "2024-03-01"]
    assert main(["split", "--dataset", "hand.seed3", "--lake", lake, *cutoffs]) == 0
    assert {r.seed for r in read_table(spark, lake, S.SPLITS, "hand.seed3").collect()} == {3}
    assert main(["split", "--dataset", "hand.seeds", "--lake", lake]) == 2
    assert "unknown variant 'seeds'; known: leave_last_out, horizon, seedN" in capsys.readouterr().err
