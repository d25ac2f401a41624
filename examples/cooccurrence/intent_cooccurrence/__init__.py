"""Item-to-item co-occurrence: score(j | context) = how often j followed the context's last
item in training, plus a popularity prior below one event that orders the rest.

An example of a model that lives outside intent-spark and is benchmarked by it: a
``ScoresModel`` (it scores a block of contexts against the whole catalogue; the benchmark ranks
them, ties included), fitted in one pass over the training sequences, saved as two arrays.
Items never seen in training cannot be scored and tie at the bottom.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from intent_spark.plugin import ScoresModel, TrainingData


@dataclass(frozen=True)
class CoOccurrenceSettings:
    prior_weight: float = 0.5  # the popularity prior's share of one co-occurrence
    batch_size: int = 1024  # training rows read at once


class CoOccurrence(ScoresModel[CoOccurrenceSettings]):
    name = "cooccurrence"
    Settings = CoOccurrenceSettings

    def fit(self, training: TrainingData) -> dict[str, float | str]:
        n = self.catalogue.n_items + 1
        pairs: list[np.ndarray] = []
        with training.batches(self.settings.batch_size, epochs=1) as batches:
            for rows in batches:
                rows = rows.numpy()
                before, after = rows[:, :-1].ravel(), rows[:, 1:].ravel()
                real = (before > 0) & (after > 0)
                pairs.append(before[real] * n + after[real])
        keys, counts = np.unique(
            np.concatenate(pairs) if pairs else np.zeros(0, np.int64), return_counts=True
        )
        self._index(keys, counts.astype(np.float32))
        return {"pairs": float(keys.shape[0]), "transitions": float(counts.sum())}

    def _index(self, keys: np.ndarray, counts: np.ndarray) -> None:
        n = self.catalogue.n_items + 1
        self.keys, self.counts = keys, counts
        indices = torch.from_numpy(np.stack([keys // n, keys % n]))
        self.matrix = (
            torch.sparse_coo_tensor(indices, torch.from_numpy(counts), (n, n), check_invariants=False)
            .coalesce()
            .to(self.device)
        )
        train = torch.from_numpy(self.catalogue.train_counts.astype(np.float32)).to(self.device)
        self.prior = self.settings.prior_weight * train / (train.max() + 1)

    def save(self, folder: Path) -> None:
        np.save(folder / "pair_keys.npy", self.keys)
        np.save(folder / "pair_counts.npy", self.counts)

    def load(self, folder: Path) -> None:
        self._index(np.load(folder / "pair_keys.npy"), np.load(folder / "pair_counts.npy"))

    def scorable(self) -> torch.Tensor:
        return torch.from_numpy(self.catalogue.seen)

    def scores(self, contexts: torch.Tensor) -> torch.Tensor:
        following = self.matrix.index_select(0, contexts[:, -1]).to_dense()
        return following + self.prior.unsqueeze(0)
