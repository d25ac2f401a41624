"""The lake and the raw releases on an S3-API object store: moto's standalone S3 server on
127.0.0.1, reached by the driver and the training processes through pyarrow's S3 filesystem
(files written and read back, Petastorm's row groups included), and each fault of the store (a
missing bucket, a store that does not answer, a report sent to it) refused in one line naming
the URI. The whole chain on an s3a:// lake, with the store stopped in the middle of a write,
training and scoring in two processes and MLflow's artifacts on the store; the lake's lock as a
conditional create."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import suppress
from pathlib import Path

import pyarrow.fs as pafs
import pytest
from conftest import REPO_ROOT, free_port, same_tables
from pyspark.sql import functions as F

from intent_spark.core.datasets import DatasetRef, parse_dataset
from intent_spark.lake.context import Lake
from intent_spark.lake.files import store_filesystem
from intent_spark.lake.session import JARS_DIR

BUCKET = "intent-lake"


def _missing() -> str | None:
    if importlib.util.find_spec("moto") is None:
        return "moto's S3 server is not installed (make setup-s3 installs the [s3] extra)"
    if not list(JARS_DIR.glob("hadoop-aws-*.jar")):
        return f"hadoop-aws is not in {JARS_DIR} (make setup-s3 fetches it)"
    return None


def start_store(port: int, log: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    """moto's S3 server on 127.0.0.1:PORT in its own process group, once it accepts connections."""
    with log.open("ab") as err:
        server = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=subprocess.DEVNULL,
            stderr=err,
            start_new_session=True,
            env={**os.environ, **(env or {})},
        )
    deadline = time.monotonic() + 60
    while True:
        with suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            return server
        assert server.poll() is None, log.read_text(errors="replace")[-2000:]
        assert time.monotonic() < deadline, "moto's server did not listen within 60 s"
        time.sleep(0.2)


def stop_store(server: subprocess.Popen) -> None:
    with suppress(ProcessLookupError):
        os.killpg(server.pid, 9)
    server.wait(timeout=30)


class StoreRelay:
    """A TCP relay in front of the store, so the store can stop answering and come back with its
    objects (moto keeps them in memory only). ``stop`` resets every connection and refuses new
    ones, as a server gone down does; ``start`` listens again on the same port. Armed with a
    request marker (a pattern), it stops itself once the store has answered the first request
    that matches it."""

    def __init__(self, store_port: int) -> None:
        self.port, self.store_port = free_port(), store_port
        self.marker: re.Pattern[bytes] | None = None
        self.cut_after_answer = threading.Event()
        self.stopped = threading.Event()
        self.listener: socket.socket | None = None
        self.open: list[socket.socket] = []
        self.guard = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.stopped.clear()
        self.cut_after_answer.clear()
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self.listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def stop(self) -> None:
        self.stopped.set()
        with self.guard:
            if self.listener is not None:
                self.listener.close()
                self.listener = None
            for sock in self.open:
                with suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                    sock.close()
            self.open.clear()

    def _accept(self, listener: socket.socket) -> None:
        while not self.stopped.is_set():
            try:
                client, _ = listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.store_port))
            with self.guard:
                if self.stopped.is_set():
                    client.close()
                    server.close()
                    return
                self.open += [client, server]
            pair = [client, server]
            threading.Thread(target=self._pump, args=(client, server, True, pair), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, False, pair), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, asking: bool, pair: list) -> None:
        with suppress(OSError):
            while data := source.recv(1 << 16):
                if asking and self.marker is not None and self.marker.search(data):
                    self.cut_after_answer.set()
                sink.sendall(data)
                # the answer, not the "100 Continue" the SDK waits for before the body
                if not asking and self.cut_after_answer.is_set() and not data.startswith(b"HTTP/1.1 100"):
                    self.stop()
                    return
        with suppress(OSError):
            sink.shutdown(socket.SHUT_WR)
        # the second direction to end closes the connection: a long chain makes thousands
        with self.guard:
            pair.append(None)
            if pair.count(None) == 2:
                for sock in pair[:2]:
                    with suppress(OSError, ValueError):
                        sock.close()
                        self.open.remove(sock)


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory) -> Iterator[str]:
    """A fresh server with an empty bucket; the process's AWS variables point at it for the module."""
    reason = _missing()
    if reason:
        pytest.skip(reason)
    from intent_spark.lake import files

    port = free_port()
    server = start_store(port, tmp_path_factory.mktemp("store") / "moto.log")
    names = {
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
        "AWS_ACCESS_KEY_ID": "intent",
        "AWS_SECRET_ACCESS_KEY": "intent-secret",
        "AWS_REGION": "us-east-1",
    }
    before = {name: os.environ.get(name) for name in names}
    os.environ.update(names)
    pafs.S3FileSystem(
        endpoint_override=f"127.0.0.1:{port}", scheme="http", region="us-east-1", allow_bucket_creation=True
    ).create_dir(BUCKET)
    try:
        yield names["AWS_ENDPOINT_URL"]
    finally:
        stop_store(server)
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        files._store.cache_clear()


