"""The report's first screen: which model leads in which cell, on which dataset, and is the lead
real (the question INTENT's Figure 4 and section 5 answer), then the paper's derived findings
as measured sentences.

Everything is read from the report's small frames: ``metrics`` (NDCG@10 per cell and model),
``comparisons`` (paired differences with p-values adjusted over the report's family, minimum
detectable effects, memorization gaps, retention ratios) and the split summaries (repeat rates).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from intent_spark.core import schema as S
from intent_spark.evaluate.corrections import CORRECTION_NAMES, SIGNIFICANCE

PRIMARY = ("ndcg", 10)
DRIFT_REFERENCE = "repeat_last"
LOW_REPEAT_RATE = 0.01
SUMMARY_COLUMNS = (
    S.DATASET,
    S.CELL,
    "users",
    "below_floor",
    "repeat_rate",
    "leader",
    "leader_ndcg_10",
    "leader_ci_low",
    "leader_ci_high",
    "runner_up",
    "runner_up_ndcg_10",
    "tied",
    "lead",
    "p_value",
    "p_adjusted",
    "correction",
    "significant",
    "mde",
)
GAP_PAIRS = {
    "known_future_seen-known_future_new": "known users after the cutoff",
    "new_past_seen-new_past_new": "new users before the cutoff",
    "new_future_seen-new_future_new": "new users after the cutoff",
}
RETENTION_PAIRS = {
    "new_future_seen/new_past_seen": "seen items",
    "new_future_new/new_past_new": "new items",
}


def _primary_test(metrics: pd.DataFrame) -> pd.DataFrame:
    metric, k = PRIMARY
    keep = (metrics[S.SPLIT] == S.TEST) & (metrics["metric"] == metric) & (metrics["k"] == k)
    return metrics[keep & metrics["value"].notna()]


def _paired(comparisons: pd.DataFrame, dataset: str, cell: str, a: str, b: str) -> dict[str, Any] | None:
    """The paired comparison of models ``a`` and ``b`` as ``a - b`` (stored with the smaller name
    first), or None when the report has none."""
    c = comparisons
    rows = c[
        (c[S.DATASET] == dataset)
        & (c[S.SPLIT] == S.TEST)
        & (c["kind"] == S.PAIRED)
        & (c[S.CELL] == cell)
        & (c[S.MODEL] == min(a, b))
        & (c["baseline"] == max(a, b))
    ]
    if rows.empty:
        return None
    row = rows.iloc[0]
    sign = 1.0 if a < b else -1.0
    return {
        "lead": sign * row["value"],
        "p_value": row["p_value"],
        "p_adjusted": row.get("p_adjusted"),
        "correction": row.get("correction"),
        "mde": row.get("mde"),
    }


def _repeat_rate(summary: dict[str, Any] | None, cell: str | None = None) -> float | None:
    if not summary:
        return None
    split = summary["splits"][S.TEST]
    if cell is None:
        return split.get("repeat_rate")
    return split["cells"].get(cell, {}).get("repeat_rate")


def summary_table(
    metrics: pd.DataFrame, comparisons: pd.DataFrame, summaries: dict[str, dict[str, Any]]
) -> pd.DataFrame:
    """One row per dataset and test cell (``SUMMARY_COLUMNS``): the leading model by NDCG@10
    with its interval, the runner-up, the lead, its adjusted p-value, whether it is significant
    after correction, and the minimum detectable effect of that comparison."""
    rows = _primary_test(metrics)
    out = []
    for (dataset, cell), group in rows.groupby([S.DATASET, S.CELL], sort=False):
        ranked = group.sort_values(["value", S.MODEL], ascending=[False, True])
        lead, second = ranked.iloc[0], ranked.iloc[1] if len(ranked) > 1 else None
        paired = (
            _paired(comparisons, dataset, cell, lead[S.MODEL], second[S.MODEL])
            if second is not None
            else None
        )
        p_adjusted = None if paired is None else paired["p_adjusted"]
        significant = (
            paired is not None
            and p_adjusted is not None
            and not pd.isna(p_adjusted)
            and p_adjusted < SIGNIFICANCE
            and paired["lead"] > 0
        )
        out.append(
            {
                S.DATASET: dataset,
                S.CELL: cell,
                "users": int(lead["n_users"]),
                "below_floor": bool(lead["below_floor"]),
                "repeat_rate": _repeat_rate(summaries.get(dataset), cell),
                "leader": lead[S.MODEL],
                "leader_ndcg_10": lead["value"],
                "leader_ci_low": lead["ci_low"],
                "leader_ci_high": lead["ci_high"],
                "runner_up": None if second is None else second[S.MODEL],
                "runner_up_ndcg_10": None if second is None else second["value"],
                # no leader: every model at 0, or the first two equal (the name only broke the tie)
                "tied": lead["value"] == 0 or (second is not None and second["value"] == lead["value"]),
                "lead": None if paired is None else paired["lead"],
                "p_value": None if paired is None else paired["p_value"],
                "p_adjusted": p_adjusted,
                "correction": None if paired is None else paired["correction"],
                "significant": significant,
                "mde": None if paired is None else paired["mde"],
            }
        )
    table = pd.DataFrame(out, columns=list(SUMMARY_COLUMNS))
    order = {cell: i for i, cell in enumerate(S.CELLS)}
    table["_order"] = table[S.CELL].map(order)
    return table.sort_values([S.DATASET, "_order"]).drop(columns="_order").reset_index(drop=True)


def _num(value: Any, form: str = ".3f") -> str:
    return "n/a" if value is None or pd.isna(value) else format(value, form)


def lead_text(row: Any) -> str:
    """One summary entry, two lines: the leader with its score and interval, then what its lead
    over the runner-up is worth after correction."""
    interval = f"[{_num(row['leader_ci_low'])},\u00a0{_num(row['leader_ci_high'])}]"
    score = f"{row['leader']} {_num(row['leader_ndcg_10'])}\u00a0{interval}"
    if row["leader_ndcg_10"] == 0:
        score = "every model 0.000: no leader"
    elif row["tied"]:
        score = f"{row['leader']} and {row['runner_up']} tie at {_num(row['leader_ndcg_10'])}\u00a0{interval}"
    if row["below_floor"]:
        return f"{score}\nbelow the user floor ({row['users']:,} users): not ranked"
    if row["tied"]:
        return f"{score}\nno lead to test"
    if row["runner_up"] is None or pd.isna(row["lead"]):
        return f"{score}\nno paired comparison"
    lead, p = _num(row["lead"], "+.3f"), _num(row["p_adjusted"], ".2g")
    if row["significant"]:
        return f"{score}\nahead of {row['runner_up']} by {lead} (p adj {p})"
    return f"{score}\nno significant lead over {row['runner_up']}: {lead}, p adj {p}, detectable {_num(row['mde'])}"


def floor_line(
    table: pd.DataFrame, floors: dict[str, int], protocol: int, overrides: Sequence[str] = ()
) -> str:
    """The summary's first line: a floor that is not its split's (an override) first, then how
    many of the test cells it lists are ranked, and the user floor below which a cell is not; a
    floor under the protocol's says it is a demo's."""
    ranked = int((~table["below_floor"]).sum()) if not table.empty else 0
    values = sorted(set(floors.values()))
    if not values:
        floor = "a cell below its user floor is not ranked"
    elif len(values) == 1:
        floor = f"a cell with fewer than {values[0]:,} users is not ranked"
    else:
        each = ", ".join(f"{d} {n:,}" for d, n in sorted(floors.items()))
        floor = f"a cell with fewer users than its dataset's floor ({each}) is not ranked"
    line = f"{ranked} of {len(table)} test cells ranked: {floor}"
    if overrides:
        line = f"Floor override: {'; '.join(overrides)}. {line}"
    if values and values[0] < protocol:
        line += f". A demo floor, below the protocol's {protocol:,} users: its scores are noisier than the benchmark's"
    return line + "."


def summary_grid(table: pd.DataFrame, summaries: dict[str, dict[str, Any]]) -> pd.DataFrame:
    """Cells down, datasets across: the lead entries, under a first row of repeat rates."""
    if table.empty:
        return pd.DataFrame()
    grid = table.assign(text=table.apply(lead_text, axis=1)).pivot_table(
        index=S.CELL, columns=S.DATASET, values="text", aggfunc="first", sort=False
    )
    cells = [c for c in S.CELLS if c in grid.index]
    grid = grid.reindex(cells).fillna("")
    repeat = {d: f"repeat rate {_num(_repeat_rate(summaries.get(d)), '.1%')}" for d in grid.columns}
    head = pd.DataFrame([repeat], index=["targets repeating their context"])
    return pd.concat([head, grid])


def cross_dataset(table: pd.DataFrame) -> pd.DataFrame:
    """Cells down, models across: how many datasets each model leads in the cell, counting only
    cells above the floor with a leader (no tie at the top), with the significant leads among them."""
    if table.empty:
        return pd.DataFrame()
    ranked = table[~table["below_floor"] & ~table["tied"]]
    counts = ranked.groupby([S.CELL, "leader"]).agg(
        leads=(S.DATASET, "count"), significant=("significant", "sum")
    )
    text = counts.apply(lambda r: f"{int(r['leads'])} ({int(r['significant'])} significant)", axis=1)
    wide = text.unstack("leader") if not counts.empty else pd.DataFrame(index=pd.Index([], name=S.CELL))
    cells = [c for c in S.CELLS if c in set(table[S.CELL])]
    wide = wide.reindex(cells).fillna("")
    below = table[table["below_floor"]].groupby(S.CELL)[S.DATASET].count()
    wide["datasets below the floor"] = below.reindex(cells).fillna(0).astype(int)
    return wide


def _spread(values: pd.Series, datasets: pd.Series, form: str) -> str:
    """``median (n datasets; low on A to high on B)`` of one measure across datasets."""
    if values.empty:
        return "n/a"
    low, high = values.idxmin(), values.idxmax()
    median = format(float(np.median(values)), form)
    if len(values) == 1:
        return f"{median} on {datasets[low]}"
    if values[low] == values[high]:
        return f"{median} on all {len(values)} datasets"
    return (
        f"{median} (median of {len(values)} datasets; {format(values[low], form)} on {datasets[low]} "
        f"to {format(values[high], form)} on {datasets[high]})"
    )


def findings_table(comparisons: pd.DataFrame) -> pd.DataFrame:
    """Models down; memorization gaps, retention and retention beyond repeat-last's across, each
    the median over datasets with its range (test split, NDCG@10)."""
    c = comparisons[comparisons[S.SPLIT] == S.TEST]
    columns: dict[str, dict[str, str]] = {}
    gaps = c[c["kind"] == S.MEMORIZATION_GAP]
    for pair, label in GAP_PAIRS.items():
        rows = gaps[gaps[S.CELL] == pair]
        columns[f"memorization gap, {label}"] = {
            m: _spread(g["value"].reset_index(drop=True), g[S.DATASET].reset_index(drop=True), "+.3f")
            for m, g in rows.groupby(S.MODEL)
        }
    kept = c[c["kind"] == S.RETENTION]
    for pair, label in RETENTION_PAIRS.items():
        rows = kept[kept[S.CELL] == pair]
        columns[f"retention on new users, {label}"] = {
            m: _spread(g["value"].reset_index(drop=True), g[S.DATASET].reset_index(drop=True), ".0%")
            for m, g in rows.groupby(S.MODEL)
        }
        beyond = _beyond_reference(rows)
        if not beyond.empty:
            columns[f"retention beyond {DRIFT_REFERENCE}'s, {label}"] = {
                m: _spread(g["beyond"].reset_index(drop=True), g[S.DATASET].reset_index(drop=True), "+.0%")
                for m, g in beyond.groupby(S.MODEL)
            }
    return pd.DataFrame(columns).fillna("")


def _beyond_reference(retention: pd.DataFrame) -> pd.DataFrame:
    """Each model's retention minus repeat-last's on the same dataset: the part of its loss
    across the cutoff that the data's own drift does not explain."""
    reference = retention[retention[S.MODEL] == DRIFT_REFERENCE].set_index(S.DATASET)["value"]
    others = retention[(retention[S.MODEL] != DRIFT_REFERENCE) & retention[S.DATASET].isin(reference.index)]
    # looked up as floats: a lookup on no rows keeps the key column's text dtype (pandas 3)
    drift = reference.reindex(others[S.DATASET]).to_numpy(dtype=float)
    return others.assign(beyond=others["value"].to_numpy(dtype=float) - drift)


