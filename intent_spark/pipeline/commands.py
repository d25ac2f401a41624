"""What each ``intent`` command does once its arguments are parsed (``cli.py`` parses them).

A stage command (ingest, split, train, score, evaluate) is the run conf and the flags it stands
for, handed to the runner, which runs that stage's tasks as ``intent run`` declares them
(``_one_stage``); the others take their lake as the runner makes one (``_lake``) and call their
package. ``run`` runs the stage graph. A user's mistake raises ``IntentError`` and ``cli.main``
prints it as one line.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import Any

from intent_spark.core.datasets import DatasetRef
from intent_spark.core.errors import IntentError
from intent_spark.core.runconf import BacktestConf, CompareConf, DatasetEntry, RunConf
from intent_spark.core.sources import load_source
from intent_spark.core.stage_spec import StageCall
from intent_spark.lake.context import Lake
from intent_spark.lake.progress import reporter


def _spark_overrides(args: argparse.Namespace) -> dict[str, str]:
    """Spark settings from a profile file, then ``--spark-conf key=value`` flags."""
    from intent_spark.lake.session import spark_settings

    return spark_settings(getattr(args, "spark_profile", None), getattr(args, "spark_conf", None) or [])


def _session(command: str, args: argparse.Namespace) -> Any:
    """The command's Spark session, with the S3A connector where one of its paths is on a store."""
    from intent_spark.lake.session import build_session, needs_store

    return build_session(f"intent-{command}", _spark_overrides(args), store=needs_store(*vars(args).values()))


# The commands that write a dataset's tables, and the argument naming it: each holds the
# dataset's lock (``lake/locks.py``) while it runs. ``run`` takes the locks of its conf's datasets.
WRITERS = {
    "ingest": "dataset",
    "split": "dataset",
    "train": "dataset",
    "score": "dataset",
    "submit": "dataset",
    "evaluate": "dataset",
    "transfer": "target",
}


def written_datasets(args: argparse.Namespace) -> list[DatasetRef]:
    """The datasets whose tables this command writes (none for one that only reads)."""
    name = WRITERS.get(args.command)
    if name is None or getattr(args, "export", None):  # score --export writes a file, not ranks
        return []
    return [getattr(args, name)]


def _run_conf(args: argparse.Namespace) -> RunConf:
    """The run conf a one-stage command stands for: its dataset (where it names a variant,
    ``hm.leave_last_out``, ``hm.seed1``, ``hm.origin2``, the part of a run conf that makes it),
    its model and the settings a run conf holds."""
    ref = args.dataset
    source = DatasetRef(ref.source)
    entry = DatasetEntry(source)
    if args.command == "ingest":  # its --conf is the source's; split's is the split conf
        entry = DatasetEntry(ref, raw=args.raw, conf=args.conf, item_level=args.item_level)
    model = getattr(args, "model", None)
    conf = RunConf(
        datasets=(entry,),
        models=(model,) if model else (),
        models_conf=getattr(args, "models_conf", None),
        processes=getattr(args, "processes", None),
        reader=getattr(args, "reader", None),
        tracking_uri=getattr(args, "tracking_uri", None),
        split_conf=args.conf if args.command == "split" else None,
    )
    if getattr(args, "correction", None):
        conf = dataclasses.replace(conf, correction=args.correction)
    if ref.protocol:
        return dataclasses.replace(conf, compare=CompareConf(datasets=(source,), protocols=(ref.protocol,)))
    if ref.seed is not None:
        return dataclasses.replace(conf, compare=CompareConf(datasets=(source,), seeds=(ref.seed,)))
    if ref.origin is not None:
        return dataclasses.replace(conf, backtest=BacktestConf(origins=ref.origin, datasets=(source,)))
    return conf


