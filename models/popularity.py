"""Popularity (SPEC 4): score(i) = 0.7 * c_u(i) / n + 0.3 * (g(i) + 1) / (E + N).

c_u(i) is the count of i in the user's context of n events (it grows online, event by event),
g(i) the item's count in the training events, E their number and N the catalogue size.

Ranks are exact and need no per-target score vector: multiplied by 10 n (E + N) every score is
the integer 7 c(i) (E + N) + 3 n (g(i) + 1). Items outside the user's context score 3 n (g + 1),
so how many of them beat the target is a binary search in the sorted global counts; only the
user's own distinct items need a pass per target. Cost per user: O(events + targets x distinct
items), with at most 100 targets per period.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from intent_spark.plugin import HistoryModel, NoSettings, UserBatch

USER_WEIGHT_TENTHS = 7  # 0.7, fixed by SPEC 4
GLOBAL_WEIGHT_TENTHS = 3


class Popularity:
    """``train_counts[i]`` is g(i) for catalogue index i in 1..N (index 0 is padding)."""

    def __init__(self, train_counts: np.ndarray) -> None:
        counts = np.asarray(train_counts, dtype=np.int64)
        self.train_counts = counts
        self.n_items = counts.shape[0] - 1
        self.train_events = int(counts[1:].sum())
        self.denominator = self.train_events + self.n_items
        self.sorted_g1 = np.sort(counts[1:] + 1)

    def rank_and_ties(self, items: np.ndarray, targets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Ranks, and how many other items tie with each target.

        ``items`` is one user's history in (ts, seq) order; ``targets`` ascending positions >= 1.
        """
        items = np.asarray(items, dtype=np.int64)
        targets = np.asarray(targets, dtype=np.int64)
        if targets.size == 0:
            return np.zeros(0, dtype=np.float64), np.zeros(0, dtype=np.int64)
        distinct, inverse = np.unique(items[: targets[-1] + 1], return_inverse=True)
        g1 = self.train_counts[distinct] + 1
        counts = np.zeros(distinct.shape[0], dtype=np.int64)
        user_scale = USER_WEIGHT_TENTHS * self.denominator
        ranks = np.empty(targets.shape[0], dtype=np.float64)
        ties = np.empty(targets.shape[0], dtype=np.int64)
        counted = 0
        for k, position in enumerate(targets):
            np.add.at(counts, inverse[counted:position], 1)
            counted = position
            n = int(position)
            global_part = GLOBAL_WEIGHT_TENTHS * n * g1
            own = user_scale * counts + global_part
            target_score = own[inverse[position]]
            # Every catalogue item scored as if outside the context: 3 n (g + 1) vs the target.
            quotient, remainder = divmod(int(target_score), GLOBAL_WEIGHT_TENTHS * n)
            above = self.n_items - np.searchsorted(self.sorted_g1, quotient, side="right")
            level: Any = 0
            if remainder == 0:
                level = np.searchsorted(self.sorted_g1, quotient, "right") - np.searchsorted(
                    self.sorted_g1, quotient, "left"
                )
            # ...then the user's own items corrected to their real scores.
            higher = (
                above - np.count_nonzero(global_part > target_score) + np.count_nonzero(own > target_score)
            )
            tied = (
                level - np.count_nonzero(global_part == target_score) + np.count_nonzero(own == target_score)
            )
            ranks[k] = 1.0 + higher + (tied - 1) / 2.0
            ties[k] = tied - 1
        return ranks, ties


# Pairs (target, earlier distinct item of its user) ranked at once: bounds the arrays of a batch.
PAIRS_PER_PASS = 1 << 18


