"""The public plug-in surface: everything a model, built in or from any package, imports.

A model subclasses one kind (``VectorsModel``, ``ScoresModel`` or ``HistoryModel``), reads its
split through ``Catalogue`` and ``TrainingData``, and may train with ``train_steps``. The
framework (``intent_spark.train``) owns the data path, the rank rule and the rest; the
reference models in ``models/`` are built on this module alone, as a third party's would be.
``docs/write-your-own-model.md`` walks through one.
"""

from intent_spark.plugin.interface import (
    HISTORY,
    KINDS,
    SCORES,
    VECTORS,
    Catalogue,
    HistoryModel,
    Model,
    NoSettings,
    ScoresModel,
    TrainingData,
    UserBatch,
    VectorsModel,
    settings_defaults,
)
from intent_spark.plugin.training import load_state, pick_device, train_steps

__all__ = [
    "HISTORY",
    "KINDS",
    "SCORES",
    "VECTORS",
    "Catalogue",
    "HistoryModel",
    "Model",
    "NoSettings",
    "ScoresModel",
    "TrainingData",
    "UserBatch",
    "VectorsModel",
    "load_state",
    "pick_device",
    "settings_defaults",
    "train_steps",
]
