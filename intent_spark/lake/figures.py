"""Figures: matplotlib without a display, and PNGs whose axes are checked for labels."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig: Any, path: Path, title: str) -> Path:
    """Save a figure as PNG after checking every plotted axes is labelled; the labels also go
    into the PNG's text chunks so a reader (or a test) can check them without a human."""
    import matplotlib.pyplot as plt

    labels = []
    for ax in fig.get_axes():
        if not ax.get_visible() or not ax.has_data() and not ax.images:
            continue
        if getattr(ax, "_colorbar", None) is not None:  # a colour bar carries one label
            if not (ax.get_xlabel() or ax.get_ylabel()):
                raise ValueError(f"{path.name}: a colour bar without a label")
            continue
        # a twin axes shares its x axis (and label) with the axes it was made from
        x = next((a.get_xlabel() for a in ax.get_shared_x_axes().get_siblings(ax) if a.get_xlabel()), "")
        y = ax.get_ylabel()
        if not x or not y:
            raise ValueError(f"{path.name}: an axes without labels ({x!r}, {y!r})")
        labels.append([x, y])
    fig.tight_layout()
    fig.savefig(path, dpi=110, metadata={"Title": title, "intent.axes": json.dumps(labels)})
    plt.close(fig)
    return path


def interval_bars(ax: Any, rows: Any, key: str, categories: list[str], models: list[str]) -> None:
    """One bar per category and model, side by side, with its 95% interval as error bars;
    ``rows`` is a metrics frame (``model``, ``key``, ``value``, ``ci_low``, ``ci_high``)."""
    import numpy as np

    width = 0.8 / max(len(models), 1)
    for j, model in enumerate(models):
        mine = rows[rows["model"] == model].drop_duplicates(key).set_index(key).reindex(categories)
        x = np.arange(len(categories)) + (j - (len(models) - 1) / 2) * width
        low = (mine["value"] - mine["ci_low"]).clip(lower=0).fillna(0)
        high = (mine["ci_high"] - mine["value"]).clip(lower=0).fillna(0)
        ax.bar(
            x, mine["value"].fillna(0).to_numpy(), width, yerr=np.vstack([low, high]), capsize=2, label=model
        )
    ax.set_xticks(range(len(categories)), categories, rotation=20, ha="right")
    ax.legend(fontsize=8)
