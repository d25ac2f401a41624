"""Model plug-ins that break the interface, one fault each, named by ``module:Class`` specs in
test_plugins.py. The good one (``PrefixScores``) is the control: the same code path, no fault."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from intent_spark.plugin import HistoryModel, Model, ScoresModel, VectorsModel


class PrefixScores(ScoresModel):
    """score(i) = -i for every item: ranks follow the catalogue order, no ties; fits nothing."""

    name = "prefix_scores"
    fits = False

    def scores(self, contexts: torch.Tensor) -> torch.Tensor:
        n = self.catalogue.n_items + 1
        return -torch.arange(n, dtype=torch.float32).expand(contexts.shape[0], n).clone()


class WrongShapeScores(PrefixScores):
    name = "wrong_shape"

    def scores(self, contexts: torch.Tensor) -> torch.Tensor:
        return super().scores(contexts)[:, 1:]  # forgot the padding column


class IntegerScores(PrefixScores):
    name = "integer_scores"

    def scores(self, contexts: torch.Tensor) -> torch.Tensor:
        return super().scores(contexts).long()


class NaNScores(PrefixScores):
    name = "nan_scores"

    def scores(self, contexts: torch.Tensor) -> torch.Tensor:
        scores = super().scores(contexts)
        scores[:, 2] = float("nan")
        return scores


class InfiniteScores(PrefixScores):
    name = "infinite_scores"

    def scores(self, contexts: torch.Tensor) -> torch.Tensor:
        scores = super().scores(contexts)
        scores[:, 1] = float("inf")
        return scores


class NumpyScores(PrefixScores):
    name = "numpy_scores"

    def scores(self, contexts):
        return super().scores(contexts).numpy()


class NaNVectors(VectorsModel):
    name = "nan_vectors"
    fits = False

    def item_vectors(self) -> torch.Tensor:
        vectors = torch.ones(self.catalogue.n_items + 1, 2)
        vectors[1, 0] = float("nan")
        return vectors

    def encode(self, contexts, item_vectors):
        return torch.ones(contexts.shape[0], 2)


class RanksOutOfRange(HistoryModel):
    name = "ranks_out_of_range"
    fits = False

    def rank_and_ties(self, items, targets):
        return np.zeros(len(targets)), np.zeros(len(targets), dtype=np.int64)  # rank 0 does not exist


class UnloadableSave(PrefixScores):
    """Saves nothing, but its load wants a file: the save folder does not load."""

    name = "unloadable_save"
    fits = True

    def load(self, folder: Path) -> None:
        np.load(folder / "weights.npy")


class NotAModel:
    name = "not_a_model"


class KindByName(Model):
    """Says it is a scores model but subclasses none of the kinds: the kind is the class's."""

    name = "kind_by_name"
    kind = "scores"


class FitRaises(PrefixScores):
    """A bug of the author's own inside fit, two frames deep: the terminal must show this file
    and both lines."""

    name = "fit_raises"
    fits = True

    def fit(self, training):
        with training.batches(4, epochs=1) as batches:
            first = next(iter(batches))
        return self._count(first)

    def _count(self, rows):
        raise RuntimeError("boom: my own bug inside fit")


class ScoresRaise(PrefixScores):
    """A bug of the author's own inside scores."""

    name = "scores_raise"

    def scores(self, contexts):
        return self.table[contexts]  # never built
