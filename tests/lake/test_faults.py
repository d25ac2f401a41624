"""A shared lake's faults: two writers of one dataset, writers of two datasets side by side, damaged
tables, an MLflow server that goes away, a full disk. Each ends in one line naming the fault,
and nothing is lost or mixed. (A driver killed in each stage: test_run_resume.py.)"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import REPO_ROOT, free_port, same_tables, start_mlflow_server, stop_mlflow_server
from pyspark.sql import functions as F

from intent_spark.core import schema as S
from intent_spark.lake.tables import read_table


def _python(*argv: str, env: dict[str, str] | None = None, **kwargs) -> subprocess.Popen:
    """``python ARGV`` in its own process, from the repository, stderr captured."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")} | (env or {})
    return subprocess.Popen(
        [sys.executable, *argv],
        cwd=REPO_ROOT,
        env=clean,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        **kwargs,
    )


def _intent(*args: str, **kwargs) -> subprocess.Popen:
    """``intent ARGS`` in its own process, stderr captured."""
    return _python("-m", "intent_spark.cli", *args, **kwargs)


def _intents(*commands: list[str]) -> subprocess.Popen:
    """Several ``intent`` commands one after the other in one process of their own (one JVM),
    stopping at the first that fails."""
    script = (
        "import sys\nfrom intent_spark.cli import main\n"
        f"for words in {commands!r}:\n    if code := main(words):\n        sys.exit(code)\n"
    )
    return _python("-c", script)


def _in_thread(*commands: list[str]) -> tuple[threading.Thread, list[int]]:
    """Several ``intent`` commands one after the other in a thread of this process (its session),
    stopping at the first that fails: the second writer beside a child, for one JVM start less.
    The thread's exit codes come back in the list once it ends."""
    from intent_spark.cli import main

    codes: list[int] = []

    def run() -> None:
        for words in commands:
            codes.append(main(words))
            if codes[-1]:
                return

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, codes


def _copy_lake(reference_run: Path, to: Path) -> str:
    shutil.copytree(reference_run / "lake", to, ignore=shutil.ignore_patterns("_locks", "_stages"))
    return str(to)


def _error_line(err: str) -> str:
    """The command's own error line (progress lines start with ``[``)."""
    lines = [line for line in err.strip().splitlines() if line.startswith("intent ")]
    assert len(lines) == 1, err[-3000:]
    return lines[0]


# --- two writers -----------------------------------------------------------------------------


