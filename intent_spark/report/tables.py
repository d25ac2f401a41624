"""The report's tables as pandas frames (SPEC 5): the INTENT grid (NDCG@10 by cell and model,
validation beside test), a PANTHER view (HR@1/5/10, NDCG@5), a HORIZON view (NDCG, MRR, Recall
and Precision at 10/50/100), the comparisons with their verdicts and each split's context."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from intent_spark.core import schema as S
from intent_spark.evaluate.corrections import SIGNIFICANCE
from intent_spark.evaluate.metrics import TIE_RATE

VIEWS: dict[str, tuple[tuple[str, int], ...]] = {
    "intent": (("ndcg", 10),),
    "panther": (("hr", 1), ("hr", 5), ("hr", 10), ("ndcg", 5)),
    # HORIZON's recipe: Recall@K is a hit in the first K, Precision@K that hit over K.
    "horizon": tuple((m, k) for k in (10, 50, 100) for m in ("ndcg", "mrr", "recall", "precision")),
}
PRIMARY = ("ndcg", 10)
FLOOR_MARK = "†"
DRIFT_REFERENCE = "repeat_last"


def measure_name(metric: str, k: int) -> str:
    return f"{metric}@{k}"


def view_table(metrics: pd.DataFrame, view: str) -> pd.DataFrame:
    """A view in long form: one row per dataset, split, cell, model and measure."""
    wanted = {(m, k) for m, k in VIEWS[view]}
    rows = metrics[[(m, k) in wanted for m, k in zip(metrics["metric"], metrics["k"], strict=True)]].copy()
    rows.insert(4, "measure", [measure_name(m, k) for m, k in zip(rows["metric"], rows["k"], strict=True)])
    order = {cell: i for i, cell in enumerate(S.CELLS)}
    rows["_cell"] = rows[S.CELL].map(order)
    keep = [S.DATASET, S.SPLIT, S.CELL, S.MODEL, "measure", "value", "ci_low", "ci_high"]
    keep += ["n_users", "n_targets", "below_floor"]
    return rows.sort_values([S.DATASET, S.SPLIT, "_cell", S.MODEL, "metric", "k"])[keep].reset_index(
        drop=True
    )


def score_text(row: Any) -> str:
    """``0.366 [0.310, 0.421]``, with the floor mark when the cell has too few users."""
    mark = FLOOR_MARK if row["below_floor"] else ""
    if pd.isna(row["value"]):  # a submission's metric at k beyond its shortest list
        return "unavailable"
    if pd.isna(row["ci_low"]):
        return f"{row['value']:.3f}{mark}"
    return f"{row['value']:.3f} [{row['ci_low']:.3f}, {row['ci_high']:.3f}]{mark}"


def wide_view(metrics: pd.DataFrame, dataset: str, view: str, splits: Sequence[str]) -> pd.DataFrame:
    """Cells down, (model, split, measure) across, each entry a score with its interval."""
    long = view_table(metrics[metrics[S.DATASET] == dataset], view)
    long = long[long[S.SPLIT].isin(splits)]
    long["text"] = long.apply(score_text, axis=1)
    columns = [S.MODEL, S.SPLIT, "measure"] if len(VIEWS[view]) > 1 else [S.MODEL, S.SPLIT]
    wide = long.pivot_table(index=S.CELL, columns=columns, values="text", aggfunc="first", sort=False)
    cells = [c for c in S.CELLS if c in wide.index]
    return wide.reindex(cells).fillna("")


def tie_rates(metrics: pd.DataFrame, dataset: str) -> pd.DataFrame:
    rows = metrics[
        (metrics[S.DATASET] == dataset) & (metrics["metric"] == TIE_RATE) & (metrics[S.SPLIT] == S.TEST)
    ]
    wide = rows.pivot_table(index=S.CELL, columns=S.MODEL, values="value", aggfunc="first", sort=False)
    # column by column: DataFrame.map is pandas 2.1's, and 15.4 LTS runs pandas 1.5
    return wide.reindex([c for c in S.CELLS if c in wide.index]).apply(
        lambda column: column.map("{:.1%}".format)
    )


def comparison_table(comparisons: pd.DataFrame, dataset: str, kind: str) -> pd.DataFrame:
    rows = comparisons[(comparisons[S.DATASET] == dataset) & (comparisons["kind"] == kind)]
    rows = rows[rows[S.SPLIT] == S.TEST].copy()
    out = pd.DataFrame(
        {
            S.CELL: rows[S.CELL],
            S.MODEL: rows[S.MODEL],
            "value": rows["value"].map(lambda v: f"{v:+.3f}" if kind != S.RETENTION else f"{v:.3f}"),
            "95% interval": [
                f"[{lo:.3f}, {hi:.3f}]" for lo, hi in zip(rows["ci_low"], rows["ci_high"], strict=True)
            ],
            "users": rows["n_users"],
        }
    )
    if kind in (S.PAIRED, S.MEMORIZATION_GAP):
        if kind == S.PAIRED:
            out.insert(2, "baseline", rows["baseline"])
        out["p"] = rows["p_value"].map(_p_text)
        out["p adjusted"] = rows["p_adjusted"].map(_p_text)
        out["detectable"] = rows["mde"].map(lambda v: "n/a" if pd.isna(v) else f"{v:.3f}")
        out["verdict"] = [
            _verdict(m, b, v, p, mde)
            for m, b, v, p, mde in zip(
                rows[S.MODEL], rows["baseline"], rows["value"], rows["p_adjusted"], rows["mde"], strict=True
            )
        ]
    if kind == S.RETENTION:
        out["note"] = ["drift reference" if m == DRIFT_REFERENCE else "" for m in rows[S.MODEL]]
    order = {cell: i for i, cell in enumerate(S.CELLS)}
    out["_order"] = out[S.CELL].map(lambda c: order.get(c.split("-")[0].split("/")[0], 99))
    return out.sort_values(["_order", S.CELL, S.MODEL]).drop(columns="_order").set_index(S.CELL)


def _p_text(p: float | None) -> str:
    return "n/a" if p is None or pd.isna(p) else f"{p:.3g}"


def _verdict(
    model: str, baseline: str | None, value: float, p_adjusted: float | None, mde: float | None
) -> str:
    """ "significant" only from the adjusted p-value; otherwise what the comparison could detect."""
    if p_adjusted is not None and not pd.isna(p_adjusted) and p_adjusted < SIGNIFICANCE:
        if baseline is None or pd.isna(baseline):  # a memorization gap: seen against new
            return "seen higher" if value > 0 else "new higher"
        return f"{model} better" if value > 0 else f"{baseline} better"
    detectable = "" if mde is None or pd.isna(mde) else f" (detectable: {mde:.3f})"
    return f"no significant difference{detectable}"


def context_table(summary: dict[str, Any]) -> pd.DataFrame:
    """SPEC 5's dataset context, test and validation side by side."""
    rows: dict[str, dict[str, str]] = {}
    for name, split in summary["splits"].items():

        def share(v):
            return "n/a" if v is None else f"{v:.1%}"

        column = {
            "cutoff": f"{split['cutoff'][:10]} ({split['rule']}, {split['granularity']})",
            "items are": split.get(S.ITEM_LEVEL, S.DEFAULT_ITEM_LEVEL),
            "train share at cutoff": f"{split['train_share']:.3f}",
            "horizon (days after cutoff)": f"{split['horizon_days']:.0f}",
            "training users": f"{split['training_users']:,}",
            "history length mean / median": f"{_num(split['history_mean'])} / {_num(split['history_median'])}",
            "evaluation users seen in training": share(split["evaluation_users_seen_in_training"]),
            "target items seen in training": share(split["target_items_seen_in_training"]),
            "targets repeating an item of their context": share(split.get("repeat_rate")),
            "holdout fraction, seed": f"{split['holdout_fraction']}, {split['seed']}",
        }
        for cell, counts in split["cells"].items():
            mark = FLOOR_MARK if counts["below_floor"] else ""
            column[f"{cell}: users / targets"] = f"{counts['users']:,} / {counts['targets']:,}{mark}"
        rows[name] = column
    return pd.DataFrame(rows)


def _num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f}"


def primary_rows(metrics: pd.DataFrame, dataset: str, split: str = S.TEST) -> pd.DataFrame:
    metric, k = PRIMARY
    return metrics[
        (metrics[S.DATASET] == dataset)
        & (metrics[S.SPLIT] == split)
        & (metrics["metric"] == metric)
        & (metrics["k"] == k)
    ]
