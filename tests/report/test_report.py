"""The report on hand-built results: its tables, figures, and the page as headless Chromium
renders it."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from intent_spark.core import schema as S
from intent_spark.core.errors import IntentError
from intent_spark.evaluate.metrics import KS, METRICS, TIE_RATE
from intent_spark.report.load import Results, checked_floors
from intent_spark.report.render import write_report
from intent_spark.report.tables import view_table, wide_view

MODELS = ("popularity", "sasrec")
GRID_HEADER_RGB = (0x5B, 0x2A, 0x86)  # only the grid's header has this colour
SUMMARY_HEADER_RGB = (0x0B, 0x6E, 0x4F)  # and only the summary's this one


def _metric_rows():
    rows = []
    for split in (S.TEST, S.VAL):
        for c, cell in enumerate(S.CELLS):
            for m, model in enumerate(MODELS):
                base = 0.05 * (c + 1) + 0.1 * m
                n_users = 400 if cell == "known_future_new" else 1500
                for metric in METRICS:
                    for k in KS:
                        value = base / (1 + k / 100)
                        rows.append(
                            (split, cell, model, metric, k, value, value - 0.01, value + 0.01, n_users)
                        )
                rows.append((split, cell, model, TIE_RATE, 0, 0.25 * m, None, None, n_users))
    # one hand value: sasrec on known_future_seen, NDCG@10, test
    rows = [
        (s, c, mo, me, k, 0.366, 0.310, 0.421, n)
        if (s, c, mo, me, k) == (S.TEST, "known_future_seen", "sasrec", "ndcg", 10)
        else (s, c, mo, me, k, v, lo, hi, n)
        for s, c, mo, me, k, v, lo, hi, n in rows
    ]
    frame = pd.DataFrame(
        rows, columns=[S.SPLIT, S.CELL, S.MODEL, "metric", "k", "value", "ci_low", "ci_high", "n_users"]
    )
    frame.insert(0, S.DATASET, "d")
    frame["n_targets"] = frame["n_users"] * 2
    frame["below_floor"] = frame["n_users"] < 1000
    return frame


def _comparison_rows():
    columns = [f.name for f in S.COMPARISONS_SCHEMA.fields]
    rows = [
        (
            "d",
            S.TEST,
            S.PAIRED,
            "popularity",
            "sasrec",
            "known_future_seen",
            "ndcg_10",
            -0.2,
            -0.25,
            -0.15,
            1500,
            1e-9,
            2e-9,  # Holm over the two paired comparisons: 2 x 1e-9, then max(2e-9, 0.4)
            "holm",
            2,
            0.03,
        ),
        (
            "d",
            S.TEST,
            S.PAIRED,
            "popularity",
            "sasrec",
            "new_future_new",
            "ndcg_10",
            0.01,
            -0.02,
            0.04,
            1500,
            0.4,
            0.4,
            "holm",
            2,
            0.045,
        ),
    ]
    for model in MODELS:
        rows.append(
            (
                "d",
                S.TEST,
                S.MEMORIZATION_GAP,
                model,
                None,
                "known_future_seen-known_future_new",
                "ndcg_10",
                0.1,
                0.05,
                0.15,
                400,
                0.01,
                0.02,
                "holm",
                2,
                0.04,
            )
        )
        rows.append(
            (
                "d",
                S.TEST,
                S.RETENTION,
                model,
                None,
                "new_future_seen/new_past_seen",
                "ndcg_10",
                0.8,
                0.7,
                0.9,
                1500,
                None,
                None,
                None,
                None,
                None,
            )
        )
    return pd.DataFrame(rows, columns=columns)


def _summary():
    split = {
        "cutoff": "2022-03-01T00:00:00",
        "rule": "rule",
        "granularity": "month",
        "train_share": 0.8,
        "horizon_days": 92.0,
        "holdout_fraction": 0.1,
        "seed": 0,
        "training_users": 12000,
        "history_mean": 7.25,
        "history_median": 5.0,
        "evaluation_users_seen_in_training": 0.9,
        "target_items_seen_in_training": 0.75,
        "repeat_rate": 0.004,
        "cells": {
            cell: {"users": 1500, "targets": 3000, "below_floor": False, "repeat_rate": 0.004}
            for cell in S.CELLS
        },
        "candidates": [
            {
                "at": f"2022-{m:02d}-01T00:00:00",
                "share": 0.6 + 0.05 * m,
                "admissible": m in (3, 4),
                "chosen": m == 3,
            }
            for m in range(1, 6)
        ],
        "histogram": [
            {"start": f"2022-{m:02d}-01T00:00:00", "events": 1000 + 10 * m, "known": 900} for m in range(1, 7)
        ],
    }
    return {"dataset": "d", "splits": {S.TEST: split, S.VAL: dict(split, cutoff="2022-01-01T00:00:00")}}


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    results = Results(_metric_rows(), _comparison_rows(), {"d": _summary()}, floors={"d": 1000})
    page = write_report(results, out)
    return results, out, page


def test_views_select_the_papers_measures():
    views = {
        name: set(view_table(_metric_rows(), name)["measure"]) for name in ("intent", "panther", "horizon")
    }
    assert views["intent"] == {"ndcg@10"}
    assert views["panther"] == {"hr@1", "hr@5", "hr@10", "ndcg@5"}
    assert views["horizon"] == {
        f"{m}@{k}" for m in ("ndcg", "mrr", "recall", "precision") for k in (10, 50, 100)
    }


def test_grid_puts_validation_beside_test_with_intervals_and_floor_marks():
    grid = wide_view(_metric_rows(), "d", "intent", (S.TEST, S.VAL))
    assert list(grid.index) == list(S.CELLS)
    assert grid.loc["known_future_seen", ("sasrec", S.TEST)] == "0.366 [0.310, 0.421]"
    assert grid.loc["known_future_new", ("sasrec", S.TEST)].endswith("†")  # 400 users < 1,000
    assert ("sasrec", S.VAL) in grid.columns


def test_report_writes_tables_markdown_and_labelled_figures(report):
    results, out, page = report
    assert page.name == "report.html" and page.exists()
    for name in ("metrics", "comparisons", "intent_view", "panther_view", "horizon_view", "context"):
        assert (out / "tables" / f"{name}.csv").stat().st_size > 0
    intent = pd.read_csv(out / "tables" / "intent_view.csv")
    assert len(intent) == 2 * len(S.CELLS) * len(MODELS)
    markdown = (out / "report.md").read_text()
    assert "0.366 [0.310, 0.421]" in markdown
    assert "no significant difference" in markdown and "sasrec better" in markdown
    assert "| drift reference |" not in markdown  # no repeat_last in these results
    expected = {
        "grid": ["model", "cell"],
        "scores": ["cell", "NDCG@10 (test, 95% interval)"],
        "memorization_gap": [
            "users and period (seen-item cell minus new-item cell)",
            "NDCG@10 gap (test, 95% interval)",
        ],
        "cutoff_histogram": ["month (start)", "events per month"],
    }
    for name, labels in expected.items():
        image = Image.open(out / "figures" / f"d_{name}.png")
        assert labels in json.loads(image.text["intent.axes"]), name
        pixels = np.asarray(image.convert("L"))
        assert image.size[0] > 400 and pixels.std() > 10, name  # not blank


def _chromium() -> str | None:
    return shutil.which("chromium-headless-shell") or shutil.which("chromium")


CHROMIUM_MISSING = "headless Chromium not installed (apt-get install chromium-headless-shell)"
# Measured after the page (and its images) loaded, written into the DOM that --dump-dom prints.
PROBE = """<script>window.addEventListener('load', () => {
  const root = document.documentElement, top = document.getElementById('summary');
  document.body.dataset.overflow = String(root.scrollWidth - window.innerWidth);
  document.body.dataset.viewport = window.innerWidth + 'x' + window.innerHeight;
  document.body.dataset.summaryTop = top ? String(top.getBoundingClientRect().top) : 'none';
  document.body.dataset.summaryTableTop = String(document.getElementById('summary-grid').getBoundingClientRect().top);
});</script>"""


def _chromium_base() -> list[str]:
    return [str(_chromium()), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"]


def _measure(page, tmp_path, width=1366, height=768) -> dict[str, str]:
    """The probe's readings of ``page`` in a ``width`` x ``height`` window."""
    probed = tmp_path / f"probed_{page.stem}.html"
    probed.write_text(
        page.read_text(encoding="utf-8").replace("</body>", PROBE + "</body>"), encoding="utf-8"
    )
    done = subprocess.run(
        [
            *_chromium_base(),
            f"--window-size={width},{height}",
            "--virtual-time-budget=10000",
            "--dump-dom",
            probed.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    found = dict(re.findall(r'data-([a-z-]+)="([^"]*)"', done.stdout.split("<body", 1)[1].split(">", 1)[0]))
    assert found, done.stdout[:2000]
    return found


@pytest.mark.skipif(_chromium() is None, reason=CHROMIUM_MISSING)
def test_report_renders_in_headless_chromium(report, tmp_path):
    _, _, page = report
    shot = tmp_path / "page.png"
    done = subprocess.run(
        [
            *_chromium_base(),
            "--enable-logging=stderr",
            f"--screenshot={shot}",
            "--window-size=1366,768",
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Uncaught" not in done.stderr and "net::ERR" not in done.stderr, done.stderr[-2000:]
    dom = subprocess.run(
        [*_chromium_base(), "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120
    )
    assert '<table id="grid-d" class="grid">' in dom.stdout
    assert dom.stdout.count('src="data:image/png;base64,') == 4
    # the first screen shows the summary: its header rows in their own colour
    pixels = np.asarray(Image.open(shot).convert("RGB")).astype(int)
    header = (np.abs(pixels - np.array(SUMMARY_HEADER_RGB)).sum(axis=2) < 12).sum()
    assert header > 3000, header


@pytest.mark.skipif(_chromium() is None, reason=CHROMIUM_MISSING)
def test_page_fits_a_1366_by_768_screen_with_the_summary_on_it(tmp_path):
    # eight datasets, as in the demo-full report: the widest tables a report makes
    datasets = [f"dataset_{i}" for i in range(8)]
    metrics = pd.concat([_metric_rows().assign(dataset=d) for d in datasets], ignore_index=True)
    comparisons = pd.concat([_comparison_rows().assign(dataset=d) for d in datasets], ignore_index=True)
    summaries = {d: dict(_summary(), dataset=d) for d in datasets}
    page = write_report(Results(metrics, comparisons, summaries), tmp_path / "wide")
    found = _measure(page, tmp_path)
    assert found["viewport"] == "1366x768"
    assert int(float(found["overflow"])) <= 0, found
    assert 0 <= float(found["summary-top"]) < 200 and float(found["summary-table-top"]) < 768, found
    # the probe sees overflow where there is some: the same page without its scroll boxes
    unboxed = tmp_path / "unboxed.html"
    unboxed.write_text(
        page.read_text(encoding="utf-8").replace(".wide{max-width:100%;overflow-x:auto;", ".wide{")
    )
    assert int(float(_measure(unboxed, tmp_path)["overflow"])) > 100


def test_summary_names_each_cells_leader_and_whether_its_lead_is_real(report):
    _, out, page = report
    summary = pd.read_csv(out / "summary.csv").set_index(S.CELL)
    assert list(summary.index) == list(S.CELLS)
    seen = summary.loc["known_future_seen"]
    assert (seen["leader"], seen["runner_up"]) == ("sasrec", "popularity")
    assert seen["leader_ndcg_10"] == 0.366 and (seen["leader_ci_low"], seen["leader_ci_high"]) == (
        0.310,
        0.421,
    )
    # the stored comparison is popularity - sasrec = -0.2: sasrec leads by +0.2, adjusted p 2e-9
    assert seen["lead"] == pytest.approx(0.2) and seen["p_adjusted"] == 2e-9 and bool(seen["significant"])
    last = summary.loc["new_future_new"]
    assert last["lead"] == pytest.approx(-0.01) and not last["significant"] and last["mde"] == 0.045
    assert bool(summary.loc["known_future_new", "below_floor"])  # 400 users
    assert summary["repeat_rate"].eq(0.004).all()
    text = page.read_text(encoding="utf-8")
    assert text.index('id="summary"') < text.index('id="d"')  # the summary opens the page
    assert "ahead of popularity by +0.200 (p adj 2e-09)" in text
    assert "no significant lead over popularity: -0.010, p adj 0.4, detectable 0.045" in text
    assert "0.4% of test targets repeat an item of their own context" in text
    # every section is linked from the contents
    anchors = set(re.findall(r'<h[23] id="([^"]+)"', text))
    assert len(anchors) > 15 and all(f'href="#{a}"' in text for a in anchors)
    markdown = (out / "report.md").read_text()
    assert "no significant difference (detectable: 0.045)" in markdown  # the paired table's verdict
    # the summary's first line: 7 cells, known_future_new's 400 users under the protocol's floor
    first = markdown.split("## Summary\n\n", 1)[1].splitlines()[0]
    assert first == "6 of 7 test cells ranked: a cell with fewer than 1,000 users is not ranked."


def test_a_demo_floor_ranks_more_cells_and_the_summary_says_it_is_a_demo_floor(tmp_path):
    metrics = _metric_rows()
    # flagged at the protocol's 1,000 by the run that evaluated it: a report at 200 refuses them
    with pytest.raises(
        IntentError,
        match=r"^lake/metrics: d's cells were ranked at another user floor than 200 "
        r"\(known_future_new: 400 users, flagged below the floor\); give the floor of the run",
    ):
        checked_floors(metrics, {"d": 200}, "lake/metrics")
    assert checked_floors(metrics, {"d": 1000}, "lake/metrics") == {"d": 1000}
    metrics["below_floor"] = metrics["n_users"] < 200  # as an evaluate at a demo floor of 200 flags them
    results = Results(
        metrics,
        _comparison_rows(),
        {"d": _summary()},
        floors=checked_floors(metrics, {"d": 200}, "l/metrics"),
    )
    markdown = (write_report(results, tmp_path / "demo").parent / "report.md").read_text()
    first = markdown.split("## Summary\n\n", 1)[1].splitlines()[0]
    assert first == (
        "7 of 7 test cells ranked: a cell with fewer than 200 users is not ranked. A demo floor, below "
        "the protocol's 1,000 users: its scores are noisier than the benchmark's."
    )


def test_a_floor_override_is_the_first_thing_the_summary_says(tmp_path):
    metrics = _metric_rows()
    metrics["below_floor"] = metrics["n_users"] < 500  # known_future_new's 400 users fall under 500
    override = "d shown at 500 users (--floor-users), its split's floor is 1,000"
    results = Results(metrics, _comparison_rows(), {"d": _summary()}, floors={"d": 500}, overrides=[override])
    markdown = (write_report(results, tmp_path / "override").parent / "report.md").read_text()
    first = markdown.split("## Summary\n\n", 1)[1].splitlines()[0]
    assert first == (
        "Floor override: d shown at 500 users (--floor-users), its split's floor is 1,000. 6 of 7 test "
        "cells ranked: a cell with fewer than 500 users is not ranked. A demo floor, below the "
        "protocol's 1,000 users: its scores are noisier than the benchmark's."
    )


def test_findings_state_gaps_retention_and_the_loss_beyond_repeat_last():
    from intent_spark.report.summary import cross_dataset, finding_sentences, summary_table

    def retention(dataset, model, value):
        return (dataset, S.TEST, S.RETENTION, model, None, "new_future_seen/new_past_seen", "ndcg_10", value)

    def gap(dataset, model, value):
        cell = "known_future_seen-known_future_new"
        return (dataset, S.TEST, S.MEMORIZATION_GAP, model, None, cell, "ndcg_10", value)

    rows = [
        retention("d1", "sasrec", 0.6),
        retention("d2", "sasrec", 0.7),
        retention("d1", "repeat_last", 0.8),
        retention("d2", "repeat_last", 0.8),
        gap("d1", "sasrec", 0.30),
        gap("d2", "sasrec", 0.10),
    ]
    columns = [S.DATASET, S.SPLIT, "kind", S.MODEL, "baseline", S.CELL, "metric", "value"]
    sentences = finding_sentences(pd.DataFrame(rows, columns=columns))
    assert sentences == [
        "repeat_last keeps 80% on all 2 datasets of its new-user score across the cutoff (seen items).",
        "sasrec scores +0.200 (median of 2 datasets; +0.100 on d2 to +0.300 on d1) NDCG@10 higher on "
        "seen items than on new ones (known users after the cutoff); keeps 65% (median of 2 datasets; "
        "60% on d1 to 70% on d2) of its new-user score across the cutoff (seen items); 15% less than "
        "repeat_last keeps (median of 2): a loss beyond repeat-last's is its own.",
    ]
    # leads across datasets count only cells above the floor
    metrics = _metric_rows()
    metrics = pd.concat([metrics, metrics.assign(dataset="e")], ignore_index=True)
    table = summary_table(metrics, _comparison_rows(), {})
    leads = cross_dataset(table)
    assert leads.loc["known_future_seen", "sasrec"] == "2 (1 significant)"  # e has no comparisons
    assert (
        "known_future_new" not in leads.index
        or leads.loc["known_future_new", "datasets below the floor"] == 2
    )


def test_a_cell_where_the_top_models_tie_has_no_leader():
    from intent_spark.report.summary import cross_dataset, lead_text, summary_table

    rows = [
        ("d", S.TEST, "new_future_new", model, "ndcg", 10, value, 0.0, value, 2000, 2000, False)
        for model, value in (("gru4rec", 0.0), ("popularity", 0.0), ("sasrec", 0.0))
    ] + [
        ("d", S.TEST, "known_past", model, "ndcg", 10, value, value - 0.01, value + 0.01, 2000, 2000, False)
        for model, value in (("popularity", 0.2), ("sasrec", 0.2), ("repeat_last", 0.1))
    ]
    columns = [S.DATASET, S.SPLIT, S.CELL, S.MODEL, "metric", "k", "value", "ci_low", "ci_high"]
    metrics = pd.DataFrame(rows, columns=[*columns, "n_users", "n_targets", "below_floor"])
    table = summary_table(
        metrics, pd.DataFrame(columns=["dataset", "split", "kind", "cell", "model", "baseline"]), {}
    )
    texts = {r[S.CELL]: lead_text(r) for _, r in table.iterrows()}
    assert texts["new_future_new"] == "every model 0.000: no leader\nno lead to test"
    assert (
        texts["known_past"] == "popularity and sasrec tie at 0.200\u00a0[0.190,\u00a00.210]\nno lead to test"
    )
    assert table["tied"].all()
    leads = cross_dataset(table)  # a tie counts as nobody's lead
    assert [c for c in leads.columns if c != "datasets below the floor"] == []


def test_the_report_shows_each_datasets_floor_and_says_an_override_first(spark, tmp_path):
    """The floor each dataset's evaluate flagged its cells at (``metrics.floor_users``); one that
    is not its split's, an evaluate's override or the report's own, is said."""
    from intent_spark.lake.context import Lake
    from intent_spark.lake.tables import write_dataset
    from intent_spark.report.load import lake_floors

    lake = Lake(spark, str(tmp_path / "lake"))
    for dataset in ("d", "e"):
        counts = [(dataset, "test", "known_future_new", 400, 800, True, 1000)]
        write_dataset(
            spark.createDataFrame(counts, S.SPLIT_COUNTS_SCHEMA), lake.root, S.SPLIT_COUNTS, dataset
        )
    d, e = _metric_rows().assign(floor_users=1000), _metric_rows().assign(dataset="e", floor_users=200)
    e["below_floor"] = e["n_users"] < 200
    metrics = pd.concat([d, e], ignore_index=True)
    assert lake_floors(lake, metrics, None) == (
        {"d": 1000, "e": 200},
        ["e evaluated at 200 users (--floor-users), its split's floor is 1,000"],
    )
    assert lake_floors(lake, metrics, 500) == (
        {"d": 500, "e": 500},
        [
            "d shown at 500 users (--floor-users), its split's floor is 1,000",
            "e shown at 500 users (--floor-users), its split's floor is 1,000",
        ],
    )
    # metrics written before the floor was kept: checked against the split's
    assert lake_floors(lake, d.drop(columns="floor_users"), None) == ({"d": 1000}, [])
