"""`intent run` skips stages whose inputs are unchanged, names the stage that failed, and after
its driver is killed a rerun resumes there and ends with the same tables."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from contextlib import suppress
from pathlib import Path

import pytest
from conftest import CHAIN_TABLES, REPO_ROOT, same_tables, write_run_conf

from intent_spark.pipeline.stage_log import StageFailed, StageLog, fingerprint


def test_stage_log_skips_unchanged_inputs_and_forgets_a_failed_stage(tmp_path):
    lake = str(tmp_path / "lake")
    calls = []
    log = StageLog(lake, "d")
    assert log.run("split", "a", lambda: calls.append("split a")) is True
    again = StageLog(lake, "d")  # a new process reads what finished
    assert again.run("split", "a", lambda: calls.append("split a again")) is False
    assert again.run("split", "b", lambda: calls.append("split b")) is True  # inputs changed
    assert StageLog(lake, "d", force=True).run("split", "b", lambda: calls.append("forced")) is True
    assert calls == ["split a", "split b", "forced"]

    def broken():
        raise ValueError("bad cutoff\nmore detail")

    with pytest.raises(StageFailed, match=r"^split of d failed: ValueError: bad cutoff$"):
        StageLog(lake, "d").run("split", "c", broken)
    # the failed attempt replaced the old record: nothing looks finished that did not finish
    assert "finished" not in json.loads((tmp_path / "lake" / "_stages" / "d.json").read_text())["split"]
    assert fingerprint("x", [1, 2]) == fingerprint("x", [1, 2]) != fingerprint("x", [2, 1])


def _path_without_python(folder: Path) -> str:
    """A PATH with every program of the system's folders (Java, bash, coreutils) except Python."""
    folder.mkdir(exist_ok=True)
    for system in ("/usr/local/bin", "/usr/bin", "/bin"):
        for program in sorted(Path(system).iterdir()) if Path(system).is_dir() else []:
            link = folder / program.name
            if not program.name.startswith("python") and not link.exists():
                link.symlink_to(program)
    return str(folder)


def _run(conf: Path, *extra: str, extra_env: dict[str, str] | None = None, **kwargs) -> subprocess.Popen:
    unset = ("MLFLOW_", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")
    env = {k: v for k, v in os.environ.items() if not k.startswith(unset)} | (extra_env or {})
    command = [sys.executable, "-m", "intent_spark.cli", "run", "--conf", str(conf), *extra]
    kwargs.setdefault("stderr", subprocess.PIPE)
    return subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdout=subprocess.DEVNULL, text=True, **kwargs)


@pytest.mark.slow
def test_a_driver_killed_in_each_stage_resumes_and_ends_identical(spark, reference_run, tmp_path, capsys):
    """``kill -9`` of the driver in the middle of every stage in turn (a fault point, not a
    sleep), each run resuming the stage the one before was killed in; then a run to the end (in
    this process, on this session: only a killed driver needs a process of its own).

    The killed drivers run with no ``python3`` on PATH and no ``PYSPARK_PYTHON``: Spark's Python
    workers must run on the interpreter that runs intent (the split's small frames start them),
    and each stage from ingest to evaluate finishes in one of these children."""
    from intent_spark.cli import main
    from intent_spark.core.faults import FAULT_ENV, POINTS

    path = _path_without_python(tmp_path / "bin")
    assert subprocess.run(["bash", "-c", "command -v python3"], env={"PATH": path}).returncode != 0
    conf = write_run_conf(tmp_path / "killed")
    work = tmp_path / "killed" / "work"
    record = work / "lake" / "_stages" / "hm.json"
    stage_of = {"ingest": "ingest", "split": "split", "inputs": "train popularity",
                "train": "train popularity", "score": "score popularity", "evaluate": "evaluate"}  # fmt: skip
    interrupted = None
    for point in POINTS:
        log = tmp_path / f"{point}.log"
        with log.open("w") as sink:
            killed = _run(
                conf, start_new_session=True, extra_env={FAULT_ENV: point, "PATH": path}, stderr=sink
            )
            killed.wait(timeout=600)
        with suppress(ProcessLookupError):
            os.killpg(killed.pid, signal.SIGKILL)  # the JVM and workers die with the driver's machine
        err = log.read_text()
        assert killed.returncode == -signal.SIGKILL, (point, err[-3000:])
        if interrupted is not None:  # the stage the last run was killed in is named as resumed
            assert f"hm: {interrupted} resumed: a run that started it at" in err, (point, err[-3000:])
        stages = json.loads(record.read_text())
        stage = stage_of.get(point.split(".")[0])
        if stage is not None:  # killed half-way: started, not finished
            assert "started" in stages[stage] and "finished" not in stages[stage], (point, stages)
        interrupted = stage
    assert (work / ".report.partial").is_dir() and not (work / "report").exists()

    capsys.readouterr()
    assert main(["run", "--conf", str(conf)]) == 0
    err = capsys.readouterr().err
    assert "hm: split skipped (inputs unchanged since it finished)" in err and "done: report at" in err
    stages = json.loads(record.read_text())
    assert all("finished" in r for r in stages.values()), stages
    lake = str(work / "lake")
    same_tables(spark, lake, str(reference_run / "lake"), "hm", list(CHAIN_TABLES))
    # nothing half-written is left: no staging, no partial report, no run that looks finished
    # without its model
    assert not list((work / "lake" / "_staging").rglob("*.parquet"))
    assert not (work / ".report.partial").exists() and (work / "report" / "report.html").is_file()
    assert not (work / "lake" / "_locks" / "hm.json").exists()
    runs = _runs(f"sqlite:///{work / 'mlflow.db'}")
    assert {r.info.status for r in runs} <= {"FINISHED", "FAILED"}
    for run in runs:
        if run.data.tags.get("intent.stage") == "train" and run.info.status == "FINISHED":
            assert _has_model(f"sqlite:///{work / 'mlflow.db'}", run.info.run_id)
    assert [r.info.status for r in runs if r.data.tags.get("intent.stage") == "train"].count("FINISHED") == 1


