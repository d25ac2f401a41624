"""The rank rule (SPEC 5) and each model's scores, on small hand-worked cases."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from intent_spark.plugin import Catalogue, UserBatch
from intent_spark.train.rank_rule import rank_within_scorable, tie_aware_rank
from intent_spark.train.ranker import context_windows
from models.popularity import Popularity, PopularityModel, rank_batch
from models.repeat_last import RepeatLast, RepeatLastModel

NEG = float("-inf")


def ranks(scores: list[list[float]], targets: list[int]) -> list[float]:
    return tie_aware_rank(torch.tensor(scores, dtype=torch.float64), torch.tensor(targets)).tolist()


def test_rank_without_ties_is_position_in_sorted_order():
    # column 0 is padding and ignored: items 1..4 score .1 .9 .5 .3
    assert ranks([[NEG, 0.1, 0.9, 0.5, 0.3]] * 4, [2, 3, 4, 1]) == [1.0, 2.0, 3.0, 4.0]


def test_rank_inside_a_tie_is_the_middle_of_the_tie_group():
    # item 3 ties with 2 and 4 (three items at 0.5) behind item 1: rank = 1 + 1 + 2/2 = 3
    assert ranks([[NEG, 0.9, 0.5, 0.5, 0.5, 0.1]], [3]) == [3.0]
    # the lone item below the tie: 1 + 4 higher = 5
    assert ranks([[NEG, 0.9, 0.5, 0.5, 0.5, 0.1]], [5]) == [5.0]


def test_target_inside_a_large_tie():
    # 1,000 items: 10 above, the target among 990 tied -> 1 + 10 + 989/2 = 505.5
    scores = [NEG] + [2.0] * 10 + [1.0] * 990
    assert ranks([scores], [500]) == [505.5]


def test_unscorable_items_tie_at_the_bottom():
    # items 3..5 cannot be scored (-inf): a target among them ranks 1 + 2 + 2/2 = 4
    scores = [[NEG, 0.3, 0.7, NEG, NEG, NEG]]
    assert ranks(scores, [4]) == [4.0]
    assert ranks(scores, [1]) == [2.0]


def test_repeat_last_is_one_big_tie():
    model = RepeatLast(n_items=6)
    items = np.array([3, 3, 5, 2])
    # targets at 1 (3 after 3: hit), 2 (5 after 3), 3 (2 after 5)
    ranks, ties = model.rank_and_ties(items, np.array([1, 2, 3]))
    assert ranks.tolist() == [1.0, 4.0, 4.0] and ties.tolist() == [0, 4, 4]
    # miss: 1 + the last item + 4 other items tied at 0 / 2 = 1 + 1 + 2 = 4, by the rule itself
    scores = [NEG, 0, 0, 1, 0, 0, 0]  # after the context 3, 3: item 3 scores 1, the rest 0
    assert tie_aware_rank(torch.tensor([scores]), torch.tensor([5])).tolist() == [4.0]


def test_popularity_on_a_hand_built_context():
    # catalogue of 4 items, training counts g = 5, 3, 0, 2 (E = 10, E + N = 14); context 1, 1, 3
    # (n = 3). SPEC 4's scores by hand: item 1 .7 * 2/3 + .3 * 6/14 = .5952, item 2 .3 * 4/14 =
    # .0857, item 3 .7/3 + .3/14 = .2548, item 4 .3 * 3/14 = .0643; as the integers the model
    # compares (x 10 n (E + N) = 420): 7 c (E + N) + 3 n (g + 1) = 250, 36, 107, 27.
    catalogue = Catalogue(np.array([0, 5, 3, 0, 2]), np.zeros((5, 1), dtype=np.int64))
    model = PopularityModel(catalogue, None, torch.device("cpu"))
    model.fit(None)
    items = np.array([1, 1, 3, 0])
    assert model.history_scores(items, np.array([3])).tolist() == [[0.0, 250.0, 36.0, 107.0, 27.0]]
    # order: item 1, item 3, item 2, item 4
    for target, rank in ((1, 1.0), (3, 2.0), (2, 3.0), (4, 4.0)):
        items[3] = target
        assert model.rank_and_ties(items, np.array([3]))[0].tolist() == [rank]


def test_popularity_exact_tie_between_user_and_global_terms():
    # g = 0, 14, 0, 0 (E = 14, N = 4, E + N = 18); context 1, 3, 3 (n = 3):
    # item 1: .7/3 + .3/18 = .25; item 2: .3 * 15/18 = .25 (a tie no float sum guarantees);
    # item 3: .7 * 2/3 + .3/18 = .483; item 4: .3/18 = .017.
    model = Popularity(np.array([0, 0, 14, 0, 0]))
    items = np.array([1, 3, 3, 0])
    for target, rank, tied in ((1, 2.5, 1), (2, 2.5, 1), (3, 1.0, 0), (4, 4.0, 0)):
        items[3] = target
        assert model.rank_and_ties(items, np.array([3]))[0].tolist() == [rank]
        assert model.rank_and_ties(items, np.array([3]))[1].tolist() == [tied]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(0, 6), min_size=1, max_size=8),
    st.lists(st.integers(1, 8), min_size=2, max_size=30),
)
def test_popularity_fast_rank_equals_the_full_score_rank(counts, history):
    """The integer shortcut agrees with ranking the full float score vector, ties included."""
    train_counts = np.array([0, *counts, 0, 0, 0, 0, 0, 0, 0, 0])[:9]
    model = Popularity(train_counts)
    items = np.array(history)
    targets = np.arange(1, len(items))
    fast, _ = model.rank_and_ties(items, targets)
    for t, rank in zip(targets, fast, strict=True):
        # exact rationals scaled to integers, as floats would blur ties
        user = np.bincount(items[:t], minlength=9)[:9]
        scaled = 7 * user * model.denominator + 3 * t * (train_counts + 1)
        scaled = scaled.astype(np.float64)
        scaled[0] = NEG
        full = tie_aware_rank(torch.from_numpy(scaled[None, :]), torch.tensor([items[t]])).item()
        assert rank == full


def _full_score_ranks(model: Popularity, items: np.ndarray, targets: np.ndarray) -> tuple[list, list]:
    """Ranks and ties of each target from every item's scaled integer score, counted in full."""
    ranks, ties = [], []
    for t in targets:
        user = np.bincount(items[:t], minlength=model.n_items + 1)[: model.n_items + 1]
        scaled = 7 * user * model.denominator + 3 * int(t) * (model.train_counts + 1)
        own = scaled[items[t]]
        others = scaled[1:]
        higher, tied = int((others > own).sum()), int((others == own).sum()) - 1
        ranks.append(1.0 + higher + tied / 2.0)
        ties.append(tied)
    return ranks, ties


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.integers(0, 6), min_size=8, max_size=8),
    st.lists(st.lists(st.integers(1, 8), min_size=2, max_size=25), min_size=1, max_size=5),
    st.data(),
)
def test_popularity_ranks_a_batch_of_users_as_each_user_alone(counts, histories, data):
    """A batch of users ranked at once gives every target the rank and ties of its full
    integer score vector, users and targets in any mix (a target's item met before or not)."""
    model = Popularity(np.array([0, *counts]))
    starts = np.r_[0, np.cumsum([len(h) for h in histories])]
    targets, users, expected_ranks, expected_ties = [], [], [], []
    for u, history in enumerate(histories):
        items = np.array(history)
        chosen = sorted(data.draw(st.sets(st.integers(1, len(items) - 1), min_size=1)))
        ranks, ties = _full_score_ranks(model, items, np.array(chosen))
        targets += [starts[u] + t for t in chosen]
        users += [u] * len(chosen)
        expected_ranks += ranks
        expected_ties += ties
    batch = UserBatch(
        np.concatenate([np.array(h) for h in histories]),
        starts,
        np.array(targets),
        np.array(users),
        np.arange(len(targets)),
    )
    ranks, ties = rank_batch(model, batch)
    assert ranks.tolist() == expected_ranks
    assert ties.tolist() == expected_ties


