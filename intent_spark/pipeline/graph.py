"""The benchmark's stage graph, declared once.

``intent run`` executes these stages in this order and resumes from them (``runner.py``),
``intent run --plan`` prints them, ``databricks.yml`` schedules the ``scheduled`` ones as tasks
whose ``depends_on`` are the stages' ``after`` (a test checks it), and ``docs/architecture.md``
describes them. A stage's fingerprint is the digest of its inputs: the fingerprints of the
stages it runs after plus what ``fingerprint`` names (settings and files), so a rerun skips a
stage whose inputs are unchanged since it finished.
"""

from __future__ import annotations

from dataclasses import dataclass

DATASET = "dataset"  # once per dataset of the run (and per variant, where the stage applies)
DATASET_MODEL = "dataset x model"
TRANSFER_PAIR = "transfer pair"
RUN = "run"  # once for the whole run


@dataclass(frozen=True)
class Stage:
    name: str
    per: str  # the fan-out
    after: tuple[str, ...]  # stages whose outputs it reads (same dataset, or all of them for RUN)
    reads: tuple[str, ...]
    writes: tuple[str, ...]
    fingerprint: str  # besides the fingerprints of the stages it runs after
    scheduled: bool = False  # a task of the scheduled job (databricks.yml), by its jobs/ entry point
    when: str = ""  # the run conf part that turns it on; empty: always
    what: str = ""

    @property
    def job(self) -> str:
        """Its ``jobs/<stage>.py`` entry point and ``intent`` command."""
        return self.name


STAGES: tuple[Stage, ...] = (
    Stage(
        "generate",
        DATASET,
        (),
        (),
        ("raw release files",),
        "source, events, seed",
        when="a dataset without raw:",
        what="synthetic raw files in the release's own format",
    ),
    Stage(
        "ingest",
        DATASET,
        ("generate",),
        ("raw release files",),
        ("events", "items", "users", "rejects", "ingest_files"),
        "the raw files' names, sizes and times; the source conf",
        scheduled=True,
        what="the release files into Delta tables with one schema",
    ),
    Stage(
        "audit",
        DATASET,
        ("ingest",),
        ("events",),
        ("reports/audit",),
        "floor_users",
        when="audit:",
        what="the paper's five admission criteria with verdicts",
    ),
    Stage(
        "split",
        DATASET,
        ("ingest",),
        ("events", "ingest_files"),
        ("holdout", "splits", "targets", "split_candidates", "split_counts", "checksums", "reports/split"),
        "the split conf (a protocol variant: its source's split)",
        scheduled=True,
        what="holdout, cutoff rule, cells and targets (variants: protocol, holdout seed, backtest origin)",
    ),
    Stage(
        "verify",
        DATASET,
        ("split",),
        ("events", "holdout", "splits", "targets", "split_counts", "checksums"),
        (),
        "",
        scheduled=True,
        what="leakage checks and checksums; a failure stops the run",
    ),
    Stage(
        "sensitivity",
        DATASET,
        ("split",),
        ("events",),
        ("reports/compare/*.sensitivity.csv",),
        "",
        when="compare.datasets",
        what="the cutoff under other bands and day/month switches",
    ),
    Stage(
        "leaks",
        DATASET,
        ("split",),
        ("events", "holdout", "splits", "targets"),
        ("reports/compare/*.leaks.csv",),
        "",
        when="compare.datasets",
        what="per test cell, the targets some training event follows in time",
    ),
    Stage(
        "train",
        DATASET_MODEL,
        ("verify",),
        ("events", "items", "holdout", "splits", "targets", "checksums"),
        ("catalogue", "train_sequences", "score_events", "model_inputs", "MLflow run"),
        "the model, its settings, context and max_tokens",
        scheduled=True,
        what="model inputs (once per split version), then each split's model, logged to MLflow",
    ),
    Stage(
        "score",
        DATASET_MODEL,
        ("train",),
        ("catalogue", "score_events", "targets", "MLflow run"),
        ("ranks",),
        "",
        scheduled=True,
        what="the tie-aware rank of every target over the full catalogue",
    ),
    Stage(
        "transfer",
        TRANSFER_PAIR,
        ("train",),
        ("MLflow run of the source", "catalogue", "score_events", "items", "targets"),
        ("ranks", "transfers"),
        "",
        scheduled=True,
        when="compare.transfer",
        what="SASRec-F trained on one source ranks another's test targets",
    ),
    Stage(
        "evaluate",
        DATASET,
        ("score", "transfer"),
        ("ranks",),
        ("user_metrics", "metrics", "comparisons", "MLflow metrics"),
        "floor_users",
        scheduled=True,
        what="per-user and per-cell metrics with intervals, paired comparisons",
    ),
    Stage(
        "agreement",
        DATASET,
        ("evaluate",),
        ("user_metrics",),
        ("reports/compare/*.agreement.csv",),
        "replicates",
        when="compare.protocols",
        what="Kendall tau-b of each protocol's model order against the INTENT cells'",
    ),
    Stage(
        "backtest",
        DATASET,
        ("evaluate",),
        ("user_metrics", "metrics", "splits"),
        ("reports/compare/*.backtest.csv",),
        "origins, replicates",
        when="backtest:",
        what="each origin's cell scores and Kendall tau-b of the model order between consecutive origins",
    ),
    Stage(
        "report",
        RUN,
        ("evaluate", "agreement", "backtest", "audit", "sensitivity", "leaks"),
        ("metrics", "comparisons", "reports/*"),
        ("report.html", "report.md", "tables/*.csv", "figures/*.png", "MLflow artifacts report/"),
        "always rebuilt",
        scheduled=True,
        what="one page with every table and figure",
    ),
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


def needs_models(name: str) -> bool:
    """Whether a stage has nothing to do in a run without models: it trains, or reads what
    training writes."""
    found = BY_NAME[name]
    return found.per in (DATASET_MODEL, TRANSFER_PAIR) or any(needs_models(a) for a in found.after)
