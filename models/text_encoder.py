"""A pretrained content encoder (the INTENT paper's future work): item vectors from a sentence
encoder over each item's title and metadata text, the context as the recency-weighted mean of
its items' vectors, and optionally a fine-tuned linear adapter on top.

It scores items never seen in training from their text alone; items without text (or with no
word the encoder knows: a zero vector) cannot be scored and tie at the bottom. The encoder is
loaded with sentence-transformers from a local folder or a hub name given in conf; the vectors
it gave this catalogue are saved with the model, so scoring never re-encodes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from intent_spark.plugin import Catalogue, TrainingData, VectorsModel, load_state, train_steps
from models.next_item import loss_sampler


@dataclass(frozen=True)
class TextEncoderConf:
    encoder: str = "sentence-transformers/all-MiniLM-L6-v2"  # a local folder or a hub name
    recency: float = 0.8  # weight of the item k places before the last: recency ** k
    context: int = 50
    text_batch: int = 256  # texts encoded at once
    fine_tune_steps: int = 0  # 0: the pretrained vectors as they are
    batch_size: int = 256
    learning_rate: float = 0.001
    full_softmax_max_items: int = 100_000
    negatives: int = 8192
    shuffle_buffer: int = 10_000
    seed: int = 0


def encode_texts(encoder: str, texts: list[str], batch: int, device: torch.device) -> np.ndarray:
    """float32 (len(texts), dims) unit vectors; zero rows for empty texts."""
    import os

    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # progress is the stage's to print
    from sentence_transformers import SentenceTransformer
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()

    try:
        model = SentenceTransformer(encoder, device=str(device))
    except Exception as exc:  # noqa: BLE001 - a bad folder or name, in the library's words
        raise ValueError(f"the sentence encoder {encoder!r} does not load: {str(exc)[:300]}") from exc
    present = [i for i, text in enumerate(texts) if text]
    vectors = model.encode(
        [texts[i] for i in present], batch_size=batch, normalize_embeddings=True, convert_to_numpy=True
    )
    dimension = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
    dims = dimension() or (vectors.shape[1] if len(present) else 0)
    out = np.zeros((len(texts), dims), dtype=np.float32)
    if present:
        out[present] = np.nan_to_num(vectors.astype(np.float32))  # a zero vector normalises to NaN
    return out


class Adapter(nn.Module):
    """v -> v + v A, A starting at zero: the pretrained vectors until fine-tuning moves them."""

    def __init__(self, dims: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(dims, dims))

    def forward(self, vectors: torch.Tensor) -> torch.Tensor:
        return vectors + vectors @ self.weight


class TextEncoderModel(VectorsModel[TextEncoderConf]):
    name = "text_encoder"
    Settings = TextEncoderConf
    needs_text = True

    def __init__(self, catalogue: Catalogue, settings: TextEncoderConf, device: torch.device) -> None:
        super().__init__(catalogue, settings, device)
        self.pretrained = torch.zeros(catalogue.n_items + 1, 0)
        self.adapter: Adapter | None = None

    def fit(self, training: TrainingData) -> dict[str, float | str]:
        settings = self.settings
        training.progress(f"encoding {self.catalogue.n_items:,} item texts with {settings.encoder}")
        vectors = encode_texts(settings.encoder, self.catalogue.texts(), settings.text_batch, self.device)
        vectors[0] = 0.0  # padding
        self.pretrained = torch.from_numpy(vectors).to(self.device)
        self.adapter = Adapter(vectors.shape[1]).to(self.device)
        stats: dict[str, float | str] = {"items_with_text": float(self.scorable().sum())}
        if settings.fine_tune_steps:
            stats.update(self._fine_tune(training))
        return stats

    def _fine_tune(self, training: TrainingData) -> dict[str, float | str]:
        settings, catalogue = self.settings, self.catalogue
        assert self.adapter is not None
        sampler = loss_sampler(catalogue, settings.full_softmax_max_items, settings.negatives)
        trained = torch.arange(catalogue.n_trained + 1, device=self.device)

        def loss(rows: torch.Tensor) -> torch.Tensor:
            vectors = self.adapter(self.pretrained)  # type: ignore[misc]
            states, targets = self._context(rows[:, :-1], vectors), rows[:, -1]
            if sampler is not None:
                return sampler.loss(states, targets, lambda items: vectors[items])
            logits = states @ vectors[trained].T
            logits[:, 0] = float("-inf")
            return nn.functional.cross_entropy(logits, targets)

        with training.batches(settings.batch_size, settings.shuffle_buffer) as batches:
            return train_steps(
                self.adapter,
                loss,
                batches,
                steps=settings.fine_tune_steps,
                learning_rate=settings.learning_rate,
                device=training.device,
                progress=training.progress,
            )

    def _context(self, contexts: torch.Tensor, vectors: torch.Tensor) -> torch.Tensor:
        """The recency-weighted mean of the context items' vectors (those with text)."""
        length = contexts.shape[1]
        decay = self.settings.recency ** torch.arange(length - 1, -1, -1, device=contexts.device)
        known = self._has_text.to(contexts.device)[contexts]
        weights = decay.unsqueeze(0) * known
        total = weights.sum(1, keepdim=True).clamp(min=1e-12)
        return (weights.unsqueeze(-1) * vectors[contexts]).sum(1) / total

    @property
    def _has_text(self) -> torch.Tensor:
        return self.pretrained.abs().sum(1) > 0

    def save(self, folder: Path) -> None:
        np.save(folder / "item_vectors.npy", self.pretrained.cpu().numpy())
        assert self.adapter is not None
        torch.save(self.adapter.state_dict(), folder / "adapter.pt")

    def load(self, folder: Path) -> None:
        vectors = np.load(folder / "item_vectors.npy")
        if vectors.shape[0] != self.catalogue.n_items + 1:
            raise ValueError(
                f"item_vectors.npy has {vectors.shape[0]} rows for {self.catalogue.n_items} items"
            )
        self.pretrained = torch.from_numpy(vectors).to(self.device)
        self.adapter = Adapter(vectors.shape[1]).to(self.device)
        self.adapter.load_state_dict(load_state(folder / "adapter.pt", self.device))

    def scorable(self) -> torch.Tensor:
        mask = self._has_text.clone()
        mask[0] = False
        return mask

    @torch.no_grad()
    def item_vectors(self) -> torch.Tensor:
        assert self.adapter is not None
        return self.adapter(self.pretrained)

    @torch.no_grad()
    def encode(self, contexts: torch.Tensor, item_vectors: torch.Tensor) -> torch.Tensor:
        return self._context(contexts, item_vectors)
