"""The same models on a CUDA device: identical popularity ranks, and SASRec ranks within float
tolerance of the CPU's (run on a GPU machine with `pytest -m gpu`; skipped elsewhere)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from intent_spark.plugin import train_steps
from intent_spark.train.ranker import rank_blocks
from intent_spark.train.readers import UserBlock
from models.next_item import scoring_model
from models.sasrec import SASRec, SASRecConf

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def cuda():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    return torch.device("cuda")


def _blocks(n_items: int) -> list[UserBlock]:
    rng = np.random.default_rng(0)
    return [
        UserBlock(rng.integers(1, n_items + 1, 80), np.arange(60, 80), np.arange(20) + 20 * u)
        for u in range(50)
    ]


def _sasrec_ranks(model, blocks, device) -> np.ndarray:
    model.to(device)
    out = rank_blocks(
        scoring_model(model, device), blocks, context=50, batch_size=256, chunk_items=2_000_000, device=device
    )
    return np.concatenate([r for _, r, _ in out])


def test_sasrec_ranks_agree_between_cpu_and_gpu(cuda):
    """The same weights rank the same targets on both devices: a rank may move only where float
    rounding reorders two nearly equal scores, so almost every rank is equal and the rest move
    by a place or two."""
    torch.manual_seed(0)
    model = SASRec(50_000, 40_000, SASRecConf(dropout=0.0)).eval()
    blocks = _blocks(50_000)
    cpu, gpu = _sasrec_ranks(model, blocks, torch.device("cpu")), _sasrec_ranks(model, blocks, cuda)
    assert cpu.shape == gpu.shape == (1000,)
    assert np.mean(cpu == gpu) >= 0.99
    assert np.abs(cpu - gpu).max() <= 2.0


def test_popularity_ranks_are_identical_on_the_gpu(cuda):
    """Count models rank with integers on the host: the device changes no rank and no tie."""
    from intent_spark.plugin import Catalogue
    from models.popularity import PopularityModel

    rng = np.random.default_rng(1)
    counts = np.r_[0, rng.integers(0, 50, 2_000)]
    catalogue = Catalogue(counts, np.zeros((2_001, 1), dtype=np.int64))
    model = PopularityModel(catalogue, PopularityModel.Settings(), cuda)
    model.fit(None)
    blocks = _blocks(2_000)
    answers = {}
    for device in (torch.device("cpu"), cuda):
        out = list(rank_blocks(model, blocks, context=50, batch_size=256, chunk_items=1, device=device))
        answers[device.type] = (
            np.concatenate([r for _, r, _ in out]),
            np.concatenate([t for _, _, t in out]),
        )
    assert np.array_equal(answers["cpu"][0], answers["cuda"][0])
    assert np.array_equal(answers["cpu"][1], answers["cuda"][1])


def test_training_runs_on_the_gpu_and_learns(cuda):
    """Twenty steps on one repeated batch: the weights live on the GPU and the loss is finite and
    falls (a NaN loss or a model left on the CPU fails)."""
    torch.manual_seed(0)
    model = SASRec(1000, 1000, SASRecConf(dropout=0.0))
    rows = torch.randint(1, 1001, (256, 51))
    first = float(model.to(cuda).loss(rows.to(cuda)).detach())
    stats = train_steps(model, model.loss, iter([rows] * 20), steps=20, learning_rate=0.001, device=cuda)
    assert next(model.parameters()).device.type == "cuda"
    assert np.isfinite(stats["final_loss"]) and stats["final_loss"] < first
    assert stats["steps_per_second"] > 0
