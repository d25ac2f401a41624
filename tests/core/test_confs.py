"""Every conf kind (run, source, models, split, Spark profile) refuses a key it does not know,
in one line naming the file, the key and the closest known key, before any stage runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import REPO_ROOT

from intent_spark.core.conf import CONF_DIR
from intent_spark.core.errors import ConfError
from intent_spark.core.runconf import load_run_conf
from intent_spark.core.sources import load_source
from intent_spark.lake.session import spark_settings
from intent_spark.split.conf import load_split_conf
from intent_spark.train.conf import load_models_conf
from intent_spark.train.readers import petastorm_problem


def _write(path: Path, data: dict) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _demo(**changes) -> dict:
    conf = {"workdir": "w", "datasets": [{"name": "hm", "events": 3000}], "models": ["popularity"]}
    conf.update(changes)
    return conf


def test_the_shipped_confs_load():
    assert load_run_conf(CONF_DIR / "demo.yaml").names == [
        "amazon_hk",
        "kuairand",
        "microlens",
        "hm",
        "rees46",
    ]
    full = load_run_conf(CONF_DIR / "full.yaml")
    assert {"cct", "cct_mcc", "kuairand_all_signals"} <= set(full.names) and full.compare.protocols
    assert load_models_conf().settings("sasrec").steps == 20_000
    assert load_split_conf(CONF_DIR / "split.yaml", "rees46").manual_cutoff is not None
    assert spark_settings("local", [])["spark.sql.shuffle.partitions"] == "8"
    for path in sorted((CONF_DIR / "sources").glob("*.yaml")):
        assert load_source(path).name


@pytest.mark.parametrize(
    ("conf", "message"),
    [
        # the typo that used to run the split and quietly train nothing
        (
            {k: v for k, v in _demo(model=["popularity"]).items() if k != "models"},
            r"run.yaml: model: unknown key; did you mean 'models'\?",
        ),
        (
            _demo(datasets=[{"name": "hm", "evnts": 3000}]),
            r"run.yaml: datasets\[0\].evnts: unknown key; did you mean 'events'\?",
        ),
        (
            _demo(compare={"protocol": ["horizon"]}),
            r"run.yaml: compare.protocol: unknown key; did you mean 'protocols'\?",
        ),
        (
            _demo(audit={"sequence": 10}),
            r"run.yaml: audit.sequence: unknown key; did you mean 'sequence_users'\?",
        ),
        (
            _demo(audit={"floor_users": 10}),
            r"run.yaml: audit.floor_users: renamed sequence_users \(users with 3\+ events a source needs\); "
            r"the cells' floor is the top-level floor_users",
        ),
        (_demo(seed="three"), r"run.yaml: seed: expected an integer, got 'three'"),
        (_demo(compare={"datasets": ["cct"]}), r"run.yaml: compare: cct not among the run's datasets"),
        (
            _demo(floor_users=199),
            r"run.yaml: floor_users: 199 is below the lowest floor of 200 users per cell",
        ),
    ],
)
def test_run_conf_unknown_keys(tmp_path, conf, message):
    with pytest.raises(ConfError, match=message):
        load_run_conf(_write(tmp_path / "run.yaml", conf))


def test_source_conf_unknown_key(tmp_path):
    conf = yaml.safe_load((CONF_DIR / "sources" / "hm.yaml").read_text())
    conf["events"]["usr"] = conf["events"].pop("user")
    with pytest.raises(ConfError, match=r"hm.yaml: events.usr: unknown key; did you mean 'user'\?"):
        load_source(_write(tmp_path / "hm.yaml", conf))
    conf = yaml.safe_load((CONF_DIR / "sources" / "hm.yaml").read_text())
    conf["item_level"] = {"fine": "article"}
    with pytest.raises(ConfError, match=r"item_level: expected a text value"):
        load_source(_write(tmp_path / "hm2.yaml", conf))


def test_models_conf_unknown_keys(tmp_path):
    models = yaml.safe_load((CONF_DIR / "models.yaml").read_text())
    models["models"]["sasrec"]["step"] = models["models"]["sasrec"].pop("steps")
    with pytest.raises(
        ConfError, match=r"models.yaml: models.sasrec.step: unknown key; did you mean 'steps'\?"
    ):
        load_models_conf(_write(tmp_path / "models.yaml", models))
    with pytest.raises(
        ConfError, match=r"run.yaml: model_overrides.sasrek: unknown key; did you mean 'sasrec'\?"
    ):
        load_models_conf(None, {"sasrek": {"steps": 5}}, "run.yaml: model_overrides")
    with pytest.raises(
        ConfError,
        match=r"^run.yaml: model_overrides.popularity.steps: unknown key; popularity takes no settings$",
    ):
        load_models_conf(None, {"popularity": {"steps": 5}}, "run.yaml: model_overrides")
    with pytest.raises(ConfError, match=r"models.yaml: contxt: unknown key; did you mean 'context'\?"):
        load_models_conf(_write(tmp_path / "models.yaml", {"contxt": 50}))


def test_the_reader_is_a_conf_key_and_a_flag_and_a_wrong_one_is_one_line(tmp_path):
    assert load_models_conf().reader == "auto"
    assert load_models_conf(_write(tmp_path / "models.yaml", {"reader": "arrow"})).reader == "arrow"
    with pytest.raises(
        ConfError, match=r"^.*models.yaml: reader: unknown reader 'parquet'; known: auto, arrow, petastorm$"
    ):
        load_models_conf(_write(tmp_path / "models.yaml", {"reader": "parquet"}))
    done = _train_with_reader(tmp_path, "pyarrow")
    assert done.returncode == 2
    assert "argument --reader: invalid choice: 'pyarrow' (choose from" in done.stderr.strip().splitlines()[-1]


def _train_with_reader(folder: Path, reader: str) -> subprocess.CompletedProcess:
    command = ["train", "--dataset", "hm", "--model", "sasrec", "--lake", "L", "--reader", reader]
    return subprocess.run(
        [sys.executable, "-m", "intent_spark.cli", *command],
        capture_output=True,
        text=True,
        cwd=folder,
        timeout=120,
    )


@pytest.mark.skipif(petastorm_problem() is None, reason="Petastorm runs here: forcing it is no mistake")
def test_forcing_petastorm_where_it_cannot_run_is_one_line_before_spark_starts(tmp_path):
    done = _train_with_reader(tmp_path, "petastorm")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"intent train: error: reader 'petastorm' cannot run here: {petastorm_problem()}; use --reader arrow"
    ]
    assert not (tmp_path / "L").exists() or not any((tmp_path / "L").rglob("_delta_log"))


def test_split_conf_unknown_keys(tmp_path):
    split = yaml.safe_load((CONF_DIR / "split.yaml").read_text())
    for change, message in (
        (
            {"holdout_fractoin": 0.1},
            r"split.yaml: holdout_fractoin: unknown key; did you mean 'holdout_fraction'\?",
        ),
        ({"rule": {"lo": 0.7}}, r"split.yaml: rule.lo: unknown key; did you mean 'low'\?"),
        (
            {"datasets": {"hm": {"manual_cutof": "2020-01-01"}}},
            r"datasets.hm.manual_cutof: unknown key; did you mean 'manual_cutoff'\?",
        ),
        ({"seed": 1.5}, r"split.yaml: seed: expected an integer"),
    ):
        path = _write(tmp_path / "split.yaml", {**split, **change})
        with pytest.raises(ConfError, match=message):
            load_split_conf(path, "amazon_hk")


def test_spark_profile_unknown_keys(tmp_path, spark):
    from intent_spark.lake.session import check_known_settings

    with pytest.raises(
        ConfError,
        match=r"profile.yaml: sql.shuffle.partitions: unknown key; Spark settings start with 'spark.'",
    ):
        spark_settings(str(_write(tmp_path / "profile.yaml", {"sql.shuffle.partitions": 8})), [])
    settings = spark_settings(str(_write(tmp_path / "typo.yaml", {"spark.sql.shuffle.partition": 8})), [])
    with pytest.raises(
        ConfError,
        match=r"typo.yaml: spark.sql.shuffle.partition: not a Spark setting; did you mean 'spark.sql.shuffle.partitions'\?",
    ):
        check_known_settings(spark, settings)
    check_known_settings(spark, spark_settings("cluster", ["spark.hadoop.fs.s3a.endpoint=x"]))  # all known


def test_a_typo_in_a_run_conf_is_one_line_and_runs_nothing(tmp_path):
    conf = _demo(workdir=str(tmp_path / "work"))
    conf["model"] = conf.pop("models")
    path = _write(tmp_path / "run.yaml", conf)
    done = subprocess.run(
        [sys.executable, "-m", "intent_spark.cli", "run", "--conf", str(path)],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=120,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"intent run: error: {path}: model: unknown key; did you mean 'models'? known: audit, backtest, compare, "
        "correction, datasets, floor_users, lake, model_overrides, models, models_conf, processes, reader, report, seed, split_conf, tracking_uri, workdir"
    ]
    assert not (tmp_path / "work").exists()


def test_a_user_mistake_after_spark_started_is_one_line(tmp_path):
    """Spark's start-up banner and warnings go to its log file, which the error names."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "intent_spark.cli",
            "split",
            "--dataset",
            "hm",
            "--lake",
            str(tmp_path / "lake"),
        ],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=300,
    )
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"intent split: error: {tmp_path / 'lake'}: no events of hm; ingest hm first")


def test_the_floor_an_evaluate_or_report_assumes_is_the_split_confs_of_the_source(tmp_path):
    from intent_spark.split.conf import conf_floor

    conf = tmp_path / "split.yaml"
    conf.write_text((CONF_DIR / "split.yaml").read_text() + "  hm: {floor_users: 300}\n")
    assert conf_floor("hm", conf) == conf_floor("hm.seed1", conf) == conf_floor("hm.origin2", conf) == 300
    assert conf_floor("amazon_hk", conf) == 1000 == conf_floor("hm.leave_last_out")  # the shipped conf
