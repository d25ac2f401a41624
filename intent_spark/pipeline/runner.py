"""``intent run``: the stage graph (``graph.STAGES``) over the datasets and models of a run conf.

The runner expands every stage of the graph over its fan-out (the run's datasets and variants,
dataset x model pairs, transfer pairs) into tasks, in the graph's order, and links each to the
earlier tasks it reads (``link``). A task's fingerprint is taken in one place (``inputs``): the
digest of its name, its settings and the fingerprints of the tasks it reads. ``execute`` runs
them through each dataset's ``StageLog``, skipping a task whose fingerprint is unchanged since
it finished, so a rerun resumes at the first task that did not finish; ``plan`` says, without
running anything, which tasks would run and why.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import replace
from functools import cached_property
from pathlib import Path
from typing import Any

from intent_spark.core import schema as S
from intent_spark.core.conf import CONF_DIR, child
from intent_spark.core.datasets import DatasetRef
from intent_spark.core.errors import IntentError
from intent_spark.core.progress import Progress, silent
from intent_spark.core.runconf import DatasetEntry, RunConf
from intent_spark.core.sources import SourceConf, at_item_level, load_source
from intent_spark.core.stage_spec import Key, StageCall, Task, chain
from intent_spark.lake.context import Lake
from intent_spark.pipeline import graph
from intent_spark.pipeline.stage_log import StageFailed, StageLog
from intent_spark.split.conf import SplitConf, load_split_conf
from intent_spark.train.conf import (
    ModelsConf,
    check_model,
    load_models_conf,
    with_processes,
    with_reader,
    with_steps,
)
from intent_spark.train.readers import choose_reader


def pair_by_pair(tasks: list[Task]) -> list[Task]:
    """The graph's order, except that the stages fanned out per dataset and model run pair by
    pair (train then score one model of one dataset, then the next), where the first of them
    stands: a model's ranks exist before the next model trains."""
    per_pair = [t for t in tasks if graph.stage(t.stage).per == graph.DATASET_MODEL]
    if not per_pair:
        return tasks
    pairs = list(dict.fromkeys((t.dataset, t.model) for t in per_pair))
    grouped = [t for pair in pairs for t in per_pair if (t.dataset, t.model) == pair]
    first = tasks.index(per_pair[0])
    rest = [t for t in tasks if graph.stage(t.stage).per != graph.DATASET_MODEL]
    return rest[:first] + grouped + rest[first:]


def link(tasks: list[Task]) -> list[Task]:
    """Each task with the earlier tasks it reads. A task that names none reads, for each stage
    it runs after, that stage's tasks of its dataset (of its model too, where both stages fan
    out per model); where none of those stages has a task for the dataset (a protocol variant
    is not verified), the stages they run after. A task that names its reads (a variant reads
    its source's) names only earlier tasks of stages above it in the graph. Either way the
    graph, declared once, is what a fingerprint follows."""
    by_stage: dict[tuple[str, str], list[Task]] = {}
    for task in tasks:
        by_stage.setdefault((task.stage, task.dataset), []).append(task)

    def reads_from(task: Task, stages: tuple[str, ...]) -> list[Key]:
        found = []
        for name in stages:
            per_model = graph.DATASET_MODEL == graph.stage(task.stage).per == graph.stage(name).per
            found += [
                t.key
                for t in by_stage.get((name, task.dataset), [])
                if not per_model or t.model == task.model
            ]
        deeper = tuple(dict.fromkeys(before for name in stages for before in graph.stage(name).after))
        return found if found or not deeper else reads_from(task, deeper)

    for task in tasks:
        if task.reads is None:
            task.reads = tuple(dict.fromkeys(reads_from(task, graph.stage(task.stage).after)))
    earlier: set[Key] = set()
    for task in tasks:
        above = graph.upstream(task.stage) | {task.stage}
        stray = [k for k in task.reads or () if k[0] not in above or k not in earlier]
        if stray:
            raise RuntimeError(
                f"{task.name} of {task.dataset} reads {stray}: no earlier task above it in the graph"
            )
        earlier.add(task.key)
    return tasks


