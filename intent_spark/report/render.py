"""The report written out: one self-contained HTML page, its Markdown twin, CSV tables and the
figures, built in a folder beside the old report and swapped in at the end."""

from __future__ import annotations

import base64
import html
import shutil
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from intent_spark.core import schema as S
from intent_spark.core.faults import fault_point
from intent_spark.core.progress import Progress, silent
from intent_spark.evaluate.corrections import (
    CORRECTION_NAMES,
    SIGNIFICANCE,
)
from intent_spark.report.figures import FIGURE_TITLES, write_figures
from intent_spark.report.load import Results
from intent_spark.report.section import Section
from intent_spark.report.tables import (
    DRIFT_REFERENCE,
    FLOOR_MARK,
    VIEWS,
    comparison_table,
    context_table,
    tie_rates,
    view_table,
    wide_view,
)

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
ul.findings{font-size:14px;max-width:1100px}p.ranked{font-size:15px;font-weight:600;margin:4px 0}
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
    """The summary's long table (``summary.csv``), its sections and its findings sentences (the
    first: how many cells are ranked, at which user floor)."""
    from intent_spark.report.summary import (
        correction_note,
        cross_dataset,
        finding_sentences,
        findings_table,
        floor_line,
        repeat_notes,
        summary_grid,
        summary_table,
    )
    from intent_spark.split.conf import SplitConf

    table = summary_table(results.metrics, results.comparisons, results.summaries)
    ranked = floor_line(table, results.floors, SplitConf().floor_users, results.overrides)
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
    return (
        table,
        sections,
        [ranked, *finding_sentences(results.comparisons), *repeat_notes(results.summaries)],
    )


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
    summary, summary_parts, (ranked, *sentences) = summary_sections(results)
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
    body.append(f"<p class='ranked'>{html.escape(ranked)}</p>")
    markdown.extend([ranked, ""])
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
