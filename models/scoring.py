"""Full-catalogue ranks for every target, one user block at a time (SPEC 5).

Count models (popularity, repeat-last) rank a user's targets in one pass over their history.
Neural models score the whole catalogue for batches of contexts (the last ``context`` items
before each target) on the GPU when there is one, and rank by comparison, never by sorting.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

import numpy as np
import torch

from models.ranking import rank_within_scorable


def context_windows(items: np.ndarray, targets: np.ndarray, length: int) -> np.ndarray:
    """(T, length) the ``length`` items before each target position, left-padded with 0.

    Row t holds ``items[targets[t] - length : targets[t]]``: never the target or anything later.
    """
    offsets = np.asarray(targets, dtype=np.int64)[:, None] - length + np.arange(length)[None, :]
    windows = np.where(offsets >= 0, items[np.clip(offsets, 0, None)], 0)
    return windows.astype(np.int64)


def rows_per_chunk(n_items: int, budget: int) -> int:
    """Targets ranked per matrix product, so that rows x catalogue stays within ``budget`` floats.

    On the CPU a budget that fits the last-level cache (a few MiB) lets the two comparison passes
    read the scores from cache instead of memory: 2.5x the targets per second at 100k items.
    """
    return int(max(1, budget // max(1, n_items)))


def rank_blocks(
    model,
    blocks: Iterable,
    *,
    context: int,
    batch_size: int,
    chunk_items: int,
    device: torch.device,
    progress: Callable[[int], None] = lambda _: None,
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Yield ``(seqs, ranks, ties)`` arrays for the targets of the blocks, in batches.

    ``batch_size`` contexts are encoded at once; their scores are ranked ``chunk_items`` scores
    at a time. Each row's scores come from one product, so equal item vectors tie exactly.
    """
    if hasattr(model, "rank_and_ties"):
        done = 0
        for block in blocks:
            if block.targets.size:
                yield (block.seqs, *model.rank_and_ties(block.items, block.targets))
                done += block.targets.size
                progress(done)
        return
    model.eval()
    # Only scorable items are multiplied; the others tie at -inf and are counted, not scored.
    scorable = model.scorable()
    columns = scorable.nonzero().squeeze(1)
    matrix = model.catalogue_matrix()[columns]
    column_of = torch.full((scorable.shape[0],), -1, dtype=torch.long, device=columns.device)
    column_of[columns] = torch.arange(columns.shape[0], device=columns.device)
    n_unscorable = model.n_items - columns.shape[0]
    step = rows_per_chunk(columns.shape[0], chunk_items)

    def flush() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        batch = torch.from_numpy(np.concatenate(contexts)).to(device)
        target_columns = column_of[torch.from_numpy(np.concatenate(wanted)).to(device)]
        with torch.no_grad():
            states = model.encode(batch)[:, -1]
            parts = [
                rank_within_scorable(
                    states[i : i + step] @ matrix.T, target_columns[i : i + step], n_unscorable
                )
                for i in range(0, states.shape[0], step)
            ]
        ranks = torch.cat([r for r, _ in parts]).cpu().numpy()
        ties = torch.cat([t for _, t in parts]).cpu().numpy()
        return np.concatenate(seqs), ranks, ties

    contexts, wanted, seqs, pending, done = [], [], [], 0, 0
    for block in blocks:
        if not block.targets.size:
            continue
        contexts.append(context_windows(block.items, block.targets, context))
        wanted.append(block.items[block.targets])
        seqs.append(block.seqs)
        pending += block.targets.size
        if pending >= batch_size:
            yield flush()
            done += pending
            progress(done)
            contexts, wanted, seqs, pending = [], [], [], 0
    if pending:
        yield flush()
        progress(done + pending)