class Runner:
    """The tasks of one run conf; the Spark session and MLflow store are made when first used,
    so that a plan needs neither."""

    def __init__(
        self,
        conf: RunConf,
        *,
        root: str | None = None,
        force: bool = False,
        spark_settings: dict[str, str] | None = None,
        progress: Progress = silent,
        call: StageCall | None = None,
    ):
        self.conf = conf
        self.call = call or StageCall()
        self.root = root or conf.lake_path  # the lake's root; ``lake_context()`` is the lake
        self.force = force
        self.progress = progress
        self.spark_settings = spark_settings or {}
        self.base = Path(conf.workdir)
        # Names (a module:Class spec by its class's name), checked before hours of ingest.
        self.specs = {check_model(model): model for model in conf.models}  # name -> as given
        self.models = tuple(self.specs)
        if self.models:  # a bad models conf or a reader that cannot run here, before hours of ingest
            choose_reader(self.models_conf.reader)
        self.split_conf_path = Path(conf.split_conf) if conf.split_conf else CONF_DIR / "split.yaml"
        self.logs: dict[str, StageLog] = {}
        self.done: dict[Key, str | None] = {}  # task key -> its inputs
        self.planned_runs: set[Key] = set()  # in a plan: tasks that would run
        self.parent: str | None = None  # the benchmark's MLflow run
        self.page: Path | None = None
        self.seconds: dict[str, float] = {}  # stage -> seconds its tasks ran in this run
        self.one_stage = call is not None  # a command's: one stage's tasks (run_stage), no stage log
        self._spark: Any = None
        self._uri: str | None = None
        self._lake: Lake | None = None

    @cached_property
    def models_conf(self) -> ModelsConf:
        """The models conf with the run's overrides, processes, reader and a command's steps;
        made when first asked (a split needs none of it)."""
        conf = self.conf

        def where(key: str) -> str:  # a conf file's key, or the flag that set it
            return child(conf.path, key) if conf.path else f"--{key.replace('_', '-')}"

        overrides = load_models_conf(conf.models_conf, conf.model_overrides, where("model_overrides"))
        steps = with_steps(overrides, self.call.steps)
        return with_reader(
            with_processes(steps, conf.processes, where("processes")), conf.reader, where("reader")
        )

    # --- services ---
    @property
    def spark(self) -> Any:
        if self._spark is None:
            from intent_spark.lake.session import build_session, needs_store

            paths = [self.root, *(entry.raw for entry in self.conf.datasets)]
            self._spark = build_session(
                f"intent-{self.call.command}", self.spark_settings, store=needs_store(*paths)
            )
        return self._spark

    @property
    def uri(self) -> str:
        if self._uri is None:
            from intent_spark.lake.tracking import default_tracking_uri

            self._uri = default_tracking_uri(self.root, self.conf.tracking_uri)
        return self._uri

    def lake_context(self) -> Lake:
        """One for the whole run: its MLflow store is resolved once, when a task first asks."""
        if self._lake is None:
            tracking_uri = self.conf.tracking_uri
            self._lake = Lake(self.spark, self.root, tracking_uri, self.progress, self.call.tracked)
        return self._lake

    def log(self, dataset: str) -> StageLog:
        if dataset not in self.logs:
            self.logs[dataset] = StageLog(self.root, dataset, self.force, self.progress)
        return self.logs[dataset]

    def benchmark(self) -> str | None:
        """MLflow's benchmark run, opened by the first task that logs to it; a one-stage command
        nests under the run it names, or none."""
        if self.one_stage:
            return self.call.parent_run_id
        if self.parent is None:
            from intent_spark.lake.tracking import start_benchmark

            self.parent = start_benchmark(
                self.uri,
                f"benchmark {Path(self.conf.path).stem}",
                {
                    "conf": self.conf.path,
                    "datasets": ",".join(self.conf.names),
                    "models": ",".join(self.models),
                    "seed": self.conf.seed,
                },
            )
        return self.parent

    # --- what the conf asks for ---
    def spec_of(self, model: str) -> str:
        """A model as the conf gives it: its name, or the module:Class spec a process of its own
        (TorchDistributor's) resolves it by."""
        return self.specs.get(model, model)

    def variants(self) -> list[DatasetRef]:
        return [*self.conf.compare.variants(), *self.conf.backtest_variants()]

    def scored(self) -> list[DatasetRef]:
        """Datasets whose models are trained and scored: the run's, then the variants."""
        return [*self.conf.names, *self.variants()]

    def split_conf(self, name: DatasetRef, overrides: dict[str, Any] | None = None) -> SplitConf:
        """A dataset's (or variant's) split conf; per-dataset entries fall back to its source's, and
        the run's own floor (``floor_users:``) comes before ``overrides``."""
        source = name.source
        overrides = {**(overrides or {}), **self.call.split_overrides}  # a command's flags last
        if self.conf.floor_users is not None:
            overrides = {"floor_users": self.conf.floor_users, **overrides}
        return load_split_conf(self.split_conf_path, source, overrides, source=self.conf.source_of(source))

    def source_conf(self, entry: DatasetEntry) -> SourceConf:
        conf = at_item_level(load_source(entry.conf or entry.source_name), entry.item_level)
        if entry.per_signal is not None:  # KuaiRand's all-signals mode beside its default
            action = replace(conf.events.action, per_signal=entry.per_signal)
            conf = replace(conf, events=replace(conf.events, action=action))
        return conf

    def raw_folder(self, entry: DatasetEntry) -> str:
        """The release folder: the conf's ``raw`` as written (a local path or an ``s3a://`` URI,
        which a Path would cut to ``s3a:/``), else the generated one under the workdir."""
        return entry.raw if entry.raw else str(self.base / "raw" / entry.name)

    def forget(self, dataset: str, stage: str) -> None:
        self.log(dataset).done.pop(stage, None)

    def splits_of(self, name: str) -> tuple[str, ...]:
        """Both splits of a run's dataset (or those a command names); a variant is scored on its
        test split only."""
        if self.call.splits:
            return self.call.splits
        return (S.TEST, S.VAL) if name in self.conf.names else (S.TEST,)

    def split_report(self, dataset: str) -> Callable[[dict[str, Any]], object] | None:
        from intent_spark.report.split import split_report_writer

        out = Path(self.call.split_report) if self.call.split_report else None
        return split_report_writer(self.lake_context(), dataset, out)

    def publish_report(self, page: Path) -> None:
        self.page = page

    # --- the tasks: each stage's, in the graph's order ---
    def tasks(self) -> list[Task]:
        tasks = [
            task
            for stage in graph.STAGES
            if self.models or not graph.needs_models(stage.name)
            for task in stage.tasks(self)
        ]
        return pair_by_pair(link(tasks))

    def inputs(self, task: Task) -> str | None:
        """A task's fingerprint: its name, its settings and the inputs the tasks it reads finished
        (or, in a plan, would run) with; None while one of them is not known yet."""
        assert task.reads is not None, "tasks are linked first"
        return chain(task.stage, task.name, task.settings(), *(self.done.get(key) for key in task.reads))

    def waits_for(self, task: Task, names: dict[Key, str]) -> str:
        """The task read first that runs before this one, named in a plan."""
        assert task.reads is not None
        pending = [k for k in task.reads if k in self.planned_runs or self.done.get(k) is None]
        # a task that reads no task's outputs may still wait for files an earlier one writes
        after = graph.stage(task.stage).after
        pending += [k for k in self.planned_runs if k[0] in after and k[1] == task.dataset]
        key = (pending or list(task.reads) or [task.key])[0]
        return f"{names.get(key, key[0])} of {key[1]}"

    # --- running and planning ---
    def execute(self, tasks: list[Task]) -> None:
        """Run every task whose inputs changed since it last finished; the report always."""
        from intent_spark.lake.tracking import end_benchmark

        ok = False
        try:
            for task in tasks:
                if graph.stage(task.stage).always:
                    started = time.monotonic()
                    try:
                        task.work()
                    except Exception as exc:
                        raise StageFailed(task.stage, "the run", exc) from exc
                    self.seconds[task.stage] = time.monotonic() - started
                    continue
                inputs = self.inputs(task)
                if inputs is None:
                    raise RuntimeError(
                        f"{task.name} of {task.dataset}: inputs unknown after the tasks before it ran"
                    )
                log = self.log(task.dataset)
                if log.run(task.name, inputs, task.work):
                    self.seconds[task.stage] = (
                        self.seconds.get(task.stage, 0.0) + log.done[task.name]["seconds"]
                    )
                self.done[task.key] = inputs
            ok = True
        finally:
            if self.parent is not None:
                try:
                    end_benchmark(self.uri, self.parent, ok)
                except IntentError:
                    if ok:  # else the stage's failure is the one to tell (the store may be why)
                        raise

    def plan(self, tasks: list[Task]) -> list[str]:
        """One line per task: whether ``execute`` would run it or skip it, and why. Runs nothing."""
        lines = []
        names = {task.key: task.name for task in tasks}
        for task in tasks:
            where = task.dataset or "every dataset"
            if graph.stage(task.stage).always:
                lines.append(f"run   {task.name:<28} {where:<26} always rebuilt")
                continue
            inputs = self.inputs(task)
            self.done[task.key] = inputs
            log = self.log(task.dataset)
            record = log.finished(task.name)
            if self.force:
                why = "--force"
            elif inputs is None:
                why = f"after {self.waits_for(task, names)}, which runs first"
            elif record is None and task.name in log.done:
                why = f"interrupted (started {log.done[task.name].get('started', '?')}, never finished)"
            elif record is None:
                why = "never finished"
            elif record.get("inputs") != inputs:
                why = "inputs changed since it finished"
            else:
                lines.append(f"skip  {task.name:<28} {where:<26} inputs unchanged since {record['finished']}")
                continue
            self.planned_runs.add(task.key)
            lines.append(f"run   {task.name:<28} {where:<26} {why}")
        return lines


