"""``intent run``: the stage graph (``graph.STAGES``) over the datasets and models of a run conf.

The runner expands every stage of the graph over its fan-out (the run's datasets and variants,
dataset x model pairs, transfer pairs) into tasks, in the graph's order, each with the
fingerprint of its inputs. ``execute`` runs them through each dataset's ``StageLog``, skipping
a task whose fingerprint is unchanged since it finished, so a rerun resumes at the first task
that did not finish; ``plan`` says, without running anything, which tasks would run and why.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

from intent_spark.core import schema as S
from intent_spark.core.conf import CONF_DIR, child
from intent_spark.core.datasets import parse_dataset
from intent_spark.core.errors import IntentError
from intent_spark.core.progress import Progress, silent
from intent_spark.core.runconf import DatasetEntry, RunConf
from intent_spark.core.sources import SourceConf, at_item_level, load_source
from intent_spark.pipeline import graph
from intent_spark.pipeline.stages import StageFailed, StageLog, fingerprint, raw_listing
from intent_spark.split.conf import SplitConf, load_split_conf
from intent_spark.train.conf import ModelsConf, check_model, load_models_conf, with_processes


@dataclass
class Task:
    """One stage for one dataset (and model): what it runs, and the digest of its inputs, made
    when asked (after the tasks before it ran, or, in a plan, None while one of them would)."""

    stage: str
    dataset: str
    work: Callable[[], Any]
    inputs: Callable[[], str | None]
    model: str | None = None
    label: str = ""
    upstream: str = ""  # the earlier task whose outputs it reads, named in a plan

    @property
    def name(self) -> str:
        """The name its stage log records it under (``split``, ``train sasrec``)."""
        return self.label or (f"{self.stage} {self.model}" if self.model else self.stage)

    @property
    def key(self) -> tuple[str, str, str | None]:
        return (self.stage, self.dataset, self.model)


def chain(*parts: Any) -> str | None:
    """The fingerprint of parts that include earlier fingerprints: unknown if any is."""
    return None if any(p is None for p in parts) else fingerprint(*parts)


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


class Runner:
    """The tasks of one run conf; the Spark session and MLflow store are made when first used,
    so that a plan needs neither."""

    def __init__(
        self,
        conf: RunConf,
        *,
        lake: str | None = None,
        force: bool = False,
        spark_settings: dict[str, str] | None = None,
        progress: Progress = silent,
    ):
        self.conf = conf
        self.lake = lake or conf.lake_path
        self.force = force
        self.progress = progress
        self.spark_settings = spark_settings or {}
        self.base = Path(conf.workdir)
        # Names (a module:Class spec by its class's name), checked before hours of ingest.
        self.models = tuple(check_model(model) for model in conf.models)
        self.models_conf: ModelsConf = with_processes(
            load_models_conf(conf.models_conf, conf.model_overrides, child(conf.path, "model_overrides")),
            conf.processes,
            child(conf.path, "processes"),
        )
        self.split_conf_path = Path(conf.split_conf) if conf.split_conf else CONF_DIR / "split.yaml"
        self.logs: dict[str, StageLog] = {}
        self.done: dict[tuple[str, str, str | None], str | None] = {}  # task key -> its inputs
        self.planned_runs: set[tuple[str, str, str | None]] = set()  # in a plan: tasks that would run
        self.parent: str | None = None  # the benchmark's MLflow run
        self.page: Path | None = None
        self.seconds: dict[str, float] = {}  # stage -> seconds its tasks ran in this run
        self._spark: Any = None
        self._uri: str | None = None

    # --- services ---
    @property
    def spark(self) -> Any:
        if self._spark is None:
            from intent_spark.lake.session import build_session, needs_store

            paths = [self.lake, *(entry.raw for entry in self.conf.datasets)]
            self._spark = build_session("intent-run", self.spark_settings, store=needs_store(*paths))
        return self._spark

    @property
    def uri(self) -> str:
        if self._uri is None:
            from intent_spark.lake.tracking import default_tracking_uri

            self._uri = default_tracking_uri(self.lake, self.conf.tracking_uri)
        return self._uri

    def log(self, dataset: str) -> StageLog:
        if dataset not in self.logs:
            self.logs[dataset] = StageLog(self.lake, dataset, self.force, self.progress)
        return self.logs[dataset]

    def benchmark(self) -> str:
        """MLflow's benchmark run, opened by the first task that logs to it."""
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
    def variants(self) -> list[str]:
        return [*self.conf.compare.variants(), *self.conf.backtest_variants()]

    def scored(self) -> list[str]:
        """Datasets whose models are trained and scored: the run's, then the variants."""
        return [*self.conf.names, *self.variants()]

    def split_conf(self, name: str, overrides: dict[str, Any] | None = None) -> SplitConf:
        """A dataset's (or variant's) split conf; per-dataset entries fall back to its source's."""
        source = parse_dataset(name).source
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

    def inputs_of(self, stage: str, dataset: str, model: str | None = None) -> str | None:
        """The inputs an earlier task finished (or, in a plan, would run) with."""
        return self.done.get((stage, dataset, model))

    # --- the tasks, stage by stage in the graph's order ---
    def tasks(self) -> list[Task]:
        builders: dict[str, Callable[[], list[Task]]] = {
            "generate": self._generate,
            "ingest": self._ingest,
            "audit": self._audit,
            "split": self._split,
            "verify": self._verify,
            "sensitivity": self._sensitivity,
            "leaks": self._leaks,
            "train": self._train,
            "score": self._score,
            "transfer": self._transfer,
            "evaluate": self._evaluate,
            "agreement": self._agreement,
            "backtest": self._backtest,
            "report": self._report,
        }
        unbuilt = sorted(set(graph.BY_NAME) ^ set(builders))
        if unbuilt:
            raise RuntimeError(f"stages without a task builder or a declaration: {unbuilt}")
        tasks = [
            task
            for stage in graph.STAGES
            if self.models or not graph.needs_models(stage.name)
            for task in builders[stage.name]()
        ]
        return pair_by_pair(tasks)

    def _generate(self) -> list[Task]:
        from intent_spark.generate import generate_release

        tasks = []
        for entry in self.conf.datasets:
            if entry.raw:
                continue
            folder = self.raw_folder(entry)

            def work(entry: DatasetEntry = entry, folder: str = folder) -> None:
                generate_release(
                    entry.source_name, Path(folder), entry.events, seed=self.conf.seed, progress=self.progress
                )

            def inputs(entry: DatasetEntry = entry, folder: str = folder) -> str:
                if not raw_listing(folder):
                    self.log(entry.name).done.pop("generate", None)  # the files went: make them again
                return fingerprint("generate", entry.source_name, entry.events, self.conf.seed)

            tasks.append(Task("generate", entry.name, work, inputs))
        return tasks

    def _ingest(self) -> list[Task]:
        from intent_spark.ingest import ingest_source

        tasks = []
        for entry in self.conf.datasets:
            conf = self.source_conf(entry)
            folder = self.raw_folder(entry)

            def work(entry: DatasetEntry = entry, conf: SourceConf = conf, folder: str = folder) -> None:
                summary = ingest_source(
                    self.spark, conf, folder, self.lake, dataset=entry.name, progress=self.progress
                )
                self.progress(
                    f"{entry.name}: {summary.events:,} events, {summary.rejects:,} rejects, {summary.items:,} items"
                )

            def inputs(name: str = entry.name, conf: SourceConf = conf, folder: str = folder) -> str | None:
                if ("generate", name, None) in self.planned_runs:
                    return None  # the release is written first; its files' times are not known yet
                return fingerprint("ingest", raw_listing(folder), repr(conf))

            tasks.append(Task("ingest", entry.name, work, inputs, upstream=f"generate of {entry.name}"))
        return tasks

    def _audit(self) -> list[Task]:
        if self.conf.audit is None:
            return []
        from intent_spark.checks.audit import audit_verdict, write_audit

        floor = self.conf.audit.floor_users
        tasks = []
        for entry in self.conf.datasets:
            conf = self.source_conf(entry)

            def work(name: str = entry.name, conf: SourceConf = conf) -> None:
                self.progress(
                    f"{name}: {audit_verdict(write_audit(self.spark, self.lake, name, conf, floor))}"
                )

            def inputs(name: str = entry.name) -> str | None:
                return chain("audit", self.inputs_of("ingest", name), floor)

            tasks.append(Task("audit", entry.name, work, inputs, upstream=f"ingest of {entry.name}"))
        return tasks

    def _split(self) -> list[Task]:
        from intent_spark.report.split import split_report_writer
        from intent_spark.split.protocols import run_protocol_split
        from intent_spark.split.stage import run_split

        tasks = []
        for entry in self.conf.datasets:
            conf = self.split_conf(entry.name)

            def work(name: str = entry.name, conf: SplitConf = conf) -> None:
                writer = split_report_writer(self.lake, name, None, self.progress)
                run_split(self.spark, self.lake, name, conf, progress=self.progress, report=writer)

            def inputs(name: str = entry.name, conf: SplitConf = conf) -> str | None:
                return chain("split", self.inputs_of("ingest", name), repr(conf))

            tasks.append(Task("split", entry.name, work, inputs, upstream=f"ingest of {entry.name}"))
        for name in self.conf.compare.datasets:
            conf = self.split_conf(name)
            for variant in self.conf.compare.protocol_variants(name):
                per_period = conf.max_targets_per_period

                def protocol_work(variant: str = variant, per_period: int = per_period) -> None:
                    run_protocol_split(self.spark, self.lake, variant, per_period, progress=self.progress)

                def protocol_inputs(
                    name: str = name, variant: str = variant, per_period: int = per_period
                ) -> str | None:
                    return chain("protocol", self.inputs_of("split", name), variant, per_period)

                tasks.append(
                    Task("split", variant, protocol_work, protocol_inputs, upstream=f"split of {name}")
                )
            for variant in self.conf.compare.seed_variants(name):
                seeded = self.split_conf(name, {"seed": parse_dataset(variant).seed})

                def seed_work(variant: str = variant, seeded: SplitConf = seeded) -> None:
                    run_split(self.spark, self.lake, variant, seeded, progress=self.progress)

                def seed_inputs(name: str = name, seeded: SplitConf = seeded) -> str | None:
                    return chain("seed", self.inputs_of("split", name), repr(seeded))

                tasks.append(Task("split", variant, seed_work, seed_inputs, upstream=f"split of {name}"))
        backtest = self.conf.backtest
        for name in self.conf.backtested:
            assert backtest is not None
            # the rule, never a hand-fixed cutoff: the data stops at the origin
            ruled = self.split_conf(name, {"manual_cutoff": None, "manual_val_cutoff": None})
            for variant in backtest.variants(name):

                def origin_work(variant: str = variant, ruled: SplitConf = ruled) -> None:
                    run_split(self.spark, self.lake, variant, ruled, progress=self.progress)

                def origin_inputs(
                    name: str = name, variant: str = variant, ruled: SplitConf = ruled
                ) -> str | None:
                    return chain("origin", self.inputs_of("ingest", name), variant, repr(ruled))

                tasks.append(Task("split", variant, origin_work, origin_inputs, upstream=f"ingest of {name}"))
        return tasks

    def _verify(self) -> list[Task]:
        from intent_spark.checks.verify import verify_dataset

        def work(name: str) -> None:
            failed = [f"{r.split}/{r.name}" for r in verify_dataset(self.spark, self.lake, name) if not r.ok]
            if failed:
                raise IntentError(f"checks failed: {', '.join(failed)}")
            self.progress(f"{name}: every leakage check and checksum passed")

        # A protocol variant fails the leak check by design: its leak is reported, not refused.
        names = [*self.conf.names, *(v for v in self.variants() if not parse_dataset(v).protocol)]
        return [
            Task(
                "verify",
                n,
                partial(work, n),
                partial(self.inputs_of, "split", n),
                upstream=f"split of {n}",
            )
            for n in names
        ]

    def _write_sensitivity(self, name: str) -> None:
        from intent_spark.split.sensitivity import write_sensitivity

        write_sensitivity(self.spark, self.lake, name, self.split_conf(name))

    def _write_leaks(self, name: str) -> None:
        from intent_spark.evaluate.leaks import write_leaks

        write_leaks(self.spark, self.lake, name)

    def _sensitivity(self) -> list[Task]:
        return [
            Task(
                "sensitivity",
                n,
                partial(self._write_sensitivity, n),
                partial(self.inputs_of, "split", n),
                upstream=f"split of {n}",
            )
            for n in self.conf.compare.datasets
        ]

    def _leaks(self) -> list[Task]:
        names = [*self.conf.compare.datasets, *(v for v in self.variants() if parse_dataset(v).protocol)]
        return [
            Task(
                "leaks",
                n,
                partial(self._write_leaks, n),
                partial(self.inputs_of, "split", n),
                upstream=f"split of {n}",
            )
            for n in names
        ]

    def _splits_of(self, name: str) -> tuple[str, ...]:
        """Both splits of a run's dataset; a variant is scored on its test split only."""
        return (S.TEST, S.VAL) if name in self.conf.names else (S.TEST,)

    def _train(self) -> list[Task]:
        from intent_spark.train.fit import train

        conf = self.models_conf
        tasks = []
        for name in self.scored():
            for model in self.models:
                settings = conf.logged(model)

                def work(name: str = name, model: str = model) -> None:
                    train(
                        self.spark,
                        self.lake,
                        name,
                        model,
                        conf,
                        tracking_uri=self.uri,
                        parent_run_id=self.benchmark(),
                        splits=self._splits_of(name),
                        progress=self.progress,
                    )

                def inputs(name: str = name, model: str = model, settings: dict = settings) -> str | None:
                    split = self.inputs_of("split", name)
                    if split is None:
                        return None
                    return fingerprint("train", split, model, conf.context, conf.max_tokens, settings)

                tasks.append(Task("train", name, work, inputs, model, upstream=f"split of {name}"))
        return tasks

    def _score(self) -> list[Task]:
        from intent_spark.train.score import score

        tasks = []
        for name in self.scored():
            for model in self.models:

                def work(name: str = name, model: str = model) -> None:
                    rows = score(
                        self.spark,
                        self.lake,
                        name,
                        model,
                        self.models_conf,
                        tracking_uri=self.uri,
                        parent_run_id=self.benchmark(),
                        progress=self.progress,
                    )
                    self.progress(f"{name} {model}: {rows:,} ranks")

                def inputs(name: str = name, model: str = model) -> str | None:
                    return self.inputs_of("train", name, model)

                tasks.append(Task("score", name, work, inputs, model, upstream=f"train {model} of {name}"))
        return tasks

    def _transfer(self) -> list[Task]:
        from intent_spark.train.transfer import score_transfer

        tasks = []
        for source, target in self.conf.compare.transfer:

            def work(source: str = source, target: str = target) -> None:
                rows = score_transfer(
                    self.spark,
                    self.lake,
                    source,
                    target,
                    self.models_conf,
                    tracking_uri=self.uri,
                    progress=self.progress,
                )
                self.progress(f"{target} sasrec_f@{source}: {rows:,} ranks")

            def inputs(source: str = source, target: str = target) -> str | None:
                return chain(
                    "transfer", self.inputs_of("train", source, "sasrec_f"), self.inputs_of("split", target)
                )

            label = f"transfer sasrec_f from {source}"
            tasks.append(Task("transfer", target, work, inputs, source, label, f"train sasrec_f of {source}"))
        return tasks

    def _evaluate(self) -> list[Task]:
        from intent_spark.evaluate.metrics import evaluate

        tasks = []
        for name in self.scored():
            floor = self.split_conf(name).floor_users

            def work(name: str = name, floor: int = floor) -> None:
                evaluate(
                    self.spark,
                    self.lake,
                    name,
                    floor_users=floor,
                    correction=self.conf.correction,
                    tracking_uri=self.uri,
                    progress=self.progress,
                )

            def inputs(name: str = name, floor: int = floor) -> str | None:
                trained = {m: self.inputs_of("train", name, m) for m in self.models}
                transfers = [
                    self.inputs_of("transfer", t, s) for s, t in self.conf.compare.transfer if t == name
                ]
                if None in trained.values() or None in transfers:
                    return None
                return fingerprint("evaluate", trained, transfers, floor, self.conf.correction)

            tasks.append(Task("evaluate", name, work, inputs, upstream=f"training on {name}"))
        return tasks

    def _agreement(self) -> list[Task]:
        from intent_spark.evaluate.agreement import write_agreement

        compare = self.conf.compare
        if not compare.protocols:
            return []
        tasks = []
        for name in compare.datasets:

            def work(name: str = name) -> None:
                write_agreement(self.spark, self.lake, name, compare.protocols, replicates=compare.replicates)

            def inputs(name: str = name) -> str | None:
                evaluated = [self.inputs_of("evaluate", d) for d in [name, *compare.protocol_variants(name)]]
                return chain("agreement", *evaluated, compare.replicates)

            tasks.append(Task("agreement", name, work, inputs, upstream=f"evaluate of {name}"))
        return tasks

    def _backtest(self) -> list[Task]:
        from intent_spark.evaluate.backtest import write_backtest

        backtest = self.conf.backtest
        if backtest is None:
            return []
        tasks = []
        for name in self.conf.backtested:

            def work(name: str = name) -> None:
                path = write_backtest(
                    self.spark, self.lake, name, backtest.origins, replicates=backtest.replicates
                )
                self.progress(f"{name}: backtest over {backtest.origins} origins in {path}")

            def inputs(name: str = name) -> str | None:
                evaluated = [self.inputs_of("evaluate", d) for d in [*backtest.variants(name), name]]
                return chain("backtest", *evaluated, backtest.origins, backtest.replicates)

            tasks.append(Task("backtest", name, work, inputs, upstream=f"evaluate of {name}"))
        return tasks

    def _report(self) -> list[Task]:
        from intent_spark.lake.tracking import log_report
        from intent_spark.report.build import build_report

        def work() -> None:
            out = self.conf.report_path
            self.page = build_report(
                self.spark,
                self.lake,
                out,
                self.conf.names,
                compare=self.conf.compare,
                correction=self.conf.correction,
                progress=self.progress,
            )
            log_report(self.uri, str(out), self.benchmark())

        return [Task("report", "", work, lambda: None, label="report")]

    # --- running and planning ---
    def execute(self, tasks: list[Task]) -> None:
        """Run every task whose inputs changed since it last finished; the report always."""
        from intent_spark.lake.tracking import end_benchmark

        ok = False
        try:
            for task in tasks:
                if task.stage == "report":
                    started = time.monotonic()
                    try:
                        task.work()
                    except Exception as exc:
                        raise StageFailed("report", "the run", exc) from exc
                    self.seconds["report"] = time.monotonic() - started
                    continue
                inputs = task.inputs()
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
        for task in tasks:
            where = task.dataset or "every dataset"
            if task.stage == "report":
                lines.append(f"run   {task.name:<28} {where:<26} always rebuilt")
                continue
            inputs = task.inputs()
            self.done[task.key] = inputs
            log = self.log(task.dataset)
            record = log.finished(task.name)
            if self.force:
                why = "--force"
            elif inputs is None:
                why = f"after {task.upstream}, which runs first"
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


def run_pipeline(runner: Runner) -> int:
    """Execute a runner's tasks; a failed stage is one line naming it, exit 1."""
    try:
        runner.execute(runner.tasks())
    except StageFailed as failure:
        print(f"intent run: {failure}; fix it and rerun: finished stages are skipped", file=sys.stderr)
        from intent_spark.train.plugin_errors import print_plugin_frames

        print_plugin_frames(failure)
        return 1
    lake = runner.lake
    if not runner.conf.models:
        where = Path(lake) / "reports" / "split"
        runner.progress(f"done: lake at {lake}; split reports in {where} (no models in {runner.conf.path})")
        return 0
    if runner.seconds:
        spent = ", ".join(f"{stage} {seconds:.0f}s" for stage, seconds in runner.seconds.items())
        runner.progress(f"time per stage: {spent}")
    runner.progress(
        f"MLflow runs (benchmark run {runner.parent}): mlflow ui --backend-store-uri {runner.uri}"
    )
    runner.progress(f"compare them: intent compare --lake {lake} --metrics '^test\\..*ndcg_10$'")
    if runner.page is not None:
        runner.progress(f"done: report at {runner.page.resolve()}")
    return 0
