"""The rank rule of SPEC 5: 1 + #(items scoring strictly higher) + #(other items tied) / 2.

Computed from comparisons against the target's score, never from a sort, so the cost per target
is one pass over the catalogue. Items a model cannot score carry ``-inf`` and so tie at the
bottom; the padding column 0 is never counted.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import torch

log = logging.getLogger(__name__)


def tie_aware_rank(scores: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Expected rank of each row's target within its tie group, as float64.

    ``scores`` is (B, N + 1) over catalogue indices 0..N (column 0 is padding and ignored);
    ``targets`` is (B,) catalogue indices in 1..N.
    """
    catalogue = scores[:, 1:]
    target_scores = scores.gather(1, targets.view(-1, 1))
    higher = (catalogue > target_scores).sum(dim=1)
    tied = (catalogue == target_scores).sum(dim=1) - 1
    return 1.0 + higher.to(torch.float64) + tied.to(torch.float64) / 2.0


def count_higher_and_tied(
    scores: torch.Tensor, target_scores: torch.Tensor, same: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row: how many scores are above the row's target score, and how many equal it.
    ``same`` marks the items whose vector equals the target's: they tie whatever their score.

    int32 sums: torch's default int64 sum of a bool tensor costs 3x the comparison itself.
    """
    above, level = scores > target_scores, scores == target_scores
    if same is not None:
        above, level = above & ~same, level | same
    return above.sum(dim=1, dtype=torch.int32), level.sum(dim=1, dtype=torch.int32)


def vector_keys(matrix: torch.Tensor) -> torch.Tensor:
    """One int64 per row, equal for rows with equal float bits: the bits times fixed odd
    multipliers, summed with integer wraparound. A matrix product can score two equal rows a
    last bit apart (its kernels treat column positions differently); an integer sum is exact in
    any order, so equal rows get equal keys in every block and on every device."""
    bits = matrix.float().contiguous().view(torch.int32).to(torch.int64)
    generator = torch.Generator().manual_seed(0x1D5EED)
    multipliers = torch.randint(-(2**62), 2**62, (matrix.shape[1],), generator=generator) | 1
    return (bits * multipliers.to(matrix.device)).sum(dim=1)


class FusedCounter:
    """``count_higher_and_tied`` compiled into one loop over the scores (torch.compile), for
    large catalogues on the CPU: one read of each score instead of two passes. The first call
    compiles (seconds); where compiling fails (no C++ compiler) it says so once and stays eager.
    """

    def __init__(self) -> None:
        self._count: Callable[..., tuple[torch.Tensor, torch.Tensor]] | None = None

    def __call__(
        self, scores: torch.Tensor, target_scores: torch.Tensor, same: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if self._count is None:
            self._count = torch.compile(count_higher_and_tied, dynamic=True)
        try:
            return self._count(scores, target_scores, same)
        except Exception as exc:  # noqa: BLE001 - any compiler failure means: rank eagerly
            if self._count is count_higher_and_tied:
                raise
            log.warning("ranking without the fused comparison (torch.compile failed: %s)", str(exc)[:200])
            self._count = count_higher_and_tied
            return count_higher_and_tied(scores, target_scores, same)


fused_count_higher_and_tied = FusedCounter()


def rank_within_scorable(
    scores: torch.Tensor, target_columns: torch.Tensor, n_unscorable: int, keys: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The same rank when only the M scorable items were scored: ``scores`` is (B, M).

    ``target_columns`` holds each target's column in ``scores``, or -1 when the model cannot
    score the target. The ``n_unscorable`` other items all sit at ``-inf``: below every scorable
    target, and in one tie with an unscorable one (1 + M + (n_unscorable - 1) / 2). Returns the
    ranks and, per target, how many other items tie with it. Scoring ranks in item blocks
    (``rank_in_item_blocks``); this whole-matrix form is the reference it is tested against.
    ``keys`` (``vector_keys`` of the scored items) makes items with the target's vector tie.
    """
    if scores.shape[1] == 0:
        return _ranks(None, None, target_columns, 0, n_unscorable)
    own = target_columns.clamp(min=0).view(-1, 1)
    same = None if keys is None else keys.unsqueeze(0) == keys[own]
    higher, equal = count_higher_and_tied(scores, scores.gather(1, own), same)
    return _ranks(higher, equal, target_columns, scores.shape[1], n_unscorable)


def rank_in_item_blocks(
    states: torch.Tensor,
    matrix: torch.Tensor,
    target_columns: torch.Tensor,
    n_unscorable: int,
    block_items: int,
    count=count_higher_and_tied,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``rank_within_scorable(states @ matrix.T, ...)`` without the (B, M) score matrix: one
    product per block of ``block_items`` items, so each block's scores stay in cache.

    Every product also scores the targets' own vectors, appended as B extra columns: each row is
    compared with its target's score from the same product. An item whose vector equals the
    target's (the target itself, a new item with the same tokens) ties with it by its
    ``vector_keys``, whichever block it is in and whatever the product's last bits.
    """
    rows, scorable_items = states.shape[0], matrix.shape[0]
    if scorable_items == 0:
        return _ranks(None, None, target_columns, 0, n_unscorable)
    own_columns = target_columns.clamp(min=0)
    own = matrix[own_columns]
    keys = vector_keys(matrix)
    own_keys = keys[own_columns].unsqueeze(1)
    higher = torch.zeros(rows, dtype=torch.int32, device=states.device)
    equal = torch.zeros(rows, dtype=torch.int32, device=states.device)
    for start in range(0, scorable_items, block_items):
        block = matrix[start : start + block_items]
        scores = states @ torch.cat([block, own]).T
        width = block.shape[0]
        same = keys[start : start + width].unsqueeze(0) == own_keys
        above, level = count(scores[:, :width], scores[:, width:].diagonal().unsqueeze(1), same)
        higher += above
        equal += level
    return _ranks(higher, equal, target_columns, scorable_items, n_unscorable)


def _ranks(higher, equal, target_columns, scorable_items: int, n_unscorable: int):
    """Ranks and ties from the per-row counts; unscorable targets (column -1) at the bottom."""
    device = target_columns.device
    bottom = torch.full(
        target_columns.shape,
        1.0 + scorable_items + (n_unscorable - 1) / 2.0,
        dtype=torch.float64,
        device=device,
    )
    bottom_ties = torch.full(target_columns.shape, n_unscorable - 1, dtype=torch.long, device=device)
    if higher is None:
        return bottom, bottom_ties
    scorable = target_columns >= 0
    tied = equal.long() - 1
    ranks = torch.where(scorable, 1.0 + higher.to(torch.float64) + tied.to(torch.float64) / 2.0, bottom)
    return ranks, torch.where(scorable, tied, bottom_ties)
