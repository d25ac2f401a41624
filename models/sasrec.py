"""SASRec and SASRec-F (SPEC 4): a causal transformer over the last ``context`` items.

Catalogue indices: 0 is padding, 1..S are the training items (seen), S+1..N the rest. SASRec
embeds only 1..S, so the rest score ``-inf`` and tie at the bottom. SASRec-F builds an item's
vector from the mean of its metadata-token embeddings (vocabulary from training items) plus an
id embedding for training items, dropped with probability ``id_dropout`` in training and scaled
by ``1 - id_dropout`` at evaluation, so a new item with known tokens gets a real score.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from models.next_item import NegativeSampler, NextItemConf, NextItemModel, NextItemNetwork

__all__ = ["NegativeSampler", "SASRec", "SASRecConf", "SASRecF", "SASRecFModel", "SASRecModel"]


@dataclass(frozen=True)
class SASRecConf(NextItemConf):
    """Hyperparameters, fixed in ``conf/models.yaml`` before any test score."""

    blocks: int = 2
    heads: int = 1
    id_dropout: float = 0.5


class SASRec(NextItemNetwork):
    conf: SASRecConf

    def __init__(self, n_items: int, n_trained: int, conf: SASRecConf) -> None:
        super().__init__(n_items, n_trained, conf)
        self.position = nn.Embedding(conf.context, conf.dims)
        layer = nn.TransformerEncoderLayer(
            conf.dims,
            conf.heads,
            dim_feedforward=conf.dims,
            dropout=conf.dropout,
            batch_first=True,
            norm_first=True,
        )
        self.encoder = nn.TransformerEncoder(layer, conf.blocks, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(conf.dims)
        self.input_dropout = nn.Dropout(conf.dropout)
        self.init_weights()

    def init_weights(self) -> None:
        """The original SASRec's start (Kang and McAuley's code, its PyTorch port, RecTools):
        Xavier-normal on every weight matrix (ids, positions, attention, feed-forward), padding
        id zero. Called last in ``__init__`` so the random draws come in one fixed order. With
        torch's defaults instead (positions N(0, 1), far larger than the scaled ids) our SASRec
        lost to RecTools' on MovieLens-100K (BENCHMARKS.md, "Fidelity")."""
        for parameter in self.parameters():
            if parameter.dim() > 1:
                nn.init.xavier_normal_(parameter)
        with torch.no_grad():
            self.id_embedding.weight[0].zero_()

    def _embedded(
        self, sequences: torch.Tensor, item_table: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Input vectors (B, L, dims) and the (B, L, L) attention block: causal, no attention to
        padding, but every position may see itself (no empty rows). ``item_table`` holds every
        catalogue index's vector when the caller has it (``catalogue_matrix``)."""
        length = sequences.shape[1]
        positions = torch.arange(length, device=sequences.device)
        vectors = self.item_vectors(sequences) if item_table is None else item_table[sequences]
        x = vectors * math.sqrt(self.conf.dims) + self.position(positions)
        padding = sequences == 0
        blocked = torch.triu(torch.ones(length, length, dtype=torch.bool, device=x.device), 1)
        blocked = blocked.unsqueeze(0) | padding.unsqueeze(1)
        blocked = blocked & ~torch.eye(length, dtype=torch.bool, device=x.device).unsqueeze(0)
        return x, blocked

    def encode(self, sequences: torch.Tensor) -> torch.Tensor:
        """(B, L) left-padded item indices -> (B, L, dims) causal states."""
        x, blocked = self._embedded(sequences)
        mask = blocked.repeat_interleave(self.conf.heads, dim=0)
        return self.norm(self.encoder(self.input_dropout(x), mask=mask))

    @torch.no_grad()
    def encode_last(self, sequences: torch.Tensor, item_table: torch.Tensor | None = None) -> torch.Tensor:
        """(B, L) -> (B, dims): the state after the last position, the only one scoring uses.

        Equal to ``encode(sequences)[:, -1]`` in evaluation mode; the last block runs its
        attention query and feed-forward for that one position instead of all L. With
        ``item_table`` (``catalogue_matrix()``) the inputs are looked up, not rebuilt from tokens.
        """
        x, blocked = self._embedded(sequences, item_table)
        *inner, last = self.encoder.layers
        for layer in inner:
            x = layer(x, src_mask=blocked.repeat_interleave(self.conf.heads, dim=0))
        # The last position sees every non-padding position and itself.
        keys = last.norm1(x)
        seen = blocked[:, -1:, :].repeat_interleave(self.conf.heads, dim=0)
        attended = last.self_attn(keys[:, -1:], keys, keys, attn_mask=seen, need_weights=False)[0]
        state = x[:, -1] + attended[:, 0]
        state = state + last.linear2(last.activation(last.linear1(last.norm2(state))))
        return self.norm(state)


class SASRecF(SASRec):
    item_tokens: torch.Tensor  # a buffer: moves with the model, saved in its state

    def __init__(
        self, n_items: int, n_trained: int, conf: SASRecConf, item_tokens: torch.Tensor, n_tokens: int
    ):
        super().__init__(n_items, n_trained, conf)
        self.token_embedding = nn.Embedding(n_tokens + 1, conf.dims, padding_idx=0)
        nn.init.normal_(self.token_embedding.weight, std=conf.dims**-0.5)
        with torch.no_grad():
            self.token_embedding.weight[0].zero_()
        self.register_buffer("item_tokens", item_tokens.long())  # (N + 1, max_tokens), 0 = none

    def item_vectors(self, items: torch.Tensor) -> torch.Tensor:
        tokens = self.item_tokens[items]
        present = (tokens != 0).sum(-1, keepdim=True)
        token_mean = self.token_embedding(tokens).sum(-2) / present.clamp(min=1)
        identity = super().item_vectors(items)
        keep = 1.0 - self.conf.id_dropout
        if self.training:
            kept = torch.rand(items.shape + (1,), device=items.device) < keep
            return token_mean + identity * kept
        return token_mean + identity * keep

    def scorable(self) -> torch.Tensor:
        has_tokens = (self.item_tokens != 0).any(-1)
        has_tokens[0] = False
        return super().scorable() | has_tokens


class SASRecModel(NextItemModel[SASRecConf]):
    """SASRec through the model interface: item vectors and a causal transformer encoder."""

    name = "sasrec"
    Settings = SASRecConf

    def build_network(self) -> NextItemNetwork:
        return SASRec(self.catalogue.n_items, self.catalogue.n_trained, self.settings)


class SASRecFModel(NextItemModel[SASRecConf]):
    """SASRec-F: an item's vector from its metadata tokens plus a dropped-out id embedding."""

    name = "sasrec_f"
    Settings = SASRecConf

    def build_network(self) -> NextItemNetwork:
        catalogue = self.catalogue
        tokens = torch.from_numpy(catalogue.token_ids)
        return SASRecF(catalogue.n_items, catalogue.n_trained, self.settings, tokens, catalogue.n_tokens)
