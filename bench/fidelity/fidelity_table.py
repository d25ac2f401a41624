"""The fidelity table: each model's NDCG@10 and HR@10 over users with normal 95% intervals, and
paired differences (ours minus peer) on the same users, from ``user_metrics``."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

METRICS = ("ndcg_10", "hr_10")
Z = 1.959963984540054


def interval(values: pd.Series) -> dict[str, float]:
    n = int(values.shape[0])
    mean = float(values.mean())
    half = Z * float(values.std(ddof=1)) / math.sqrt(n) if n > 1 else float("nan")
    return {"mean": mean, "low": mean - half, "high": mean + half, "users": n}


def write_table(work: Path, out: Path, pairs: list[tuple[str, str]]) -> dict:
    users = pd.read_parquet(work / "user_metrics.parquet")
    ours_seconds = json.loads((work / "ours.json").read_text()) if (work / "ours.json").exists() else {}
    models: dict[str, dict] = {}
    for model, rows in users.groupby("model"):
        entry: dict = {metric: interval(rows[metric]) for metric in METRICS}
        info = work / "peers" / f"{model}.json"
        if info.exists():
            entry["peer"] = json.loads(info.read_text())
        elif f"train.{model}" in ours_seconds:
            entry["train_wall_seconds"] = ours_seconds[f"train.{model}"]
        models[str(model)] = entry
    comparisons = []
    for ours, peer in pairs:
        if ours not in models or peer not in models:
            continue
        a = users[users["model"] == ours].set_index("user_id")
        b = users[users["model"] == peer].set_index("user_id")
        shared = a.index.intersection(b.index)
        row = {"ours": ours, "peer": peer}
        for metric in METRICS:
            row[metric] = interval(a.loc[shared, metric] - b.loc[shared, metric])
        comparisons.append(row)
    result = {"dataset": "movielens_100k.leave_last_out", "models": models, "paired": comparisons}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    for model, entry in models.items():
        cells = "  ".join(
            f"{m} {entry[m]['mean']:.4f} [{entry[m]['low']:.4f}, {entry[m]['high']:.4f}]" for m in METRICS
        )
        print(f"{model:20s} {cells}")
    for row in comparisons:
        cells = "  ".join(
            f"d{m} {row[m]['mean']:+.4f} [{row[m]['low']:+.4f}, {row[m]['high']:+.4f}]" for m in METRICS
        )
        print(f"{row['ours']:>14s} - {row['peer']:18s} {cells}")
    return result