@pytest.mark.slow
def test_the_chain_on_the_store_equals_the_local_chain(endpoint, reference_run, spark, tmp_path, capsys):
    """The reference run's release uploaded to ``s3a://BUCKET/raw``, then `intent run` of the same
    conf with its lake at ``s3a://BUCKET/lake`` and the report on a local folder. The store stops
    in the middle of the targets write (after it has stored a data file of ``targets``, before
    the commit); `intent run` fails in one line with nothing of ``targets`` committed, and once
    the store is back a rerun resumes the split. Then every table equals the local chain's row
    for row, read back here through S3A; GRU4Rec is trained and scored by two processes against
    the store, its MLflow artifacts on the store, and ranks every target as the same model does
    scored by one process on a local copy of the lake; `intent export` from the store writes the
    local lake's bytes, and `intent submit` against it scores every test target. The failed run is
    a child (the relay is its endpoint), so that the lock it leaves on the store is a gone
    process's, which the rerun takes over; the rerun and every later command run in this process,
    straight against the store, on this session."""
    from conftest import CHAIN_TABLES

    from intent_spark.lake.session import store_conf

    fs = store_filesystem()
    raw = reference_run / "raw" / "hm"
    for path in sorted(p for p in raw.rglob("*") if p.is_file()):
        with fs.open_output_stream(f"{BUCKET}/raw/hm/{path.relative_to(raw)}") as sink:
            sink.write(path.read_bytes())
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    conf = tmp_path / "run.yaml"
    conf.write_text(
        f"workdir: {tmp_path / 'work'}\nlake: s3a://{BUCKET}/lake\nseed: 3\ntracking_uri: {uri}\n"
        f"datasets:\n  - {{name: hm, raw: s3a://{BUCKET}/raw/hm}}\nmodels: [popularity]\n"
    )
    relay = StoreRelay(int(endpoint.rsplit(":", 1)[1]))
    relay.start()

    def intent(*args: str, ok: bool = True) -> subprocess.CompletedProcess:
        env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
        started = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "intent_spark.cli", *args],
            cwd=REPO_ROOT,
            env={**env, "AWS_ENDPOINT_URL": relay.url},
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert (done.returncode == 0) == ok, (args, done.stderr[-3000:])
        print(f"intent {args[0]}: {time.monotonic() - started:.1f}s")
        return done

    # the store goes down once it has taken the first data file of targets
    # (a data file's PUT: S3A may first PUT the partition folder's empty marker)
    relay.marker = re.compile(rf"PUT /{BUCKET}/lake/targets/dataset\S*/part-".encode())
    # S3A retries a refused connection for minutes by default (retry.limit 7, SDK attempts 5)
    fail_fast = ["fs.s3a.retry.limit=1", "fs.s3a.attempts.maximum=1", "fs.s3a.retry.throttle.limit=1"]
    fail_fast_args = [arg for key in fail_fast for arg in ("--spark-conf", f"spark.hadoop.{key}")]
    failed = intent("run", "--conf", str(conf), *fail_fast_args, ok=False)
    assert relay.stopped.is_set(), failed.stderr[-3000:]
    line = failed.stderr.strip().splitlines()[-1]
    print("the store stopped mid-write:", line)
    assert re.fullmatch(
        rf"intent run: split of hm failed: s3a://{BUCKET}/lake/targets\S*: the store does not answer at "
        rf"{relay.url}; the command stopped there, each table keeps its last committed version.*",
        line,
    ), failed.stderr[-3000:]
    stored = [info.path for info in fs.get_file_info(pafs.FileSelector(f"{BUCKET}/lake", recursive=True))]
    assert any(p.startswith(f"{BUCKET}/lake/targets/dataset=hm/part-") for p in stored), stored  # mid-write
    assert not any(p.startswith(f"{BUCKET}/lake/targets/_delta_log/") and p.endswith(".json") for p in stored)
    assert any(p.startswith(f"{BUCKET}/lake/holdout/_delta_log/") for p in stored)  # written before it
    relay.stop()

    from intent_spark.cli import main

    lake = f"s3a://{BUCKET}/lake"
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()
    for key, value in store_conf().items():  # this session was built before the store started
        hadoop.set(key.removeprefix("spark.hadoop."), value)
    hadoop.set("fs.s3a.access.key", os.environ["AWS_ACCESS_KEY_ID"])  # its JVM's environment has none
    hadoop.set("fs.s3a.secret.key", os.environ["AWS_SECRET_ACCESS_KEY"])
    capsys.readouterr()
    assert main(["run", "--conf", str(conf)]) == 0
    resumed = capsys.readouterr().err
    assert "hm: took over the lock of `intent run" in resumed, resumed[-3000:]  # the failed run's
    assert "hm: split resumed" in resumed, resumed[-3000:]
    assert "hm: no split report: a lake on an object store keeps none" in resumed
    assert (tmp_path / "work" / "report" / "report.html").is_file()
    same_tables(spark, lake, str(reference_run / "lake"), "hm", list(CHAIN_TABLES))
    if os.environ.get("INTENT_PRINT_CHECKSUMS"):  # the side-by-side table, read with pytest -s
        _print_checksums_side_by_side(spark, str(reference_run / "lake"), lake, CHAIN_TABLES)

    # two training and two scoring processes against the store; the model's artifacts on it
    import shutil

    from mlflow import MlflowClient

    from intent_spark.core import schema as S
    from intent_spark.lake.tables import read_table
    from intent_spark.lake.tracking import find_run
    from intent_spark.train.conf import load_models_conf
    from intent_spark.train.score import score

    gru = ["--dataset", "hm", "--lake", lake, "--model", "gru4rec", "--tracking-uri", uri, "--processes", "2"]
    capsys.readouterr()
    assert main(["train", *gru, "--steps", "5"]) == 0
    assert "training in 2 processes" in capsys.readouterr().err
    assert main(["score", *gru]) == 0
    trained = find_run(uri, "hm", "gru4rec")
    assert trained is not None and trained.info.artifact_uri.startswith(f"s3://{BUCKET}/mlartifacts/")
    artifacts = fs.get_file_info(
        pafs.FileSelector(trained.info.artifact_uri.removeprefix("s3://"), recursive=True)
    )
    assert any(info.base_name.endswith(".pt") for info in artifacts), [i.path for i in artifacts]
    assert MlflowClient(uri).get_run(trained.info.run_id).data.params["processes"] == "2"
    local = str(tmp_path / "local_lake")
    shutil.copytree(reference_run / "lake", local, ignore=shutil.ignore_patterns("_locks", "_stages"))
    score(
        Lake(spark, local, uri), DatasetRef("hm"), "gru4rec", load_models_conf(), run_id=trained.info.run_id
    )
    ranked = [
        read_table(spark, where, S.RANKS, "hm").where(F.col(S.MODEL) == "gru4rec") for where in (lake, local)
    ]
    assert ranked[0].count() == ranked[1].count() > 0
    assert ranked[0].exceptAll(ranked[1]).count() == 0 == ranked[1].exceptAll(ranked[0]).count()

    # exported from the store, the tasks are the local lake's bytes; a list submitted against the
    # store lake is scored for every test target
    import pyarrow as pa
    import pyarrow.parquet as pq

    from intent_spark.exchange.tasks import export_tasks

    export_tasks(
        Lake(spark, str(reference_run / "lake")), DatasetRef("hm"), str(tmp_path / "local"), splits=["test"]
    )
    assert (
        main(
            ["export", "--dataset", "hm", "--lake", lake, "--out", str(tmp_path / "tasks"), "--split", "test"]
        )
        == 0
    )
    for name in ("tasks.parquet", "catalogue.parquet", "train.parquet"):
        exported, copied = tmp_path / "tasks" / "test" / name, tmp_path / "local" / "test" / name
        assert exported.read_bytes() == copied.read_bytes(), name
    ids = pq.read_table(tmp_path / "tasks" / "test" / "tasks.parquet").column("target_id").to_pylist()
    first = (
        pq.read_table(tmp_path / "tasks" / "test" / "catalogue.parquet").column("item_id").to_pylist()[:10]
    )
    pq.write_table(pa.table({"target_id": ids, "items": [first] * len(ids)}), tmp_path / "first10.parquet")
    submit = ["submit", "--dataset", "hm", "--lake", lake, "--name", "first10", "--tracking-uri", uri]
    assert main([*submit, "--predictions", str(tmp_path / "first10.parquet"), "--strict"]) == 0
    ranks = read_table(spark, lake, S.RANKS, "hm").where(F.col(S.MODEL) == "first10")
    test_targets = read_table(spark, str(reference_run / "lake"), S.TARGETS, "hm").where(
        F.col(S.SPLIT) == S.TEST
    )
    assert ranks.count() == test_targets.count() == len(ids) > 0


