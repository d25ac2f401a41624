"""The benchmark report of a lake: one self-contained HTML page, Markdown and CSV tables, PNG
figures, with the sections of the comparisons, item levels, audits and backtests the lake holds.

``load`` reads the small aggregate tables, ``tables`` and ``figures`` shape them, ``render``
writes the page; this module puts them together for `intent report`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from intent_spark.core.runconf import CompareConf
from intent_spark.evaluate.corrections import DEFAULT_CORRECTION
from intent_spark.lake.context import Lake
from intent_spark.report.load import load_results, read_metrics
from intent_spark.report.render import write_report


def build_report(
    lake: Lake,
    out: Path,
    datasets: Sequence[str] | None = None,
    *,
    compare: CompareConf | None = None,
    correction: str = DEFAULT_CORRECTION,
    floor_users: int | None = None,
) -> Path:
    """The report of the chosen datasets, with the comparisons of ``compare`` (by default those
    whose variants and transfers are in the lake) and the backtests in the lake; p-values
    adjusted by ``correction`` over every comparison the report shows; each dataset's cells
    ranked at the user floor the lake records (``floor_users``: an override, said first)."""
    from intent_spark.report.audit import audit_sections
    from intent_spark.report.backtest import backtest_sections
    from intent_spark.report.compare import compare_sections, lake_compare_conf
    from intent_spark.report.levels import level_sections

    everything = read_metrics(lake)
    results = load_results(lake, datasets, everything, correction, floor_users)
    if compare is None:
        compare = lake_compare_conf(lake, everything, results.datasets)
    extra = compare_sections(lake, everything, compare, out / "figures") if compare.any() else []
    levels = level_sections(lake, everything, results.datasets, out / "figures")
    audits = [a for a in audit_sections(lake) if a.title.split(":")[0] in results.datasets]  # `intent audit`
    backtests = backtest_sections(lake, everything, results.datasets, out / "figures")
    return write_report(results, out, extra=[*audits, *backtests, *levels, *extra], progress=lake.progress)
