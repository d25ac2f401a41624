"""Full-catalogue ranks for every target, one user block at a time (SPEC 5).

Count models (popularity, repeat-last) rank a user's targets in one pass over their history.
Neural models score the whole catalogue for batches of contexts (the last ``context`` items
before each target) on the GPU when there is one, and rank by comparison, never by sorting.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

import numpy as np
import torch

from models.ranking import tie_aware_rank


def context_windows(items: np.ndarray, targets: np.ndarray, length: int) -> np.ndarray:
    """(T, length) the ``length`` items before each target position, left-padded with 0.

    Row t holds ``items[targets[t] - length : targets[t]]``: never the target or anything later.
    """
    offsets = np.asarray(targets, dtype=np.int64)[:, None] - length + np.arange(length)[None, :]
    windows = np.where(offsets >= 0, items[np.clip(offsets, 0, None)], 0)
    return windows.astype(np.int64)


def score_batch_size(n_items: int, budget: int) -> int:
    """Targets per scoring step so that batch x catalogue stays within ``budget`` floats."""
    return int(max(1, min(4096, budget // (n_items + 1))))


def rank_blocks(
    model,
    blocks: Iterable,
    *,
    context: int,
    batch_size: int,
    device: torch.device,
    progress: Callable[[int], None] = lambda _: None,
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Yield ``(seqs, ranks)`` arrays for the targets of the blocks, in batches."""
    if hasattr(model, "rank_history"):
        done = 0
        for block in blocks:
            if block.targets.size:
                yield block.seqs, model.rank_history(block.items, block.targets)
                done += block.targets.size
                progress(done)
        return
    model.eval()
    catalogue = model.catalogue_matrix()
    contexts, wanted, seqs, pending, done = [], [], [], 0, 0

    def flush() -> tuple[np.ndarray, np.ndarray]:
        batch = torch.from_numpy(np.concatenate(contexts)).to(device)
        target = torch.from_numpy(np.concatenate(wanted)).to(device)
        ranks = tie_aware_rank(model.catalogue_scores(batch, catalogue), target)
        return np.concatenate(seqs), ranks.cpu().numpy()

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
