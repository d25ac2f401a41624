"""Full-catalogue ranks for every target, one user block at a time (SPEC 5).

Count models (popularity, repeat-last) rank a user's targets in one pass over their history.
Neural models score the whole catalogue for batches of contexts (the last ``context`` items
before each target) on the GPU when there is one, and rank by comparison, never by sorting.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

import numpy as np
import torch

from models.ranking import count_higher_and_tied, fused_count_higher_and_tied, rank_in_item_blocks


def context_windows(items: np.ndarray, targets: np.ndarray, length: int) -> np.ndarray:
    """(T, length) the ``length`` items before each target position, left-padded with 0.

    Row t holds ``items[targets[t] - length : targets[t]]``: never the target or anything later.
    """
    offsets = np.asarray(targets, dtype=np.int64)[:, None] - length + np.arange(length)[None, :]
    windows = np.where(offsets >= 0, items[np.clip(offsets, 0, None)], 0)
    return windows.astype(np.int64)


def rank_blocks(
    model,
    blocks: Iterable,
    *,
    context: int,
    batch_size: int,
    chunk_items: int,
    device: torch.device,
    fuse_from_items: int | None = None,
    progress: Callable[[int], None] = lambda _: None,
) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Yield ``(seqs, ranks, ties)`` arrays for the targets of the blocks, in batches.

    ``batch_size`` contexts are encoded at once; their scores are computed and ranked
    ``chunk_items`` scores at a time, a block of items for all the batch's rows
    (``rank_in_item_blocks``), so equal item vectors tie exactly.
    On the CPU, from ``fuse_from_items`` scorable items on, the two comparison passes run as one
    compiled loop (``FusedCounter``).
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
    catalogue = model.catalogue_matrix()
    matrix = catalogue[columns]
    column_of = torch.full((scorable.shape[0],), -1, dtype=torch.long, device=columns.device)
    column_of[columns] = torch.arange(columns.shape[0], device=columns.device)
    n_unscorable = model.n_items - columns.shape[0]
    fuse = device.type == "cpu" and fuse_from_items is not None and columns.shape[0] >= fuse_from_items
    count = fused_count_higher_and_tied if fuse else count_higher_and_tied

    def flush() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        batch = torch.from_numpy(np.concatenate(contexts)).to(device)
        target_columns = column_of[torch.from_numpy(np.concatenate(wanted)).to(device)]
        with torch.no_grad():
            states = model.encode_last(batch, catalogue)
            block_items = max(1, chunk_items // states.shape[0])
            ranks, ties = rank_in_item_blocks(
                states, matrix, target_columns, n_unscorable, block_items, count
            )
        return np.concatenate(seqs), ranks.cpu().numpy(), ties.cpu().numpy()

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
