"""A plug-in written from docs/write-your-own-model.md alone (what the model gets, what it gives
back): a bag of the context's item vectors, scored by dot product, trained with the shared loop.
``test_plugins.py`` runs it through ``intent run`` beside the example plug-in."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from intent_spark.plugin import Catalogue, TrainingData, VectorsModel, load_state, train_steps


@dataclass(frozen=True)
class BagSettings:
    dims: int = 16
    steps: int = 30
    batch_size: int = 32
    learning_rate: float = 0.01


class ContextBag(VectorsModel[BagSettings]):
    """score(i | context) = mean of the context's item vectors . vector of i."""

    name = "context_bag"
    Settings = BagSettings

    def __init__(self, catalogue: Catalogue, settings: BagSettings, device: torch.device) -> None:
        super().__init__(catalogue, settings, device)
        self.vectors = torch.nn.Embedding(catalogue.n_items + 1, settings.dims, padding_idx=0).to(device)

    def fit(self, training: TrainingData) -> dict[str, float | str]:
        def loss(rows: torch.Tensor) -> torch.Tensor:
            contexts, targets = rows[:, :-1], rows[:, -1]  # a row ends with a training item
            states = self.encode(contexts, self.vectors.weight)
            return torch.nn.functional.cross_entropy(states @ self.vectors.weight.T, targets)

        with training.batches(self.settings.batch_size) as batches:
            return train_steps(
                self.vectors,
                loss,
                batches,
                steps=self.settings.steps,
                learning_rate=self.settings.learning_rate,
                device=training.device,
                progress=training.progress,
            )

    def save(self, folder: Path) -> None:
        torch.save(self.vectors.state_dict(), folder / "vectors.pt")

    def load(self, folder: Path) -> None:
        self.vectors.load_state_dict(load_state(folder / "vectors.pt", self.device))

    def scorable(self) -> torch.Tensor:
        return torch.from_numpy(self.catalogue.seen)  # an item never trained has no learnt vector

    def eval(self) -> ContextBag:
        self.vectors.eval()
        return self

    def item_vectors(self) -> torch.Tensor:
        return self.vectors.weight.detach()

    def encode(self, contexts: torch.Tensor, item_vectors: torch.Tensor) -> torch.Tensor:
        present = (contexts > 0).unsqueeze(-1).to(item_vectors.dtype)
        return (item_vectors[contexts] * present).sum(1) / present.sum(1).clamp(min=1.0)