def _print_checksums_side_by_side(spark, local: str, store: str, tables) -> None:
    """bench/lake_checksums.py's sums of both lakes, one line per table and group. ``ingest_files``
    names each lake's own copy of the raw file, and a mean's last bits follow its sum's order, so
    those sums may differ where ``same_tables`` (names, doubles to 1e-12) finds the rows equal."""
    sys.path.insert(0, str(REPO_ROOT / "bench"))
    from lake_checksums import checksums

    print("\n| table | group | rows | local lake | store lake |\n|---|---|---:|---:|---:|")
    for table in tables:
        for (name, group, rows, left), (_, _, rows_store, right) in zip(
            checksums(spark, local, table), checksums(spark, store, table), strict=True
        ):
            same = "=" if left == right and rows == rows_store else "DIFFERS"
            print(f"| {name} | {group} | {rows} | {left} | {right} {same} |")


def test_petastorm_and_the_driver_read_and_write_the_store(endpoint):
    """Files the driver writes through pyarrow, found by ingest's listing and read back by the
    Petastorm readers, row groups and all (the values written here by hand)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from intent_spark.ingest.files import find_files
    from intent_spark.train.distributed import read_json, write_text
    from intent_spark.train.readers import read_columns, row_groups

    fs = store_filesystem()
    for name, values in (("a", [3, 1, 2]), ("b", [7])):
        with fs.open_output_stream(f"{BUCKET}/parts/{name}.parquet") as sink:
            pq.write_table(pa.table({"item": values}), sink, row_group_size=2)
    write_text(f"s3a://{BUCKET}/parts/counts.json", '{"rows": 4}')
    urls = find_files(f"s3a://{BUCKET}/parts", ("*.parquet",), "part")
    assert urls == [f"s3a://{BUCKET}/parts/a.parquet", f"s3a://{BUCKET}/parts/b.parquet"]
    assert read_columns(urls, ["item"])["item"].tolist() == [3, 1, 2, 7]
    assert row_groups(urls) == 3
    assert read_json(f"s3a://{BUCKET}/parts/counts.json") == {"rows": 4}


def test_a_report_on_the_store_is_refused_in_one_line(endpoint, capsys):
    from intent_spark.cli import main

    out = f"s3a://{BUCKET}/report"
    assert main(["report", "--lake", f"s3a://{BUCKET}/lake", "--out", out]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"intent report: error: {out}: the report is built aside and moved into place by a rename, "
        "which an object store has not; give --out a local folder or a Volume"
    )


def test_pyarrows_error_from_an_unreachable_store_is_one_line_naming_the_uri(endpoint, monkeypatch):
    from intent_spark.ingest.files import find_files
    from intent_spark.lake import files

    gone = f"http://127.0.0.1:{free_port()}"
    monkeypatch.setenv("AWS_ENDPOINT_URL", gone)
    files._store.cache_clear()
    try:
        with pytest.raises(OSError) as raised:
            find_files(f"s3a://{BUCKET}/raw/hm", ("*.csv",), "transactions")
    finally:
        files._store.cache_clear()
    assert files.store_error(raised.value) == (
        f"s3a://{BUCKET}/raw/hm: the store does not answer at {gone}; the command stopped there, each table keeps its last committed version"
    )
    assert files.store_error(OSError("No such file or directory")) is None


def test_an_unreachable_store_or_a_missing_bucket_is_one_line_naming_the_uri(
    endpoint, spark, tmp_path, capsys, monkeypatch
):
    from intent_spark.cli import main
    from intent_spark.lake import files

    lake = tmp_path / "lake"
    ingest = ["ingest", "--dataset", "hm", "--lake", str(lake), "--raw"]
    assert main([*ingest, "s3a://no-such-bucket/raw/hm"]) == 2
    assert (
        capsys.readouterr()
        .err.strip()
        .splitlines()[-1]
        .startswith("intent ingest: error: s3a://no-such-bucket/raw/hm: source folder not found")
    )
    gone = f"http://127.0.0.1:{free_port()}"
    monkeypatch.setenv("AWS_ENDPOINT_URL", gone)
    files._store.cache_clear()
    try:
        assert main([*ingest, f"s3a://{BUCKET}/raw/hm"]) == 2
    finally:
        files._store.cache_clear()
    line = capsys.readouterr().err.strip().splitlines()[-1]
    print(line)
    assert line == (
        f"intent ingest: error: s3a://{BUCKET}/raw/hm: the store does not answer at {gone}; "
        "the command stopped there, each table keeps its last committed version"
    )
    assert not (lake / "events").exists()


def _lock_object(key: str) -> dict | None:
    """The lock object's holder as the store has it (read here by boto3, not by the lock's code)."""
    import boto3
    from botocore.exceptions import ClientError

    client = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"], region_name="us-east-1")
    try:
        return json.loads(client.get_object(Bucket=BUCKET, Key=key)["Body"].read())
    except ClientError:
        return None


def test_a_lake_on_the_store_is_locked_by_a_conditional_create(endpoint):
    """The lock of a store lake is an object that exists only while its writer runs; a second
    writer of the same source stops in one line naming the first, another source proceeds."""
    from intent_spark.core.errors import IntentError
    from intent_spark.lake.locks import dataset_lock

    lake = f"s3a://{BUCKET}/locked/lake"
    with dataset_lock(lake, [parse_dataset("hm.seed1")], "intent split --dataset hm.seed1"):
        held = _lock_object("locked/lake/_locks/hm.json")
        assert held is not None and held["pid"] == os.getpid()
        assert held["command"] == "intent split --dataset hm.seed1"
        with pytest.raises(IntentError) as second:
            dataset_lock(lake, [parse_dataset("hm")], "intent ingest --dataset hm").__enter__()
        assert str(second.value).startswith(
            f"{lake}: hm is being written by `intent split --dataset hm.seed1` (pid {os.getpid()} on "
        )
        assert str(second.value).endswith(
            f"this command stops rather than mix its tables with that one's (delete {lake}/_locks/hm.json "
            "if that process is gone)"
        )
        assert _lock_object("locked/lake/_locks/hm.json") == held  # the refused writer left it as it was
        with dataset_lock(lake, [parse_dataset("rees46")], "intent split --dataset rees46"):
            assert (
                _lock_object("locked/lake/_locks/rees46.json")["command"] == "intent split --dataset rees46"
            )
    assert _lock_object("locked/lake/_locks/hm.json") is None
    assert _lock_object("locked/lake/_locks/rees46.json") is None


def test_a_dead_holders_lock_on_the_store_is_taken_over(endpoint):
    from intent_spark.lake.locks import dataset_lock

    gone = {"command": "intent split --dataset hm", "pid": 2**22 + 7, "host": socket.gethostname()}
    with store_filesystem().open_output_stream(f"{BUCKET}/dead/lake/_locks/hm.json") as sink:
        sink.write(json.dumps(gone).encode())
    seen: list[str] = []
    with dataset_lock(
        f"s3a://{BUCKET}/dead/lake", [parse_dataset("hm")], "intent split --dataset hm --seed 2", seen.append
    ):
        assert _lock_object("dead/lake/_locks/hm.json")["command"] == "intent split --dataset hm --seed 2"
    assert seen == [
        f"hm: took over the lock of `intent split --dataset hm` (pid {2**22 + 7} on {socket.gethostname()}, "
        "since ?), which is gone"
    ]
    assert _lock_object("dead/lake/_locks/hm.json") is None


def test_a_lock_on_an_unreachable_store_is_one_line(endpoint, monkeypatch):
    from intent_spark.core.errors import IntentError
    from intent_spark.lake.locks import dataset_lock

    gone = f"http://127.0.0.1:{free_port()}"
    monkeypatch.setenv("AWS_ENDPOINT_URL", gone)
    with pytest.raises(IntentError) as raised:
        dataset_lock(f"s3a://{BUCKET}/lake", [parse_dataset("hm")], "intent split --dataset hm").__enter__()
    assert str(raised.value) == (
        f"s3a://{BUCKET}/lake/_locks/hm.json: the store does not answer at {gone}; "
        "the command stopped before writing anything"
    )


@pytest.fixture
def checking_store(tmp_path) -> Iterator[tuple[str, dict[str, str]]]:
    """A server that checks credentials (moto's IAM: the first three requests create a user, its
    policy and its key, every later one must be signed by a key it knows), holding a bucket with
    one raw file; its endpoint and the user's good credentials."""
    reason = _missing()
    if reason:
        pytest.skip(reason)
    import boto3

    port = free_port()
    server = start_store(port, tmp_path / "moto.log", {"INITIAL_NO_AUTH_ACTION_COUNT": "3"})
    endpoint = f"http://127.0.0.1:{port}"
    try:
        iam = boto3.client(
            "iam", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="setup",
            aws_secret_access_key="setup",
        )  # fmt: skip
        iam.create_user(UserName="intent")
        iam.put_user_policy(
            UserName="intent",
            PolicyName="everything",
            PolicyDocument='{"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}',
        )
        key = iam.create_access_key(UserName="intent")["AccessKey"]
        good = {"AWS_ACCESS_KEY_ID": key["AccessKeyId"], "AWS_SECRET_ACCESS_KEY": key["SecretAccessKey"]}
        store = pafs.S3FileSystem(
            access_key=good["AWS_ACCESS_KEY_ID"], secret_key=good["AWS_SECRET_ACCESS_KEY"],
            endpoint_override=f"127.0.0.1:{port}", scheme="http", region="us-east-1",
            allow_bucket_creation=True,
        )  # fmt: skip
        store.create_dir(BUCKET)
        with store.open_output_stream(f"{BUCKET}/raw/hm/transactions_train.csv") as sink:
            sink.write(b"t_dat,customer_id,article_id,price,sales_channel_id\n")
        yield endpoint, good
    finally:
        stop_store(server)


