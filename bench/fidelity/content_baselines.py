"""Plain baselines written with numpy on an exported split: a popularity ranking (training
counts, one list for everyone) and TF-IDF of the titles (the context's recency-weighted mean of
its items' TF-IDF vectors, cosine against every item). Titles are read from ``u.item`` itself
(pipe-separated, latin-1). Writes a submission for ``intent submit`` and a JSON beside it.
"""

from __future__ import annotations

import argparse
import json
import re
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq


def titles_from_u_item(path: Path) -> dict[str, str]:
    titles = {}
    for line in path.read_text(encoding="latin-1").splitlines():
        fields = line.split("|")
        if len(fields) > 1:
            titles[fields[0]] = fields[1]
    return titles


def tfidf(texts: list[str]) -> np.ndarray:
    """Unit rows of tf * (log((1 + n) / (1 + df)) + 1), scikit-learn's smooth idf."""
    tokens = [re.findall(r"(?u)\b\w\w+\b", text.lower()) for text in texts]
    vocabulary = {word: i for i, word in enumerate(sorted({w for t in tokens for w in t}))}
    counts = np.zeros((len(texts), len(vocabulary)), dtype=np.float64)
    for row, words in enumerate(tokens):
        for word in words:
            counts[row, vocabulary[word]] += 1
    df = (counts > 0).sum(axis=0)
    weights = counts * (np.log((1 + len(texts)) / (1 + df)) + 1)
    norms = np.linalg.norm(weights, axis=1, keepdims=True)
    return weights / np.where(norms > 0, norms, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--split-dir", type=Path, required=True)
    parser.add_argument("--model", required=True, choices=["popularity_counts", "tfidf_titles"])
    parser.add_argument("--items", type=Path, help="u.item (for tfidf_titles)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--top-k", type=int, default=100)
    parser.add_argument("--context", type=int, default=50)
    parser.add_argument("--recency", type=float, default=0.8)
    args = parser.parse_args()

    catalogue = pd.read_parquet(args.split_dir / "catalogue.parquet", columns=["item_id", "train_count"])
    tasks = pd.read_parquet(args.split_dir / "tasks.parquet", columns=["target_id", "context_items"])
    item_ids = catalogue["item_id"].to_numpy()
    started = time.perf_counter()
    if args.model == "popularity_counts":
        counts = catalogue["train_count"].to_numpy(np.float64)
        order = np.argsort(-counts, kind="stable")[: args.top_k]
        items = [list(item_ids[order])] * len(tasks)
        scores = [list(counts[order])] * len(tasks)
        settings = {"score": "training events per item"}
    else:
        titles = titles_from_u_item(args.items)
        vectors = tfidf([titles.get(i, "") for i in item_ids])
        index = {item: i for i, item in enumerate(item_ids)}
        items, scores = [], []
        for context in tasks["context_items"]:
            rows = [index[i] for i in list(context)[-args.context :] if i in index]
            weights = args.recency ** np.arange(len(rows) - 1, -1, -1, dtype=np.float64)
            query = weights @ vectors[rows] / max(weights.sum(), 1e-12)
            similarity = vectors @ query
            order = np.argsort(-similarity, kind="stable")[: args.top_k]
            items.append(list(item_ids[order]))
            scores.append(list(similarity[order]))
        settings = {
            "vectors": "TF-IDF of u.item titles (smooth idf, l2)",
            "context": args.context,
            "recency": args.recency,
        }
    seconds = time.perf_counter() - started
    table = pa.table(
        {
            "target_id": pa.array(tasks["target_id"].tolist(), pa.string()),
            "items": pa.array(items, pa.list_(pa.string())),
            "scores": pa.array(scores, pa.list_(pa.float64())),
        }
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, args.out)
    info = {
        "library": "numpy",
        "version": np.__version__,
        "model": args.model,
        "settings": settings,
        "fit_seconds": seconds,
        "targets_listed": int(len(table)),
    }
    args.out.with_suffix(".json").write_text(json.dumps(info, indent=2) + "\n")
    print(json.dumps(info))


if __name__ == "__main__":
    main()
