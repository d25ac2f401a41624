"""RecTools peers on an exported split, run inside RecTools' own environment.

Reads the split's ``train.parquet`` and ``tasks.parquet`` (intent export), fits one RecTools
model on exactly those training events and writes each target's top K as a submission
(``target_id, items``, best first: without scores a rank is the list position, RecTools' own order) for ``intent submit``, plus a JSON of the fit's settings and time.
Seen items are not filtered, as in the benchmark.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import rectools
from rectools import Columns
from rectools.dataset import Dataset


def build(name: str, args: argparse.Namespace):
    if name == "popular":
        from rectools.models import PopularModel

        return PopularModel(), {"popularity": "n_users"}
    if name == "sasrec":
        import torch
        from pytorch_lightning import Trainer
        from rectools.models import SASRecModel
        from rectools.models.nn.item_net import IdEmbeddingsItemNet

        torch.manual_seed(args.seed)
        settings = {
            "n_blocks": 2,
            "n_heads": 1,
            "n_factors": 64,
            "dropout_rate": 0.2,
            "session_max_len": args.context,
            "loss": "softmax",
            "lr": 0.001,
            "batch_size": 256,
            "epochs": args.epochs,
            "item_net_block_types": (IdEmbeddingsItemNet,),
        }

        def trainer() -> Trainer:
            return Trainer(
                max_epochs=args.epochs,
                min_epochs=args.epochs,
                deterministic=True,
                enable_progress_bar=False,
                enable_model_summary=False,
                logger=False,
                enable_checkpointing=False,
                accelerator="cpu",
                devices=1,
            )

        model = SASRecModel(**settings, deterministic=True, get_trainer_func=trainer)
        shown = {k: v for k, v in settings.items() if k != "item_net_block_types"}
        return model, {**shown, "item_net": "id embeddings"}
    if name == "itemknn":
        from implicit.nearest_neighbours import CosineRecommender
        from rectools.models import ImplicitItemKNNWrapperModel

        return ImplicitItemKNNWrapperModel(CosineRecommender(K=args.neighbours)), {
            "similarity": "cosine",
            "K": args.neighbours,
        }
    raise SystemExit(f"unknown RecTools peer {name!r}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--split-dir", type=Path, required=True)
    parser.add_argument("--model", required=True, choices=["popular", "sasrec", "itemknn"])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--top-k", type=int, default=100)
    parser.add_argument("--context", type=int, default=50)
    parser.add_argument("--epochs", type=int, default=100)
    parser.add_argument("--neighbours", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    train = pd.read_parquet(args.split_dir / "train.parquet")
    tasks = pd.read_parquet(args.split_dir / "tasks.parquet", columns=["target_id", "user_id"])
    # Ties in time keep the exported (user, ts, seq) order: a rank within the user is the time.
    train = train.reset_index(drop=True)
    interactions = pd.DataFrame(
        {
            Columns.User: train["user_id"].astype(str),
            Columns.Item: train["item_id"].astype(str),
            Columns.Weight: 1.0,
            Columns.Datetime: pd.to_datetime(train.groupby("user_id").cumcount(), unit="s"),
        }
    )
    dataset = Dataset.construct(interactions)
    model, settings = build(args.model, args)
    started = time.perf_counter()
    model.fit(dataset)
    fit_seconds = time.perf_counter() - started

    users = tasks["user_id"].astype(str).unique()
    started = time.perf_counter()
    reco = model.recommend(users=users, dataset=dataset, k=args.top_k, filter_viewed=False)
    recommend_seconds = time.perf_counter() - started
    reco = reco.sort_values([Columns.User, Columns.Rank])
    lists = reco.groupby(Columns.User).agg(items=(Columns.Item, list), scores=(Columns.Score, list))
    joined = tasks.assign(user=tasks["user_id"].astype(str)).join(lists, on="user")
    joined = joined[joined["items"].notna()]
    table = pa.table(
        {
            "target_id": pa.array(joined["target_id"].tolist(), pa.string()),
            "items": pa.array([list(map(str, i)) for i in joined["items"]], pa.list_(pa.string())),
        }
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, args.out)
    info = {
        "library": "rectools",
        "version": rectools.__version__,
        "model": type(model).__name__,
        "settings": settings,
        "fit_seconds": fit_seconds,
        "recommend_seconds": recommend_seconds,
        "training_events": int(len(train)),
        "targets_listed": int(len(table)),
    }
    args.out.with_suffix(".json").write_text(json.dumps(info, indent=2) + "\n")
    print(json.dumps(info))


if __name__ == "__main__":
    main()
