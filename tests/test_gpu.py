"""The same models on a CUDA device: identical popularity ranks, and SASRec ranks within float
tolerance of the CPU's (run on a GPU machine with `pytest -m gpu`; skipped elsewhere)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from intent_spark.lake.readers import UserBlock
from models.next_item import scoring_model
from models.sasrec import SASRec, SASRecConf
from models.scoring import rank_blocks
from models.training import fit

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


def test_sasrec_ranks_agree_between_cpu_and_gpu(cuda):
    torch.manual_seed(0)
    conf = SASRecConf(dropout=0.0)
    model = SASRec(50_000, 40_000, conf).eval()
    blocks = _blocks(50_000)
    ranks = {}
    for device in (torch.device("cpu"), cuda):
        model.to(device)
        out = rank_blocks(
            scoring_model(model, device),
            blocks,
            context=50,
            batch_size=256,
            chunk_items=2_000_000,
            device=device,
        )
        ranks[device.type] = np.concatenate([r for _, r, _ in out])
    assert np.allclose(ranks["cpu"], ranks["cuda"], rtol=0, atol=2.0)  # float ties may move by a place


def test_training_runs_on_the_gpu(cuda):
    torch.manual_seed(0)
    model = SASRec(1000, 1000, SASRecConf(dropout=0.0))
    rows = torch.randint(1, 1001, (256, 51))
    stats = fit(model, iter([rows] * 20), steps=20, learning_rate=0.001, device=cuda)
    assert stats["steps_per_second"] > 0 and next(model.parameters()).device.type == "cuda"
