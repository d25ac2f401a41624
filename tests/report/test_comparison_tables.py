"""`intent compare`'s text: one table per dataset, models as rows and metrics as columns, on
hand-built frames in ``compare_runs``'s shape (no Spark, no MLflow)."""

from __future__ import annotations

import math

import pandas as pd

from intent_spark.report.comparison_tables import comparison_tables, shared_parts


def _runs(rows: list[tuple[str, str, str, dict[str, float]]]) -> pd.DataFrame:
    """``compare_runs``'s frame: a row per ``dataset, model, run_id``, metric columns in name order."""
    frame = pd.DataFrame(
        [{"dataset": d, "model": m, "run_id": r, **metrics} for d, m, r, metrics in rows]
    ).set_index(["dataset", "model", "run_id"])
    return frame[sorted(frame.columns)]


PAST, NEW = "test.known_past.ndcg_10", "test.new_past_new.ndcg_10"


def test_one_table_per_dataset_with_the_shared_name_parts_in_its_heading():
    table = _runs(
        [
            ("hm", "popularity", "0123abcd99", {PAST: 0.1, NEW: 0.25}),
            ("hm", "sasrec", "4567ef0099", {PAST: 0.31234, NEW: math.nan}),
            # rees46 has a cell hm lacks, and none of hm's new_past_new
            ("rees46", "gru4rec", "89abcdef99", {PAST: 0.5, "test.known_future_new.ndcg_10": 0.0}),
            ("rees46", "repeat_last", "fedcba9899", {PAST: 0.06789, "test.known_future_new.ndcg_10": 1.0}),
        ]
    )
    assert comparison_tables(table) == (
        "hm: test ndcg_10\n"
        "model       run       known_past  new_past_new\n"
        "popularity  0123abcd      0.1000        0.2500\n"
        "sasrec      4567ef00      0.3123             -\n"
        "\n"
        "rees46: test ndcg_10\n"
        "model        run       known_future_new  known_past\n"
        "gru4rec      89abcdef            0.0000      0.5000\n"
        "repeat_last  fedcba98            1.0000      0.0679"
    )


def test_a_wide_table_wraps_its_metric_columns_and_repeats_the_models():
    table = _runs(
        [("toy", "popularity", "0123abcd", {"test.a.hr_1": 0.1, "val.a.mrr_5": 0.2, "val.b.hr_1": 0.3})]
    )
    assert comparison_tables(table, width=40) == (
        "toy\n"
        "model       run       test.a.hr_1\n"
        "popularity  0123abcd       0.1000\n"
        "\n"
        "model       run       val.a.mrr_5\n"
        "popularity  0123abcd       0.2000\n"
        "\n"
        "model       run       val.b.hr_1\n"
        "popularity  0123abcd      0.3000"
    )


def test_shared_parts_keep_at_least_the_last_part():
    assert shared_parts(["test.known_past.ndcg_10"]) == (["test", "known_past"], ["ndcg_10"])
    assert shared_parts(["test.a.hr_1", "test.a.mrr_1"]) == (["test", "a"], ["hr_1", "mrr_1"])
    assert shared_parts(["test.a.hr_1", "train_seconds"]) == ([], ["test.a.hr_1", "train_seconds"])
