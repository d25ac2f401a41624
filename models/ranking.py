"""The rank rule of SPEC 5: 1 + #(items scoring strictly higher) + #(other items tied) / 2.

Computed from comparisons against the target's score, never from a sort, so the cost per target
is one pass over the catalogue. Items a model cannot score carry ``-inf`` and so tie at the
bottom; the padding column 0 is never counted.
"""

from __future__ import annotations

import torch


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


def rank_within_scorable(
    scores: torch.Tensor, target_columns: torch.Tensor, n_unscorable: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The same rank when only the M scorable items were scored: ``scores`` is (B, M).

    ``target_columns`` holds each target's column in ``scores``, or -1 when the model cannot
    score the target. The ``n_unscorable`` other items all sit at ``-inf``: below every scorable
    target, and in one tie with an unscorable one (1 + M + (n_unscorable - 1) / 2). Returns the
    ranks and, per target, how many other items tie with it.
    """
    bottom = torch.full(
        target_columns.shape, 1.0 + scores.shape[1] + (n_unscorable - 1) / 2.0, dtype=torch.float64
    )
    bottom = bottom.to(scores.device)
    bottom_ties = torch.full(target_columns.shape, n_unscorable - 1, dtype=torch.long, device=scores.device)
    if scores.shape[1] == 0:
        return bottom, bottom_ties
    scorable = target_columns >= 0
    target_scores = scores.gather(1, target_columns.clamp(min=0).view(-1, 1))
    higher = (scores > target_scores).sum(dim=1).to(torch.float64)
    tied = (scores == target_scores).sum(dim=1) - 1
    ranks = torch.where(scorable, 1.0 + higher + tied.to(torch.float64) / 2.0, bottom)
    return ranks, torch.where(scorable, tied, bottom_ties)
