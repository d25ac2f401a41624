"""The benchmark report: one self-contained HTML page, Markdown and CSV tables, PNG figures.

It reads only small aggregate tables (``metrics``, ``comparisons``, the split reports), so it
runs on the driver whatever the size of the events. Views (SPEC 5): the INTENT grid (NDCG@10 by
cell and model, validation beside test), a PANTHER view (HR@1/5/10, NDCG@5) and a HORIZON view
(NDCG, MRR, Recall and Precision at 10/50/100).
"""

from __future__ import annotations

import base64
import html
import json
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from intent_spark.core import schema as S
from intent_spark.core.datasets import TRANSFER_SEPARATOR, is_transfer, parse_dataset
from intent_spark.core.faults import fault_point
from intent_spark.core.progress import Progress, silent
from intent_spark.core.runconf import CompareConf
from intent_spark.evaluate.corrections import (
    CORRECTION_NAMES,
    DEFAULT_CORRECTION,
    SIGNIFICANCE,
    adjust_p_values,
)
from intent_spark.evaluate.metrics import ADJUSTED_COLUMNS, TIE_RATE
from intent_spark.lake.figures import interval_bars, pyplot, save_figure
from intent_spark.lake.tables import has_table, read_table
from intent_spark.report.section import Section

VIEWS: dict[str, tuple[tuple[str, int], ...]] = {
    "intent": (("ndcg", 10),),
    "panther": (("hr", 1), ("hr", 5), ("hr", 10), ("ndcg", 5)),
    # HORIZON's recipe: Recall@K is a hit in the first K, Precision@K that hit over K.
    "horizon": tuple((m, k) for k in (10, 50, 100) for m in ("ndcg", "mrr", "recall", "precision")),
}
PRIMARY = ("ndcg", 10)
FLOOR_MARK = "†"
DRIFT_REFERENCE = "repeat_last"
# The family a report adjusts over: every comparison of one kind and split it shows, whatever
# the dataset (a report of 8 datasets x 7 cells x 10 pairs is one family of 560 tests).
REPORT_FAMILY = (S.SPLIT, "kind", "metric")


@dataclass
class Results:
    """Everything the report shows, as small pandas frames and the split summaries."""

    metrics: pd.DataFrame
    comparisons: pd.DataFrame
    summaries: dict[str, dict[str, Any]]
    correction: str = DEFAULT_CORRECTION

    @property
    def datasets(self) -> list[str]:
        return sorted(self.metrics[S.DATASET].unique())

    def models(self, dataset: str) -> list[str]:
        return sorted(self.metrics.loc[self.metrics[S.DATASET] == dataset, S.MODEL].unique())


def read_metrics(spark: SparkSession, lake: str) -> pd.DataFrame:
    """Every dataset's metrics rows (cells x models x metrics: small)."""
    return read_table(spark, lake, S.METRICS_TABLE).toPandas()  # aggregates, never events