def finding_sentences(comparisons: pd.DataFrame) -> list[str]:
    """The paper's derived findings, one sentence per model, with their numbers."""
    c = comparisons[comparisons[S.SPLIT] == S.TEST]
    sentences = []
    for model in sorted(set(c[S.MODEL])):
        mine = c[c[S.MODEL] == model]
        parts = []
        gap = mine[
            (mine["kind"] == S.MEMORIZATION_GAP) & (mine[S.CELL] == "known_future_seen-known_future_new")
        ]
        if not gap.empty:
            parts.append(
                "scores "
                + _spread(gap["value"].reset_index(drop=True), gap[S.DATASET].reset_index(drop=True), "+.3f")
                + " NDCG@10 higher on seen items than on new ones (known users after the cutoff)"
            )
        kept = mine[(mine["kind"] == S.RETENTION) & (mine[S.CELL] == "new_future_seen/new_past_seen")]
        if not kept.empty:
            parts.append(
                "keeps "
                + _spread(kept["value"].reset_index(drop=True), kept[S.DATASET].reset_index(drop=True), ".0%")
                + " of its new-user score across the cutoff (seen items)"
            )
        if model != DRIFT_REFERENCE:
            all_kept = c[(c["kind"] == S.RETENTION) & (c[S.CELL] == "new_future_seen/new_past_seen")]
            beyond = _beyond_reference(all_kept)
            beyond = beyond[beyond[S.MODEL] == model]
            if not beyond.empty:
                median = float(np.median(beyond["beyond"]))
                parts.append(
                    f"{abs(median):.0%} {'less' if median < 0 else 'more'} than {DRIFT_REFERENCE} keeps "
                    f"(median of {len(beyond)}): "
                    + (
                        "a loss beyond repeat-last's is its own"
                        if median < 0
                        else "it drifts less than the data"
                    )
                )
        if parts:
            sentences.append(f"{model} " + "; ".join(parts) + ".")
    return sentences


