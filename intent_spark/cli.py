"""The ``intent`` command line (SPEC section 8). ``jobs/*.py`` call the same ``main``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from intent_spark.config import CONF_DIR, ConfError, at_item_level, load_source, load_yaml
from intent_spark.errors import IntentError
from intent_spark.progress import reporter


def _spark_overrides(args: argparse.Namespace) -> dict[str, str]:
    """Spark settings from a profile file, then ``--spark-conf key=value`` flags."""
    settings: dict[str, str] = {}
    if getattr(args, "spark_profile", None):
        profile = Path(args.spark_profile)
        if not profile.suffix:
            profile = CONF_DIR / "spark" / f"{args.spark_profile}.yaml"
        for key, value in load_yaml(profile).items():  # YAML booleans become Spark's "true"/"false"
            settings[key] = str(value).lower() if isinstance(value, bool) else str(value)
    for pair in getattr(args, "spark_conf", None) or []:
        if "=" not in pair:
            raise IntentError(f"--spark-conf {pair!r}: expected key=value")
        key, value = pair.split("=", 1)
        settings[key] = value
    return settings


def _add_spark_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--spark-profile", help="conf/spark/NAME.yaml or a path (default: local)")
    parser.add_argument("--spark-conf", action="append", metavar="KEY=VALUE", help="any Spark setting")


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
    conf = at_item_level(load_source(args.conf or args.dataset), args.item_level)
    from intent_spark.ingest import ingest_source
    from intent_spark.session import build_session

    report = reporter("ingest")
    spark = build_session("intent-ingest", _spark_overrides(args))
    summary = ingest_source(spark, conf, args.raw, args.lake, dataset=args.dataset, progress=report)
    report(
        f"{summary.dataset}: {summary.raw_rows:,} raw rows in {summary.files} file(s) -> "
        f"{summary.events:,} events, {summary.rejects:,} rejects; {summary.items:,} items "
        f"({conf.level}), {summary.users:,} users"
    )
    if summary.rejects:
        report(f"{summary.dataset}: rejected rows with reasons are in {args.lake}/rejects")
    return 0


def cmd_split(args: argparse.Namespace) -> int:
    from intent_spark.session import build_session
    from intent_spark.split_report import write_split_report
    from intent_spark.splitting import load_split_conf, run_split

    overrides = {
        key: value
        for key, value in (
            ("seed", args.seed),
            ("holdout_fraction", args.holdout_fraction),
            ("manual_cutoff", args.cutoff),
            ("manual_val_cutoff", args.val_cutoff),
        )
        if value is not None
    }
    from intent_spark.compare import SEED_PREFIX, seed_of
    from intent_spark.io import ingested_source, source_dataset, variant_name
    from intent_spark.protocols import protocol_of, run_protocol_split

    variant = variant_name(args.dataset) or ""
    if variant.startswith(SEED_PREFIX) and args.seed is None:  # amazon_hk.seed1 is seed 1
        overrides["seed"] = seed_of(args.dataset)
    report = reporter("split")
    spark = build_session("intent-split", _spark_overrides(args))
    conf = load_split_conf(
        args.conf or CONF_DIR / "split.yaml",
        source_dataset(args.dataset),
        overrides,
        source=ingested_source(spark, args.lake, args.dataset),
    )
    if protocol_of(args.dataset):
        run_protocol_split(spark, args.lake, args.dataset, conf.max_targets_per_period, progress=report)
        report(f"{args.dataset}: protocol split written (test split only; `intent verify` reports its leak)")
        return 0
    run_split(spark, args.lake, args.dataset, conf, progress=report)
    out = write_split_report(spark, args.lake, args.dataset, Path(args.out) if args.out else None)
    report(f"{args.dataset}: split report in {out}")
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    from intent_spark.session import build_session
    from intent_spark.verify import lake_datasets, verify_dataset

    report = reporter("verify")
    spark = build_session("intent-verify", _spark_overrides(args))
    datasets = [args.dataset] if args.dataset else lake_datasets(spark, args.lake)
    failed = []
    for dataset in datasets:
        for result in verify_dataset(spark, args.lake, dataset):
            status = "ok  " if result.ok else "FAIL"
            line = f"{status} {dataset} {result.split} {result.name}"
            if not result.ok:
                line += f": {result.violations} violation(s), {result.detail}"
                failed.append(f"{dataset}/{result.split}/{result.name}")
            report(line)
    if failed:
        print(f"intent verify: failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    report(f"all checks passed for {', '.join(datasets)}")
    return 0


def cmd_audit(args: argparse.Namespace) -> int:
    from intent_spark.audit import REJECT, read_audit, write_audit
    from intent_spark.io import ingested_source
    from intent_spark.session import build_session

    report = reporter("audit")
    spark = build_session("intent-audit", _spark_overrides(args))
    conf = load_source(args.conf or ingested_source(spark, args.lake, args.dataset))
    path = write_audit(spark, args.lake, args.dataset, conf, args.floor_users, args.out)
    table = read_audit(path)
    for row in table.itertuples():
        report(f"{row.verdict} {row.criterion}" + (f": {row.reason}" if row.reason else f" ({row.measured})"))
    report(f"{args.dataset}: audit table and figure in {path.parent}")
    rejected = table.loc[table["verdict"] == REJECT, "criterion"].tolist()
    if rejected:
        print(f"intent audit: {args.dataset} rejected on: {', '.join(rejected)}", file=sys.stderr)
        return 1
    return 0


def _models_conf(args: argparse.Namespace):
    from intent_spark.modeling import check_model, load_models_conf, with_steps

    check_model(args.model)
    return with_steps(load_models_conf(args.models_conf), args.steps)


def cmd_train(args: argparse.Namespace) -> int:
    from intent_spark.modeling import train
    from intent_spark.session import build_session
    from intent_spark.tracking import default_tracking_uri

    conf = _models_conf(args)
    uri = default_tracking_uri(args.lake, args.tracking_uri)
    report = reporter("train")
    spark = build_session("intent-train", _spark_overrides(args))
    run_id = train(
        spark,
        args.lake,
        args.dataset,
        args.model,
        conf,
        tracking_uri=uri,
        parent_run_id=args.parent_run_id,
        splits=args.split or ("test", "val"),
        progress=report,
    )
    report(f"{args.dataset} {args.model}: logged to MLflow run {run_id} in {uri}")
    return 0


def cmd_score(args: argparse.Namespace) -> int:
    from intent_spark.modeling import score
    from intent_spark.session import build_session
    from intent_spark.tracking import default_tracking_uri

    conf = _models_conf(args)
    uri = default_tracking_uri(args.lake, args.tracking_uri)
    report = reporter("score")
    spark = build_session("intent-score", _spark_overrides(args))
    rows = score(
        spark,
        args.lake,
        args.dataset,
        args.model,
        conf,
        tracking_uri=uri,
        run_id=args.run_id,
        progress=report,
    )
    report(f"{args.dataset} {args.model}: {rows:,} ranks in {args.lake}/ranks")
    return 0


def cmd_transfer(args: argparse.Namespace) -> int:
    from intent_spark.modeling import load_models_conf, score_transfer
    from intent_spark.session import build_session
    from intent_spark.tracking import default_tracking_uri

    conf = load_models_conf(args.models_conf)
    uri = default_tracking_uri(args.lake, args.tracking_uri)
    report = reporter("transfer")
    spark = build_session("intent-transfer", _spark_overrides(args))
    rows = score_transfer(
        spark, args.lake, args.source, args.target, conf, tracking_uri=uri, model=args.model, progress=report
    )
    report(
        f"{args.target} {args.model}@{args.source}: {rows:,} ranks; run `intent evaluate --dataset {args.target}`"
    )
    return 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    from intent_spark.metrics import evaluate
    from intent_spark.session import build_session
    from intent_spark.splitting import load_split_conf
    from intent_spark.tracking import default_tracking_uri

    floor = load_split_conf(args.conf or CONF_DIR / "split.yaml", args.dataset).floor_users
    uri = None if args.no_mlflow else default_tracking_uri(args.lake, args.tracking_uri)
    report = reporter("evaluate")
    spark = build_session("intent-evaluate", _spark_overrides(args))
    rows = evaluate(
        spark,
        args.lake,
        args.dataset,
        floor_users=floor,
        bootstrap=args.bootstrap,
        tracking_uri=uri,
        progress=report,
    )
    report(
        f"{args.dataset}: {rows:,} metric rows in {args.lake}/metrics, per-user scores in {args.lake}/user_metrics"
    )
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from intent_spark.report import build_report
    from intent_spark.session import build_session
    from intent_spark.tracking import default_tracking_uri, log_report

    report = reporter("report")
    spark = build_session("intent-report", _spark_overrides(args))
    datasets = args.dataset or None
    page = build_report(spark, args.lake, Path(args.out), datasets, progress=report)
    report(f"report: {page.resolve()}")
    if not args.no_mlflow:
        uri = default_tracking_uri(args.lake, args.tracking_uri)
        run_id = log_report(uri, args.out, args.run_id)
        report(f"report logged to MLflow run {run_id} in {uri}")
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from intent_spark.tracking import compare_runs, default_tracking_uri

    uri = default_tracking_uri(args.lake, args.tracking_uri) if args.lake else args.tracking_uri
    if not uri:
        raise IntentError("give --lake (its MLflow store) or --tracking-uri")
    table = compare_runs(uri, args.run_id or [], args.dataset, args.metrics)
    if table.empty:
        raise IntentError(f"no metric matches {args.metrics!r} in the chosen runs (run `intent evaluate`)")
    if args.csv:
        table.to_csv(sys.stdout, float_format="%.6g")
    else:
        print(table.to_string(float_format=lambda v: f"{v:.4f}", na_rep="-"))
    return 0


def _audit_floor(section: object) -> int | None:
    """The users-with-3+-events floor of a run conf's ``audit:`` part; None when it has none."""
    from intent_spark.audit import SEQUENCE_FLOOR

    if section is None:
        return None
    if not isinstance(section, dict) or set(section) - {"floor_users"}:
        raise ConfError(f"audit: expected {{floor_users: N}} or {{}}, got {section!r}")
    return int(section.get("floor_users", SEQUENCE_FLOOR))