@pytest.mark.parametrize("wrong", ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"])
def test_a_wrong_credential_is_one_line_naming_the_uri_and_commits_nothing(
    checking_store, wrong, tmp_path, capsys, monkeypatch
):
    """The raw folder of a store that refuses the key (an unknown access key, or a secret that
    does not sign for it): refused before Spark starts, no lake written. With the user's own
    credentials the same folder is found (the refusal is the credential's)."""
    from intent_spark.cli import main
    from intent_spark.ingest.files import check_source_folder
    from intent_spark.lake import files

    endpoint, good = checking_store
    raw, lake = f"s3a://{BUCKET}/raw/hm", tmp_path / "lake"
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    for name, value in good.items():
        monkeypatch.setenv(name, value)
    files._store.cache_clear()
    try:
        assert check_source_folder(raw)[1] == f"{BUCKET}/raw/hm"
        monkeypatch.setenv(wrong, "not-the-right-one")
        files._store.cache_clear()
        assert main(["ingest", "--dataset", "hm", "--lake", str(lake), "--raw", raw]) == 2
    finally:
        files._store.cache_clear()
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"intent ingest: error: {raw}: access denied (the credentials: AWS_ACCESS_KEY_ID and "
        "AWS_SECRET_ACCESS_KEY); the command stopped there, each table keeps its last committed version"
    )
    assert not list(lake.glob("*/_delta_log"))  # no table was created


