"""The training loop shared by SASRec and SASRec-F: same code on the GPU and the CPU."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import torch

from models.sasrec import NegativeSampler, SASRec


def pick_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def fit(
    model: SASRec,
    batches: Iterator[torch.Tensor],
    *,
    steps: int,
    learning_rate: float,
    weight_decay: float = 0.0,
    sampler: NegativeSampler | None = None,
    device: torch.device,
    progress: Callable[[str], None] = lambda _: None,
) -> dict[str, float]:
    """Run ``steps`` optimiser steps on batches of (B, context + 1) rows; return summary stats."""
    model.to(device).train()
    optimiser = torch.optim.Adam(model.parameters(), lr=learning_rate, weight_decay=weight_decay)
    start = time.monotonic()
    report_every = max(1, steps // 10)
    loss_sum, loss_count, last_loss = 0.0, 0, float("nan")
    for step in range(1, steps + 1):
        rows = next(batches).to(device, dtype=torch.long)
        loss = model.loss(rows, sampler)
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        optimiser.step()
        last_loss = float(loss.detach())
        loss_sum, loss_count = loss_sum + last_loss, loss_count + 1
        if step % report_every == 0 or step == steps:
            elapsed = time.monotonic() - start
            rate = step / elapsed if elapsed else float("inf")
            progress(
                f"step {step:,}/{steps:,}, loss {loss_sum / loss_count:.4f}, "
                f"{rate:.1f} steps/s, about {(steps - step) / rate:.0f}s left"
            )
            loss_sum, loss_count = 0.0, 0
    elapsed = time.monotonic() - start
    return {
        "train_seconds": elapsed,
        "steps_per_second": steps / elapsed if elapsed else 0.0,
        "final_loss": last_loss,
    }
