"""The audit's section of the report: each dataset's admission criteria with verdicts and figure."""

from __future__ import annotations

from intent_spark.checks.audit import (
    DATE_TIE_MAX,
    MIN_SEQUENCE,
    SINGLE_EVENT_MAX,
    audit_folder,
    audit_verdict,
    read_audit,
)
from intent_spark.lake.context import Lake
from intent_spark.report.section import Section


def audit_sections(lake: Lake) -> list[Section]:
    """A report section per audited dataset (``LAKE/reports/audit/*.csv``), indexed by criterion."""
    sections = []
    for path in sorted(audit_folder(lake).glob("*.csv")):
        table = read_audit(path).set_index("criterion")
        verdict = audit_verdict(path)
        figure = path.with_suffix(".png")
        sections.append(
            Section(
                f"{path.stem}: admission audit",
                table,
                f"The INTENT paper's five admission criteria measured on the ingested events and the "
                f"source conf: {verdict}. Thresholds: at most {SINGLE_EVENT_MAX:.0%} single-event users; "
                f"date-only timestamps with at most {DATE_TIE_MAX:.0%} tied consecutive events; the "
                f"users-with-{MIN_SEQUENCE}+-events floor; every event type from a conf field; a "
                f"release and terms.",
                figure if figure.exists() else None,
            )
        )
    return sections