def _stage_call(args: argparse.Namespace) -> StageCall:
    """The flags of a one-stage command that ``intent run`` leaves at their defaults."""

    def given(name: str) -> Any:
        return getattr(args, name, None)

    split_flags = (
        ("seed", "seed"),
        ("holdout_fraction", "holdout_fraction"),
        ("manual_cutoff", "cutoff"),
        ("manual_val_cutoff", "val_cutoff"),
    )
    return StageCall(
        command=args.command,
        split_overrides={key: given(flag) for key, flag in split_flags if given(flag) is not None},
        split_report=args.out if args.command == "split" else None,
        steps=given("steps"),
        splits=tuple(args.split or ()) if args.command == "train" else (),
        parent_run_id=given("parent_run_id"),
        run_id=given("run_id"),
        floor_users=given("floor_users") if args.command == "evaluate" else None,
        bootstrap=given("bootstrap") or 0,
        tracked=not given("no_mlflow"),
    )


def _runner(args: argparse.Namespace) -> Any:
    """The runner ``intent run`` uses, for one command: the one place the split conf, the
    models conf, the floor, the lake and its tracking are derived."""
    from intent_spark.pipeline.runner import Runner

    return Runner(
        _run_conf(args),
        root=args.lake,
        spark_settings=_spark_overrides(args),
        progress=reporter(args.command),
        call=_stage_call(args),
    )


def _lake(args: argparse.Namespace) -> Lake:
    """The lake of a command that is more than one stage's task (verify, audit, export, submit,
    transfer, agreement, report), made as the runner makes a run's: its session, its root, its
    MLflow store (``--tracking-uri``, else the default; off with ``--no-mlflow``), its progress."""
    return Lake(
        _session(args.command, args),
        args.lake,
        getattr(args, "tracking_uri", None),
        reporter(args.command),
        tracked=not getattr(args, "no_mlflow", False),
    )


def _one_stage(args: argparse.Namespace, runner: Any = None) -> int:
    """``intent <stage>``: the stage graph's tasks of that stage for the command's dataset (and
    model), as ``intent run`` declares them (``runner.run_stage``)."""
    from intent_spark.pipeline.runner import run_stage

    runner = runner or _runner(args)
    model = runner.models[0] if getattr(args, "model", None) else None  # a spec's registered name
    run_stage(runner, args.command, args.dataset, model)
    return 0


def cmd_generate(args: argparse.Namespace) -> int:
    from intent_spark.generate import generate_release

    report = reporter("generate")
    release = generate_release(
        args.dataset, Path(args.out), args.events, seed=args.seed, dirty=args.dirty, progress=report
    )
    rows = sum(release.event_rows.values())
    report(f"{args.dataset}: wrote {len(release.files)} file(s), {rows:,} event rows under {release.root}")
    return 0


def cmd_ingest(args: argparse.Namespace) -> int:
    return _one_stage(args)


def cmd_split(args: argparse.Namespace) -> int:
    from intent_spark.lake.files import on_store
    from intent_spark.lake.tables import ingested_source

    if on_store(args.lake) and not args.out:
        raise IntentError(
            f"{args.lake}: a lake on an object store keeps no split report; give --out a local folder or a Volume"
        )
    runner = _runner(args)
    # a dataset stored under another source's conf (cct_mcc from cct) takes that source's split conf
    source = ingested_source(runner.spark, args.lake, args.dataset)
    entry = dataclasses.replace(runner.conf.datasets[0], source=source)
    runner.conf = dataclasses.replace(runner.conf, datasets=(entry,))
    return _one_stage(args, runner)


