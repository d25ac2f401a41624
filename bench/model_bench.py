"""Model throughput: ranking targets per second over the full catalogue, and training steps per
second, for every reference model, on the CPU (or the GPU when there is one).

    .venv/bin/python bench/model_bench.py --items 10000 100000 --out bench/results/models.json

Synthetic inputs of the real shapes (SPEC 4 defaults: 2 blocks, 64 dims, context 50, batches of
256); no Spark, so the numbers are the models' own cost. The matrix-multiply line is the same
(targets x 64) @ (64 x items) product timed alone: the limit scoring cannot beat.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from intent_spark.plugin import Catalogue, HistoryModel, pick_device
from intent_spark.train.conf import ScoringSettings
from intent_spark.train.ranker import rank_blocks
from intent_spark.train.readers import UserBlock
from models.next_item import NextItemNetwork, scoring_model
from models.popularity import Popularity
from models.repeat_last import RepeatLast
from models.sasrec import NegativeSampler, SASRec, SASRecConf, SASRecF

CONF = SASRecConf()
SCORING = ScoringSettings()


def user_blocks(n_items: int, users: int, history: int, targets: int, seed: int) -> list[UserBlock]:
    rng = np.random.default_rng(seed)
    popularity = 1.0 / np.arange(1, n_items + 1)
    popularity /= popularity.sum()
    blocks = []
    for u in range(users):
        items = rng.choice(np.arange(1, n_items + 1), size=history, p=popularity)
        positions = np.arange(history - targets, history)
        blocks.append(UserBlock(items, positions, np.arange(targets) + u * targets))
    return blocks


def build(model: str, n_items: int, device: torch.device):
    counts = np.zeros(n_items + 1, dtype=np.int64)
    counts[1:] = np.maximum(1, (1e6 / np.arange(1, n_items + 1)).astype(np.int64))
    if model == "popularity":
        return Popularity(counts)
    if model == "repeat_last":
        return RepeatLast(n_items)
    torch.manual_seed(0)
    if model == "sasrec":
        return SASRec(n_items, n_items, CONF).to(device)
    tokens = torch.randint(0, 5000, (n_items + 1, 16))
    return SASRecF(n_items, n_items, CONF, tokens, 5000).to(device)


def chunk_items(device: torch.device) -> int:
    return SCORING.score_chunk_items_gpu if device.type == "cuda" else SCORING.score_chunk_items


class CountModel(HistoryModel):
    """A count model built here, as the model interface ranks it."""

    name = "bench_count"

    def __init__(self, inner, n_items: int) -> None:
        super().__init__(
            Catalogue(np.ones(n_items + 1, dtype=np.int64), np.zeros((n_items + 1, 1))), None, None
        )
        self.inner = inner

    def rank_and_ties(self, items, targets):
        return self.inner.rank_and_ties(items, targets)


def as_model(model, device: torch.device):
    """What ``rank_blocks`` takes: a model of the interface."""
    if isinstance(model, NextItemNetwork):
        return scoring_model(model, device)
    return CountModel(model, model.n_items)


def time_scoring(model, blocks, device: torch.device, limit=None) -> tuple[float, list[float]]:
    """Targets ranked per second, the median of five passes after an untimed warm-up on the first
    blocks (it pays the one-off compiling of the fused ranking, seconds once per process).

    With ``limit`` (a function giving the matmul limits now), each pass is paired with limits
    measured just before it, and the medians of the five ratios are returned too: this machine's
    speed drifts by tens of percent between minutes, a ratio of neighbours much less.
    """

    def rank(some) -> int:
        done = 0
        for seqs, *_ in rank_blocks(
            as_model(model, device),
            some,
            context=CONF.context,
            batch_size=SCORING.score_batch,
            chunk_items=chunk_items(device),
            device=device,
            fuse_from_items=SCORING.score_fuse_from_items,
        ):
            done += seqs.shape[0]
        return done

    rank(blocks[:2])
    rates, fractions = [], []
    for _ in range(5):
        bounds = limit() if limit else ()
        start = time.perf_counter()
        done = rank(blocks)
        if device.type == "cuda":
            torch.cuda.synchronize()
        rates.append(done / (time.perf_counter() - start))
        fractions.append([rates[-1] / bound for bound in bounds])
    medians = [statistics.median(column) for column in zip(*fractions, strict=True)]
    return statistics.median(rates), medians


def encoder_rate(model, device: torch.device, rounds: int = 8) -> float:
    """Contexts per second through ``encode_last`` alone: the part of scoring that does not
    depend on the catalogue."""
    contexts = torch.randint(1, model.n_trained + 1, (SCORING.score_batch, CONF.context), device=device)
    model.eval()
    table = model.catalogue_matrix()  # what scoring passes: inputs looked up, not rebuilt
    model.encode_last(contexts, table)
    start = time.perf_counter()
    for _ in range(rounds):
        model.encode_last(contexts, table)
    if device.type == "cuda":
        torch.cuda.synchronize()
    return rounds * SCORING.score_batch / (time.perf_counter() - start)


def matmul_limits(
    targets: int, n_items: int, device: torch.device, dtype: torch.dtype = torch.float32
) -> tuple[float, float, float]:
    """Two limits in targets per second, and the product's best speed in GFLOP/s.

    - same shape: the bare (rows x 64) @ (64 x items) product over the whole catalogue, at its
      best row count from 16 to 1,024 (at most 256 MiB of scores), as the issue defines it;
    - compute: each target's (64 x items) share of the product at the best speed of any
      (rows x 64) @ (64 x block) product, blocks of at most 16,384 items: the stricter bound.
    """

    def best_rate(catalogue: torch.Tensor) -> float:
        best = 0.0
        for rows in (16, 64, 128, 256, 1024):
            if rows * catalogue.shape[0] > 1 << 26:
                continue
            states = torch.randn(rows, CONF.dims, device=device, dtype=dtype)
            (states @ catalogue.T).sum()
            rounds = max(3, targets // rows)
            start = time.perf_counter()
            for _ in range(rounds):
                scores = states @ catalogue.T
            if device.type == "cuda":
                torch.cuda.synchronize()
            best = max(best, rounds * rows / (time.perf_counter() - start))
            del scores
        return best

    same_shape = best_rate(torch.randn(n_items, CONF.dims, device=device, dtype=dtype))
    block = min(n_items, 16_384)
    flops = best_rate(torch.randn(block, CONF.dims, device=device, dtype=dtype)) * 2 * CONF.dims * block
    return same_shape, flops / (2 * CONF.dims * n_items), flops / 1e9


def time_training(model_name: str, n_items: int, device: torch.device, steps: int) -> dict:
    model = build(model_name, n_items, device)
    sampler = None
    if n_items > CONF.full_softmax_max_items:
        counts = torch.cat([torch.zeros(1), 1.0 / torch.arange(1, n_items + 1)])
        sampler = NegativeSampler(counts, CONF.negatives)
    model.train()
    optimiser = torch.optim.Adam(model.parameters(), lr=CONF.learning_rate)
    rows = torch.randint(1, n_items + 1, (CONF.batch_size, CONF.context + 1), device=device)
    for step in range(steps + 3):
        if step == 3:  # warm-up steps are not timed
            if device.type == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
        loss = model.loss(rows, sampler)
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    rate = steps / (time.perf_counter() - start)
    return {"steps_per_second": rate, "loss": "sampled_softmax" if sampler else "full_softmax"}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--items", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--train-items", type=int, nargs="*", default=[10_000, 1_000_000])
    parser.add_argument("--users", type=int, default=200)
    parser.add_argument("--targets-per-user", type=int, default=20)
    parser.add_argument("--history", type=int, default=200)
    parser.add_argument("--train-steps", type=int, default=20)
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda when present)")
    parser.add_argument("--out", default=None)
    parser.add_argument("--tracking-uri", default=None, help="also log the rows to this MLflow store")
    parser.add_argument(
        "--precision",
        choices=("fp32", "tf32"),
        default="fp32",
        help="float32 products in full precision, or in TensorFloat-32 on a GPU that has it",
    )
    args = parser.parse_args()
    torch.set_float32_matmul_precision("highest" if args.precision == "fp32" else "high")
    device = torch.device(args.device) if args.device else pick_device()
    result = {
        "machine": f"{platform.machine()}, {torch.get_num_threads()} torch threads, device {device}",
        "precision": args.precision,
        "torch": torch.__version__,
        "scoring": [],
        "training": [],
    }
    for n_items in args.items:
        blocks = user_blocks(n_items, args.users, args.history, args.targets_per_user, seed=0)
        targets = args.users * args.targets_per_user
        limits = []

        def limit(n_items=n_items, targets=targets, limits=limits) -> tuple[float, float]:
            limits.append(matmul_limits(targets, n_items, device))
            return limits[-1][:2]

        for name in ("popularity", "repeat_last", "sasrec", "sasrec_f"):
            model = build(name, n_items, device)
            neural = name in ("sasrec", "sasrec_f")
            rate, fractions = time_scoring(model, blocks, device, limit if neural else None)
            row = {"model": name, "items": n_items, "targets": targets, "targets_per_second": round(rate, 1)}
            if neural:
                row["encoder_contexts_per_second"] = round(encoder_rate(model, device), 1)
                row["matmul_targets_per_second"] = round(statistics.median(x[0] for x in limits), 1)
                row["fraction_of_matmul"] = round(fractions[0], 3)
                row["compute_limit_targets_per_second"] = round(statistics.median(x[1] for x in limits), 1)
                row["fraction_of_compute_limit"] = round(fractions[1], 3)
                row["matmul_gflops"] = round(statistics.median(x[2] for x in limits), 1)
                if device.type == "cuda":  # the bare product in bf16: what a bf16 model could reach
                    row["matmul_bf16_targets_per_second"] = round(
                        matmul_limits(targets, n_items, device, torch.bfloat16)[0], 1
                    )
            result["scoring"].append(row)
            print(json.dumps(row), flush=True)
    for n_items in args.train_items:
        for name in ("sasrec", "sasrec_f"):
            row = {"model": name, "items": n_items, **time_training(name, n_items, device, args.train_steps)}
            row["steps_per_second"] = round(row["steps_per_second"], 2)
            result["training"].append(row)
            print(json.dumps(row), flush=True)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=2))
    if args.tracking_uri:
        from measure import log_to_mlflow

        params = {"machine": result["machine"], "torch": result["torch"]}
        log_to_mlflow(args.tracking_uri, "models-scoring", params, result["scoring"], "items", [])
        log_to_mlflow(args.tracking_uri, "models-training", params, result["training"], "items", [])


if __name__ == "__main__":
    main()
