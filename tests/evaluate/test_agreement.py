"""Protocol agreement: Kendall's tau-b by hand, and paired bootstrap intervals on tiny tables."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from pyspark.sql import functions as F

from intent_spark.evaluate.agreement import (
    AGREEMENT_COLUMNS,
    kendall_tau_b,
    protocol_agreement,
    replicate_means,
)
from intent_spark.evaluate.metrics import bootstrap_intervals, bootstrap_weight

USERS_DDL = "setting string, model string, user_id string, value double"


def test_tau_b_of_identical_and_reversed_orders():
    assert kendall_tau_b([1, 2, 3, 4], [10, 20, 30, 40]) == 1.0
    assert kendall_tau_b([1, 2, 3, 4], [4, 3, 2, 1]) == -1.0


def test_tau_b_with_one_discordant_pair():
    # 4 items, 6 pairs; only (c, d) swaps: C = 5, D = 1, no ties -> (5 - 1) / 6 = 4/6
    assert kendall_tau_b([1, 2, 3, 4], [1, 2, 4, 3]) == pytest.approx(4 / 6)


def test_tau_b_with_ties_by_hand():
    # a = (1, 2), b = (2, 1), c = (2, 3), d = (3, 3); n0 = 6 pairs:
    # ab discordant; ac, ad, bd concordant; bc tied in x (n1 = 1); cd tied in y (n2 = 1)
    # tau-b = (3 - 1) / sqrt((6 - 1)(6 - 1)) = 2 / 5
    assert kendall_tau_b([1, 2, 2, 3], [2, 1, 3, 3]) == pytest.approx(0.4)
    # ties on one side only: ab tied in x (n1 = 1, n2 = 0), the other 5 pairs concordant
    # tau-b = 5 / sqrt(5 * 6)
    assert kendall_tau_b([1, 1, 2, 3], [1, 2, 3, 4]) == pytest.approx(5 / math.sqrt(30))
    # a pair tied on both sides counts in n1 and in n2: ab tied twice, ac and bc concordant
    # tau-b = 2 / sqrt((3 - 1)(3 - 1)) = 1
    assert kendall_tau_b([1, 1, 2], [1, 1, 3]) == pytest.approx(1.0)


def test_tau_b_is_nan_when_undefined():
    assert math.isnan(kendall_tau_b([1, 1, 1], [1, 2, 3]))  # x all tied: n0 - n1 = 0
    assert math.isnan(kendall_tau_b([1, 2, 3], [5, 5, 5]))
    assert math.isnan(kendall_tau_b([1], [2]))
    assert math.isnan(kendall_tau_b([], []))
    assert math.isnan(kendall_tau_b([1, 2], [1, math.nan]))
    with pytest.raises(ValueError, match="needs equal lengths, got 2 and 3"):
        kendall_tau_b([1, 2], [1, 2, 3])


# Six users u1..u6. In "intent" every user scores A > B > C, so every bootstrap replicate
# orders A, B, C; means A = 3.6/6 = 0.6, B = 2.4/6 = 0.4, C = 1.2/6 = 0.2.
# "llo" disagrees on A vs B user by user (B wins for u1, u3, u5, u6); means A = 3.0/6 = 0.5,
# B = 3.6/6 = 0.6, C = 0.6/6 = 0.1, so the order is B, A, C.
# "rev" is 1 - intent for every user: every user, hence every replicate, orders C, B, A.
# D is only in "intent" and must be left out of every pair; "solo" shares one model only.
INTENT = {
    "A": [0.6, 0.6, 0.7, 0.5, 0.8, 0.4],
    "B": [0.4, 0.5, 0.3, 0.4, 0.5, 0.3],
    "C": [0.2, 0.1, 0.2, 0.3, 0.2, 0.2],
    "D": [0.9, 0.9, 0.9, 0.9, 0.9, 0.9],
}
LLO = {
    "A": [0.3, 0.7, 0.5, 0.6, 0.4, 0.5],
    "B": [0.7, 0.4, 0.8, 0.5, 0.6, 0.6],
    "C": [0.1, 0.2, 0.0, 0.1, 0.2, 0.0],
}
REV = {m: [1.0 - v for v in values] for m, values in INTENT.items() if m != "D"}
SOLO = {"A": [0.5] * 6}
PAIRS = [("intent", "llo"), ("intent", "rev"), ("intent", "solo")]


def _users(spark):
    rows = [
        (setting, model, f"u{i + 1}", value)
        for setting, table in (("intent", INTENT), ("llo", LLO), ("rev", REV), ("solo", SOLO))
        for model, values in table.items()
        for i, value in enumerate(values)
    ]
    return spark.createDataFrame(rows, USERS_DDL)


@pytest.fixture(scope="module")
def agreement(spark):
    users = _users(spark)
    first = protocol_agreement(users, PAIRS, replicates=50, seed=5)
    # the same users spread over other partitions: weights hash the user, not the row's place
    again = protocol_agreement(users.repartition(3, "user_id"), PAIRS, replicates=50, seed=5)
    return first, again


def test_agreement_with_a_swapped_pair_by_hand(agreement):
    first, _ = agreement
    assert list(first.columns) == list(AGREEMENT_COLUMNS)
    row = first.iloc[0]
    # intent (0.6, 0.4, 0.2) vs llo (0.5, 0.6, 0.1): AB discordant, AC and BC concordant
    # tau = (2 - 1) / 3 = 1/3
    assert (row.setting_a, row.setting_b, row.n_models) == ("intent", "llo", 3)
    assert row.tau == pytest.approx(1 / 3)
    assert (row.models_a, row.models_b) == ("A,B,C", "B,A,C")
    assert -1.0 <= row.ci_low <= row.tau <= row.ci_high <= 1.0


def test_agreement_of_a_reversed_protocol_is_minus_one_in_every_replicate(agreement):
    first, _ = agreement
    row = first.iloc[1]
    assert (row.n_models, row.models_a, row.models_b) == (3, "A,B,C", "C,B,A")
    assert (row.tau, row.ci_low, row.ci_high) == (-1.0, -1.0, -1.0)


def test_agreement_is_undefined_with_one_shared_model(agreement):
    first, _ = agreement
    row = first.iloc[2]
    assert (row.n_models, row.models_a, row.models_b) == (1, "A", "A")
    assert math.isnan(row.tau) and math.isnan(row.ci_low) and math.isnan(row.ci_high)


def test_agreement_is_deterministic(agreement):
    first, again = agreement
    pd.testing.assert_frame_equal(first, again)


def test_agreement_checks_its_arguments(spark):
    users = _users(spark)
    with pytest.raises(ValueError, match="needs at least one pair of settings"):
        protocol_agreement(users, [])
    with pytest.raises(ValueError, match="replicates must be at least 1, got 0"):
        protocol_agreement(users, [("intent", "llo")], replicates=0)
    with pytest.raises(ValueError, match="horizon"):
        protocol_agreement(users, [("intent", "horizon")], replicates=5)


def test_replicate_means_are_paired_across_settings(spark):
    # rev = 1 - intent user by user, and a user's weight is the same in both settings, so each
    # replicate's rev mean is 1 - its intent mean: one row per setting, model and replicate
    users = _users(spark).where(F.col("setting").isin("intent", "rev"))
    means = replicate_means(users, replicates=20, seed=5).toPandas()
    assert len(means) == (4 + 3) * 20
    wide = means.pivot_table(index=["model", "_r"], columns="setting", values="mean").dropna()
    assert len(wide) == 3 * 20
    assert (wide["rev"] + wide["intent"]).to_numpy() == pytest.approx(1.0)


def test_bootstrap_weight_and_intervals_are_unchanged(spark):
    # Recorded before bootstrap_weight was factored out of bootstrap_intervals: the Poisson(1)
    # weights of u0..u2 in replicates 0..3 under seed 3, and the interval on this table.
    grid = spark.createDataFrame([("u0",), ("u1",), ("u2",)], "user_id string").crossJoin(
        spark.range(4).withColumnRenamed("id", "_r")
    )
    weights = grid.select("user_id", "_r", bootstrap_weight(F.col("user_id"), F.col("_r"), 3).alias("w"))
    assert sorted((r.user_id, r._r, r.w) for r in weights.collect()) == [
        ("u0", 0, 0), ("u0", 1, 1), ("u0", 2, 0), ("u0", 3, 1),
        ("u1", 0, 3), ("u1", 1, 2), ("u1", 2, 1), ("u1", 3, 2),
        ("u2", 0, 2), ("u2", 1, 2), ("u2", 2, 1), ("u2", 3, 1),
    ]  # fmt: skip
    values = [0.0, 1.0, 0.5, 0.25, 0.75, 1.0, 0.0, 0.2]
    rows = [("c", "m", f"u{i}", v) for i, v in enumerate(values)]
    users = spark.createDataFrame(rows, "cell string, model string, user_id string, value double")
    (row,) = bootstrap_intervals(users, "value", replicates=40, seed=3, keys=("cell", "model")).collect()
    assert (row.ci_low, row.ci_high) == (
        pytest.approx(0.2825, abs=1e-12),
        pytest.approx(0.71890625, abs=1e-12),
    )


def test_evaluate_names_the_command_its_replicates_moved_to(tmp_path, capsys):
    """The agreement is a stage of its own (``intent agreement``); an old ``evaluate
    --replicates`` call says where it went, in one line, before Spark starts."""
    from intent_spark.cli import main

    lake = str(tmp_path / "lake")
    assert main(["evaluate", "--dataset", "hm.leave_last_out", "--lake", lake, "--replicates", "50"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "intent evaluate: error: --replicates moved: `intent agreement --dataset hm --replicates 50` "
        "orders a dataset's protocols"
    ]
