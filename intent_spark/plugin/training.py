"""The training loop every reference model uses and a plug-in may use: Adam steps over the
framework's batches, the same code on the GPU and the CPU, and over several processes
(TorchDistributor) with their gradients averaged."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch


def pick_device() -> torch.device:
    """CUDA where there is a GPU, else the CPU."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def load_state(path: Path, device: torch.device) -> dict[str, Any]:
    """A model's saved state (``torch.save`` of a ``state_dict``), tensors only: a state file sits
    on a shared lake or store, and unpickling anything else would run its code (torch below 2.6
    unpickles any object by default). A file holding other objects is a one-line error."""
    import pickle
    import re

    from intent_spark.core.errors import IntentError

    try:
        return torch.load(path, map_location=device, weights_only=True)
    except pickle.UnpicklingError as exc:
        named = re.search(r"GLOBAL (\S+)", str(exc))
        raise IntentError(
            f"{path}: refused: the state file holds pickled objects, not only tensors"
            + (f" (it calls {named[1]})" if named else "")
        ) from None


def train_steps(
    module: torch.nn.Module,
    loss: Callable[[torch.Tensor], torch.Tensor],
    batches: Iterator[torch.Tensor],
    *,
    steps: int,
    learning_rate: float,
    weight_decay: float = 0.0,
    device: torch.device,
    progress: Callable[[str], None] = lambda _: None,
) -> dict[str, float | str]:
    """The shared training loop: ``steps`` Adam steps of ``loss(rows)`` on batches of
    (B, context + 1) rows, a progress line every tenth; the same code on the GPU and the CPU.

    In a process group of several processes (TorchDistributor) the loss runs through
    DistributedDataParallel: the starting weights are rank 0's and every step's gradients are
    averaged over the processes before Adam's step, so each process holds the same model."""
    module.to(device).train()
    loss = _data_parallel(module, loss)
    optimiser = torch.optim.Adam(module.parameters(), lr=learning_rate, weight_decay=weight_decay)
    start = time.monotonic()
    report_every = max(1, steps // 10)
    loss_sum, loss_count, last_loss = 0.0, 0, float("nan")
    for step in range(1, steps + 1):
        rows = next(batches).to(device, dtype=torch.long)
        value = loss(rows)
        optimiser.zero_grad(set_to_none=True)
        value.backward()
        optimiser.step()
        last_loss = float(value.detach())
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


class _Loss(torch.nn.Module):
    """A loss closure as a module, so DistributedDataParallel runs it as its forward."""

    def __init__(self, module: torch.nn.Module, loss: Callable[[torch.Tensor], torch.Tensor]) -> None:
        super().__init__()
        self.module = module
        self._loss = loss

    def forward(self, rows: torch.Tensor) -> torch.Tensor:
        return self._loss(rows)


@dataclass
class DataParallelLoops:
    """How many ``train_steps`` loops ran with their gradients averaged over a process group."""

    count: int = 0


_COUNTING: ContextVar[DataParallelLoops | None] = ContextVar("data_parallel_loops", default=None)


@contextmanager
def counting_data_parallel_loops() -> Iterator[DataParallelLoops]:
    """Count the averaged loops of one distributed fit (its worker then knows whether the model
    trained through ``train_steps`` or through a loop of its own, whose gradients no one averages)."""
    loops = DataParallelLoops()
    token = _COUNTING.set(loops)
    try:
        yield loops
    finally:
        _COUNTING.reset(token)


def _data_parallel(
    module: torch.nn.Module, loss: Callable[[torch.Tensor], torch.Tensor]
) -> Callable[[torch.Tensor], torch.Tensor]:
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return loss
    from torch.nn.parallel import DistributedDataParallel

    counting = _COUNTING.get()
    if counting is not None:
        counting.count += 1
    # find_unused_parameters: a model may leave some weights out of a step's loss
    return DistributedDataParallel(_Loss(module, loss), find_unused_parameters=True)
