"""The same SASRec trained through Petastorm's reader and through ours, on the same files, ranks
held-out targets equally well: their hit rates at 5 lie within each other's 95% intervals, and
both far above chance (a reader that fed the model the wrong rows would fail the second).

The task is learnable by hand: 40 items, and after item i the next is ``NEXT[i]`` nine times in
ten, so a model that learned the transitions puts the target in its top 5 about 90% of the time;
chance is 5 of 40. Runs where Petastorm can (the `petastorm` stack), skipped elsewhere."""

from __future__ import annotations

import math
from functools import partial

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from intent_spark.plugin import Catalogue, TrainingData
from intent_spark.train.build import build_model
from intent_spark.train.conf import ModelsConf
from intent_spark.train.readers import petastorm_problem
from intent_spark.train.registry import resolve
from intent_spark.train.workers import open_batches

pytestmark = pytest.mark.skipif(
    petastorm_problem() is not None, reason=f"Petastorm cannot run here: {petastorm_problem()}"
)

ITEMS, CONTEXT, K = 40, 5, 5
NEXT = np.random.default_rng(0).permutation(ITEMS) + 1  # catalogue indices 1..40


def _walks(rng: np.random.Generator, rows: int) -> np.ndarray:
    """(rows, CONTEXT + 1) walks: each next item is NEXT of the last, or any item one time in ten."""
    walks = np.zeros((rows, CONTEXT + 1), dtype=np.int64)
    walks[:, 0] = rng.integers(1, ITEMS + 1, rows)
    for step in range(1, CONTEXT + 1):
        follow = rng.random(rows) < 0.9
        walks[:, step] = np.where(follow, NEXT[walks[:, step - 1] - 1], rng.integers(1, ITEMS + 1, rows))
    return walks


@pytest.fixture(scope="module")
def training_files(tmp_path_factory):
    """2,400 training rows in four files of six row groups."""
    folder = tmp_path_factory.mktemp("reader_quality")
    walks = _walks(np.random.default_rng(1), 2_400)
    urls = []
    for f, part in enumerate(np.split(walks, 4)):
        path = folder / f"part-{f:05d}.parquet"
        pq.write_table(
            pa.table({"items": pa.array(part.tolist(), type=pa.list_(pa.int64()))}), path, row_group_size=100
        )
        urls.append(f"file://{path}")
    return urls


def _hit_rate(urls: list[str], reader: str, held_out: np.ndarray) -> tuple[float, float]:
    """SASRec fitted through ``reader``: its hit rate at K on the held-out walks, and the 95%
    interval's half-width."""
    settings = {"blocks": 1, "dims": 32, "heads": 1, "dropout": 0.0, "steps": 300, "batch_size": 64}
    conf = ModelsConf(
        context=CONTEXT, models={"sasrec": {**settings, "shuffle_buffer": 200, "learning_rate": 0.005}}
    )
    cls = resolve("sasrec")
    catalogue = Catalogue(np.r_[0, np.ones(ITEMS, dtype=np.int64)], np.zeros((ITEMS + 1, 1), dtype=np.int64))
    model = build_model(cls, catalogue, conf, torch.device("cpu"))
    training = TrainingData(
        partial(open_batches, urls, (0, 1), reader),
        context=CONTEXT,
        seed=0,
        device=torch.device("cpu"),
        progress=lambda line: None,
    )
    torch.manual_seed(0)
    model.fit(training)
    model.eval()
    with torch.no_grad():
        vectors = model.item_vectors()
        scores = model.encode(torch.from_numpy(held_out[:, :-1]), vectors) @ vectors.T
    scores[:, 0] = -math.inf
    target = scores.gather(1, torch.from_numpy(held_out[:, -1:])).squeeze(1)
    rank = 1 + (scores > target[:, None]).sum(1)
    hits = (rank <= K).double().numpy()
    return float(hits.mean()), 1.96 * float(hits.std(ddof=1)) / math.sqrt(hits.shape[0])


def test_sasrec_learns_as_well_through_either_reader(training_files):
    held_out = _walks(np.random.default_rng(2), 600)
    ours, ours_half = _hit_rate(training_files, "arrow", held_out)
    theirs, theirs_half = _hit_rate(training_files, "petastorm", held_out)
    assert ours > 0.6 and theirs > 0.6, (ours, theirs)  # chance is 0.125
    assert abs(ours - theirs) <= max(ours_half, theirs_half), (ours, ours_half, theirs, theirs_half)
