"""Controlled runs behind the fidelity table's SASRec note: our SASRec network, trained by the
shared loop (``train_steps``) outside Spark on the exported training events, one factor changed
at a time, scored on the leave-last-out targets.

Not the benchmark path (no Petastorm, no ``intent score``): rows are cut here in numpy and the
targets are read from the raw ``u.data`` (each user's event that is not a training event), so the
runs compare settings with one another; the table's numbers come from ``intent submit``. The
``chunks`` rows reproduce ``train_sequences`` (chunk p // context from each user's first event);
``last`` is RecTools' one sequence per user (the last context + 1 items). Ties in score are
ranked pessimistically (an equal score counts as ahead of the target).

    PYTHONPATH=$PWD .venv/bin/python bench/fidelity/sasrec_probe.py \\
        --split-dir bench/results/fidelity/tasks/test --raw ../shared/data/real/movielens_ml-100k \\
        --rows chunks last --betas 0.999 0.98 --steps 200 --seeds 0 1
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from intent_spark.plugin import train_steps
from models.sasrec import SASRec, SASRecConf


def histories(train: pd.DataFrame, index: dict[str, int]) -> dict[str, np.ndarray]:
    """Each user's training items as catalogue indices, in the exported (user, ts, seq) order."""
    out: dict[str, np.ndarray] = {}
    for user, rows in train.groupby("user_id", sort=False):
        out[user] = np.array([index[i] for i in rows["item_id"]], dtype=np.int64)
    return out


def pad(window: np.ndarray, width: int) -> np.ndarray:
    return np.concatenate([np.zeros(width - len(window), np.int64), window])


def rows_of(kind: str, users: dict[str, np.ndarray], context: int) -> np.ndarray:
    rows = []
    for items in users.values():
        if kind == "chunks":
            rows.extend(pad(r, context + 1) for r in chunk_rows(items, context))
        elif kind == "chunks_end":  # the same partition of transitions, cut from the last event back
            for end in range(len(items), 1, -context):
                rows.append(pad(items[max(0, end - context - 1) : end], context + 1))
        elif kind == "last":  # RecTools: one sequence per user, the last context + 1 items
            rows.append(pad(items[-(context + 1) :], context + 1))
        else:
            raise SystemExit(f"unknown rows {kind!r}")
    return np.stack(rows)


def chunk_rows(items: np.ndarray, context: int) -> list[np.ndarray]:
    """``train_sequences``' rule exactly: position p is in chunk p // context, and the first
    event of every chunk after the first is also the last of the chunk before."""
    chunks: dict[int, list[int]] = {}
    for p, item in enumerate(items.tolist()):
        own = p // context
        for c in [own - 1, own] if p % context == 0 and p > 0 else [own]:
            chunks.setdefault(c, []).append(item)
    return [np.array(v, np.int64) for _, v in sorted(chunks.items()) if len(v) >= 2]


class TorchDefaultSASRec(SASRec):
    """The start our SASRec had before it took the original's: torch's defaults on every layer
    (positions N(0, 1)) and ids N(0, 1/dims)."""

    def init_weights(self) -> None:
        self.init_id_embedding()


class UnscaledSASRec(SASRec):
    """Xavier-normal as ours, but item vectors enter unscaled (no sqrt(dims)), as in RecTools."""

    def _embedded(self, sequences, item_table=None):
        x, blocked = super()._embedded(sequences, item_table)
        positions = self.position(torch.arange(sequences.shape[1], device=sequences.device))
        return (x - positions) / math.sqrt(self.conf.dims) + positions, blocked


def batches(rows: np.ndarray, batch_size: int, seed: int):
    """Endless shuffled batches, a fresh permutation per pass (each pass ends with a short batch
    only if the rows do not divide; the short batch is kept, as in an epoch loop)."""
    generator = np.random.default_rng(seed)
    while True:
        order = generator.permutation(len(rows))
        for start in range(0, len(rows), batch_size):
            yield torch.from_numpy(rows[order[start : start + batch_size]])


