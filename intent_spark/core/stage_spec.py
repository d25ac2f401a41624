"""What a stage of ``intent run`` is: its declaration, the tasks it makes for a run, and the
run's services those tasks use.

Each stage package declares its stages in its ``spec.py`` (``split.spec.SPLIT``,
``train.spec.TRAIN``...); ``pipeline/graph.py`` lists them in order and ``pipeline/runner.py``
runs them. A stage's ``tasks`` turns a run into one ``Task`` per key it fans out over, each
with what it runs and the settings its ``fingerprint`` names. The runner links each task to the
earlier tasks it reads (by default the graph's: the stages it runs after, for the same dataset)
and takes its fingerprint in one place: the digest of its name, its settings and theirs.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Protocol

from intent_spark.core.datasets import DatasetRef

DATASET = "dataset"  # once per dataset of the run (and per variant, where the stage applies)
DATASET_MODEL = "dataset x model"
TRANSFER_PAIR = "transfer pair"
RUN = "run"  # once for the whole run


def fingerprint(*parts: Any) -> str:
    """A short stable digest of JSON-able parts."""
    text = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def chain(*parts: Any) -> str | None:
    """The fingerprint of parts that include earlier fingerprints: unknown if any is."""
    return None if any(p is None for p in parts) else fingerprint(*parts)


Key = tuple[str, str, str | None]  # a task's stage, dataset and model


def no_settings() -> tuple[()]:
    return ()


def known(*parts: Any) -> Callable[[], tuple[Any, ...]]:
    """A task's settings, known when the task is made."""
    return partial(tuple, parts)


@dataclass
class Task:
    """One stage for one dataset (and model): what it runs, and what its fingerprint holds
    besides the fingerprints of the tasks it reads: ``settings``, asked when its inputs are
    (after the tasks before it ran; None while they are not known yet, in a plan)."""

    stage: str
    dataset: str
    work: Callable[[], Any]
    settings: Callable[[], Any] = no_settings
    model: str | None = None
    label: str = ""
    # The earlier tasks whose outputs it reads; None: the graph's (``pipeline.runner.link``).
    reads: tuple[Key, ...] | None = None

    @property
    def name(self) -> str:
        """The name its stage log records it under (``split``, ``train sasrec``)."""
        return self.label or (f"{self.stage} {self.model}" if self.model else self.stage)

    @property
    def key(self) -> Key:
        return (self.stage, self.dataset, self.model)


@dataclass(frozen=True)
class StageCall:
    """What a one-stage command (``intent split``, ``intent train``...) sets beyond the run conf
    it is given as: the flags ``intent run`` leaves at their defaults. The runner applies each
    where it derives that setting (the split conf, the models conf, the lake), as for a run."""

    command: str = "run"  # the intent command: its Spark application's name
    split_overrides: dict[str, Any] = field(default_factory=dict)  # --seed, --cutoff ...
    split_report: str | None = None  # --out: where the split report goes
    steps: int | None = None  # --steps of every model that has them
    splits: tuple[str, ...] = ()  # train --split: only these (default: the dataset's)
    parent_run_id: str | None = None  # train --parent-run-id; a run opens a benchmark run instead
    run_id: str | None = None  # score --run-id: the training run to score
    floor_users: int | None = None  # evaluate --floor-users: an override of the split's floor
    bootstrap: int = 0  # evaluate --bootstrap R
    tracked: bool = True  # --no-mlflow: False


class Run(Protocol):
    """What a stage's tasks are given: the run conf and its services (``pipeline.runner.Runner``).
    A task reaches the lake through ``lake_context()``, whose Spark session and MLflow store are
    made when first used, so a plan needs neither."""

    conf: Any  # core.runconf.RunConf
    call: StageCall  # a one-stage command's flags (defaults in a run)
    progress: Callable[[str], None]
    models: tuple[str, ...]  # the run's models, by registered name
    planned_runs: set[Key]  # in a plan: the keys of tasks that would run

    @property
    def models_conf(self) -> Any:
        """The run's ``train.conf.ModelsConf``, made when first asked."""
        ...

    @property
    def uri(self) -> str: ...

    def lake_context(self) -> Any:
        """The run's lake, a ``lake.context.Lake`` (session, root, MLflow store, progress): what
        every stage function takes."""
        ...

    def spec_of(self, model: str) -> str:
        """A model as the conf gives it (a name or a module:Class spec), for the stage functions."""
        ...

    def benchmark(self) -> str | None:
        """The benchmark's MLflow run id, opened by the first task that logs to it (a one-stage
        command's: the run it names, or none)."""
        ...

    def forget(self, dataset: str, stage: str) -> None:
        """Drop a stage's record from a dataset's log: its outputs went, so it runs again."""
        ...

    def scored(self) -> list[DatasetRef]:
        """Datasets whose models are trained and scored: the run's, then the variants."""
        ...

    def variants(self) -> list[DatasetRef]: ...

    def splits_of(self, dataset: str) -> tuple[str, ...]:
        """The splits a dataset's models train on."""
        ...

    def split_conf(self, name: DatasetRef, overrides: dict[str, Any] | None = None) -> Any: ...

    def source_conf(self, entry: Any) -> Any: ...

    def raw_folder(self, entry: Any) -> str: ...

    def split_report(self, dataset: str) -> Callable[[dict[str, Any]], object] | None:
        """Where the split stage hands a dataset's split summary (None: no report)."""
        ...

    def publish_report(self, page: Any) -> None:
        """The report's page, named at the end of the run."""
        ...


def per_dataset(
    run: Run, stage: str, names: Iterable[DatasetRef], work: Callable[[Run, DatasetRef], None]
) -> list[Task]:
    """A ``stage`` task per dataset of ``names``, with no settings of its own: its outputs change
    only when those of the tasks it reads do."""
    return [Task(stage, n, partial(work, run, n)) for n in names]


@dataclass(frozen=True)
class Stage:
    """A stage, declared once: its fan-out, the stages it runs after, what it reads and writes,
    what its fingerprint holds besides theirs, and the tasks it makes for a run."""

    name: str
    per: str  # the fan-out
    after: tuple[str, ...]  # stages whose outputs it reads (same dataset, or all of them for RUN)
    reads: tuple[str, ...]
    writes: tuple[str, ...]
    fingerprint: str  # besides the fingerprints of the stages it runs after
    tasks: Callable[[Run], list[Task]]
    scheduled: bool = False  # a task of the scheduled job (databricks.yml), by its jobs/ entry point
    when: str = ""  # the run conf part that turns it on; empty: always
    what: str = ""
    always: bool = False  # rebuilt on every run: no fingerprint, never skipped

    @property
    def job(self) -> str:
        """Its ``jobs/<stage>.py`` entry point and ``intent`` command."""
        return self.name
