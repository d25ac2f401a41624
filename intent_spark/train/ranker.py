"""Full-catalogue ranks for every target, one user block at a time (SPEC 5), for every kind of
model of ``intent_spark.plugin``, and the checks of what a model gives back.

History models (popularity, repeat-last) rank a user's targets in one pass over their history.
Vector and score models see batches of contexts (the last ``context`` items before each
target), on the GPU when there is one; the framework ranks by comparison, never by sorting,
and the items a model cannot score tie at the bottom whatever it returned for them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np
import torch

from intent_spark.core.progress import silent
from intent_spark.plugin import HistoryModel, Model, ScoresModel, UserBatch, VectorsModel
from intent_spark.train.rank_rule import (
    count_higher_and_tied,
    fused_count_higher_and_tied,
    rank_in_item_blocks,
    rank_within_scorable,
    vector_keys,
)


class ModelFault(ValueError):
    """What a model gave back breaks the interface: the wrong shape or dtype, NaN or infinity."""


def context_windows(items: np.ndarray, targets: np.ndarray, length: int) -> np.ndarray:
    """(T, length) the ``length`` items before each target position, left-padded with 0.

    Row t holds ``items[targets[t] - length : targets[t]]``: never the target or anything later.
    """
    offsets = np.asarray(targets, dtype=np.int64)[:, None] - length + np.arange(length)[None, :]
    windows = np.where(offsets >= 0, items[np.clip(offsets, 0, None)], 0)
    return windows.astype(np.int64)


def rank_blocks(
    model: Model,
    blocks: Iterable[Any],
    *,
    context: int,
    batch_size: int,
    chunk_items: int,
    device: torch.device,
    fuse_from_items: int | None = None,
    progress: Callable[[int], None] = silent,
) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Yield ``(seqs, ranks, ties)`` arrays for the targets of the blocks, in batches.

    ``blocks``: one user each (a ``UserBlock``: ``items``, ``targets``, ``seqs``) or many users
    at once (``UserBatch``). History models rank a whole batch in one call when they can
    (``HistoryModel.rank_users``). Vector models: ``batch_size`` contexts are encoded at once;
    their scores are computed and ranked ``chunk_items`` scores at a time, a block of items for
    all the batch's rows (``rank_in_item_blocks``), so equal item vectors tie exactly. On the
    CPU, from ``fuse_from_items`` scorable items on, the two comparison passes run as one
    compiled loop. Score models: as many contexts at once as keep a batch's scores within
    ``chunk_items``.
    """
    if isinstance(model, HistoryModel):
        yield from _rank_histories(model, blocks, progress)
        return
    model.eval()
    scorable = _checked_mask(model.scorable(), model.catalogue.n_items).to(device)
    columns = scorable.nonzero().squeeze(1)
    column_of = torch.full((scorable.shape[0],), -1, dtype=torch.long, device=device)
    column_of[columns] = torch.arange(columns.shape[0], device=device)
    n_unscorable = model.catalogue.n_items - columns.shape[0]
    if isinstance(model, ScoresModel):
        rows = max(1, min(batch_size, chunk_items // (model.catalogue.n_items + 1)))
        rank = _score_ranker(model, columns, n_unscorable)
    else:
        rows = batch_size
        rank = _vector_ranker(model, columns, n_unscorable, chunk_items, device, fuse_from_items)

    def flush() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        batch = torch.from_numpy(np.concatenate(contexts)).to(device)
        target_columns = column_of[torch.from_numpy(np.concatenate(wanted)).to(device)]
        with torch.no_grad():
            ranks, ties = rank(batch, target_columns)
        return np.concatenate(seqs), ranks.cpu().numpy(), ties.cpu().numpy()

    contexts, wanted, seqs, pending, done = [], [], [], 0, 0
    for items, targets, target_seqs in _per_user(blocks):
        if not targets.size:
            continue
        contexts.append(context_windows(items, targets, context))
        wanted.append(items[targets])
        seqs.append(target_seqs)
        pending += targets.size
        if pending >= rows:
            yield flush()
            done += pending
            progress(done)
            contexts, wanted, seqs, pending = [], [], [], 0
    if pending:
        yield flush()
        progress(done + pending)


def _per_user(blocks: Iterable[Any]) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """``(items, targets, seqs)`` of one user at a time, from blocks or batches."""
    for block in blocks:
        if isinstance(block, UserBatch):
            yield from block.users()
        else:
            yield block.items, block.targets, block.seqs


def _rank_histories(
    model: Model, blocks: Iterable[Any], progress: Callable[[int], None]
) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """A history model's ranks: a batch of users in one call where the model ranks many users
    at once, else user by user; every answer checked (shape, finite, inside 1..N)."""
    n_items, done = model.catalogue.n_items, 0
    at_once = type(model).rank_users is not HistoryModel.rank_users  # type: ignore[attr-defined]
    for block in blocks:
        if isinstance(block, UserBatch) and at_once:
            parts = [(block.targets, block.seqs, model.rank_users(block))]  # type: ignore[attr-defined]
        else:
            parts = [
                (targets, seqs, model.rank_and_ties(items, targets))  # type: ignore[attr-defined]
                for items, targets, seqs in _per_user([block])
                if targets.size
            ]
        for targets, seqs, (ranks, ties) in parts:
            ranks, ties = np.asarray(ranks), np.asarray(ties)
            expected = targets.shape
            if ranks.shape != expected or ties.shape != expected:
                raise ModelFault(f"ranks of shape {ranks.shape} and ties {ties.shape}, expected {expected}")
            if not np.all(np.isfinite(ranks)) or np.any(ranks < 1) or np.any(ranks > n_items):
                raise ModelFault(f"ranks outside 1..{n_items} or not finite")
            yield seqs, ranks.astype(np.float64), ties.astype(np.int64)
            done += targets.size
        progress(done)


def _vector_ranker(model, columns, n_unscorable, chunk_items, device, fuse_from_items):
    """Ranks of a batch's targets from the model's context states and item vectors."""
    with torch.no_grad():
        catalogue = _checked(model.item_vectors(), "item vectors", (model.catalogue.n_items + 1, None))
    catalogue = catalogue.to(device)
    if not torch.isfinite(catalogue[columns]).all():
        raise ModelFault("item vectors hold NaN or infinite values")
    # Only scorable items are multiplied; the others tie at -inf and are counted, not scored.
    matrix = catalogue[columns]
    fuse = device.type == "cpu" and fuse_from_items is not None and columns.shape[0] >= fuse_from_items
    count = fused_count_higher_and_tied if fuse else count_higher_and_tied

    def rank(batch: torch.Tensor, target_columns: torch.Tensor):
        states = _checked(model.encode(batch, catalogue), "context states", (batch.shape[0], matrix.shape[1]))
        if not torch.isfinite(states).all():
            raise ModelFault("context states hold NaN or infinite values")
        block_items = max(1, chunk_items // states.shape[0])
        return rank_in_item_blocks(states, matrix, target_columns, n_unscorable, block_items, count)

    return rank


def _score_ranker(model, columns, n_unscorable):
    """Ranks of a batch's targets from the model's scores of the whole catalogue."""

    def rank(batch: torch.Tensor, target_columns: torch.Tensor):
        expected = (batch.shape[0], model.catalogue.n_items + 1)
        scores = _checked(model.scores(batch), "scores", expected)[:, columns]
        if not torch.isfinite(scores).all():
            raise ModelFault("NaN or infinite scores for items it says it can score (never ranked)")
        return rank_within_scorable(scores, target_columns, n_unscorable)

    return rank


def _checked(values, what: str, shape: tuple[int | None, ...]) -> torch.Tensor:
    if not isinstance(values, torch.Tensor):
        raise ModelFault(f"{what} must be a torch tensor, got {type(values).__name__}")
    if not values.is_floating_point():
        raise ModelFault(f"{what} must be floating point, got {values.dtype}")
    if values.dim() != len(shape) or any(
        n is not None and n != m for n, m in zip(shape, values.shape, strict=False)
    ):
        wanted = ", ".join("d" if n is None else str(n) for n in shape)
        raise ModelFault(f"{what} of shape {tuple(values.shape)}, expected ({wanted})")
    return values


def _checked_mask(mask, n_items: int) -> torch.Tensor:
    mask = torch.as_tensor(mask)
    if mask.dtype != torch.bool or tuple(mask.shape) != (n_items + 1,):
        raise ModelFault(
            f"scorable() must be a bool tensor of shape ({n_items + 1},), got {mask.dtype} {tuple(mask.shape)}"
        )
    mask = mask.clone()
    mask[0] = False  # padding is never an item
    return mask


def top_items(
    model: Model,
    blocks: Iterable,
    *,
    context: int,
    k: int,
    chunk_items: int,
    device: torch.device,
    progress: Callable[[int], None] = silent,
) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
    """Yield ``(seq, indices, scores)`` per target: its best ``k`` catalogue indices, best first,
    and their scores (float64), by the scores the ranker compares.

    A tie group that reaches past position ``k`` is listed whole, so the rank read back from a
    list (position, ties by equal score) is the rank ``rank_blocks`` gives; inside a tie group
    indices ascend. Items the model cannot score tie at the bottom, below every scored item.
    As many targets are scored at once as keep their scores within ``chunk_items``.
    """
    n_items = model.catalogue.n_items
    rows = max(1, chunk_items // (n_items + 1))
    model.eval()
    score = _history_scorer(model) if isinstance(model, HistoryModel) else _context_scorer(model, device)
    done = 0
    pending: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # (items, targets, seqs) slices

    def flush() -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
        with torch.no_grad():
            scores = score(pending, context)  # (B, N) over indices 1..N
        seqs = np.concatenate([part[2] for part in pending])
        for row, seq in zip(scores, seqs.tolist(), strict=True):
            yield (seq, *_top_of_row(row, k))

    held = 0
    for block in blocks:
        for start in range(0, block.targets.size, rows):
            part = (block.items, block.targets[start : start + rows], block.seqs[start : start + rows])
            pending.append(part)
            held += part[1].size
            if held >= rows:
                yield from flush()
                done += held
                progress(done)
                pending, held = [], 0
    if held:
        yield from flush()
        progress(done + held)


def _top_of_row(row: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The 1-based indices scoring at least the k-th best score, by score then index."""
    k = min(k, row.shape[0])
    threshold = np.partition(row, row.shape[0] - k)[row.shape[0] - k]
    chosen = np.flatnonzero(row >= threshold)
    order = np.lexsort((chosen, -row[chosen]))
    return chosen[order] + 1, row[chosen[order]]


def _with_bottom(scores: np.ndarray, scorable: np.ndarray) -> np.ndarray:
    """Unscorable columns set to one value below every scored one (they tie at the bottom)."""
    if scorable.all():
        return scores
    scored = scores[:, scorable]
    low = scored.min(axis=1) if scored.size else np.zeros(scores.shape[0])
    bottom = low - np.maximum(1.0, np.abs(low))
    return np.where(scorable[None, :], scores, bottom[:, None])


def _history_scorer(model):
    """Scores of a history model's targets, from its ``history_scores`` (what its ranks count)."""
    n_items = model.catalogue.n_items
    if type(model).history_scores is HistoryModel.history_scores:
        raise ModelFault("ranks without scores (no history_scores), so it cannot list its top items")

    def score(parts, context: int) -> np.ndarray:
        out = []
        for items, targets, _ in parts:
            values = np.asarray(model.history_scores(items, targets), dtype=np.float64)
            if values.shape != (targets.size, n_items + 1):
                raise ModelFault(
                    f"history scores of shape {values.shape}, expected ({targets.size}, {n_items + 1})"
                )
            if not np.all(np.isfinite(values[:, 1:])):
                raise ModelFault("NaN or infinite history scores (never ranked)")
            out.append(values[:, 1:])
        return np.concatenate(out)

    return score


def _context_scorer(model, device: torch.device):
    """Scores of a vector or score model's contexts over every item, scorable ones only, and
    equal item vectors scored equal (the ranker ties them whatever the product gives)."""
    scorable = _checked_mask(model.scorable(), model.catalogue.n_items).to(device)
    columns = scorable.nonzero().squeeze(1)
    mask = scorable[1:].cpu().numpy()
    if isinstance(model, VectorsModel):
        with torch.no_grad():
            catalogue = _checked(
                model.item_vectors(), "item vectors", (model.catalogue.n_items + 1, None)
            ).to(device)
        matrix = catalogue[columns]
        _, groups = torch.unique(vector_keys(matrix), return_inverse=True)
        first = torch.full((int(groups.max()) + 1 if groups.numel() else 0,), groups.numel(), device=device)
        first = first.scatter_reduce(0, groups, torch.arange(groups.numel(), device=device), "amin")
        representative = first[groups]

    def score(parts, context: int) -> np.ndarray:
        windows = np.concatenate([context_windows(items, targets, context) for items, targets, _ in parts])
        batch = torch.from_numpy(windows).to(device)
        full = torch.zeros((batch.shape[0], model.catalogue.n_items + 1), dtype=torch.float64, device=device)
        if isinstance(model, VectorsModel):
            states = _checked(
                model.encode(batch, catalogue), "context states", (batch.shape[0], matrix.shape[1])
            )
            values = (states @ matrix.T)[:, representative]
        else:
            values = _checked(model.scores(batch), "scores", (batch.shape[0], model.catalogue.n_items + 1))[
                :, columns
            ]
        if not torch.isfinite(values).all():
            raise ModelFault("NaN or infinite scores for items it says it can score (never ranked)")
        full[:, columns] = values.to(torch.float64)
        return _with_bottom(full[:, 1:].cpu().numpy(), mask)

    return score
