"""Building a model and loading it back: the split's catalogue (and item texts) from the lake, the
class built from the models conf, a plug-in's calls turned into one-line errors, a model read
back from its MLflow artifacts."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from pyspark.sql import functions as F

from intent_spark.core import schema as S
from intent_spark.core.datasets import DatasetRef
from intent_spark.core.errors import IntentError
from intent_spark.lake.context import Lake
from intent_spark.lake.tables import source_table
from intent_spark.plugin import Catalogue, Model
from intent_spark.train.conf import ModelsConf
from intent_spark.train.plugin_errors import plugin_error
from intent_spark.train.readers import read_catalogue, split_files


def stamp_digest(stamp: str) -> str:
    return hashlib.sha256(stamp.encode()).hexdigest()[:16]


def item_texts(lake: Lake, dataset: DatasetRef, split: str) -> list[str]:
    """Each catalogue item's title and metadata text by index 0..N ("" where there is none).
    One row per item (items, not events), read only for models that ask for text."""
    catalogue = lake.read(S.CATALOGUE, dataset).where(F.col(S.SPLIT) == split)
    items = source_table(lake.spark, lake.root, S.ITEMS, dataset)
    text = F.concat_ws(". ", F.col(S.TITLE), F.col(S.CATEGORY), F.col(S.BRAND))
    rows = (
        catalogue.select(S.ITEM_ID, S.ITEM_INDEX)
        .join(items.select(S.ITEM_ID, text.alias("_text")), S.ITEM_ID, "left")
        .select(S.ITEM_INDEX, F.coalesce(F.col("_text"), F.lit("")).alias("_text"))
        .toPandas()
    )
    texts = [""] * (int(rows[S.ITEM_INDEX].max()) + 1 if len(rows) else 1)
    for index, value in zip(rows[S.ITEM_INDEX].tolist(), rows["_text"].tolist(), strict=True):
        texts[index] = value
    return texts


def split_catalogue(lake: Lake, dataset: DatasetRef, split: str, reader: str = "auto") -> Catalogue:
    """What a model gets of one split's catalogue; item texts are read when it asks."""
    arrays = read_catalogue(split_files(lake, S.CATALOGUE, dataset, split), reader)
    return replace(arrays, text_loader=lambda: item_texts(lake, dataset, split))


def build_model(cls: type[Model], catalogue: Catalogue, conf: ModelsConf, device) -> Model:
    """A fresh model for one split's catalogue, its initial weights from the conf's seed (not
    from whatever ran before in the process)."""
    import torch

    torch.manual_seed(conf.scoring(cls.name).seed)
    try:
        return cls(catalogue, conf.settings(cls.name), device)
    except IntentError:
        raise
    except Exception as exc:  # noqa: BLE001 - a plug-in's own fault, named
        raise plugin_error(f"model {cls.name!r}", "building it", exc, cls) from exc


def plugin_call(where: str, what: str, method: Callable[..., Any], *args: Any) -> Any:
    """A model's own method; its exceptions become one line naming the model, the split and
    the plug-in's file and line, with the plug-in's frames and the whole traceback kept."""
    try:
        return method(*args)
    except IntentError:
        raise
    except Exception as exc:  # noqa: BLE001 - a plug-in's fault, never a bare traceback
        owner = getattr(method, "__self__", None)
        raise plugin_error(where, what, exc, type(owner) if owner is not None else type(exc)) from exc


def load_model(cls: type[Model], folder: Path, catalogue: Catalogue, conf: ModelsConf, device) -> Model:
    """A trained model back from its MLflow artifact folder for one split."""
    meta = json.loads((folder / "meta.json").read_text())
    if meta["n_items"] != catalogue.n_items or meta["n_trained"] != catalogue.n_trained:
        raise IntentError(
            f"{cls.name}: trained on {meta['n_items']:,} items ({meta['n_trained']:,} trained) but the catalogue "
            f"has {catalogue.n_items:,} ({catalogue.n_trained:,}); train it again"
        )
    fitted = build_model(cls, catalogue, conf, device)
    plugin_call(
        f"{cls.name} {meta['split']}",
        f"load from its saved folder {folder.name}/",
        fitted.load,
        folder,
    )
    return fitted
