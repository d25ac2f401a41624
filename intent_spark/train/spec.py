"""The train, score and transfer stages, per dataset and model (and transfer pair)."""

from __future__ import annotations

from intent_spark.core.datasets import DatasetRef
from intent_spark.core.stage_spec import DATASET_MODEL, TRANSFER_PAIR, Run, Stage, Task, known
from intent_spark.split.spec import SPLIT


def train_tasks(run: Run) -> list[Task]:
    from intent_spark.train.fit import train

    conf = run.models_conf
    tasks = []
    for name in run.scored():
        for model in run.models:
            settings = conf.logged(model)

            def work(name: DatasetRef = name, model: str = model) -> None:
                run_id = train(
                    run.lake_context(),
                    name,
                    run.spec_of(model),
                    conf,
                    parent_run_id=run.benchmark(),
                    splits=run.splits_of(name),
                )
                run.progress(
                    f"{name} {model}: logged to MLflow run {run_id} in {run.lake_context().tracking}"
                )

            fit = known(conf.context, conf.max_tokens, settings)
            tasks.append(Task(TRAIN.name, name, work, fit, model))
    return tasks


def score_tasks(run: Run) -> list[Task]:
    from intent_spark.train.score import score

    tasks = []
    for name in run.scored():
        for model in run.models:

            def work(name: DatasetRef = name, model: str = model) -> None:
                rows = score(
                    run.lake_context(),
                    name,
                    run.spec_of(model),
                    run.models_conf,
                    run_id=run.call.run_id,
                    parent_run_id=run.benchmark(),
                )
                run.progress(f"{name} {model}: {rows:,} ranks")

            tasks.append(Task(SCORE.name, name, work, model=model))
    return tasks


def transfer_tasks(run: Run) -> list[Task]:
    from intent_spark.train.transfer import score_transfer

    tasks = []
    for source, target in run.conf.compare.transfer:

        def work(source: DatasetRef = source, target: DatasetRef = target) -> None:
            rows = score_transfer(run.lake_context(), source, target, run.models_conf)
            run.progress(f"{target} sasrec_f@{source}: {rows:,} ranks")

        # The source's model ranks the target's targets: it reads both.
        reads = ((TRAIN.name, source, "sasrec_f"), (SPLIT.name, target, None))
        label = f"transfer sasrec_f from {source}"
        tasks.append(Task(TRANSFER.name, target, work, model=source, label=label, reads=reads))
    return tasks


TRAIN = Stage(
    "train",
    DATASET_MODEL,
    ("verify",),
    ("events", "items", "holdout", "splits", "targets", "checksums"),
    ("catalogue", "train_sequences", "score_events", "model_inputs", "MLflow run"),
    "the model, its settings, context and max_tokens",
    train_tasks,
    scheduled=True,
    what="model inputs (once per split version), then each split's model, logged to MLflow",
)
SCORE = Stage(
    "score",
    DATASET_MODEL,
    ("train",),
    ("catalogue", "score_events", "targets", "MLflow run"),
    ("ranks",),
    "",
    score_tasks,
    scheduled=True,
    what="the tie-aware rank of every target over the full catalogue",
)
TRANSFER = Stage(
    "transfer",
    TRANSFER_PAIR,
    ("train",),
    ("MLflow run of the source", "catalogue", "score_events", "items", "targets"),
    ("ranks", "transfers"),
    "",
    transfer_tasks,
    scheduled=True,
    when="compare.transfer",
    what="SASRec-F trained on one source ranks another's test targets",
)
