"""`intent <stage>` runs the stage graph's own task for its dataset (and model), as `intent run`
declares it: its flags reach the one place each setting is derived (the runner's split conf,
models conf, floor and tracking). No JVM: the tasks are made and filtered, not run."""

from __future__ import annotations

from datetime import datetime

import pytest

from intent_spark.cli import _parse_dataset_names, build_parser
from intent_spark.core.errors import IntentError
from intent_spark.pipeline import commands
from intent_spark.pipeline.runner import Runner, stage_tasks


def _runner(line: str) -> Runner:
    """The runner a command line's stage command builds."""
    args = build_parser().parse_args(line.split())
    _parse_dataset_names(args)
    return commands._runner(args)


def _tasks(runner: Runner, stage: str, dataset: str, model: str | None = None) -> list:
    return stage_tasks(runner, stage, dataset, model)  # what run_stage runs


def test_split_flags_reach_the_declared_split_task(tmp_path):
    runner = _runner(f"split --dataset hm --lake {tmp_path} --seed 7 --cutoff 2020-05-01 --out {tmp_path}/r")
    (task,) = _tasks(runner, "split", "hm")
    conf = runner.split_conf(task.dataset)
    assert (conf.seed, conf.manual_cutoff, conf.floor_users) == (7, datetime(2020, 5, 1), 1000)
    assert "seed=7" in task.settings()[0]  # the fingerprint holds the conf the command set


def test_a_variant_is_split_by_its_own_declaration(tmp_path):
    seeded = _runner(f"split --dataset hm.seed3 --lake {tmp_path}")
    (task,) = _tasks(seeded, "split", "hm.seed3")
    assert task.reads == (("split", "hm", None),)  # as in a run: after its source's split
    assert "seed=3" in task.settings()[0]
    flagged = _runner(f"split --dataset hm.seed3 --lake {tmp_path} --seed 9")
    assert "seed=9" in _tasks(flagged, "split", "hm.seed3")[0].settings()[0]  # the flag wins
    protocol = _runner(f"split --dataset hm.leave_last_out --lake {tmp_path}")
    assert [t.reads for t in _tasks(protocol, "split", "hm.leave_last_out")] == [(("split", "hm", None),)]
    origin = _runner(f"split --dataset hm.origin2 --lake {tmp_path}")
    assert "manual_cutoff=None" in _tasks(origin, "split", "hm.origin2")[0].settings()[1]


def test_train_flags_reach_the_models_conf_and_the_splits(tmp_path):
    runner = _runner(
        f"train --dataset hm --model sasrec --lake {tmp_path} --steps 5 --split test --processes 2"
    )
    assert [t.key for t in _tasks(runner, "train", "hm")] == [("train", "hm", "sasrec")]
    assert runner.models_conf.steps == 5  # every model's steps, as --steps says
    assert runner.models_conf.processes == 2
    assert runner.splits_of("hm") == ("test",)
    assert runner.benchmark() is None  # a command nests under --parent-run-id, else under nothing


def test_evaluate_takes_the_lakes_floor_unless_overridden(tmp_path):
    plain = _runner(f"evaluate --dataset hm --lake {tmp_path}")
    assert (plain.call.floor_users, plain.call.tracked) == (None, True)
    assert [t.key for t in _tasks(plain, "evaluate", "hm")] == [("evaluate", "hm", None)]
    override = _runner(f"evaluate --dataset hm --lake {tmp_path} --floor-users 300 --no-mlflow")
    assert (override.call.floor_users, override.call.tracked) == (300, False)


def test_a_stage_with_nothing_to_run_is_one_line(tmp_path):
    from intent_spark.pipeline.runner import run_stage

    runner = _runner(f"evaluate --dataset hm --lake {tmp_path}")
    with pytest.raises(IntentError, match=r"^score: nothing to run for amazon_hk$"):
        run_stage(runner, "score", "amazon_hk")
