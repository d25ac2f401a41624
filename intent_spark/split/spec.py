"""The split stage (the run's datasets, their protocol and seed variants and backtest origins)
and the cutoff sensitivity stage."""

from __future__ import annotations

from intent_spark.core.datasets import parse_dataset
from intent_spark.core.stage import DATASET, Run, Stage, Task, chain, reading_after
from intent_spark.ingest.spec import INGEST
from intent_spark.split.conf import SplitConf


def split_tasks(run: Run) -> list[Task]:
    from intent_spark.split.protocols import run_protocol_split
    from intent_spark.split.stage import run_split

    tasks = []
    for entry in run.conf.datasets:
        conf = run.split_conf(entry.name)

        def work(name: str = entry.name, conf: SplitConf = conf) -> None:
            run_split(run.spark, run.lake, name, conf, progress=run.progress, report=run.split_report(name))

        def inputs(name: str = entry.name, conf: SplitConf = conf) -> str | None:
            return chain(SPLIT.name, run.inputs_of(INGEST.name, name), repr(conf))

        tasks.append(Task(SPLIT.name, entry.name, work, inputs, upstream=f"{INGEST.name} of {entry.name}"))
    compare = run.conf.compare
    for name in compare.datasets:
        conf = run.split_conf(name)
        for variant in compare.protocol_variants(name):
            per_period = conf.max_targets_per_period

            def protocol_work(variant: str = variant, per_period: int = per_period) -> None:
                run_protocol_split(run.spark, run.lake, variant, per_period, progress=run.progress)

            def protocol_inputs(
                name: str = name, variant: str = variant, per_period: int = per_period
            ) -> str | None:
                return chain("protocol", run.inputs_of(SPLIT.name, name), variant, per_period)

            tasks.append(
                Task(SPLIT.name, variant, protocol_work, protocol_inputs, upstream=f"{SPLIT.name} of {name}")
            )
        for variant in compare.seed_variants(name):
            seeded = run.split_conf(name, {"seed": parse_dataset(variant).seed})

            def seed_work(variant: str = variant, seeded: SplitConf = seeded) -> None:
                run_split(run.spark, run.lake, variant, seeded, progress=run.progress)

            def seed_inputs(name: str = name, seeded: SplitConf = seeded) -> str | None:
                return chain("seed", run.inputs_of(SPLIT.name, name), repr(seeded))

            tasks.append(
                Task(SPLIT.name, variant, seed_work, seed_inputs, upstream=f"{SPLIT.name} of {name}")
            )
    backtest = run.conf.backtest
    for name in run.conf.backtested:
        assert backtest is not None
        # the rule, never a hand-fixed cutoff: the data stops at the origin
        ruled = run.split_conf(name, {"manual_cutoff": None, "manual_val_cutoff": None})
        for variant in backtest.variants(name):

            def origin_work(variant: str = variant, ruled: SplitConf = ruled) -> None:
                run_split(run.spark, run.lake, variant, ruled, progress=run.progress)

            def origin_inputs(
                name: str = name, variant: str = variant, ruled: SplitConf = ruled
            ) -> str | None:
                return chain("origin", run.inputs_of(INGEST.name, name), variant, repr(ruled))

            tasks.append(
                Task(SPLIT.name, variant, origin_work, origin_inputs, upstream=f"{INGEST.name} of {name}")
            )
    return tasks


def _write_sensitivity(run: Run, name: str) -> None:
    from intent_spark.split.sensitivity import write_sensitivity

    write_sensitivity(run.spark, run.lake, name, run.split_conf(name))


def sensitivity_tasks(run: Run) -> list[Task]:
    return reading_after(run, SENSITIVITY.name, SPLIT.name, run.conf.compare.datasets, _write_sensitivity)


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
