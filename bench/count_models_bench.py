"""The count models' ranking on their own (no Spark, no files): targets/s of popularity and
repeat-last ranking a batch of users at once (``rank_users``) against the same ranks user by user
(``rank_and_ties``), on synthetic histories of REES46's shape. The two must agree exactly.

    .venv/bin/python bench/count_models_bench.py --users 40000 --items 7000
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from intent_spark.plugin import Catalogue, UserBatch
from models.popularity import PopularityModel
from models.repeat_last import RepeatLastModel


def synthetic_batch(users: int, items: int, seed: int) -> tuple[UserBatch, np.ndarray]:
    """Geometric history lengths (mean about 13 events), Zipf-like items, every event after a
    user's first a target up to 100 per user; and the items' training counts."""
    rng = np.random.default_rng(seed)
    lengths = rng.geometric(0.08, users) + 1
    popularity = 1.0 / np.arange(1, items + 1)
    history = rng.choice(np.arange(1, items + 1), size=int(lengths.sum()), p=popularity / popularity.sum())
    starts = np.r_[0, np.cumsum(lengths)]
    kept = np.minimum(lengths - 1, 100)
    targets = np.concatenate([starts[u] + np.arange(1, k + 1) for u, k in enumerate(kept)])
    owners = np.repeat(np.arange(users), kept)
    counts = np.r_[0, rng.poisson(40 * popularity / popularity.mean())]
    return UserBatch(history, starts, targets, owners, np.arange(targets.size)), counts


def per_user(model, batch: UserBatch, limit: int) -> tuple[float, int]:
    started, done = time.perf_counter(), 0
    for items, targets, _ in batch.users():
        model.rank_and_ties(items, targets)
        done += targets.size
        if done >= limit:
            break
    return done / (time.perf_counter() - started), done


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=40_000)
    parser.add_argument("--items", type=int, default=7_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--per-user-targets", type=int, default=50_000, help="targets timed user by user")
    args = parser.parse_args()
    batch, counts = synthetic_batch(args.users, args.items, args.seed)
    catalogue = Catalogue(counts, np.zeros((counts.shape[0], 1), dtype=np.int64))
    print(f"{args.users:,} users, {batch.targets.size:,} targets, {args.items:,} items")
    for cls in (PopularityModel, RepeatLastModel):
        model = cls(catalogue, cls.Settings(), None)
        model.fit(None)
        started = time.perf_counter()
        ranks, ties = model.rank_users(batch)
        at_once = batch.targets.size / (time.perf_counter() - started)
        one_by_one, timed = per_user(model, batch, args.per_user_targets)
        first = [np.asarray(r) for r in model.rank_and_ties(*next(batch.users())[:2])]
        agree = np.array_equal(ranks[: first[0].size], first[0]) and np.array_equal(
            ties[: first[1].size], first[1]
        )
        print(
            f"{cls.name:<12} batch {at_once:>12,.0f} targets/s   user by user {one_by_one:>10,.0f} targets/s "
            f"({timed:,} timed)   {at_once / one_by_one:,.0f}x   first user equal: {agree}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
