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


@dataclass(frozen=True)
class SASRecConf:
    """Hyperparameters, fixed in ``conf/models.yaml`` before any test score."""

    blocks: int = 2
    dims: int = 64
    heads: int = 1
    context: int = 50
    dropout: float = 0.2
    steps: int = 20_000
    batch_size: int = 256
    learning_rate: float = 0.001
    weight_decay: float = 0.0
    full_softmax_max_items: int = 100_000
    negatives: int = 8192
    shuffle_buffer: int = 10_000
    seed: int = 0
    id_dropout: float = 0.5
    score_batch: int = 128  # contexts encoded and ranked at once when scoring
    score_chunk_items: int = 1_000_000  # scores per product on the CPU (a block of items, in cache)
    score_fuse_from_items: int = 50_000  # from this catalogue size the CPU compiles its ranking
    score_chunk_items_gpu: int = 256_000_000


class SASRec(nn.Module):
    name = "sasrec"

    def __init__(self, n_items: int, n_trained: int, conf: SASRecConf) -> None:
        super().__init__()
        self.n_items = n_items
        self.n_trained = n_trained
        self.conf = conf
        self.id_embedding = nn.Embedding(n_trained + 1, conf.dims, padding_idx=0)
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
        nn.init.normal_(self.id_embedding.weight, std=conf.dims**-0.5)
        with torch.no_grad():
            self.id_embedding.weight[0].zero_()

    # --- item vectors ---
    def item_vectors(self, items: torch.Tensor) -> torch.Tensor:
        """Vectors of catalogue indices (any shape); untrained and padding indices give zeros."""
        trained = items.clamp(max=self.n_trained) * (items <= self.n_trained)
        return self.id_embedding(trained)

    def scorable(self) -> torch.Tensor:
        """Which catalogue indices 0..N get a real score."""
        index = torch.arange(self.n_items + 1, device=self.id_embedding.weight.device)
        return (index >= 1) & (index <= self.n_trained)

    # --- sequence encoder ---
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

    # --- training loss ---
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

    # --- scoring ---
    @torch.no_grad()
    def catalogue_scores(self, contexts: torch.Tensor) -> torch.Tensor:
        """(B, N + 1) scores of every catalogue index after each (B, L) context; -inf where unscorable."""
        catalogue = self.catalogue_matrix()
        scores = self.encode_last(contexts, catalogue) @ catalogue.T
        return scores.masked_fill(~self.scorable(), float("-inf"))

    @torch.no_grad()
    def catalogue_matrix(self) -> torch.Tensor:
        return self.item_vectors(torch.arange(self.n_items + 1, device=self.id_embedding.weight.device))


class SASRecF(SASRec):
    name = "sasrec_f"
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
