"""Repeat-last (SPEC 4): the context's last item scores 1, every other item 0 (one big tie)."""

from __future__ import annotations

import numpy as np

from intent_spark.plugin import HistoryModel, NoSettings, UserBatch


class RepeatLast:
    def __init__(self, n_items: int) -> None:
        self.n_items = n_items

    def rank_and_ties(self, items: np.ndarray, targets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Ranks (1 when the target repeats the previous item, else 1 + 1 + (N - 2) / 2), and the
        other items tied with each target: none on a hit, N - 2 on a miss."""
        items = np.asarray(items)
        targets = np.asarray(targets, dtype=np.int64)
        hit = items[targets] == items[targets - 1]
        return np.where(hit, 1.0, 2.0 + (self.n_items - 2) / 2.0), np.where(hit, 0, self.n_items - 2)


class RepeatLastModel(HistoryModel[NoSettings]):
    """Fits nothing: scored straight from the catalogue, without a train run."""

    name = "repeat_last"
    fits = False

    def rank_and_ties(self, items: np.ndarray, targets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return RepeatLast(self.catalogue.n_items).rank_and_ties(items, targets)

    def rank_users(self, batch: UserBatch) -> tuple[np.ndarray, np.ndarray]:
        """Every target of a batch at once: constant work per target."""
        n_items = self.catalogue.n_items
        hit = batch.items[batch.targets] == batch.items[batch.targets - 1]
        return np.where(hit, 1.0, 2.0 + (n_items - 2) / 2.0), np.where(hit, 0, n_items - 2)

    def history_scores(self, items: np.ndarray, targets: np.ndarray) -> np.ndarray:
        """1 for the item just before each target, 0 for every other."""
        out = np.zeros((len(targets), self.catalogue.n_items + 1), dtype=np.float64)
        out[np.arange(len(targets)), np.asarray(items)[np.asarray(targets, dtype=np.int64) - 1]] = 1.0
        return out