def cmd_verify(args: argparse.Namespace) -> int:
    from intent_spark.checks.verify import verify_lake

    failed = verify_lake(_lake(args), args.dataset)
    if failed:
        print(f"intent verify: failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


def cmd_audit(args: argparse.Namespace) -> int:
    from intent_spark.checks.audit import said_verdicts, write_audit
    from intent_spark.lake.tables import ingested_source

    if args.floor_users is not None:
        raise IntentError(
            f"--floor-users is the cells' floor; the audit's is `--sequence-users {args.floor_users}` "
            "(users with 3+ events a source needs)"
        )
    lake = _lake(args)
    report = lake.progress
    conf = load_source(args.conf or ingested_source(lake.spark, lake.root, args.dataset))
    path = write_audit(lake, args.dataset, conf, args.sequence_users, args.out)
    rejected = said_verdicts(path, report)
    if rejected:
        print(f"intent audit: {args.dataset} rejected on: {', '.join(rejected)}", file=sys.stderr)
        return 1
    return 0


def cmd_models(args: argparse.Namespace) -> int:
    """Every registered model with its origin, kind and settings (the conf's values where it
    sets them, else the model's defaults)."""
    from intent_spark.train.conf import load_models_conf, model_listing

    print("\n".join(model_listing(load_models_conf(args.models_conf))))
    return 0


def cmd_check_model(args: argparse.Namespace) -> int:
    """A plug-in's life cycle on generated data, no Spark: 0 when every step passes, 1 at the
    first fault (its line, and the plug-in's frames or, with --verbose, its whole traceback)."""
    import os
    import time

    from intent_spark.train.check import CheckFailed, CheckSizes, check_model, failure_lines
    from intent_spark.train.conf import load_models_conf, with_steps

    started = time.monotonic()
    sizes = CheckSizes(items=args.items, new=max(1, args.items // 5), users=args.users, context=args.context)
    try:
        check_model(args.spec, with_steps(load_models_conf(args.models_conf), args.steps), sizes=sizes)
    except CheckFailed as failed:
        print("\n".join(failure_lines(failed, os.environ.get("INTENT_VERBOSE") == "1")), file=sys.stderr)
        print(
            f"intent check-model: {args.spec}: failed after {time.monotonic() - started:.1f}s",
            file=sys.stderr,
        )
        return 1
    print(f"intent check-model: {args.spec}: every step passed in {time.monotonic() - started:.1f}s")
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    return _one_stage(args)


def cmd_score(args: argparse.Namespace) -> int:
    if not args.export:
        return _one_stage(args)
    from intent_spark.exchange.top_items import TopItemsExport, export_top_items

    # not a stage: the model's top items go to a file (maybe on a store), not to ranks; the
    # models conf a run would derive
    export = TopItemsExport(args.export, args.split, args.top_k)
    models_conf = _runner(args).models_conf
    export_top_items(_lake(args), args.dataset, args.model, models_conf, export, run_id=args.run_id)
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from intent_spark.exchange.tasks import export_tasks

    lake = _lake(args)
    done = export_tasks(
        lake,
        args.dataset,
        args.out,
        splits=args.split,
        context=args.context,
    )
    lake.progress(
        f"{args.dataset}: {', '.join(f'{d.split} {d.tasks:,} tasks' for d in done)}; formats in {args.out}/<split>/FORMAT.md"
    )
    return 0


def cmd_submit(args: argparse.Namespace) -> int:
    from intent_spark.exchange.submission_files import check_submission_file
    from intent_spark.exchange.submission_rows import check_name
    from intent_spark.exchange.submissions import submit

    check_name(args.name)
    check_submission_file(args.predictions)  # a bad file is refused before Spark starts
    lake = _lake(args)
    report = lake.progress
    _ = lake.tracking  # an MLflow store that cannot be named: one line before any rank is written
    scored = submit(
        lake,
        args.dataset,
        args.predictions,
        args.name,
        split=args.split,
        strict=args.strict,
    )
    if scored.rejects_file:
        report(
            f"{args.dataset} {args.name}: {scored.rejected:,} rejected rows with reasons in {scored.rejects_file}"
        )
    where = f"; MLflow run {scored.run_id}" if scored.run_id else ""
    report(
        f"{args.dataset} {args.name}: ranks written{where}; run `intent evaluate --dataset {args.dataset}`"
    )
    return 0


def cmd_transfer(args: argparse.Namespace) -> int:
    from intent_spark.train.conf import load_models_conf
    from intent_spark.train.transfer import score_transfer

    conf = load_models_conf(args.models_conf)
    lake = _lake(args)
    rows = score_transfer(lake, args.source, args.target, conf, model=args.model)
    lake.progress(
        f"{args.target} {args.model}@{args.source}: {rows:,} ranks; run `intent evaluate --dataset {args.target}`"
    )
    return 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    if args.replicates is not None:
        raise IntentError(
            f"--replicates moved: `intent agreement --dataset {args.dataset.source} "
            f"--replicates {args.replicates}` orders a dataset's protocols"
        )
    if args.conf:
        raise IntentError(
            f"--conf {args.conf}: evaluate flags cells at the floor {args.dataset}'s split recorded; "
            "give --floor-users N to override it"
        )
    _one_stage(args)
    ref = args.dataset
    if ref.protocol:
        reporter("evaluate")(
            f"{ref.source}: order its protocols' models against its cells: `intent agreement --dataset {ref.source}`"
        )
    return 0


def cmd_agreement(args: argparse.Namespace) -> int:
    """The agreement stage for one dataset: its evaluated protocol variants' model orders
    against its INTENT cells'."""
    from intent_spark.evaluate.agreement import evaluated_protocols, write_agreement

    lake = _lake(args)
    protocols = args.protocol or evaluated_protocols(lake, args.dataset)
    path = write_agreement(lake, args.dataset, protocols, replicates=args.replicates)
    if path is None:
        raise IntentError(
            f"{args.dataset}: no evaluated protocol variant with a cell to order against; "
            f"split, score and evaluate {args.dataset}.leave_last_out (or .horizon) first"
        )
    lake.progress(f"{args.dataset}: model-order agreement of {', '.join(protocols)} in {path}")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from intent_spark.lake.files import on_store
    from intent_spark.lake.tracking import log_report
    from intent_spark.report.build import build_report

    if on_store(args.out):
        raise IntentError(
            f"{args.out}: the report is built aside and moved into place by a rename, which an object "
            "store has not; give --out a local folder or a Volume"
        )
    lake = _lake(args)
    page = build_report(
        lake, Path(args.out), args.dataset or None, correction=args.correction, floor_users=args.floor_users
    )
    lake.progress(f"report: {page.resolve()}")
    if lake.tracking:
        run_id = log_report(lake.tracking, args.out, args.run_id)
        lake.progress(f"report logged to MLflow run {run_id} in {lake.tracking}")
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from intent_spark.lake.tracking import compare_runs, default_tracking_uri
    from intent_spark.report.comparison_tables import comparison_tables

    uri = default_tracking_uri(args.lake, args.tracking_uri) if args.lake else args.tracking_uri
    if not uri:
        raise IntentError("give --lake (its MLflow store) or --tracking-uri")
    table = compare_runs(uri, args.run_id or [], args.dataset, args.metrics)
    if table.empty:
        raise IntentError(f"no metric matches {args.metrics!r} in the chosen runs (run `intent evaluate`)")
    if args.csv:
        table.to_csv(sys.stdout, float_format="%.6g")
    else:
        print(comparison_tables(table))
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    """Every stage of the graph for the datasets and models of a run conf (``--plan``: say which
    would run, and why, without running anything)."""
    from intent_spark.core.runconf import load_run_conf
    from intent_spark.pipeline.runner import Runner, run_pipeline

    conf = load_run_conf(args.conf)
    report = reporter("run")
    if getattr(args, "reader", None):
        conf = dataclasses.replace(conf, reader=args.reader)
    runner = Runner(
        conf, root=args.lake, force=args.force, spark_settings=_spark_overrides(args), progress=report
    )
    if args.plan:
        lines = runner.plan(runner.tasks())
        print(
            f"intent run --plan: {conf.path} on {runner.root}: {sum(line.startswith('run') for line in lines)} of {len(lines)} stages would run"
        )
        print("\n".join(lines))
        return 0
    from intent_spark.lake.files import remove_staging
    from intent_spark.lake.locks import dataset_lock

    with dataset_lock(runner.root, conf.names, getattr(args, "command_line", "intent run"), report):
        remove_staging(runner.root, {name.source for name in conf.names}, report)
        return run_pipeline(runner)
