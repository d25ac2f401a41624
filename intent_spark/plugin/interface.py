"""The model interface: what the benchmark hands a model and what a model gives back.

A model is a class, registered by name (built in, a Python entry point in group
``intent_spark.models``, or a ``module:Class`` spec). The framework owns the data path, the
rank rule of SPEC 5 (items a model cannot score tie at the bottom), batching, progress, MLflow
and Delta; a model owns only its maths. It gives back one of:

- ``VectorsModel``: item vectors and a context encoder; the framework ranks their dot
  products in item blocks, tie-aware (items with equal vectors tie exactly);
- ``ScoresModel``: scores of a block of contexts against the whole catalogue; the framework
  ranks them with the same rule. NaN or infinite scores of a scorable item are an error;
- ``HistoryModel``: for count models whose exact ranks come from a whole user history in one
  pass (popularity, repeat-last); the framework checks what they return.

Every model says which catalogue indices it can score (``scorable``); the others tie at the
bottom whatever it returns for them. ``docs/write-your-own-model.md`` walks through one; ``intent_spark.plugin`` exports
what a plug-in imports.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

import numpy as np
import torch

VECTORS, SCORES, HISTORY = "vectors", "scores", "history"
KINDS = (VECTORS, SCORES, HISTORY)


@dataclass(frozen=True)
class Catalogue:
    """One split's catalogue, every array indexed by catalogue index 0..N (0 is padding).

    Indices 1..S are the items seen in training (by training count, most first), S+1..N the
    items that appear only after the cutoff or only for held-out users.
    """

    train_counts: np.ndarray  # int64 (N + 1,): the item's events in the training split
    token_ids: np.ndarray  # int64 (N + 1, max_tokens): metadata tokens, training vocabulary, 0 = none
    text_loader: Callable[[], list[str]] = field(default=lambda: [], repr=False, compare=False)

    @property
    def n_items(self) -> int:
        return self.train_counts.shape[0] - 1

    @property
    def n_trained(self) -> int:
        return int(np.count_nonzero(self.train_counts[1:]))

    @property
    def n_tokens(self) -> int:
        return int(self.token_ids.max(initial=0))

    @property
    def seen(self) -> np.ndarray:
        """bool (N + 1,): the item has training events."""
        return self.train_counts > 0

    def texts(self) -> list[str]:
        """Each item's title and metadata text ("" where the source has none), by index 0..N.
        Read from the lake when first asked: only models that set ``needs_text`` pay for it."""
        texts = self.text_loader()
        if len(texts) != self.n_items + 1:
            raise ValueError(f"{len(texts)} item texts for a catalogue of {self.n_items} items")
        return texts


class TrainingData:
    """What ``fit`` gets: the split's training sequences, the device and a progress line.

    ``batches(batch_size)`` opens the reader (train/readers.py) over the training split: a shuffled
    stream of int64 tensors (batch_size, context + 1), left-padded with 0, each row a user's
    consecutive training items (SPEC 4; every training transition is in exactly one row). It is
    endless, or ``epochs`` passes over every row (a count model reads one). Use it as a context
    manager so the reader stops.
    """

    def __init__(
        self,
        open_batches: Callable[[int, int, int, int | None], AbstractContextManager[Iterator[torch.Tensor]]],
        *,
        context: int,
        seed: int,
        device: torch.device,
        progress: Callable[[str], None],
        rank: int = 0,
        world_size: int = 1,
    ) -> None:
        self._open = open_batches
        self.context = context
        self.seed = seed
        self.device = device
        self.progress = progress
        self.rank = rank  # this process among ``world_size`` (TorchDistributor); 0 of 1 alone
        self.world_size = world_size

    def batches(
        self, batch_size: int, shuffle_buffer: int = 10_000, epochs: int | None = None
    ) -> AbstractContextManager[Iterator[torch.Tensor]]:
        """``batch_size`` is the global batch: over several processes each reads
        ``batch_size / world_size`` rows a step from its own shard, and ``train_steps`` averages
        their gradients, so the settings mean the same model whatever the number of processes."""
        if batch_size % self.world_size:
            raise ValueError(f"batch_size {batch_size} does not divide over {self.world_size} processes")
        return self._open(batch_size // self.world_size, shuffle_buffer, self.seed, epochs)


@dataclass(frozen=True)
class NoSettings:
    """A model without hyperparameters."""


SettingsT = TypeVar("SettingsT")


class Model(Generic[SettingsT]):
    """The base of every model. A subclass sets ``name`` (how runs, ranks and reports call it),
    ``Settings`` (a frozen dataclass: its hyperparameters and their defaults, filled from the
    models conf), and implements one of the three kinds below.

    The framework builds a model as ``cls(catalogue, settings, device)`` with torch seeded from
    the conf's ``seed``; then calls ``fit`` (unless ``fits`` is False) and ``save``, or ``load``
    on a model built the same way. ``Model[YourSettings]`` types ``self.settings`` for mypy.
    """

    name: ClassVar[str] = ""
    kind: ClassVar[str] = ""
    Settings: ClassVar[type] = NoSettings
    fits: ClassVar[bool] = True  # False: nothing to learn, scored without a train run
    # False: ``fit`` has its own loop, whose gradients ``train_steps`` cannot average over processes
    distributable: ClassVar[bool] = True
    needs_text: ClassVar[bool] = False  # True: the framework reads item texts for the catalogue

    def __init__(self, catalogue: Catalogue, settings: SettingsT, device: torch.device) -> None:
        self.catalogue = catalogue
        self.settings = settings
        self.device = device

    def fit(self, training: TrainingData) -> dict[str, float | str]:
        """Learn from the training split; return what to log (numbers become MLflow metrics)."""
        return {}

    def save(self, folder: Path) -> None:
        """Write what ``load`` needs into ``folder`` (logged to MLflow as the model's artifact)."""

    def load(self, folder: Path) -> None:
        """Read back what ``save`` wrote, into a model built for the same catalogue."""

    def scorable(self) -> torch.Tensor:
        """bool (N + 1,): the indices this model gives a real score; by default every item."""
        mask = torch.ones(self.catalogue.n_items + 1, dtype=torch.bool)
        mask[0] = False
        return mask

    def eval(self) -> Model[SettingsT]:
        """Called before scoring (a torch model switches dropout off here)."""
        return self


class VectorsModel(Model[SettingsT]):
    """A dot-product model: score(item | context) = encode(context) . item_vectors()[item]."""

    kind = VECTORS

    def item_vectors(self) -> torch.Tensor:
        """float (N + 1, dims): every catalogue index's vector, on ``self.device``."""
        raise NotImplementedError

    def encode(self, contexts: torch.Tensor, item_vectors: torch.Tensor) -> torch.Tensor:
        """float (B, dims) from (B, context) left-padded catalogue indices (0 = none); the
        last column is the item just before the target. ``item_vectors`` is what
        ``item_vectors()`` returned, so an encoder that embeds its inputs need not rebuild it."""
        raise NotImplementedError


class ScoresModel(Model[SettingsT]):
    """Any model: scores of a block of contexts against the whole catalogue."""

    kind = SCORES

    def scores(self, contexts: torch.Tensor) -> torch.Tensor:
        """float (B, N + 1) from (B, context) left-padded catalogue indices; higher is better,
        equal scores tie. Columns the model cannot score (``scorable``) are ignored."""
        raise NotImplementedError


@dataclass(frozen=True)
class UserBatch:
    """Many users' scoring histories at once, concatenated: the unit a count model ranks with
    array operations instead of a pass per user.

    ``items[starts[u]:starts[u + 1]]`` is user u's history (catalogue indices in (ts, seq)
    order); ``targets`` are ascending positions into ``items`` (each after its user's first
    event), ``target_users`` the user of each, ``seqs`` their event seq.
    """

    items: np.ndarray  # int64 (L,)
    starts: np.ndarray  # int64 (U + 1,): starts[0] = 0, starts[U] = L
    targets: np.ndarray  # int64 (T,)
    target_users: np.ndarray  # int64 (T,)
    seqs: np.ndarray  # int64 (T,)

    @property
    def target_starts(self) -> np.ndarray:
        """Each target's user's first position: its context is ``items[target_starts[t]:targets[t]]``."""
        return self.starts[self.target_users]

    def users(self) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """``(items, targets, seqs)`` per user with targets: its history, target positions in
        it (>= 1) and their seqs, the arguments of ``HistoryModel.rank_and_ties``."""
        lows = np.searchsorted(self.targets, self.starts[:-1])
        highs = np.searchsorted(self.targets, self.starts[1:])
        for u, (low, high) in enumerate(zip(lows.tolist(), highs.tolist(), strict=True)):
            if high > low:
                start, end = int(self.starts[u]), int(self.starts[u + 1])
                yield self.items[start:end], self.targets[low:high] - start, self.seqs[low:high]


class HistoryModel(Model[SettingsT]):
    """A count model ranking a user's targets from their whole history in one exact pass."""

    kind = HISTORY

    def rank_users(self, batch: UserBatch) -> tuple[np.ndarray, np.ndarray]:
        """Ranks and ties of every target of a batch of users, in ``batch.targets`` order.
        The default asks ``rank_and_ties`` user by user; a model that can rank many users with
        array operations overrides it."""
        ranks, ties = [], []
        for items, targets, _ in batch.users():
            r, t = self.rank_and_ties(items, targets)
            ranks.append(np.asarray(r))
            ties.append(np.asarray(t))
        if not ranks:
            return np.zeros(0), np.zeros(0, dtype=np.int64)
        return np.concatenate(ranks), np.concatenate(ties)

    def rank_and_ties(self, items: np.ndarray, targets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For one user's history ``items`` (catalogue indices in time order) and ascending
        target positions ``targets`` (>= 1): each target's rank given ``items[:t]`` by the rule
        of SPEC 5, and how many other items tie with it."""
        raise NotImplementedError

    def history_scores(self, items: np.ndarray, targets: np.ndarray) -> np.ndarray:
        """Optional: float (T, N + 1), each target's scores of every index given ``items[:t]``
        (column 0 ignored), consistent with ``rank_and_ties``. Only listing a model's top items
        (``intent score --export``) needs it; ranking never does."""
        raise NotImplementedError


def settings_defaults(cls: type[Model]) -> dict[str, Any]:
    """A model's hyperparameters and their defaults, as ``intent models`` lists them."""
    return {f.name: _default(f) for f in dataclasses.fields(cls.Settings)}


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None
