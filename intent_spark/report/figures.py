"""The report's figures, one PNG each: the cell grid, the scores by cell, the memorization gap
and each split's cutoff histogram."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from intent_spark.core import schema as S
from intent_spark.lake.figures import interval_bars, pyplot, save_figure
from intent_spark.report.load import Results
from intent_spark.report.split import plot_split_histogram
from intent_spark.report.tables import FLOOR_MARK, primary_rows


def plot_grid_heatmap(results: Results, dataset: str, path: Path) -> Path:
    """NDCG@10 by cell and model on the test split; cells under the user floor are marked."""
    plt = pyplot()
    rows = primary_rows(results.metrics, dataset)
    models = results.models(dataset)
    cells = [c for c in S.CELLS if c in set(rows[S.CELL])]
    value = rows.pivot_table(index=S.CELL, columns=S.MODEL, values="value", aggfunc="first").reindex(
        index=cells, columns=models
    )
    floor = rows.pivot_table(index=S.CELL, columns=S.MODEL, values="below_floor", aggfunc="first").reindex(
        index=cells, columns=models
    )
    fig, ax = plt.subplots(figsize=(1.6 * len(models) + 3.5, 0.55 * len(cells) + 1.8))
    image = ax.imshow(value.to_numpy(dtype=float), cmap="viridis", aspect="auto", vmin=0)
    ax.set_xticks(range(len(models)), models)
    ax.set_yticks(range(len(cells)), cells)
    top = float(pd.DataFrame(value).max().max() or 1.0)
    for i, cell in enumerate(cells):
        for j, model in enumerate(models):
            v = value.loc[cell, model]
            if pd.isna(v):
                continue
            mark = FLOOR_MARK if floor.loc[cell, model] else ""
            colour = "black" if v > 0.6 * top else "white"
            ax.text(j, i, f"{v:.3f}{mark}", ha="center", va="center", color=colour, fontsize=9)
    ax.set_xlabel("model")
    ax.set_ylabel("cell")
    ax.set_title(f"{dataset}: NDCG@10, test split ({FLOOR_MARK} under the user floor)")
    bar = fig.colorbar(image, ax=ax)
    bar.set_label("NDCG@10")
    return save_figure(fig, path, f"{dataset} cell grid")


def plot_cell_scores(results: Results, dataset: str, path: Path) -> Path:
    """Each model's NDCG@10 per cell with its 95% interval."""
    plt = pyplot()
    rows = primary_rows(results.metrics, dataset)
    models = results.models(dataset)
    cells = [c for c in S.CELLS if c in set(rows[S.CELL])]
    fig, ax = plt.subplots(figsize=(11, 4.2))
    interval_bars(ax, rows, S.CELL, cells, models)
    ax.set_xlabel("cell")
    ax.set_ylabel("NDCG@10 (test, 95% interval)")
    ax.set_title(f"{dataset}: model scores by cell")
    return save_figure(fig, path, f"{dataset} cell scores")


def plot_memorization_gap(results: Results, dataset: str, path: Path) -> Path:
    """Seen minus new NDCG@10 per model and user group, with 95% intervals."""
    import numpy as np

    plt = pyplot()
    c = results.comparisons
    rows = c[(c[S.DATASET] == dataset) & (c["kind"] == S.MEMORIZATION_GAP) & (c[S.SPLIT] == S.TEST)]
    groups = sorted(rows[S.CELL].unique(), key=lambda g: S.CELLS.index(g.split("-")[0]))
    models = results.models(dataset)
    width = 0.8 / max(len(models), 1)
    fig, ax = plt.subplots(figsize=(9, 4))
    for j, model in enumerate(models):
        mine = rows[rows[S.MODEL] == model].set_index(S.CELL).reindex(groups)
        x = np.arange(len(groups)) + (j - (len(models) - 1) / 2) * width
        err = np.vstack(
            [(mine["value"] - mine["ci_low"]).fillna(0), (mine["ci_high"] - mine["value"]).fillna(0)]
        )
        ax.bar(x, mine["value"].fillna(0).to_numpy(), width, yerr=err, capsize=2, label=model)
    ax.axhline(0, color="#444", lw=0.8)
    ax.set_xticks(range(len(groups)), [g.split("-")[0].removesuffix("_seen") for g in groups])
    ax.set_xlabel("users and period (seen-item cell minus new-item cell)")
    ax.set_ylabel("NDCG@10 gap (test, 95% interval)")
    ax.set_title(f"{dataset}: memorization gap")
    if models:
        ax.legend(fontsize=8)
    return save_figure(fig, path, f"{dataset} memorization gap")


def plot_cutoff_histogram(summary: dict[str, Any], dataset: str, path: Path) -> Path:
    plot_split_histogram(summary["splits"][S.TEST], f"{dataset}: events and the test cutoff", path)
    return path


FIGURES: tuple[tuple[str, str, Callable[..., Path]], ...] = (
    ("grid", "Cell grid", plot_grid_heatmap),
    ("scores", "Scores by cell", plot_cell_scores),
    ("memorization_gap", "Memorization gap", plot_memorization_gap),
)


FIGURE_TITLES = {**{name: title for name, title, _ in FIGURES}, "cutoff_histogram": "Cutoff histogram"}


def write_figures(results: Results, dataset: str, folder: Path) -> dict[str, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    made = {name: plot(results, dataset, folder / f"{dataset}_{name}.png") for name, _, plot in FIGURES}
    made["cutoff_histogram"] = plot_cutoff_histogram(
        results.summaries[dataset], dataset, folder / f"{dataset}_cutoff_histogram.png"
    )
    return made
