"""RecBole peers (GRU4Rec, SASRec) on an exported split, run inside RecBole's own environment.

Reads the split's ``train.parquet`` and ``tasks.parquet`` (intent export), writes the training
events as RecBole's atomic ``.inter`` file under ``--work`` (its logs, checkpoints and
tensorboard files go there too), fits the model with RecBole's own dataset, data augmentation
(every prefix of a user's training items, its last ``MAX_ITEM_LIST_LENGTH``, predicts the next
item), train loader and ``Trainer``, and writes each target's top K as a submission
(``target_id, items``, best first) for ``intent submit``, plus a JSON of the settings and time
with the keys ``peer_rectools.py`` writes. A target's history is its ``context_items`` in
tasks.parquet (the user's events before it, which in leave-last-out are exactly their training
events), the last ``--context`` of them. Seen items are not filtered, as in the benchmark.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq


def settings_of(args: argparse.Namespace) -> dict:
    """RecBole's config for the model, matched to bench/fidelity/models.yaml where RecBole can."""
    shared = {
        "MAX_ITEM_LIST_LENGTH": args.context,
        "loss_type": "CE",  # full softmax over every item
        "learner": "adam",
        "learning_rate": 0.001,
        "weight_decay": 0.0,
        "train_batch_size": args.batch_size,
        "epochs": args.epochs,
        "train_neg_sample_args": None,
    }
    if args.model == "gru4rec":
        return {**shared, "embedding_size": 64, "hidden_size": 64, "num_layers": 1, "dropout_prob": 0.2}
    return {
        **shared,
        "n_layers": 2,
        "n_heads": 1,
        "hidden_size": 64,
        "inner_size": 64,  # ours: dim_feedforward = dims
        "hidden_dropout_prob": 0.2,
        "attn_dropout_prob": 0.2,
        "hidden_act": "relu",  # ours: torch's TransformerEncoderLayer default
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--split-dir", type=Path, required=True)
    parser.add_argument("--model", required=True, choices=["gru4rec", "sasrec"])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--work", type=Path, default=None, help="RecBole's folder (default: beside --out)")
    parser.add_argument("--top-k", type=int, default=100)
    parser.add_argument("--context", type=int, default=50)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    split_dir, out = args.split_dir.resolve(), args.out.resolve()
    work = (args.work or out.parent / f"recbole_{args.model}").resolve()

    train = pd.read_parquet(split_dir / "train.parquet", columns=["user_id", "item_id"])
    tasks = pd.read_parquet(split_dir / "tasks.parquet", columns=["target_id", "user_id", "context_items"])
    # The exported (user, ts, seq) order is the time order; its rank within the user is the
    # timestamp RecBole sorts by, so ties in ts keep our order.
    train = train.reset_index(drop=True)
    data = work / "data" / "fidelity"
    data.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(
        {
            "user_id:token": train["user_id"].astype(str),
            "item_id:token": train["item_id"].astype(str),
            "timestamp:float": train.groupby("user_id").cumcount().astype(float),
        }
    ).to_csv(data / "fidelity.inter", sep="\t", index=False)

    os.chdir(work)  # RecBole writes log/, log_tensorboard/ and saved/ in the working folder
    import torch
    from recbole import __version__ as recbole_version
    from recbole.config import Config
    from recbole.data import create_dataset
    from recbole.data.dataloader import TrainDataLoader
    from recbole.data.interaction import Interaction
    from recbole.model.sequential_recommender import GRU4Rec, SASRec
    from recbole.trainer import Trainer
    from recbole.utils import init_logger, init_seed

    settings = settings_of(args)
    model_class = GRU4Rec if args.model == "gru4rec" else SASRec
    config = Config(
        model=model_class,
        dataset="fidelity",
        config_dict={
            **settings,
            "data_path": str(work / "data"),
            "checkpoint_dir": str(work / "saved"),
            "load_col": {"inter": ["user_id", "item_id", "timestamp"]},
            "use_gpu": False,
            "seed": args.seed,
            "reproducibility": True,
            "show_progress": False,
            "state": "WARNING",
            # every training event trains: nothing is held out for validation or test
            "eval_args": {
                "split": {"RS": [1.0, 0.0, 0.0]},
                "group_by": "user",
                "order": "TO",
                "mode": "full",
            },
        },
    )
    init_seed(args.seed, True)
    init_logger(config)
    dataset = create_dataset(config)
    train_set = dataset.build()[0]
    init_seed(args.seed, True)
    loader = TrainDataLoader(config, train_set, None, shuffle=True)
    model = model_class(config, train_set).to(config["device"])
    trainer = Trainer(config, model)
    started = time.perf_counter()
    trainer.fit(loader, None, verbose=False, saved=False, show_progress=False)
    fit_seconds = time.perf_counter() - started
    steps = args.epochs * len(loader)

    started = time.perf_counter()
    model.eval()
    item_field = dataset.iid_field
    width = args.context
    lists: list[list[str]] = []
    with torch.no_grad():
        for low in range(0, len(tasks), 256):
            block = tasks.iloc[low : low + 256]
            sequences = np.zeros((len(block), width), np.int64)
            lengths = np.zeros(len(block), np.int64)
            for row, items in enumerate(block["context_items"]):
                kept = [str(i) for i in list(items)[-width:]]
                ids = dataset.token2id(item_field, kept) if kept else np.zeros(0, np.int64)
                sequences[row, : len(ids)] = ids  # RecBole's sequences are left-aligned
                lengths[row] = len(ids)
            interaction = Interaction(
                {
                    model.ITEM_SEQ: torch.from_numpy(sequences),
                    model.ITEM_SEQ_LEN: torch.from_numpy(np.maximum(lengths, 1)),
                }
            ).to(config["device"])
            scores = model.full_sort_predict(interaction)
            scores[:, 0] = float("-inf")  # the padding id
            top = torch.topk(scores, args.top_k, dim=1).indices.cpu().numpy()
            lists.extend([list(dataset.id2token(item_field, row)) for row in top])
    recommend_seconds = time.perf_counter() - started

    table = pa.table(
        {
            "target_id": pa.array(tasks["target_id"].astype(str).tolist(), pa.string()),
            "items": pa.array([[str(i) for i in items] for items in lists], pa.list_(pa.string())),
        }
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, out)
    info = {
        "library": "recbole",
        "version": recbole_version,
        "model": model_class.__name__,
        "settings": {**settings, "optimiser_steps": steps, "batches_per_epoch": len(loader)},
        "fit_seconds": fit_seconds,
        "recommend_seconds": recommend_seconds,
        "training_events": int(len(train)),
        "targets_listed": int(len(table)),
    }
    out.with_suffix(".json").write_text(json.dumps(info, indent=2) + "\n")
    print(json.dumps(info))


if __name__ == "__main__":
    main()
