"""The audit stage (the paper's admission criteria) and the verify stage (leakage checks and
checksums: a failure stops the run)."""

from __future__ import annotations

from intent_spark.core.datasets import DatasetRef
from intent_spark.core.errors import IntentError
from intent_spark.core.sources import SourceConf
from intent_spark.core.stage_spec import DATASET, Run, Stage, Task, known, per_dataset


def audit_tasks(run: Run) -> list[Task]:
    if run.conf.audit is None:
        return []
    from intent_spark.checks.audit import audit_verdict, write_audit

    floor = run.conf.audit.sequence_users
    tasks = []
    for entry in run.conf.datasets:
        conf = run.source_conf(entry)

        def work(name: DatasetRef = entry.name, conf: SourceConf = conf) -> None:
            run.progress(f"{name}: {audit_verdict(write_audit(run.lake_context(), name, conf, floor))}")

        tasks.append(Task(AUDIT.name, entry.name, work, known(floor)))
    return tasks


def _verify(run: Run, name: DatasetRef) -> None:
    from intent_spark.checks.verify import verify_dataset

    failed = [f"{r.split}/{r.name}" for r in verify_dataset(run.lake_context(), name) if not r.ok]
    if failed:
        raise IntentError(f"checks failed: {', '.join(failed)}")
    run.progress(f"{name}: every leakage check and checksum passed")


def verify_tasks(run: Run) -> list[Task]:
    # A protocol variant fails the leak check by design: its leak is reported, not refused.
    names = [*run.conf.names, *(v for v in run.variants() if not v.protocol)]
    return per_dataset(run, VERIFY.name, names, _verify)


AUDIT = Stage(
    "audit",
    DATASET,
    ("ingest",),
    ("events",),
    ("reports/audit",),
    "sequence_users",
    audit_tasks,
    when="audit:",
    what="the paper's five admission criteria with verdicts",
)
VERIFY = Stage(
    "verify",
    DATASET,
    ("split",),
    ("events", "holdout", "splits", "targets", "split_counts", "checksums"),
    (),
    "",
    verify_tasks,
    scheduled=True,
    what="leakage checks and checksums; a failure stops the run",
)
