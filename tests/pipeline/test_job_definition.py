"""The scheduled job (databricks.yml) is the stage graph (intent_spark/pipeline/graph.py): one
task per scheduled stage, waiting for the stages the graph runs it after, each running its jobs/
entry point with arguments the command line accepts, over every dataset and model."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import pytest
import yaml
from conftest import REPO_ROOT

from intent_spark.cli import build_parser
from intent_spark.generate import SOURCES
from intent_spark.pipeline.graph import STAGES, scheduled_dependencies

ROOT = REPO_ROOT
SCHEDULED = [stage.name for stage in STAGES if stage.scheduled]
# synthetic data, the laptop chain, and the commands for models outside the benchmark's process
LOCAL_ONLY = {"generate", "run", "export", "submit"}


@pytest.fixture(scope="module")
def bundle():
    return yaml.safe_load((ROOT / "databricks.yml").read_text())


def _usage_of(script: Path) -> str:
    """What the entry point prints for ``--help``: run as ``spark-submit`` runs it (as
    ``__main__``, the arguments after the script), it exits 0 before any Spark."""
    import contextlib
    import io
    import runpy
    import sys

    out, argv = io.StringIO(), sys.argv
    sys.argv = [str(script), "--help"]
    try:
        with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as exited:
            runpy.run_path(str(script), run_name="__main__")
    finally:
        sys.argv = argv
    assert exited.value.code == 0
    return out.getvalue()


def _variables(bundle) -> dict[str, str]:
    return {name: spec["default"] for name, spec in bundle["variables"].items()}


def _resolve(text: str, variables: dict[str, str]) -> str:
    return re.sub(r"\$\{var\.(\w+)\}", lambda m: variables[m.group(1)], text)


def _expand(task: dict, variables: dict[str, str]) -> tuple[dict, list[list[str]]]:
    """The task that runs, and its parameter lists: one per fan-out input, or the one."""
    if "for_each_task" not in task:
        return task, [[_resolve(p, variables) for p in task["spark_python_task"]["parameters"]]]
    fan = task["for_each_task"]
    inner = fan["task"]
    runs = []
    for item in json.loads(_resolve(fan["inputs"], variables)):

        def fill(p, item=item):
            p = _resolve(p, variables)
            if isinstance(item, dict):
                p = re.sub(r"\{\{input\.(\w+)\}\}", lambda m: item[m.group(1)], p)
            return p.replace("{{input}}", str(item))

        runs.append([fill(p) for p in inner["spark_python_task"]["parameters"]])
    return inner, runs


def _tasks(bundle) -> list[dict]:
    return bundle["resources"]["jobs"]["intent_benchmark"]["tasks"]


def test_every_task_calls_its_entry_point_with_arguments_the_cli_accepts(bundle):
    variables = _variables(bundle)
    clusters = {c["job_cluster_key"] for c in bundle["resources"]["jobs"]["intent_benchmark"]["job_clusters"]}
    seen = []
    for task in _tasks(bundle):
        inner, runs = _expand(task, variables)
        script = ROOT / inner["spark_python_task"]["python_file"]
        stage = script.stem
        assert script.exists() and script.parent.name == "jobs", script
        assert _usage_of(script).startswith(f"usage: intent {stage} ")  # the command's own parser
        assert task["task_key"] == stage and inner["job_cluster_key"] in clusters
        for params in runs:
            assert "{{" not in " ".join(params) and "${" not in " ".join(params), params
            args = build_parser().parse_args([stage, *params])
            assert args.func.__name__ == f"cmd_{stage}"
        seen.append(stage)
    entry_points = {p.stem for p in (ROOT / "jobs").glob("*.py")} - LOCAL_ONLY
    assert sorted(seen) == sorted(entry_points)


REFERENCE_MODELS = ("popularity", "repeat_last", "sasrec", "sasrec_f")  # the scheduled job's


def test_tasks_are_the_graphs_scheduled_stages_with_its_dependencies(bundle):
    variables = _variables(bundle)
    tasks = _tasks(bundle)
    assert [task["task_key"] for task in tasks] == SCHEDULED  # the graph's order, every stage once
    declared = {task["task_key"]: {d["task_key"] for d in task.get("depends_on", [])} for task in tasks}
    assert declared == scheduled_dependencies()
    assert scheduled_dependencies()["evaluate"] == {"score", "transfer"}  # what the graph's edges give

    runs = {task["task_key"]: _expand(task, variables)[1] for task in _tasks(bundle)}
    datasets = {r[r.index("--dataset") + 1] for r in runs["split"]}
    assert datasets == set(SOURCES)
    pairs = {(r[r.index("--dataset") + 1], r[r.index("--model") + 1]) for r in runs["train"]}
    assert pairs == set(itertools.product(SOURCES, REFERENCE_MODELS))
    assert pairs == {(r[r.index("--dataset") + 1], r[r.index("--model") + 1]) for r in runs["score"]}
    lakes = {r[r.index("--lake") + 1] for rs in runs.values() for r in rs}
    assert lakes == {variables["lake"]}  # every stage reads and writes the same lake


# Each target's runtimes, per cluster: the Spark line of the data stages and the ML runtime's. A
# Spark 3.5 runtime is built on Scala 2.12 (Delta 3), a Spark 4 one on 2.13 (Delta 4).
TARGET_RUNTIMES = {
    "prod": ("17.3.x-scala2.13", "17.3.x-gpu-ml-scala2.13"),
    "lts-15.4": ("15.4.x-scala2.12", "15.4.x-gpu-ml-scala2.12"),
}


def test_each_target_runs_both_clusters_on_one_runtime_line(bundle):
    clusters = bundle["resources"]["jobs"]["intent_benchmark"]["job_clusters"]
    for target, expected in TARGET_RUNTIMES.items():
        variables = _variables(bundle) | bundle["targets"][target].get("variables", {})
        found = {
            c["job_cluster_key"]: _resolve(c["new_cluster"]["spark_version"], variables) for c in clusters
        }
        assert (found["spark"], found["gpu"]) == expected, target


def test_intent_help_and_every_commands_help_print_and_exit_0(capsys):
    """argparse formats help strings with ``%``: a bare "95%" in one broke ``intent --help``."""
    parser = build_parser()
    commands = next(a for a in parser._actions if a.dest == "command").choices
    assert len(commands) >= 15
    for words in (["--help"], *([name, "--help"] for name in commands)):
        with pytest.raises(SystemExit) as done:
            parser.parse_args(words)
        assert done.value.code == 0, words
        assert capsys.readouterr().out.startswith("usage: intent"), words
