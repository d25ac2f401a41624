"""The report's backtest part: each backtested dataset's origins, every model's test cell scores
over them with intervals, and Kendall tau-b of the model order between consecutive origins.

Reads ``LAKE/reports/compare/<dataset>.origins.csv`` and ``.backtest.csv`` (the backtest
stage's) and the origin variants' ``metrics`` rows.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from intent_spark.core import schema as S
from intent_spark.lake.context import Lake
from intent_spark.lake.figures import pyplot, save_figure
from intent_spark.lake.reports import read_compare_csv
from intent_spark.report.section import Section

PRIMARY = ("ndcg", 10)


def _origin_scores(metrics: pd.DataFrame, origins: pd.DataFrame) -> pd.DataFrame:
    """Test NDCG@10 rows of every origin variant and the full data, labelled by origin."""
    metric, k = PRIMARY
    labels = dict(zip(origins["variant"], origins["label"], strict=True))
    rows = metrics[
        metrics[S.DATASET].isin(list(labels))
        & (metrics[S.SPLIT] == S.TEST)
        & (metrics["metric"] == metric)
        & (metrics["k"] == k)
        & ~metrics[S.MODEL].str.contains("@", regex=False)
    ]
    return rows.assign(origin=rows[S.DATASET].map(labels))


def origins_table(origins: pd.DataFrame) -> pd.DataFrame:
    table = pd.DataFrame(
        {
            "origin (data before)": origins["label"],
            "test cutoff": origins["test_cutoff"].astype(str).str[:10],
            "validation cutoff": origins["val_cutoff"].astype(str).str[:10],
            "train share": origins["train_share"].map(lambda v: "n/a" if pd.isna(v) else f"{v:.3f}"),
        }
    )
    return table.set_index("origin (data before)")


def scores_over_origins(metrics: pd.DataFrame, origins: pd.DataFrame) -> pd.DataFrame:
    """(cell, model) down, origins across (oldest first, the full data last): NDCG@10 [95%]."""
    rows = _origin_scores(metrics, origins)
    text = rows.apply(
        lambda r: (
            f"{r['value']:.3f} [{r['ci_low']:.3f}, {r['ci_high']:.3f}]" + ("†" if r["below_floor"] else "")
        ),
        axis=1,
    )
    wide = rows.assign(text=text).pivot_table(
        index=[S.CELL, S.MODEL], columns="origin", values="text", aggfunc="first"
    )
    cells = [c for c in S.CELLS if c in set(rows[S.CELL])]
    order = [(c, m) for c in cells for m in sorted(set(rows[S.MODEL]))]
    return wide.reindex(index=[i for i in order if i in wide.index], columns=list(origins["label"])).fillna(
        ""
    )


def tau_table(agreement: pd.DataFrame) -> pd.DataFrame:
    """Cells down, consecutive origin pairs across: tau-b [95% paired bootstrap interval]."""
    if agreement.empty:
        return pd.DataFrame()
    pair = agreement["origin_a"].astype(str) + " → " + agreement["origin_b"].astype(str)

    def text(r) -> str:
        if pd.isna(r["tau"]):
            return "undefined"
        interval = "" if pd.isna(r["ci_low"]) else f" [{r['ci_low']:.2f}, {r['ci_high']:.2f}]"
        return f"{r['tau']:.2f}{interval}"

    wide = agreement.assign(pair=pair, text=agreement.apply(text, axis=1)).pivot_table(
        index=S.CELL, columns="pair", values="text", aggfunc="first", sort=False
    )
    return wide.reindex([c for c in S.CELLS if c in wide.index]).fillna("")


def plot_origins(metrics: pd.DataFrame, origins: pd.DataFrame, dataset: str, path: Path) -> Path:
    """One panel per cell: each model's NDCG@10 over the origins, with 95% intervals."""
    plt = pyplot()
    rows = _origin_scores(metrics, origins)
    cells = [c for c in S.CELLS if c in set(rows[S.CELL])]
    labels = list(origins["label"])
    columns = 4
    lines = max(1, -(-len(cells) // columns))
    fig, axes = plt.subplots(lines, columns, figsize=(13, 3.1 * lines), squeeze=False, sharex=True)
    for ax, cell in zip(axes.flat, cells, strict=False):
        mine = rows[rows[S.CELL] == cell]
        for model, group in mine.groupby(S.MODEL):
            group = group.set_index("origin").reindex(labels)
            x = np.arange(len(labels))
            err = np.vstack([(group["value"] - group["ci_low"]), (group["ci_high"] - group["value"])])
            ax.errorbar(x, group["value"], yerr=err, marker="o", ms=3, capsize=2, label=model)
        ax.set_title(cell, fontsize=9)
        ax.set_xticks(range(len(labels)), labels, rotation=30, fontsize=7)
        ax.set_ylabel("NDCG@10 (test)")
        ax.set_xlabel("origin")
    for ax in list(axes.flat)[len(cells) :]:
        ax.axis("off")
    if cells:
        axes.flat[0].legend(fontsize=7)
    fig.suptitle(f"{dataset}: cell scores at each backtest origin (95% intervals)")
    return save_figure(fig, path, f"{dataset} backtest")


def backtest_sections(lake: Lake, metrics: pd.DataFrame, datasets: list[str], figures: Path) -> list[Section]:
    """A section triple per backtested dataset among ``datasets``; none when no backtest ran."""
    origins_all = read_compare_csv(lake.root, "origins")
    agreement_all = read_compare_csv(lake.root, "backtest")
    if origins_all.empty:
        return []
    sections = []
    for dataset in [d for d in datasets if d in set(origins_all[S.DATASET])]:
        origins = origins_all[origins_all[S.DATASET] == dataset].reset_index(drop=True)
        agreement = (
            agreement_all[agreement_all[S.DATASET] == dataset] if not agreement_all.empty else agreement_all
        )
        backs = len(origins) - 1
        figures.mkdir(parents=True, exist_ok=True)
        sections += [
            Section(
                f"{dataset}: backtest origins",
                origins_table(origins),
                f"The whole INTENT split again on the events before each of the last {backs} month "
                "boundaries before the data's end, with the same rule and holdout seed; `end` is the "
                "benchmark on all the data.",
            ),
            Section(
                f"{dataset}: cell scores over the origins (NDCG@10, test)",
                scores_over_origins(metrics, origins),
                "Each origin's own cells: its users held out by the same hash, its items new to its "
                "own training period. 95% intervals over users; † under the user floor.",
                plot_origins(metrics, origins, dataset, figures / f"{dataset}_backtest.png"),
            ),
            Section(
                f"{dataset}: does the model order hold between origins? (Kendall tau-b)",
                tau_table(agreement),
                "Tau of each cell's model order at consecutive origins (1: the same order); 95% "
                "interval from paired user-bootstrap replicates, a user's weight the same at every origin.",
            ),
        ]
    return sections
