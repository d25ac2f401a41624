"""The report stage: one page with every table and figure, rebuilt on every run."""

from __future__ import annotations

from intent_spark.core.stage_spec import RUN, Run, Stage, Task


def report_tasks(run: Run) -> list[Task]:
    from intent_spark.lake.tracking import log_report
    from intent_spark.report.build import build_report

    def work() -> None:
        out = run.conf.report_path
        page = build_report(
            run.lake_context(),
            out,
            run.conf.names,
            compare=run.conf.compare,
            correction=run.conf.correction,
        )
        run.publish_report(page)
        log_report(run.uri, str(out), run.benchmark())

    return [Task(REPORT.name, "", work, label="report")]


REPORT = Stage(
    "report",
    RUN,
    ("evaluate", "agreement", "backtest", "audit", "sensitivity", "leaks"),
    ("metrics", "comparisons", "reports/*"),
    ("report.html", "report.md", "tables/*.csv", "figures/*.png", "MLflow artifacts report/"),
    "always rebuilt",
    report_tasks,
    scheduled=True,
    what="one page with every table and figure",
    always=True,
)
