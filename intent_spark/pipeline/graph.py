"""The benchmark's stage graph: every stage, each declared once in its package's ``spec.py``.

``intent run`` executes these stages in this order and resumes from them (``runner.py``),
``intent run --plan`` prints them, ``databricks.yml`` schedules the ``scheduled`` ones as tasks
whose ``depends_on`` are the stages' ``after`` (a test checks it), and ``docs/architecture.md``
describes them. A stage's fingerprint is the digest of its inputs: the fingerprints of the
stages it runs after plus what ``fingerprint`` names (settings and files), so a rerun skips a
stage whose inputs are unchanged since it finished.
"""

from __future__ import annotations

from intent_spark.checks.spec import AUDIT, VERIFY
from intent_spark.core.stage_spec import DATASET, DATASET_MODEL, RUN, TRANSFER_PAIR, Stage
from intent_spark.evaluate.spec import AGREEMENT, BACKTEST, EVALUATE, LEAKS
from intent_spark.generate.spec import GENERATE
from intent_spark.ingest.spec import INGEST
from intent_spark.report.spec import REPORT
from intent_spark.split.spec import SENSITIVITY, SPLIT
from intent_spark.train.spec import SCORE, TRAIN, TRANSFER

__all__ = [
    "BY_NAME",
    "DATASET",
    "DATASET_MODEL",
    "RUN",
    "STAGES",
    "TRANSFER_PAIR",
    "Stage",
    "needs_models",
    "scheduled_dependencies",
    "stage",
    "upstream",
]

# Each declared in its package's spec.py; a stage reads only what stages before it wrote.
STAGES: tuple[Stage, ...] = (
    GENERATE,
    INGEST,
    AUDIT,
    SPLIT,
    VERIFY,
    SENSITIVITY,
    LEAKS,
    TRAIN,
    SCORE,
    TRANSFER,
    EVALUATE,
    AGREEMENT,
    BACKTEST,
    REPORT,
)

BY_NAME = {stage.name: stage for stage in STAGES}


def stage(name: str) -> Stage:
    return BY_NAME[name]


def scheduled_dependencies() -> dict[str, set[str]]:
    """Each scheduled stage and the scheduled stages it waits for (``databricks.yml``'s
    ``depends_on``): the nearest scheduled ones among its ``after``, looking through stages that
    only run locally, less those another of them already waits for."""

    def nearest(name: str) -> set[str]:
        found: set[str] = set()
        for before in BY_NAME[name].after:
            found |= {before} if BY_NAME[before].scheduled else nearest(before)
        return found

    def upstream(name: str) -> set[str]:
        direct = nearest(name)
        return direct | {u for d in direct for u in upstream(d)}

    reduced = {}
    for stage in STAGES:
        if stage.scheduled:
            direct = nearest(stage.name)
            reduced[stage.name] = {d for d in direct if not any(d in upstream(o) for o in direct - {d})}
    return reduced


def upstream(name: str) -> set[str]:
    """Every stage a stage runs after, directly or through others."""
    found = set(BY_NAME[name].after)
    return found.union(*(upstream(before) for before in BY_NAME[name].after))


def needs_models(name: str) -> bool:
    """Whether a stage has nothing to do in a run without models: it trains, or reads what
    training writes."""
    found = BY_NAME[name]
    return found.per in (DATASET_MODEL, TRANSFER_PAIR) or any(needs_models(a) for a in found.after)
