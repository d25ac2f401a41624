"""`intent run` skips stages whose inputs are unchanged, names the stage that failed, and after
its driver is killed a rerun resumes there and ends with the same tables."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import same_tables, write_run_conf

from intent_spark.pipeline.stages import StageFailed, StageLog, fingerprint

REPO = Path(__file__).resolve().parent.parent


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
    # the failed attempt removed the old record: nothing looks finished that did not finish
    assert "split" not in json.loads((tmp_path / "lake" / "_stages" / "d.json").read_text())
    assert fingerprint("x", [1, 2]) == fingerprint("x", [1, 2]) != fingerprint("x", [2, 1])


def _run(conf: Path, *extra: str, **kwargs) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    command = [sys.executable, "-m", "intent_spark.cli", "run", "--conf", str(conf), *extra]
    return subprocess.Popen(
        command, cwd=REPO, env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, **kwargs
    )


@pytest.mark.slow
def test_a_killed_run_resumes_where_it_stopped_and_ends_identical(spark, reference_run, tmp_path):
    from intent_spark.core import schema as S

    conf = write_run_conf(tmp_path / "killed")
    record = tmp_path / "killed" / "work" / "lake" / "_stages" / "hm.json"
    first = _run(conf, start_new_session=True)
    deadline = time.monotonic() + 300
    while not (record.exists() and "ingest" in json.loads(record.read_text() or "{}")):
        assert first.poll() is None, first.stderr.read()[-2000:]
        assert time.monotonic() < deadline, "ingest did not finish within 300 s"
        time.sleep(0.1)
    os.killpg(first.pid, signal.SIGKILL)  # the driver and its JVM, in the split stage
    first.wait(timeout=60)
    assert set(json.loads(record.read_text())) == {"generate", "ingest"}

    second = _run(conf)
    _, err = second.communicate(timeout=600)
    assert second.returncode == 0, err[-3000:]
    for stage in ("generate", "ingest"):
        assert f"hm: {stage} skipped (inputs unchanged since it finished)" in err
    assert "hm: split skipped" not in err and "done: report at" in err

    lake = str(tmp_path / "killed" / "work" / "lake")
    same_tables(
        spark, lake, str(reference_run / "lake"), "hm", [S.HOLDOUT, S.TARGETS, S.RANKS, S.METRICS_TABLE]
    )


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
    assert out[5].endswith("after split of hm, which runs first")
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