def test_s3as_errors_through_spark_are_one_line_naming_the_uri(monkeypatch):
    """The JVM's words for a store fault (S3A inside a Py4JJavaError's text), read as pyarrow's are."""
    from intent_spark.lake.files import store_error

    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    call = "An error occurred while calling o2600.save.\n: org.apache.hadoop.fs.s3a.AWSClientIOException: "
    refused = (
        f"{call}getFileStatus on s3a://{BUCKET}/lake/targets.: software.amazon.awssdk.core.exception."
        "SdkClientException: Unable to execute HTTP request: Connect to 127.0.0.1:9 failed: Connection refused"
    )
    denied = f"{call}PUT 0-byte object on s3a://{BUCKET}/lake/events/x: AccessDenied (Service: S3, Status Code: 403)"
    assert store_error(Exception(refused)) == (
        f"s3a://{BUCKET}/lake/targets: the store does not answer at http://127.0.0.1:9; "
        "the command stopped there, each table keeps its last committed version"
    )
    assert store_error(Exception(denied)) == (
        f"s3a://{BUCKET}/lake/events/x: access denied (the credentials: AWS_ACCESS_KEY_ID and "
        "AWS_SECRET_ACCESS_KEY); the command stopped there, each table keeps its last committed version"
    )
    assert store_error(Exception(f"{call}java.lang.ArithmeticException: / by zero")) is None
    assert store_error(Exception("Connection refused by the MLflow server at http://127.0.0.1:5000")) is None
