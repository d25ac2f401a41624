"""`intent run` links each task to the tasks it reads by the stage graph, and a task's
fingerprint follows them: a changed split conf reruns that dataset's split and everything that
reads it, and nothing of the other dataset. No JVM: the tasks' work is replaced by nothing, so
only the stage log (small JSON files) is written."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import REPO_ROOT

from intent_spark.core.runconf import load_run_conf
from intent_spark.pipeline.runner import Runner

MODELS = ("popularity", "sasrec")


def _conf(tmp_path: Path, split_conf: Path | None = None) -> Path:
    """Two datasets on raw folders of their own (no generate stage), two models, one protocol."""
    for name in ("hm", "amazon_hk"):
        release = tmp_path / "raw" / name / "events.csv"
        if not release.exists():  # its time is part of ingest's fingerprint
            release.parent.mkdir(parents=True)
            release.write_text("a release file\n")
    conf = tmp_path / "run.yaml"
    conf.write_text(
        f"workdir: {tmp_path / 'work'}\n"
        + (f"split_conf: {split_conf}\n" if split_conf else "")
        + f"datasets:\n  - {{name: hm, raw: {tmp_path / 'raw' / 'hm'}}}\n"
        + f"  - {{name: amazon_hk, raw: {tmp_path / 'raw' / 'amazon_hk'}}}\n"
        + f"models: [{', '.join(MODELS)}]\n"
        + "compare: {datasets: [hm], protocols: [leave_last_out]}\n"
    )
    return conf


def _reads(runner: Runner) -> dict[tuple, tuple]:
    return {task.key: task.reads for task in runner.tasks()}


def test_each_task_reads_the_tasks_the_graph_puts_before_it(tmp_path):
    reads = _reads(Runner(load_run_conf(_conf(tmp_path))))
    assert reads[("ingest", "hm", None)] == ()  # its raw files are in its settings
    assert reads[("split", "hm", None)] == (("ingest", "hm", None),)
    assert reads[("split", "hm.leave_last_out", None)] == (("split", "hm", None),)  # its source's cutoff
    assert reads[("verify", "hm", None)] == (("split", "hm", None),)
    assert reads[("train", "hm", "sasrec")] == (("verify", "hm", None),)
    # a protocol variant is not verified (its leak is by design): its training reads its split
    assert reads[("train", "hm.leave_last_out", "sasrec")] == (("split", "hm.leave_last_out", None),)
    assert reads[("score", "hm", "sasrec")] == (("train", "hm", "sasrec"),)
    assert reads[("evaluate", "amazon_hk", None)] == (
        ("score", "amazon_hk", "popularity"),
        ("score", "amazon_hk", "sasrec"),
    )
    assert reads[("agreement", "hm", None)] == (
        ("evaluate", "hm", None),
        ("evaluate", "hm.leave_last_out", None),
    )
    assert ("verify", "hm.leave_last_out", None) not in reads


@pytest.mark.parametrize("name", ["demo.yaml", "full.yaml"])
def test_the_shipped_confs_link(name, tmp_path):
    """Every task of the shipped confs reads only earlier tasks of stages above it (``link``
    refuses anything else), and the transfer reads both of its ends."""
    reads = _reads(Runner(load_run_conf(REPO_ROOT / "conf" / name), root=str(tmp_path / "lake")))
    if name == "full.yaml":
        assert reads[("transfer", "microlens", "amazon_hk")] == (
            ("train", "amazon_hk", "sasrec_f"),
            ("split", "microlens", None),
        )
        assert ("transfer", "microlens", "amazon_hk") in reads[("evaluate", "microlens", None)]


def _finish_everything(runner: Runner) -> None:
    tasks = runner.tasks()
    for task in tasks:
        task.work = lambda: None
    runner.execute(tasks)


def test_a_changed_split_conf_reruns_that_dataset_from_its_split_on(tmp_path):
    _finish_everything(Runner(load_run_conf(_conf(tmp_path))))
    unchanged = Runner(load_run_conf(_conf(tmp_path)))
    assert [line.split()[0] for line in unchanged.plan(unchanged.tasks())].count("run") == 1  # the report

    split_conf = tmp_path / "split.yaml"
    split_conf.write_text((REPO_ROOT / "conf" / "split.yaml").read_text() + "  hm: {seed: 7}\n")
    runner = Runner(load_run_conf(_conf(tmp_path, split_conf)))
    tasks = runner.tasks()
    lines = dict(zip([(t.name, t.dataset) for t in tasks], runner.plan(tasks), strict=True))
    runs = {key for key, line in lines.items() if line.startswith("run ")}
    hm_and_variant = [
        (name, dataset)
        for dataset in ("hm", "hm.leave_last_out")
        for name in ("split", "evaluate", *(f"{s} {m}" for m in MODELS for s in ("train", "score")))
    ]
    only_hm = [("verify", "hm"), ("sensitivity", "hm"), ("leaks", "hm"), ("leaks", "hm.leave_last_out")]
    assert runs == {*hm_and_variant, *only_hm, ("agreement", "hm"), ("report", "")}
    assert all(lines[key].endswith("inputs changed since it finished") for key in runs - {("report", "")})
    assert all(line.startswith("skip ") for (_, dataset), line in lines.items() if dataset == "amazon_hk")


def test_a_run_floor_reruns_every_split_and_evaluation_and_nothing_before(tmp_path):
    """``floor_users:`` in the run conf is part of each dataset's split conf: the split flags its
    cells with it, so every split reruns and everything after it, never an ingest."""
    from intent_spark.core.datasets import DatasetRef

    _finish_everything(Runner(load_run_conf(_conf(tmp_path))))
    conf = _conf(tmp_path)
    conf.write_text(conf.read_text() + "floor_users: 250\n")
    runner = Runner(load_run_conf(conf))
    assert runner.split_conf(DatasetRef("hm")).floor_users == 250
    assert runner.split_conf(DatasetRef("hm"), {"floor_users": 300}).floor_users == 300  # a caller's own
    assert runner.split_conf(DatasetRef("hm")).seed == 0  # the rest is split.yaml's
    tasks = runner.tasks()
    lines = dict(zip([(t.name, t.dataset) for t in tasks], runner.plan(tasks), strict=True))
    runs = {name for (name, _), line in lines.items() if line.startswith("run ")}
    assert {"split", "evaluate", "report"} <= runs and "ingest" not in runs
    assert all(lines["split", d].startswith("run ") for d in ("hm", "amazon_hk", "hm.leave_last_out"))


def test_the_docs_stage_table_is_the_graph():
    """docs/architecture.md's table of stages says what ``graph.STAGES`` declares, row by row."""
    from intent_spark.pipeline import graph

    text = (REPO_ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    header = "| stage | per | after | scheduled | on when |"
    lines = text[text.index(header) :].splitlines()[2:]
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[: lines.index("")]]
    expected = [
        [
            stage.name,
            stage.per,
            ", ".join(stage.after) or "-",
            "yes" if stage.scheduled else "no",
            stage.when or "always",
        ]
        for stage in graph.STAGES
    ]
    assert rows == expected
