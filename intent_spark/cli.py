"""The ``intent`` command line (SPEC section 8): argument parsing only. What each command does is
``pipeline/commands.py``; ``jobs/*.py`` call the same ``main``."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from intent_spark.core.conf import READERS
from intent_spark.core.datasets import PROTOCOLS, parse_dataset
from intent_spark.core.errors import ConfError, IntentError
from intent_spark.core.runconf import SEQUENCE_FLOOR
from intent_spark.evaluate.corrections import CORRECTIONS, DEFAULT_CORRECTION
from intent_spark.pipeline import commands
from intent_spark.train.plugin_errors import print_plugin_frames


def _add_spark_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--spark-profile",
        help="conf/spark/NAME.yaml or a path (default: $INTENT_SPARK_PROFILE, else the built-in local settings)",
    )
    parser.add_argument("--spark-conf", action="append", metavar="KEY=VALUE", help="any Spark setting")


READER_HELP = "the model inputs' reader: arrow (ours), petastorm, or auto, Petastorm where it runs (default: the models conf's)"
TRACKING_HELP = "MLflow store (default: MLFLOW_TRACKING_URI or LAKE/../mlflow.db)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="intent", description="The INTENT benchmark on event logs, in PySpark."
    )
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="show Spark's own output (by default it goes to a log file) and a plug-in's whole traceback",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for add in (
        _add_generate,
        _add_ingest,
        _add_check_model,
        _add_train_and_score,
        _add_transfer,
        _add_export,
        _add_submit,
        _add_evaluate,
        _add_agreement,
        _add_run,
        _add_split,
        _add_verify,
        _add_audit,
        _add_report,
        _add_models,
        _add_compare,
    ):  # in the order `intent --help` lists them
        add(sub)
    return parser


def _add_generate(sub: argparse._SubParsersAction) -> None:
    gen = sub.add_parser("generate", help="write synthetic raw release files of a source")
    gen.add_argument("--dataset", required=True)
    gen.add_argument("--events", type=int, required=True)
    gen.add_argument("--out", required=True, help="folder for the raw files")
    gen.add_argument("--seed", type=int, default=0)
    gen.add_argument("--dirty", action="store_true", help="inject bad rows (for testing ingest)")
    gen.set_defaults(func=commands.cmd_generate)


def _add_ingest(sub: argparse._SubParsersAction) -> None:
    ing = sub.add_parser("ingest", help="raw release files -> events, items, users, rejects")
    ing.add_argument("--dataset", required=True, help="built-in source name, or the name to store under")
    ing.add_argument("--raw", required=True, help="folder with the release files (path or URI)")
    ing.add_argument("--lake", required=True, help="lake folder (path or URI)")
    ing.add_argument("--conf", help="source conf YAML (for a source that is not built in)")
    ing.add_argument(
        "--item-level",
        help="ingest items at this level of the conf's item_levels (cct: merchant or mcc); default its fine level",
    )
    _add_spark_flags(ing)
    ing.set_defaults(func=commands.cmd_ingest)


def _add_check_model(sub: argparse._SubParsersAction) -> None:
    chk = sub.add_parser(
        "check-model",
        help="a model's whole life cycle in seconds, no Spark, no lake: build, fit, save, load, "
        "scores or vectors through the framework's checks, ranks; exit 1 at the first fault",
        description="Build, fit, save, load and rank a model on a small generated catalogue and "
        "in-memory training rows, printing what each step got and gave (shapes, dtypes, devices). "
        "Scoring contexts hold items never seen in training, as real ones do. A fault is one line, "
        "with the plug-in's own frames (--verbose before the command: its whole traceback).",
    )
    chk.add_argument("spec", help="a registered model name or a module:Class spec")
    chk.add_argument("--models-conf", help="model settings (default conf/models.yaml)")
    chk.add_argument(
        "--steps", type=int, default=20, help="training steps of a model that has them (default 20)"
    )
    chk.add_argument(
        "--items", type=int, default=60, help="catalogue items, a fifth of them new (default 60)"
    )
    chk.add_argument("--users", type=int, default=40, help="users (default 40)")
    chk.add_argument("--context", type=int, default=8, help="context length (default 8)")
    chk.set_defaults(func=commands.cmd_check_model)


def _add_train_and_score(sub: argparse._SubParsersAction) -> None:
    for name, func, what in (
        ("train", commands.cmd_train, "fit a model on both splits' training events; log it to MLflow"),
        (
            "score",
            commands.cmd_score,
            "rank the full catalogue for every target with a trained model -> ranks",
        ),
    ):
        stage = sub.add_parser(name, help=what)
        stage.add_argument("--dataset", required=True)
        stage.add_argument(
            "--model",
            required=True,
            help="a registered model (`intent models` lists them) or a module:Class spec",
        )
        stage.add_argument("--lake", required=True)
        stage.add_argument("--models-conf", help="model settings (default conf/models.yaml)")
        stage.add_argument(
            "--steps", type=int, help="override the training steps of every model that has them"
        )
        stage.add_argument(
            "--processes",
            type=int,
            help="processes to spread the work over with TorchDistributor (default: the models conf's, 1)",
        )
        stage.add_argument("--reader", choices=READERS, help=READER_HELP)
        stage.add_argument("--tracking-uri", help=TRACKING_HELP)
        if name == "train":
            stage.add_argument("--parent-run-id", help="nest the run under this MLflow run (a benchmark)")
            stage.add_argument(
                "--split", action="append", choices=("test", "val"), help="only this split (default: both)"
            )
        if name == "score":
            stage.add_argument(
                "--run-id", help="the MLflow training run (default: the newest for dataset and model)"
            )
            stage.add_argument(
                "--export",
                metavar="FILE",
                help="write the model's top items per target in the submission format (.parquet or .jsonl) instead of ranks",
            )
            stage.add_argument(
                "--top-k", type=int, default=100, help="items per target with --export (default 100)"
            )
            stage.add_argument(
                "--split", choices=("test", "val"), default="test", help="the split --export lists"
            )
        _add_spark_flags(stage)
        stage.set_defaults(func=func)


def _add_transfer(sub: argparse._SubParsersAction) -> None:
    tr = sub.add_parser(
        "transfer", help="rank another source's test targets with a content model (model@source ranks)"
    )
    tr.add_argument("--source", required=True, help="the dataset the model was trained on (its newest run)")
    tr.add_argument("--target", required=True, help="the dataset whose cells it is scored on (split first)")
    tr.add_argument("--lake", required=True)
    tr.add_argument("--model", default="sasrec_f", help="a content model (default sasrec_f)")
    tr.add_argument("--models-conf", help="model settings (default conf/models.yaml)")
    tr.add_argument("--tracking-uri", help=TRACKING_HELP)
    _add_spark_flags(tr)
    tr.set_defaults(func=commands.cmd_transfer)


def _add_export(sub: argparse._SubParsersAction) -> None:
    exp = sub.add_parser(
        "export",
        help="a split's tasks, catalogue and training events as files, for models outside this process",
    )
    exp.add_argument("--dataset", required=True)
    exp.add_argument("--lake", required=True)
    exp.add_argument(
        "--out",
        required=True,
        help="folder for <split>/tasks.parquet, catalogue.parquet, train.parquet, FORMAT.md",
    )
    exp.add_argument(
        "--split", action="append", choices=("test", "val"), help="only this split (default: every split)"
    )
    exp.add_argument(
        "--context", type=int, default=200, help="earlier events kept per task, the last N (default 200)"
    )
    _add_spark_flags(exp)
    exp.set_defaults(func=commands.cmd_export)


def _add_submit(sub: argparse._SubParsersAction) -> None:
    sm = sub.add_parser(
        "submit",
        help="score a file of ranked lists (one per target) as model NAME -> ranks",
        description="Check every row of a file of ranked lists and score it as model NAME. A file that "
        "is empty, compressed, cut short, not what its name says or without rows is refused in one "
        "line with nothing written; a faulty row is rejected with its reason (rejects file) and its "
        "target scored as a miss. The cost grows with the list items (rows x list length): lists of "
        "100 give every K the report shows. The rules: FORMAT.md of `intent export`.",
    )
    sm.add_argument("--dataset", required=True)
    sm.add_argument("--lake", required=True)
    sm.add_argument(
        "--predictions",
        required=True,
        metavar="FILE",
        help="Parquet (.parquet) or JSON Lines (.jsonl), uncompressed: target_id, items[, scores]",
    )
    sm.add_argument("--name", required=True, help="the model name its ranks, metrics and MLflow run get")
    sm.add_argument(
        "--split", choices=("test", "val"), default="test", help="the split it answers (default test)"
    )
    sm.add_argument(
        "--strict",
        action="store_true",
        help="refuse the submission on any rejected row or missing target, naming every kind of fault: "
        "no ranks, no submissions row, no MLflow run; the rejects file is still written",
    )
    sm.add_argument("--tracking-uri", help=TRACKING_HELP)
    sm.add_argument("--no-mlflow", action="store_true", help="write the tables only")
    _add_spark_flags(sm)
    sm.set_defaults(func=commands.cmd_submit)


def _add_evaluate(sub: argparse._SubParsersAction) -> None:
    ev = sub.add_parser("evaluate", help="ranks -> user_metrics and metrics (95%% intervals), MLflow metrics")
    ev.add_argument("--dataset", required=True)
    ev.add_argument("--lake", required=True)
    ev.add_argument("--conf", help=argparse.SUPPRESS)  # the floor comes from the lake's split now
    ev.add_argument(
        "--floor-users",
        type=int,
        help="flag cells with fewer users at this floor, an override of the one the split recorded (default)",
    )
    ev.add_argument("--tracking-uri", help=TRACKING_HELP)
    ev.add_argument("--no-mlflow", action="store_true", help="write the tables only")
    ev.add_argument(
        "--bootstrap", type=int, default=0, metavar="R", help="user-level bootstrap intervals, R replicates"
    )
    ev.add_argument(
        "--correction",
        choices=CORRECTIONS,
        default=DEFAULT_CORRECTION,
        help="multiple-comparison correction of the paired p-values (default holm)",
    )
    ev.add_argument("--replicates", type=int, help=argparse.SUPPRESS)  # moved to `intent agreement`
    _add_spark_flags(ev)
    ev.set_defaults(func=commands.cmd_evaluate)


def _add_agreement(sub: argparse._SubParsersAction) -> None:
    ag = sub.add_parser(
        "agreement", help="protocol variants' model order against the INTENT cells' (Kendall tau-b)"
    )
    ag.add_argument("--dataset", required=True, help="the source dataset, e.g. amazon_hk")
    ag.add_argument("--lake", required=True)
    ag.add_argument(
        "--protocol",
        action="append",
        choices=PROTOCOLS,
        help="a protocol to order (repeatable; default: every one whose variant is evaluated)",
    )
    ag.add_argument(
        "--replicates", type=int, default=200, help="paired user-bootstrap replicates (default 200)"
    )
    _add_spark_flags(ag)
    ag.set_defaults(func=commands.cmd_agreement)


def _add_run(sub: argparse._SubParsersAction) -> None:
    run = sub.add_parser("run", help="the whole chain for the datasets in a run conf")
    run.add_argument("--conf", required=True)
    run.add_argument("--lake")
    run.add_argument(
        "--force", action="store_true", help="rerun every stage, even those whose inputs are unchanged"
    )
    run.add_argument("--plan", action="store_true", help="say which stages would run and why; run nothing")
    run.add_argument("--reader", choices=READERS, help=READER_HELP)
    _add_spark_flags(run)
    run.set_defaults(func=commands.cmd_run)


def _add_split(sub: argparse._SubParsersAction) -> None:
    split = sub.add_parser("split", help="events -> holdout, splits, targets (+ split report)")
    split.add_argument("--dataset", required=True)
    split.add_argument("--lake", required=True)
    split.add_argument("--conf", help="split conf (default conf/split.yaml)")
    split.add_argument("--seed", type=int)
    split.add_argument("--holdout-fraction", type=float)
    split.add_argument("--cutoff", help="fix the test cutoff by hand (YYYY-MM-DD); reported as manual")
    split.add_argument("--val-cutoff", help="fix the validation cutoff by hand (YYYY-MM-DD)")
    split.add_argument("--out", help="folder for the split report (default LAKE/reports/split)")
    _add_spark_flags(split)
    split.set_defaults(func=commands.cmd_split)


def _add_verify(sub: argparse._SubParsersAction) -> None:
    verify = sub.add_parser("verify", help="leakage checks and checksums; exit 1 on any failure")
    verify.add_argument("--lake", required=True)
    verify.add_argument("--dataset", help="one dataset (default: every split dataset in the lake)")
    _add_spark_flags(verify)
    verify.set_defaults(func=commands.cmd_verify)


def _add_audit(sub: argparse._SubParsersAction) -> None:
    audit = sub.add_parser(
        "audit", help="the paper's five admission criteria on an ingested dataset; exit 1 on a rejection"
    )
    audit.add_argument("--dataset", required=True)
    audit.add_argument("--lake", required=True)
    audit.add_argument("--conf", help="source conf YAML (default: the built-in conf of the dataset)")
    audit.add_argument(
        "--sequence-users",
        type=int,
        default=SEQUENCE_FLOOR,
        help=f"users with 3+ events a source needs (default the paper's {SEQUENCE_FLOOR:,})",
    )
    audit.add_argument("--floor-users", type=int, help=argparse.SUPPRESS)  # renamed --sequence-users
    audit.add_argument("--out", help="folder for the audit CSV and figure (default LAKE/reports/audit)")
    _add_spark_flags(audit)
    audit.set_defaults(func=commands.cmd_audit)


def _add_report(sub: argparse._SubParsersAction) -> None:
    rep = sub.add_parser("report", help="metrics -> HTML, Markdown and CSV report with figures")
    rep.add_argument("--lake", required=True)
    rep.add_argument("--out", required=True, help="folder for report.html, report.md, tables/, figures/")
    rep.add_argument(
        "--dataset", action="append", help="only this dataset (repeatable; default: all evaluated)"
    )
    rep.add_argument("--tracking-uri", help=TRACKING_HELP)
    rep.add_argument(
        "--correction",
        choices=CORRECTIONS,
        default=DEFAULT_CORRECTION,
        help="multiple-comparison correction over every paired comparison the report shows "
        "(default holm; bh: Benjamini-Hochberg)",
    )
    rep.add_argument(
        "--floor-users",
        type=int,
        help="show cells ranked at this floor, an override (said in the report's first line) of the one "
        "the lake records (default)",
    )
    rep.add_argument("--run-id", help="log the report to this run (default: a new report run)")
    rep.add_argument("--no-mlflow", action="store_true", help="write the files only")
    _add_spark_flags(rep)
    rep.set_defaults(func=commands.cmd_report)


def _add_models(sub: argparse._SubParsersAction) -> None:
    listed = sub.add_parser(
        "models", help="every registered model: where it comes from, its kind and conf defaults"
    )
    listed.add_argument(
        "--models-conf", help="show the values of this models conf (default conf/models.yaml)"
    )
    listed.set_defaults(func=commands.cmd_models)


def _add_compare(sub: argparse._SubParsersAction) -> None:
    cmp = sub.add_parser("compare", help="print MLflow metrics of chosen runs, one table per dataset")
    cmp.add_argument("--lake", help="the lake whose default MLflow store to read")
    cmp.add_argument("--tracking-uri", help="MLflow store (instead of the lake's)")
    cmp.add_argument("--run-id", action="append", help="a run to show (repeatable)")
    cmp.add_argument("--dataset", help="the newest training run of every model of this dataset")
    cmp.add_argument(
        "--metrics",
        default=r"^test\..*\.ndcg_10$",
        help="a regular expression matching whole dot-separated parts of the metric names "
        "(split.cell.metric_k): ndcg_10 is every ndcg_10 and never ndcg_100, ndcg_.* every K "
        "(default: ^test\\..*\\.ndcg_10$ , ndcg_10 of each test cell; ^test\\. for every test "
        "metric, in tables wrapped to 160 characters)",
    )
    cmp.add_argument(
        "--csv", action="store_true", help="one CSV (a row per run: dataset, model, run_id, metrics)"
    )
    cmp.set_defaults(func=commands.cmd_compare)


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(words)
    args.command_line = " ".join(["intent", *words])[:300]  # what a lock names this writer by
    if args.verbose:
        os.environ["INTENT_VERBOSE"] = "1"
    session = sys.modules.get("intent_spark.lake.session")
    if session is not None:
        session.LAUNCHED.clear()  # a session started before this command is not its own
    try:
        _parse_dataset_names(args)
        writes = commands.written_datasets(args)
        if not writes:
            return int(args.func(args))
        from intent_spark.lake.locks import dataset_lock

        with dataset_lock(args.lake, writes, args.command_line):
            return int(args.func(args))
    except (IntentError, ConfError, ValueError) as exc:
        print(f"intent {args.command}: error: {exc}{_spark_log_hint()}", file=sys.stderr)
        print_plugin_frames(exc)
        return 2
    except OSError as exc:  # an object store that refused or did not answer, before any write
        from intent_spark.lake.files import store_error

        line = store_error(exc)
        if line is None:
            raise
        print(f"intent {args.command}: error: {line}", file=sys.stderr)
        return 2


def _parse_dataset_names(args: argparse.Namespace) -> None:
    """Every dataset a command names, parsed once here: the commands pass ``DatasetRef``s on."""
    for option in ("dataset", "source", "target"):
        value = getattr(args, option, None)
        if isinstance(value, str):
            setattr(args, option, parse_dataset(value))
        elif isinstance(value, list):
            setattr(args, option, [parse_dataset(v) for v in value])


def _spark_log_hint() -> str:
    """Where Spark's own log went, when this command started Spark with its output kept quiet."""
    session = sys.modules.get("intent_spark.lake.session")
    launched = getattr(session, "LAUNCHED", [])
    if not launched or not launched[-1].exists() or not launched[-1].stat().st_size:
        return ""
    return f" (Spark's log: {launched[-1]})"


if __name__ == "__main__":
    raise SystemExit(main())
