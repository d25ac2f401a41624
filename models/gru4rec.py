"""GRU4Rec (Hidasi et al., 2016): one GRU layer over the last ``context`` items.

The same inputs, embedding size and loss options as SASRec (full softmax over the training
items, sampled softmax with log-q correction above ``full_softmax_max_items``), with the item
embedding tied between input and output; only the encoder differs. Built through the model
interface like any outside model. Left padding runs through the GRU as zero inputs, the same
for every context, so the state after the last real item is what scores.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from models.next_item import NextItemConf, NextItemModel, NextItemNetwork


@dataclass(frozen=True)
class GRU4RecConf(NextItemConf):
    """Hyperparameters, fixed in ``conf/models.yaml`` before any test score."""


class GRU4Rec(NextItemNetwork):
    def __init__(self, n_items: int, n_trained: int, conf: NextItemConf) -> None:
        super().__init__(n_items, n_trained, conf)
        self.gru = nn.GRU(conf.dims, conf.dims, num_layers=1, batch_first=True)
        self.input_dropout = nn.Dropout(conf.dropout)
        self.init_id_embedding()

    def _run(self, vectors: torch.Tensor) -> torch.Tensor:
        return self.gru(self.input_dropout(vectors))[0]

    def encode(self, sequences: torch.Tensor) -> torch.Tensor:
        """(B, L) left-padded item indices -> (B, L, dims): the state after each position."""
        return self._run(self.item_vectors(sequences))

    @torch.no_grad()
    def encode_last(self, sequences: torch.Tensor, item_table: torch.Tensor | None = None) -> torch.Tensor:
        vectors = self.item_vectors(sequences) if item_table is None else item_table[sequences]
        return self._run(vectors)[:, -1]


class GRU4RecModel(NextItemModel[GRU4RecConf]):
    name = "gru4rec"
    Settings = GRU4RecConf

    def build_network(self) -> NextItemNetwork:
        return GRU4Rec(self.catalogue.n_items, self.catalogue.n_trained, self.settings)
