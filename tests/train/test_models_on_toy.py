"""Model inputs, training reader, scoring and ranks on the hand-computed toy split (test_split).

Test split (seed 4): training = known users before Apr 1; item counts a 11, b 9, c 8, d 5, so
the catalogue is a=1 b=2 c=3 d=4, then the new items e=5 q=6 y=7 z=8. Validation: counts
a 9, b 7, c 7, d 4 (b before c by id): a=1 b=2 c=3 d=4 and nothing else.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from conftest import free_port, start_mlflow_server, stop_mlflow_server, toy_event_rows
from pyspark.sql import functions as F

from intent_spark.core import schema as S
from intent_spark.core.datasets import DatasetRef
from intent_spark.lake.context import Lake
from intent_spark.lake.tables import read_table, write_dataset
from intent_spark.split.conf import SplitConf
from intent_spark.split.split_tables import run_split
from intent_spark.train.conf import ModelsConf
from intent_spark.train.fit import train
from intent_spark.train.inputs import build_model_inputs
from intent_spark.train.readers import read_catalogue, split_files, training_batches, user_blocks
from intent_spark.train.score import score

TOY = DatasetRef("toy")  # the hand-built dataset, parsed once

TOKENS = {
    "a": ["red", "cup"],
    "b": ["blue", "cup"],
    "c": ["red", "pan"],
    "d": ["green"],
    "z": ["red", "mug"],  # new, shares 'red'
    "q": ["blue"],  # new, shares 'blue'
    "y": ["mug"],  # new, only an unknown token: cannot be scored by sasrec_f
    "e": [],
}
TINY = {"blocks": 1, "dims": 8, "dropout": 0.0, "steps": 3, "batch_size": 4, "shuffle_buffer": 10}
CONF = ModelsConf(context=2, max_tokens=3, models={"sasrec": TINY, "sasrec_f": TINY})


@pytest.fixture(scope="module")
def toy(spark, tmp_path_factory):
    root = tmp_path_factory.mktemp("models_toy")
    lake = str(root / "lake")
    write_dataset(
        spark.createDataFrame(toy_event_rows(), S.EVENTS_SCHEMA).repartition(3), lake, S.EVENTS, "toy"
    )
    items = [("toy", item, None, None, None, tokens) for item, tokens in TOKENS.items()]
    write_dataset(spark.createDataFrame(items, S.ITEMS_SCHEMA), lake, S.ITEMS, "toy")
    run_split(Lake(spark, lake), TOY, SplitConf(seed=4))
    build_model_inputs(Lake(spark, lake), TOY, context=CONF.context, max_tokens=CONF.max_tokens)
    return lake, f"sqlite:///{root / 'mlflow.db'}"


def _catalogue(spark, lake, split):
    rows = read_table(spark, lake, S.CATALOGUE, "toy").where(F.col(S.SPLIT) == split).collect()
    return {r.item_id: (r.item_index, r.train_count, list(r.token_ids)) for r in rows}


def test_catalogue_indices_counts_and_training_vocabulary(spark, toy):
    lake, _ = toy
    # token vocabulary from training items only: blue 1, cup 2, green 3, pan 4, red 5
    assert _catalogue(spark, lake, "test") == {
        "a": (1, 11, [5, 2, 0]),
        "b": (2, 9, [1, 2, 0]),
        "c": (3, 8, [5, 4, 0]),
        "d": (4, 5, [3, 0, 0]),
        "e": (5, 0, [0, 0, 0]),
        "q": (6, 0, [1, 0, 0]),
        "y": (7, 0, [0, 0, 0]),
        "z": (8, 0, [5, 0, 0]),
    }
    val = _catalogue(spark, lake, "val")
    assert {k: v[:2] for k, v in val.items()} == {"a": (1, 9), "b": (2, 7), "c": (3, 7), "d": (4, 4)}
    arrays = read_catalogue(split_files(Lake(spark, lake), S.CATALOGUE, "toy", "test"))
    assert arrays.train_counts.tolist() == [0, 11, 9, 8, 5, 0, 0, 0, 0]
    assert (arrays.n_items, arrays.n_trained, arrays.n_tokens) == (8, 4, 5)


def test_training_reader_sees_training_transitions_only(spark, toy):
    """u02's future z (Apr 5) and the held-out users' events are within reach but never read."""
    lake, _ = toy
    urls = split_files(Lake(spark, lake), S.TRAIN_SEQUENCES, "toy", "test")
    stream = training_batches(urls, batch_size=5, shuffle_buffer=0, seed=0)
    rows: list[tuple[int, ...]] = []
    total = read_table(spark, lake, S.TRAIN_SEQUENCES, "toy").where(F.col(S.SPLIT) == "test").count()
    while len(rows) < total:
        rows += [tuple(r) for r in next(stream).tolist()]
    stream.close()
    rows = rows[:total]
    seen = {i for row in rows for i in row}
    assert seen <= {0, 1, 2, 3, 4}  # never e, q, y or z (5..8)
    # u02 trains on a b c a d in chunks of 3 sharing an edge; u10 on c a; u03 on a a b, b b
    counts = Counter(rows)
    for row in [(1, 2, 3), (3, 1, 4), (0, 3, 1), (1, 1, 2), (0, 2, 2)]:
        assert counts[row] >= 1
    transitions = sum(sum(1 for x, y in zip(r, r[1:], strict=False) if x and y) for r in rows)
    assert transitions == 33 - 10  # 33 training events of 10 known users: one transition less each
    cutoff = read_table(spark, lake, S.SPLITS, "toy").where(F.col(S.SPLIT) == "test").first().cutoff
    late = read_table(spark, lake, S.TRAIN_SEQUENCES, "toy").where(
        (F.col(S.SPLIT) == "test") & (F.col(S.LAST_TS) >= F.lit(cutoff))
    )
    assert late.count() == 0


def test_scoring_blocks_hold_each_users_history_up_to_the_last_target(spark, toy):
    lake, _ = toy
    blocks = list(user_blocks(split_files(Lake(spark, lake), S.SCORE_EVENTS, "toy", "test")))
    by_first_seq = {int(b.seqs[0]): b for b in blocks}
    u02 = by_first_seq[2]  # u02's events are seq 1..6: a b c a d z; targets all but the first
    assert u02.items.tolist() == [1, 2, 3, 1, 4, 8]
    assert u02.targets.tolist() == [1, 2, 3, 4, 5]
    assert u02.seqs.tolist() == [2, 3, 4, 5, 6]
    targets = read_table(spark, lake, S.TARGETS, "toy").where(F.col(S.SPLIT) == "test").count()
    assert sum(b.targets.size for b in blocks) == targets
    assert all(b.targets.size and b.targets[0] >= 1 for b in blocks)


def test_every_context_event_precedes_its_target(spark, toy):
    lake, _ = toy
    stream = read_table(spark, lake, S.SCORE_EVENTS, "toy").alias("s")
    events = read_table(spark, lake, S.EVENTS, "toy").select(S.SEQ, S.TS)
    placed = stream.join(events, S.SEQ)
    targets = placed.where(F.col(S.IS_TARGET)).select(
        S.SPLIT,
        S.USER_ID,
        F.col(S.POSITION).alias("_tp"),
        F.col(S.SEQ).alias("_tseq"),
        F.col(S.TS).alias("_tts"),
    )
    context = placed.join(targets, [S.SPLIT, S.USER_ID]).where(F.col(S.POSITION) < F.col("_tp"))
    later = context.where(
        (F.col(S.SEQ) == F.col("_tseq"))
        | (F.col(S.TS) > F.col("_tts"))
        | ((F.col(S.TS) == F.col("_tts")) & (F.col(S.SEQ) >= F.col("_tseq")))
    )
    assert context.count() > 0 and later.count() == 0


@pytest.fixture(scope="module")
def toy_ranks(spark, toy):
    lake, uri = toy
    for model in ("popularity", "repeat_last", "sasrec", "sasrec_f"):
        train(Lake(spark, lake, uri), TOY, model, CONF)
        score(Lake(spark, lake, uri), TOY, model, CONF)
    rows = read_table(spark, lake, S.RANKS, "toy").collect()
    return {(r.split, r.model, r.seq): r.rank for r in rows}, rows


def test_tie_groups_by_hand(toy_ranks):
    _, rows = toy_ranks
    tied = {(r.split, r.model, r.seq): r.tied for r in rows}
    z, y = 6, 40
    assert tied[("test", "popularity", z)] == 3  # with e, q, y
    assert tied[("test", "repeat_last", z)] == 6  # every item but d and z scores 0
    assert tied[("test", "sasrec", z)] == 3
    assert tied[("test", "sasrec_f", y)] == 1  # with e


def test_ranks_cover_every_target_of_every_model(spark, toy, toy_ranks):
    lake, _ = toy
    _, rows = toy_ranks
    targets = {
        (r.split, r.cell, r.user_id, r.seq) for r in read_table(spark, lake, S.TARGETS, "toy").collect()
    }
    for model in ("popularity", "repeat_last", "sasrec", "sasrec_f"):
        assert {(r.split, r.cell, r.user_id, r.seq) for r in rows if r.model == model} == targets


def test_ranks_by_hand_on_the_new_item_targets(toy_ranks):
    ranks, _ = toy_ranks
    z, y = 6, 40  # u02's z on Apr 5 (after a b c a d), u06's y on May 10 (after c)
    # popularity: z scores like e, q, y (never trained, not in context) below a..d: 1 + 4 + 3/2
    assert ranks[("test", "popularity", z)] == 6.5
    # repeat-last: d was last, so 1 + 1 + (8 - 2)/2
    assert ranks[("test", "repeat_last", z)] == 5.0
    # sasrec cannot score e, q, y, z: they tie below the 4 trained items
    assert ranks[("test", "sasrec", z)] == 6.5
    assert ranks[("test", "sasrec", y)] == 6.5
    # sasrec_f scores z and q from known tokens; y and e have none: 1 + 6 + 1/2
    assert ranks[("test", "sasrec_f", y)] == 7.5
    assert ranks[("test", "sasrec_f", z)] < 7


def test_scoring_again_gives_identical_ranks(spark, toy, toy_ranks):
    lake, uri = toy
    ranks, _ = toy_ranks
    score(Lake(spark, lake, uri), TOY, "sasrec", CONF)
    again = {(r.split, r.model, r.seq): r.rank for r in read_table(spark, lake, S.RANKS, "toy").collect()}
    assert again == ranks
    assert np.isfinite(list(again.values())).all()


def test_verify_checks_the_model_inputs_and_catches_a_leak(spark, toy):
    from datetime import datetime

    from intent_spark.checks.verify import check_split, verify_dataset

    lake, _ = toy
    results = verify_dataset(Lake(spark, lake), TOY)
    names = {r.name for r in results}
    assert {
        "model_inputs_before_cutoff",
        "model_inputs_known_users",
        "model_inputs_end_before_future_targets",
        "catalogue_counts_training_only",
    } <= names
    assert [r for r in results if not r.ok] == []

    split = read_table(spark, lake, S.SPLITS, "toy").where(F.col(S.SPLIT) == "test").first().asDict()
    holdout = (
        read_table(spark, lake, S.HOLDOUT, "toy").where(F.col(S.SPLIT) == "test").drop(S.SPLIT, S.DATASET)
    )
    catalogue = read_table(spark, lake, S.CATALOGUE, "toy").where(F.col(S.SPLIT) == "test")
    sequences = read_table(spark, lake, S.TRAIN_SEQUENCES, "toy").where(F.col(S.SPLIT) == "test")
    # u02's chunk reaching May 5 (after its Apr 5 event, z = 8), and a held-out user's chunk
    leaked = spark.createDataFrame(
        [
            ("toy", "test", "u02", 2, [0, 4, 8], datetime(2024, 5, 5, 12)),
            ("toy", "test", "u06", 0, [0, 3, 7], datetime(2024, 2, 10)),
        ],
        S.TRAIN_SEQUENCES_SCHEMA,
    )
    results = check_split(
        TOY,
        split,
        read_table(spark, lake, S.EVENTS, "toy"),
        holdout,
        read_table(spark, lake, S.TARGETS, "toy"),
        read_table(spark, lake, S.SPLIT_COUNTS, "toy"),
        (catalogue, sequences.unionByName(leaked)),
    )
    failed = {r.name: r.violations for r in results if not r.ok}
    # the future targets of u02 (Apr 5), u03 (May 3) and u05 (May 4) precede that chunk's end
    assert failed == {
        "model_inputs_before_cutoff": 1,
        "model_inputs_known_users": 1,
        "model_inputs_end_before_future_targets": 3,
    }


@pytest.fixture(scope="module")
def toy_metrics(spark, toy, toy_ranks):
    """`evaluate` of the four models' ranks: ``metrics``, ``comparisons`` and ``user_metrics``
    of the toy, each model's cell metrics logged to its training run. Every test that reads
    them asks for this, so each runs alone too."""
    from intent_spark.evaluate.metrics import evaluate

    lake, uri = toy
    evaluate(Lake(spark, lake, uri), "toy")  # at the floor its split recorded
    return read_table(spark, lake, S.METRICS_TABLE, "toy")


def test_evaluate_writes_metrics_and_mlflow_finds_them_by_name(toy, toy_metrics):
    import mlflow

    from intent_spark.lake.tracking import EXPERIMENT, store

    _, uri = toy
    metrics = toy_metrics
    z_cell = metrics.where(
        (F.col(S.SPLIT) == "test")
        & (F.col(S.CELL) == "known_future_new")
        & (F.col("metric") == "mrr")
        & (F.col("k") == 10)
    )
    # u02's z and u05's e: both new, so sasrec ties them at 6.5 below the 4 trained items
    assert z_cell.where(F.col(S.MODEL) == "sasrec").first().value == pytest.approx(1 / 6.5)
    # the split's conf floor (1,000), recorded by the split and read back by evaluate
    assert {(r.below_floor, r.floor_users) for r in metrics.collect()} == {(True, 1000)}
    with store(uri):
        found = mlflow.search_runs(
            experiment_names=[EXPERIMENT], filter_string="metrics.`test.known_past.ndcg_10` >= 0"
        )
    assert sorted(found["tags.intent.model"]) == ["popularity", "repeat_last", "sasrec", "sasrec_f"]
    assert (found["metrics.test.known_future_new.mrr_10"] > 0).all()


def test_comparisons_and_report_from_the_lake(spark, toy, toy_metrics, tmp_path, capsys):
    """After evaluate: the comparisons table by hand, then `intent report` on the real tables."""
    from intent_spark.cli import main

    lake, uri = toy
    comparisons = read_table(spark, lake, S.COMPARISONS, "toy").where(F.col(S.SPLIT) == "test")
    kinds = {r.kind for r in comparisons.collect()}
    assert {S.PAIRED, S.RETENTION} <= kinds
    # a memorization gap needs users with both a seen and a new target in one period: count them
    targets = read_table(spark, lake, S.TARGETS, "toy").where(F.col(S.SPLIT) == "test")
    cells = {}
    for r in targets.select(S.CELL, S.USER_ID).distinct().collect():
        cells.setdefault(r.cell, set()).add(r.user_id)
    groups = [
        g
        for g in ("known_future", "new_past", "new_future")
        if cells.get(f"{g}_seen", set()) & cells.get(f"{g}_new", set())
    ]
    gaps = comparisons.where(F.col("kind") == S.MEMORIZATION_GAP).count()
    assert gaps == 4 * len(groups)  # every model, every group with paired users
    # known_future_new: sasrec ranks both new targets (z, e) at 6.5, sasrec_f ranks them apart,
    # so the pair (sasrec, sasrec_f) has a row per cell and at most the cell's users
    paired = comparisons.where((F.col("kind") == S.PAIRED) & (F.col(S.CELL) == "known_future_new"))
    pairs = {(r.model, r.baseline) for r in paired.collect()}
    assert pairs == {
        ("popularity", "repeat_last"),
        ("popularity", "sasrec"),
        ("popularity", "sasrec_f"),
        ("repeat_last", "sasrec"),
        ("repeat_last", "sasrec_f"),
        ("sasrec", "sasrec_f"),
    }
    out = tmp_path / "report"
    assert main(["report", "--lake", lake, "--out", str(out), "--tracking-uri", uri]) == 0
    err = capsys.readouterr().err
    assert f"report: {out / 'report.html'}" in err and "report logged to MLflow run" in err
    html = (out / "report.html").read_text()
    assert '<table id="grid-toy" class="grid">' in html
    assert sorted(p.name for p in (out / "figures").iterdir()) == [
        "toy_cutoff_histogram.png",
        "toy_grid.png",
        "toy_memorization_gap.png",
        "toy_scores.png",
    ]
    assert (
        main(
            [
                "compare",
                "--tracking-uri",
                uri,
                "--dataset",
                "toy",
                "--metrics",
                r"^test\.known_past\.ndcg_10$",
            ]
        )
        == 0
    )
    table = capsys.readouterr().out.splitlines()
    assert table[0] == "toy: test known_past" and table[1].split() == ["model", "run", "ndcg_10"]
    assert {"popularity", "repeat_last", "sasrec", "sasrec_f"} <= {line.split()[0] for line in table[2:]}


def test_runs_nest_and_are_found_on_a_real_mlflow_server(spark, toy, toy_metrics, tmp_path):
    """A real `mlflow server` on 127.0.0.1: a benchmark parent run, a nested training run,
    metrics found by their documented names, and the report as the parent's artifacts."""
    import os

    import mlflow
    from mlflow import MlflowClient

    from intent_spark.evaluate.metrics import log_cell_metrics
    from intent_spark.lake.tracking import EXPERIMENT, end_benchmark, log_report, start_benchmark, store
    from intent_spark.report.build import build_report

    lake, _ = toy
    store_before = os.environ.get("MLFLOW_TRACKING_URI")
    port = free_port()
    server = start_mlflow_server(port, tmp_path)
    uri = f"http://127.0.0.1:{port}"
    try:
        parent = start_benchmark(uri, "benchmark toy", {"datasets": "toy", "models": "popularity"})
        child = train(Lake(spark, lake, uri), TOY, "popularity", CONF, parent_run_id=parent)
        score(Lake(spark, lake, uri), TOY, "popularity", CONF)
        # the metrics table already holds every model; only popularity has a run on this server
        log_cell_metrics(uri, "toy", read_table(spark, lake, S.METRICS_TABLE, "toy").collect())
        log_report(uri, str(build_report(Lake(spark, lake), tmp_path / "report").parent), parent)
        end_benchmark(uri, parent, ok=True)

        with store(uri):
            found = mlflow.search_runs(
                experiment_names=[EXPERIMENT], filter_string="metrics.`test.known_future_new.mrr_10` > 0"
            )
        assert list(found["run_id"]) == [child]
        assert found["tags.mlflow.parentRunId"][0] == parent
        assert found["params.test_cutoff"][0] == "2024-04-01" and found["params.model"][0] == "popularity"
        artifacts = {a.path for a in MlflowClient(uri).list_artifacts(parent, "report")}
        assert {"report/report.html", "report/report.md", "report/figures", "report/tables"} <= artifacts
        assert MlflowClient(uri).get_run(parent).info.status == "FINISHED"
        # the server stays the store of these calls only, not of the next lake in this process
        assert os.environ.get("MLFLOW_TRACKING_URI") == store_before
        assert mlflow.get_tracking_uri() != uri
    finally:
        stop_mlflow_server(server)


def test_the_report_says_a_floor_other_than_the_splits(spark, toy, toy_metrics):
    """The toy's split recorded 1,000; metrics evaluated at 1 (an ``--floor-users 1``) are said
    to be an override, and a report's own ``--floor-users 300`` is said as one too."""
    from intent_spark.report.load import lake_floors
    from intent_spark.split.split_tables import split_floor

    lake, _ = toy
    assert split_floor(Lake(spark, lake), "toy") == 1000
    evaluated_at_one = toy_metrics.toPandas().assign(floor_users=1)
    assert lake_floors(Lake(spark, lake), evaluated_at_one, None) == (
        {"toy": 1},
        ["toy evaluated at 1 users (--floor-users), its split's floor is 1,000"],
    )
    assert lake_floors(Lake(spark, lake), evaluated_at_one, 300) == (
        {"toy": 300},
        ["toy shown at 300 users (--floor-users), its split's floor is 1,000"],
    )
    assert lake_floors(Lake(spark, lake), toy_metrics.toPandas(), None) == ({"toy": 1000}, [])
