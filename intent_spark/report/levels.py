"""The report's item-level comparison: one source ingested at two or more item levels (the
merchant and its MCC, the article and its product type), its cells side by side.

New items arise mainly at the fine level, since merchants open continually and category codes
rarely change: the new-item cells shrink or vanish at a coarse level, and the table shows by how
much. Reads small tables only: the ingest manifest (a row per raw file) and ``metrics`` rows.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from intent_spark.core import schema as S
from intent_spark.lake.context import Lake
from intent_spark.lake.figures import interval_bars, pyplot, save_figure
from intent_spark.report.compare import _score, own_primary_rows
from intent_spark.report.section import Section


def levels_by_source(lake: Lake, datasets: list[str]) -> dict[str, dict[str, str]]:
    """source -> {item level: dataset} for each source the chosen datasets hold at 2+ levels
    (a second dataset at the same level, like KuaiRand's all-signals mode, is left out)."""
    if not lake.has(S.INGEST_FILES):
        return {}
    manifest = lake.read(S.INGEST_FILES)
    if S.ITEM_LEVEL not in manifest.columns:  # a lake ingested before item levels
        return {}
    recorded = (
        manifest.where(manifest[S.DATASET].isin(datasets))
        .select(S.DATASET, "source", S.ITEM_LEVEL)
        .distinct()
        .toPandas()  # a row per dataset
        .sort_values(S.DATASET)
    )
    found: dict[str, dict[str, str]] = {}
    for row in recorded.itertuples():
        found.setdefault(row.source, {}).setdefault(row.item_level, row.dataset)
    return {source: levels for source, levels in sorted(found.items()) if len(levels) > 1}


def _level_rows(metrics: pd.DataFrame, levels: dict[str, str]) -> pd.DataFrame:
    """The test NDCG@10 rows of each level's dataset, with its ``level``."""
    rows = own_primary_rows(metrics, list(levels.values()))
    return rows.assign(level=rows[S.DATASET].map({dataset: level for level, dataset in levels.items()}))


def level_table(metrics: pd.DataFrame, levels: dict[str, str]) -> pd.DataFrame:
    """Cells down; per model, each level's NDCG@10 with its interval, then each level's targets."""
    rows = _level_rows(metrics, levels)
    rows = rows.assign(text=rows.apply(_score, axis=1))
    columns = {}
    for model in sorted(rows[S.MODEL].unique()):
        for level in levels:
            mine = rows[(rows[S.MODEL] == model) & (rows["level"] == level)].set_index(S.CELL)
            columns[f"{model} · {level}"] = mine["text"]
    for level in levels:
        mine = rows[rows["level"] == level].drop_duplicates(S.CELL).set_index(S.CELL)
        columns[f"targets · {level}"] = mine["n_targets"].map(lambda n: f"{int(n):,}")
    table = pd.DataFrame(columns).reindex([c for c in S.CELLS if c in set(rows[S.CELL])])
    return table.fillna("").rename_axis(S.CELL)


def plot_levels(metrics: pd.DataFrame, source: str, levels: dict[str, str], path: Path) -> Path:
    """One panel per model: each cell's NDCG@10 at every level, with 95% intervals."""
    plt = pyplot()
    rows = _level_rows(metrics, levels)
    rows = rows.assign(model=rows["level"], scored=rows[S.MODEL])  # interval_bars: one bar per level
    models = sorted(rows["scored"].unique())
    cells = [c for c in S.CELLS if c in set(rows[S.CELL])]
    fig, axes = plt.subplots(1, max(len(models), 1), figsize=(4.2 * max(len(models), 1), 3.6), squeeze=False)
    for ax, model in zip(axes[0], models, strict=False):
        interval_bars(ax, rows[rows["scored"] == model], S.CELL, cells, list(levels))
        ax.set_title(model)
        ax.set_xlabel("cell")
        ax.set_ylabel("NDCG@10 (test)")
    return save_figure(fig, path, f"{source}: item levels side by side")


def level_sections(lake: Lake, metrics: pd.DataFrame, datasets: list[str], figures: Path) -> list[Section]:
    """A section per source held at two or more item levels among ``datasets``."""
    sections = []
    for source, levels in levels_by_source(lake, datasets).items():
        figures.mkdir(parents=True, exist_ok=True)
        names = ", ".join(f"{dataset} ({level})" for level, dataset in levels.items())
        sections.append(
            Section(
                f"{source}: item levels side by side",
                level_table(metrics, levels),
                f"The same events with items at each level: {names}. Test NDCG@10 with 95% intervals "
                "and each level's targets; blank where a level has no target in the cell. The levels "
                "hold out the same users, so a target is the same event at each level, but a label "
                "seen before the cutoff makes its target a seen-item one even where the merchant or "
                "product is new.",
                plot_levels(metrics, source, levels, figures / f"item_levels_{source}.png"),
            )
        )
    return sections