def cmd_run(args: argparse.Namespace) -> int:
    """Generate (synthetic sources), ingest, split, verify, train, score, evaluate and report every
    dataset of a run conf, and the comparisons of its ``compare:`` part; the model runs nest
    under one MLflow benchmark run. A stage whose inputs are unchanged since it last finished is
    skipped, so a rerun resumes after a failure."""
    from dataclasses import replace

    from intent_spark import schema as S
    from intent_spark.audit import audit_verdict, write_audit
    from intent_spark.compare import load_compare_conf, seed_of, write_leaks, write_sensitivity
    from intent_spark.generate import generate_release
    from intent_spark.ingest import ingest_source
    from intent_spark.io import source_dataset
    from intent_spark.metrics import evaluate
    from intent_spark.modeling import NEURAL, check_model, load_models_conf, score, score_transfer, train
    from intent_spark.protocols import run_protocol_split
    from intent_spark.report import build_report
    from intent_spark.session import build_session
    from intent_spark.split_report import write_split_report
    from intent_spark.splitting import load_split_conf, run_split
    from intent_spark.stages import StageFailed, StageLog, fingerprint, raw_listing
    from intent_spark.tracking import default_tracking_uri, end_benchmark, log_report, start_benchmark
    from intent_spark.verify import verify_dataset

    run = load_yaml(Path(args.conf))
    models = list(run.get("models", []))
    for model in models:
        check_model(model)  # before hours of ingest, not after
    models_conf = load_models_conf(run.get("models_conf"), run.get("model_overrides"))
    names = [entry["name"] for entry in run.get("datasets", [])]
    compare = load_compare_conf(run.get("compare"), names, models)
    base = Path(run.get("workdir", "demo"))
    lake = str(args.lake or run.get("lake", base / "lake"))
    split_conf_path = run.get("split_conf", CONF_DIR / "split.yaml")
    seed = int(run.get("seed", 0))
    audit_floor = _audit_floor(run.get("audit"))
    report = reporter("run")
    spark = build_session("intent-run", _spark_overrides(args))
    logs: dict[str, StageLog] = {}
    sources = {entry["name"]: entry.get("source", entry["name"]) for entry in run.get("datasets", [])}

    def split_conf_of(name: str, overrides: dict | None = None):
        """A dataset's (or variant's) split conf; per-dataset entries fall back to its source's."""
        dataset = source_dataset(name)
        return load_split_conf(split_conf_path, dataset, overrides, source=sources.get(dataset))

    inputs: dict[str, str] = {}  # dataset -> fingerprint of its split, the models' common input
    trained: dict[str, dict[str, str]] = {}  # dataset -> model -> fingerprint of its training

    def data_stages(entry: dict) -> None:
        name = entry["name"]
        log = logs[name] = StageLog(lake, name, args.force, report)
        source = entry.get("source", name)
        raw = entry.get("raw")
        if raw is None:
            raw_dir = base / "raw" / name
            events = int(entry.get("events", 20_000))
            made = fingerprint("generate", source, events, seed)
            if not raw_listing(str(raw_dir)):
                log.done.pop("generate", None)  # the files went: make them again
            log.run(
                "generate",
                made,
                lambda: generate_release(source, raw_dir, events, seed=seed, progress=report),
            )
            raw = str(raw_dir)
        conf = at_item_level(load_source(entry.get("conf", source)), entry.get("item_level"))
        if "per_signal" in entry:  # KuaiRand's all-signals mode beside its default
            action = replace(conf.events.action, per_signal=bool(entry["per_signal"]))
            conf = replace(conf, events=replace(conf.events, action=action))

        def ingest() -> None:
            summary = ingest_source(spark, conf, str(raw), lake, dataset=name, progress=report)
            report(f"{name}: {summary.events:,} events, {summary.rejects:,} rejects, {summary.items:,} items")

        ingested = fingerprint("ingest", raw_listing(str(raw)), repr(conf))
        log.run("ingest", ingested, ingest)
        if audit_floor is not None:
            log.run(
                "audit",
                fingerprint("audit", ingested, audit_floor),
                lambda: report(f"{name}: {audit_verdict(write_audit(spark, lake, name, conf, audit_floor))}"),
            )
        split_conf = split_conf_of(name)
        inputs[name] = fingerprint("split", ingested, repr(split_conf))

        def split() -> None:
            run_split(spark, lake, name, split_conf, progress=report)
            write_split_report(spark, lake, name)

        log.run("split", inputs[name], split)
        verify_stage(name)

    def verify_stage(name: str) -> None:
        def verify() -> None:
            failed = [f"{r.split}/{r.name}" for r in verify_dataset(spark, lake, name) if not r.ok]
            if failed:
                raise IntentError(f"checks failed: {', '.join(failed)}")
            report(f"{name}: every leakage check and checksum passed")

        logs[name].run("verify", inputs[name], verify)

    def variant_stages(name: str) -> None:
        """Protocol and seed variants of a dataset, its cutoff sensitivity and leak counts."""
        split_conf = split_conf_of(name)
        logs[name].run("sensitivity", inputs[name], lambda: write_sensitivity(spark, lake, name, split_conf))
        logs[name].run("leaks", inputs[name], lambda: write_leaks(spark, lake, name))
        for variant in compare.protocol_variants(name):
            log = logs[variant] = StageLog(lake, variant, args.force, report)
            inputs[variant] = fingerprint(
                "protocol", inputs[name], variant, split_conf.max_targets_per_period
            )
            log.run(
                "split",
                inputs[variant],
                lambda variant=variant: run_protocol_split(
                    spark, lake, variant, split_conf.max_targets_per_period, progress=report
                ),
            )
            log.run("leaks", inputs[variant], lambda variant=variant: write_leaks(spark, lake, variant))
        for variant in compare.seed_variants(name):
            logs[variant] = StageLog(lake, variant, args.force, report)
            seeded = split_conf_of(name, {"seed": seed_of(variant)})
            inputs[variant] = fingerprint("seed", inputs[name], repr(seeded))
            logs[variant].run(
                "split",
                inputs[variant],
                lambda variant=variant, seeded=seeded: run_split(
                    spark, lake, variant, seeded, progress=report
                ),
            )
            verify_stage(variant)

    def model_stages(name: str, parent: str, splits: tuple[str, ...]) -> None:
        log = logs[name]
        trained[name] = {}
        for model in models:
            settings = asdict(models_conf.sasrec(model)) if model in NEURAL else {}
            done = trained[name][model] = fingerprint(
                "train", inputs[name], model, models_conf.context, models_conf.max_tokens, settings
            )
            log.run(
                f"train {model}",
                done,
                lambda model=model: train(
                    spark,
                    lake,
                    name,
                    model,
                    models_conf,
                    tracking_uri=uri,
                    parent_run_id=parent,
                    splits=splits,
                    progress=report,
                ),
            )
            log.run(
                f"score {model}",
                done,
                lambda model=model: report(
                    f"{name} {model}: {score(spark, lake, name, model, models_conf, tracking_uri=uri, progress=report):,} ranks"
                ),
            )

    def transfer_stage(source: str, target: str) -> str:
        done = fingerprint("transfer", trained[source]["sasrec_f"], inputs[target])
        logs[target].run(
            f"transfer sasrec_f from {source}",
            done,
            lambda: report(
                f"{target} sasrec_f@{source}: "
                f"{score_transfer(spark, lake, source, target, models_conf, tracking_uri=uri, progress=report):,} ranks"
            ),
        )
        return done

    def evaluate_stage(name: str, transfers: list[str]) -> None:
        floor = split_conf_of(name).floor_users
        logs[name].run(
            "evaluate",
            fingerprint("evaluate", trained[name], transfers, floor),
            lambda: evaluate(spark, lake, name, floor_users=floor, tracking_uri=uri, progress=report),
        )

    try:
        for entry in run.get("datasets", []):
            data_stages(entry)
        for name in compare.datasets:
            variant_stages(name)
        if not models:
            report(
                f"done: lake at {lake}; split reports in {Path(lake) / 'reports' / 'split'} (no models in {args.conf})"
            )
            return 0
        uri = default_tracking_uri(lake, run.get("tracking_uri"))
        parent = start_benchmark(
            uri,
            f"benchmark {Path(args.conf).stem}",
            {"conf": str(args.conf), "datasets": ",".join(names), "models": ",".join(models), "seed": seed},
        )
        ok = False
        try:
            for name in names:
                model_stages(name, parent, (S.TEST, S.VAL))
            for variant in compare.variants():  # scored on their test split only
                model_stages(variant, parent, (S.TEST,))
            transfers: dict[str, list[str]] = {}
            for source, target in compare.transfer:
                transfers.setdefault(target, []).append(transfer_stage(source, target))
            for name in names + compare.variants():
                evaluate_stage(name, transfers.get(name, []))
            out = Path(run.get("report", base / "report"))
            page = build_report(spark, lake, out, names, compare=compare, progress=report)
            log_report(uri, str(out), parent)
            ok = True
        finally:
            end_benchmark(uri, parent, ok)
    except StageFailed as failure:
        print(f"intent run: {failure}; fix it and rerun: finished stages are skipped", file=sys.stderr)
        return 1
    report(f"MLflow runs (benchmark run {parent}): mlflow ui --backend-store-uri {uri}")
    report(f"compare them: intent compare --lake {lake} --metrics '^test\\..*ndcg_10$'")
    report(f"done: report at {page.resolve()}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="intent", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    gen = commands.add_parser("generate", help="write synthetic raw release files of a source")
    gen.add_argument("--dataset", required=True)
    gen.add_argument("--events", type=int, required=True)
    gen.add_argument("--out", required=True, help="folder for the raw files")
    gen.add_argument("--seed", type=int, default=0)
    gen.add_argument("--dirty", action="store_true", help="inject bad rows (for testing ingest)")
    gen.set_defaults(func=cmd_generate)

    ing = commands.add_parser("ingest", help="raw release files -> events, items, users, rejects")
    ing.add_argument("--dataset", required=True, help="built-in source name, or the name to store under")
    ing.add_argument("--raw", required=True, help="folder with the release files (path or URI)")
    ing.add_argument("--lake", required=True, help="lake folder (path or URI)")
    ing.add_argument("--conf", help="source conf YAML (for a source that is not built in)")
    ing.add_argument(
        "--item-level",
        help="ingest items at this level of the conf's item_levels (cct: merchant or mcc); default its fine level",
    )
    _add_spark_flags(ing)
    ing.set_defaults(func=cmd_ingest)

    for name, func, what in (
        ("train", cmd_train, "fit a model on both splits' training events; log it to MLflow"),
        ("score", cmd_score, "rank the full catalogue for every target with a trained model -> ranks"),
    ):
        stage = commands.add_parser(name, help=what)
        stage.add_argument("--dataset", required=True)
        stage.add_argument("--model", required=True, help="popularity, repeat_last, sasrec or sasrec_f")
        stage.add_argument("--lake", required=True)
        stage.add_argument("--models-conf", help="model settings (default conf/models.yaml)")
        stage.add_argument("--steps", type=int, help="override the training steps of the neural models")
        stage.add_argument(
            "--tracking-uri", help="MLflow store (default: MLFLOW_TRACKING_URI or LAKE/../mlflow.db)"
        )
        if name == "train":
            stage.add_argument("--parent-run-id", help="nest the run under this MLflow run (a benchmark)")
            stage.add_argument(
                "--split", action="append", choices=("test", "val"), help="only this split (default: both)"
            )
        if name == "score":
            stage.add_argument(
                "--run-id", help="the MLflow training run (default: the newest for dataset and model)"
            )
        _add_spark_flags(stage)
        stage.set_defaults(func=func)

    tr = commands.add_parser(
        "transfer", help="rank another source's test targets with a content model (model@source ranks)"
    )
    tr.add_argument("--source", required=True, help="the dataset the model was trained on (its newest run)")
    tr.add_argument("--target", required=True, help="the dataset whose cells it is scored on (split first)")
    tr.add_argument("--lake", required=True)
    tr.add_argument("--model", default="sasrec_f", help="a content model (default sasrec_f)")
    tr.add_argument("--models-conf", help="model settings (default conf/models.yaml)")
    tr.add_argument("--tracking-uri", help="MLflow store (default: MLFLOW_TRACKING_URI or LAKE/../mlflow.db)")
    _add_spark_flags(tr)
    tr.set_defaults(func=cmd_transfer)

    ev = commands.add_parser(
        "evaluate", help="ranks -> user_metrics and metrics (95% intervals), MLflow metrics"
    )
    ev.add_argument("--dataset", required=True)
    ev.add_argument("--lake", required=True)
    ev.add_argument("--conf", help="split conf for the population floor (default conf/split.yaml)")
    ev.add_argument("--tracking-uri", help="MLflow store (default: MLFLOW_TRACKING_URI or LAKE/../mlflow.db)")
    ev.add_argument("--no-mlflow", action="store_true", help="write the tables only")
    ev.add_argument(
        "--bootstrap", type=int, default=0, metavar="R", help="user-level bootstrap intervals, R replicates"
    )
    _add_spark_flags(ev)
    ev.set_defaults(func=cmd_evaluate)

    run = commands.add_parser("run", help="the whole chain for the datasets in a run conf")
    run.add_argument("--conf", required=True)
    run.add_argument("--lake")
    run.add_argument(
        "--force", action="store_true", help="rerun every stage, even those whose inputs are unchanged"
    )
    _add_spark_flags(run)
    run.set_defaults(func=cmd_run)

    split = commands.add_parser("split", help="events -> holdout, splits, targets (+ split report)")
    split.add_argument("--dataset", required=True)
    split.add_argument("--lake", required=True)
    split.add_argument("--conf", help="split conf (default conf/split.yaml)")
    split.add_argument("--seed", type=int)
    split.add_argument("--holdout-fraction", type=float)
    split.add_argument("--cutoff", help="fix the test cutoff by hand (YYYY-MM-DD); reported as manual")
    split.add_argument("--val-cutoff", help="fix the validation cutoff by hand (YYYY-MM-DD)")
    split.add_argument("--out", help="folder for the split report (default LAKE/reports/split)")
    _add_spark_flags(split)
    split.set_defaults(func=cmd_split)

    verify = commands.add_parser("verify", help="leakage checks and checksums; exit 1 on any failure")
    verify.add_argument("--lake", required=True)
    verify.add_argument("--dataset", help="one dataset (default: every split dataset in the lake)")
    _add_spark_flags(verify)
    verify.set_defaults(func=cmd_verify)

    audit = commands.add_parser(
        "audit", help="the paper's five admission criteria on an ingested dataset; exit 1 on a rejection"
    )
    audit.add_argument("--dataset", required=True)
    audit.add_argument("--lake", required=True)
    audit.add_argument("--conf", help="source conf YAML (default: the built-in conf of the dataset)")
    audit.add_argument(
        "--floor-users", type=int, default=25_000, help="users with 3+ events needed (default 25000)"
    )
    audit.add_argument("--out", help="folder for the audit CSV and figure (default LAKE/reports/audit)")
    _add_spark_flags(audit)
    audit.set_defaults(func=cmd_audit)

    rep = commands.add_parser("report", help="metrics -> HTML, Markdown and CSV report with figures")
    rep.add_argument("--lake", required=True)
    rep.add_argument("--out", required=True, help="folder for report.html, report.md, tables/, figures/")
    rep.add_argument(
        "--dataset", action="append", help="only this dataset (repeatable; default: all evaluated)"
    )
    rep.add_argument(
        "--tracking-uri", help="MLflow store (default: MLFLOW_TRACKING_URI or LAKE/../mlflow.db)"
    )
    rep.add_argument("--run-id", help="log the report to this run (default: a new report run)")
    rep.add_argument("--no-mlflow", action="store_true", help="write the files only")
    _add_spark_flags(rep)
    rep.set_defaults(func=cmd_report)

    cmp = commands.add_parser("compare", help="print MLflow metrics of chosen runs side by side")
    cmp.add_argument("--lake", help="the lake whose default MLflow store to read")
    cmp.add_argument("--tracking-uri", help="MLflow store (instead of the lake's)")
    cmp.add_argument("--run-id", action="append", help="a run to show (repeatable)")
    cmp.add_argument("--dataset", help="the newest training run of every model of this dataset")
    cmp.add_argument(
        "--metrics", default=r"^test\.", help="regular expression on metric names (default: test split)"
    )
    cmp.add_argument("--csv", action="store_true", help="CSV instead of an aligned table")
    cmp.set_defaults(func=cmd_compare)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except (IntentError, ConfError, ValueError) as exc:
        print(f"intent {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
