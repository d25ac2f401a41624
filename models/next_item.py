"""What the sequence models share: id embeddings tied between input and output, the next-item
loss (full softmax, or sampled softmax above a catalogue size), and their plug-in wrapper.

Catalogue indices: 0 is padding, 1..S the training items, S+1..N the rest. The id embedding
covers 1..S only, so an ID model gives the rest zero vectors and they tie at the bottom.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import numpy as np
import torch
from torch import nn

from intent_spark.plugin import Catalogue, TrainingData, VectorsModel, load_state, train_steps


@dataclass(frozen=True)
class NextItemConf:
    """What every next-item model of the reference set is trained with (SPEC 4)."""

    dims: int = 64
    context: int = 50  # from the models conf's shared ``context``
    dropout: float = 0.2
    steps: int = 20_000
    batch_size: int = 256
    learning_rate: float = 0.001
    weight_decay: float = 0.0
    full_softmax_max_items: int = 100_000
    negatives: int = 8192
    shuffle_buffer: int = 10_000
    seed: int = 0  # from the models conf's per-model ``seed``


class NextItemNetwork(nn.Module):
    """A sequence encoder over id embeddings of the training items; subclasses define
    ``encode`` (all positions, for training) and ``encode_last`` (the last, for scoring)."""

    def __init__(self, n_items: int, n_trained: int, conf: NextItemConf) -> None:
        super().__init__()
        self.n_items = n_items
        self.n_trained = n_trained
        self.conf = conf
        self.id_embedding = nn.Embedding(n_trained + 1, conf.dims, padding_idx=0)

    def init_id_embedding(self) -> None:
        """Small normal ids, padding zero; called last in a subclass's ``__init__`` so the
        random draws come in one fixed order."""
        nn.init.normal_(self.id_embedding.weight, std=self.conf.dims**-0.5)
        with torch.no_grad():
            self.id_embedding.weight[0].zero_()

    def item_vectors(self, items: torch.Tensor) -> torch.Tensor:
        """Vectors of catalogue indices (any shape); untrained and padding indices give zeros."""
        trained = items.clamp(max=self.n_trained) * (items <= self.n_trained)
        return self.id_embedding(trained)

    def scorable(self) -> torch.Tensor:
        """Which catalogue indices 0..N get a real score."""
        index = torch.arange(self.n_items + 1, device=self.id_embedding.weight.device)
        return (index >= 1) & (index <= self.n_trained)

    def encode(self, sequences: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def encode_last(self, sequences: torch.Tensor, item_table: torch.Tensor | None = None) -> torch.Tensor:
        raise NotImplementedError

    def loss(self, sequences: torch.Tensor, sampler: NegativeSampler | None = None) -> torch.Tensor:
        """Next-item cross entropy over training items, from (B, L + 1) left-padded rows."""
        inputs, targets = sequences[:, :-1], sequences[:, 1:]
        states = self.encode(inputs)
        valid = (inputs != 0) & (targets != 0)
        states, targets = states[valid], targets[valid]
        if sampler is None:
            every = torch.arange(self.n_trained + 1, device=states.device)
            logits = states @ self.item_vectors(every).T
            logits[:, 0] = float("-inf")
            return nn.functional.cross_entropy(logits, targets)
        return sampler.loss(states, targets, self.item_vectors)

    @torch.no_grad()
    def catalogue_scores(self, contexts: torch.Tensor) -> torch.Tensor:
        """(B, N + 1) scores of every catalogue index after each (B, L) context; -inf where unscorable."""
        catalogue = self.catalogue_matrix()
        scores = self.encode_last(contexts, catalogue) @ catalogue.T
        return scores.masked_fill(~self.scorable(), float("-inf"))

    @torch.no_grad()
    def catalogue_matrix(self) -> torch.Tensor:
        return self.item_vectors(torch.arange(self.n_items + 1, device=self.id_embedding.weight.device))


class NegativeSampler:
    """Sampled softmax with log-q correction, for catalogues where the full softmax does not fit.

    Negatives are drawn from the training items' unigram distribution, shared by the batch; the
    log of each candidate's expected draw count is subtracted from its logit (Bengio & Senecal;
    Yi et al. 2019), and a negative equal to the row's target is masked.
    """

    def __init__(self, train_counts: torch.Tensor, negatives: int) -> None:
        probabilities = train_counts.double() / train_counts.sum()
        self.probabilities = probabilities.float()
        self.log_expected = torch.log(probabilities * negatives).float()
        self.negatives = negatives

    def loss(self, states: torch.Tensor, targets: torch.Tensor, item_vectors) -> torch.Tensor:
        device = states.device
        negatives = torch.multinomial(self.probabilities.to(device), self.negatives, replacement=True)
        log_expected = self.log_expected.to(device)
        positive = (states * item_vectors(targets)).sum(-1) - log_expected[targets]
        negative = states @ item_vectors(negatives).T - log_expected[negatives]
        negative = negative.masked_fill(negatives.unsqueeze(0) == targets.unsqueeze(1), float("-inf"))
        logits = torch.cat([positive.unsqueeze(1), negative], dim=1)
        return nn.functional.cross_entropy(logits, torch.zeros_like(targets))


def loss_sampler(catalogue: Catalogue, full_softmax_max_items: int, negatives: int) -> NegativeSampler | None:
    """The sampled softmax above ``full_softmax_max_items`` training items; None: the full one."""
    if catalogue.n_trained <= full_softmax_max_items:
        return None
    return NegativeSampler(torch.from_numpy(catalogue.train_counts[: catalogue.n_trained + 1]), negatives)


ConfT = TypeVar("ConfT", bound=NextItemConf)


class NextItemModel(VectorsModel[ConfT]):
    """A ``NextItemNetwork`` as a plug-in: trained on the Petastorm batches with the shared
    loop, saved as its ``state.pt``, scored by its catalogue matrix and last state."""

    Settings = NextItemConf

    def __init__(self, catalogue: Catalogue, settings: ConfT, device: torch.device) -> None:
        super().__init__(catalogue, settings, device)
        self.network = self.build_network()

    def build_network(self) -> NextItemNetwork:
        raise NotImplementedError

    def fit(self, training: TrainingData) -> dict[str, float | str]:
        settings = self.settings
        sampler = loss_sampler(self.catalogue, settings.full_softmax_max_items, settings.negatives)
        with training.batches(settings.batch_size, settings.shuffle_buffer) as batches:
            stats = train_steps(
                self.network,
                lambda rows: self.network.loss(rows, sampler),
                batches,
                steps=settings.steps,
                learning_rate=settings.learning_rate,
                weight_decay=settings.weight_decay,
                device=training.device,
                progress=training.progress,
            )
        stats["loss"] = "sampled_softmax" if sampler else "full_softmax"
        return stats

    def save(self, folder: Path) -> None:
        torch.save(self.network.state_dict(), folder / "state.pt")

    def load(self, folder: Path) -> None:
        self.network.load_state_dict(load_state(folder / "state.pt", self.device))
        self.network.to(self.device)

    def eval(self) -> NextItemModel:
        self.network.eval()
        return self

    def scorable(self) -> torch.Tensor:
        return self.network.scorable()

    def item_vectors(self) -> torch.Tensor:
        return self.network.catalogue_matrix()

    def encode(self, contexts: torch.Tensor, item_vectors: torch.Tensor) -> torch.Tensor:
        return self.network.encode_last(contexts, item_vectors)


def scoring_model(network: NextItemNetwork, device: torch.device | None = None) -> NextItemModel:
    """A network built outside the train stage (tests, benchmarks) as a model to rank with."""
    counts = np.zeros(network.n_items + 1, dtype=np.int64)
    counts[1 : network.n_trained + 1] = 1
    catalogue = Catalogue(counts, np.zeros((network.n_items + 1, 1), dtype=np.int64))
    model = NextItemModel.__new__(NextItemModel)
    VectorsModel.__init__(model, catalogue, network.conf, device or torch.device("cpu"))
    model.network = network
    return model
