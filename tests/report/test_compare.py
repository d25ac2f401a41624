"""`intent run` with a ``compare:`` part, on a copy of the reference run: its finished stages are
skipped and the protocol variants and the cutoff sensitivity are added, scored and reported.
A seed variant is a plain INTENT split under another seed (`intent split --dataset hm.seed4`);
its table is checked on hand-made metrics rows."""

from __future__ import annotations

import pandas as pd
import pytest
from conftest import copy_reference_run
from pyspark.sql import functions as F

from intent_spark.cli import main
from intent_spark.core import schema as S
from intent_spark.core.errors import IntentError
from intent_spark.core.runconf import CompareConf
from intent_spark.lake.tables import read_table
from intent_spark.report.compare import seed_spread

# Leave-last-out runs the same stages; its cells and leak are checked on the toy (test_protocols).
COMPARE = "compare: {datasets: [hm], protocols: [horizon], replicates: 20}"


def test_a_compare_run_reports_protocols_and_the_cutoff_rule(spark, reference_run, tmp_path):
    work = tmp_path / "work"
    copy_reference_run(reference_run, work)
    conf = tmp_path / "run.yaml"
    conf.write_text(
        f"workdir: {work}\nseed: 3\ndatasets:\n  - {{name: hm, events: 3000}}\n"
        f"models: [popularity]\n{COMPARE}\n"
    )
    assert main(["run", "--conf", str(conf)]) == 0
    lake = str(work / "lake")

    splits = {
        r.dataset: r for r in read_table(spark, lake, S.SPLITS).where(F.col(S.SPLIT) == "test").collect()
    }
    assert {"hm", "hm.horizon"} <= set(splits)
    assert splits["hm.horizon"].cutoff == splits["hm"].cutoff and splits["hm.horizon"].rule == "horizon"
    held = {
        (r.dataset, r.user_id)
        for r in read_table(spark, lake, S.HOLDOUT)
        .where((F.col(S.SPLIT) == "test") & F.col(S.IS_NEW))
        .collect()
    }
    base, horizon = ({u for d, u in held if d == name} for name in ("hm", "hm.horizon"))
    assert base and base == horizon  # HORIZON holds out the INTENT test split's users

    cells = {
        (r.dataset, r.cell)
        for r in read_table(spark, lake, S.METRICS_TABLE).select(S.DATASET, S.CELL).distinct().collect()
    }
    assert {("hm.horizon", f"horizon_1{s}") for s in "abcd"} <= cells

    leaks = pd.concat(pd.read_csv(p) for p in (work / "lake" / "reports" / "compare").glob("*.leaks.csv"))
    leaked = {(r.dataset, r.cell): r.n_leaked for r in leaks.itertuples()}
    assert leaked["hm.horizon", "horizon_1a"] > 0  # before the cutoff others' training events follow
    assert leaked["hm.horizon", "horizon_1b"] == leaked["hm.horizon", "horizon_1d"] == 0
    assert all(n == 0 for (d, c), n in leaked.items() if d == "hm" and "future" in c)

    report = (work / "report" / "report.md").read_text()
    for title in (
        "hm: protocols side by side",
        "hm: does the protocol change the model order? (Kendall tau-b)",
        "hm: targets scored on a period the model trained on",
        "hm: cutoff sensitivity to the band and the 62-day switch",
    ):
        assert f"### {title}" in report, title
    assert (work / "report" / "figures" / "hm_protocols.png").exists()
    assert "band 0.775-0.825" in report


def _metric(dataset, cell, model, value, low, high):
    return {S.DATASET: dataset, S.SPLIT: "test", S.CELL: cell, S.MODEL: model, "metric": "ndcg", "k": 10,
            "value": value, "ci_low": low, "ci_high": high}  # fmt: skip


def test_seed_spread_by_hand():
    metrics = pd.DataFrame(
        [
            _metric("hm", "known_future_seen", "popularity", 0.10, 0.08, 0.12),
            _metric("hm.seed1", "known_future_seen", "popularity", 0.14, 0.11, 0.17),
            _metric("hm.seed2", "known_future_seen", "popularity", 0.12, 0.10, 0.14),
            _metric("hm.seed1", "known_future_seen", "sasrec_f@amazon_hk", 0.5, 0.4, 0.6),  # not a seed row
            _metric("hm.horizon", "known_future_seen", "popularity", 0.9, 0.8, 1.0),  # not a seed variant
        ]
    )
    conf = CompareConf(datasets=("hm",), seeds=(1, 2))
    row = seed_spread(metrics, "hm", 0, conf).loc["known_future_seen"]
    # 0.10, 0.14, 0.12: mean 0.12, sd 0.02, range 0.04; interval widths 0.04, 0.06, 0.04.
    assert (row["seed 0"], row["seed 1"], row["seed 2"]) == ("0.100", "0.140", "0.120")
    assert (row["mean ± sd"], row["range"], row["95% interval width (median)"]) == (
        "0.120 ± 0.020",
        "0.040",
        "0.040",
    )
    assert seed_spread(metrics, "hm", 0, CompareConf(datasets=("hm",))).empty  # one split: no spread


def test_compare_metrics_match_whole_parts_of_a_metric_name():
    from intent_spark.lake.tracking import metric_pattern

    names = ["test.known_past.ndcg_10", "test.known_past.ndcg_100", "val.new_new.ndcg_10", "test.all.mrr_10"]

    def found(pattern: str) -> list[str]:
        return [name for name in names if metric_pattern(pattern).search(name)]

    assert found("ndcg_10") == ["test.known_past.ndcg_10", "val.new_new.ndcg_10"]
    assert found("ndcg_.*") == names[:3]
    assert found(r"^test\.") == ["test.known_past.ndcg_10", "test.known_past.ndcg_100", "test.all.mrr_10"]
    assert found(r"^test\..*ndcg_10$") == ["test.known_past.ndcg_10"]
    assert found("known_past") == names[:2] and found("ndcg") == [] and found("g_10") == []
    with pytest.raises(IntentError, match=r"^--metrics '\(': not a regular expression"):
        metric_pattern("(")
