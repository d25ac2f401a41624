"""The split stage (the run's datasets, their protocol and seed variants and backtest origins)
and the cutoff sensitivity stage."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from intent_spark.core import schema as S
from intent_spark.core.datasets import DatasetRef
from intent_spark.core.errors import IntentError
from intent_spark.core.stage_spec import DATASET, Run, Stage, Task, known, per_dataset
from intent_spark.ingest.spec import INGEST
from intent_spark.lake.context import Lake
from intent_spark.split.conf import SplitConf


def variant_overrides(ref: DatasetRef) -> dict[str, Any]:
    """What a variant's name sets in its source's split conf: a seed variant (``hm.seed1``) its
    holdout seed; a backtest origin the cutoff rule, never the conf's dates, which lie past its
    data. ``intent run`` and ``intent split`` both start from these."""
    if ref.seed is not None:
        return {"seed": ref.seed}
    if ref.origin is not None:
        return {"manual_cutoff": None, "manual_val_cutoff": None}
    return {}


def split_one(
    lake: Lake,
    dataset: DatasetRef,
    conf: SplitConf,
    report: Callable[[dict[str, Any]], object] | None = None,
) -> None:
    """The split stage for one dataset or variant (what ``intent split`` runs): a protocol
    variant's test split at its source's cutoff and holdout, else the INTENT split by the rule."""
    from intent_spark.split.protocols import run_protocol_split
    from intent_spark.split.split_tables import run_split

    source = dataset.source
    if not lake.has(S.EVENTS) or lake.read(S.EVENTS, source).isEmpty():
        raise IntentError(f"{lake.root}: no events of {source}; ingest {source} first (`intent ingest`)")
    if dataset.protocol:
        run_protocol_split(lake, dataset, conf)
        lake.progress(
            f"{dataset}: protocol split written (test split only; `intent verify` reports its leak)"
        )
    else:
        run_split(lake, dataset, conf, report=report)


def split_tasks(run: Run) -> list[Task]:
    tasks = []
    for entry in run.conf.datasets:
        conf = run.split_conf(entry.name)

        def work(name: DatasetRef = entry.name, conf: SplitConf = conf) -> None:
            split_one(run.lake_context(), name, conf, report=run.split_report(name))

        tasks.append(Task(SPLIT.name, entry.name, work, known(repr(conf))))
    compare = run.conf.compare
    for name in compare.datasets:
        conf = run.split_conf(name)
        for variant in compare.protocol_variants(name):
            per_period = conf.max_targets_per_period

            def protocol_work(variant: DatasetRef = variant, conf: SplitConf = conf) -> None:
                split_one(run.lake_context(), variant, conf)

            # A protocol split takes its source's test cutoff and holdout: it reads that split.
            source_split = ((SPLIT.name, name, None),)
            settings = known(variant, per_period)
            tasks.append(Task(SPLIT.name, variant, protocol_work, settings, reads=source_split))
        for variant in compare.seed_variants(name):
            seeded = run.split_conf(name, variant_overrides(variant))

            def seed_work(variant: DatasetRef = variant, seeded: SplitConf = seeded) -> None:
                split_one(run.lake_context(), variant, seeded)

            seed_settings = known(repr(seeded))
            tasks.append(
                Task(SPLIT.name, variant, seed_work, seed_settings, reads=((SPLIT.name, name, None),))
            )
    backtest = run.conf.backtest
    for name in run.conf.backtested:
        assert backtest is not None
        for variant in backtest.variants(name):
            ruled = run.split_conf(name, variant_overrides(variant))

            def origin_work(variant: DatasetRef = variant, ruled: SplitConf = ruled) -> None:
                split_one(run.lake_context(), variant, ruled)

            origin_settings = known(variant, repr(ruled))
            tasks.append(
                Task(SPLIT.name, variant, origin_work, origin_settings, reads=((INGEST.name, name, None),))
            )
    return tasks


def _write_sensitivity(run: Run, name: DatasetRef) -> None:
    from intent_spark.split.sensitivity import write_sensitivity

    write_sensitivity(run.lake_context(), name, run.split_conf(name))


def sensitivity_tasks(run: Run) -> list[Task]:
    return per_dataset(run, SENSITIVITY.name, run.conf.compare.datasets, _write_sensitivity)


SPLIT = Stage(
    "split",
    DATASET,
    ("ingest",),
    ("events", "ingest_files"),
    ("holdout", "splits", "targets", "split_candidates", "split_counts", "checksums", "reports/split"),
    "the split conf (a protocol variant: its source's split)",
    split_tasks,
    scheduled=True,
    what="holdout, cutoff rule, cells and targets (variants: protocol, holdout seed, backtest origin)",
)
SENSITIVITY = Stage(
    "sensitivity",
    DATASET,
    ("split",),
    ("events",),
    ("reports/compare/*.sensitivity.csv",),
    "",
    sensitivity_tasks,
    when="compare.datasets",
    what="the cutoff under other bands and day/month switches",
)
