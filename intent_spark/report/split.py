"""The split report of a dataset: its summary as JSON, a Markdown page and one figure per split
of the event histogram with the candidates, the admissible band and the chosen cutoff."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from intent_spark.lake.context import Lake
from intent_spark.lake.figures import pyplot, save_figure
from intent_spark.lake.files import on_store


def split_markdown(summary: dict[str, Any]) -> str:
    lines = [f"# Split report: {summary['dataset']}", ""]
    for name, split in summary["splits"].items():
        lines += [
            f"## {name} split",
            "",
            f"- cutoff {split['cutoff']} ({split['rule']}, {split['granularity']} candidates), "
            f"train share {split['train_share']:.3f}, horizon {split['horizon_days']:.1f} days",
            f"- holdout fraction {split['holdout_fraction']}, seed {split['seed']}",
            f"- training users {split['training_users']:,}; history length mean "
            f"{_fmt(split['history_mean'])}, median {_fmt(split['history_median'])}",
            f"- evaluation users seen in training {_fmt(split['evaluation_users_seen_in_training'])}, "
            f"target items seen in training {_fmt(split['target_items_seen_in_training'])}",
            "",
            f"- targets that repeat an item of their own context: {_fmt(split.get('repeat_rate'))}",
            "",
            "| cell | users | targets | repeat rate | below the user floor |",
            "|---|---:|---:|---:|---|",
        ]
        for cell, counts in split["cells"].items():
            floor = "yes" if counts["below_floor"] else ""
            repeat = _fmt(counts.get("repeat_rate"))
            lines.append(f"| {cell} | {counts['users']:,} | {counts['targets']:,} | {repeat} | {floor} |")
        lines += ["", "| candidate | train share | admissible | chosen |", "|---|---:|---|---|"]
        for c in split["candidates"]:
            lines.append(
                f"| {c['at'][:10]} | {c['share']:.3f} | {'yes' if c['admissible'] else ''} | {'**yes**' if c['chosen'] else ''} |"
            )
        lines.append("")
    return "\n".join(lines)


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def plot_split_histogram(split: dict[str, Any], title: str, path: Path) -> None:
    """Events per month (or day), the running train share, the band and the chosen cutoff."""
    from datetime import datetime

    plt = pyplot()

    starts = [datetime.fromisoformat(h["start"]) for h in split["histogram"]]
    counts = [h["events"] for h in split["histogram"]]
    width = 25 if split["granularity"] == "month" else 0.8
    fig, ax = plt.subplots(figsize=(9, 4))
    ax.bar(starts, counts, width=width, align="edge", color="#9bb7d4", label="events")
    ax.set_ylabel(f"events per {split['granularity']}")
    ax.set_xlabel(f"{split['granularity']} (start)")
    share_ax = ax.twinx()
    at = [datetime.fromisoformat(c["at"]) for c in split["candidates"]]
    share_ax.plot(
        at, [c["share"] for c in split["candidates"]], "o-", color="#444", ms=3, label="train share"
    )
    share_ax.axhspan(0.75, 0.85, color="#7fbf7f", alpha=0.25, label="admissible band")
    share_ax.set_ylim(0, 1)
    share_ax.set_ylabel("train share at candidate")
    for c, when in zip(split["candidates"], at, strict=True):
        if c["admissible"]:
            share_ax.axvline(when, color="#7fbf7f", lw=0.6)
    cutoff = datetime.fromisoformat(split["cutoff"])
    share_ax.axvline(cutoff, color="#c0392b", lw=2, label=f"cutoff {cutoff:%Y-%m-%d} ({split['rule']})")
    share_ax.legend(loc="upper left", fontsize=8)
    ax.set_title(title)
    fig.autofmt_xdate()
    save_figure(fig, path, title)


def write_split_report(summary: dict[str, Any], folder: Path) -> Path:
    """``DATASET.json``, ``DATASET.md`` and ``DATASET_SPLIT_histogram.png`` in ``folder``."""
    dataset = summary["dataset"]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{dataset}.json").write_text(json.dumps(summary, indent=2, default=str))
    (folder / f"{dataset}.md").write_text(split_markdown(summary))
    for name, split in summary["splits"].items():
        plot_split_histogram(split, f"{dataset}: {name} split", folder / f"{dataset}_{name}_histogram.png")
    return folder


def split_report_writer(
    lake: Lake, dataset: str, out: Path | None = None
) -> Callable[[dict[str, Any]], Path] | None:
    """What the split stage hands its summary to: the writer into ``out``, by default
    LAKE/reports/split; None, said in one line, for a lake on an object store without ``out``."""
    if out is None and on_store(lake.root):
        lake.progress(
            f"{dataset}: no split report: a lake on an object store keeps none (intent split --out)"
        )
        return None
    folder = out or Path(lake.root) / "reports" / "split"
    return lambda summary: write_split_report(summary, folder)
