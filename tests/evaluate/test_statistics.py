"""Corrected significance and the minimum detectable effect (SPEC 10), against statsmodels and
hand computations."""

from __future__ import annotations

import math

import numpy as np
import pytest
from pyspark.sql import functions as F

from intent_spark.core import schema as S
from intent_spark.evaluate.corrections import BH, HOLM, NONE, adjust_p_values

multitest = pytest.importorskip("statsmodels.stats.multitest")

STATSMODELS_METHOD = {HOLM: "holm", BH: "fdr_bh"}


def _families(spark, families: dict[str, list[float | None]]):
    rows = [(family, f"c{i:03d}", p) for family, ps in families.items() for i, p in enumerate(ps)]
    return spark.createDataFrame(rows, f"family string, {S.CELL} string, p_value double")


def _adjusted(spark, families, method):
    frame = adjust_p_values(_families(spark, families), method, ["family"], order=[S.CELL])
    return {(r.family, r.cell): r for r in frame.collect()}


def test_holm_and_bh_by_hand(spark):
    families = {"f": [0.01, 0.04, 0.03, 0.005], "g": [0.2, None]}
    holm = _adjusted(spark, families, HOLM)
    # sorted 0.005, 0.01, 0.03, 0.04 -> 4 x, 3 x, 2 x, 1 x -> 0.02, 0.03, 0.06, 0.04 -> running max
    assert [holm[("f", f"c{i:03d}")].p_adjusted for i in range(4)] == pytest.approx([0.03, 0.06, 0.06, 0.02])
    bh = _adjusted(spark, families, BH)
    # 0.005 x 4/1, 0.01 x 4/2, 0.03 x 4/3, 0.04 x 4/4 -> running min from the largest p down
    assert [bh[("f", f"c{i:03d}")].p_adjusted for i in range(4)] == pytest.approx([0.02, 0.04, 0.04, 0.02])
    # a family of one keeps its p; a row without a p-value is in no family
    assert holm[("g", "c000")].p_adjusted == pytest.approx(0.2)
    assert holm[("g", "c000")].family_size == 1 and holm[("f", "c000")].family_size == 4
    assert holm[("g", "c001")].p_adjusted is None and holm[("g", "c001")].family_size is None
    none = _adjusted(spark, families, NONE)
    assert none[("f", "c001")].p_adjusted == 0.04 and none[("f", "c001")].correction == NONE


@pytest.mark.parametrize("method", [HOLM, BH])
def test_corrections_match_statsmodels(spark, method):
    rng = np.random.default_rng(11)
    families: dict[str, list[float | None]] = {}
    for size in (1, 2, 7, 42, 336):
        ps = np.concatenate([rng.uniform(0, 1, size - size // 3), rng.uniform(0, 1e-3, size // 3)])
        if size > 7:  # ties, zeros and ones, as paired comparisons give them
            ps[:4] = [0.0, 0.0, 1.0, ps[5]]
        families[f"n{size}"] = [float(p) for p in rng.permutation(ps)]
    adjusted = _adjusted(spark, families, method)
    for family, ps in families.items():
        expected = multitest.multipletests(ps, alpha=0.05, method=STATSMODELS_METHOD[method])[1]
        got = [adjusted[(family, f"c{i:03d}")].p_adjusted for i in range(len(ps))]
        assert np.max(np.abs(np.array(got) - expected)) <= 1e-12, family
        assert all(r.correction == method for r in adjusted.values())


def test_comparisons_carry_adjusted_p_values_and_the_minimum_detectable_effect(spark):
    from intent_spark.evaluate.metrics import comparisons

    # one cell, three models, three users: a beats b by 0.1, 0.2, 0.3 (sd 0.1); c equals b
    scores = {"a": (0.6, 0.7, 0.8), "b": (0.5, 0.5, 0.5), "c": (0.5, 0.5, 0.5)}
    rows = [
        ("d", S.TEST, "known_past", model, f"u{i}", value)
        for model, values in scores.items()
        for i, value in enumerate(values)
    ]
    users = spark.createDataFrame(rows, [S.DATASET, S.SPLIT, S.CELL, S.MODEL, S.USER_ID, "ndcg_10"])
    metrics = spark.createDataFrame([], S.METRICS_SCHEMA)
    table = comparisons(users, metrics, correction=HOLM)
    assert [f.name for f in table.schema.fields] == [f.name for f in S.COMPARISONS_SCHEMA.fields]
    paired = {(r.model, r.baseline): r for r in table.where(F.col("kind") == S.PAIRED).collect()}
    ab, ac, bc = paired[("a", "b")], paired[("a", "c")], paired[("b", "c")]
    # (z_0.975 + z_0.8) x sd / sqrt(n) = (1.959964 + 0.841621) x 0.1 / sqrt(3), worked by hand
    assert ab.mde == pytest.approx(2.801585218 * 0.1 / 1.732050808, abs=1e-9)
    assert bc.mde == 0.0  # no spread at all
    # Holm over the three: b-c has p = 1; a-b and a-c share one p, so both get 3p, then 3p
    assert ab.p_value == ac.p_value
    assert ab.p_adjusted == pytest.approx(min(1.0, 3 * ab.p_value))
    assert ac.p_adjusted == ab.p_adjusted and bc.p_adjusted == 1.0
    assert {r.family_size for r in paired.values()} == {3}


def test_a_true_effect_of_one_mde_is_detected_four_times_in_five(spark):
    from intent_spark.evaluate.metrics import Z_95, minimum_detectable_effect

    n, sd = 400, 0.3
    mde = spark.range(1).select(minimum_detectable_effect(F.lit(sd), F.lit(n))).first()[0]
    rng = np.random.default_rng(3)
    samples = rng.normal(mde, sd, size=(4000, n))
    z = samples.mean(axis=1) / (samples.std(axis=1, ddof=1) / math.sqrt(n))
    power = float(np.mean(np.abs(z) > Z_95))
    assert power == pytest.approx(0.80, abs=0.02)
