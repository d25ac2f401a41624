"""SASRec and SASRec-F: scores on hand-built contexts, causality, and what cannot be scored."""

from __future__ import annotations

import math

import pytest
import torch

from intent_spark.train.rank_rule import tie_aware_rank
from models.sasrec import NegativeSampler, SASRec, SASRecConf, SASRecF

CONF = SASRecConf(blocks=2, dims=8, heads=1, context=4, dropout=0.0)


def _model(n_items=6, n_trained=3) -> SASRec:
    torch.manual_seed(0)
    return SASRec(n_items, n_trained, CONF).eval()


def test_scores_are_dot_products_with_trained_items_and_minus_inf_elsewhere():
    model = _model()
    context = torch.tensor([[0, 0, 1, 2]])
    scores = model.catalogue_scores(context)
    state = model.encode(context)[:, -1]
    expected = state @ model.id_embedding.weight.T  # rows 0..3: padding and trained items 1..3
    assert torch.allclose(scores[0, 1:4], expected[0, 1:4])
    assert torch.isinf(scores[0, [0, 4, 5, 6]]).all() and (scores[0, [0, 4, 5, 6]] < 0).all()
    # an untrained target ties with the other two untrained items below the 3 trained ones
    assert tie_aware_rank(scores, torch.tensor([5])).item() == 1 + 3 + 2 / 2


def test_encoder_is_causal_and_ignores_padding():
    model = _model()
    base = torch.tensor([[0, 1, 2, 3]])
    changed_future = torch.tensor([[0, 1, 2, 1]])
    a, b = model.encode(base), model.encode(changed_future)
    assert torch.allclose(a[:, :3], b[:, :3])  # positions before the change do not move
    assert not torch.allclose(a[:, 3], b[:, 3])
    assert torch.isfinite(model.encode(torch.tensor([[0, 0, 0, 2]]))).all()  # no empty attention row


def test_sasrec_f_scores_new_items_from_known_tokens_only():
    torch.manual_seed(0)
    # items 1..3 trained; 4 shares token 2 with item 1; 5 has only an unknown token (0); 6 none
    tokens = torch.tensor([[0, 0], [1, 2], [2, 3], [3, 0], [2, 0], [0, 0], [0, 0]])
    model = SASRecF(6, 3, CONF, tokens, n_tokens=3).eval()
    context = torch.tensor([[0, 0, 1, 2]])
    scores = model.catalogue_scores(context)
    state = model.encode(context)[:, -1]
    token = model.token_embedding.weight
    item_4 = token[2]  # mean of its one known token, no id part
    item_1 = (token[1] + token[2]) / 2 + 0.5 * model.id_embedding.weight[1]  # id scaled by 1 - p
    assert scores[0, 4].item() == pytest.approx((state @ item_4).item(), abs=1e-5)
    assert scores[0, 1].item() == pytest.approx((state @ item_1).item(), abs=1e-5)
    assert math.isinf(scores[0, 5].item()) and math.isinf(scores[0, 6].item())


def test_sasrec_f_drops_the_id_part_in_training_about_half_the_time():
    torch.manual_seed(0)
    tokens = torch.zeros(4, 1, dtype=torch.long)
    model = SASRecF(3, 3, CONF, tokens, n_tokens=0).train()
    vectors = model.item_vectors(torch.full((4000,), 2))
    kept = (vectors.abs().sum(-1) > 0).float().mean().item()
    assert kept == pytest.approx(0.5, abs=0.03)


def test_sampled_softmax_loss_is_finite_and_learns():
    torch.manual_seed(0)
    model = SASRec(50, 50, SASRecConf(blocks=1, dims=16, context=4, dropout=0.0)).train()
    counts = torch.cat([torch.zeros(1), torch.arange(1, 51, dtype=torch.float)])
    sampler = NegativeSampler(counts, negatives=20)
    # item i is always followed by i + 1
    rows = torch.tensor([[i, i + 1, i + 2, i + 3, i + 4] for i in range(1, 46)])
    optimiser = torch.optim.Adam(model.parameters(), lr=0.01)
    first = None
    for _ in range(150):
        loss = model.loss(rows, sampler)
        first = first if first is not None else loss.item()
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
    assert math.isfinite(loss.item()) and loss.item() < first / 2
    model.eval()
    ranks = tie_aware_rank(model.catalogue_scores(torch.tensor([[10, 11, 12, 13]])), torch.tensor([14]))
    assert ranks.item() <= 3


@pytest.mark.parametrize("heads", [1, 2])
def test_encode_last_is_the_last_state_of_the_full_encoder(heads):
    torch.manual_seed(0)
    model = SASRec(20, 20, SASRecConf(blocks=3, dims=8, heads=heads, context=6, dropout=0.0)).eval()
    contexts = torch.tensor([[0, 0, 0, 0, 0, 7], [0, 0, 3, 9, 3, 1], [5, 6, 7, 8, 9, 10]])
    assert torch.allclose(model.encode_last(contexts), model.encode(contexts)[:, -1], atol=1e-6)
    tokens = torch.randint(0, 5, (21, 3))
    with_tokens = SASRecF(20, 15, SASRecConf(blocks=2, dims=8, heads=heads, context=6), tokens, 4).eval()
    full = with_tokens.encode(contexts)[:, -1]
    assert torch.allclose(with_tokens.encode_last(contexts, with_tokens.catalogue_matrix()), full, atol=1e-6)
