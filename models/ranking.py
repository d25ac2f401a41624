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