def load_results(
    spark: SparkSession,
    lake: str,
    datasets: Sequence[str] | None = None,
    everything: pd.DataFrame | None = None,
    correction: str = DEFAULT_CORRECTION,
) -> Results:
    """The evaluated datasets' metrics and comparisons, and their split summaries (read from the
    split report's JSON, or computed when it is missing). ``everything``: ``read_metrics``, when
    the caller has it already. The comparisons' p-values are adjusted again over the family the
    report shows (``REPORT_FAMILY``) by ``correction``."""
    from intent_spark.core.errors import IntentError
    from intent_spark.split.report import split_summary

    metrics = read_metrics(spark, lake) if everything is None else everything
    # Variants and transferred models have their own sections (compare_report.py).
    metrics = metrics[~metrics[S.MODEL].map(is_transfer)]
    if not datasets:
        metrics = metrics[~metrics[S.DATASET].map(lambda d: parse_dataset(d).is_variant)]
    if datasets:
        missing = sorted(set(datasets) - set(metrics[S.DATASET]))
        if missing:
            raise IntentError(f"{lake}/metrics: no results for {', '.join(missing)} (run `intent evaluate`)")
        metrics = metrics[metrics[S.DATASET].isin(datasets)]
    if metrics.empty:
        raise IntentError(f"{lake}/metrics: no results yet (run `intent evaluate`)")
    chosen = sorted(metrics[S.DATASET].unique())
    if has_table(spark, lake, S.COMPARISONS):
        shown = read_table(spark, lake, S.COMPARISONS).where(
            F.col(S.DATASET).isin(chosen)
            & ~F.col(S.MODEL).contains(TRANSFER_SEPARATOR)
            & ~F.coalesce(F.col("baseline"), F.lit("")).contains(TRANSFER_SEPARATOR)
        )
        stored = [c for c in ADJUSTED_COLUMNS if c in shown.columns]
        adjusted = adjust_p_values(
            shown.drop(*stored), correction, REPORT_FAMILY, order=(S.DATASET, S.CELL, S.MODEL, "baseline")
        )
        comparisons = adjusted.select(*[f.name for f in S.COMPARISONS_SCHEMA.fields]).toPandas()  # small
    else:
        comparisons = pd.DataFrame(columns=[f.name for f in S.COMPARISONS_SCHEMA.fields])
    summaries = {}
    for dataset in chosen:
        saved = Path(lake) / "reports" / "split" / f"{dataset}.json"
        summaries[dataset] = (
            json.loads(saved.read_text()) if saved.exists() else split_summary(spark, lake, dataset)
        )
    return Results(metrics.reset_index(drop=True), comparisons.reset_index(drop=True), summaries, correction)


# --- tables ---------------------------------------------------------------------------------


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
    return wide.reindex([c for c in S.CELLS if c in wide.index]).map(lambda v: f"{v:.1%}")


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


# --- figures --------------------------------------------------------------------------------


def _primary(metrics: pd.DataFrame, dataset: str, split: str = S.TEST) -> pd.DataFrame:
    metric, k = PRIMARY
    return metrics[
        (metrics[S.DATASET] == dataset)
        & (metrics[S.SPLIT] == split)
        & (metrics["metric"] == metric)
        & (metrics["k"] == k)
    ]


def plot_grid_heatmap(results: Results, dataset: str, path: Path) -> Path:
    """NDCG@10 by cell and model on the test split; cells under the user floor are marked."""
    plt = pyplot()
    rows = _primary(results.metrics, dataset)
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
    rows = _primary(results.metrics, dataset)
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
    from intent_spark.split.report import plot_histogram

    plot_histogram(summary["splits"][S.TEST], f"{dataset}: events and the test cutoff", path)
    return path


FIGURES: tuple[tuple[str, str, Callable[..., Path]], ...] = (
    ("grid", "Cell grid", plot_grid_heatmap),
    ("scores", "Scores by cell", plot_cell_scores),
    ("memorization_gap", "Memorization gap", plot_memorization_gap),
)