def test_a_second_writer_of_a_dataset_stops_naming_the_first(spark, reference_run, tmp_path, capsys):
    from intent_spark.cli import main

    lake = _copy_lake(reference_run, tmp_path / "lake")
    holder = subprocess.Popen(["sleep", "120"])
    try:
        # the record a running `intent split` of hm holds, written by hand for a live process
        locks = Path(lake) / "_locks"
        locks.mkdir()
        started = Path(f"/proc/{holder.pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
        record = {
            "command": "intent split --dataset hm --seed 9",
            "pid": holder.pid,
            "process_started": started,
            "host": socket.gethostname(),
            "started": "2026-12-02T10:00:00+00:00",
        }
        (locks / "hm.json").write_text(json.dumps(record))
        assert main(["split", "--dataset", "hm", "--lake", lake]) == 2
        err = capsys.readouterr().err.strip().splitlines()[-1]
        assert err == (
            f"intent split: error: {lake}: hm is being written by `intent split --dataset hm --seed 9` "
            f"(pid {holder.pid} on {socket.gethostname()}, since 2026-12-02T10:00:00+00:00); this command "
            f"stops rather than mix its tables with that one's (delete {locks / 'hm.json'} if that "
            "process is gone)"
        )
        # a variant is written under its source's lock, and a whole run of the dataset waits too
        assert main(["split", "--dataset", "hm.seed1", "--lake", lake]) == 2
        assert "hm is being written by" in capsys.readouterr().err
        conf = tmp_path / "run.yaml"
        conf.write_text(f"workdir: {tmp_path}\nlake: {lake}\ndatasets:\n  - {{name: hm, events: 3000}}\n")
        assert main(["run", "--conf", str(conf)]) == 2
        assert f"intent run: error: {lake}: hm is being written by `intent split" in capsys.readouterr().err
        assert not (tmp_path / "raw").exists()  # stopped before its first stage
    finally:
        holder.kill()
        holder.wait()
    # the holder is gone: its lock is taken over, and the next writer runs
    assert main(["evaluate", "--dataset", "hm", "--lake", lake, "--no-mlflow"]) == 0
    assert not (Path(lake) / "_locks" / "hm.json").exists()
    same_tables(spark, lake, str(reference_run / "lake"), "hm", [S.METRICS_TABLE])


@pytest.mark.slow
def test_two_splits_of_one_dataset_at_once_one_runs_one_stops(spark, reference_run, tmp_path, capsys):
    """The reference's split (seed 0, in a thread of this process) against another seed (a child)
    with the reference's cutoffs fixed by hand (so it cannot fail on its own): the seeds in the
    tables tell whose rows they are."""
    lake = _copy_lake(reference_run, tmp_path / "lake")
    capsys.readouterr()
    first, first_codes = _in_thread(["split", "--dataset", "hm", "--lake", lake, "--seed", "0"])
    other = ("--seed", "4", "--cutoff", "2020-08-01", "--val-cutoff", "2020-05-01")
    second = _intent("split", "--dataset", "hm", "--lake", lake, *other)
    second_code = second.wait(timeout=600)
    first.join(timeout=600)
    outcomes = [(first_codes[0], capsys.readouterr().err), (second_code, second.stderr.read())]
    codes = sorted(code for code, _ in outcomes)
    assert codes == [0, 2], [err[-2000:] for _, err in outcomes]
    stopped = next(err for code, err in outcomes if code == 2)
    winner = ("--seed 0",) if outcomes[0][0] == 0 else other
    assert f"hm is being written by `intent split --dataset hm --lake {lake} {' '.join(winner)}`" in (
        _error_line(stopped)
    )
    # the tables are the winner's alone: the reference's seed gives its holdout exactly
    seeds = {r.seed for r in read_table(spark, lake, S.SPLITS, "hm").collect()}
    assert seeds == {0 if outcomes[0][0] == 0 else 4}
    # whoever won, targets and holdout are one writer's: every target's cell says new user
    # exactly when the holdout does (one seed's targets beside the other's holdout would not)
    holdout = read_table(spark, lake, S.HOLDOUT, "hm")
    assert holdout.count() == holdout.select(S.SPLIT, S.USER_ID).distinct().count() > 0
    targets = read_table(spark, lake, S.TARGETS, "hm").join(holdout, [S.SPLIT, S.USER_ID], "left")
    assert targets.count() > 0
    assert targets.where(
        F.col(S.IS_NEW).isNull() | (F.col(S.IS_NEW) != F.col(S.CELL).startswith("new"))
    ).isEmpty()
    if seeds == {0}:
        same_tables(spark, lake, str(reference_run / "lake"), "hm", [S.HOLDOUT, S.TARGETS, S.SPLITS])


@pytest.mark.slow
def test_two_datasets_of_one_lake_are_written_side_by_side(spark, reference_run, tmp_path, capsys):
    """Two writers, one per dataset (this process in a thread, and a child), each `intent
    ingest` then `intent split` of its own: the ingests write a fresh lake at once (both create
    each table: Delta's conflict on the creation is retried), then the splits run side by side;
    each dataset equals its lone run."""
    lake = str(tmp_path / "lake")
    raw = reference_run / "raw" / "hm"
    shutil.copytree(raw, tmp_path / "raw_copy")
    commands = [
        [
            ["ingest", "--dataset", dataset, "--conf", "hm", "--raw", str(folder), "--lake", lake],
            ["split", "--dataset", dataset, "--lake", lake],
        ]
        for dataset, folder in (("hm", raw), ("hm_copy", tmp_path / "raw_copy"))
    ]
    capsys.readouterr()
    child = _intents(*commands[1])
    here, codes = _in_thread(*commands[0])
    assert child.wait(timeout=600) == 0, child.stderr.read()[-3000:]
    here.join(timeout=600)
    assert codes == [0, 0], capsys.readouterr().err[-3000:]
    reference = str(reference_run / "lake")
    same_tables(spark, lake, reference, "hm", [S.EVENTS, S.REJECTS, S.HOLDOUT, S.TARGETS])
    copy = read_table(spark, lake, S.TARGETS, "hm_copy").drop(S.DATASET)
    assert copy.exceptAll(read_table(spark, reference, S.TARGETS, "hm").drop(S.DATASET)).count() == 0
    assert copy.count() == read_table(spark, reference, S.TARGETS, "hm").count()


# --- a damaged lake --------------------------------------------------------------------------


def _data_file(lake: str, table: str) -> Path:
    return sorted((Path(lake) / table).rglob("*.parquet"))[0]


def test_verify_names_each_damaged_table_and_commands_refuse_them(spark, reference_run, tmp_path, capsys):
    from intent_spark.cli import main

    lake = _copy_lake(reference_run, tmp_path / "lake")
    truncated = _data_file(lake, S.TARGETS)
    size = truncated.stat().st_size
    truncated.write_bytes(truncated.read_bytes()[: size // 2])  # a partial copy
    deleted = _data_file(lake, S.RANKS)
    deleted.unlink()  # behind Delta's back
    log = Path(lake) / S.METRICS_TABLE / "_delta_log"
    newest = max(log.glob("*.json"))
    newest.unlink()  # the newest commit's entry
    relative = lambda p, t: str(p.relative_to(Path(lake) / t))  # noqa: E731

    assert main(["verify", "--lake", lake]) == 1
    err = capsys.readouterr().err
    fails = [line.split("] ", 1)[1] for line in err.splitlines() if "] FAIL " in line]
    version = len(list((Path(lake) / S.TARGETS / "_delta_log").glob("*.json"))) - 1
    targets_line = (
        f"{lake}/{S.TARGETS}: damaged: data file {relative(truncated, S.TARGETS)} is {size // 2:,} bytes, "
        f"version {version} committed {size:,} (truncated or overwritten)"
    )
    ranks_line = f"{lake}/{S.RANKS}: damaged: data file {relative(deleted, S.RANKS)} is missing (deleted behind Delta's back)"
    left = (
        f"the table would read as version {int(newest.stem) - 1}"
        if int(newest.stem)
        else "no version of the table can be read"
    )
    metrics_line = (
        f"{lake}/{S.METRICS_TABLE}: damaged: _delta_log: commit {newest.name} missing, its checksum file "
        f"left behind ({left})"
    )
    assert fails[:3] == [f"FAIL {metrics_line}", f"FAIL {ranks_line}", f"FAIL {targets_line}"], err
    assert fails[3].startswith("FAIL hm: checks not run: ") and len(fails) == 4, fails
    assert "intent verify: failed: metrics (damaged), ranks (damaged), targets (damaged)" in err
    assert "ok   events whole (its files match its Delta log)" in err

    # other commands stop with the same line rather than compute on the damaged table
    out = tmp_path / "export"
    assert main(["export", "--dataset", "hm", "--lake", lake, "--out", str(out)]) == 2
    refused = capsys.readouterr().err.strip().splitlines()[-1]
    assert refused in {f"intent export: error: {line}" for line in (targets_line, ranks_line, metrics_line)}
    assert main(["evaluate", "--dataset", "hm", "--lake", lake, "--no-mlflow"]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith(f"intent evaluate: error: {lake}/")
    assert not out.exists() or not list(out.rglob("*.parquet"))


def test_an_edited_checksum_manifest_fails_verify_naming_the_table(spark, reference_run, tmp_path, capsys):
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F

    from intent_spark.cli import main

    lake = _copy_lake(reference_run, tmp_path / "lake")
    manifest = DeltaTable.forPath(spark, f"{lake}/{S.CHECKSUMS}")
    before = read_table(spark, lake, S.CHECKSUMS, "hm").where(F.col("table") == S.HOLDOUT).first()
    manifest.update(F.col("table") == S.HOLDOUT, {"checksum": F.lit("12345")})
    assert main(["verify", "--lake", lake]) == 1
    err = capsys.readouterr().err
    fails = [line.split("] ", 1)[1] for line in err.splitlines() if "] FAIL " in line]
    assert fails == [
        f"FAIL hm - checksum_holdout: 1 violation(s), manifest ({before.rows}, '12345') but recomputed "
        f"({before.rows}, '{before.checksum}')"
    ]


# --- MLflow goes away ------------------------------------------------------------------------


# what training, scoring and evaluating write: absent from a lake finished up to training
AFTER_TRAINING = (
    "catalogue", "train_sequences", "score_events", "model_inputs", "ranks", "user_metrics", "metrics",
    "comparisons", "_staging",
)  # fmt: skip


def _finished_until_training(reference_run: Path, to: Path) -> None:
    """The reference's lake as it stood after verify, its stages before training recorded as
    finished: a run of the same dataset skips ingest, split and verify and trains first, and
    every later table holds only what that run writes."""
    shutil.copytree(reference_run / "lake", to, ignore=shutil.ignore_patterns("_locks", *AFTER_TRAINING))
    record = to / "_stages" / "hm.json"
    stages = json.loads(record.read_text())
    record.write_text(json.dumps({k: v for k, v in stages.items() if k in ("ingest", "split", "verify")}))


@pytest.mark.slow
def test_mlflow_stopped_mid_run_fails_the_stage_in_one_line_and_a_rerun_continues(
    spark, reference_run, tmp_path, capsys
):
    """The run that MLflow leaves is a child (its fault point waits for the server to stop); the
    rerun is ``intent run`` in this process, on this session."""
    from mlflow import MlflowClient

    from intent_spark.cli import main
    from intent_spark.core.faults import FAULT_ENV
    from intent_spark.lake.tracking import experiment_id

    port = free_port()
    uri = f"http://127.0.0.1:{port}"
    work = tmp_path / "work"
    _finished_until_training(reference_run, work / "lake")
    conf = tmp_path / "run.yaml"
    conf.write_text(
        f"workdir: {work}\nseed: 3\ntracking_uri: {uri}\n"
        f"datasets:\n  - {{name: hm, raw: {reference_run / 'raw' / 'hm'}}}\nmodels: [popularity]\n"
    )
    server = start_mlflow_server(port, tmp_path)
    go = tmp_path / "go"
    try:
        run = _intent("run", "--conf", str(conf), env={FAULT_ENV: f"train.fitted:wait:{go}"})
        deadline = time.monotonic() + 600
        while not go.with_name("go.reached").exists():
            assert run.poll() is None, run.stderr.read()[-3000:]
            assert time.monotonic() < deadline
            time.sleep(0.2)
        stop_mlflow_server(server)  # the model is fitted, its run open: the store goes away
        go.touch()
        assert run.wait(timeout=300) == 1
        err = run.stderr.read()
        assert "hm: verify skipped (inputs unchanged since it finished)" in err, err[-3000:]
        line = _error_line(err)
        assert line == (
            f"intent run: train popularity of hm failed: IntentError: MLflow at {uri} is unreachable "
            "(connection refused); start it, or point --tracking-uri elsewhere, and rerun: no run of "
            "this stage was logged as finished; fix it and rerun: finished stages are skipped"
        )
        server = start_mlflow_server(port, tmp_path)  # back, with the same store
        client = MlflowClient(uri)
        statuses = {r.info.run_id: r.info.status for r in client.search_runs([experiment_id(uri)])}
        assert "FINISHED" not in statuses.values(), statuses
        capsys.readouterr()
        assert main(["run", "--conf", str(conf)]) == 0
        assert "hm: train popularity resumed" in capsys.readouterr().err
        runs = client.search_runs([experiment_id(uri)])
        trains = [r for r in runs if r.data.tags.get("intent.stage") == "train"]
        assert sorted(r.info.status for r in trains) == ["FAILED", "FINISHED"]  # the abandoned one closed
        finished = next(r for r in trains if r.info.status == "FINISHED")
        assert {a.path for a in client.list_artifacts(finished.info.run_id, "model")} == {
            "model/test",
            "model/val",
        }
        same_tables(spark, str(work / "lake"), str(reference_run / "lake"), "hm", [S.RANKS, S.METRICS_TABLE])
    finally:
        stop_mlflow_server(server)


# --- a full disk -----------------------------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path):
    """A 16 MiB tmpfs (root only: mount needs it); skipped where it cannot be mounted."""
    mount = tmp_path / "small"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mount)], capture_output=True, text=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs for the full-disk test: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _fill(mount: Path, leave: int) -> Path:
    """A file taking all but ``leave`` bytes of the disk."""
    free = shutil.disk_usage(mount).free
    filler = mount / "filler"
    with filler.open("wb") as sink:
        sink.truncate(0)
        chunk = b"\0" * (1 << 20)
        left = free - leave
        while left > 0:
            sink.write(chunk[: min(left, len(chunk))])
            left -= len(chunk)
    return filler


def test_a_full_disk_stops_a_write_in_one_line_and_keeps_the_previous_version(
    spark, reference_run, small_disk, capsys
):
    """Ingest again with 16 KiB left: whichever of its tables runs out of room names itself and
    keeps its version; the tables written before it are whole (same rows as the reference)."""
    from intent_spark.cli import main

    lake = str(small_disk / "lake")
    raw = str(reference_run / "raw" / "hm")
    tables = [S.EVENTS, S.REJECTS, S.ITEMS, S.USERS, S.INGEST_FILES]
    assert main(["ingest", "--dataset", "hm", "--raw", raw, "--lake", lake]) == 0
    capsys.readouterr()

    def version(table: str) -> int:
        return max(int(p.stem) for p in (Path(lake) / table / "_delta_log").glob("*.json"))

    before = {table: version(table) for table in tables}
    filler = _fill(small_disk, leave=16 << 10)
    assert main(["ingest", "--dataset", "hm", "--raw", raw, "--lake", lake]) == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    failed = re.fullmatch(rf"intent ingest: error: {re.escape(lake)}/(\w+): writing hm failed: .*", line)
    assert failed and failed.group(1) in tables, line
    table = failed.group(1)
    assert line == (
        f"intent ingest: error: {lake}/{table}: writing hm failed: no space left on device; nothing "
        f"of this write was committed, the table keeps its version {before[table]}, as before"
    )
    filler.unlink()
    assert version(table) == before[table]
    assert all(version(t) >= before[t] for t in tables)
    assert not (Path(lake) / "_locks" / "hm.json").exists()
    same_tables(spark, lake, str(reference_run / "lake"), "hm", tables)
    # room again: the same command goes through
    assert main(["ingest", "--dataset", "hm", "--raw", raw, "--lake", lake]) == 0
    assert version(table) > before[table]
    same_tables(spark, lake, str(reference_run / "lake"), "hm", tables)