def repeat_notes(summaries: dict[str, dict[str, Any]]) -> list[str]:
    """Why popularity and repeat-last score zero on a dataset whose users never repeat an item."""
    notes = []
    for dataset, summary in sorted(summaries.items()):
        rate = _repeat_rate(summary)
        if rate is not None and rate < LOW_REPEAT_RATE:
            notes.append(
                f"{dataset}: {rate:.1%} of test targets repeat an item of their own context, so "
                f"repeat-last and popularity's user term have almost nothing to score and read near "
                f"0 by design (as on MovieLens-100K under leave-last-out, where both score NDCG@10 0.000)."
            )
    return notes


def correction_note(comparisons: pd.DataFrame) -> str:
    paired = comparisons[(comparisons["kind"] == S.PAIRED) & (comparisons[S.SPLIT] == S.TEST)]
    if paired.empty or "correction" not in paired or paired["correction"].isna().all():
        return "No paired comparisons."
    method = str(paired["correction"].dropna().iloc[0])
    size = int(paired["family_size"].dropna().max())
    return (
        f"Significant: adjusted p < {SIGNIFICANCE} ({CORRECTION_NAMES.get(method, method)} over the "
        f"{size:,} paired comparisons of the test split this report shows; `--correction holm|bh|none`). "
        "Detectable: the smallest true lead the comparison finds with 80% power at two-sided 0.05."
    )
