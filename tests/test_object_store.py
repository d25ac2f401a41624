"""The lake and the raw releases on an S3-API object store: moto's standalone S3 server on
127.0.0.1, reached by the driver and the training processes through pyarrow's S3 filesystem
(files written and read back, Petastorm's row groups included), and each fault of the store (a
missing bucket, a store that does not answer, a report sent to it) refused in one line naming
the URI. The whole chain on an s3a:// lake is not tested yet."""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import suppress
from pathlib import Path

import pyarrow.fs as pafs
import pytest
from conftest import free_port, same_tables

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
def test_the_chain_on_the_store_equals_the_local_chain(endpoint, reference_run, spark, tmp_path):
    """The reference run's release uploaded to ``s3a://BUCKET/raw``, then `intent run` of the same
    conf with its lake at ``s3a://BUCKET/lake``: ingest, split, verify, train, score, evaluate on
    the store and the report on a local folder. Every table equals the local chain's, row for
    row, read back here through S3A; `intent export` from the store writes the local lake's
    bytes, and `intent submit` against it scores every test target."""
    from test_run_resume import CHAIN_TABLES

    from intent_spark.lake.session import store_conf

    fs = store_filesystem()
    raw = reference_run / "raw" / "hm"
    for path in sorted(p for p in raw.rglob("*") if p.is_file()):
        with fs.open_output_stream(f"{BUCKET}/raw/hm/{path.relative_to(raw)}") as sink:
            sink.write(path.read_bytes())
    conf = tmp_path / "run.yaml"
    conf.write_text(
        f"workdir: {tmp_path / 'work'}\nlake: s3a://{BUCKET}/lake\nseed: 3\n"
        f"tracking_uri: sqlite:///{tmp_path / 'mlflow.db'}\n"
        f"datasets:\n  - {{name: hm, raw: s3a://{BUCKET}/raw/hm}}\nmodels: [popularity]\n"
    )

    def intent(*args: str) -> subprocess.CompletedProcess:
        done = subprocess.run(
            [sys.executable, "-m", "intent_spark.cli", *args],
            cwd=Path(__file__).resolve().parent.parent,
            env={k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")},
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert done.returncode == 0, (args, done.stderr[-3000:])
        return done

    lake = f"s3a://{BUCKET}/lake"
    run = intent("run", "--conf", str(conf))
    assert "hm: no split report: a lake on an object store keeps none" in run.stderr
    assert (tmp_path / "work" / "report" / "report.html").is_file()
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()
    for key, value in store_conf().items():  # this session was built before the store started
        hadoop.set(key.removeprefix("spark.hadoop."), value)
    hadoop.set("fs.s3a.access.key", os.environ["AWS_ACCESS_KEY_ID"])  # its JVM's environment has none
    hadoop.set("fs.s3a.secret.key", os.environ["AWS_SECRET_ACCESS_KEY"])
    same_tables(spark, lake, str(reference_run / "lake"), "hm", list(CHAIN_TABLES))

    # exported from the store, the tasks are the local lake's bytes; a list submitted against the
    # store lake is scored for every test target
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyspark.sql import functions as F

    from intent_spark.core import schema as S
    from intent_spark.exchange.tasks import export_tasks
    from intent_spark.lake.tables import read_table

    export_tasks(spark, str(reference_run / "lake"), "hm", str(tmp_path / "local"), splits=["test"])
    intent("export", "--dataset", "hm", "--lake", lake, "--out", str(tmp_path / "tasks"), "--split", "test")
    for name in ("tasks.parquet", "catalogue.parquet", "train.parquet"):
        exported, local = tmp_path / "tasks" / "test" / name, tmp_path / "local" / "test" / name
        assert exported.read_bytes() == local.read_bytes(), name
    ids = pq.read_table(tmp_path / "tasks" / "test" / "tasks.parquet").column("target_id").to_pylist()
    first = (
        pq.read_table(tmp_path / "tasks" / "test" / "catalogue.parquet").column("item_id").to_pylist()[:10]
    )
    pq.write_table(pa.table({"target_id": ids, "items": [first] * len(ids)}), tmp_path / "first10.parquet")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    submit = ["submit", "--dataset", "hm", "--lake", lake, "--name", "first10", "--tracking-uri", uri]
    intent(*submit, "--predictions", str(tmp_path / "first10.parquet"), "--strict")
    ranks = read_table(spark, lake, S.RANKS, "hm").where(F.col(S.MODEL) == "first10")
    test_targets = read_table(spark, str(reference_run / "lake"), S.TARGETS, "hm").where(
        F.col(S.SPLIT) == S.TEST
    )
    assert ranks.count() == test_targets.count() == len(ids) > 0


def test_petastorm_and_the_driver_read_and_write_the_store(endpoint):
    """Files the driver writes through pyarrow, found by ingest's listing and read back by the
    Petastorm readers, row groups and all (the values written here by hand)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from intent_spark.ingest.files import find_files
    from intent_spark.lake.readers import read_columns, row_groups
    from intent_spark.train.distributed import read_json, write_text

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