def write_figures(results: Results, dataset: str, folder: Path) -> dict[str, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    made = {name: plot(results, dataset, folder / f"{dataset}_{name}.png") for name, _, plot in FIGURES}
    made["cutoff_histogram"] = plot_cutoff_histogram(
        results.summaries[dataset], dataset, folder / f"{dataset}_cutoff_histogram.png"
    )
    return made


# --- output ---------------------------------------------------------------------------------

FIGURE_TITLES = {**{name: title for name, title, _ in FIGURES}, "cutoff_histogram": "Cutoff histogram"}

_CSS = """
*{box-sizing:border-box}
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:16px 24px;color:#1b1b1b;max-width:1500px}
h1{font-size:24px;margin:4px 0 6px}h2{border-bottom:2px solid #1f3b57;padding-bottom:4px;margin-top:36px}
h2#summary{margin-top:10px}
table{border-collapse:collapse;margin:0;font-size:13px}
.wide{max-width:100%;overflow-x:auto;margin:8px 0 18px}
th,td{border:1px solid #c8cdd3;padding:4px 8px;text-align:right;white-space:nowrap}
th{background:#1f3b57;color:#fff}td:first-child,th:first-child{text-align:left}
table.grid td{font-variant-numeric:tabular-nums}table.grid th{background:#5b2a86}
table.summary th{background:#0b6e4f}table.summary td{text-align:left;min-width:170px;white-space:normal;font-variant-numeric:tabular-nums;vertical-align:top}
img{max-width:100%;height:auto;border:1px solid #ddd;margin:6px 0}
.note{color:#555;font-size:13px;max-width:100%}
nav{font-size:13px;margin:0 0 6px}nav a{margin-right:10px}nav details ul{columns:3 260px;margin:4px 0}
ul.findings{font-size:14px;max-width:1100px}
"""


def _html_table(frame: pd.DataFrame, table_id: str = "", css: str = "") -> str:
    ident = f' id="{html.escape(table_id)}"' if table_id else ""
    cls = f' class="{css}"' if css else ""
    text = frame.to_html(escape=True, border=0, na_rep="")
    return text.replace('<table class="dataframe">', f"<table{ident}{cls}>", 1)


def _markdown_table(frame: pd.DataFrame) -> str:
    frame = frame.copy()
    if isinstance(frame.columns, pd.MultiIndex):
        frame.columns = [" ".join(str(p) for p in c if p) for c in frame.columns]
    index_name = frame.index.name or ""
    header = [index_name, *map(str, frame.columns)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for idx, row in frame.iterrows():
        lines.append("| " + " | ".join([str(idx), *(str(v).replace("\n", "<br>") for v in row)]) + " |")
    return "\n".join(lines)


def _embedded(path: Path) -> str:
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return f'<img alt="{html.escape(path.stem)}" src="data:image/png;base64,{data}">'


def _sections(results: Results, dataset: str) -> list[tuple[str, pd.DataFrame, str]]:
    """(title, table, note) in the order the report shows them."""
    m, c = results.metrics, results.comparisons
    return [
        (
            "INTENT grid: NDCG@10, test beside validation",
            wide_view(m, dataset, "intent", (S.TEST, S.VAL)),
            f"Mean over users with a normal 95% interval; {FLOOR_MARK} marks cells under the user floor.",
        ),
        ("Context", context_table(results.summaries[dataset]), "SPEC 5: every score is read with these."),
        ("PANTHER view (test)", wide_view(m, dataset, "panther", (S.TEST,)), "HR@1/5/10 and NDCG@5."),
        (
            "HORIZON view (test)",
            wide_view(m, dataset, "horizon", (S.TEST,)),
            "NDCG, MRR, Recall and Precision at 10/50/100 (HORIZON's recipe: Recall@K is a hit "
            "in the first K, Precision@K that hit over K). A submission's metrics past its "
            "shortest list are unavailable.",
        ),
        (
            "Paired comparisons (test, NDCG@10)",
            comparison_table(c, dataset, S.PAIRED),
            f"Model minus baseline on the same users' targets; a difference counts at adjusted p < "
            f"{SIGNIFICANCE} ({CORRECTION_NAMES[results.correction]} over every paired comparison the "
            "report shows). Detectable: the smallest true difference found with 80% power.",
        ),
        (
            "Memorization gap (test, NDCG@10)",
            comparison_table(c, dataset, S.MEMORIZATION_GAP),
            "Seen-item cell minus new-item cell, paired over the users who have both; p adjusted "
            "over every memorization gap the report shows.",
        ),
        (
            "Retention across the cutoff (test, NDCG@10, new users)",
            comparison_table(c, dataset, S.RETENTION),
            f"Future over past; {DRIFT_REFERENCE} is the data's own drift reference. Delta-method intervals.",
        ),
        ("Tie rate (test)", tie_rates(m, dataset), "Share of targets whose rank came from a tie group."),
    ]


def _anchor(*parts: str) -> str:
    text = "-".join(parts).lower()
    return "".join(ch if ch.isalnum() else "-" for ch in text).strip("-")


def summary_sections(results: Results) -> tuple[pd.DataFrame, list[Section], list[str]]:
    """The summary's long table (``summary.csv``), its sections and its findings sentences."""
    from intent_spark.report.summary import (
        correction_note,
        cross_dataset,
        finding_sentences,
        findings_table,
        repeat_notes,
        summary_grid,
        summary_table,
    )

    table = summary_table(results.metrics, results.comparisons, results.summaries)
    sections = [
        Section(
            "Who leads where (NDCG@10, test)",
            summary_grid(table, results.summaries),
            "Each cell's leading model with its 95% interval, and whether its lead over the runner-up "
            "is real. " + correction_note(results.comparisons) + " The first row is each dataset's "
            "share of targets that repeat an item of their own context: where users never repeat, "
            "repeat-last and popularity's user term score near 0 by design.",
        ),
        Section(
            "Across datasets: how many datasets each model leads",
            cross_dataset(table),
            "Per cell, counting only cells above the user floor whose top two models differ; in "
            "brackets the leads that are significant after correction.",
        ),
        Section(
            "Derived findings (test, NDCG@10)",
            findings_table(results.comparisons),
            "Memorization gap: seen-item cell minus new-item cell of the same users and period. "
            "Retention: future over past on new users. Beyond repeat-last's: a model's retention minus "
            "repeat-last's on the same dataset; a loss beyond repeat-last's is the model's own.",
        ),
    ]
    return table, sections, [*finding_sentences(results.comparisons), *repeat_notes(results.summaries)]


def write_report(
    results: Results,
    out: Path,
    *,
    title: str = "intent-spark benchmark",
    extra: Sequence[Section] = (),
    progress: Progress = silent,
) -> Path:
    """``report.html`` (self-contained), ``report.md``, ``summary.csv``, ``tables/*.csv`` and
    ``figures/*.png``. The page opens with the summary; a table of contents links every section.

    Written beside ``out`` and moved into place at the end, so a report killed half-way leaves
    the previous one whole rather than new tables beside an old page."""
    final = out
    out = out.with_name(f".{out.name}.partial")
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    tables, figures = out / "tables", out / "figures"
    tables.mkdir(exist_ok=True)
    results.metrics.to_csv(tables / "metrics.csv", index=False)
    results.comparisons.to_csv(tables / "comparisons.csv", index=False)
    for view in VIEWS:
        view_table(results.metrics, view).to_csv(tables / f"{view}_view.csv", index=False)
    pd.concat({d: context_table(s) for d, s in results.summaries.items()}, names=[S.DATASET, "field"]).to_csv(
        tables / "context.csv"
    )
    summary, summary_parts, sentences = summary_sections(results)
    summary.to_csv(out / "summary.csv", index=False)
    summary_parts[2].table.to_csv(tables / "findings.csv")

    toc: list[tuple[int, str, str]] = []  # (level, anchor, title)
    body: list[str] = []
    markdown = [f"# {title}", ""]

    def heading(level: int, text: str, anchor: str) -> None:
        toc.append((level, anchor, text))
        body.append(f'<h{level} id="{html.escape(anchor)}">{html.escape(text)}</h{level}>')
        markdown.extend([f"{'#' * level} {text}", ""])

    def table_block(frame: pd.DataFrame, note: str, table_id: str = "", css: str = "") -> None:
        body.append(f"<p class='note'>{html.escape(note)}</p>")
        # a summary entry's two lines (pandas writes the newline as the two characters \n)
        table = _html_table(frame, table_id, css).replace("\\n", "<br>")
        body.append(f'<div class="wide">{table}</div>')
        markdown.extend([note, "", _markdown_table(frame), ""])

    heading(2, "Summary", "summary")
    first, *rest = summary_parts
    table_block(first.table, first.note, "summary-grid", "summary")
    if sentences:
        body.append(
            '<ul class="findings">' + "".join(f"<li>{html.escape(t)}</li>" for t in sentences) + "</ul>"
        )
        markdown.extend([f"- {t}" for t in sentences] + [""])
    for part in rest:
        heading(3, part.title, _anchor("summary", part.title))
        table_block(part.table, part.note)
    for n, dataset in enumerate(results.datasets):
        progress(f"report: {dataset}")
        made = write_figures(results, dataset, figures)
        if n == 0:
            fault_point("report.figures")
        heading(2, dataset, dataset)
        for i, (name, frame, note) in enumerate(_sections(results, dataset)):
            grid = name.startswith("INTENT")
            heading(3, name, _anchor(dataset, name))
            table_block(frame, note, f"grid-{dataset}" if grid else "", "grid" if grid else "")
            if i == 1:  # the figures follow the grid and its context
                for key, path in made.items():
                    heading(3, FIGURE_TITLES[key], _anchor(dataset, key))
                    body.append(_embedded(path))
                    markdown.extend([f"![{FIGURE_TITLES[key]}](figures/{path.name})", ""])
    if extra:
        heading(2, "Admission audit, backtest and beyond the paper", "beyond")
    for i, section in enumerate(extra):
        section.table.to_csv(tables / f"compare_{i:02d}.csv")
        heading(3, section.title, _anchor("beyond", section.title))
        table_block(section.table, section.note)
        if section.figure is not None:
            figures.mkdir(exist_ok=True)
            if section.figure.parent.resolve() != figures.resolve():  # an audit's PNG lives in the lake
                shutil.copyfile(section.figure, figures / section.figure.name)
            body.append(_embedded(section.figure))
            markdown.extend([f"![{section.title}](figures/{section.figure.name})", ""])
    page = (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>{html.escape(title)}</title><style>{_CSS}</style></head><body>"
        f"<h1>{html.escape(title)}</h1>"
        + _contents(toc, results.datasets)
        + "\n".join(body)
        + "</body></html>"
    )
    (out / "report.html").write_text(page, encoding="utf-8")
    contents = [
        f"- [{text}](#{anchor})" if level == 2 else f"  - [{text}](#{anchor})" for level, anchor, text in toc
    ]
    markdown[2:2] = ["Contents:", "", *contents, ""]
    (out / "report.md").write_text("\n".join(markdown), encoding="utf-8")
    replace_folder(out, final)
    return final / "report.html"


def replace_folder(built: Path, final: Path) -> None:
    """Each file and folder of ``built`` replaces its namesake in ``final``, the page last (a
    reader who finds the new page finds its tables); nothing else in ``final`` is touched."""
    final.mkdir(parents=True, exist_ok=True)
    page = "report.html"
    for item in sorted(built.iterdir(), key=lambda p: p.name == page):
        target = final / item.name
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        item.replace(target)
    built.rmdir()


def _contents(toc: list[tuple[int, str, str]], datasets: Sequence[str]) -> str:
    """One line of the top sections, and every section under a fold, so the summary stays on
    the first screen."""
    top = " ".join(f'<a href="#{html.escape(a)}">{html.escape(t)}</a>' for level, a, t in toc if level == 2)
    items = []
    for level, anchor, text in toc:
        link = f'<a href="#{html.escape(anchor)}">{html.escape(text)}</a>'
        items.append(f"<li>{link}</li>" if level == 2 else f'<li style="margin-left:14px">{link}</li>')
    note = f"Datasets: {', '.join(datasets)}. Primary metric NDCG@10."
    return (
        f'<nav id="contents">{top}<details><summary>All {len(toc)} sections</summary>'
        f"<ul>{''.join(items)}</ul></details><span class='note'>{html.escape(note)}</span></nav>"
    )


def build_report(
    spark: SparkSession,
    lake: str,
    out: Path,
    datasets: Sequence[str] | None = None,
    *,
    compare: CompareConf | None = None,
    correction: str = DEFAULT_CORRECTION,
    progress: Progress = silent,
) -> Path:
    """The report of the chosen datasets, with the comparisons of ``compare`` (by default those
    whose variants and transfers are in the lake) and the backtests in the lake; p-values
    adjusted by ``correction`` over every comparison the report shows."""
    from intent_spark.report.audit import audit_sections
    from intent_spark.report.backtest import backtest_sections
    from intent_spark.report.compare import compare_sections, lake_compare_conf
    from intent_spark.report.levels import level_sections

    everything = read_metrics(spark, lake)
    results = load_results(spark, lake, datasets, everything, correction)
    if compare is None:
        compare = lake_compare_conf(spark, lake, everything, results.datasets)
    extra = compare_sections(spark, lake, everything, compare, out / "figures") if compare.any() else []
    levels = level_sections(spark, lake, everything, results.datasets, out / "figures")
    audits = [a for a in audit_sections(lake) if a.title.split(":")[0] in results.datasets]  # `intent audit`
    backtests = backtest_sections(lake, everything, results.datasets, out / "figures")
    return write_report(results, out, extra=[*audits, *backtests, *levels, *extra], progress=progress)
