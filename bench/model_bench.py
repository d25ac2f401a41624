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
import time
from pathlib import Path

import numpy as np
import torch

from intent_spark.readers import UserBlock
from models.popularity import Popularity
from models.repeat_last import RepeatLast
from models.sasrec import NegativeSampler, SASRec, SASRecConf, SASRecF
from models.scoring import rank_blocks, rows_per_chunk
from models.training import pick_device

CONF = SASRecConf()


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
    return CONF.score_chunk_items_gpu if device.type == "cuda" else CONF.score_chunk_items


def time_scoring(model, blocks, device: torch.device) -> float:
    start = time.perf_counter()
    done = 0
    for seqs, *_ in rank_blocks(
        model,
        blocks,
        context=CONF.context,
        batch_size=CONF.score_batch,
        chunk_items=chunk_items(device),
        device=device,
    ):
        done += seqs.shape[0]
    if device.type == "cuda":
        torch.cuda.synchronize()
    return done / (time.perf_counter() - start)


def matmul_limit(targets: int, n_items: int, device: torch.device) -> tuple[float, float]:
    """Targets per second of the bare (rows x 64) @ (64 x items) product, the best over row
    counts from the scoring chunk up to 1,024 (the limit scoring cannot beat), and its GFLOP/s."""
    catalogue = torch.randn(n_items, CONF.dims, device=device)
    best = 0.0
    for rows in sorted({rows_per_chunk(n_items, chunk_items(device)), 64, 256, 1024}):
        states = torch.randn(rows, CONF.dims, device=device)
        (states @ catalogue.T).sum()
        rounds = max(3, targets // rows)
        start = time.perf_counter()
        for _ in range(rounds):
            scores = states @ catalogue.T
        if device.type == "cuda":
            torch.cuda.synchronize()
        best = max(best, rounds * rows / (time.perf_counter() - start))
        del scores
    return best, 2 * best * CONF.dims * n_items / 1e9


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
    parser.add_argument("--items", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--train-items", type=int, nargs="*", default=[10_000, 1_000_000])
    parser.add_argument("--users", type=int, default=200)
    parser.add_argument("--targets-per-user", type=int, default=20)
    parser.add_argument("--history", type=int, default=200)
    parser.add_argument("--train-steps", type=int, default=20)
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda when present)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    device = torch.device(args.device) if args.device else pick_device()
    result = {
        "machine": f"{platform.machine()}, {torch.get_num_threads()} torch threads, device {device}",
        "torch": torch.__version__,
        "scoring": [],
        "training": [],
    }
    for n_items in args.items:
        blocks = user_blocks(n_items, args.users, args.history, args.targets_per_user, seed=0)
        targets = args.users * args.targets_per_user
        limit, gflops = matmul_limit(targets, n_items, device)
        for name in ("popularity", "repeat_last", "sasrec", "sasrec_f"):
            rate = time_scoring(build(name, n_items, device), blocks, device)
            row = {"model": name, "items": n_items, "targets": targets, "targets_per_second": round(rate, 1)}
            if name in ("sasrec", "sasrec_f"):
                row["matmul_targets_per_second"] = round(limit, 1)
                row["fraction_of_matmul"] = round(rate / limit, 3)
                row["matmul_gflops"] = round(gflops, 1)
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


if __name__ == "__main__":
    main()