def test_popularity_batch_in_several_passes_equals_one_pass(monkeypatch):
    """Pairs split over passes (a heavy user's targets) change no rank."""
    import models.popularity as popularity

    rng = np.random.default_rng(3)
    model = Popularity(rng.integers(0, 4, 41))
    lengths = [60, 3, 90, 2]
    starts = np.r_[0, np.cumsum(lengths)]
    items = rng.integers(1, 41, starts[-1])
    targets = np.concatenate([np.arange(starts[u] + 1, starts[u + 1]) for u in range(4)])
    users = np.repeat(np.arange(4), [n - 1 for n in lengths])
    batch = UserBatch(items, starts, targets, users, np.arange(targets.size))
    whole = rank_batch(model, batch)
    monkeypatch.setattr(popularity, "PAIRS_PER_PASS", 7)
    parts = rank_batch(model, batch)
    assert whole[0].tolist() == parts[0].tolist() and whole[1].tolist() == parts[1].tolist()
    expected = [
        r
        for u in range(4)
        for r in _full_score_ranks(model, items[starts[u] : starts[u + 1]], np.arange(1, lengths[u]))[0]
    ]
    assert whole[0].tolist() == expected


def test_repeat_last_ranks_a_batch_with_constant_work():
    """Hit: rank 1, no tie; miss: 2 + (N - 2) / 2 inside a tie of the N - 2 others (N = 6)."""
    catalogue = type("Catalogue", (), {"n_items": 6})()
    model = RepeatLastModel.__new__(RepeatLastModel)
    model.catalogue = catalogue
    # user 0: 3 3 5 ; user 1: 2 2 ; targets at 1, 2 (user 0) and 4 (user 1)
    batch = UserBatch(
        np.array([3, 3, 5, 2, 2]), np.array([0, 3, 5]), np.array([1, 2, 4]), np.array([0, 0, 1]), np.arange(3)
    )
    ranks, ties = model.rank_users(batch)
    assert ranks.tolist() == [1.0, 4.0, 1.0]
    assert ties.tolist() == [0, 4, 0]


