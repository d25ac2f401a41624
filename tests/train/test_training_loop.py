"""The shared training loop over two processes (no JVM: torch's gloo group on this machine). Two
processes that train through ``train_steps`` average their gradients, so they end with the same
weights, and their fit counts one averaged loop; a model's own loop counts none, which is how a
distributed fit knows to refuse it."""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from intent_spark.plugin.training import counting_data_parallel_loops, train_steps


def _fit(rank: int, init: str, out: str) -> None:
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
    try:
        torch.manual_seed(rank)  # different starting weights: DDP starts both from rank 0's
        module = torch.nn.Embedding(6, 3)
        rows = torch.full((4, 2), rank + 1)  # each process its own batch
        batches = iter([rows] * 3)
        with counting_data_parallel_loops() as shared:
            train_steps(
                module,
                lambda r: module(r).pow(2).mean(),
                batches,
                steps=3,
                learning_rate=0.1,
                device=torch.device("cpu"),
            )
        with counting_data_parallel_loops() as own:
            optimiser = torch.optim.SGD(module.parameters(), lr=0.1)
            module(rows).sum().backward()  # a plug-in's own loop: nothing averages this step
            optimiser.step()
        torch.save(
            {"shared": shared.count, "own": own.count, "weights": module.weight.detach()}, f"{out}.{rank}"
        )
    finally:
        dist.destroy_process_group()


def test_two_processes_average_through_train_steps_and_a_models_own_loop_counts_none(tmp_path):
    out = str(tmp_path / "fit")
    mp.spawn(_fit, args=(f"file://{tmp_path / 'group'}", out), nprocs=2, join=True)
    first, second = (torch.load(f"{out}.{rank}", weights_only=True) for rank in (0, 1))
    assert first["shared"] == second["shared"] == 1
    assert first["own"] == second["own"] == 0
    # after the averaged loop both held rank 0's weights moved by the averaged gradient; the own
    # step then moved each by its own batch's gradient only: rows 1 and 2 differ, the rest agree
    differs = (first["weights"] != second["weights"]).any(dim=1).tolist()
    assert differs == [False, True, True, False, False, False]
