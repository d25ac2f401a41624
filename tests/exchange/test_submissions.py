"""Exported tasks and scored submissions (SPEC 9) on the hand-computed toy split, and a round
trip of a reference model's top-100 through ``intent submit`` on a generated run.

The toy (test_split.py): seqs follow the fixture's order (u02 1-6, u03 7-11, u04 12-15, u05
16-19, u07 20-23, u08 24-26, u09 27-29, u10 30-31, u11 32-34, u12 35-36, u01 37-38, u06 39-40);
the test split has 28 targets and a catalogue of 8 items (a b c d z e q y).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import shutil
from datetime import datetime
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import copy_reference_run
from pyspark.sql import functions as F

from intent_spark.core import schema as S
from intent_spark.core.datasets import DatasetRef
from intent_spark.core.errors import IntentError
from intent_spark.evaluate.metrics import evaluate
from intent_spark.exchange.submissions import submit
from intent_spark.exchange.tasks import export_tasks
from intent_spark.lake.context import Lake
from intent_spark.lake.tables import has_table, read_table, spark_conf, write_dataset

TOY = DatasetRef("toy")  # the hand-built dataset, parsed once

CATALOGUE = ["a", "b", "c", "d", "e", "q", "y", "z"]


def tid(user: str, seq: int, split: str = "test", dataset: str = "toy") -> str:
    """The documented target id, computed here without the code under test."""
    return hashlib.sha256(f"{dataset}|{split}|{user}|{seq}".encode()).hexdigest()[:24]


@pytest.fixture(scope="module")
def exchange_lake(spark, toy_lake, tmp_path_factory):
    """A copy of the toy lake (submissions write ranks; the shared toy stays as it is) with an
    items table, and an MLflow store of its own."""
    source, _ = toy_lake
    folder = tmp_path_factory.mktemp("exchange")
    lake = str(folder / "lake")
    shutil.copytree(source, lake)
    items = spark.createDataFrame(
        [
            ("toy", item, f"Item {item}", "things", "acme", ["brand:acme", f"name:{item}"])
            for item in CATALOGUE
        ],
        S.ITEMS_SCHEMA,
    )
    write_dataset(items, lake, S.ITEMS, "toy")
    return lake, f"sqlite:///{folder / 'mlflow.db'}"


@pytest.fixture(scope="module")
def exported(spark, exchange_lake, tmp_path_factory):
    lake, _ = exchange_lake
    out = tmp_path_factory.mktemp("export")
    export_tasks(Lake(spark, lake), TOY, str(out), context=200)
    return out


def _toy_events() -> pd.DataFrame:
    from conftest import toy_event_rows

    rows = toy_event_rows()
    return pd.DataFrame(
        {
            "user": [r[1] for r in rows],
            "item": [r[2] for r in rows],
            "ts": [r[3] for r in rows],
            "seq": [r[4] for r in rows],
        }
    )


def test_tasks_hold_the_context_before_each_target_and_nothing_else(spark, exchange_lake, exported):
    lake, _ = exchange_lake
    table = pq.read_table(exported / "test" / "tasks.parquet")
    assert table.column_names == [
        "target_id",
        "dataset",
        "split",
        "user_id",
        "ts",
        "context_items",
        "context_ts",
        "context_event_types",
    ]  # no item, no cell; no amounts in a source without them
    by_id = {row["target_id"]: row for row in table.to_pylist()}
    assert len(by_id) == table.num_rows == 28
    # u02's target z (seq 6, Apr 5): every earlier event, oldest first.
    assert by_id[tid("u02", 6)]["context_items"] == ["a", "b", "c", "a", "d"]
    assert by_id[tid("u02", 6)]["ts"].replace(tzinfo=None) == datetime(2024, 4, 5, 12)
    assert by_id[tid("u02", 2)]["context_items"] == ["a"]
    # Every test task against the events, recomputed here: the user's events strictly before
    # the target in (ts, seq) order. The targets table says which event each id names.
    events = _toy_events()
    targets = read_table(spark, lake, S.TARGETS, "toy").where(F.col(S.SPLIT) == "test").toPandas()
    assert set(by_id) == {tid(u, s) for u, s in zip(targets.user_id, targets.seq, strict=True)}
    for target in targets.itertuples():
        mine = events[events.user == target.user_id].sort_values(["ts", "seq"])
        before = mine[(mine.ts < target.ts) | ((mine.ts == target.ts) & (mine.seq < target.seq))]
        row = by_id[tid(target.user_id, target.seq)]
        assert row["context_items"] == list(before.item)
        assert [t.replace(tzinfo=None) for t in row["context_ts"]] == list(before.ts)
        assert row["context_event_types"] == ["view"] * len(before)


def test_the_validation_split_sees_only_the_test_splits_training_events(exported):
    tasks = pq.read_table(exported / "val" / "tasks.parquet").to_pylist()
    held_out = {"u01", "u06"}  # the test split's new users are not in the validation population
    assert tasks and not held_out & {task["user_id"] for task in tasks}
    cutoff = datetime(2024, 4, 1)
    assert all(t.replace(tzinfo=None) < cutoff for task in tasks for t in [task["ts"], *task["context_ts"]])
    train = pq.read_table(exported / "val" / "train.parquet").to_pylist()
    # validation cutoff Feb 19, u11 held out of validation: 33 test-training events, of which
    # those of known validation users before Feb 19
    events = _toy_events()
    known = events[(~events.user.isin(held_out | {"u11"})) & (events.ts < datetime(2024, 2, 19))]
    assert len(train) == len(known) and {row["user_id"] for row in train} == set(known.user)
    assert all(row["ts"].replace(tzinfo=None) < datetime(2024, 2, 19) for row in train)


def test_catalogue_and_training_events_of_the_test_split(exported):
    catalogue = pq.read_table(exported / "test" / "catalogue.parquet").to_pandas()
    assert list(catalogue["item_id"]) == CATALOGUE
    counts = dict(zip(catalogue["item_id"], catalogue["train_count"], strict=True))
    # known users' events before Apr 1, counted by hand: a 11, b 9, c 8, d 5; the rest are new
    assert counts == {"a": 11, "b": 9, "c": 8, "d": 5, "e": 0, "q": 0, "y": 0, "z": 0}
    assert list(catalogue.loc[0, "tokens"]) == ["brand:acme", "name:a"]
    train = pq.read_table(exported / "test" / "train.parquet").to_pandas()
    assert len(train) == 33 and not train["user_id"].isin(["u01", "u06"]).any()
    text = (exported / "test" / "FORMAT.md").read_text()
    assert "28 tasks, a catalogue of 8 items and 33 training events" in text
    first = pq.read_table(exported / "test" / "tasks.parquet").slice(0, 1).to_pylist()[0]
    example = json.loads(text.split("and a submission row for it in JSON Lines")[1].split("\n\n")[1].strip())
    assert example == {"target_id": first["target_id"], "items": ["a", "b", "c"], "scores": [3.0, 2.5, 2.5]}


def test_export_is_byte_identical_whatever_the_partitioning(spark, exchange_lake, exported, tmp_path):
    lake, _ = exchange_lake
    with spark_conf(spark, {"spark.sql.shuffle.partitions": "3"}):
        export_tasks(Lake(spark, lake), TOY, str(tmp_path), context=200)

    def sums(folder: Path) -> dict[str, str]:
        return {
            str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*"))
            if p.is_file()
        }

    first, second = sums(exported), sums(tmp_path)
    assert len(first) == 8 and first == second


def test_a_short_context_keeps_the_last_events(spark, exchange_lake, tmp_path):
    lake, _ = exchange_lake
    export_tasks(Lake(spark, lake), TOY, str(tmp_path), splits=["test"], context=3)
    tasks = {row["target_id"]: row for row in pq.read_table(tmp_path / "test" / "tasks.parquet").to_pylist()}
    assert tasks[tid("u02", 6)]["context_items"] == ["c", "a", "d"]
    assert not (tmp_path / "val").exists()


def _write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join((row if isinstance(row, str) else json.dumps(row)) + "\n" for row in rows))
    return path


GOOD_ROWS = [
    {"target_id": tid("u02", 6), "items": ["z", "a", "b", "c", "d"]},  # rank 1
    {"target_id": tid("u02", 5), "items": ["a", "d", "b", "c", "e"], "scores": [3, 2, 2, 1, 0]},  # 2.5
    {"target_id": tid("u02", 4), "items": ["b", "c", "d", "e", "q"]},  # a absent: beyond the list
    {"target_id": tid("u02", 3), "items": CATALOGUE},  # c third
    {"target_id": tid("u03", 11), "items": ["a", "b", "c", "d", "e"], "dataset": "toy", "split": "test"},
]


@pytest.fixture(scope="module")
def faulty(spark, exchange_lake, tmp_path_factory):
    lake, uri = exchange_lake
    val = read_table(spark, lake, S.TARGETS, "toy").where(F.col(S.SPLIT) == "val").orderBy(S.SEQ).first()
    rows = [
        *GOOD_ROWS,
        {"target_id": "0" * 24, "items": ["a"]},  # line 6
        {"target_id": tid("u03", 8), "items": ["a"]},  # 7, 8: the same target twice
        {"target_id": tid("u03", 8), "items": ["b"]},
        {"target_id": tid("u04", 13), "items": ["a", "b", "a"]},
        {"target_id": tid("u05", 17), "items": ["a", "nope"]},  # 10
        {"target_id": tid("u07", 21), "items": ["a", "b"], "scores": [1.0]},
        {"target_id": tid("u08", 25), "items": ["a", "b"], "scores": [1.0, 2.0]},
        {"target_id": tid("u09", 28), "items": [*CATALOGUE, "a"]},  # 9 items, 8 in the catalogue
        {"target_id": tid("u10", 31), "items": ["a"], "dataset": "other"},
        {"target_id": tid("u12", 36), "items": ["a"], "split": "val"},  # 15
        {"target_id": tid(val.user_id, val.seq, "val"), "items": ["a"]},
        {"target_id": tid("u11", 33), "items": [1, 2]},
        {"target_id": 12345, "items": ["a"]},
        "not json",  # 19
    ]
    path = _write_jsonl(tmp_path_factory.mktemp("subs") / "faulty.jsonl", rows)
    lines: list[str] = []
    scored = submit(Lake(spark, lake, uri, progress=lines.append), TOY, str(path), "faulty")
    return scored, lines, path


def test_every_fault_is_counted_with_an_example_and_rejected(spark, exchange_lake, faulty):
    lake, _ = exchange_lake
    scored, lines, _ = faulty
    kinds = {f.kind: f.count for f in scored.faults}
    assert kinds == {
        "unknown target_id": 1,
        "target submitted more than once": 2,
        "item repeated in a list": 1,
        "item not in the catalogue": 1,
        "scores of another length": 1,
        "scores rising": 1,
        "list longer than the catalogue": 1,
        "another dataset": 1,
        "another split": 2,
        "wrong type": 2,
        "not a JSON object": 1,
    }
    assert (scored.rows, scored.accepted, scored.rejected) == (19, 5, 14)
    # 28 targets, 5 answered by an accepted row
    assert (scored.targets, scored.missing) == (28, 23)
    first = {f.kind: (f.line, f.reason) for f in scored.faults}
    assert first["target submitted more than once"] == (
        7,
        f"target_id {tid('u03', 8)} has 2 rows (all are rejected)",
    )
    assert first["item repeated in a list"] == (9, "item a appears more than once")
    assert first["item not in the catalogue"] == (10, "item nope is not in the test split's catalogue")
    assert first["scores of another length"] == (11, "1 scores for 2 items")
    assert first["scores rising"][0] == 12 and "position 2" in first["scores rising"][1]
    assert first["list longer than the catalogue"] == (13, "a list of 9 items; the catalogue has 8")
    assert first["another split"][0] == 15 and first["wrong type"][0] == 17
    assert first["not a JSON object"] == (19, "the line is not a JSON object")
    warnings = [line for line in lines if "warning" in line]
    assert len(warnings) == len(kinds) + 1 and all("\n" not in line for line in warnings)
    assert any("2 rows rejected: wrong type (e.g. line 17:" in line for line in warnings)
    assert any("23 of 28 targets have no accepted row" in line for line in warnings)
    rejects = read_table(spark, lake, S.SUBMISSION_REJECTS, "toy").where(F.col(S.MODEL) == "faulty")
    assert rejects.count() == 14
    assert sorted(r.line for r in rejects.collect()) == list(range(6, 20))
    lines_in_file = Path(scored.rejects_file).read_text().splitlines()
    assert [json.loads(line)["line"] for line in lines_in_file] == list(range(6, 20))


def test_ranks_follow_the_list_ties_and_misses(spark, exchange_lake, faulty):
    lake, uri = exchange_lake
    scored, _, path = faulty
    ranks = {
        r.seq: (r.rank, r.tied)
        for r in read_table(spark, lake, S.RANKS, "toy").where(F.col(S.MODEL) == "faulty").collect()
    }
    assert len(ranks) == 28
    assert ranks[6] == (1.0, 0) and ranks[5] == (2.5, 1) and ranks[3] == (3.0, 0)
    assert ranks[4][0] == math.inf and ranks[2][0] == math.inf  # beyond the list; missing
    assert ranks[8][0] == math.inf  # both copies rejected: a miss
    assert (scored.list_length, scored.longest_list) == (5, 8)
    from mlflow import MlflowClient

    params = MlflowClient(uri).get_run(scored.run_id).data.params
    assert params["submission.sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert params["submission.list_length"] == "5" and params["submission.missing"] == "23"


def test_metrics_are_exact_up_to_the_shortest_list_and_unavailable_beyond(spark, exchange_lake, faulty):
    lake, uri = exchange_lake
    evaluate(Lake(spark, lake, uri), "toy", floor_users=1)
    users = read_table(spark, lake, S.USER_METRICS, "toy").where(
        (F.col(S.MODEL) == "faulty") & (F.col(S.SPLIT) == "test")
    )
    u02 = users.where((F.col(S.USER_ID) == "u02") & (F.col(S.CELL) == "known_past")).first()
    # seq 2 missing, 3 at rank 3, 4 beyond its list, 5 at 2.5
    assert u02.ndcg_5 == pytest.approx((1 / math.log2(4) + 1 / math.log2(3.5)) / 4, abs=1e-12)
    assert u02.mrr_5 == pytest.approx((1 / 3 + 1 / 2.5) / 4, abs=1e-12)
    assert u02.hr_1 == 0.0 and u02.ndcg_10 is None and u02.mrr_100 is None
    metrics = read_table(spark, lake, S.METRICS_TABLE, "toy").where(F.col(S.MODEL) == "faulty")
    by_k = {(r.metric, r.k): r.value for r in metrics.where(F.col(S.CELL) == "known_past").collect()}
    assert by_k[("ndcg", 5)] is not None and by_k[("ndcg", 10)] is None and by_k[("recall", 100)] is None
    from mlflow import MlflowClient

    logged = MlflowClient(uri).get_run(faulty[0].run_id).data.metrics
    assert "test.known_past.ndcg_5" in logged and "test.known_past.ndcg_10" not in logged


def test_horizon_recall_and_precision_follow_its_recipe(spark, exchange_lake, tmp_path):
    """Lists without scores for every test target; the HORIZON recipe, as its paper gives it,
    applied to the same lists, against the metrics table."""
    lake, uri = exchange_lake
    targets = read_table(spark, lake, S.TARGETS, "toy").where(F.col(S.SPLIT) == "test").toPandas()
    order = ["d", "c", "b", "a", "z", "e", "q", "y"]
    rows = []
    for target in targets.itertuples():  # a different list per user: rotate the order
        shift = int(target.user_id[1:]) % len(order)
        rows.append({"target_id": tid(target.user_id, target.seq), "items": order[shift:] + order[:shift]})
    submit(Lake(spark, lake, uri), TOY, str(_write_jsonl(tmp_path / "h.jsonl", rows)), "horizon_lists")
    evaluate(Lake(spark, lake, tracked=False), "toy", floor_users=1)

    def recipe(predictions, ground_truth, k_values):
        scores = {}
        for k in k_values:
            top_k = predictions[:k]
            scores[f"Recall@{k}"] = 1 if any(item in ground_truth for item in top_k) else 0
            scores[f"Precision@{k}"] = len(set(top_k) & set(ground_truth)) / k
            dcg = sum(1 / math.log2(i + 2) for i, item in enumerate(top_k) if item in ground_truth)
            idcg = sum(1 / math.log2(i + 2) for i in range(min(len(ground_truth), k)))
            scores[f"NDCG@{k}"] = dcg / idcg if idcg > 0 else 0
        return scores

    lists = {row["target_id"]: row["items"] for row in rows}
    per_target = pd.DataFrame(
        [
            {"cell": t.cell, "user": t.user_id, **recipe(lists[tid(t.user_id, t.seq)], [t.item_id], [1, 5])}
            for t in targets.itertuples()
        ]
    )
    expected = per_target.groupby(["cell", "user"]).mean().groupby("cell").mean()
    metrics = read_table(spark, lake, S.METRICS_TABLE, "toy").where(
        (F.col(S.MODEL) == "horizon_lists") & (F.col(S.SPLIT) == "test")
    )
    got = {(r.cell, r.metric, r.k): r.value for r in metrics.collect()}
    for cell, row in expected.iterrows():
        for k in (1, 5):
            assert got[(cell, "recall", k)] == pytest.approx(row[f"Recall@{k}"], abs=1e-12)
            assert got[(cell, "precision", k)] == pytest.approx(row[f"Precision@{k}"], abs=1e-12)
            assert got[(cell, "ndcg", k)] == pytest.approx(row[f"NDCG@{k}"], abs=1e-12)
        assert got[(cell, "recall", 10)] is None  # lists of 8


def test_strict_refuses_and_writes_nothing(spark, exchange_lake, tmp_path):
    lake, uri = exchange_lake
    path = _write_jsonl(tmp_path / "s.jsonl", GOOD_ROWS)
    with pytest.raises(
        IntentError,
        match=r"--strict: 23 targets missing \(e\.g\. target_id [0-9a-f]{24}\); nothing was scored",
    ):
        submit(Lake(spark, lake, uri), TOY, str(path), "strict_one", strict=True)
    assert read_table(spark, lake, S.RANKS, "toy").where(F.col(S.MODEL) == "strict_one").isEmpty()


def _good_table() -> pa.Table:
    return pa.table(
        {"target_id": [row["target_id"] for row in GOOD_ROWS], "items": [row["items"] for row in GOOD_ROWS]}
    )


def _truncated(path: Path) -> str:
    pq.write_table(_good_table(), path)
    whole = path.read_bytes()
    path.write_bytes(whole[: len(whole) // 2])
    return (
        f"{path}: a Parquet file cut short: it starts as Parquet but its footer is missing "
        f"({len(whole) // 2:,} bytes; copy or write it again); nothing was scored"
    )


def _empty(path: Path) -> str:
    path.write_bytes(b"")
    return f"{path}: the file is empty (0 bytes); nothing was scored"


def _no_rows(path: Path) -> str:
    pq.write_table(
        pa.table({"target_id": pa.array([], pa.string()), "items": pa.array([], pa.list_(pa.string()))}), path
    )
    return f"{path}: the file holds no rows; nothing was scored"


def _no_rows_of_another_type(path: Path) -> str:
    pq.write_table(
        pa.table({"target_id": pa.array([], pa.int64()), "items": pa.array([], pa.list_(pa.int64()))}), path
    )
    return f"{path}: the file holds no rows; nothing was scored"


def _csv_named_parquet(path: Path) -> str:
    path.write_text("target_id,items\nabc,a b c\n")
    return f"{path}: not a Parquet file (its bytes do not start with PAR1; a JSON Lines file is named .jsonl); nothing was scored"


def _gzip_in_jsonl(path: Path) -> str:
    import gzip

    path.write_bytes(gzip.compress("".join(json.dumps(row) + "\n" for row in GOOD_ROWS).encode()))
    return f"{path}: the file is gzip-compressed; submit it uncompressed (Parquet compresses its own columns); nothing was scored"


def _gzip_named(path: Path) -> str:
    import gzip

    pq.write_table(_good_table(), path.with_suffix(""))
    path.write_bytes(gzip.compress(path.with_suffix("").read_bytes()))
    return (
        f"{path}: a gzip-compressed file; submit the .parquet or .jsonl file itself, uncompressed "
        "(Parquet compresses its own columns); nothing was scored"
    )


def _parquet_named_jsonl(path: Path) -> str:
    pq.write_table(_good_table(), path)
    return f"{path}: a Parquet file named as JSON Lines; name it .parquet; nothing was scored"


def _json_array(path: Path) -> str:
    text = json.dumps(GOOD_ROWS[:2], indent=1)
    path.write_text(text + "\n")
    lines = len(text.splitlines())
    return (
        f"{path}: not JSON Lines: none of its {lines} lines is a JSON object (line 1: '['); write one "
        "JSON object per line; nothing was scored"
    )


def _empty_jsonl(path: Path) -> str:
    path.write_text("")
    return f"{path}: the file is empty (0 bytes); nothing was scored"


@pytest.mark.parametrize(
    ("name", "make"),
    [
        ("cut.parquet", _truncated),
        ("empty.parquet", _empty),
        ("no_rows.parquet", _no_rows),
        ("no_int_rows.parquet", _no_rows_of_another_type),
        ("csv.parquet", _csv_named_parquet),
        ("packed.jsonl", _gzip_in_jsonl),
        ("answers.parquet.gz", _gzip_named),
        ("parquet.jsonl", _parquet_named_jsonl),
        ("empty.jsonl", _empty_jsonl),
    ],
)
def test_a_bad_submission_file_is_one_line_before_spark_starts(tmp_path, capsys, name, make):
    """No Spark fixture: the command refuses the file by its bytes before it builds a session."""
    from intent_spark.cli import main

    lake = tmp_path / "lake"
    path = tmp_path / name
    expected = make(path)
    args = ["submit", "--dataset", "toy", "--lake", str(lake), "--predictions", str(path), "--name", "bad"]
    assert (main([*args, "--no-mlflow"]), capsys.readouterr().err) == (
        2,
        f"intent submit: error: {expected}\n",
    )
    assert not [p.name for p in lake.glob("*") if not p.name.startswith("_")]  # no table, no report


@pytest.mark.parametrize(
    ("name", "make"),
    [
        ("cut.parquet", _truncated),
        ("no_rows.parquet", _no_rows),
        ("array.jsonl", _json_array),
    ],
)
def test_a_bad_submission_file_is_one_line_and_writes_nothing(
    spark, exchange_lake, tmp_path, capsys, name, make
):
    from intent_spark.cli import main

    lake, uri = exchange_lake
    path = tmp_path / name
    expected = make(path)
    model = "bad_" + name.replace(".", "_")
    code = main(
        [
            "submit",
            "--dataset",
            "toy",
            "--lake",
            lake,
            "--predictions",
            str(path),
            "--name",
            model,
            "--tracking-uri",
            uri,
        ]
    )
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if not line.startswith("[submit ")]  # progress
    assert (code, lines) == (2, [f"intent submit: error: {expected}"]) and "warning" not in err
    for table in (S.RANKS, S.SUBMISSIONS, S.SUBMISSION_REJECTS):
        if has_table(spark, lake, table):
            assert read_table(spark, lake, table, "toy").where(F.col(S.MODEL) == model).isEmpty()
    assert not (Path(lake) / "reports" / "submissions" / "toy" / model).exists()


def test_nan_and_misplaced_strings_in_json_are_named_and_strict_names_every_fault(
    spark, exchange_lake, tmp_path
):
    lake, _ = exchange_lake
    rows = [
        GOOD_ROWS[0],
        json.dumps({"target_id": tid("u02", 5), "items": ["a", "d"], "scores": [float("nan"), 1.0]}),
        {"target_id": tid("u02", 4), "items": "a"},
        {"target_id": tid("u02", 3), "items": [1, 2]},
        {"target_id": tid("u03", 11), "items": {"a": 1}},
    ]
    path = _write_jsonl(tmp_path / "nan.jsonl", rows)
    lines: list[str] = []
    scored = submit(Lake(spark, lake, progress=lines.append, tracked=False), TOY, str(path), "nan_json")
    nan_reason = (
        "the line holds NaN, which is not JSON: Python's json.dumps writes float('nan') and float('inf') so; "
        "give finite numbers"
    )
    string_reason = 'items is a string, not a list of item id strings (write ["a"], not "a")'
    assert [fault.message() for fault in scored.faults] == [
        f"1 row rejected: NaN or Infinity in JSON (e.g. line 2: {nan_reason})",
        f"3 rows rejected: wrong type (e.g. line 3: {string_reason})",
    ]
    assert (
        f"toy test nan_json: warning: 1 row rejected: NaN or Infinity in JSON (e.g. line 2: {nan_reason})"
        in lines
    )
    rejects = read_table(spark, lake, S.SUBMISSION_REJECTS, "toy").where(F.col(S.MODEL) == "nan_json")
    assert {r.line: r.reason for r in rejects.collect()} == {
        2: nan_reason,
        3: string_reason,
        4: 'items is not a list of item id strings: it holds a number (write "123", not 123)',
        5: "items is not a list of item id strings",
    }
    with pytest.raises(IntentError) as refused:
        submit(Lake(spark, lake, tracked=False), TOY, str(path), "nan_json_strict", strict=True)
    rejects_file = f"{lake}/reports/submissions/toy/nan_json_strict/test/rejects.jsonl"
    assert re.fullmatch(
        re.escape(
            f"{path}: --strict: 1 row rejected: NaN or Infinity in JSON (e.g. line 2: {nan_reason}); "
            f"3 rows rejected: wrong type (e.g. line 3: {string_reason}); 27 targets missing (e.g. target_id "
        )
        + r"[0-9a-f]{24}"
        + re.escape(f"); rejects in {rejects_file}; nothing was scored"),
        str(refused.value),
    ), str(refused.value)
    assert read_table(spark, lake, S.RANKS, "toy").where(F.col(S.MODEL) == "nan_json_strict").isEmpty()


def test_parquet_columns_of_the_wrong_type_refuse_the_file(spark, exchange_lake, tmp_path, capsys):
    from intent_spark.cli import main

    lake, uri = exchange_lake
    path = tmp_path / "ints.parquet"
    pq.write_table(pa.table({"target_id": [tid("u02", 6), tid("u02", 5)], "items": [[1, 2], [3]]}), path)
    code = main(
        [
            "submit",
            "--dataset",
            "toy",
            "--lake",
            lake,
            "--predictions",
            str(path),
            "--name",
            "ints",
            "--tracking-uri",
            uri,
        ]
    )
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err
    assert "column items is array<bigint> in all 2 rows, expected a list of item id strings" in err


def test_parquet_scores_that_are_not_finite_are_rejected(spark, exchange_lake, tmp_path):
    lake, uri = exchange_lake
    path = tmp_path / "nan.parquet"
    table = pa.table(
        {
            "target_id": [tid("u02", 6), tid("u02", 5), tid("u02", 4)],
            "items": [["z", "a"], ["d", "a"], ["a", "b"]],
            "scores": [[2.0, 1.0], [float("nan"), 1.0], [1.0, None]],
        }
    )
    pq.write_table(table, path)
    scored = submit(Lake(spark, lake, tracked=False), TOY, str(path), "nonfinite_scores")
    assert {f.kind: f.count for f in scored.faults} == {"score not finite": 2}
    assert (
        scored.faults[0].message()
        == "2 rows rejected: score not finite (e.g. row 2: scores hold a null, NaN or infinity)"
    )
    assert scored.accepted == 1 and scored.list_length == 2


def test_a_registered_model_name_is_refused(spark, exchange_lake, tmp_path):
    lake, _ = exchange_lake
    path = _write_jsonl(tmp_path / "p.jsonl", GOOD_ROWS[:1])
    with pytest.raises(IntentError, match="a registered model has that name"):
        submit(Lake(spark, lake), TOY, str(path), "popularity")


def test_a_reference_models_top_100_round_trips_exactly(spark, reference_run, tmp_path):
    """popularity's top 100 exported by ``intent score --export`` and submitted gives its own
    metrics at every K <= 100 (MRR is MRR@K, truncated at the list's end like the others)."""
    from intent_spark.cli import main

    work = tmp_path / "work"
    copy_reference_run(reference_run, work)
    lake, answers = str(work / "lake"), str(tmp_path / "popularity.parquet")
    base = ["--dataset", "hm", "--lake", lake]
    assert main(["score", *base, "--model", "popularity", "--top-k", "100", "--export", answers]) == 0
    assert main(["submit", *base, "--predictions", answers, "--name", "popularity_file"]) == 0
    assert main(["evaluate", *base]) == 0
    metrics = read_table(spark, lake, S.METRICS_TABLE, "hm").where(F.col("metric") != "tie_rate").toPandas()
    keys = [S.SPLIT, S.CELL, "metric", "k"]
    own = metrics[metrics[S.MODEL] == "popularity"].set_index(keys)["value"]
    submitted = metrics[metrics[S.MODEL] == "popularity_file"].set_index(keys)["value"]
    test = own.xs("test", level=S.SPLIT)
    assert (test.groupby(level=S.CELL).size() == 5 * 6).all() and test.sum() > 0
    paired = test.to_frame("own").join(submitted.xs("test", level=S.SPLIT).rename("submitted"))
    assert paired["submitted"].notna().all()
    assert (paired["own"] - paired["submitted"]).abs().max() <= 1e-12