def test_context_windows_never_include_the_target():
    items = np.array([11, 12, 13, 14, 15])
    windows = context_windows(items, np.array([1, 3, 4]), 3)
    assert windows.tolist() == [[0, 0, 11], [11, 12, 13], [12, 13, 14]]


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.sampled_from([NEG, 0.0, 0.5, 1.0, 2.0]), min_size=2, max_size=12),
    st.integers(0, 11),
)
def test_rank_within_scorable_equals_the_full_rank(values, pick):
    """Scoring only the scorable columns (and counting the -inf ones) changes no rank."""
    full = torch.tensor([[NEG, *values]], dtype=torch.float64)
    target = 1 + pick % len(values)
    columns = [i for i, v in enumerate(values, start=1) if v != NEG]
    sub = full[:, columns] if columns else torch.zeros((1, 0), dtype=torch.float64)
    column = columns.index(target) if target in columns else -1
    got, tied = rank_within_scorable(sub, torch.tensor([column]), len(values) - len(columns))
    assert got.item() == tie_aware_rank(full, torch.tensor([target])).item()
    assert tied.item() == sum(v == values[target - 1] for v in values) - 1


def test_fused_counts_equal_the_two_passes_on_ties_and_minus_inf():
    from intent_spark.train.rank_rule import count_higher_and_tied, fused_count_higher_and_tied

    scores = torch.tensor(
        [[0.5, 0.5, 0.9, NEG, 0.1, 0.5], [NEG, NEG, NEG, 0.2, 0.2, 0.3], [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]]
    )
    targets = torch.tensor([[0.5], [NEG], [6.0]])
    higher, equal = fused_count_higher_and_tied(scores, targets)
    assert higher.tolist() == [1, 3, 0] and equal.tolist() == [3, 3, 1]
    rows = torch.randn(37, 1001)
    rows[:, 500:520] = rows[:, :1]  # a tie group of 21 with the target
    for got, want in zip(
        fused_count_higher_and_tied(rows, rows[:, :1]), count_higher_and_tied(rows, rows[:, :1]), strict=True
    ):
        assert torch.equal(got, want)


def test_rank_blocks_gives_the_same_ranks_fused_or_not_in_any_chunking():
    from intent_spark.train.ranker import rank_blocks
    from intent_spark.train.readers import UserBlock
    from models.next_item import scoring_model
    from models.sasrec import SASRec, SASRecConf

    torch.manual_seed(0)
    model = SASRec(30, 25, SASRecConf(blocks=1, dims=8, context=5, dropout=0.0))
    with torch.no_grad():
        model.id_embedding.weight[7] = model.id_embedding.weight[3]  # items 3 and 7 tie exactly
    rng = np.random.default_rng(0)
    blocks = [UserBlock(rng.integers(1, 31, 12), np.arange(1, 12), np.arange(11) + 11 * u) for u in range(9)]

    def ranked(**how):
        out = list(
            rank_blocks(
                scoring_model(model), blocks, context=5, batch_size=16, device=torch.device("cpu"), **how
            )
        )
        return np.concatenate([r for _, r, _ in out]), np.concatenate([t for _, _, t in out])

    plain_ranks, plain_ties = ranked(chunk_items=10_000)
    for how in ({"chunk_items": 25}, {"chunk_items": 100, "fuse_from_items": 1}):
        ranks, ties = ranked(**how)
        assert np.array_equal(ranks, plain_ranks) and np.array_equal(ties, plain_ties)
    # ties: none, the exact pair (3, 7), and the five unscorable items 26..30 at the bottom
    assert set(plain_ties.tolist()) == {0, 1, 4} and plain_ranks.max() == 1 + 25 + 4 / 2


@pytest.mark.parametrize("block_items", [1, 3, 7, 1000])
def test_ranking_by_item_blocks_equals_ranking_the_whole_score_matrix(block_items):
    from intent_spark.train.rank_rule import rank_in_item_blocks, vector_keys

    torch.manual_seed(1)
    matrix = torch.randn(20, 4)
    matrix[15] = matrix[2]  # equal vectors in different blocks must still tie
    matrix[9] = 0.0
    matrix[10] = 0.0
    states = torch.randn(6, 4)
    columns = torch.tensor([2, 15, 9, 0, -1, 19])  # -1: a target the model cannot score
    want = rank_within_scorable(states @ matrix.T, columns, n_unscorable=5, keys=vector_keys(matrix))
    got = rank_in_item_blocks(states, matrix, columns, 5, block_items)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    assert got[1][:3].tolist() == [1, 1, 1] and got[0][4].item() == 1 + 20 + 4 / 2
