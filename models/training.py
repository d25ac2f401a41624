"""The device the models run on, and the SASRec training loop the tests and benchmarks call."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch

from models.interface import train_steps
from models.next_item import NegativeSampler, NextItemNetwork


def pick_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def fit(
    model: NextItemNetwork,
    batches: Iterator[torch.Tensor],
    *,
    steps: int,
    learning_rate: float,
    weight_decay: float = 0.0,
    sampler: NegativeSampler | None = None,
    device: torch.device,
    progress: Callable[[str], None] = lambda _: None,
) -> dict[str, float | str]:
    """``steps`` optimiser steps of the network's next-item loss; return summary stats."""
    return train_steps(
        model,
        lambda rows: model.loss(rows, sampler),
        batches,
        steps=steps,
        learning_rate=learning_rate,
        weight_decay=weight_decay,
        device=device,
        progress=progress,
    )