def rank_batch(model: Popularity, batch: UserBatch) -> tuple[np.ndarray, np.ndarray]:
    """``rank_and_ties`` for every target of a batch of users at once, with array operations.

    The same integers as the per-target pass: a target at position n scores
    T = 7 c (E + N) + 3 n (g + 1). The items above it as if no user had met them come from a
    search in the sorted global counts; then each distinct item the user met before the target
    (one row per target and such item) is corrected to its real score. Items the user meets only
    later score their global part either way and need no correction.
    """
    items, targets = batch.items, batch.targets
    if targets.size == 0:
        return np.zeros(0, dtype=np.float64), np.zeros(0, dtype=np.int64)
    length = items.shape[0]
    user_of_row = np.repeat(np.arange(batch.starts.shape[0] - 1), np.diff(batch.starts))
    # Rows grouped by (user, item), in position order inside a group: a row's occurrence number
    # is how often its user met its item before it.
    order = np.lexsort((np.arange(length), items, user_of_row))
    users_sorted, items_sorted = user_of_row[order], items[order]
    new_group = np.r_[True, (users_sorted[1:] != users_sorted[:-1]) | (items_sorted[1:] != items_sorted[:-1])]
    group_sorted = np.cumsum(new_group) - 1
    group_start = np.flatnonzero(new_group)
    group_of_row = np.empty(length, dtype=np.int64)
    group_of_row[order] = group_sorted
    occurrence = np.empty(length, dtype=np.int64)
    occurrence[order] = np.arange(length) - group_start[group_sorted]
    # keys of the grouped rows, ascending: (group, row)
    keys = group_sorted * (length + 1) + order

    n = targets - batch.target_starts  # context length
    scale = USER_WEIGHT_TENTHS * model.denominator
    g1 = model.train_counts + 1
    target_score = scale * occurrence[targets] + GLOBAL_WEIGHT_TENTHS * n * g1[items[targets]]
    quotient, remainder = np.divmod(target_score, GLOBAL_WEIGHT_TENTHS * n)
    right = np.searchsorted(model.sorted_g1, quotient, side="right")
    higher: np.ndarray = np.asarray(model.n_items - right, dtype=np.int64)
    tied = np.where(remainder == 0, right - np.searchsorted(model.sorted_g1, quotient, side="left"), 0)

    # The user's distinct items met before each target, in first-meeting order: the first k_t
    # of the user's first occurrences.
    is_first = occurrence == 0
    firsts = np.flatnonzero(is_first)
    met = np.r_[0, np.cumsum(is_first)]  # met[r]: first occurrences in rows before r
    low, high = met[batch.target_starts], met[targets]
    counts = high - low
    bounds = np.r_[0, np.cumsum(counts)]
    t0 = 0
    while t0 < targets.size:
        # targets [t0, t1) hold at most PAIRS_PER_PASS pairs (or one target's own)
        t1 = max(t0 + 1, int(np.searchsorted(bounds, bounds[t0] + PAIRS_PER_PASS, side="right")) - 1)
        t1 = min(t1, targets.size)
        size = counts[t0:t1]
        pair_target = np.repeat(np.arange(t0, t1), size)
        within = np.arange(pair_target.shape[0]) - np.repeat(bounds[t0:t1] - bounds[t0], size)
        row = firsts[low[pair_target] + within]
        group = group_of_row[row]
        met_before = np.searchsorted(keys, group * (length + 1) + targets[pair_target]) - group_start[group]
        global_part = GLOBAL_WEIGHT_TENTHS * n[pair_target] * g1[items[row]]
        own = scale * met_before + global_part
        score = target_score[pair_target]
        local = pair_target - t0
        width = t1 - t0
        higher[t0:t1] += np.bincount(local, (own > score) & ~(global_part > score), width).astype(np.int64)
        tied[t0:t1] += np.bincount(local, own == score, width).astype(np.int64) - np.bincount(
            local, global_part == score, width
        ).astype(np.int64)
        t0 = t1
    return 1.0 + higher + (tied - 1) / 2.0, tied - 1


class PopularityModel(HistoryModel[NoSettings]):
    """Popularity through the model interface: its counts are what it learns and saves."""

    name = "popularity"

    def fit(self, training) -> dict[str, float | str]:
        self.model = Popularity(self.catalogue.train_counts)
        return {}

    def save(self, folder: Path) -> None:
        np.save(folder / "train_counts.npy", self.model.train_counts)

    def load(self, folder: Path) -> None:
        self.model = Popularity(np.load(folder / "train_counts.npy"))

    def rank_and_ties(self, items: np.ndarray, targets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self.model.rank_and_ties(items, targets)

    def rank_users(self, batch: UserBatch) -> tuple[np.ndarray, np.ndarray]:
        return rank_batch(self.model, batch)

    def history_scores(self, items: np.ndarray, targets: np.ndarray) -> np.ndarray:
        """The integer scores 7 c(i) (E + N) + 3 n (g(i) + 1) the ranks compare, exact in float64
        (below 2^53 up to n (E + N) of about 10^14)."""
        model, items = self.model, np.asarray(items, dtype=np.int64)
        g1 = (model.train_counts + 1).astype(np.float64)
        out = np.empty((len(targets), model.n_items + 1), dtype=np.float64)
        for row, position in enumerate(np.asarray(targets, dtype=np.int64).tolist()):
            counts = np.bincount(items[:position], minlength=model.n_items + 1)[: model.n_items + 1]
            out[row] = USER_WEIGHT_TENTHS * model.denominator * counts + GLOBAL_WEIGHT_TENTHS * position * g1
        out[:, 0] = 0.0
        return out
