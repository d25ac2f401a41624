"""The report on hand-built results: its tables, figures, and the page as headless Chromium
renders it."""

from __future__ import annotations

import json
import shutil
import subprocess

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from intent_spark.core import schema as S
from intent_spark.evaluate.metrics import KS, METRICS, TIE_RATE
from intent_spark.report.build import Results, view_table, wide_view, write_report

MODELS = ("popularity", "sasrec")
GRID_HEADER_RGB = (0x5B, 0x2A, 0x86)  # only the grid's header has this colour


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
        "cells": {cell: {"users": 1500, "targets": 3000, "below_floor": False} for cell in S.CELLS},
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
    results = Results(_metric_rows(), _comparison_rows(), {"d": _summary()})
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


@pytest.mark.skipif(
    _chromium() is None, reason="headless Chromium not installed (apt-get install chromium-headless-shell)"
)
def test_report_renders_in_headless_chromium(report, tmp_path):
    _, _, page = report
    base = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"]
    shot = tmp_path / "page.png"
    done = subprocess.run(
        [*base, "--enable-logging=stderr", f"--screenshot={shot}", "--window-size=1400,1000", page.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Uncaught" not in done.stderr and "net::ERR" not in done.stderr, done.stderr[-2000:]
    dom = subprocess.run([*base, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120)
    assert '<table id="grid-d" class="grid">' in dom.stdout
    assert dom.stdout.count('src="data:image/png;base64,') == 4
    # the first screen shows the grid: its header rows in their own colour
    pixels = np.asarray(Image.open(shot).convert("RGB")).astype(int)
    header = (np.abs(pixels - np.array(GRID_HEADER_RGB)).sum(axis=2) < 12).sum()
    assert header > 5000, header
