"""The evaluate stage (per-user and per-cell metrics, paired comparisons) and the stages that
read its outputs or the split's: leaks, protocol agreement and backtest."""

from __future__ import annotations

from intent_spark.core import schema as S
from intent_spark.core.datasets import DatasetRef
from intent_spark.core.stage_spec import DATASET, Run, Stage, Task, known, per_dataset


def _write_leaks(run: Run, name: DatasetRef) -> None:
    from intent_spark.evaluate.leaks import write_leaks

    write_leaks(run.lake_context(), name)


def leaks_tasks(run: Run) -> list[Task]:
    names = [*run.conf.compare.datasets, *(v for v in run.variants() if v.protocol)]
    return per_dataset(run, LEAKS.name, names, _write_leaks)


def evaluate_tasks(run: Run) -> list[Task]:
    from intent_spark.evaluate.metrics import evaluate

    tasks = []
    for name in run.scored():  # at the floor its split recorded (the split conf's, in its fingerprint)

        def work(name: DatasetRef = name) -> None:
            call, lake = run.call, run.lake_context()  # a command's floor override, its bootstrap
            rows = evaluate(
                lake,
                name,
                floor_users=call.floor_users,
                unrecorded_floor=run.split_conf(name).floor_users,  # a lake split before it was kept
                bootstrap=call.bootstrap,
                correction=run.conf.correction,
            )
            metrics, users = lake.path(S.METRICS_TABLE), lake.path(S.USER_METRICS)
            run.progress(f"{name}: {rows:,} metric rows in {metrics}, per-user scores in {users}")

        tasks.append(Task(EVALUATE.name, name, work, known(run.conf.correction)))
    return tasks


def agreement_tasks(run: Run) -> list[Task]:
    from intent_spark.evaluate.agreement import write_agreement

    compare = run.conf.compare
    if not compare.protocols:
        return []
    tasks = []
    for name in compare.datasets:

        def work(name: DatasetRef = name) -> None:
            write_agreement(run.lake_context(), name, compare.protocols, replicates=compare.replicates)

        evaluated = tuple((EVALUATE.name, d, None) for d in [name, *compare.protocol_variants(name)])
        tasks.append(Task(AGREEMENT.name, name, work, known(compare.replicates), reads=evaluated))
    return tasks


def backtest_tasks(run: Run) -> list[Task]:
    from intent_spark.evaluate.backtest import write_backtest

    backtest = run.conf.backtest
    if backtest is None:
        return []
    tasks = []
    for name in run.conf.backtested:

        def work(name: DatasetRef = name) -> None:
            path = write_backtest(run.lake_context(), name, backtest.origins, replicates=backtest.replicates)
            run.progress(f"{name}: backtest over {backtest.origins} origins in {path}")

        evaluated = tuple((EVALUATE.name, d, None) for d in [*backtest.variants(name), name])
        settings = known(backtest.origins, backtest.replicates)
        tasks.append(Task(BACKTEST.name, name, work, settings, reads=evaluated))
    return tasks


LEAKS = Stage(
    "leaks",
    DATASET,
    ("split",),
    ("events", "holdout", "splits", "targets"),
    ("reports/compare/*.leaks.csv",),
    "",
    leaks_tasks,
    when="compare.datasets",
    what="per test cell, the targets some training event follows in time",
)
EVALUATE = Stage(
    "evaluate",
    DATASET,
    ("score", "transfer"),
    ("ranks",),
    ("user_metrics", "metrics", "comparisons", "MLflow metrics"),
    "correction (the floor: its split's)",
    evaluate_tasks,
    scheduled=True,
    what="per-user and per-cell metrics with intervals, paired comparisons",
)
AGREEMENT = Stage(
    "agreement",
    DATASET,
    ("evaluate",),
    ("user_metrics",),
    ("reports/compare/*.agreement.csv",),
    "replicates",
    agreement_tasks,
    when="compare.protocols",
    what="Kendall tau-b of each protocol's model order against the INTENT cells'",
)
BACKTEST = Stage(
    "backtest",
    DATASET,
    ("evaluate",),
    ("user_metrics", "metrics", "splits"),
    ("reports/compare/*.backtest.csv",),
    "origins, replicates",
    backtest_tasks,
    when="backtest:",
    what="each origin's cell scores and Kendall tau-b of the model order between consecutive origins",
)
