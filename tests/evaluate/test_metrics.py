"""Metrics (SPEC 5): hand-computed values with ties, agreement with ranx, interval coverage."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from pyspark.sql import functions as F

from intent_spark.core import schema as S
from intent_spark.evaluate.metrics import KS, METRICS, cell_metrics, metric_column, mlflow_name, user_metrics
from intent_spark.train.rank_rule import tie_aware_rank

RANK_COLUMNS = [S.DATASET, S.SPLIT, S.CELL, S.MODEL, S.USER_ID, S.SEQ, S.RANK, S.TIED]


def _ranks(spark, rows):
    return spark.createDataFrame(rows, S.RANKS_SCHEMA)


def test_user_and_cell_metrics_by_hand(spark):
    # user a: ranks 1 and 2.5 (inside a tie of two); user b: rank 11
    rows = [
        ("d", "test", "c", "m", "a", 1, 1.0, 0),
        ("d", "test", "c", "m", "a", 2, 2.5, 1),
        ("d", "test", "c", "m", "b", 3, 11.0, 0),
    ]
    users = user_metrics(_ranks(spark, rows))
    a = users.where(F.col(S.USER_ID) == "a").first()
    assert a.ndcg_10 == pytest.approx((1 + 1 / math.log2(3.5)) / 2, abs=1e-12)
    assert (a.hr_1, a.hr_5, a.precision_5, a.mrr_10) == pytest.approx((0.5, 1.0, 0.2, (1 + 1 / 2.5) / 2))
    assert (a.n_targets, a.tie_rate) == (2, 0.5)
    b = users.where(F.col(S.USER_ID) == "b").first()
    assert (b.ndcg_10, b.hr_10, b.hr_20, b.mrr_20) == pytest.approx((0.0, 0.0, 1.0, 1 / 11))

    cells = {(r.metric, r.k): r for r in cell_metrics(users, floor_users=1000).collect()}
    ndcg = cells[("ndcg", 10)]
    a_value = (1 + 1 / math.log2(3.5)) / 2
    # mean of (a_value, 0); sample sd a_value / sqrt(2); half width 1.96 * sd / sqrt(2)
    assert ndcg.value == pytest.approx(a_value / 2)
    assert ndcg.ci_high - ndcg.value == pytest.approx(1.959963984540054 * a_value / 2)
    assert (ndcg.n_users, ndcg.n_targets, ndcg.below_floor) == (2, 3, True)
    assert cells[("hr", 1)].value == pytest.approx(0.25)
    assert cells[("tie_rate", 0)].value == pytest.approx(1 / 3)
    assert not cell_metrics(users, floor_users=2).first().below_floor
    assert mlflow_name("test", "known_future_seen", "ndcg", 10) == "test.known_future_seen.ndcg_10"


# ranx's own uint64 -> int64 cast, warned once when numba first compiles its ndcg (a fresh
# environment: CI, a clean clone)
@pytest.mark.filterwarnings("ignore::numba.core.errors.NumbaTypeSafetyWarning")
def test_metrics_agree_with_ranx_on_random_rankings(spark):
    ranx = pytest.importorskip("ranx")
    rng = np.random.default_rng(3)
    qrels, run, rows = {}, {}, []
    for q in range(60):
        n_docs = int(rng.integers(5, 150))
        scores = rng.permutation(n_docs).astype(np.float64) + rng.random()  # distinct: no ties
        relevant = int(rng.integers(0, n_docs))
        qrels[f"q{q}"] = {f"d{relevant}": 1}
        run[f"q{q}"] = {f"d{i}": float(s) for i, s in enumerate(scores)}
        rank = tie_aware_rank(torch.tensor([[-np.inf, *scores]]), torch.tensor([relevant + 1])).item()
        rows.append(("d", "test", "c", "m", f"q{q}", q, rank, 0))
    users = {r.user_id: r for r in user_metrics(_ranks(spark, rows)).collect()}
    names = {"ndcg": "ndcg", "hr": "hit_rate", "recall": "recall", "precision": "precision", "mrr": "mrr"}
    wanted = [f"{names[m]}@{k}" for m in METRICS for k in KS]
    reference = ranx.evaluate(
        ranx.Qrels(qrels), ranx.Run(run), wanted, return_mean=False, make_comparable=True
    )
    for metric in METRICS:
        for k in KS:
            expected = reference[f"{names[metric]}@{k}"]
            got = [users[q][metric_column(metric, k)] for q in sorted(qrels)]  # ranx's query order
            bad = [(q, g, e) for q, (g, e) in enumerate(zip(got, expected, strict=True)) if abs(g - e) > 1e-9]
            assert not bad, (metric, k, bad[:3])


def test_normal_interval_covers_the_true_mean_about_95_percent_of_the_time(spark):
    """400 cells of 300 users each, per-user scores ~ Beta(2, 5) (mean 2/7): the share of
    cells whose interval holds 2/7 must be within 0.925-0.975 (binomial sd 0.011 at 0.95)."""
    rng = np.random.default_rng(11)
    cells, users = 400, 300
    values = rng.beta(2, 5, size=(cells, users))
    rows = [
        ("d", "test", f"cell{c}", "m", f"u{u}", 1, 0.0, float(values[c, u]))
        for c in range(cells)
        for u in range(users)
    ]
    columns = [S.DATASET, S.SPLIT, S.CELL, S.MODEL, S.USER_ID, "n_targets", "tie_rate", "v"]
    same = [F.col("v").alias(metric_column(m, k)) for m in METRICS for k in KS]  # every metric the same draw
    frame = spark.createDataFrame(rows, columns).select(*columns[:-1], *same)
    result = cell_metrics(frame, floor_users=1000).where((F.col("metric") == "ndcg") & (F.col("k") == 10))
    truth = 2 / 7
    covered = result.select(((F.col("ci_low") <= truth) & (truth <= F.col("ci_high"))).cast("int").alias("c"))
    coverage = covered.agg(F.avg("c")).first()[0]
    assert 0.925 <= coverage <= 0.975, coverage


def _users(spark, rows):
    """user_metrics rows with only ndcg_10 set: (split, cell, model, user, ndcg_10)."""
    columns = [S.DATASET, S.SPLIT, S.CELL, S.MODEL, S.USER_ID, "ndcg_10"]
    return spark.createDataFrame([("d", *r) for r in rows], columns)


def test_paired_model_comparison_by_hand(spark):
    from intent_spark.evaluate.metrics import compare_models, normal_p_value

    # three users in one cell; a beats b by 0.1, 0.2, 0.3 (user u4 has only model a: unpaired)
    rows = [("test", "c", "a", f"u{i}", 0.5 + d) for i, d in ((1, 0.1), (2, 0.2), (3, 0.3))]
    rows += [("test", "c", "b", f"u{i}", 0.5) for i in (1, 2, 3)] + [("test", "c", "a", "u4", 0.9)]
    result = compare_models(_users(spark, rows), "a", "b").first()
    assert result.n_users == 3
    assert result.value == pytest.approx(0.2)
    # sd of (0.1, 0.2, 0.3) = 0.1; z = 0.2 / (0.1 / sqrt 3)
    assert result.z == pytest.approx(0.2 / (0.1 / math.sqrt(3)))
    assert result.ci_low == pytest.approx(0.2 - 1.959963984540054 * 0.1 / math.sqrt(3))
    assert normal_p_value(result.z) < 0.001
    assert normal_p_value(0.0) == 1.0
    assert result.p_value == pytest.approx(normal_p_value(result.z), abs=2e-7)


def test_memorization_gap_pairs_seen_and_new_of_the_same_users(spark):
    from intent_spark.evaluate.metrics import memorization_gap

    rows = [
        ("test", "known_future_seen", "m", "u1", 0.6),
        ("test", "known_future_new", "m", "u1", 0.1),
        ("test", "known_future_seen", "m", "u2", 0.4),
        ("test", "known_future_new", "m", "u2", 0.3),
        ("test", "known_future_seen", "m", "u3", 0.9),  # no new-item target: not paired
    ]
    gaps = {r.cell: r for r in memorization_gap(_users(spark, rows)).collect()}
    assert set(gaps) == {"known_future_seen-known_future_new"}
    gap = gaps["known_future_seen-known_future_new"]
    assert gap.value == pytest.approx(0.3)  # (0.5 + 0.1) / 2
    assert gap.n_users == 2


def test_bootstrap_interval_is_close_to_the_normal_one_on_many_users(spark):
    from intent_spark.evaluate.metrics import bootstrap_intervals

    rng = np.random.default_rng(5)
    rows = [("test", "c", "m", f"u{i}", float(v)) for i, v in enumerate(rng.beta(2, 5, 2000))]
    users = _users(spark, rows)
    boot = bootstrap_intervals(users, "ndcg_10", replicates=300, seed=1).first()
    values = np.array([r[-1] for r in rows])
    half = 1.959963984540054 * values.std(ddof=1) / math.sqrt(len(values))
    assert (boot.ci_high - boot.ci_low) / 2 == pytest.approx(half, rel=0.15)
    assert boot.ci_low < values.mean() < boot.ci_high
    again = bootstrap_intervals(users, "ndcg_10", replicates=300, seed=1).first()
    assert (again.ci_low, again.ci_high) == (boot.ci_low, boot.ci_high)


def test_cell_metrics_with_bootstrap_replace_the_normal_interval(spark):
    rows = [("d", "test", "c", "m", f"u{i}", i, 1.0 + (i % 7), 0) for i in range(200)]
    users = user_metrics(_ranks(spark, rows))
    normal = {(r.metric, r.k): r for r in cell_metrics(users, 1000).collect()}
    boot = {(r.metric, r.k): r for r in cell_metrics(users, 1000, bootstrap=100).collect()}
    assert boot[("mrr", 10)].value == normal[("mrr", 10)].value
    assert boot[("mrr", 10)].ci_low != normal[("mrr", 10)].ci_low
    assert boot[("mrr", 10)].ci_low < boot[("mrr", 10)].value < boot[("mrr", 10)].ci_high


def test_p_value_column_matches_erfc(spark):
    from intent_spark.evaluate.metrics import normal_p_value, p_value_column

    zs = [0.0, 0.3, -1.0, 1.959963984540054, 2.5, -3.7, 6.0, 12.0]
    frame = spark.createDataFrame([(z,) for z in zs], ["z"]).select(
        "z", p_value_column(F.col("z")).alias("p")
    )
    for row in frame.collect():
        assert row.p == pytest.approx(normal_p_value(row.z), abs=2e-7), row.z
    assert spark.range(1).select(p_value_column(F.lit(None).cast("double"))).first()[0] is None


def test_pairwise_comparisons_cover_every_model_pair_once(spark):
    from intent_spark.evaluate.metrics import pairwise_comparisons

    # two users; c beats a by 0.2 for both (no spread: p = 0); b ties a exactly (p = 1)
    rows = [("test", "x", m, u, v) for u in ("u1", "u2") for m, v in (("a", 0.3), ("b", 0.3), ("c", 0.5))]
    result = {(r.model, r.baseline): r for r in pairwise_comparisons(_users(spark, rows)).collect()}
    assert set(result) == {("a", "b"), ("a", "c"), ("b", "c")}
    assert result[("a", "c")].value == pytest.approx(-0.2)
    assert result[("a", "c")].p_value == 0.0
    assert result[("a", "b")].value == 0.0
    assert result[("a", "b")].p_value == 1.0
    assert result[("b", "c")].n_users == 2


def test_retention_is_future_over_past_with_a_delta_method_interval(spark):
    from intent_spark.evaluate.metrics import Z_95, retention

    def row(cell, value, se, n):
        return (
            "d",
            "test",
            cell,
            "m",
            "ndcg",
            10,
            value,
            value - Z_95 * se,
            value + Z_95 * se,
            n,
            n,
            False,
            1000,
        )

    rows = [
        row("new_future_seen", 0.2, 0.02, 50),
        row("new_past_seen", 0.4, 0.04, 80),
        row("new_future_new", 0.1, 0.01, 50),
        row("new_past_new", 0.0, 0.0, 80),  # a zero past score: no ratio
    ]
    metrics = spark.createDataFrame(rows, S.METRICS_SCHEMA)
    result = retention(metrics).collect()
    assert [r.cell for r in result] == ["new_future_seen/new_past_seen"]
    # r = 0.5; se = sqrt(0.02^2 + 0.5^2 * 0.04^2) / 0.4 = 0.0707107
    assert result[0].value == pytest.approx(0.5)
    assert result[0].ci_high - result[0].value == pytest.approx(Z_95 * 0.0707107, rel=1e-5)
    assert result[0].n_users == 50


def _counts(spark, lake, dataset, floor):
    """A split's counts as the split writes them, flagged at ``floor`` (None: a split written
    before the floor was kept)."""
    from intent_spark.lake.tables import write_dataset

    rows = [(dataset, "test", "known_future_seen", 400, 900, floor is not None and floor > 400, floor)]
    write_dataset(spark.createDataFrame(rows, S.SPLIT_COUNTS_SCHEMA), lake, S.SPLIT_COUNTS, dataset)


def test_cells_are_flagged_at_the_floor_the_split_recorded_unless_overridden(spark, tmp_path):
    from intent_spark.evaluate.metrics import evaluation_floor
    from intent_spark.lake.context import Lake
    from intent_spark.split.split_tables import recorded_floor

    lines: list[str] = []
    lake = Lake(spark, str(tmp_path / "lake"), progress=lines.append)
    _counts(spark, lake.root, "d", 300)
    _counts(spark, lake.root, "old", None)
    assert recorded_floor(lake, "d") == 300 and recorded_floor(lake, "old") is None
    assert evaluation_floor(lake, "d", None) == 300 and evaluation_floor(lake, "d", 300) == 300
    assert lines == []  # the split's own floor: nothing to say
    assert evaluation_floor(lake, "d", 50) == 50
    assert lines.pop() == "d: cells flagged at 50 users (--floor-users), an override of the split's 300"
    assert evaluation_floor(lake, "old", None) == 1000  # conf/split.yaml's, said
    assert lines.pop() == "old: split before its floor was kept: cells flagged at its split conf's 1,000"
    assert evaluation_floor(lake, "old", None, 200) == 200  # a run's split conf (a demo's floor)