def stage_tasks(runner: Runner, stage: str, dataset: DatasetRef, model: str | None = None) -> list[Task]:
    """The tasks a run makes for one stage, of one dataset (and model): that stage's alone, as its
    declaration makes them (the stages before it are not asked: a hand-built dataset has no
    source conf for ingest to make a task of)."""
    made = graph.stage(stage).tasks(runner)
    return [t for t in made if t.dataset == dataset and (model is None or t.model == model)]


def run_stage(runner: Runner, stage: str, dataset: DatasetRef, model: str | None = None) -> int:
    """One stage of the graph for one dataset (and model), as ``intent run`` declares it, like
    ``kedro run --nodes``. A command runs its tasks whatever the stage log says and records
    nothing there (their inputs' fingerprints are a run's to take). Returns how many ran."""
    chosen = stage_tasks(runner, stage, dataset, model)
    if not chosen:
        what = f"{dataset} {model}" if model else str(dataset)
        raise IntentError(f"{stage}: nothing to run for {what}")
    for task in chosen:
        task.work()
    return len(chosen)


def run_pipeline(runner: Runner) -> int:
    """Execute a runner's tasks; a failed stage is one line naming it, exit 1."""
    try:
        runner.execute(runner.tasks())
    except StageFailed as failure:
        print(f"intent run: {failure}; fix it and rerun: finished stages are skipped", file=sys.stderr)
        from intent_spark.train.plugin_errors import print_plugin_frames

        print_plugin_frames(failure)
        return 1
    root = runner.root
    if not runner.conf.models:
        where = Path(root) / "reports" / "split"
        runner.progress(f"done: lake at {root}; split reports in {where} (no models in {runner.conf.path})")
        return 0
    if runner.seconds:
        spent = ", ".join(f"{stage} {seconds:.0f}s" for stage, seconds in runner.seconds.items())
        runner.progress(f"time per stage: {spent}")
    runner.progress(
        f"MLflow runs (benchmark run {runner.parent}): mlflow ui --backend-store-uri {runner.uri}"
    )
    runner.progress(f"compare them: intent compare --lake {root} --metrics '^test\\..*ndcg_10$'")
    if runner.page is not None:
        runner.progress(f"done: report at {runner.page.resolve()}")
    return 0
