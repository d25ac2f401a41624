"""Moved: the plug-in interface is ``intent_spark.plugin``. This name keeps a plug-in written
against it working, and says once where to import from instead."""

import warnings

from intent_spark.plugin import *  # noqa: F403
from intent_spark.plugin import __all__  # noqa: F401

warnings.warn(
    "models.interface moved to intent_spark.plugin: import the model kinds, Catalogue, "
    "TrainingData and train_steps from there",
    FutureWarning,  # shown by default, unlike a DeprecationWarning raised outside __main__
    stacklevel=2,
)