def evaluate(network: SASRec, contexts: np.ndarray, targets: np.ndarray) -> dict[str, float]:
    network.eval()
    with torch.no_grad():
        scores = network.catalogue_scores(torch.from_numpy(contexts)).numpy()
    target_scores = scores[np.arange(len(targets)), targets]
    rank = (scores > target_scores[:, None]).sum(1) + 1 + ((scores == target_scores[:, None]).sum(1) - 1)
    ndcg = np.where(rank <= 10, 1.0 / np.log2(rank + 1), 0.0)
    return {
        "ndcg_10": float(ndcg.mean()),
        "ndcg_10_se": float(ndcg.std(ddof=1) / math.sqrt(len(ndcg))),
        "hr_10": float((rank <= 10).mean()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--split-dir", type=Path, required=True)
    parser.add_argument("--raw", type=Path, required=True)
    parser.add_argument("--rows", nargs="+", default=["chunks"])
    parser.add_argument("--betas", nargs="+", type=float, default=[0.999], help="Adam beta2 values")
    parser.add_argument("--steps", nargs="+", type=int, default=[200])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0])
    parser.add_argument("--context", type=int, default=50)
    parser.add_argument(
        "--init",
        nargs="+",
        default=["ours"],
        help="ours: Xavier-normal on every matrix, ids scaled by sqrt(dims) (the original SASRec); "
        "torch_default: the start ours had before (torch's layer defaults, ids N(0, 1/dims)); "
        "unscaled: ours without the sqrt(dims) input scale (RecTools)",
    )
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=None, help="append one JSON line per run")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    train = pd.read_parquet(args.split_dir / "train.parquet", columns=["user_id", "item_id"])
    train["user_id"], train["item_id"] = train["user_id"].astype(str), train["item_id"].astype(str)
    counts = train["item_id"].value_counts(sort=False)
    order = sorted(counts.index, key=lambda i: (-counts[i], i))  # training items by count, most first
    index = {item: k + 1 for k, item in enumerate(order)}
    n_trained = len(order)
    users = histories(train, index)

    raw = pd.read_csv(args.raw / "u.data", sep="\t", names=["user_id", "item_id", "rating", "ts"], dtype=str)
    seen = set(zip(train["user_id"], train["item_id"], strict=True))
    held = raw[[(u, i) not in seen for u, i in zip(raw["user_id"], raw["item_id"], strict=True)]]
    tasks = pd.read_parquet(args.split_dir / "tasks.parquet", columns=["user_id"])
    tasks["user_id"] = tasks["user_id"].astype(str)
    held = held.set_index("user_id").loc[tasks["user_id"]]
    n_items = n_trained + int((~held["item_id"].isin(index)).sum())
    extra = {i: n_trained + 1 + k for k, i in enumerate(sorted(set(held["item_id"]) - set(index)))}
    targets = np.array([index.get(i, extra.get(i)) for i in held["item_id"]], np.int64)
    contexts = np.stack([pad(users[u][-args.context :], args.context) for u in tasks["user_id"]])
    print(f"{len(train):,} training events, {n_trained} items, {len(targets)} targets", flush=True)

    torch_adam = torch.optim.Adam
    for kind in args.rows:
        rows = rows_of(kind, users, args.context)
        for beta2, steps, seed, init in itertools.product(args.betas, args.steps, args.seeds, args.init):
            torch.manual_seed(seed)
            conf = SASRecConf(blocks=2, heads=1, dims=64, dropout=0.2, context=args.context, seed=seed)
            network = {"ours": SASRec, "torch_default": TorchDefaultSASRec, "unscaled": UnscaledSASRec}[init](
                n_items, n_trained, conf
            )
            losses: list[str] = []

            def adam(params, beta2=beta2, **kw):
                return torch_adam(params, betas=(0.9, beta2), **kw)

            torch.optim.Adam = adam  # the shared loop builds torch's Adam; only beta2 changes here
            try:
                started = time.perf_counter()
                stats = train_steps(
                    network,
                    lambda r, n=network: n.loss(r),
                    batches(rows, 256, seed),
                    steps=steps,
                    learning_rate=0.001,
                    device=torch.device("cpu"),
                    progress=losses.append,
                )
            finally:
                torch.optim.Adam = torch_adam
            result = {
                "rows": kind,
                "n_rows": int(len(rows)),
                "beta2": beta2,
                "steps": steps,
                "seed": seed,
                "init": init,
                "passes": steps * 256 / len(rows),
                "train_seconds": round(time.perf_counter() - started, 1),
                "final_loss": stats["final_loss"],
                "loss_log": [line.split(",")[1].strip() for line in losses],
                **evaluate(network, contexts, targets),
            }
            print(json.dumps(result), flush=True)
            if args.out:
                with args.out.open("a") as f:
                    f.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