def _runs(uri: str) -> list:
    from mlflow import MlflowClient

    from intent_spark.lake.tracking import experiment_id

    return MlflowClient(uri).search_runs([experiment_id(uri)])


def _has_model(uri: str, run_id: str) -> bool:
    from mlflow import MlflowClient

    return {a.path for a in MlflowClient(uri).list_artifacts(run_id, "model")} >= {"model/test", "model/val"}


def test_a_failing_stage_is_named_and_exits_1(spark, tmp_path, capsys):
    from intent_spark.cli import main

    conf = tmp_path / "run.yaml"
    raw = tmp_path / "raw"
    raw.mkdir()
    conf.write_text(f"workdir: {tmp_path / 'work'}\ndatasets:\n  - {{name: hm, raw: {raw}}}\n")
    assert main(["run", "--conf", str(conf)]) == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("intent run: ingest of hm failed: IntentError: ")
    assert err.endswith("fix it and rerun: finished stages are skipped")


def test_the_plan_of_a_fresh_lake_runs_everything_in_the_graphs_order(tmp_path, capsys):
    from intent_spark.cli import main

    conf = write_run_conf(tmp_path)
    assert main(["run", "--plan", "--conf", str(conf)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"intent run --plan: {conf} on {tmp_path / 'work' / 'lake'}: 8 of 8 stages would run"
    stages = [
        line.split()[1:3] if line.split()[1] in ("train", "score") else line.split()[1:2] for line in out[1:]
    ]
    assert stages == [
        ["generate"], ["ingest"], ["split"], ["verify"], ["train", "popularity"],
        ["score", "popularity"], ["evaluate"], ["report"],
    ]  # fmt: skip
    assert out[1].endswith("never finished") and out[2].endswith("after generate of hm, which runs first")
    assert out[5].endswith("after verify of hm, which runs first")
    assert not (tmp_path / "work").exists()  # a plan runs nothing


def test_the_plan_of_a_finished_lake_skips_all_but_the_report(reference_run, capsys):
    from intent_spark.cli import main

    conf = reference_run.parent / "run.yaml"
    assert main(["run", "--plan", "--conf", str(conf)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].endswith(": 1 of 8 stages would run")
    assert all(line.startswith("skip ") and "inputs unchanged since 20" in line for line in out[1:-1])
    assert out[-1].split() == ["run", "report", "every", "dataset", "always", "rebuilt"]
    assert main(["run", "--plan", "--force", "--conf", str(conf)]) == 0
    assert capsys.readouterr().out.splitlines()[0].endswith(": 8 of 8 stages would run")
